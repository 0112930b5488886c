package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/trace"
)

// The golden traces in tests/testdata/traces are replayed by every test
// run: a change to the device that alters anything it does in one of them
// fails TestGoldenTraces with the first divergence. To record them again on
// purpose (after a deliberate change of behaviour), run
//
//	go test ./cmd/emunic -run TestGoldenTraces -update-traces
//
// and commit the files with the change.
var updateTraces = flag.Bool("update-traces", os.Getenv("EMUNIC_UPDATE_TRACES") == "1", "record the golden traces in tests/testdata/traces again")

const goldenDir = "../../tests/testdata/traces"

// goldenScenario is one golden trace: a demo run (args) or a scenario of
// its own on the demo's two hosts (run).
type goldenScenario struct {
	name string
	args []string
	run  func(t *testing.T, lab *demoLab)
}

var goldenScenarios = []goldenScenario{
	{name: "legacy", args: []string{"--path", "netstack", "--bytes", "24KiB"}},
	{name: "offload", args: []string{"--path", "offload", "--bytes", "320KiB"}},
	{name: "loss", args: []string{"--path", "offload", "--bytes", "96KiB", "--loss", "8", "--reorder", "4", "--seed", "5"}},
	{name: "rdma", args: []string{"--rdma", "--bytes", "64KiB"}},
	// Every path over IPv6: neighbour discovery, and the delegated
	// connections' and QPs' IPv6 headers (version-2 state blocks).
	{name: "ipv6", args: []string{"--ipv6", "--path", "all", "--rdma", "--bytes", "48KiB", "--loss", "2", "--seed", "4"}},
	{name: "commands", run: goldenCommands},
	{name: "abort", run: goldenAbort},
	{name: "terminate", run: goldenTerminate},
	{name: "userbuf", run: goldenUserBuf},
}

