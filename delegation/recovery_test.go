package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// lossyOneWay is A sending size bytes to B over a link with a short round
// trip (100 µs, like a TAP to the local kernel) that loses pct of the
// frames each way at random.
func lossyOneWay(size int64, loss float64, seed uint64) simOpts {
	o := bulkOpts(size, false, seed)
	o.host[1].sendBytes = 0
	o.link.delay = 50e3
	o.link.loss = loss
	o.cfg.MinRTO = 20e6 // the hosts' default (board.DefaultMinRTO)
	return o
}

// recoveryRun runs a lossy one-way transfer and returns A's counters and
// the simulated seconds it took.
func recoveryRun(t *testing.T, o simOpts) (Counters, float64, *simLink) {
	t.Helper()
	s := newSim(t, o)
	s.start()
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
	s.checkHashes()
	c := s.eng[0].Counters()
	secs := float64(s.now-1e9) / 1e9
	t.Logf("%d MiB at %.0f%% loss: %.2f s simulated (%.1f MB/s); link lost %d frames; A: retransmitted %d segs, %d recoveries, %d partial ACKs, %d RTOs, %d probes",
		o.host[0].sendBytes>>20, o.link.loss*100, secs, float64(o.host[0].sendBytes)/secs/1e6, s.link.lost,
		c.TxRetransSegs, c.FastRetransmits, c.PartialAcks, c.RTOExpired, c.TailLossProbes)
	return c, secs, s.link
}

// TestRecoveryTwoPercent: at 2% loss each way on a short path, losses are
// repaired by the ACK clock (SACK recovery paced by PRR, detection of lost
// retransmissions, tail loss probes), not by the retransmission timer:
// fewer than one loss in 20 waits for an RTO, with either congestion
// control.
func TestRecoveryTwoPercent(t *testing.T) {
	size := int64(16 << 20)
	if testing.Short() || raceEnabled {
		size = 4 << 20
	}
	for _, algo := range []rings.CongestionControl{rings.CCCubic, rings.CCNewReno} {
		t.Run(algo.String(), func(t *testing.T) {
			var rtos, lost uint64
			var secs float64
			for seed := uint64(1); seed <= 8; seed++ {
				o := lossyOneWay(size, 0.02, seed)
				o.pair.cc = algo
				c, s, l := recoveryRun(t, o)
				rtos, lost, secs = rtos+c.RTOExpired, lost+uint64(l.lost), secs+s
			}
			t.Logf("all seeds: %d RTOs for %d frames lost, %.1f MB/s", rtos, lost, float64(8*size)/secs/1e6)
			if rtos*20 > lost {
				t.Errorf("%d RTOs for %d frames lost", rtos, lost)
			}
		})
	}
}

// TestReorderingUndone: a path that reorders 1% of the frames (by up to
// 200 µs) and loses none. Each reordering deep enough to look like a loss
// starts a fast recovery; the receiving engine reports the needless
// retransmissions with D-SACKs (RFC 2883), and the sender puts its window
// back (RFC 2883 §5): most recoveries are undone. RACK learns the path
// reorders and waits a reordering window before it marks a hole lost,
// widened by each D-SACK round, up to SRTT; reordering deeper than that
// (200 µs on a path of about 100) still costs a needless recovery.
func TestReorderingUndone(t *testing.T) {
	size := int64(8 << 20)
	if testing.Short() || raceEnabled {
		size = 2 << 20
	}
	var rec, undone uint64
	for seed := uint64(1); seed <= 3; seed++ {
		o := lossyOneWay(size, 0, seed)
		o.link.reorder = 0.01
		o.link.jitter = 200e3
		c, secs, _ := recoveryRun(t, o)
		t.Logf("seed %d: %d recoveries, %d undone, %d RTOs, %.1f MB/s", seed, c.FastRetransmits, c.SpuriousRecoveries, c.RTOExpired, float64(size)/secs/1e6)
		rec, undone = rec+c.FastRetransmits, undone+c.SpuriousRecoveries
	}
	if rec == 0 || undone*2 < rec {
		t.Errorf("%d of %d recoveries undone, want most", undone, rec)
	}
}

