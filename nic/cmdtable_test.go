package nic

import (
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
	"github.com/emunic/emunic/rings"
)

// statusViolations collects, over every test of the package, the statuses
// a handler wrote back that its row of rings.Commands does not list.
var statusViolations struct {
	sync.Mutex
	seen map[string]bool
}

func TestMain(m *testing.M) {
	checkStatus = func(op rings.Opcode, st rings.Status) {
		if c, ok := rings.LookupCommand(op); ok && c.Statuses.Has(st) {
			return
		}
		statusViolations.Lock()
		defer statusViolations.Unlock()
		if statusViolations.seen == nil {
			statusViolations.seen = map[string]bool{}
		}
		statusViolations.seen[fmt.Sprintf("%v wrote back %v", op, st)] = true
	}
	code := m.Run()
	if v := sortedKeys(statusViolations.seen); len(v) > 0 {
		fmt.Fprintf(os.Stderr, "FAIL: handlers wrote back statuses rings.Commands does not list for them:\n\t%s\n",
			strings.Join(v, "\n\t"))
		code = 1
	}
	os.Exit(code)
}

func sortedKeys(m map[string]bool) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// TestCommandTable is the dispatch test: every opcode of docs/rings.md's
// opcode table has a handler, every handler's opcode is in that table, and
// the table's name, family, resources and statuses are rings.Commands'.
func TestCommandTable(t *testing.T) {
	for _, p := range commandTableProblems(t, "../docs/rings.md", cmdHandlers[:]) {
		t.Error(p)
	}
}

// TestCommandTableCatchesMissingHandler shows that the dispatch test
// fails on an opcode without a handler, and on a handler without a row.
func TestCommandTableCatchesMissingHandler(t *testing.T) {
	h := cmdHandlers
	h[rings.OpArmCQ] = nil
	if p := commandTableProblems(t, "../docs/rings.md", h[:]); len(p) == 0 {
		t.Error("ARM_CQ without a handler: no problem found")
	}
	more := append(cmdHandlers[:], (*Device).cmdNop)
	if p := commandTableProblems(t, "../docs/rings.md", more); len(p) == 0 {
		t.Errorf("a handler for opcode %#x, which has no row: no problem found", len(more)-1)
	}
}

// commandTableProblems compares the doc's opcode table, rings.Commands and
// handlers (indexed by opcode).
func commandTableProblems(t *testing.T, docPath string, handlers []cmdHandler) []string {
	t.Helper()
	doc, err := abidoc.ParseFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	var tb *abidoc.Table
	for _, x := range doc.Tables {
		if x.Heading == "Opcodes" && x.Has("value", "constant", "name", "family", "resources", "statuses") {
			if tb != nil {
				t.Fatalf("%s: two opcode tables (%d and %d)", docPath, tb.Line, x.Line)
			}
			tb = x
		}
	}
	if tb == nil {
		t.Fatalf("%s: no opcode table (heading Opcodes; columns Value, Constant, Name, Family, Resources, Statuses)", docPath)
	}

	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	hasHandler := func(op rings.Opcode) bool { return int(op) < len(handlers) && handlers[op] != nil }

	inDoc := map[rings.Opcode]bool{}
	for _, r := range tb.Rows {
		where := tb.Where(r)
		v, _ := tb.Cell(r, "value")
		n, err := abidoc.Num(v)
		if err != nil || n == 0 || n > 0xFFFF {
			bad("%s: opcode %q is not a u16 other than 0", where, v)
			continue
		}
		op := rings.Opcode(n)
		if inDoc[op] {
			bad("%s: opcode %#x documented twice", where, n)
		}
		inDoc[op] = true
		if !hasHandler(op) {
			bad("%s: opcode %#x has no handler in cmdHandlers", where, n)
		}
		c, ok := rings.LookupCommand(op)
		if !ok {
			bad("%s: opcode %#x is not in rings.Commands", where, n)
			continue
		}
		for _, col := range []struct{ name, want string }{
			{"name", c.Name}, {"family", c.Family.String()},
			{"resources", c.Resources.String()}, {"statuses", c.Statuses.String()},
		} {
			if got, _ := tb.Cell(r, col.name); got != col.want {
				bad("%s: %s: %s is %q, rings.Commands says %q", where, c.Name, col.name, got, col.want)
			}
		}
		if c.Statuses.Has(rings.StatusBadOpcode) {
			bad("%s: %s lists BAD_OPCODE, which only an opcode with no command gets", where, c.Name)
		}
	}
	for _, c := range rings.Commands {
		if !inDoc[c.Op] {
			bad("rings.Commands has %v (%#x), %s does not", c.Op, uint16(c.Op), docPath)
		}
	}
	for op := range handlers {
		if handlers[op] != nil && !inDoc[rings.Opcode(op)] {
			bad("cmdHandlers has opcode %#x, %s does not", op, docPath)
		}
	}
	return problems
}

