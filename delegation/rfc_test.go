package delegation

import (
	"bytes"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func TestInOrderPlacementAndDelayedAck(t *testing.T) {
	r := newContext(t)
	p := pattern(3000, 1)
	r.data(p[:1000], 0)
	r.expectNone("first segment (delayed ACK)")
	if d := r.e.NextDeadline(); d != r.now+40e6 {
		t.Fatalf("delayed ACK timer at %d, want %d", d, r.now+40e6)
	}
	r.data(p[1000:2000], 0)
	r.expect("second segment", ackNum(7000), payloadLen(0))
	r.data(p[2000:], hdr.TCPFlagPSH)
	r.expectNone("third segment")
	r.advance(40e6)
	ack := r.expect("delayed ACK", ackNum(8000))
	if r.e.Counters().DelayedAcks != 1 {
		t.Fatalf("delayed ACKs %d, want 1", r.e.Counters().DelayedAcks)
	}
	// PSH completed the user buffer with the 3000 bytes.
	var done *rings.Notification
	for i := range r.h.ntfs {
		if r.h.ntfs[i].Flags&rings.NtfUserBufDone != 0 {
			done = &r.h.ntfs[i]
		}
	}
	if done == nil || done.Len != 3000 || done.Seq != 5000 || done.Aux != 0 {
		t.Fatalf("user buffer notification %+v", done)
	}
	b, _ := r.env.arena.Map(r.h.userBufs[0], 3000)
	if !bytes.Equal(b, p) {
		t.Fatal("user buffer content differs")
	}
	// The timestamps echo the peer's and continue from the state block.
	if !ack.hasTS || ack.tsEcr != r.peerTS || ack.tsVal < 100 {
		t.Fatalf("timestamps %v val %d ecr %d (peer %d)", ack.hasTS, ack.tsVal, ack.tsEcr, r.peerTS)
	}
}

func TestRFC5961Reset(t *testing.T) {
	r := newContext(t)
	// In the window but not RCV.NXT: challenge ACK, connection survives.
	r.send(pseg{seq: 5000 + 10, flags: hdr.TCPFlagRST})
	r.expect("in-window RST", flags(hdr.TCPFlagACK), seqNum(1000), ackNum(5000))
	if r.info().State != rings.StateEstablished || r.h.rst {
		t.Fatal("in-window RST was accepted")
	}
	// Outside the window: silently ignored.
	r.send(pseg{seq: 5000 + 1<<20, flags: hdr.TCPFlagRST})
	r.expectNone("out-of-window RST")
	// SYN (even at RCV.NXT): challenge ACK.
	r.send(pseg{seq: 5000, flags: hdr.TCPFlagSYN})
	r.expect("SYN", flags(hdr.TCPFlagACK), ackNum(5000))
	c := r.e.Counters()
	if c.ChallengeAcks != 2 || c.RstOutOfWindow != 1 || c.SynReceived != 1 {
		t.Fatalf("counters %+v", c)
	}
	// Exactly RCV.NXT: accepted.
	r.in(pseg{seq: 5000, flags: hdr.TCPFlagRST})
	r.expectNone("accepted RST")
	if !r.h.rst || !r.h.closed || r.info().State != rings.StateClosed {
		t.Fatalf("RST not accepted: %v", r.h)
	}
	r.data([]byte("late"), 0)
	if r.e.Counters().DropClosed != 1 {
		t.Fatal("segment after RST not dropped")
	}
	if st := r.e.Release(0); st != rings.StatusOK {
		t.Fatalf("release: %v", st)
	}
	if _, ok := r.e.Lookup(rxTuple(ipB, ipA, portB, portA)); ok {
		t.Fatal("tuple still steered after release")
	}
}

func TestChallengeAckRateLimit(t *testing.T) {
	o := defaultRigOpts()
	o.cfg.ChallengeAcks = 3
	r := newRig(t, o)
	for i := 0; i < 10; i++ {
		r.in(pseg{seq: 5000 + 10, flags: hdr.TCPFlagRST})
	}
	if n := len(r.take()); n != 3 {
		t.Fatalf("%d challenge ACKs, want 3", n)
	}
	r.advance(1e9)
	r.in(pseg{seq: 5000 + 10, flags: hdr.TCPFlagRST})
	r.takeOne("after a second")
	if r.e.Counters().ChallengeLimited != 7 {
		t.Fatal(r.e.Counters().ChallengeLimited)
	}
}

func TestOutOfWindowData(t *testing.T) {
	o := defaultRigOpts()
	o.pair.initialWnd = 4096 // advertised window 16 KiB (scale 2)
	o.pair.rcvBufA = 16384
	r := newRig(t, o)
	r.h.start()
	// Beyond the right edge.
	r.in(pseg{seq: 5000 + 20000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: pattern(100, 0)})
	ack := r.takeOne("beyond window")
	if uint32(ack.ack) != 5000 {
		t.Fatal("ack moved")
	}
	// Entirely old.
	r.in(pseg{seq: 5000 - 2000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: pattern(1000, 0)})
	r.takeOne("old data")
	c := r.e.Counters()
	if c.DropOutOfWindow != 2 || c.RxBytes != 0 || c.OOOSegments != 0 {
		t.Fatalf("counters %+v", c)
	}
	// Straddling the right edge: only the part inside is taken.
	big := pattern(20000, 3)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagPSH, wnd: 100, payload: big})
	ack = r.takeOne("straddling")
	if got := r.e.Counters().RxBytes; got != 16384 || uint32(ack.ack) != 5000+16384 {
		t.Fatalf("took %d bytes, ack %d", got, ack.ack)
	}
	// The right edge never moved left through all of this.
	if int32(uint32(ack.ack)+uint32(ack.wnd)<<2-(5000+16384)) < 0 {
		t.Fatalf("right edge shrank: ack %d wnd %d", ack.ack, ack.wnd)
	}
}

