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
// It returns A's counters.
func burstCase(t *testing.T, size int64, offset uint32, again int) Counters {
	t.Helper()
	const burst, mss = 44, 1448
	o := lossyOneWay(size, 0, 1)
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
	return c
}

// TestBurstLossOneRecovery: a super-frame's 44 segments lost together in
// mid-flight are one loss episode. RACK marks all of them lost from the
// first ACK that SACKs what was sent after them (not one per round trip),
// one recovery resends each once, PRR paces it, and no timer is needed: one
// window cut, 44 retransmissions, no RTO, no probe.
func TestBurstLossOneRecovery(t *testing.T) {
	c := burstCase(t, 8<<20, 2<<20, 0)
	if c.FastRetransmits != 1 || c.TxRetransSegs != 44 || c.RTOExpired != 0 || c.TailLossProbes != 0 {
		t.Errorf("%d recoveries, %d segments resent, %d RTOs, %d probes; want 1, 44, 0, 0",
			c.FastRetransmits, c.TxRetransSegs, c.RTOExpired, c.TailLossProbes)
	}
}

// TestBurstLossRetransmissionsLostAgain: the same burst, and the first ten
// of its retransmissions lost as well. RACK sees each lost retransmission
// when one sent after it is delivered, and resends it in the same recovery:
// still one window cut, 54 retransmissions, no RTO.
func TestBurstLossRetransmissionsLostAgain(t *testing.T) {
	c := burstCase(t, 8<<20, 2<<20, 10)
	if c.FastRetransmits != 1 || c.TxRetransSegs != 54 || c.RTOExpired != 0 {
		t.Errorf("%d recoveries, %d segments resent, %d RTOs; want 1, 54, 0", c.FastRetransmits, c.TxRetransSegs, c.RTOExpired)
	}
}

// TestBurstLossAtTheTail: the burst is the last 44 segments of the
// transfer, so nothing sent after it can be SACKed. The tail loss probe
// finds it (RFC 8985 §7) and recovery resends it: no RTO.
func TestBurstLossAtTheTail(t *testing.T) {
	const size = 4 << 20
	c := burstCase(t, size, size-44*1448, 0)
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
		t.Logf("seed %d: %.0f MB/s; %d bursts; A: %d retransmitted, %d recoveries, %d probes, %d RTOs",
			seed, float64(size)/secs/1e6, l.bursts, c.TxRetransSegs, c.FastRetransmits, c.TailLossProbes, c.RTOExpired)
		if l.bursts == 0 {
			t.Fatalf("seed %d: no burst lost", seed)
		}
		if c.FastRetransmits > 2*uint64(l.bursts) || c.RTOExpired*10 > uint64(l.bursts) {
			t.Errorf("seed %d: %d recoveries and %d RTOs for %d bursts", seed, c.FastRetransmits, c.RTOExpired, l.bursts)
		}
	}
}
