package verbs

import (
	"bytes"
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// ---- a fake device: the host logic without the nic ------------------------

// fakeDevice executes RDMA commands as bookkeeping only: it records every
// command, hands out STags, and can be told to refuse an opcode.
type fakeDevice struct {
	mu     sync.Mutex
	cmds   []rings.Command
	stag   uint32
	refuse map[rings.Opcode]rings.Status
}

func (d *fakeDevice) exec(c rings.Command, _ func(rings.Command, error)) (rings.Command, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.cmds = append(d.cmds, c)
	if st, ok := d.refuse[c.Opcode]; ok {
		c.Status = st
		return c, nil
	}
	c.Status, c.Result = rings.StatusOK, 0
	if c.Opcode == rings.OpRegMR {
		d.stag += 0x100
		c.Result = uint64(d.stag | 0x42)
	}
	return c, nil
}

func (d *fakeDevice) commands(op rings.Opcode) []rings.Command {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []rings.Command
	for _, c := range d.cmds {
		if c.Opcode == op {
			out = append(out, c)
		}
	}
	return out
}

// fakeHost is the host side the provider needs, without a driver:
// commands go to exec, nothing can be submitted without waiting (so late
// clean-ups and injections are dropped), and the counters count nothing.
type fakeHost struct {
	mem  *rings.Arena
	exec func(rings.Command, func(rings.Command, error)) (rings.Command, error)
	// early is what TakeStream reports; taken the connections it took.
	early bool
	taken []*tcpstack.DelegatedConn
}

func (f *fakeHost) Mem() *rings.Arena { return f.mem }
func (f *fakeHost) Command(c rings.Command, late func(rings.Command, error)) (rings.Command, error) {
	return f.exec(c, late)
}
func (f *fakeHost) SubmitAsync([]tcpstack.HostCommand, func([]rings.Command, error)) error {
	return errors.New("fake host: no asynchronous commands")
}
func (f *fakeHost) SetRxHold(func([]byte) bool) {}
func (f *fakeHost) CountCopy(int)               {}
func (f *fakeHost) Quarantine(int64)            {}
func (f *fakeHost) TakeStream(c *tcpstack.DelegatedConn) bool {
	f.taken = append(f.taken, c)
	return f.early
}
func (f *fakeHost) Release(*tcpstack.DelegatedConn) {}

func fakeVerbs(t *testing.T) (*Provider, *fakeDevice) {
	t.Helper()
	mem, err := rings.NewArena(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	d := &fakeDevice{refuse: map[rings.Opcode]rings.Status{}}
	v := newProvider(nil, &fakeHost{mem: mem, exec: d.exec})
	return v, d
}

// fakeQP makes a QP on v as createQP would, without a connection.
func fakeQP(t *testing.T, v *Provider, attr QPAttr, qpn uint32, initiator bool) *QP {
	t.Helper()
	if err := attr.check(v); err != nil {
		t.Fatal(err)
	}
	qp, err := v.newQP(&attr, qpn, initiator)
	if err != nil {
		t.Fatal(err)
	}
	if err := qp.register(); err != nil {
		t.Fatal(err)
	}
	return qp
}

func TestVerbsCreateCQAndQPConfig(t *testing.T) {
	v, d := fakeVerbs(t)
	scq, err := v.createCQ(100)
	if err != nil {
		t.Fatal(err)
	}
	rcq, err := v.createCQ(1)
	if err != nil {
		t.Fatal(err)
	}
	cc := d.commands(rings.OpCreateCQ)
	if len(cc) != 2 || cc[0].Conn != scq.Num() || cc[0].Addr != scq.layout.Base || cc[0].Arg0 != 128 ||
		cc[1].Conn != rcq.Num() || cc[1].Arg0 != 1 || scq.Num() == rcq.Num() {
		t.Fatalf("CREATE_CQ commands %+v", cc)
	}
	if scq.Entries() != 128 || scq.layout.EntrySize != rings.CQEntrySize {
		t.Fatalf("CQ layout %+v", scq.layout)
	}
	priv := []byte("hello, responder")
	attr := QPAttr{PD: 7, SendCQ: scq, RecvCQ: rcq, SQDepth: 10, IRD: 4, ORD: 8, PrivateData: priv}
	qp := fakeQP(t, v, attr, 5, true)
	blk, _ := v.mem.Map(qp.cfgBase, rings.QPConfigSize)
	var qc rings.QPConfig
	if err := qc.Decode(blk); err != nil {
		t.Fatal(err)
	}
	want := rings.QPConfig{PD: 7, Flags: rings.QPFlagInitiator, IRD: 4, ORD: 8, SendCQ: scq.Num(), RecvCQ: rcq.Num(),
		SQBase: qp.sqL.Base, SQCount: 16, RQBase: qp.rqL.Base, RQCount: DefaultQueueDepth,
		PrivAddr: qp.cfgBase + qpPrivOff, PrivLen: uint32(len(priv)), PeerPrivAddr: qp.cfgBase + qpPeerPrivOff}
	if qc != want {
		t.Fatalf("QP config\n got %+v\nwant %+v", qc, want)
	}
	if got, _ := v.mem.Map(qc.PrivAddr, int(qc.PrivLen)); !bytes.Equal(got, priv) {
		t.Fatalf("private data %q", got)
	}
	// The MPA choices are QP flags; a responder's peer-to-peer and
	// revision are the initiator's to choose, so they are not set.
	for _, c := range []struct {
		attr      QPAttr
		initiator bool
		want      uint32
	}{
		{QPAttr{SendCQ: scq, RecvCQ: rcq, NoCRC: true, PeerToPeer: true}, true, rings.QPFlagInitiator | rings.QPFlagNoCRC | rings.QPFlagPeerToPeer},
		{QPAttr{SendCQ: scq, RecvCQ: rcq, MPARev1: true}, true, rings.QPFlagInitiator | rings.QPFlagMPARev1},
		{QPAttr{SendCQ: scq, RecvCQ: rcq, NoCRC: true, PeerToPeer: true, MPARev1: false}, false, rings.QPFlagNoCRC},
	} {
		qp.initiator = c.initiator
		if got := qp.config(&c.attr).Flags; got != c.want {
			t.Errorf("initiator %v %+v: flags %#x, want %#x", c.initiator, c.attr, got, c.want)
		}
	}
	qp.initiator = true
	for _, l := range []rings.Layout{qp.sqL, qp.rqL} {
		if err := l.Validate(); err != nil {
			t.Fatal(err)
		}
	}
	if qp.sqL.EntrySize != rings.SQEntrySize || qp.rqL.EntrySize != rings.RQEntrySize {
		t.Fatal("entry sizes")
	}
	// A responder has no initiator flag and no private data pointer
	// without private data.
	resp := fakeQP(t, v, QPAttr{PD: 7, SendCQ: scq, RecvCQ: scq}, 6, false)
	blk, _ = v.mem.Map(resp.cfgBase, rings.QPConfigSize)
	_ = qc.Decode(blk)
	if qc.Flags != 0 || qc.PrivAddr != 0 || qc.PrivLen != 0 || qc.SendCQ != scq.Num() || qc.RecvCQ != scq.Num() {
		t.Fatalf("responder config %+v", qc)
	}
	// A CQ in use is not destroyed.
	if err := scq.Destroy(); err == nil {
		t.Fatal("DESTROY_CQ of a CQ in use")
	}
	// Destroy: DESTROY_QP, rings freed, posts refused.
	inUse := v.mem.InUse()
	if err := qp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := resp.Destroy(); err != nil {
		t.Fatal(err)
	}
	if dq := d.commands(rings.OpDestroyQP); len(dq) != 2 || dq[0].Conn != 5 || dq[1].Conn != 6 {
		t.Fatalf("DESTROY_QP commands %+v", dq)
	}
	if v.mem.InUse() >= inUse {
		t.Error("QP memory not freed")
	}
	if err := qp.PostSend(&rings.SendWR{}); !errors.Is(err, ErrQPDestroyed) {
		t.Errorf("post to a destroyed QP: %v", err)
	}
	if err := qp.PostRecv(&rings.RecvWR{}); !errors.Is(err, ErrQPDestroyed) {
		t.Errorf("post recv to a destroyed QP: %v", err)
	}
	if err := qp.Destroy(); err != nil {
		t.Errorf("second Destroy: %v", err)
	}
	if err := scq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := rcq.Destroy(); err != nil {
		t.Fatal(err)
	}
	if err := scq.ReqNotify(false); !errors.Is(err, ErrCQDestroyed) {
		t.Errorf("arm of a destroyed CQ: %v", err)
	}
	if err := scq.Wait(context.Background()); !errors.Is(err, ErrCQDestroyed) {
		t.Errorf("wait on a destroyed CQ: %v", err)
	}
	if n := scq.Poll(make([]rings.Completion, 4)); n != 0 {
		t.Errorf("poll of a destroyed CQ: %d", n)
	}
}

func TestVerbsBadAttrAndCQSizes(t *testing.T) {
	v, d := fakeVerbs(t)
	for _, n := range []int{0, -1, MaxQueueDepth + 1} {
		if _, err := v.createCQ(n); err == nil {
			t.Errorf("CQ of %d entries accepted", n)
		}
	}
	cq, err := v.createCQ(8)
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := fakeVerbs(t)
	other, _ := v2.createCQ(8)
	for name, a := range map[string]QPAttr{
		"no CQ":        {SendCQ: cq},
		"foreign CQ":   {SendCQ: cq, RecvCQ: other},
		"SQ depth":     {SendCQ: cq, RecvCQ: cq, SQDepth: -1},
		"RQ depth":     {SendCQ: cq, RecvCQ: cq, RQDepth: MaxQueueDepth + 1},
		"IRD":          {SendCQ: cq, RecvCQ: cq, IRD: 1 << 16},
		"ORD":          {SendCQ: cq, RecvCQ: cq, ORD: -1},
		"private data": {SendCQ: cq, RecvCQ: cq, PrivateData: make([]byte, MaxPrivateData+1)},
		"timeout":      {SendCQ: cq, RecvCQ: cq, ConnectTimeout: -1},
		"IRD 16384":    {SendCQ: cq, RecvCQ: cq, IRD: MaxIRDORD + 1},
		"p2p at rev 1": {SendCQ: cq, RecvCQ: cq, PeerToPeer: true, MPARev1: true},
		"RTR delay":    {SendCQ: cq, RecvCQ: cq, RTRDelay: -1},
	} {
		if err := a.check(v); err == nil {
			t.Errorf("%s: bad attributes accepted", name)
		}
	}
	// CQ numbers run out at the device's table size, with a clear error.
	var cqs []*CQ
	for {
		c, err := v.createCQ(1)
		if err != nil {
			if len(cqs) != maxCQNum-1 {
				t.Fatalf("CQ %d: %v", len(cqs), err)
			}
			break
		}
		cqs = append(cqs, c)
	}
	// A refused CREATE_CQ gives its number back.
	d.refuse[rings.OpCreateCQ] = rings.StatusNoResources
	_ = cqs[0].Destroy()
	if _, err := v.createCQ(1); err == nil || !errors.As(err, new(*CommandError)) {
		t.Fatalf("refused CREATE_CQ: %v", err)
	}
	delete(d.refuse, rings.OpCreateCQ)
	if _, err := v.createCQ(1); err != nil {
		t.Fatalf("CQ number not given back: %v", err)
	}
	// BAD_OPCODE is ErrRDMANotSupported.
	d.refuse[rings.OpCreateCQ] = rings.StatusBadOpcode
	_ = cq.Destroy()
	if _, err := v.createCQ(1); !errors.Is(err, ErrRDMANotSupported) {
		t.Fatalf("BAD_OPCODE: %v", err)
	}
}

func TestVerbsRegMRCommand(t *testing.T) {
	v, d := fakeVerbs(t)
	buf, err := v.allocBuffer(4096)
	if err != nil {
		t.Fatal(err)
	}
	mr, err := v.regMR(3, buf.Addr, 4096, AccessLocalWrite|AccessRemoteWrite)
	if err != nil {
		t.Fatal(err)
	}
	c := d.commands(rings.OpRegMR)[0]
	if c.Addr != buf.Addr || c.Len != 4096 || c.Arg0 != 3 || c.Arg1 != AccessLocalWrite|AccessRemoteWrite || c.Arg3 != uint64(buf.Addr) {
		t.Fatalf("REG_MR %+v", c)
	}
	if mr.LKey != mr.RKey || mr.LKey&0xff != 0x42 || mr.VA != uint64(buf.Addr) || mr.Addr != buf.Addr || mr.Len != 4096 || mr.PD != 3 {
		t.Fatalf("MR %+v", mr)
	}
	if s := mr.SGE(16, 100); s != (rings.SGE{Addr: uint64(buf.Addr) + 16, Length: 100, LKey: mr.LKey}) {
		t.Fatalf("SGE %+v", s)
	}
	zb, err := v.regMR(3, buf.Addr+64, 64, AccessZeroBased|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	if c := d.commands(rings.OpRegMR)[1]; c.Arg3 != 0 || zb.VA != 0 || zb.TO(8) != 8 {
		t.Fatalf("zero-based REG_MR %+v, MR %+v", c, zb)
	}
	for name, f := range map[string]func() error{
		"zero length":      func() error { _, err := v.regMR(3, buf.Addr, 0, 0); return err },
		"negative length":  func() error { _, err := v.regMR(3, buf.Addr, -5, 0); return err },
		"outside memory":   func() error { _, err := v.regMR(3, 0x10, 64, 0); return err },
		"past arena end":   func() error { _, err := v.regMR(3, buf.Addr, 64<<20, 0); return err },
		"unknown access":   func() error { _, err := v.regMR(3, buf.Addr, 64, 1<<6); return err },
		"remote w/o local": func() error { _, err := v.regMR(3, buf.Addr, 64, AccessRemoteWrite); return err },
		"nil MR dereg":     func() error { var m *MR; return m.Dereg() },
		"foreign MR dereg": func() error { return (&MR{}).Dereg() },
	} {
		if err := f(); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if n := len(d.commands(rings.OpRegMR)); n != 2 {
		t.Errorf("bad registrations reached the device: %d REG_MR", n)
	}
	// Free with a live registration is refused; after Dereg it works.
	if err := buf.Free(); !errors.Is(err, ErrBufferRegistered) {
		t.Fatalf("Free under a registration: %v", err)
	}
	if err := mr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := mr.Dereg(); err == nil {
		t.Error("double Dereg accepted")
	}
	if err := zb.Dereg(); err != nil {
		t.Fatal(err)
	}
	if dc := d.commands(rings.OpDeregMR); len(dc) != 2 || dc[0].Arg0 != mr.LKey || dc[1].Arg0 != zb.LKey {
		t.Fatalf("DEREG_MR %+v", dc)
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	if buf.Bytes() != nil || buf.Free() != nil {
		t.Error("freed buffer still usable or second Free failed")
	}
	var nb *Buffer
	if nb.Free() == nil || nb.Bytes() != nil {
		t.Error("nil buffer")
	}
}

// TestVerbsBufferFreeInvalidatesCache wires a cache over the fake device
// into Buffer.Free, as Provider.NewRegCache does.
func TestVerbsBufferFreeInvalidatesCache(t *testing.T) {
	v, d := fakeVerbs(t)
	c := NewRegCache(hostRegistrar{v}, RegCacheConfig{})
	v.caches[c] = struct{}{}
	b1, _ := v.allocBuffer(8192)
	b2, _ := v.allocBuffer(8192)
	m1, err := c.Get(1, b1.Addr, 8192, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := c.Get(1, b2.Addr+100, 1000, AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Put(m1); err != nil {
		t.Fatal(err)
	}
	// b1: its registration is unused, so Free deregisters it and frees.
	if err := b1.Free(); err != nil {
		t.Fatal(err)
	}
	if dc := d.commands(rings.OpDeregMR); len(dc) != 1 || dc[0].Arg0 != m1.LKey {
		t.Fatalf("DEREG_MR %+v", dc)
	}
	// b2: in use, so it is doomed and the memory stays.
	if err := b2.Free(); !errors.Is(err, ErrBufferRegistered) {
		t.Fatalf("Free under a cached registration in use: %v", err)
	}
	if s := c.Stats(); s.Invalidations != 2 || s.InUse != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := c.Put(m2); err != nil {
		t.Fatal(err)
	}
	if err := b2.Free(); err != nil {
		t.Fatal(err)
	}
	if len(d.commands(rings.OpDeregMR)) != 2 {
		t.Fatal("doomed registration not deregistered at its last Put")
	}
}

// TestVerbsCQPoll consumes a hand-written CQ ring: the test is the device.
func TestVerbsCQPoll(t *testing.T) {
	v, _ := fakeVerbs(t)
	l, err := rings.AllocCQ(v.mem, 8)
	if err != nil {
		t.Fatal(err)
	}
	dev, err := rings.NewProducer(v.mem, l, l.Count, nil)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := newCQOn(v, l)
	if err != nil {
		t.Fatal(err)
	}
	produce := func(from, n int) {
		for i := range n {
			e := dev.Next()
			if e == nil {
				t.Fatalf("device: CQ full at %d", from+i)
			}
			c := rings.Completion{Opcode: rings.WCRecv, Status: rings.WCStatus((from + i) % 3), WRID: uint64(from + i),
				ByteLen: uint32(10 * (from + i)), QPN: 9, Flags: rings.WCWithImm, ImmData: uint64(from+i) << 32}
			c.Encode(rings.CQEntry(e))
			dev.Commit()
		}
		dev.Publish()
	}
	wc := make([]rings.Completion, 3)
	if n := cq.Poll(wc); n != 0 {
		t.Fatalf("empty CQ polled %d", n)
	}
	next := 0
	check := func(got []rings.Completion) {
		t.Helper()
		for _, c := range got {
			want := rings.Completion{Opcode: rings.WCRecv, Status: rings.WCStatus(next % 3), WRID: uint64(next),
				ByteLen: uint32(10 * next), QPN: 9, Flags: rings.WCWithImm, ImmData: uint64(next) << 32}
			if c != want {
				t.Fatalf("completion %d: %v, want %v", next, &c, &want)
			}
			next++
		}
	}
	// Many laps: the consumer must release slots for the device to go on.
	for lap := range 10 {
		produce(next, 8)
		got := 0
		for got < 8 {
			n := cq.Poll(wc)
			if n == 0 {
				t.Fatalf("lap %d: %d of 8", lap, got)
			}
			check(wc[:n])
			got += n
		}
		if dev.Free() != 8 {
			t.Fatalf("lap %d: device sees %d free slots", lap, dev.Free())
		}
	}
	// A published entry with the wrong phase tag is counted and skipped.
	produce(next, 2)
	e := cq.cons.Entry(cq.cons.Head())
	e[0] ^= rings.CtlPhase
	n := cq.Poll(wc)
	if n != 1 || wc[0].WRID != uint64(next+1) {
		t.Fatalf("after a bad entry: %d completions, %v", n, &wc[0])
	}
	if s := cq.Stats(); s.RingErrors != 1 {
		t.Fatalf("ring errors %d", s.RingErrors)
	}
	// Nil and empty inputs.
	var nilCQ *CQ
	if nilCQ.Poll(wc) != 0 || cq.Poll(nil) != 0 {
		t.Fatal("nil poll")
	}
}

func TestVerbsEventRouting(t *testing.T) {
	v, d := fakeVerbs(t)
	cq, _ := v.createCQ(8)
	qp := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq}, 12, false)

	// CQ events are routed by flag: Conn is the CQ number, which here
	// equals no connection, and out-of-range numbers are harmless.
	if !v.Route(&rings.Notification{Flags: rings.NtfCQEvent, Conn: cq.Num()}) {
		t.Fatal("CQ event not consumed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if err := cq.Wait(ctx); err != nil {
		t.Fatal(err)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel2()
	if err := cq.Wait(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Wait without an event: %v", err)
	}
	for _, n := range []rings.Notification{
		{Flags: rings.NtfCQEvent, Conn: 12}, // the QP's index, but a CQ event
		{Flags: rings.NtfCQEvent, Conn: rings.NoConn},
		{Flags: rings.NtfQPEvent, Conn: 999, Aux: 77},
	} {
		if !v.Route(&n) {
			t.Errorf("%v not consumed", n.Flags)
		}
	}
	if qp.State() != QPStateIdle {
		t.Fatalf("state %v after foreign events", qp.State())
	}
	if v.Route(&rings.Notification{Flags: rings.NtfAckThreshold, Conn: 3}) {
		t.Error("a plain connection notification was consumed")
	}

	// ARM_CQ encoding.
	if err := cq.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	if err := cq.ReqNotify(false); err != nil {
		t.Fatal(err)
	}
	if ac := d.commands(rings.OpArmCQ); len(ac) != 2 || ac[0].Arg0 != 1 || ac[1].Arg0 != 0 || ac[0].Conn != cq.Num() {
		t.Fatalf("ARM_CQ %+v", ac)
	}

	// QP events drive the state; waiters wake.
	got := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		got <- qp.WaitEstablished(ctx)
	}()
	v.Route(&rings.Notification{Flags: rings.NtfQPEvent, Conn: 12, Aux: uint32(rings.QPEvConnectRequest)})
	if qp.State() != QPStateConnectRequest {
		t.Fatalf("state %v", qp.State())
	}
	if err := qp.modify(rings.QPAccept, []byte("reply")); err != nil {
		t.Fatal(err)
	}
	mc := d.commands(rings.OpModifyQP)
	if len(mc) != 1 || mc[0].Arg0 != uint32(rings.QPAccept) || mc[0].Len != 5 || mc[0].Conn != 12 {
		t.Fatalf("MODIFY_QP %+v", mc)
	}
	if pd, _ := v.mem.Map(mc[0].Addr, 5); string(pd) != "reply" {
		t.Fatalf("accept private data %q", pd)
	}
	if qp.State() != QPStateAccepted {
		t.Fatalf("state %v after ACCEPT", qp.State())
	}
	v.Route(&rings.Notification{Flags: rings.NtfQPEvent, Conn: 12, Aux: uint32(rings.QPEvEstablished)})
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	// Peer FIN: the host closes its side (MODIFY_QP CLOSE) by itself.
	if v.Route(&rings.Notification{Flags: rings.NtfFin, Conn: 12}) {
		t.Error("FIN consumed: the connection must see it too")
	}
	deadline := time.Now().Add(2 * time.Second)
	for len(d.commands(rings.OpModifyQP)) < 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if mc := d.commands(rings.OpModifyQP); len(mc) != 2 || mc[1].Arg0 != uint32(rings.QPClose) {
		t.Fatalf("no CLOSE after the peer's FIN: %+v", mc)
	}
	v.Route(&rings.Notification{Flags: rings.NtfQPEvent, Conn: 12, Aux: uint32(rings.QPEvClosed)})
	ctx3, cancel3 := context.WithTimeout(context.Background(), time.Second)
	defer cancel3()
	if err := qp.Disconnect(ctx3); err != nil {
		t.Fatal(err)
	}
	if qp.State() != QPStateClosed {
		t.Fatalf("state %v", qp.State())
	}

	// Errors: reject and terminate are reported through Err and waits.
	q2 := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq}, 13, true)
	v.Route(&rings.Notification{Flags: rings.NtfQPEvent, Conn: 13, Aux: uint32(rings.QPEvRejected)})
	if err := q2.WaitEstablished(context.Background()); !errors.Is(err, ErrRejected) {
		t.Fatalf("rejected: %v", err)
	}
	q3 := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq}, 14, false)
	v.Route(&rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 14, Len: 20, Aux: 3})
	if err := q3.Err(); !errors.Is(err, ErrEarlyData) {
		t.Fatalf("early data: %v", err)
	}
	q4 := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq}, 15, true)
	v.Route(&rings.Notification{Flags: rings.NtfQPEvent, Conn: 15, Aux: uint32(rings.QPEvTerminate)})
	if q4.State() != QPStateError || !errors.Is(q4.Err(), ErrQPError) {
		t.Fatalf("terminate: %v %v", q4.State(), q4.Err())
	}
	// A wait ends with the QP's destruction.
	done := make(chan error, 1)
	q5 := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq}, 16, true)
	go func() { done <- q5.WaitEstablished(context.Background()) }()
	time.Sleep(5 * time.Millisecond)
	_ = q5.Destroy()
	if err := <-done; !errors.Is(err, ErrQPDestroyed) {
		t.Fatalf("wait across Destroy: %v", err)
	}
	if err := q5.modify(rings.QPConnect, nil); !errors.Is(err, ErrQPDestroyed) {
		t.Fatalf("modify after Destroy: %v", err)
	}
	if err := qp.modify(rings.QPAccept, make([]byte, MaxPrivateData+1)); err == nil {
		t.Fatal("oversize private data accepted")
	}
}

