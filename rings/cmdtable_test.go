package rings

import (
	"fmt"
	"strings"
	"testing"
)

// TestCommandsTable: the command table is in opcode order, each opcode
// once, with a name, a family and OK among its statuses; its names are
// what Opcode.String says.
func TestCommandsTable(t *testing.T) {
	for i, c := range Commands {
		if i > 0 && c.Op <= Commands[i-1].Op {
			t.Errorf("Commands[%d] (%v) is not after %v", i, c.Op, Commands[i-1].Op)
		}
		if got, ok := LookupCommand(c.Op); !ok || got != &Commands[i] {
			t.Errorf("LookupCommand(%#x) does not find Commands[%d]", uint16(c.Op), i)
		}
		if c.Name == "" || c.Op.String() != c.Name {
			t.Errorf("opcode %#x: name %q, String() %q", uint16(c.Op), c.Name, c.Op.String())
		}
		if c.Family < CmdFamilyRing || c.Family > CmdFamilyRDMA {
			t.Errorf("%s: family %v", c.Name, c.Family)
		}
		if !c.Statuses.Has(StatusOK) || c.Statuses.Has(StatusBadOpcode) {
			t.Errorf("%s: statuses %v: want OK, never BAD_OPCODE", c.Name, c.Statuses)
		}
		if strings.Contains(c.Resources.String(), "0x") {
			t.Errorf("%s: resources %v: a bit with no name", c.Name, c.Resources)
		}
	}
	for _, op := range []Opcode{0, 0x03, 0x29, 0xFF, 0x100, 0xFFFF} {
		if _, ok := LookupCommand(op); ok {
			t.Errorf("LookupCommand(%#x) finds a command", uint16(op))
		}
	}
}

// TestCHeaderCommandTable builds c/cmd_check.c, which prints the header's
// EMUNIC_COMMANDS X-macro, and compares it with Commands row by row.
func TestCHeaderCommandTable(t *testing.T) {
	out := runC(t, "cmd_check")
	var want strings.Builder
	hex := func(v uint64) string { // C's %#x: no 0x before 0
		if v == 0 {
			return "0"
		}
		return fmt.Sprintf("%#x", v)
	}
	for _, c := range Commands {
		fmt.Fprintf(&want, "%s %s %s %s %s\n", c.Name, hex(uint64(c.Op)), hex(uint64(c.Family)),
			hex(uint64(c.Resources)), hex(uint64(c.Statuses)))
	}
	if string(out) != want.String() {
		t.Errorf("the C header's command table:\n%s\nrings.Commands:\n%s", out, want.String())
	}
}

// TestDocCommandNames: the Family and Resource cells of docs/rings.md's
// family and resource tables are the names String gives their constants
// (the opcode table's cells, which TestCommandTable in nic checks, are
// written in them).
func TestDocCommandNames(t *testing.T) {
	consts := loadConsts(t)
	tables, _ := parseDocs(t)
	checked := 0
	for _, tb := range tables {
		col := ""
		switch {
		case tb.Heading == "Command families" && tb.Has("constant", "family"):
			col = "family"
		case tb.Heading == "Command resources" && tb.Has("constant", "resource"):
			col = "resource"
		default:
			continue
		}
		for _, r := range tb.Rows {
			cc, _ := tb.Cell(r, "constant")
			name, err := ident(cc)
			if err != nil || name == "" {
				t.Errorf("%s: constant %q", tb.Where(r), cc)
				continue
			}
			v := consts[name].u64(t)
			want := CmdFamily(v).String()
			if col == "resource" {
				want = CmdResources(v).String()
			}
			if got, _ := tb.Cell(r, col); got != want {
				t.Errorf("%s: %s is %q, String() says %q", tb.Where(r), name, got, want)
			}
			checked++
		}
	}
	if want := 3 + len(cmdResourceNames); checked != want {
		t.Errorf("checked %d family and resource rows, want %d", checked, want)
	}
}