func TestAckOutOfRange(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	// ACK for data never sent: ignored with an ACK, payload not taken.
	r.in(pseg{seq: 5000, ack: 1000 + 5000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("xyz")})
	ack := r.takeOne("ACK of unsent data")
	if uint32(ack.ack) != 5000 || r.e.Counters().DropAckUnsent != 1 || r.e.Counters().RxBytes != 0 {
		t.Fatalf("ack %d counters %+v", ack.ack, r.e.Counters())
	}
	// ACK far below SND.UNA - MAX.SND.WND: challenge ACK.
	r.in(pseg{seq: 5000, ack: uint32(1000 - 1<<24 + 1<<32), flags: hdr.TCPFlagACK, wnd: 100})
	r.takeOne("too-old ACK")
	if r.e.Counters().DropAckTooOld != 1 || r.e.Counters().ChallengeAcks != 1 {
		t.Fatalf("counters %+v", r.e.Counters())
	}
	// Zero-length duplicate: rate-limited answer.
	for i := 0; i < 5; i++ {
		r.in(pseg{seq: 5000 + 1<<20, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100})
	}
	if n := len(r.take()); n != 1 {
		t.Fatalf("%d answers to zero-length out-of-window segments, want 1", n)
	}
}

func TestPAWS(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, tsVal: 8000})
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, tsVal: 7990, payload: []byte("old")})
	ack := r.takeOne("PAWS")
	if r.e.Counters().DropPAWS != 1 || r.e.Counters().RxBytes != 0 || uint32(ack.ack) != 5000 {
		t.Fatalf("counters %+v", r.e.Counters())
	}
	if ack.tsEcr != 8000 {
		t.Fatalf("TS.Recent %d, want 8000", ack.tsEcr)
	}
	// A segment without timestamps on a timestamps connection.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, noTS: true, payload: []byte("nots")})
	r.expectNone("no timestamp")
	if r.e.Counters().DropNoTimestamp != 1 {
		t.Fatal("not counted")
	}
	// TS.Recent only moves for segments at or left of Last.ACK.sent.
	r.in(pseg{seq: 5000 + 3000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, tsVal: 9000, payload: []byte("ooo")})
	ack = r.takeOne("OOO")
	if ack.tsEcr != 8000 {
		t.Fatalf("TS.Recent moved to %d on an out-of-order segment", ack.tsEcr)
	}
}