func TestVerbsPostQueues(t *testing.T) {
	v, d := fakeVerbs(t)
	cq, _ := v.createCQ(8)
	qp := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 4, RQDepth: 2}, 3, true)
	// The device side of the SQ, to read what was posted.
	sqc, err := rings.NewConsumer(v.mem, qp.sqL, qp.sqL.Count, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 1, RemoteAddr: 0x1234, RKey: 0x5501, NumSGE: 2}
	w.SGL[0] = rings.SGE{Addr: 0x10, Length: 20, LKey: 0x601}
	w.SGL[1] = rings.SGE{Addr: 0x30, Length: 40, LKey: 0x601}
	if err := qp.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	batch := make([]rings.SendWR, 5)
	for i := range batch {
		batch[i] = rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRInline, WRID: uint64(10 + i), InlineLen: 3}
		copy(batch[i].InlineData[:], "abc")
	}
	n, err := qp.PostSendList(batch)
	if n != 3 || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("batch into 3 free slots: %d, %v", n, err)
	}
	if qp.SendQueueFree() != 0 {
		t.Fatalf("free %d", qp.SendQueueFree())
	}
	if err := qp.PostSend(&w); !errors.Is(err, ErrQueueFull) {
		t.Fatalf("full SQ: %v", err)
	}
	// One doorbell per post call that posted something.
	if db := d.commands(rings.OpQPDoorbell); len(db) != 2 || db[0].Conn != 3 {
		t.Fatalf("doorbells %+v", db)
	}
	want := append([]rings.SendWR{w}, batch[:3]...)
	for i := range want {
		e, err := sqc.Peek()
		if err != nil || e == nil {
			t.Fatalf("SQ entry %d: %v", i, err)
		}
		var got rings.SendWR
		_ = got.Decode(rings.SQEntry(e))
		if got != want[i] {
			t.Fatalf("SQ entry %d:\n got %+v\nwant %+v", i, got, want[i])
		}
		sqc.Pop()
	}
	// The device consumed them: room again.
	sqc.Release()
	if err := qp.PostSend(&w); err != nil {
		t.Fatalf("after the device released: %v", err)
	}
	// Bad work requests are refused before the ring (and no doorbell).
	before := len(d.commands(rings.OpQPDoorbell))
	for name, bad := range map[string]rings.SendWR{
		"SGEs":   {NumSGE: rings.MaxSendSGE + 1},
		"neg":    {NumSGE: -1},
		"inline": {Flags: rings.WRInline, InlineLen: rings.MaxInline + 1},
		"flags":  {Flags: 1 << 6},
	} {
		if err := qp.PostSend(&bad); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	if err := qp.PostSend(nil); err == nil {
		t.Error("nil WR accepted")
	}
	if len(d.commands(rings.OpQPDoorbell)) != before {
		t.Error("doorbell for refused work")
	}
	// Receive queue.
	r := rings.RecvWR{WRID: 5, NumSGE: 1}
	r.SGL[0] = rings.SGE{Addr: 1, Length: 2, LKey: 3}
	if n, err := qp.PostRecvList([]rings.RecvWR{r, r, r}); n != 2 || !errors.Is(err, ErrQueueFull) {
		t.Fatalf("RQ of 2: %d, %v", n, err)
	}
	if err := qp.PostRecv(&rings.RecvWR{NumSGE: rings.MaxRecvSGE + 1}); err == nil {
		t.Error("RQ entry with too many SGEs accepted")
	}
	if err := qp.PostRecv(nil); err == nil {
		t.Error("nil receive accepted")
	}
	var nq *QP
	if _, err := nq.PostSendList(batch); err == nil {
		t.Error("nil QP")
	}
	// A doorbell the device refuses is reported (the WR is queued).
	d.refuse[rings.OpQPDoorbell] = rings.StatusBadConn
	sqc.Release()
	for sqc.Available() > 0 {
		sqc.Pop()
	}
	sqc.Release()
	if err := qp.PostSend(&w); err == nil || !errors.As(err, new(*CommandError)) {
		t.Fatalf("refused doorbell: %v", err)
	}
}