// TestExecuteUnknownOpcode: an opcode with no handler, whether inside the
// handler table or beyond it, completes BAD_OPCODE and is counted.
func TestExecuteUnknownOpcode(t *testing.T) {
	d := &Device{}
	var e [rings.CommandEntrySize]byte
	for _, op := range []rings.Opcode{0, 0x03, rings.Opcode(len(cmdHandlers)), 0xFFFF} {
		(&rings.Command{Opcode: op}).Encode(e[:])
		if st, res := d.execute(e[:]); st != rings.StatusBadOpcode || res != 0 {
			t.Errorf("opcode %#x: %v, %d; want BAD_OPCODE, 0", uint16(op), st, res)
		}
	}
	if got := d.stats[rings.StatCmdBadOpcode].Load(); got != 4 {
		t.Errorf("cmd_bad_opcode = %d, want 4", got)
	}
}

// TestRandomCommandsKeepToTheirStatuses sends every command with random
// parameters, aimed at the places a handler checks (a few connection and
// CQ numbers, two of the connections delegated, a scratch region of host memory and addresses outside it,
// lengths around the blocks' sizes): each write-back must be a status its
// row of rings.Commands lists (TestMain fails the package otherwise), and
// the unit must go on executing commands.
func TestRandomCommandsKeepToTheirStatuses(t *testing.T) {
	h := newHostSide(t, 0)
	const scratchLen = 64 << 10
	scratch, err := h.mem.Alloc(scratchLen, 64)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(24, 3))
	pick := func(vs ...uint32) uint32 { return vs[r.IntN(len(vs))] }
	seen := map[rings.Opcode]map[rings.Status]bool{}
	for i := range 3000 {
		if i%40 == 0 {
			// Keep connections 1 and 2 delegated (when their index is
			// free), so the offload and RDMA commands meet one.
			h.offload(uint32(1+i/40%2), uint16(3000+i/40), 5000)
		}
		info := rings.Commands[r.IntN(len(rings.Commands))]
		c := rings.Command{
			Opcode: info.Op,
			Flags:  uint16(pick(0, 0, 1, uint32(r.IntN(1<<16)))),
			Conn:   pick(0, 1, 2, 255, 256, rings.NoConn, r.Uint32()),
			Len: pick(0, 1, 64, rings.ConnStateSize, rings.QPConfigSize, uint32(rings.StatBlockSize), 512, 4096,
				scratchLen, r.Uint32()),
			Arg0: pick(0, 1, 2, 3, 4, 16, 64, r.Uint32()),
			Arg1: pick(0, 1, 7, 0xFF, r.Uint32()),
			Arg3: uint64(pick(0, 0x1000, r.Uint32())),
		}
		switch r.IntN(4) {
		case 0:
			c.Addr = 0
		case 1:
			c.Addr = rings.Addr(r.Uint64())
		default: // inside the scratch region, 64-byte aligned (a CQ ring's base must be)
			c.Addr = scratch + rings.Addr(r.IntN(scratchLen/64))*64
		}
		got := h.command(c)
		if seen[c.Opcode] == nil {
			seen[c.Opcode] = map[rings.Status]bool{}
		}
		seen[c.Opcode][got.Status] = true
	}
	if got := h.command(rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}); got.Status != rings.StatusOK {
		t.Fatalf("NOP after the random commands: %v", got.Status)
	}
	for _, c := range rings.Commands {
		var st []string
		for s := range seen[c.Op] {
			st = append(st, s.String())
		}
		sort.Strings(st)
		t.Logf("%-14s wrote back %s", c.Name, strings.Join(st, ", "))
	}
}

// TestExecuteAllocatesNothing: the table lookup and the handler call
// allocate nothing per command.
func TestExecuteAllocatesNothing(t *testing.T) {
	d := &Device{}
	var nop, bad [rings.CommandEntrySize]byte
	(&rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}).Encode(nop[:])
	(&rings.Command{Opcode: 0x7F}).Encode(bad[:])
	if n := testing.AllocsPerRun(100, func() {
		d.execute(nop[:])
		d.execute(bad[:])
	}); n != 0 {
		t.Errorf("execute: %v allocations per run, want 0", n)
	}
}
