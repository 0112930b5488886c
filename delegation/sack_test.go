package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

func TestScoreboard(t *testing.T) {
	var b scoreboard
	b.add(100, 200)
	b.add(300, 400)
	b.add(200, 250) // touches the first
	b.add(500, 600)
	b.add(350, 520) // bridges two
	want := []sackBlock{{100, 250}, {300, 600}}
	if b.n != len(want) || b.r[0] != want[0] || b.r[1] != want[1] {
		t.Fatalf("ranges %v", b.r[:b.n])
	}
	if s, e, ok := b.gap(50, 1000); !ok || s != 50 || e != 100 {
		t.Fatalf("gap before: %d %d %v", s, e, ok)
	}
	if s, e, ok := b.gap(120, 1000); !ok || s != 250 || e != 300 {
		t.Fatalf("gap after a range: %d %d %v", s, e, ok)
	}
	if s, e, ok := b.gap(260, 280); !ok || s != 260 || e != 280 {
		t.Fatalf("gap capped: %d %d %v", s, e, ok)
	}
	if _, _, ok := b.gap(310, 600); ok {
		t.Fatal("gap inside a range")
	}
	if s, e, ok := b.gap(550, 1000); !ok || s != 600 || e != 1000 {
		t.Fatalf("gap past the highest range: %d %d %v", s, e, ok)
	}
	if e, ok := b.covering(310); !ok || e != 600 {
		t.Fatal("covering")
	}
	if s, ok := b.next(260); !ok || s != 300 {
		t.Fatal("next")
	}
	if b.below(50) != 0 || b.below(150) != 50 || b.below(350) != 200 || b.below(1000) != 450 {
		t.Fatalf("below: %d %d %d %d", b.below(50), b.below(150), b.below(350), b.below(1000))
	}
	b.trim(320)
	if b.n != 1 || b.r[0] != (sackBlock{320, 600}) || b.high() != 600 {
		t.Fatalf("trim: %v", b.r[:b.n])
	}
	// Full board: a new disjoint range is ignored, merging still works.
	b.reset()
	for i := 0; i < maxSACKRanges+3; i++ {
		b.add(seq(1000*i), seq(1000*i+10))
	}
	if b.n != maxSACKRanges {
		t.Fatal(b.n)
	}
	b.add(5, 1000)
	if b.n != maxSACKRanges-1 || b.r[0] != (sackBlock{0, 1010}) {
		t.Fatalf("merge on a full board: %v", b.r[:2])
	}
	// Across the sequence wrap.
	b.reset()
	b.add(0xFFFFFF00, 0x10)
	b.add(0x20, 0x30)
	if s, e, ok := b.gap(0xFFFFFE00, 0x1000); !ok || s != 0xFFFFFE00 || e != 0xFFFFFF00 {
		t.Fatalf("wrap gap %x %x", s, e)
	}
	if s, e, ok := b.gap(0xFFFFFF80, 0x1000); !ok || s != 0x10 || e != 0x20 {
		t.Fatalf("wrap gap %x %x", s, e)
	}
}

// bulkRig is an established rig that has sent n full segments of 1448
// bytes from sequence 1000 into a 64 KiB window; at(i) is where segment i
// starts, sent what went out.
func bulkRig(t *testing.T, n int) (r *rig, at func(int) uint32, sent []outSeg) {
	t.Helper()
	r = newRig(t, defaultRigOpts())
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	const mss = 1448
	r.h.sendTotal = int64(n * mss)
	r.h.txSize = 16 << 10
	r.h.start()
	return r, func(i int) uint32 { return 1000 + uint32(i)*mss }, r.take()
}