// verbsTCPFrame builds an Ethernet/IPv4/TCP frame from 10.0.0.1:40000.
func verbsTCPFrame(dst [4]byte, dport uint16, flags uint8, payload int) []byte {
	f := hdr.TCPFrameFields{Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: dst,
		TCP: hdr.TCPFields{SrcPort: 40000, DstPort: dport, Flags: flags, Window: 1000}, Payload: make([]byte, payload)}
	return f.Append(nil)
}

func TestVerbsHoldEarlyData(t *testing.T) {
	v, _ := fakeVerbs(t)
	me := [4]byte{10, 0, 0, 2}
	data := verbsTCPFrame(me, 4791, hdr.TCPFlagACK|hdr.TCPFlagPSH, 100)
	if v.holdEarlyData(data) {
		t.Fatal("held with no RDMA listener")
	}
	if err := v.listenOn([]listenKey{{netip.AddrFrom4(me), 4791}}, &QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := v.listenOn([]listenKey{{netip.AddrFrom4(me), 4791}}, &QPAttr{}); err == nil {
		t.Fatal("second RDMA listener on a port accepted")
	}
	for name, c := range map[string]struct {
		f    []byte
		hold bool
	}{
		"payload to the listener":  {data, true},
		"padded frame":             {append(verbsTCPFrame(me, 4791, hdr.TCPFlagACK, 1), 0, 0, 0, 0), true},
		"SYN":                      {verbsTCPFrame(me, 4791, hdr.TCPFlagSYN, 0), false},
		"pure ACK (padded to 60)":  {append(verbsTCPFrame(me, 4791, hdr.TCPFlagACK, 0), 0, 0, 0, 0, 0, 0), false},
		"payload to another port":  {verbsTCPFrame(me, 4792, hdr.TCPFlagACK, 100), false},
		"payload to another host":  {verbsTCPFrame([4]byte{10, 0, 0, 3}, 4791, hdr.TCPFlagACK, 100), false},
		"truncated":                {data[:40], false},
		"not IPv4":                 {append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd}, data[14:]...), false},
		"IP total length too big":  {func() []byte { f := bytes.Clone(data); f[16] = 0xff; return f }(), false},
		"TCP data offset too big":  {func() []byte { f := bytes.Clone(data); f[14+20+12] = 0xf0; return f }(), true},
		"IP header length too big": {func() []byte { f := bytes.Clone(data); f[14] = 0x4f; return f }(), false},
	} {
		if got := v.holdEarlyData(c.f); got != c.hold {
			t.Errorf("%s: hold %v, want %v", name, got, c.hold)
		}
	}
	// Garbage never panics.
	r := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		f := bytes.Clone(data[:r.IntN(len(data)+1)])
		for range 1 + r.IntN(4) {
			if len(f) > 0 {
				f[r.IntN(len(f))] = byte(r.Uint32())
			}
		}
		v.holdEarlyData(f)
	}
	_ = v.listenOn([]listenKey{{netip.AddrFrom4(me), 4791}}, nil)
	if v.holdEarlyData(data) {
		t.Fatal("held after the listener closed")
	}
	if v.rawStream(hdr.Tuple{LocalIP: netip.AddrFrom4(me), LocalPort: 4791}) {
		t.Fatal("raw stream after the listener closed")
	}
	k := hdr.Tuple{LocalIP: netip.AddrFrom4(me), LocalPort: 5000, RemotePort: 6000}
	v.markFlow(k, &QPAttr{})
	if !v.rawStream(k) {
		t.Fatal("dialled flow not a raw stream")
	}
	v.markFlow(k, nil)
	if v.rawStream(k) {
		t.Fatal("still a raw stream")
	}
}