func TestOutOfOrderAndSACK(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	p := pattern(4000, 5)
	r.in(pseg{seq: 6000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: p[1000:2000]})
	ack := r.takeOne("first OOO")
	if uint32(ack.ack) != 5000 || ack.nSACK != 1 || ack.sack[0] != (sackBlock{6000, 7000}) {
		t.Fatalf("dup ACK %d sack %v", ack.ack, ack.sack[:ack.nSACK])
	}
	r.in(pseg{seq: 8000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagPSH, wnd: 100, payload: p[3000:4000]})
	ack = r.takeOne("second OOO")
	if ack.nSACK != 2 || ack.sack[0] != (sackBlock{8000, 9000}) || ack.sack[1] != (sackBlock{6000, 7000}) {
		t.Fatalf("SACK %v, want most recent first", ack.sack[:ack.nSACK])
	}
	if i := r.info(); i.OOOBytes != 2000 || i.OOORanges != 2 {
		t.Fatalf("info %+v", i)
	}
	// Fill the first hole: ACK at once, up to the second hole.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: p[:1000]})
	ack = r.takeOne("hole fill")
	if uint32(ack.ack) != 7000 || ack.nSACK != 1 {
		t.Fatalf("ack %d sack %d", ack.ack, ack.nSACK)
	}
	r.in(pseg{seq: 7000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: p[2000:3000]})
	ack = r.takeOne("second fill")
	if uint32(ack.ack) != 9000 || ack.nSACK != 0 {
		t.Fatalf("ack %d sack %d", ack.ack, ack.nSACK)
	}
	// The held PSH completed the buffer: all 4000 bytes, in order.
	if r.h.recvd != 4000 {
		t.Fatalf("received %d", r.h.recvd)
	}
	b, _ := r.env.arena.Map(r.h.userBufs[0], 4000)
	if !bytes.Equal(b, p) {
		t.Fatal("reassembled data differs")
	}
	if f := r.e.pool.freePages(); f != len(r.e.pool.mem)/oooPageSize {
		t.Fatalf("%d pages still held", len(r.e.pool.mem)/oooPageSize-f)
	}
}

func TestOutOfOrderBounded(t *testing.T) {
	o := defaultRigOpts()
	o.cfg.OOOLimit = 8 << 10
	o.cfg.OOOPoolBytes = 64 << 10
	o.pair.initialWnd = 0x4000 // 64 KiB advertised
	o.host.userBufs, o.host.userSize = 8, 64<<10
	r := newRig(t, o)
	r.h.start()
	p := pattern(40000, 9)
	// Everything from +1000 to +30000: only up to RCV.NXT+8 KiB is held.
	for off := 1000; off < 30000; off += 1000 {
		r.in(pseg{seq: 5000 + uint32(off), ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: p[off : off+1000]})
	}
	r.take()
	c := r.e.Counters()
	if i := r.info(); i.OOOBytes != 8192-1000 || c.OOOBytesDropped != 29000-(8192-1000) {
		t.Fatalf("held %d, dropped %d", i.OOOBytes, c.OOOBytesDropped)
	}
	if used := len(r.e.pool.mem)/oooPageSize - r.e.pool.freePages(); used > 5 {
		t.Fatalf("%d slab pages for 8 KiB", used)
	}
	// Too many holes: at most maxOOORanges ranges.
	r2 := newRig(t, o)
	r2.h.start()
	for i := 0; i < 30; i++ {
		off := 100 + 200*i
		r2.in(pseg{seq: 5000 + uint32(off), ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: p[off : off+100]})
	}
	if i := r2.info(); i.OOORanges != maxOOORanges || r2.e.Counters().OOODropRanges != 30-maxOOORanges {
		t.Fatalf("ranges %d, dropped %d", i.OOORanges, r2.e.Counters().OOODropRanges)
	}
	// Fill in order from RCV.NXT: the stream comes out whole.
	for off := 0; off < 12000; off += 500 {
		fl := uint8(hdr.TCPFlagACK)
		if off+500 == 12000 {
			fl |= hdr.TCPFlagPSH
		}
		r2.in(pseg{seq: 5000 + uint32(off), ack: 1000, flags: fl, wnd: 100, payload: p[off : off+500]})
	}
	if r2.h.recvd != 12000 || r2.info().OOOBytes != 0 {
		t.Fatalf("received %d, %d held", r2.h.recvd, r2.info().OOOBytes)
	}
	b, _ := r2.env.arena.Map(r2.h.userBufs[0], 12000)
	if !bytes.Equal(b, p[:12000]) {
		t.Fatal("stream corrupted")
	}
	if f := r2.e.pool.freePages(); f != len(r2.e.pool.mem)/oooPageSize {
		t.Fatal("pages leaked")
	}
}

