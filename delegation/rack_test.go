package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// rackRig is an established rig that has sent its first flight of full
// segments (1448 bytes from sequence 1000, more data waiting) and measured
// a 10 ms round trip; at(i) is where segment i starts, ts the TSval the
// flight went with (for the peer to echo), first the flight's size.
func rackRig(t *testing.T, segs int) (r *rig, at func(int) uint32, ts uint32, first int) {
	t.Helper()
	r, at, sent := bulkRig(t, segs)
	ts = r.lastTSval()
	r.advance(10e6)
	return r, at, ts, len(sent)
}

// sent returns the starts of the data segments in o.
func sentSeqs(o []outSeg) []uint32 {
	var s []uint32
	for _, x := range o {
		if len(x.payload) > 0 {
			s = append(s, uint32(x.seq))
		}
	}
	return s
}

// TestRACKLostRetransmission is RFC 8985 §3.3's case: the retransmission of
// a hole is lost too. A segment sent after it (new data that recovery let
// out) is SACKed while the hole stays missing, so RACK marks the
// retransmission lost and sends it again at once, without the timeout that
// RFC 6675's rules would have waited for.
func TestRACKLostRetransmission(t *testing.T) {
	r, at, ts, first := rackRig(t, 40)
	if first < 8 {
		t.Fatalf("first flight of %d segments", first)
	}
	// Segment 0 lost; 1..4 SACKed: recovery, segment 0 resent (R0).
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts, sack: []sackBlock{{seq(at(1)), seq(at(5))}}})
	o := r.take()
	if !r.info().InRecovery || len(o) == 0 || uint32(o[0].seq) != at(0) {
		t.Fatalf("no recovery with segment 0 resent first: %v", sentSeqs(o))
	}
	// The rest of the flight arrives; PRR lets new data out after R0.
	newer := sentSeqs(o)[1:]
	for k := 5; k < first; k++ {
		r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts, sack: []sackBlock{{seq(at(1)), seq(at(k + 1))}}})
		for _, s := range sentSeqs(r.take()) {
			if s == at(0) {
				t.Fatalf("segment 0 resent again before anything sent after R0 was delivered")
			}
			newer = append(newer, s)
		}
	}
	if len(newer) == 0 || newer[0] < at(first) {
		t.Fatalf("recovery sent %v, want new data", newer)
	}
	r.advance(10e6)
	// R0 is lost; everything else, sent before and after it, arrives.
	lostBefore := r.e.Counters().RACKLost
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts,
		sack: []sackBlock{{seq(at(1)), seq(at(first) + uint32(len(newer))*1448)}}})
	o = r.take()
	if s := sentSeqs(o); len(s) == 0 || s[0] != at(0) {
		t.Fatalf("R0 lost: sent %v, want segment 0 again first", s)
	}
	c := r.e.Counters()
	if c.RACKLost <= lostBefore || c.RTOExpired != 0 {
		t.Fatalf("RACK marked %d ranges lost (%d before), %d RTOs", c.RACKLost, lostBefore, c.RTOExpired)
	}
	// Everything arrives: recovery ends, nothing else was resent.
	r.in(pseg{seq: 5000, ack: at(first) + uint32(len(newer))*1448, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if r.info().InRecovery {
		t.Fatalf("still in recovery: %+v", r.info())
	}
	if n := r.e.Counters().TxRetransSegs; n != 2 {
		t.Errorf("%d retransmissions, want R0 and R0 again", n)
	}
}

// TestRACKReorderingWindow: a hole with one segment SACKed above it is not
// lost at once (RFC 8985 §6.2: the reordering window, a quarter of the
// minimum RTT, before DupThresh segments are SACKed); the missing segment
// arriving inside the window costs nothing and shows the path reorders.
// From then on even three SACKed segments above a hole wait out the window
// (the reordering timer), and the timer, not the RTO, resends it.
func TestRACKReorderingWindow(t *testing.T) {
	r, at, ts, first := rackRig(t, 60)
	if first < 8 {
		t.Fatalf("first flight of %d segments", first)
	}
	r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts, sack: []sackBlock{{seq(at(1)), seq(at(2))}}})
	if r.info().InRecovery {
		t.Fatal("recovery on one segment SACKed, inside the reordering window")
	}
	for _, s := range sentSeqs(r.take()) {
		if s < at(first) {
			t.Fatalf("segment at %d resent inside the reordering window", s)
		}
	}
	// Segment 0 was only late: it and 1 are acknowledged 1 ms later.
	r.advance(1e6)
	r.in(pseg{seq: 5000, ack: at(2), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts})
	r.take()
	if c := r.e.Counters(); c.TxRetransSegs != 0 || c.FastRetransmits != 0 {
		t.Fatalf("a reordered segment cost %d retransmissions", c.TxRetransSegs)
	}
	// Acknowledge the first flight; the next one goes.
	r.in(pseg{seq: 5000, ack: at(first), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts})
	o := r.take()
	if len(o) < 5 {
		t.Fatalf("second flight of %d segments", len(o))
	}
	h := int((uint32(o[0].seq) - 1000) / 1448) // its first segment
	ts2 := r.lastTSval()
	r.advance(10e6)
	// Now three segments above a hole: reordering was seen, so the window
	// still applies.
	r.in(pseg{seq: 5000, ack: at(h), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts2, sack: []sackBlock{{seq(at(h + 1)), seq(at(h + 4))}}})
	for _, s := range sentSeqs(r.take()) {
		if s < at(h+len(o)) {
			t.Fatalf("segment at %d resent inside the reordering window after reordering was seen", s)
		}
	}
	if r.info().InRecovery {
		t.Fatal("recovery inside the reordering window")
	}
	// The window passes: the reordering timer marks the hole lost.
	wait := r.e.NextDeadline() - r.now
	if rto := r.info().RTO; wait <= 0 || wait >= rto || wait > 5e6 {
		t.Fatalf("next timer in %d ns (RTO %d): no reordering timer", wait, rto)
	}
	r.advance(wait)
	if s := sentSeqs(r.take()); len(s) == 0 || s[0] != at(h) {
		t.Fatalf("after the reordering timer: sent %v, want the hole %d first", s, at(h))
	}
	if c := r.e.Counters(); c.RACKTimeouts != 1 || c.RTOExpired != 0 || !r.info().InRecovery {
		t.Fatalf("reordering timeouts %d, RTOs %d, in recovery %v", c.RACKTimeouts, c.RTOExpired, r.info().InRecovery)
	}
}

