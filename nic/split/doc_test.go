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
	owned := func(c abidoc.Const) bool { return c.File == "proto.go" && !strings.HasPrefix(c.Name, "Err") }
	problems, err := abidoc.CheckDoc(".", "../../docs/split.md", owned)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}