// ---- two emulated hosts ---------------------------------------------------

// rdmaSide is one host's verbs objects in the tests.
type rdmaSide struct {
	h     *tcpstack.Host
	v     *Provider
	pd    PD
	cq    *CQ
	qp    *QP
	recv  *Buffer // receive buffers, recvN of recvSize bytes
	rmr   *MR
	local *Buffer // source/sink for local SGEs
	lmr   *MR
}

const (
	recvN    = 32
	recvSize = 2048
)

func (s *rdmaSide) attr() QPAttr {
	return QPAttr{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, SQDepth: 128, RQDepth: recvN,
		Setup: func(qp *QP) error { return s.postRecvs(qp, 0, recvN) }}
}

func (s *rdmaSide) postRecvs(qp *QP, from, n int) error {
	wrs := make([]rings.RecvWR, n)
	for i := range wrs {
		slot := (from + i) % recvN
		wrs[i] = rings.RecvWR{WRID: uint64(1000 + slot), NumSGE: 1}
		wrs[i].SGL[0] = s.rmr.SGE(slot*recvSize, recvSize)
	}
	_, err := qp.PostRecvList(wrs)
	return err
}

func (s *rdmaSide) recvData(wc rings.Completion) []byte {
	slot := int(wc.WRID - 1000)
	return s.recv.Bytes()[slot*recvSize : slot*recvSize+int(wc.ByteLen)]
}