// Three holes in one window: SACK-driven recovery retransmits each hole as
// duplicate ACKs arrive, without waiting a round trip per hole.
func TestSACKRecovery(t *testing.T) {
	r, at, sent := bulkRig(t, 10)
	if n := len(sent); n != 10 {
		t.Fatalf("%d segments", n)
	}
	blocks := func(k int) []sackBlock { // segments 1, 3 and 5 lost; 2, 4, 6.. arrive
		b := []sackBlock{{seq(at(6)), seq(at(6 + k))}, {seq(at(4)), seq(at(5))}, {seq(at(2)), seq(at(3))}}
		return b
	}
	r.in(pseg{seq: 5000, ack: at(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	var rtx []uint32
	for k := 1; k <= 4; k++ {
		r.in(pseg{seq: 5000, ack: at(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: blocks(k)})
		for _, s := range r.take() {
			if len(s.payload) > 0 {
				rtx = append(rtx, uint32(s.seq))
			}
		}
	}
	want := []uint32{at(1), at(3), at(5)}
	if len(rtx) < 3 || rtx[0] != want[0] || rtx[1] != want[1] || rtx[2] != want[2] {
		t.Fatalf("retransmitted %v, want %v first", rtx, want)
	}
	// The partial ACK for hole 1 retransmits nothing again.
	r.in(pseg{seq: 5000, ack: at(3), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: blocks(4)})
	for _, s := range r.take() {
		if uint32(s.seq) < at(6) && len(s.payload) > 0 {
			t.Fatalf("segment at %d sent again", s.seq)
		}
	}
	r.in(pseg{seq: 5000, ack: at(10), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if r.info().InRecovery || r.e.Counters().TxRetransSegs != 3 {
		t.Fatalf("retransmissions %d", r.e.Counters().TxRetransSegs)
	}
}

// After a timeout the engine goes back to SND.UNA but skips SACKed data.
// (With less than three segments SACKed above the head and two duplicate
// ACKs, nothing says the head is lost before the RTO.)
func TestRTOSkipsSACKed(t *testing.T) {
	r, at, _ := bulkRig(t, 8)
	// Segments 0 and 1 lost; the peer holds 2-3 (two dup ACKs).
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(2)), seq(at(3))}}})
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(2)), seq(at(4))}}})
	r.take() // limited transmit has nothing new to send
	if r.info().InRecovery {
		t.Fatal("recovery on two segments SACKed")
	}
	r.advance(r.e.NextDeadline() - r.now)
	o := r.take()
	if len(o) != 1 || uint32(o[0].seq) != at(0) {
		t.Fatalf("after RTO: %d frames", len(o))
	}
	// The ACK for segment 0 opens the window to two segments: 1 goes, 2-3
	// (SACKed) do not, 4 does.
	r.in(pseg{seq: 5000, ack: at(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(2)), seq(at(4))}}})
	o = r.take()
	if len(o) != 2 || uint32(o[0].seq) != at(1) || uint32(o[1].seq) != at(4) {
		var got []uint32
		for _, s := range o {
			got = append(got, uint32(s.seq))
		}
		t.Fatalf("after the ACK: frames at %v, want %d and %d", got, at(1), at(4))
	}
	r.in(pseg{seq: 5000, ack: at(8), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if r.e.Counters().TxRetransSegs != 3 || r.info().SndUna != at(8) {
		t.Fatalf("retransmitted %d", r.e.Counters().TxRetransSegs)
	}
}

// A short hole between SACKed ranges after a timeout is resent at once, not
// held back by silly-window avoidance.
func TestRTOShortHole(t *testing.T) {
	r, at, _ := bulkRig(t, 6)
	// Segment 0 lost, and 100 bytes in the middle of segment 3.
	sack := []sackBlock{{seq(at(3) + 100), seq(at(6))}, {seq(at(1)), seq(at(3))}}
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: sack})
	r.take()
	r.advance(r.e.NextDeadline() - r.now)
	r.take() // segment 0 again
	// The slow-start window now allows two segments: the 100-byte hole.
	r.in(pseg{seq: 5000, ack: at(1), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: sack})
	o := r.take()
	if len(o) != 1 || uint32(o[0].seq) != at(3) || len(o[0].payload) != 100 {
		t.Fatalf("%d frames; want the 100-byte hole", len(o))
	}
}

