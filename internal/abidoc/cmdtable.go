package abidoc

import (
	"bytes"
	"fmt"
	"strings"
)

// CommandTableSpec says where a document keeps its command table and the
// tables that name the values in its Family, Resources and Statuses cells.
type CommandTableSpec struct {
	Opcodes   string // heading of the opcode table (Value, Constant, Name, Family, Resources, Statuses)
	Families  string // heading of the family table (Constant, Family)
	Resources string // heading of the resource table (Constant, Resource)
	Statuses  string // heading of the status table (Constant, Name)
}

// writeCommandTable writes the command table as an X-macro, one
// X(name, opcode, family, resources, statuses) per opcode, so a C driver
// can build from it whatever it needs (names for its logs, the statuses a
// command may complete with) without a second copy of the table.
func writeCommandTable(b *bytes.Buffer, doc *Doc, spec *CommandTableSpec, cname func(string) string, P string) error {
	find := func(heading string, cols ...string) (*Table, error) {
		for _, t := range doc.Tables {
			if t.Heading == heading && t.Has(cols...) {
				return t, nil
			}
		}
		return nil, fmt.Errorf("abidoc: no table under %q with columns %v", heading, cols)
	}
	// names maps a table's name column to the C name of each row's constant.
	names := func(heading, col string) (map[string]string, error) {
		t, err := find(heading, "constant", col)
		if err != nil {
			return nil, err
		}
		m := map[string]string{}
		for _, r := range t.Rows {
			c, _ := t.Cell(r, "constant")
			id, err := Ident(c)
			if err != nil || id == "" {
				return nil, fmt.Errorf("%s: constant %q", t.Where(r), c)
			}
			n, _ := t.Cell(r, col)
			m[n] = cname(id)
		}
		return m, nil
	}
	ops, err := find(spec.Opcodes, "constant", "name", "family", "resources", "statuses")
	if err != nil {
		return err
	}
	fams, err := names(spec.Families, "family")
	if err != nil {
		return err
	}
	res, err := names(spec.Resources, "resource")
	if err != nil {
		return err
	}
	sts, err := names(spec.Statuses, "name")
	if err != nil {
		return err
	}
	// each turns a cell listing names joined by sep into C names joined
	// by join ("0" for none).
	each := func(where, cell, sep, none, join string, m map[string]string, wrap string) (string, error) {
		if cell == none {
			return "0", nil
		}
		var out []string
		for _, n := range strings.Split(cell, sep) {
			c, ok := m[strings.TrimSpace(n)]
			if !ok {
				return "", fmt.Errorf("%s: %q is not a known name", where, n)
			}
			out = append(out, fmt.Sprintf(wrap, c))
		}
		if len(out) == 1 {
			return out[0], nil
		}
		return "(" + strings.Join(out, join) + ")", nil
	}

	fmt.Fprintf(b, "\n/* The command table (docs/rings.md, %q; rings.Commands in Go): for\n", spec.Opcodes)
	b.WriteString(" * each opcode X(name, opcode, family, resources, statuses): its family, the\n" +
		" * resources it names (" + P + "CMD_RES_* bits) and every status it may write\n" +
		" * back (bit s for status s; " + P + "STATUS_BIT). An opcode not listed\n" +
		" * completes BAD_OPCODE. */\n")
	fmt.Fprintf(b, "#define %sSTATUS_BIT(s) (1u << (s))\n", P)
	fmt.Fprintf(b, "#define %sCOMMANDS(X) \\\n", P)
	for i, r := range ops.Rows {
		where := ops.Where(r)
		c, _ := ops.Cell(r, "constant")
		id, err := Ident(c)
		if err != nil || id == "" {
			return fmt.Errorf("%s: constant %q", where, c)
		}
		name, _ := ops.Cell(r, "name")
		famCell, _ := ops.Cell(r, "family")
		fam, ok := fams[famCell]
		if !ok {
			return fmt.Errorf("%s: family %q is not in the table under %q", where, famCell, spec.Families)
		}
		resCell, _ := ops.Cell(r, "resources")
		rs, err := each(where, resCell, "+", "NONE", " | ", res, "%s")
		if err != nil {
			return err
		}
		stCell, _ := ops.Cell(r, "statuses")
		ss, err := each(where, stCell, ",", "", " | ", sts, P+"STATUS_BIT(%s)")
		if err != nil {
			return err
		}
		end := " \\"
		if i == len(ops.Rows)-1 {
			end = ""
		}
		fmt.Fprintf(b, "\tX(%s, %s, %s, %s, %s)%s\n", name, cname(id), fam, rs, ss, end)
	}
	return nil
}