// TestTxLog: the transmission log keeps [SND.UNA, SND.MAX) as ranges in
// sequence order, merging a pass's ranges, splitting where a
// retransmission overwrites, trimming below SND.UNA.
// TestTxLogBounded: a log stops growing at maxTxRanges (a new range then
// merges into the last), and a slot's next life keeps at most keepTxRanges
// of what it allocated.
func TestTxLogBounded(t *testing.T) {
	var l txLog
	for i := range seq(3 * maxTxRanges) {
		l.sent(i*10, i*10+10, int64(i), false) // a pass each: a range each
	}
	live := l.live()
	if len(live) != maxTxRanges || live[0].start != 0 || live[len(live)-1].end != 3*maxTxRanges*10 {
		t.Fatalf("%d ranges [%v, %v), want %d covering all", len(live), live[0].start, live[len(live)-1].end, maxTxRanges)
	}
	l.reset()
	if cap(l.r) > keepTxRanges || len(l.live()) != 0 {
		t.Fatalf("after reset: %d ranges, %d allocated; want none, at most %d", len(l.live()), cap(l.r), keepTxRanges)
	}
	var small txLog
	for i := range seq(8) {
		small.sent(i*10, i*10+10, int64(i), false)
	}
	c := cap(small.r)
	small.reset()
	if cap(small.r) != c {
		t.Errorf("a small log's array was not kept: cap %d, was %d", cap(small.r), c)
	}
}

func TestTxLog(t *testing.T) {
	var l txLog
	l.sent(100, 200, 1, false)
	l.sent(200, 300, 1, false) // same pass: merged
	l.sent(300, 400, 2, false)
	if live := l.live(); len(live) != 2 || live[0].end != 300 || live[1].start != 300 {
		t.Fatalf("after sends: %+v", live)
	}
	l.sent(150, 250, 3, true) // inside the first range
	live := l.live()
	if len(live) != 4 || live[0].end != 150 || live[1].start != 150 || live[1].end != 250 || !live[1].rtx || live[2].start != 250 || live[2].rtx {
		t.Fatalf("after a retransmission: %+v", live)
	}
	if live[1].ord <= live[3].ord {
		t.Errorf("the retransmission is not ordered after the later range: %+v", live)
	}
	l.sent(120, 350, 4, true) // across three ranges
	if live := l.live(); len(live) != 3 || live[0].end != 120 || live[1].start != 120 || live[1].end != 350 || live[2].start != 350 || live[2].end != 400 {
		t.Fatalf("after a wide retransmission: %+v", live)
	}
	l.split(200)
	if live := l.live(); len(live) != 4 || live[1].end != 200 || live[2].start != 200 || live[1].ord != live[2].ord {
		t.Fatalf("after split: %+v", live)
	}
	l.trim(210)
	if live := l.live(); len(live) != 2 || live[0].start != 210 || live[0].end != 350 {
		t.Fatalf("after trim: %+v", live)
	}
	ord := l.ord
	l.trim(400)
	if len(l.live()) != 0 {
		t.Fatalf("after trimming everything: %+v", l.live())
	}
	// The order goes on past an empty log (RACK holds an order from
	// before: new ranges must come after it).
	l.sent(400, 500, 5, false)
	if live := l.live(); len(live) != 1 || live[0].ord <= ord {
		t.Fatalf("after trimming to empty, a new range has order %d, the last before %d", live[0].ord, ord)
	}
	// Bounded: past maxTxRanges a range merges into the last.
	for i := range maxTxRanges + 10 {
		l.sent(seq(1000+i*10), seq(1010+i*10), int64(i), i%2 == 0)
	}
	if n := len(l.live()); n != maxTxRanges {
		t.Errorf("%d ranges, want the bound %d", n, maxTxRanges)
	}
}