// TestTailLossProbe: the last segment of a flight is lost and nothing is
// left to send, so no duplicate ACK can come; the engine probes with the
// last segment two round trips later (RFC 8985 §7), well before its RTO,
// and the ACK for it ends the episode without a timeout.
func TestTailLossProbe(t *testing.T) {
	r, at, sent := bulkRig(t, 4)
	if len(sent) != 4 {
		t.Fatalf("%d segments", len(sent))
	}
	r.advance(200e3)
	r.in(pseg{seq: 5000, ack: at(3), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: r.lastTSval()}) // segment 3 lost
	if r.e.Counters().RTTSamples == 0 {
		t.Fatal("no RTT sample")
	}
	wait := r.e.NextDeadline() - r.now
	if rto := r.info().RTO; wait <= 0 || wait >= rto {
		t.Fatalf("next timer in %d ns, RTO %d: no probe timer before the RTO", wait, rto)
	}
	r.advance(wait)
	o := r.take()
	if len(o) != 1 || uint32(o[0].seq) != at(3) || len(o[0].payload) == 0 {
		t.Fatalf("probe: %d frames", len(o))
	}
	if c := r.e.Counters(); c.TailLossProbes != 1 || c.RTOExpired != 0 {
		t.Fatalf("probes %d, RTOs %d", c.TailLossProbes, c.RTOExpired)
	}
	r.in(pseg{seq: 5000, ack: at(4), flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if c := r.e.Counters(); r.info().SndUna != at(4) || c.RTOExpired != 0 {
		t.Fatalf("after the probe's ACK: SND.UNA %d, RTOs %d", r.info().SndUna, c.RTOExpired)
	}
	r.expectNone("anything after the whole flight is acknowledged")
}

// TestSACKIsLost: two duplicate ACKs whose SACK blocks hold three segments
// above the head start recovery (RFC 6675 IsLost): a lost duplicate ACK
// does not leave the head to the RTO.
func TestSACKIsLost(t *testing.T) {
	r, at, _ := bulkRig(t, 8)
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(1)), seq(at(3))}}})
	if r.info().InRecovery {
		t.Fatal("recovery on one duplicate ACK with two segments SACKed")
	}
	r.take()
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(1)), seq(at(4))}}})
	if !r.info().InRecovery {
		t.Fatal("no recovery with three segments SACKed above the head")
	}
	o := r.take()
	if len(o) == 0 || uint32(o[0].seq) != at(0) {
		t.Fatalf("recovery did not resend the head first: %d frames", len(o))
	}
	if c := r.e.Counters(); c.SACKRecoveries != 1 || c.FastRetransmits != 1 {
		t.Fatalf("SACK recoveries %d, fast retransmits %d", c.SACKRecoveries, c.FastRetransmits)
	}
}

// TestSpuriousRTOUndo: nothing was lost, but the receiver held its ACKs
// past the RTO. The ACK after the timeout carries a D-SACK for the resent
// head (RFC 2883 §4): the engine puts its congestion window back and does
// not go back over data the peer has.
func TestSpuriousRTOUndo(t *testing.T) {
	r, at, sent := bulkRig(t, 8)
	r.advance(200e3)
	r.in(pseg{seq: 5000, ack: at(2), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: r.lastTSval()})
	r.take()
	cwnd := r.info().Cwnd
	r.advance(r.info().RTO + 1) // probes, then the timeout
	r.take()
	if c := r.e.Counters(); c.RTOExpired != 1 || c.TailLossProbes != maxProbes {
		t.Fatalf("RTOs %d, probes %d", c.RTOExpired, c.TailLossProbes)
	}
	if r.info().Cwnd >= cwnd {
		t.Fatalf("the RTO left the window at %d", r.info().Cwnd)
	}
	last := at(len(sent))
	r.in(pseg{seq: 5000, ack: last, flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(2)), seq(at(3))}}})
	if c := r.e.Counters(); c.SpuriousTimeouts != 1 {
		t.Fatalf("spurious RTOs %d", c.SpuriousTimeouts)
	}
	if got := r.info().Cwnd; got < cwnd {
		t.Fatalf("window %d after the undo, %d before the RTO", got, cwnd)
	}
	for _, s := range r.take() {
		if len(s.payload) > 0 && uint32(s.seq) < last {
			t.Fatalf("went back to %d after the D-SACK", s.seq)
		}
	}
	// A D-SACK for something else undoes nothing.
	r2, at2, _ := bulkRig(t, 8)
	r2.advance(200e3)
	r2.in(pseg{seq: 5000, ack: at2(2), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: r2.lastTSval()})
	r2.advance(r2.info().RTO + 1)
	r2.take()
	r2.in(pseg{seq: 5000, ack: at2(4), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at2(0)), seq(at2(1))}}})
	if c := r2.e.Counters(); c.SpuriousTimeouts != 0 {
		t.Fatal("a D-SACK below the resent head undid the RTO")
	}
}