// burstSeg is the sequence number and payload length of a data frame
// towards B (side 1) on the sim link; ok false for anything else.
func burstSeg(to int, f []byte) (sq seq, n int, ok bool) {
	off := hdr.EthernetSize + netHdrLen
	if to != 1 || len(f) <= off+hdr.TCPMinSize {
		return 0, 0, false
	}
	tcp := hdr.TCP(f[off:])
	n = len(f) - off - tcp.HeaderLen()
	return seq(tcp.Seq()), n, n > 0
}

// burstCase drops, from A's transfer to B, the 44 segments (one TSO
// super-frame) that start at offset from the initial sequence number, on
// their first transmission, and the first again times' of the first
// retransmission of each segment (again 0: every retransmission arrives).
// It returns A's counters and what its first recovery did to the window.
func burstCase(t *testing.T, size int64, offset uint32, again int) (Counters, prrTrace) {
	t.Helper()
	const burst, mss = 44, 1448
	o := lossyOneWay(size, 0, 1)
	// A sender limited by its congestion window alone, so that what
	// PRR allows is what it sends: data queued past a receive window
	// wider than the flight.
	o.host[0].txBufs, o.pair.rcvBufB, o.host[1].userBufs = 128, 4<<20, 64
	o.cfg.OOOLimit, o.cfg.OOOPoolBytes = 4<<20, 8<<20
	s := newSim(t, o)
	lo := seq(o.pair.issA + 1 + offset)
	hi := lo.Add(burst * mss)
	sent := map[seq]int{}
	s.link.drop = func(to int, f []byte) bool {
		sq, _, ok := burstSeg(to, f)
		if !ok || sq.LessThan(lo) || !sq.LessThan(hi) {
			return false
		}
		sent[sq]++
		return sent[sq] == 1 || sent[sq] == 2 && again > 0 && sq.LessThan(lo.Add(uint32(again)*mss))
	}
	var pt prrTrace
	s.hook = func() { pt.observe(s.eng[0]) }
	s.start()
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 60e9)
	s.checkHashes()
	c := s.eng[0].Counters()
	if d := s.eng[1].Counters().OOOBytesDropped; d != 0 {
		// B holds out-of-order data over its whole window (OOOLimit),
		// so A resends only what was lost: with 256 KiB it refused
		// 785 KB behind this burst, and A resent 587 segments.
		t.Fatalf("B refused %d out-of-order bytes", d)
	}
	dropped := 0
	for _, k := range sent {
		dropped += min(k, 2)
	}
	t.Logf("offset %d, %d lost again: %d segments of the burst sent; A: %d retransmitted, %d recoveries, %d RACK marks, %d probes, %d lost retransmissions, %d RTOs",
		offset, again, dropped, c.TxRetransSegs, c.FastRetransmits, c.RACKLost, c.TailLossProbes, c.LostRetransmits, c.RTOExpired)
	if len(sent) < burst {
		t.Fatalf("the burst's %d segments were sent as %d frames: the transfer does not send whole segments there", burst, len(sent))
	}
	return c, pt
}

// prrTrace is what A's first fast recovery did to its window, seen at every
// step of the simulation.
type prrTrace struct {
	in, done   bool
	recoverFS  uint32 // bytes in flight when it began
	ssthresh   uint32
	exitCwnd   uint32 // cwnd when it ended
	maxOverrun int64  // the most recovery sent beyond PRR's allowance (RFC 6937: 0)
	steps      int    // steps seen in recovery
}

