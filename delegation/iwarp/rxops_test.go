package iwarp

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// docOpcodeRow is one row of docs/iwarp.md's RDMAP opcode table.
type docOpcodeRow struct {
	op                    Opcode
	where, name, ddp, pay string
}

// docOpcodes reads the RDMAP opcode table (opcode, message, DDP, payload)
// from docs/iwarp.md.
func docOpcodes(t *testing.T) []docOpcodeRow {
	t.Helper()
	d, err := abidoc.ParseFile("../../docs/iwarp.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, tb := range d.Tables {
		if !tb.Has("opcode", "message", "ddp", "payload") {
			continue
		}
		var rows []docOpcodeRow
		for _, r := range tb.Rows {
			cell := func(col string) string { c, _ := tb.Cell(r, col); return c }
			n, err := abidoc.Num(cell("opcode"))
			if err != nil || n > RDMAPMaskOpcode {
				t.Fatalf("%s: bad opcode %q", tb.Where(r), cell("opcode"))
			}
			rows = append(rows, docOpcodeRow{Opcode(n), tb.Where(r), cell("message"), cell("ddp"), cell("payload")})
		}
		return rows
	}
	t.Fatal("docs/iwarp.md has no RDMAP opcode table")
	return nil
}

// The RFC a message comes from is noted in the doc's name, not the table's.
var rfcNote = regexp.MustCompile(` \(RFC \d+\)$`)

var (
	docQN    = regexp.MustCompile(`QN (\d+)`)
	docBytes = regexp.MustCompile(`^(\d+) bytes`)
)

// TestRxOpsMatchDoc holds rxOps to docs/iwarp.md's RDMAP table both ways:
// every opcode the doc lists has an entry with its name, buffer model, queue
// and fixed payload, and a handler unless the doc says the engine only
// encodes and decodes it; every entry is in the doc.
func TestRxOpsMatchDoc(t *testing.T) {
	for _, p := range rxOpsProblems(docOpcodes(t), &rxOps) {
		t.Error(p)
	}
}

// TestRxOpsCheckCatchesMissingHandler: the check above fails for an opcode
// the doc lists whose entry lost its handler, and for an entry the doc does
// not list.
func TestRxOpsCheckCatchesMissingHandler(t *testing.T) {
	rows := docOpcodes(t)
	ops := rxOps
	ops[OpSendSE].handle = nil
	if p := rxOpsProblems(rows, &ops); len(p) != 1 || !strings.Contains(p[0], "opcode 5 (Send with SE) has no handler") {
		t.Errorf("Send with SE without a handler: problems %q", p)
	}
	ops = rxOps
	ops[12] = rxOp{op: 12, name: "Unlisted", handle: (*QP).rxWrite}
	if p := rxOpsProblems(rows, &ops); len(p) != 1 || !strings.Contains(p[0], "receive entry 12 (Unlisted) is not in docs/iwarp.md") {
		t.Errorf("entry not in the doc: problems %q", p)
	}
}

func rxOpsProblems(rows []docOpcodeRow, ops *[RDMAPMaskOpcode + 1]rxOp) []string {
	var problems []string
	add := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	listed := map[Opcode]bool{}
	for _, r := range rows {
		listed[r.op] = true
		e := &ops[r.op]
		if e.name == "" {
			add("%s: opcode %d (%s) has no receive entry", r.where, r.op, r.name)
			continue
		}
		if e.op != r.op {
			add("entry %d says opcode %d", r.op, e.op)
		}
		if name := rfcNote.ReplaceAllString(r.name, ""); e.name != name {
			add("opcode %d: entry %q, doc %q", r.op, e.name, name)
		}
		tagged := strings.HasPrefix(r.ddp, "tagged")
		if e.tagged != tagged || e.tagged != r.op.Tagged() {
			add("opcode %d (%s): entry tagged %v, doc %q", r.op, e.name, e.tagged, r.ddp)
		}
		if want := DDPHeaderLen(map[bool]uint8{true: DDPFlagTagged}[e.tagged]); e.hdrLen != want {
			add("opcode %d (%s): header length %d, want %d", r.op, e.name, e.hdrLen, want)
		}
		if !tagged {
			m := docQN.FindStringSubmatch(r.ddp)
			if m == nil || m[1] != strconv.Itoa(int(e.qn)) || e.qn != r.op.QN() {
				add("opcode %d (%s): entry QN %d, doc %q", r.op, e.name, e.qn, r.ddp)
			}
		}
		pay := 0
		if m := docBytes.FindStringSubmatch(r.pay); m != nil {
			pay, _ = strconv.Atoi(m[1])
		}
		if e.payload != pay {
			add("opcode %d (%s): fixed payload %d, doc %q", r.op, e.name, e.payload, r.pay)
		}
		notExecuted := strings.Contains(r.pay, "encoded/decoded only")
		switch {
		case e.handle == nil && !notExecuted:
			add("opcode %d (%s) has no handler (the doc does not say it is only encoded and decoded)", r.op, e.name)
		case e.handle != nil && notExecuted:
			add("opcode %d (%s) has a handler but the doc says it is only encoded and decoded", r.op, e.name)
		}
	}
	for i := range ops {
		if e := &ops[i]; (e.name != "" || e.handle != nil) && !listed[Opcode(i)] {
			add("receive entry %d (%s) is not in docs/iwarp.md's RDMAP table", i, e.name)
		}
	}
	return problems
}