func recordGolden(t *testing.T, sc goldenScenario, file string) {
	t.Helper()
	f, err := os.Create(file)
	if err != nil {
		t.Fatal(err)
	}
	args := sc.args
	if args == nil {
		args = []string{"(scenario " + sc.name + ")"}
	}
	w, err := trace.NewWriter(f, trace.Header{Args: args, Clock: "monotonic"})
	if err != nil {
		t.Fatal(err)
	}
	if sc.args != nil {
		cfg, err := parseDemoFlags(sc.args, io.Discard)
		if err != nil {
			t.Fatal(err)
		}
		cfg.trace = w
		if err := runDemo(context.Background(), cfg, io.Discard); err != nil {
			t.Fatalf("%s: %v", sc.name, err)
		}
	} else {
		cfg := defaultDemoConfig()
		cfg.trace = w
		lab, err := newDemoLab(cfg)
		if err != nil {
			t.Fatal(err)
		}
		sc.run(t, lab)
		lab.Close()
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestGoldenTraces replays every golden trace (recording them first with
// -update-traces).
func TestGoldenTraces(t *testing.T) {
	for _, sc := range goldenScenarios {
		t.Run(sc.name, func(t *testing.T) {
			file := filepath.Join(goldenDir, sc.name+".trace")
			if *updateTraces {
				recordGolden(t, sc, file)
			}
			f, err := os.Open(file)
			if err != nil {
				t.Fatalf("%v (record the golden traces with -update-traces)", err)
			}
			defer f.Close()
			res, err := trace.Replay(f)
			if err != nil {
				t.Fatal(err)
			}
			if d := res.Divergence; d != nil {
				t.Fatalf("golden trace %s no longer replays: %v\n%s\n(if the change is meant, record again with -update-traces)", file, d, describe(d))
			}
			t.Logf("%s: %d steps, %d inputs, %d outputs", sc.name, res.Steps, res.Inputs, res.Outputs)
		})
	}
}

func describe(d *trace.Divergence) string {
	p := trace.NewPrinter()
	var b strings.Builder
	if d.Want != nil {
		fmt.Fprintf(&b, "  trace:  %s\n", strings.TrimSpace(p.Format(d.Want)))
	}
	if d.Got != nil {
		fmt.Fprintf(&b, "  device: %s\n", strings.TrimSpace(p.Format(d.Got)))
	}
	return b.String()
}

// TestGoldenCoverage holds the golden traces to what they are for: between
// them, every command opcode completes, and every one that can fail fails
// at least once, and every kind of notification is posted.
func TestGoldenCoverage(t *testing.T) {
	type opSeen struct{ ok, failed bool }
	ops := map[rings.Opcode]*opSeen{}
	var ntf rings.NotifyFlags
	var terminates, retransmits, qpBells, cqArms int
	for _, sc := range goldenScenarios {
		recs := readTrace(t, filepath.Join(goldenDir, sc.name+".trace"))
		p := trace.NewPrinter()
		for i := range recs {
			r := &recs[i]
			p.Learn(r)
			switch {
			case r.Kind == trace.KindComplete && r.Ring == 0:
				var c rings.Command
				c.Decode(rings.CommandEntry(r.Data))
				s := ops[c.Opcode]
				if s == nil {
					s = &opSeen{}
					ops[c.Opcode] = s
				}
				if c.Status == rings.StatusOK {
					s.ok = true
				} else {
					s.failed = true
				}
			case r.Kind == trace.KindStore && r.Ring == 1 && len(r.Data) > 0:
				for off := 0; off+rings.NotificationEntrySize <= len(r.Data); off += rings.NotificationEntrySize {
					var n rings.Notification
					n.Decode(rings.NotificationEntry(r.Data[off : off+rings.NotificationEntrySize]))
					ntf |= n.Flags
				}
			case r.Kind == trace.KindBell && r.Flags&trace.BellCQ != 0:
				cqArms++
			case r.Kind == trace.KindBell:
				qpBells++
			case r.Kind == trace.KindFrameOut && strings.Contains(trace.FormatFrame(r.Data), "TCP"):
				if isTerminate(r.Data) {
					terminates++
				}
			}
		}
		if sc.name == "loss" {
			retransmits = countRetransmits(recs)
		}
	}
	var names []string
	for op, s := range ops {
		names = append(names, fmt.Sprintf("%v(ok=%v failed=%v)", op, s.ok, s.failed))
	}
	sort.Strings(names)
	t.Logf("commands: %s", strings.Join(names, " "))
	t.Logf("notifications: %v; Terminate frames: %d; retransmitted segments in loss: %d", ntf, terminates, retransmits)
	for _, op := range []rings.Opcode{rings.OpNop, rings.OpStats, rings.OpOffload, rings.OpPostBuffers, rings.OpSetThresholds,
		rings.OpUpdate, rings.OpClose, rings.OpAbort, rings.OpRelease, rings.OpRxInject, rings.OpRegMR, rings.OpDeregMR,
		rings.OpCreateQP, rings.OpModifyQP, rings.OpDestroyQP, rings.OpCreateCQ, rings.OpDestroyCQ, rings.OpArmCQ} {
		s := ops[op]
		if s == nil || !s.failed && op != rings.OpNop {
			t.Errorf("no golden trace has %v fail", op)
		}
	}
	for _, op := range []rings.Opcode{rings.OpNop, rings.OpStats, rings.OpOffload, rings.OpPostBuffers, rings.OpUpdate,
		rings.OpRegMR, rings.OpDeregMR, rings.OpCreateQP, rings.OpModifyQP, rings.OpCreateCQ, rings.OpArmCQ} {
		if s := ops[op]; s == nil || !s.ok {
			t.Errorf("no golden trace has %v succeed", op)
		}
	}
	for _, f := range []rings.NotifyFlags{rings.NtfAckThreshold, rings.NtfDupAck, rings.NtfLegacyUpload, rings.NtfFin,
		rings.NtfRst, rings.NtfUserBufDone, rings.NtfClosed, rings.NtfQPEvent, rings.NtfCQEvent} {
		if ntf&f == 0 {
			t.Errorf("no golden trace posts %v", f)
		}
	}
	if terminates == 0 {
		t.Error("no golden trace sends a Terminate")
	}
	if qpBells == 0 || cqArms == 0 {
		t.Errorf("the golden traces take %d QP doorbell and %d CQ arm registers: both must be replayed", qpBells, cqArms)
	}
	if retransmits == 0 {
		t.Error("the loss trace retransmits nothing")
	}
}

// countRetransmits counts data segments a device sent twice (same 4-tuple
// and sequence number).
func countRetransmits(recs []trace.Record) int {
	seen := map[string]bool{}
	n := 0
	for _, r := range recs {
		if r.Kind != trace.KindFrameOut {
			continue
		}
		s := trace.FormatFrame(r.Data)
		if !strings.Contains(s, "TCP") || strings.HasSuffix(s, "len=0") {
			continue
		}
		seq := strings.Index(s, " seq=")
		// The addresses end where the flags start ("... → 10.0.0.2:5002
		// [ACK] seq=", "... → [fd00::2]:5002 [ACK] seq=").
		key := fmt.Sprintf("%d %s %s", r.Dev, s[:strings.LastIndex(s[:seq], " [")], s[seq:strings.Index(s, " ack=")])
		if seen[key] {
			n++
		}
		seen[key] = true
	}
	return n
}

// isTerminate reports whether a TCP frame carries an iWARP Terminate: an
// MPA FPDU whose DDP/RDMAP header says RDMAP opcode 7 (RFC 5040 §4.3;
// untagged, queue 2). The frame is IPv4 or IPv6 (no extension headers:
// the demo's hosts send none).
func isTerminate(f []byte) bool {
	const eth = 14
	ip := 20
	if len(f) >= eth && f[12] == 0x86 && f[13] == 0xdd {
		ip = 40
	}
	if len(f) < eth+ip+20 {
		return false
	}
	tcpHdr := int(f[eth+ip+12]>>4) * 4
	if len(f) < eth+ip+tcpHdr {
		return false
	}
	p := f[eth+ip+tcpHdr:]
	// MPA: ULPDU length (2), then DDP control (1), RDMAP control (1).
	return len(p) >= 4 && p[2]&0x80 == 0 && p[3]&0x0f == 7
}

// goldenCommands submits every command with parameters the device must
// refuse, and the harmless ones with good ones: each refusal is a status
// written back, and the device carries on.
func goldenCommands(t *testing.T, lab *demoLab) {
	d := lab.a.Driver
	scratch, err := lab.a.Mem.Alloc(4096, 64)
	if err != nil {
		t.Fatal(err)
	}
	const bad = rings.Addr(8) // outside host memory
	const conn = 7            // an index no connection holds
	cmds := []rings.Command{
		{Opcode: rings.OpNop},
		{Opcode: rings.OpStats, Addr: scratch, Len: 256},
		{Opcode: rings.OpStats, Addr: bad, Len: 256},
		{Opcode: 0x7f},
		{Opcode: rings.OpOffload, Conn: conn, Addr: bad, Len: rings.ConnStateSize},
		{Opcode: rings.OpOffload, Conn: 1 << 30, Addr: scratch, Len: rings.ConnStateSize},
		{Opcode: rings.OpOffload, Conn: conn, Addr: scratch, Len: rings.ConnStateSize}, // a zeroed state block
		{Opcode: rings.OpPostBuffers, Conn: conn, Addr: scratch, Arg0: 1},
		{Opcode: rings.OpSetThresholds, Conn: conn, Arg0: 1000, Arg1: 1000},
		{Opcode: rings.OpUpdate, Conn: conn},
		{Opcode: rings.OpClose, Conn: conn},
		{Opcode: rings.OpAbort, Conn: conn},
		{Opcode: rings.OpRelease, Conn: conn},
		{Opcode: rings.OpRxInject, Conn: conn, Addr: scratch, Len: 60},
		{Opcode: rings.OpRegMR, Addr: bad, Len: 4096, Arg0: 1},
		{Opcode: rings.OpDeregMR, Arg0: 0x12345678},
		{Opcode: rings.OpCreateQP, Conn: conn, Addr: bad},
		{Opcode: rings.OpModifyQP, Conn: conn},
		{Opcode: rings.OpDestroyQP, Conn: conn},
		{Opcode: rings.OpCreateCQ, Conn: 1000, Addr: scratch, Arg0: 64},
		{Opcode: rings.OpDestroyCQ, Conn: 200},
		{Opcode: rings.OpArmCQ, Conn: 200},
		{Opcode: rings.OpNop},
	}
	for i, c := range cmds {
		res, err := d.Command(c, 5*time.Second)
		if err != nil {
			t.Fatalf("command %d (%v): %v", i, c.Opcode, err)
		}
		ok := res.Status == rings.StatusOK
		if want := i == 0 || i == 1 || i == len(cmds)-1; ok != want {
			t.Errorf("command %d (%v): status %v", i, c.Opcode, res.Status)
		}
	}
}

// goldenDelegated opens a delegated connection from A to B's port: A's
// end and B's (closed when the test ends).
func goldenDelegated(t *testing.T, lab *demoLab, port uint16) (*tcpstack.DelegatedConn, net.Conn) {
	t.Helper()
	l, err := lab.b.ListenOffload(port)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	acc := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		acc <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lab.a.DialOffload(ctx, lab.toB(port))
	if err != nil {
		t.Fatal(err)
	}
	s := <-acc
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { s.Close() })
	return c, s
}

// goldenAbort opens a delegated connection, moves a little data, and
// aborts it from A: B's engine gets the RST.
func goldenAbort(t *testing.T, lab *demoLab) {
	c, s := goldenDelegated(t, lab, 7009)
	msg := []byte("before the reset")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatal(err)
	}
	if err := c.Abort(); err != nil {
		t.Fatal(err)
	}
	s.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := s.Read(got); err == nil {
		t.Fatal("B read data after A's reset")
	}
}

// goldenUserBuf streams to a delegated connection in two parts: the first
// (the connection's first bytes) arrives in legacy buffers, and reading
// it makes B's host give the connection receive buffers of its own
// (POST_BUFFERS); the second fills them (USER_BUF_DONE). (In the demo's
// runs the whole stream can arrive before B's host has handled the first
// upload, and then no user buffer is ever filled.) Before them, Nagle goes
// on and off again: two UPDATEs that succeed whatever the timing.
func goldenUserBuf(t *testing.T, lab *demoLab) {
	c, s := goldenDelegated(t, lab, 7011)
	defer c.Close()
	// An UPDATE that always succeeds (Nagle on, then off again): the
	// window credits a reader sends as UPDATEs depend on how much the
	// device uploaded to legacy buffers before the reader came, which is
	// timing, so a recording could otherwise hold no successful UPDATE.
	for _, noDelay := range []bool{false, true} {
		if err := c.SetNoDelay(noDelay); err != nil {
			t.Fatal(err)
		}
	}
	for i, n := range []int{96 << 10, 192 << 10} {
		msg := bytes.Repeat([]byte{byte('a' + i)}, n)
		errc := make(chan error, 1)
		go func() { _, err := c.Write(msg); errc <- err }()
		got := make([]byte, n)
		s.SetReadDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.ReadFull(s, got); err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatalf("part %d altered", i)
		}
	}
}