// TestVerbsOffloadMakesQP: an OFFLOAD of an RDMA connection carries its
// CREATE_QP (same publish) and, behind it, the frames held for the flow;
// the QP is adopted after delegation.
func TestVerbsOffloadMakesQP(t *testing.T) {
	v, _ := fakeVerbs(t)
	cq, _ := v.createCQ(8)
	key := hdr.Tuple{LocalIP: netip.AddrFrom4([4]byte{10, 0, 0, 2}), RemoteIP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), LocalPort: 4791, RemotePort: 40000}
	fh := v.host.(*fakeHost)
	// offload does what delegate does for connection idx and returns the
	// batch it would publish.
	offload := func(idx uint32) (*qpPrep, []tcpstack.HostCommand) {
		t.Helper()
		p, err := v.prepareQP(idx, key)
		if err != nil {
			t.Fatal(err)
		}
		batch := []tcpstack.HostCommand{{Cmd: rings.Command{Opcode: rings.OpOffload, Conn: idx}, Param: make([]byte, rings.ConnStateSize)}}
		if p == nil {
			return nil, batch
		}
		if err := p.Publish(func(follow []tcpstack.HostCommand) error {
			batch = append(batch, follow...)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return p, batch
	}

	// Not an RDMA flow: nothing added.
	if p, batch := offload(7); p != nil || len(batch) != 1 {
		t.Fatalf("plain OFFLOAD got %v %+v", p, batch)
	}
	// A listener's connection: a responder QP.
	attr := QPAttr{PD: 3, SendCQ: cq, RecvCQ: cq, RQDepth: 8}
	if err := v.listenOn([]listenKey{{key.LocalIP, key.LocalPort}}, &attr); err != nil {
		t.Fatal(err)
	}
	p, batch := offload(7)
	if len(batch) != 2 || batch[1].Cmd.Opcode != rings.OpCreateQP || batch[1].Cmd.Conn != 7 || batch[1].Cmd.Len != rings.QPConfigSize {
		t.Fatalf("batch %+v", batch)
	}
	cb, _ := v.mem.Map(batch[1].Cmd.Addr, rings.QPConfigSize)
	var qc rings.QPConfig
	if err := qc.Decode(cb); err != nil || qc.Flags != 0 || qc.PD != 3 || qc.RQCount != 8 || qc.SendCQ != cq.Num() {
		t.Fatalf("config %+v %v", qc, err)
	}
	p.Done(rings.Command{Opcode: rings.OpCreateQP, Status: rings.StatusOK})
	qp, err := v.adopt(7, &tcpstack.DelegatedConn{})
	if err != nil || qp.QPN() != 7 || qp.initiator {
		t.Fatalf("adopt: %v %v", qp, err)
	}
	if _, err := v.adopt(7, &tcpstack.DelegatedConn{}); err == nil {
		t.Fatal("a QP adopted twice")
	}
	// A refused CREATE_QP: nothing registered, the status reported.
	p, _ = offload(8)
	p.Done(rings.Command{Opcode: rings.OpCreateQP, Status: rings.StatusBadState})
	p.Discard() // and again, as a failed delegation would: once only
	var ce *CommandError
	if _, err := v.adopt(8, &tcpstack.DelegatedConn{}); !errors.As(err, &ce) || ce.Status != rings.StatusBadState {
		t.Fatalf("refused CREATE_QP: %v", err)
	}
	if v.qps[8] != nil || cq.qpRefs.Load() != 2 { // QP 7, on both sides
		t.Fatal("refused QP still registered")
	}
	// Bytes the host already holds: ErrEarlyData, and the stream memory
	// of the connection goes back.
	p, _ = offload(9)
	p.Done(rings.Command{Status: rings.StatusOK})
	// (The host side of TakeStream is tcpstack's TestRDMATakeStream.)
	fh.early = true
	c := &tcpstack.DelegatedConn{}
	if _, err := v.adopt(9, c); !errors.Is(err, ErrEarlyData) {
		t.Fatalf("early data: %v", err)
	}
	if len(fh.taken) == 0 || fh.taken[len(fh.taken)-1] != c {
		t.Fatal("the byte stream of an RDMA connection not taken")
	}
	fh.early = false
	// Frames the peer sent before the delegation go in the batch, behind
	// the CREATE_QP, in order.
	key.RemotePort = 40001
	f1 := verbsTCPFrame(key.LocalIP.As4(), key.LocalPort, hdr.TCPFlagACK|hdr.TCPFlagPSH, 100)
	f2 := verbsTCPFrame(key.LocalIP.As4(), key.LocalPort, hdr.TCPFlagACK|hdr.TCPFlagPSH, 30)
	for _, f := range [][]byte{f1, f2} {
		hdr.TCP(f[hdr.EthernetSize+hdr.IPv4MinSize:]).SetSrcPort(key.RemotePort)
		if !v.holdEarlyData(f) {
			t.Fatal("early frame not held")
		}
	}
	p, batch = offload(10)
	if len(batch) != 4 || batch[2].Cmd.Opcode != rings.OpRxInject || batch[2].Cmd.Conn != 10 ||
		!bytes.Equal(batch[2].Param, f1) || !bytes.Equal(batch[3].Param, f2) {
		t.Fatalf("batch with early frames %+v", batch)
	}
	if v.earlyHeld.Load() != 2 || v.earlyInjected.Load() != 2 {
		t.Fatalf("held %d injected %d", v.earlyHeld.Load(), v.earlyInjected.Load())
	}
	p.Discard()
	v.forgetEarly(key)
	_ = v.listenOn([]listenKey{{key.LocalIP, key.LocalPort}}, nil)
	// A dialled flow: an initiator QP with the private data.
	pd := []byte("hello")
	v.markFlow(key, &QPAttr{PD: 4, SendCQ: cq, RecvCQ: cq, PrivateData: pd})
	p, batch = offload(11)
	p.Done(rings.Command{Status: rings.StatusOK})
	cb, _ = v.mem.Map(batch[1].Cmd.Addr, rings.QPConfigSize)
	_ = qc.Decode(cb)
	if qc.Flags != rings.QPFlagInitiator || qc.PD != 4 || qc.PrivLen != 5 {
		t.Fatalf("initiator config %+v", qc)
	}
	if qp, err := v.adopt(11, &tcpstack.DelegatedConn{}); err != nil || !qp.initiator {
		t.Fatal(err)
	}
}

// TestVerbsHotPathAllocs: posting (with its doorbell) and polling allocate
// nothing.
func TestVerbsHotPathAllocs(t *testing.T) {
	mem, err := rings.NewArena(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	v := newProvider(nil, &fakeHost{mem: mem, exec: func(c rings.Command, _ func(rings.Command, error)) (rings.Command, error) {
		c.Status = rings.StatusOK
		return c, nil
	}})
	cq, err := v.createCQ(64)
	if err != nil {
		t.Fatal(err)
	}
	qp := fakeQP(t, v, QPAttr{SendCQ: cq, RecvCQ: cq, SQDepth: 64, RQDepth: 64}, 1, true)
	sqc, _ := rings.NewConsumer(mem, qp.sqL, qp.sqL.Count, nil)
	rqc, _ := rings.NewConsumer(mem, qp.rqL, qp.rqL.Count, nil)
	dev, _ := rings.NewProducer(mem, cq.layout, cq.layout.Count, nil)
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, NumSGE: 1}
	r := rings.RecvWR{NumSGE: 1}
	wc := make([]rings.Completion, 4)
	allocs := testing.AllocsPerRun(1000, func() {
		if err := qp.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		if err := qp.PostRecv(&r); err != nil {
			t.Fatal(err)
		}
		for _, c := range []*rings.Consumer{sqc, rqc} {
			c.Pop()
			c.Release()
		}
		(&rings.Completion{WRID: 1}).Encode(rings.CQEntry(dev.Next()))
		dev.Commit()
		dev.Publish()
		if cq.Poll(wc) != 1 {
			t.Fatal("no completion")
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per post+post+poll", allocs)
	}
}