func (p *prrTrace) observe(e *Engine) {
	if p.done {
		return
	}
	for _, c := range e.conns {
		if c == nil || !c.inUse {
			continue
		}
		switch {
		case c.inRecovery:
			p.in, p.recoverFS, p.ssthresh = true, c.cc.recoverFS, c.ssthresh
			// RFC 6937: while pipe is above ssthresh, recovery sends
			// at most its proportional share of what was delivered
			// (ssthresh/RecoverFS of it); below, it may send more but
			// never takes pipe past ssthresh. A segment of slack for
			// the fast retransmit, which goes whatever the share.
			mss := int64(c.maxPayload())
			share := (int64(c.cc.prrDelivered)*int64(c.ssthresh)+int64(c.cc.recoverFS)-1)/int64(c.cc.recoverFS) + mss
			if over := int64(c.cc.prrOut) - share; over > 0 && int64(c.pipe()) > int64(c.ssthresh)+mss {
				p.maxOverrun = max(p.maxOverrun, over)
			}
			p.steps++
		case p.in:
			p.done, p.exitCwnd = true, c.cwnd
		}
	}
}

// TestBurstLossOneRecovery: a super-frame's 44 segments lost together in
// mid-flight are one loss episode. RACK marks all of them lost from the
// first ACK that SACKs what was sent after them (not one per round trip),
// one recovery resends each once, PRR paces it, and no timer is needed: one
// window cut, 44 retransmissions, no RTO, no probe.
func TestBurstLossOneRecovery(t *testing.T) {
	c, p := burstCase(t, 8<<20, 2<<20, 0)
	if c.FastRetransmits != 1 || c.TxRetransSegs != 44 || c.RTOExpired != 0 || c.TailLossProbes != 0 {
		t.Errorf("%d recoveries, %d segments resent, %d RTOs, %d probes; want 1, 44, 0, 0",
			c.FastRetransmits, c.TxRetransSegs, c.RTOExpired, c.TailLossProbes)
	}
	// One window cut for the 44 losses (CUBIC's β 0.7 of what was in
	// flight), and PRR brought the window down to ssthresh by the end
	// without sending more than its allowance on the way.
	t.Logf("recovery: in flight %d, ssthresh %d, cwnd at the end %d, %d steps, %d bytes past PRR's allowance",
		p.recoverFS, p.ssthresh, p.exitCwnd, p.steps, p.maxOverrun)
	// (The window is seen after the step that ended recovery, whose
	// later ACKs may have grown it a little in congestion avoidance.)
	if !p.done || p.steps < 2 || p.ssthresh != uint32(float64(p.recoverFS)*cubicBeta) ||
		p.exitCwnd < p.ssthresh || p.exitCwnd > p.ssthresh+4*1448 || p.maxOverrun > 0 {
		t.Errorf("want one recovery over several steps, ssthresh %d, the window at ssthresh at the end, nothing past PRR's allowance",
			uint32(float64(p.recoverFS)*cubicBeta))
	}
}

// TestBurstLossRetransmissionsLostAgain: the same burst, and the first ten
// of its retransmissions lost as well. RACK sees each lost retransmission
// when one sent after it is delivered, and resends it in the same recovery:
// still one window cut, 54 retransmissions, no RTO.
func TestBurstLossRetransmissionsLostAgain(t *testing.T) {
	c, _ := burstCase(t, 8<<20, 2<<20, 10)
	if c.FastRetransmits != 1 || c.TxRetransSegs != 54 || c.RTOExpired != 0 {
		t.Errorf("%d recoveries, %d segments resent, %d RTOs; want 1, 54, 0", c.FastRetransmits, c.TxRetransSegs, c.RTOExpired)
	}
}

// TestBurstLossAtTheTail: the burst is the last 44 segments of the
// transfer, so nothing sent after it can be SACKed. The tail loss probe
// finds it (RFC 8985 §7) and recovery resends it: no RTO.
func TestBurstLossAtTheTail(t *testing.T) {
	const size = 4 << 20
	c, _ := burstCase(t, size, size-44*1448, 0)
	if c.TailLossProbes == 0 || c.RTOExpired != 0 || c.TxRetransSegs > 44+2 {
		t.Errorf("%d probes, %d RTOs, %d segments resent; want a probe, no RTO, the burst resent once",
			c.TailLossProbes, c.RTOExpired, c.TxRetransSegs)
	}
}