// goldenTerminate connects a QP pair and RDMA-writes to an STag B never
// registered: B's QP answers with a Terminate, and A's write completes in
// error.
func goldenTerminate(t *testing.T, lab *demoLab) {
	a := hostrig.NewNode(t, lab.a, hostrig.NodeConfig{})
	b := hostrig.NewNode(t, lab.b, hostrig.NodeConfig{})
	hostrig.Connect(t, a, b, 7010)
	// The write completes at A as soon as TCP has it (iWARP's rule); B's
	// Terminate then moves A's QP to error, which flushes what A posts.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wc := make([]rings.Completion, 8)
	for id := uint64(1); ; id++ {
		wr := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: id, RKey: 0x00dead01, RemoteAddr: 0x1000, NumSGE: 1}
		wr.SGL[0] = a.LocalMR.SGE(0, 64)
		if err := a.QP.PostSend(&wr); err != nil {
			return // the QP is in error: it refuses work
		}
		n, err := a.CQ.PollWait(ctx, wc, false)
		if err != nil {
			t.Fatalf("A's QP never failed after writing to an STag B does not have: %v (state %v, B's %v)", err, a.QP.State(), b.QP.State())
		}
		for _, c := range wc[:n] {
			if c.Status != rings.WCSuccess {
				return
			}
		}
	}
}
