package split

import (
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestDocMatchesCode holds docs/split.md to this package both ways: every
// row that names a constant has its value (offset or value column), and
// every exported constant of proto.go has a row.
func TestDocMatchesCode(t *testing.T) {
	pkg, err := abidoc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	d, err := abidoc.ParseFile("../../docs/split.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range d.Problems {
		t.Error(p)
	}
	seen := map[string]bool{}
	for _, tb := range d.Tables {
		col := ""
		switch {
		case tb.Has("offset", "constant"):
			col = "offset"
		case tb.Has("value", "constant"):
			col = "value"
		default:
			continue
		}
		for _, r := range tb.Rows {
			cc, _ := tb.Cell(r, "constant")
			name, err := abidoc.Ident(cc)
			if err != nil {
				t.Errorf("%s: %v", tb.Where(r), err)
				continue
			}
			if name == "" {
				continue
			}
			c, ok := pkg.Consts[name]
			if !ok {
				t.Errorf("%s: no constant %s in nic/split", tb.Where(r), name)
				continue
			}
			seen[name] = true
			cell, _ := tb.Cell(r, col)
			if cell == "—" {
				continue // a variable-length field: the offset is the constant's
			}
			v, err := abidoc.Num(cell)
			got, _ := c.Uint64()
			if err != nil || v != got {
				t.Errorf("%s: %s is %s in the doc, %d in the code", tb.Where(r), name, cell, got)
			}
		}
	}
	for name, c := range pkg.Consts {
		if c.File == "proto.go" && !seen[name] && !strings.HasPrefix(name, "Err") {
			t.Errorf("constant %s (proto.go:%d) is not in docs/split.md", name, c.Line)
		}
	}
}