// TestBurstAck: inside a receive burst (BeginBurst/EndBurst) in-order
// segments are acknowledged once, at the end; at most maxStretch wait; an
// out-of-order segment is still acknowledged at once.
func TestBurstAck(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.take()
	acks := func() int {
		n := 0
		for _, s := range r.take() {
			if len(s.payload) == 0 && s.has(hdr.TCPFlagACK) {
				n++
			}
		}
		return n
	}
	seq := uint32(5000)
	data := make([]byte, 1000)
	r.e.BeginBurst()
	for i := 0; i < 10; i++ {
		r.in(pseg{seq: seq, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: data})
		seq += uint32(len(data))
	}
	if n := acks(); n != 0 {
		t.Fatalf("%d ACKs inside the burst", n)
	}
	r.e.EndBurst(r.now)
	if n := acks(); n != 1 {
		t.Fatalf("%d ACKs at the end of the burst, want 1", n)
	}
	r.e.BeginBurst()
	for i := 0; i < maxStretch+1; i++ {
		r.in(pseg{seq: seq, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: data})
		seq += uint32(len(data))
	}
	if n := acks(); n != 1 {
		t.Fatalf("%d ACKs for %d segments in a burst, want 1 (at %d)", n, maxStretch+1, maxStretch)
	}
	r.in(pseg{seq: seq + 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: data}) // out of order
	if n := acks(); n != 1 {
		t.Fatalf("an out-of-order segment in a burst: %d ACKs, want 1 at once", n)
	}
	r.e.EndBurst(r.now)
}

// fakeTSO is a TSOEnv in front of the rig's transmit.
type fakeTSO struct {
	max  int
	mss  []int
	send func([]byte) error
}

func (f *fakeTSO) TSOMax() int { return f.max }
func (f *fakeTSO) TransmitTSO(frame []byte, mss int) error {
	f.mss = append(f.mss, mss)
	return f.send(frame)
}

// TestTSOSuperFrames: with a port that segments TCP, new data goes out in
// super-frames of whole segments within the congestion window, each
// handed over with the segment size.
func TestTSOSuperFrames(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	f := &fakeTSO{max: 64000, send: r.env.transmit}
	r.e.setTSO(f)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	const mss = 1448
	r.h.sendTotal = 40 * mss
	r.h.txSize = 64 << 10
	r.h.start()
	o := r.take()
	var total int
	for _, s := range o {
		total += len(s.payload)
	}
	if len(o) == 0 || len(o[0].payload) <= mss || len(f.mss) == 0 || f.mss[0] != mss || len(o[0].payload)%mss != 0 {
		t.Fatalf("first flight: %d frames, first %d bytes, segment sizes %v", len(o), len(o[0].payload), f.mss)
	}
	if cw := r.info().Cwnd; uint32(total) > cw {
		t.Fatalf("%d bytes in flight, window %d", total, cw)
	}
	if c := r.e.Counters(); c.TSOFrames != uint64(len(f.mss)) || c.TxSegments != uint64(len(o)) {
		t.Fatalf("TSO frames %d (%d handed over), segments %d (%d sent)", c.TSOFrames, len(f.mss), c.TxSegments, len(o))
	}
	// The limit: whole segments up to the port's, or one without TSO.
	r2 := newRig(t, defaultRigOpts())
	r2.e.setTSO(&fakeTSO{max: 64000, send: r2.env.transmit})
	if got := r2.e.conns[0].sendLimit(mss); got != 64000/mss*mss {
		t.Fatalf("send limit %d", got)
	}
	r2.e.setTSO(nil)
	if got := r2.e.conns[0].sendLimit(mss); got != mss {
		t.Fatalf("send limit without TSO %d", got)
	}
}
