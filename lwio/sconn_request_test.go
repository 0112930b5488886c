package lwio

import (
	"fmt"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// firstOnly is how docs/lwio.md's opcode table marks an opcode that is no
// request after AUTH, and so has an entry without a handler.
const firstOnly = "only a connection's first message"

// docOpcodes returns docs/lwio.md's opcode table: value → row.
func docOpcodes(t *testing.T) (*abidoc.Table, map[uint64]abidoc.Row) {
	t.Helper()
	d, err := abidoc.ParseFile("../docs/lwio.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range d.Tables {
		if tb.Heading != "Opcodes" || !tb.Has("value", "constant", "meaning") {
			continue
		}
		rows := map[uint64]abidoc.Row{}
		for _, r := range tb.Rows {
			v, _ := tb.Cell(r, "value")
			n, err := abidoc.Num(v)
			if err != nil {
				t.Fatalf("%s: %v", tb.Where(r), err)
			}
			rows[n] = r
		}
		return tb, rows
	}
	t.Fatal("docs/lwio.md has no Opcodes table")
	return nil, nil
}

// TestReqOpsMatchDoc holds reqOps to docs/lwio.md's opcode table both ways:
// every opcode the doc lists has an entry under its constant's name and a
// handler (AUTH, the first message only, excepted), and every entry is in
// the doc.
func TestReqOpsMatchDoc(t *testing.T) {
	tb, rows := docOpcodes(t)
	for _, p := range reqOpsProblems(tb, rows, reqOps[:]) {
		t.Error(p)
	}
}

// TestReqOpsCheckCatchesMissingHandler: the check fails for a listed opcode
// whose entry lost its handler, and for an entry the doc does not list.
func TestReqOpsCheckCatchesMissingHandler(t *testing.T) {
	tb, rows := docOpcodes(t)
	ops := reqOps
	ops[OpCancel].handle = nil
	if p := reqOpsProblems(tb, rows, ops[:]); len(p) != 1 || !strings.Contains(p[0], "OpCancel has no handler") {
		t.Errorf("CANCEL without a handler: problems %q", p)
	}
	more := append(reqOps[:len(reqOps):len(reqOps)], reqOp{op: 10, name: "OpUnlisted", handle: (*sconn).cancel})
	if p := reqOpsProblems(tb, rows, more); len(p) != 1 || !strings.Contains(p[0], "OpUnlisted is not in docs/lwio.md") {
		t.Errorf("entry not in the doc: problems %q", p)
	}
}

func reqOpsProblems(tb *abidoc.Table, rows map[uint64]abidoc.Row, ops []reqOp) []string {
	var p []string
	for v, r := range rows {
		c, _ := tb.Cell(r, "constant")
		name, err := abidoc.Ident(c)
		if err != nil {
			p = append(p, fmt.Sprintf("%s: %v", tb.Where(r), err))
			continue
		}
		if v >= uint64(len(ops)) || ops[v].name == "" {
			p = append(p, fmt.Sprintf("%s: %s (%#x) has no request entry", tb.Where(r), name, v))
			continue
		}
		e := &ops[v]
		meaning, _ := tb.Cell(r, "meaning")
		switch {
		case e.name != name || e.op != Opcode(v):
			p = append(p, fmt.Sprintf("%s: entry %#x is %s (opcode %#x), doc %s", tb.Where(r), v, e.name, e.op, name))
		case e.handle == nil && !strings.Contains(meaning, firstOnly):
			p = append(p, fmt.Sprintf("%s: %s has no handler (the doc does not say %q)", tb.Where(r), name, firstOnly))
		case e.handle != nil && strings.Contains(meaning, firstOnly):
			p = append(p, fmt.Sprintf("%s: %s has a handler but the doc says %q", tb.Where(r), name, firstOnly))
		}
	}
	for i := range ops {
		if e := &ops[i]; (e.name != "" || e.handle != nil) && rows[uint64(i)].Line == 0 {
			p = append(p, fmt.Sprintf("request entry %#x %s is not in docs/lwio.md's opcode table", i, e.name))
		}
	}
	return p
}
