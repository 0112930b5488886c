package delegation

import (
	"runtime"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// churnRig drives many short connections through one engine, each ending a
// different way, playing the peer by hand (the rig's segment builder, its
// state block re-aimed at each new 4-tuple).
type churnRig struct {
	*rig
	ntfClosed int
}

// popClosed consumes notifications and reports whether connection idx's
// NtfClosed was among them.
func (c *churnRig) popClosed(idx uint32) bool {
	got := false
	for {
		n, ok := c.env.popNotify()
		if !ok {
			c.e.RetryNotifications()
			if n, ok = c.env.popNotify(); !ok {
				return got
			}
		}
		if n.Conn == idx && n.Flags&rings.NtfClosed != 0 {
			got = true
			c.ntfClosed++
		}
	}
}

func (c *churnRig) seg(idx uint32, p pseg) {
	ip, tcp := c.build(p)
	c.e.Input(idx, ip, tcp)
}

// endings are the ways a delegated connection ends.
var endings = []string{"we close first", "peer closes first", "peer resets", "host aborts", "simultaneous close", "peer vanishes"}

// oneConn offloads connection idx on a fresh 4-tuple and ends it the way
// ending names, checking the index is free again at the end.
func (c *churnRig) oneConn(t testing.TB, i int, idx uint32, ending string) {
	st := c.st
	st.RemotePort = uint16(1024 + i%60000)
	st.RemoteIP[3] = byte(1 + i/60000)
	c.rig.st = st
	if s := c.e.Offload(idx, &st); s != rings.StatusOK {
		t.Fatalf("conn %d (%s): offload: %v", i, ending, s)
	}
	ours, theirs := st.SndNxt, st.RcvNxt
	c.out = c.out[:0]
	switch ending {
	case "we close first":
		c.e.Close(idx)
		c.seg(idx, pseg{seq: theirs, ack: ours + 1, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 1000})
	case "peer closes first":
		c.seg(idx, pseg{seq: theirs, ack: ours, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 1000})
		c.e.Close(idx)
		c.seg(idx, pseg{seq: theirs + 1, ack: ours + 1, flags: hdr.TCPFlagACK, wnd: 1000})
	case "peer resets":
		c.seg(idx, pseg{seq: theirs, flags: hdr.TCPFlagRST})
	case "host aborts":
		if s := c.e.Abort(idx); s != rings.StatusOK {
			t.Fatalf("abort: %v", s)
		}
		c.popClosed(idx)
		return // ABORT frees the index itself
	case "peer vanishes":
		// Data the peer never acknowledges: the engine gives up after
		// MaxRetries timeouts (RST, NtfTimeout and NtfClosed).
		if s := c.e.Send(idx, &rings.Tx{Addr: c.h.txBufs[0], Len: 100}); s != rings.StatusOK {
			t.Fatalf("send: %v", s)
		}
		for k := 0; ; k++ {
			if info, _ := c.e.Info(idx); info.State == rings.StateClosed {
				break
			}
			if k > 100 {
				t.Fatalf("conn %d: no timeout", i)
			}
			c.now = max(c.now, c.e.NextDeadline())
			c.e.Tick(c.now)
		}
	case "simultaneous close":
		c.e.Close(idx)
		c.seg(idx, pseg{seq: theirs, ack: ours, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 1000})
		c.seg(idx, pseg{seq: theirs + 1, ack: ours + 1, flags: hdr.TCPFlagACK, wnd: 1000})
	}
	if !c.popClosed(idx) {
		info, _ := c.e.Info(idx)
		t.Fatalf("conn %d (%s): no NtfClosed; state %v", i, ending, info.State)
	}
	if s := c.e.Release(idx); s != rings.StatusOK {
		t.Fatalf("conn %d (%s): release: %v", i, ending, s)
	}
}

// Every way of ending returns the index and leaves the engine's memory
// where it was: the TIME_WAIT records stay bounded by the rate times
// Config.TimeWait, the slab stops growing, and the Go heap stays flat.
func TestChurnEveryEnding(t *testing.T) {
	n := 100000
	if testing.Short() {
		n = 10000
	}
	o := defaultRigOpts()
	o.cfg = Config{MaxConns: 8, TimeWait: 50e6, MaxTimeWait: 1 << 12,
		MinRTO: 1e6, InitialRTO: 1e6, MaxRTO: 4e6, MaxRetries: 3}
	c := &churnRig{rig: newRig(t, o)}
	c.e.Abort(0) // the rig's own connection is not used
	c.env.transmit = func([]byte) error { return nil }
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var base uint64
	count := map[string]uint64{}
	for i := 0; i < n; i++ {
		count[endings[i%len(endings)]]++
		c.oneConn(t, i, uint32(1+i%7), endings[i%len(endings)])
		c.now += 100e3 // 10,000 connections a second
		c.e.Tick(c.now)
		if i == n/10 {
			base = heap()
		}
	}
	c.now += 100e6
	c.e.Tick(c.now)
	for idx := uint32(0); idx < 8; idx++ {
		if _, ok := c.e.Info(idx); ok {
			t.Fatalf("index %d still taken", idx)
		}
	}
	ctr := c.e.Counters()
	// 2 in 6 connections pass through TIME_WAIT (we close first,
	// simultaneous close); at 10,000/s over 50 ms that is ~170 at once.
	if ctr.TimeWaitEntered != count["we close first"]+count["simultaneous close"] || ctr.Timeouts != count["peer vanishes"] || ctr.TimeWaitExpired != ctr.TimeWaitEntered || ctr.TimeWaitOverflow != 0 {
		t.Fatalf("TIME_WAIT entered %d expired %d overflow %d", ctr.TimeWaitEntered, ctr.TimeWaitExpired, ctr.TimeWaitOverflow)
	}
	if c.e.TimeWaitConns() != 0 || c.e.TimeWaitCapacity() > 400 || len(c.e.heap) != 0 || len(c.e.pendList) != 0 {
		t.Fatalf("left over: %d records (slab %d), %d timers, %d pending", c.e.TimeWaitConns(), c.e.TimeWaitCapacity(), len(c.e.heap), len(c.e.pendList))
	}
	for i, s := range c.e.table.slots {
		if s.idx != 0 {
			t.Fatalf("tuple slot %d still maps to conn %d", i, s.idx-1)
		}
	}
	if end := heap(); end > base+1<<20 {
		t.Fatalf("heap grew from %d to %d bytes over %d connections", base, end, n-n/10)
	}
	if want := uint64(n) - count["host aborts"]; uint64(c.ntfClosed) != want {
		t.Fatalf("%d NtfClosed for %d closes", c.ntfClosed, want)
	}
	t.Logf("%d connections: %d through TIME_WAIT, record slab %d", n, ctr.TimeWaitEntered, c.e.TimeWaitCapacity())
}

// enterTW takes connection 0 of r into TIME_WAIT (we close first) and
// releases its index.
func enterTW(t *testing.T, r *rig) {
	t.Helper()
	r.e.Close(0)
	r.data(nil, hdr.TCPFlagFIN)
	r.in(pseg{seq: r.peerSeq, ack: r.st.SndNxt + 1, flags: hdr.TCPFlagACK, wnd: 100})
	if r.e.TimeWaitConns() != 1 || !r.h.closed {
		t.Fatalf("records %d closed %v", r.e.TimeWaitConns(), r.h.closed)
	}
	if st := r.e.Release(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	r.take()
}

// RFC 6191: a SYN with a newer timestamp ends TIME_WAIT and goes to the
// host stack; an old one is answered with an ACK and absorbed.
func TestTimeWaitSYN(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	enterTW(t, r)
	ip, tcp := r.build(pseg{seq: r.peerSeq + 1000, flags: hdr.TCPFlagSYN, tsVal: r.st.TSRecent - 10})
	if !r.e.InputUnmatched(ip, tcp, 0) {
		t.Fatal("old SYN not absorbed")
	}
	if a := r.takeOne("ACK of old SYN"); !a.has(hdr.TCPFlagACK) || uint32(a.ack) != r.peerSeq {
		t.Fatalf("ACK %d flags %#x", a.ack, a.flags)
	}
	ip, tcp = r.build(pseg{seq: r.peerSeq + 1000, flags: hdr.TCPFlagSYN, tsVal: r.peerTS + 1000})
	if r.e.InputUnmatched(ip, tcp, 0) {
		t.Fatal("newer SYN absorbed")
	}
	if r.e.TimeWaitConns() != 0 || r.e.Counters().TimeWaitReopened != 1 {
		t.Fatal("record not ended by the newer SYN")
	}
	r.expectNone("newer SYN")
	// A bad checksum on a TIME_WAIT tuple is counted, never answered.
	enterTWAgain := newRig(t, defaultRigOpts())
	enterTW(t, enterTWAgain)
	ip, tcp = enterTWAgain.build(pseg{seq: enterTWAgain.peerSeq, ack: 1, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN})
	tcp[len(tcp)-1] ^= 0xFF
	if !enterTWAgain.e.InputUnmatched(ip, tcp, 0) || enterTWAgain.e.Counters().DropBadChecksum != 1 {
		t.Fatal("bad checksum not dropped")
	}
	enterTWAgain.expectNone("bad checksum")
}

// RFC 6191 §2: a SYN with the same timestamp as the old connection's last
// segment opens a new connection when its sequence number is above the old
// RCV.NXT (a Linux peer churning through its ports does this within a
// millisecond), and is answered with an ACK when it is not.
func TestTimeWaitSYNSameTimestamp(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	enterTW(t, r)
	ts := r.peerTS // the TSval of the peer's last segment: the record's TS.Recent
	ip, tcp := r.build(pseg{seq: r.peerSeq - 5, flags: hdr.TCPFlagSYN, tsVal: ts})
	if !r.e.InputUnmatched(ip, tcp, 0) {
		t.Fatal("SYN with the same timestamp and an old sequence number not absorbed")
	}
	if a := r.takeOne("ACK of the old SYN"); !a.has(hdr.TCPFlagACK) || uint32(a.ack) != r.peerSeq {
		t.Fatalf("ACK %d flags %#x", a.ack, a.flags)
	}
	ip, tcp = r.build(pseg{seq: r.peerSeq + 1000, flags: hdr.TCPFlagSYN, tsVal: ts})
	if r.e.InputUnmatched(ip, tcp, 0) {
		t.Fatal("SYN with the same timestamp and a later sequence number absorbed")
	}
	if r.e.TimeWaitConns() != 0 || r.e.Counters().TimeWaitReopened != 1 {
		t.Fatal("record not ended by the SYN")
	}
	r.expectNone("the new connection's SYN")
}

// A full TIME_WAIT table gives up its oldest record, counted.
func TestTimeWaitOverflow(t *testing.T) {
	o := defaultRigOpts()
	o.cfg = Config{MaxConns: 8, TimeWait: 1e9, MaxTimeWait: 16}
	c := &churnRig{rig: newRig(t, o)}
	c.e.Abort(0)
	c.env.transmit = func([]byte) error { return nil }
	for i := 0; i < 40; i++ {
		c.oneConn(t, i, 1, "we close first")
	}
	ctr := c.e.Counters()
	if c.e.TimeWaitConns() != 16 || c.e.TimeWaitCapacity() != 16 || ctr.TimeWaitOverflow != 24 {
		t.Fatalf("records %d slab %d overflow %d", c.e.TimeWaitConns(), c.e.TimeWaitCapacity(), ctr.TimeWaitOverflow)
	}
	// The newest are kept: the last tuple's FIN is still answered.
	sent := 0
	c.env.transmit = func([]byte) error { sent++; return nil }
	c.seg(1, pseg{seq: c.st.RcvNxt, ack: c.st.SndNxt + 1, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 1000})
	if sent != 1 {
		t.Fatalf("%d frames for the newest record's FIN", sent)
	}
}

// A connection that went through TIME_WAIT and a new one on the same
// 4-tuple: releasing the old index must not unhook the new connection.
func TestTimeWaitTupleReused(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.e.Close(0)
	r.data(nil, hdr.TCPFlagFIN)
	r.in(pseg{seq: r.peerSeq, ack: r.st.SndNxt + 1, flags: hdr.TCPFlagACK, wnd: 100})
	if r.e.TimeWaitConns() != 1 {
		t.Fatal("no TIME_WAIT record")
	}
	st := r.st
	st.SndNxt, st.SndUna, st.RcvNxt = st.SndNxt+100000, st.SndNxt+100000, st.RcvNxt+100000
	if s := r.e.Offload(1, &st); s != rings.StatusOK {
		t.Fatalf("offload on the reused tuple: %v", s)
	}
	if r.e.TimeWaitConns() != 0 {
		t.Fatal("the record outlived the new connection's OFFLOAD")
	}
	if s := r.e.Release(0); s != rings.StatusOK {
		t.Fatal(s)
	}
	ip, tcp := r.build(pseg{seq: st.RcvNxt, ack: st.SndNxt, flags: hdr.TCPFlagACK, wnd: 100})
	if idx, ok := r.e.LookupSegment(ip, tcp); !ok || idx != 1 {
		t.Fatalf("lookup after the old index's release: %d %v", idx, ok)
	}
	if o := r.e.Occupancy(); o.Conns != 1 || o.TimeWait != 0 {
		t.Fatalf("occupancy %+v", o)
	}
}

// The host opening a new connection from a 4-tuple the unit holds in
// TIME_WAIT (its stack picked the same local port again) ends the record,
// so the peer's SYN-ACK is not absorbed; any other outbound frame does not.
func TestTimeWaitOutboundSYN(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	enterTW(t, r)
	frame := func(flags uint8) []byte {
		f := make([]byte, hdrsLen)
		n := (&hdr.EthernetFields{Type: hdr.EtherTypeIPv4}).Encode(f)
		n += (&hdr.IPv4Fields{TotalLen: netHdrLen + hdr.TCPMinSize, TTL: 64, Proto: hdr.ProtoTCP,
			Src: r.st.LocalIP, Dst: r.st.RemoteIP}).Encode(f[n:])
		(&hdr.TCPFields{SrcPort: r.st.LocalPort, DstPort: r.st.RemotePort, Seq: 1, Flags: flags}).Encode(f[n:])
		return f
	}
	r.e.OutboundSYN(frame(hdr.TCPFlagACK))
	r.e.OutboundSYN(frame(hdr.TCPFlagSYN | hdr.TCPFlagACK))
	if r.e.TimeWaitConns() != 1 {
		t.Fatal("a frame other than our SYN ended TIME_WAIT")
	}
	r.e.OutboundSYN(frame(hdr.TCPFlagSYN)[:hdrsLen-1])
	if r.e.TimeWaitConns() != 1 {
		t.Fatal("a truncated frame ended TIME_WAIT")
	}
	r.e.OutboundSYN(frame(hdr.TCPFlagSYN))
	if r.e.TimeWaitConns() != 0 || r.e.Counters().TimeWaitReopened != 1 {
		t.Fatal("our SYN did not end TIME_WAIT")
	}
}

// FuzzTimeWaitInput feeds arbitrary segments to a TIME_WAIT record (and
// arbitrary frames to OutboundSYN): no panic, every frame the record sends
// well formed (the rig parses and checksums each), at most the one record.
func FuzzTimeWaitInput(f *testing.F) {
	seedRig := newRig(f, defaultRigOpts())
	for _, p := range []pseg{
		{seq: 8001, ack: 1001, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 100},
		{seq: 8001, ack: 1001, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("late")},
		{seq: 9000, flags: hdr.TCPFlagSYN},
		{seq: 8001, flags: hdr.TCPFlagRST},
		{seq: 8001, ack: 1001, flags: hdr.TCPFlagACK, wnd: 100, rawOpts: []byte{hdr.TCPOptSACK, 10, 0, 0, 0, 0, 0, 0, 0}},
	} {
		_, tcp := seedRig.build(p)
		f.Add(tcp, true)
	}
	f.Add([]byte{}, true)
	f.Add(make([]byte, 19), false)
	f.Fuzz(func(t *testing.T, tcp []byte, fixup bool) {
		r := quietRig(t, defaultRigOpts())
		enterTW(t, r)
		if len(tcp) >= 4 {
			be.PutUint16(tcp[0:], r.st.RemotePort) // reach the record most of the time
			be.PutUint16(tcp[2:], r.st.LocalPort)
		}
		if fixup && len(tcp) >= hdr.TCPMinSize {
			tcp[16], tcp[17] = 0, 0
			be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, r.st.RemoteIP, r.st.LocalIP, tcp))
		}
		ip, _ := r.build(pseg{})
		be.PutUint16(ip[2:], uint16(netHdrLen+len(tcp)))
		ip[10], ip[11] = 0, 0
		be.PutUint16(ip[10:], ^hdr.Checksum(ip, 0))
		r.e.InputUnmatched(ip, tcp, 0)
		r.e.InputUnmatched(ip, tcp, RxTCPChecksumOK)
		frame := append(make([]byte, hdr.EthernetSize), ip...)
		be.PutUint16(frame[12:], hdr.EtherTypeIPv4)
		r.e.OutboundSYN(append(frame, tcp...))
		if n := r.e.TimeWaitConns(); n > 1 {
			t.Fatalf("%d records", n)
		}
		r.advance(2e9)
		if r.e.TimeWaitConns() != 0 {
			t.Fatal("a record outlived its TIME_WAIT")
		}
	})
}