func TestZeroWindowPersist(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	// The peer closes its window.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0})
	r.h.sendTotal = 3000
	r.h.start()
	r.expectNone("zero window")
	if r.e.NextDeadline() != r.now+1e9 { // initial RTO 1 s (no RTT sample)
		t.Fatalf("persist timer at %d", r.e.NextDeadline()-r.now)
	}
	r.advance(1e9)
	probe := r.takeOne("first probe")
	if uint32(probe.seq) != 999 || len(probe.payload) != 1 {
		t.Fatalf("probe seq %d len %d", probe.seq, len(probe.payload))
	}
	// Still zero: the next probe backs off.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0})
	r.advance(1e9)
	r.expectNone("backed off")
	r.advance(1e9)
	r.takeOne("second probe")
	// The window opens: data goes at once.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 1000}) // 4000 bytes (scale 2)
	o := r.take()
	if len(o) != 3 || uint32(o[0].seq) != 1000 || len(o[2].payload) != 3000-2*int(r.e.conns[0].maxPayload()) {
		t.Fatalf("after reopening: %d frames", len(o))
	}
	if r.e.Counters().PersistProbes != 2 {
		t.Fatal(r.e.Counters().PersistProbes)
	}
}

func TestZeroWindowAdvertised(t *testing.T) {
	o := defaultRigOpts()
	o.host.legacyOnly = true
	o.pair.initialWnd = 1024 // 4 KiB advertised
	o.pair.rcvBufA = 8192
	r := newRig(t, o)
	r.h.noCredit = true
	r.h.start()
	var edges []uint32
	record := func() {
		for _, s := range r.take() {
			edges = append(edges, uint32(s.ack)+uint32(s.wnd)<<2)
		}
	}
	p := pattern(20000, 2)
	for i := 0; i < 20; i++ {
		at := r.info().RcvNxt - 5000
		r.in(pseg{seq: 5000 + at, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagPSH, wnd: 100, payload: p[at : at+1000]})
		r.advance(50e6)
		record()
	}
	if r.h.recvd != 8192 {
		t.Fatalf("received %d; want the 8 KiB buffer", r.h.recvd)
	}
	if r.e.conns[0].rcvAdvEdge != seq(5000+8192) {
		t.Fatalf("right edge %d", r.e.conns[0].rcvAdvEdge)
	}
	if c := r.e.Counters(); c.ZeroWindowsSent == 0 || c.DropOutOfWindow < 10 {
		t.Fatalf("zero windows %d, out-of-window drops %d", c.ZeroWindowsSent, c.DropOutOfWindow)
	}
	// The application consumes: a window update goes out at once.
	r.h.giveCredit()
	o2 := r.take()
	if len(o2) != 1 || o2[0].wnd == 0 {
		t.Fatalf("window update: %d frames", len(o2))
	}
	edges = append(edges, uint32(o2[0].ack)+uint32(o2[0].wnd)<<2)
	for i := 1; i < len(edges); i++ {
		if int32(edges[i]-edges[i-1]) < 0 {
			t.Fatalf("right edge moved left: %d then %d", edges[i-1], edges[i])
		}
	}
}