// TestBurstLossTwoPercent: 2% of A's data segments lost in bursts of 44
// (2% of super-frames, as on a TAP), ACKs lost at 2% one by one: the
// transfer completes intact, each burst costs one recovery at most (never
// one per segment: two when a burst straddles a recovery's end), and fewer
// than one burst in ten waits for an RTO.
func TestBurstLossTwoPercent(t *testing.T) {
	size := int64(64 << 20)
	if testing.Short() || raceEnabled {
		size = 8 << 20
	}
	for seed := uint64(1); seed <= 3; seed++ {
		o := lossyOneWay(size, 0.02, seed)
		o.link.burst = 44
		c, secs, l := recoveryRun(t, o)
		t.Logf("seed %d: %.0f MB/s; %d bursts; A: %d retransmitted, %d recoveries (%d undone), %d probes, %d RTOs",
			seed, float64(size)/secs/1e6, l.bursts, c.TxRetransSegs, c.FastRetransmits, c.SpuriousRecoveries, c.TailLossProbes, c.RTOExpired)
		if l.bursts == 0 {
			t.Fatalf("seed %d: no burst lost", seed)
		}
		if c.FastRetransmits > 2*uint64(l.bursts) || c.RTOExpired*10 > uint64(l.bursts) {
			t.Errorf("seed %d: %d recoveries and %d RTOs for %d bursts", seed, c.FastRetransmits, c.RTOExpired, l.bursts)
		}
	}
}

// TestTxLogMergedRangeDatesNothing: past maxTxRanges a transmission merges
// into the last range, dated by the later time. Delivered, that range
// gives no RTT sample and does not become RACK's latest delivered
// transmission: its bytes went at times it no longer knows, and a sample
// from it measured less than the path's RTT, which made RACK mark whole
// delivered flights lost (TestBurstLossRetransmissionsLostAgain, with a
// 1 MB flight).
func TestTxLogMergedRangeDatesNothing(t *testing.T) {
	c := &conn{sackOK: true}
	const mss = 1000
	at := func(i int) seq { return seq(1 + i*mss) }
	for i := 0; i <= maxTxRanges; i++ {
		c.tx.sent(at(i), at(i+1), int64(i)*1000, false) // one range each: a new time each
	}
	live := c.tx.live()
	if len(live) != maxTxRanges || !live[len(live)-1].merged || live[0].merged {
		t.Fatalf("%d ranges, last merged %v, first merged %v; want %d, the last merged",
			len(live), live[len(live)-1].merged, live[0].merged, maxTxRanges)
	}
	// Everything but the merged range is delivered: the latest of it,
	// range 1022, went at 1,022 µs, so RACK's RTT is 102 µs.
	var before scoreboard
	now := int64(maxTxRanges)*1000 + 100e3
	c.rackDelivered(now, at(maxTxRanges-1), &before)
	minRTT, ord := c.rack.minRTT, c.rack.ord
	if minRTT != 102e3 {
		t.Fatalf("min RTT %d, want 102000", minRTT)
	}
	// The merged range [at(1023), at(1025)) went at 1,023 and 1,024 µs,
	// dated 1,024: delivered 1 µs after the rest it would read as an RTT
	// of 101 µs, below the path's.
	c.rackDelivered(now+1000, at(maxTxRanges+1), &before)
	if c.rack.minRTT != minRTT || c.rack.ord != ord {
		t.Errorf("after the merged range's delivery: min RTT %d, order %d; want %d, %d", c.rack.minRTT, c.rack.ord, minRTT, ord)
	}
	if c.rack.fack != at(maxTxRanges+1) {
		t.Errorf("RACK.fack %d, want %d", c.rack.fack, at(maxTxRanges+1))
	}
}

