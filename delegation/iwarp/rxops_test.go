package iwarp

import (
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// docOpcodeRow is one row of docs/iwarp.md's RDMAP opcode table.
type docOpcodeRow struct {
	op             Opcode
	name, ddp, pay string
}

// docOpcodes reads the RDMAP opcode table ("| opcode | message | DDP |
// payload |") from docs/iwarp.md.
func docOpcodes(t *testing.T) []docOpcodeRow {
	t.Helper()
	b, err := os.ReadFile("../../docs/iwarp.md")
	if err != nil {
		t.Fatal(err)
	}
	var rows []docOpcodeRow
	in := false
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, "| opcode | message | DDP | payload |") {
			in = true
			continue
		}
		if !in || strings.HasPrefix(l, "|---") {
			continue
		}
		if !strings.HasPrefix(l, "|") {
			break
		}
		f := strings.Split(strings.Trim(l, "|"), "|")
		if len(f) != 4 {
			t.Fatalf("docs/iwarp.md RDMAP table: %q has %d columns", l, len(f))
		}
		n, err := strconv.Atoi(strings.TrimSpace(f[0]))
		if err != nil || n > RDMAPMaskOpcode {
			t.Fatalf("docs/iwarp.md RDMAP table: bad opcode in %q", l)
		}
		rows = append(rows, docOpcodeRow{Opcode(n), strings.TrimSpace(f[1]), f[2], f[3]})
	}
	if len(rows) == 0 {
		t.Fatal("docs/iwarp.md has no RDMAP opcode table")
	}
	return rows
}

// The RFC a message comes from is noted in the doc's name, not the table's.
var rfcNote = regexp.MustCompile(` \(RFC \d+\)$`)

var (
	docQN    = regexp.MustCompile(`QN (\d+)`)
	docBytes = regexp.MustCompile(`^ *(\d+) bytes`)
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
	t := problemList{&problems}
	listed := map[Opcode]bool{}
	for _, r := range rows {
		listed[r.op] = true
		e := &ops[r.op]
		if e.name == "" {
			t.Errorf("opcode %d (%s) is in docs/iwarp.md but has no receive entry", r.op, r.name)
			continue
		}
		if e.op != r.op {
			t.Errorf("entry %d says opcode %d", r.op, e.op)
		}
		if name := rfcNote.ReplaceAllString(r.name, ""); e.name != name {
			t.Errorf("opcode %d: entry %q, doc %q", r.op, e.name, name)
		}
		tagged := strings.HasPrefix(strings.TrimSpace(r.ddp), "tagged")
		if e.tagged != tagged || e.tagged != r.op.Tagged() {
			t.Errorf("opcode %d (%s): entry tagged %v, doc %q", r.op, e.name, e.tagged, r.ddp)
		}
		if want := DDPHeaderLen(map[bool]uint8{true: DDPFlagTagged}[e.tagged]); e.hdrLen != want {
			t.Errorf("opcode %d (%s): header length %d, want %d", r.op, e.name, e.hdrLen, want)
		}
		if !tagged {
			m := docQN.FindStringSubmatch(r.ddp)
			if m == nil || m[1] != strconv.Itoa(int(e.qn)) || e.qn != r.op.QN() {
				t.Errorf("opcode %d (%s): entry QN %d, doc %q", r.op, e.name, e.qn, r.ddp)
			}
		}
		pay := 0
		if m := docBytes.FindStringSubmatch(r.pay); m != nil {
			pay, _ = strconv.Atoi(m[1])
		}
		if e.payload != pay {
			t.Errorf("opcode %d (%s): fixed payload %d, doc %q", r.op, e.name, e.payload, r.pay)
		}
		notExecuted := strings.Contains(r.pay, "encoded/decoded only")
		switch {
		case e.handle == nil && !notExecuted:
			t.Errorf("opcode %d (%s) has no handler (the doc does not say it is only encoded and decoded)", r.op, e.name)
		case e.handle != nil && notExecuted:
			t.Errorf("opcode %d (%s) has a handler but the doc says it is only encoded and decoded", r.op, e.name)
		}
	}
	for i := range ops {
		if e := &ops[i]; (e.name != "" || e.handle != nil) && !listed[Opcode(i)] {
			t.Errorf("receive entry %d (%s) is not in docs/iwarp.md's RDMAP table", i, e.name)
		}
	}
	return problems
}

// problemList collects what rxOpsProblems finds, so that a test can check
// the check itself.
type problemList struct{ p *[]string }

func (l problemList) Errorf(format string, args ...any) {
	*l.p = append(*l.p, fmt.Sprintf(format, args...))
}