func TestRetransmissionTimeoutGivesUp(t *testing.T) {
	o := defaultRigOpts()
	o.cfg.MaxRetries = 4
	r := newRig(t, o)
	r.h.sendTotal = 500
	r.h.start()
	first := r.takeOne("data")
	if len(first.payload) != 500 {
		t.Fatal(len(first.payload))
	}
	start := r.now
	var times []int64
	for i := 0; i < 10 && !r.h.closed; i++ {
		r.advance(r.e.NextDeadline() - r.now)
		for _, s := range r.take() {
			if s.has(hdr.TCPFlagRST) {
				continue
			}
			times = append(times, r.now-start)
			if uint32(s.seq) != 1000 || len(s.payload) != 500 {
				t.Fatalf("retransmission seq %d len %d", s.seq, len(s.payload))
			}
		}
	}
	want := []int64{1e9, 3e9, 7e9, 15e9} // 1 s initial RTO, doubling
	if len(times) != len(want) {
		t.Fatalf("retransmissions at %v, want %v", times, want)
	}
	for i := range want {
		if times[i] != want[i] {
			t.Fatalf("retransmissions at %v, want %v", times, want)
		}
	}
	if !r.h.timeout || !r.h.closed || r.now-start != 31e9 {
		t.Fatalf("timeout %v closed %v after %d", r.h.timeout, r.h.closed, r.now-start)
	}
	// It said goodbye with a RST.
	if n := r.e.Counters().Timeouts; n != 1 {
		t.Fatal(n)
	}
}