// TestDSACKOutsideRecoveryNotCounted: a recovery is undone when D-SACKs
// have reported all it resent (RFC 2883 §5), but only D-SACKs inside its
// own sequence space count. One for a needless resend below it (an earlier
// episode's, or a tail probe's) does not: counted, it undid half the
// recoveries of a transfer losing 2% in bursts of 44.
func TestDSACKOutsideRecoveryNotCounted(t *testing.T) {
	c := &conn{e: &Engine{}, sackOK: true, sndUna: 10000, sndMax: 100000, cwnd: 90000, ssthresh: 1 << 30}
	c.recoveryUndoStart()
	c.ccLoss(c.sndMax.Sub(c.sndUna))
	c.inRecovery = true
	c.recoveryResent(2 * 1448) // two segments resent: [10000, 12896)
	c.dsack(5000, 6448)        // an older episode's needless resend
	c.dsack(100000, 101448)    // past what the recovery covers
	if c.cc.recUndoLeft != 2*1448 || c.e.ctr.SpuriousRecoveries != 0 {
		t.Fatalf("after D-SACKs outside the recovery: %d bytes left to report, %d undone", c.cc.recUndoLeft, c.e.ctr.SpuriousRecoveries)
	}
	c.dsack(9000, 11448) // half of it inside: the first resend
	c.dsack(11448, 12896)
	if c.cc.recUndoLeft != 0 || c.e.ctr.SpuriousRecoveries != 1 || c.cwnd != 90000 || c.inRecovery {
		t.Fatalf("after both resends were reported: %d left, %d undone, cwnd %d, in recovery %v; want 0, 1, 90000, false",
			c.cc.recUndoLeft, c.e.ctr.SpuriousRecoveries, c.cwnd, c.inRecovery)
	}
}

// TestTLPLossDetection is RFC 8985 §7.4 for the probe that resends the
// last segment: a D-SACK for the resend, or a pure duplicate ACK, says both
// copies arrived (no cut); an ACK past where SND.MAX stood at the probe,
// with no D-SACK on the way, says the probe repaired a loss (one cut, as
// for any congestion event); an ACK that reaches only that point decides
// nothing yet.
func TestTLPLossDetection(t *testing.T) {
	probed := func() *conn {
		c := &conn{e: &Engine{}, sackOK: true, mss: 1460, sndUna: 10000, sndMax: 40000, cwnd: 30000, ssthresh: 1 << 30, recover: 9999}
		c.tlpHigh, c.rack.tlpRtx = c.sndMax, true
		return c
	}
	for _, tc := range []struct {
		name        string
		ack         seq
		dsack, pure bool
		cut, open   bool // the window cut; the verdict still open
	}{
		{"dsack", 40000, true, false, false, false},
		{"pure duplicate", 10000, false, true, false, true}, // below tlpHigh: no verdict yet
		{"up to the probe", 40000, false, false, false, true},
		{"past the probe", 41448, false, false, true, false},
		{"past the probe with a D-SACK", 41448, true, false, false, false},
	} {
		c := probed()
		c.tlpAck(tc.ack, tc.dsack, tc.pure)
		if cut := c.cwnd < 30000; cut != tc.cut || c.rack.tlpRtx != tc.open {
			t.Errorf("%s: cwnd %d (cut %v, want %v), verdict open %v (want %v)", tc.name, c.cwnd, cut, tc.cut, c.rack.tlpRtx, tc.open)
		}
		if tc.cut && (c.ssthresh != uint32(30000*cubicBeta) || c.cwnd != c.ssthresh) {
			t.Errorf("%s: ssthresh %d, cwnd %d; want both %d", tc.name, c.ssthresh, c.cwnd, uint32(30000*cubicBeta))
		}
	}
	// A pure duplicate ACK at the probe point: both copies arrived.
	c := probed()
	c.sndUna = 40000
	c.tlpAck(40000, false, true)
	if c.rack.tlpRtx || c.cwnd != 30000 {
		t.Errorf("pure duplicate at the probe point: verdict open %v, cwnd %d", c.rack.tlpRtx, c.cwnd)
	}
	// In recovery the recovery's own cut covers the loss.
	c = probed()
	c.inRecovery = true
	c.tlpAck(41448, false, false)
	if c.rack.tlpRtx || c.cwnd != 30000 {
		t.Errorf("in recovery: verdict open %v, cwnd %d; want closed, no second cut", c.rack.tlpRtx, c.cwnd)
	}
}