func TestFastRetransmitNewReno(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	r.h.sendTotal = 10 * 1448
	r.h.txSize = 16 << 10
	r.h.start()
	segs := r.take()
	if len(segs) != 10 {
		t.Fatalf("initial window: %d segments", len(segs))
	}
	mss := uint32(1448)
	ackOf := func(i int) uint32 { return 1000 + uint32(i)*mss }
	// Segments 1 and 3 are lost; the peer acks 0 and then dup-acks
	// (without SACK blocks: RFC 6582's partial ACK rule is what tells).
	r.in(pseg{seq: 5000, ack: ackOf(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	r.take()
	for i := 0; i < 3; i++ {
		r.in(pseg{seq: 5000, ack: ackOf(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	}
	rt := r.take()
	if len(rt) < 1 || uint32(rt[0].seq) != ackOf(1) {
		t.Fatalf("no fast retransmit of segment 1: %d frames", len(rt))
	}
	if r.h.flags&rings.NtfDupAck == 0 || !r.info().InRecovery {
		t.Fatal("no duplicate-ACK notification / not in recovery")
	}
	// Partial ACK up to the next hole: segment 3 goes at once.
	r.in(pseg{seq: 5000, ack: ackOf(3), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	rt = r.take()
	if len(rt) < 1 || uint32(rt[0].seq) != ackOf(3) {
		t.Fatalf("partial ACK: no retransmission of segment 3")
	}
	// Full ACK: recovery ends with cwnd = ssthresh.
	r.in(pseg{seq: 5000, ack: ackOf(10), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	i := r.info()
	if i.InRecovery || i.Cwnd > i.Ssthresh || r.e.Counters().PartialAcks != 1 || r.e.Counters().FastRetransmits != 1 {
		t.Fatalf("after full ACK: %+v %+v", i, r.e.Counters())
	}
	if r.h.txFIFO.len() != 0 {
		t.Fatal("transmit buffer not released to the host")
	}
}

func TestPassiveClose(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	r.data([]byte("bye"), hdr.TCPFlagFIN)
	ack := r.takeOne("ACK of FIN")
	if uint32(ack.ack) != 5000+4 || !r.h.gotFin || r.info().State != rings.StateCloseWait {
		t.Fatalf("ack %d state %v fin %v", ack.ack, r.info().State, r.h.gotFin)
	}
	// Half-closed: we still send.
	r.h.sendTotal = 2000
	r.h.closeAfter = true
	r.h.pump()
	o := r.take()
	last := o[len(o)-1]
	if !last.has(hdr.TCPFlagFIN) || r.info().State != rings.StateLastAck {
		t.Fatalf("FIN not sent with the data: %d frames, state %v", len(o), r.info().State)
	}
	r.in(pseg{seq: 5000 + 4, ack: 1000 + 2001, flags: hdr.TCPFlagACK, wnd: 100})
	if !r.h.closed || r.info().State != rings.StateClosed {
		t.Fatalf("not closed: %v", r.h)
	}
	if r.h.txFIFO.len() != 0 {
		t.Fatal("buffers not returned")
	}
}

func TestActiveCloseTimeWait(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	if st := r.e.Close(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	fin := r.takeOne("FIN")
	if !fin.has(hdr.TCPFlagFIN|hdr.TCPFlagACK) || uint32(fin.seq) != 1000 || r.info().State != rings.StateFinWait1 {
		t.Fatalf("FIN flags %#x state %v", fin.flags, r.info().State)
	}
	if st := (rings.Tx{Len: 10, Addr: r.h.txBufs[0]}); r.e.Send(0, &st) != rings.StatusBadState {
		t.Fatal("send after close accepted")
	}
	r.in(pseg{seq: 5000, ack: 1001, flags: hdr.TCPFlagACK, wnd: 100})
	if r.info().State != rings.StateFinWait2 {
		t.Fatal(r.info().State)
	}
	// Half-closed: the peer keeps sending, we keep receiving.
	p := pattern(3000, 4)
	r.data(p, hdr.TCPFlagPSH)
	r.data(nil, hdr.TCPFlagFIN)
	ack := r.take()
	// TIME_WAIT moves to a small record: the connection is CLOSED at
	// once and its index can be released (timewait.go).
	if len(ack) == 0 || uint32(ack[len(ack)-1].ack) != 5000+3001 || r.info().State != rings.StateClosed ||
		!r.h.closed || r.e.TimeWaitConns() != 1 {
		t.Fatalf("state %v closed %v records %d", r.info().State, r.h.closed, r.e.TimeWaitConns())
	}
	if r.h.recvd != 3000 || !r.h.gotFin {
		t.Fatalf("%v", r.h)
	}
	if st := r.e.Release(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	// A retransmitted FIN is ACKed again by the record and restarts TIME_WAIT.
	r.advance(400e6)
	r.in(pseg{seq: 5000 + 3000, ack: 1001, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 100})
	if a := r.takeOne("re-ACK of FIN"); !a.has(hdr.TCPFlagACK) || uint32(a.ack) != 5000+3001 || uint32(a.seq) != 1001 {
		t.Fatalf("re-ACK seq %d ack %d flags %#x", a.seq, a.ack, a.flags)
	}
	r.in(pseg{seq: 5000 + 3001, flags: hdr.TCPFlagRST}) // RFC 1337: ignored
	r.in(pseg{seq: 5000 + 3001, ack: 1001, flags: hdr.TCPFlagACK, payload: []byte("x")})
	r.takeOne("ACK of data in TIME_WAIT")
	r.advance(400e6)
	if r.e.TimeWaitConns() != 1 {
		t.Fatal("TIME_WAIT not restarted")
	}
	r.advance(100e6)
	if r.e.TimeWaitConns() != 0 || r.e.Counters().TimeWaitExpired != 1 {
		t.Fatal("TIME_WAIT did not end")
	}
}

func TestSimultaneousClose(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.e.Close(0)
	r.take()
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN, wnd: 100}) // their FIN, ours not yet acked
	r.takeOne("ACK of their FIN")
	if r.info().State != rings.StateClosing {
		t.Fatal(r.info().State)
	}
	r.in(pseg{seq: 5001, ack: 1001, flags: hdr.TCPFlagACK, wnd: 100})
	if r.info().State != rings.StateClosed || !r.h.closed || r.e.TimeWaitConns() != 1 {
		t.Fatal(r.info().State, r.e.TimeWaitConns())
	}
	r.advance(600e6)
	if r.e.TimeWaitConns() != 0 {
		t.Fatal("TIME_WAIT record not expired")
	}
}

func TestKeepalive(t *testing.T) {
	o := defaultRigOpts()
	o.pair.keepaliveMs = 1000 // idle 1 s, interval 250 ms, 3 probes
	r := newRig(t, o)
	r.advance(1e9)
	p := r.takeOne("keepalive")
	if uint32(p.seq) != 999 || len(p.payload) != 1 {
		t.Fatalf("probe seq %d len %d", p.seq, len(p.payload))
	}
	// Answered: idle again.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100})
	r.advance(999e6)
	r.expectNone("idle")
	r.advance(1e6)
	r.takeOne("second keepalive")
	// Unanswered: two more probes (three in all), then give up.
	r.advance(2 * 250e6)
	if n := len(r.take()); n != 2 {
		t.Fatalf("%d probes", n)
	}
	r.advance(250e6)
	o2 := r.take()
	if len(o2) != 1 || !o2[0].has(hdr.TCPFlagRST) || !r.h.timeout || !r.h.closed {
		t.Fatalf("no keepalive timeout: %d frames %v", len(o2), r.h)
	}
	for _, n := range r.h.ntfs {
		if n.Flags&rings.NtfTimeout != 0 && n.Aux != AuxTimeoutKeepalive {
			t.Fatalf("timeout aux %d", n.Aux)
		}
	}
}

func TestThresholds(t *testing.T) {
	o := defaultRigOpts()
	o.pair.ackThreshold = 3000
	r := newRig(t, o)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	r.h.sendTotal = 5000
	r.h.txSize = 1000
	r.h.start()
	r.take()
	count := func(f rings.NotifyFlags) (n int, last rings.Notification) {
		for _, x := range r.h.ntfs {
			if x.Flags&f != 0 {
				n++
				last = x
			}
		}
		return
	}
	r.in(pseg{seq: 5000, ack: 3000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if n, _ := count(rings.NtfAckThreshold); n != 0 {
		t.Fatal("ACK threshold fired early")
	}
	r.in(pseg{seq: 5000, ack: 4500, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if n, last := count(rings.NtfAckThreshold); n != 1 || last.Ack != 4500 || last.AckCount != 3 {
		t.Fatalf("ACK threshold: %d %+v", n, last)
	}
	r.in(pseg{seq: 5000, ack: 6000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if n, last := count(rings.NtfAckThreshold); n != 2 || last.Ack != 6000 {
		t.Fatalf("queue-empty ACK notification: %d %+v", n, last)
	}
	// Sequence threshold.
	if st := r.e.SetThresholds(0, 0, 5000+1500, true); st != rings.StatusOK {
		t.Fatal(st)
	}
	r.h.start()
	r.data(pattern(1000, 0), 0)
	if n, _ := count(rings.NtfSeqThreshold); n != 0 {
		t.Fatal("fired early")
	}
	r.data(pattern(1000, 0), 0)
	r.data(pattern(1000, 0), 0)
	if n, last := count(rings.NtfSeqThreshold); n != 1 || last.Seq != 5000+2000 {
		t.Fatalf("sequence threshold: %d %+v", n, last)
	}
}

// TestZeroWindowStillTakesACKs: this end's window has closed after it
// refused bytes the peer sent, so the peer's ACKs arrive with SEG.SEQ past
// RCV.NXT. Their ACK must still be taken (RFC 9293 §3.10.7.4), or an
// application that writes before it reads never sees its data acknowledged
// and the connection deadlocks (four full-duplex echoes between two engines
// did, one round in a few).
func TestZeroWindowStillTakesACKs(t *testing.T) {
	o := defaultRigOpts()
	o.host.legacyOnly = true
	o.pair.initialWnd = 1024 // 4 KiB advertised
	o.pair.rcvBufA = 8192
	r := newRig(t, o)
	r.h.noCredit = true // the application does not read
	r.h.sendTotal = 6000
	r.h.start()
	r.take() // our data goes out; the peer does not acknowledge it yet
	p := pattern(20000, 2)
	for i := 0; i < 12; i++ {
		at := r.info().RcvNxt - 5000
		r.in(pseg{seq: 5000 + at, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagPSH, wnd: 100, payload: p[at : at+1000]})
		r.advance(1e6)
	}
	r.take()
	ci := r.info()
	if ci.RcvWnd != 0 || ci.SndMax == ci.SndUna {
		t.Fatalf("setup: window %d, %d bytes in flight; want 0 and some", ci.RcvWnd, ci.SndMax-ci.SndUna)
	}
	// The peer sent 1000 bytes we refused; its pure ACK is at its SND.NXT.
	r.in(pseg{seq: ci.RcvNxt + 1000, ack: ci.SndMax, flags: hdr.TCPFlagACK, wnd: 100})
	if got := r.info().SndUna; got != ci.SndMax {
		t.Fatalf("SND.UNA %d after an ACK of %d carried past RCV.NXT: the ACK was ignored", got, ci.SndMax)
	}
	// An ACK outside the RFC 5961 range is still not taken.
	r.in(pseg{seq: ci.RcvNxt + 1000, ack: ci.SndMax + 1e6, flags: hdr.TCPFlagACK, wnd: 100})
	if got := r.info().SndUna; got != ci.SndMax {
		t.Fatalf("SND.UNA moved to %d on an ACK of unsent data", got)
	}
}
