package delegation

import (
	"testing"

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
func recoveryRun(t *testing.T, o simOpts) (Counters, float64, int) {
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
	return c, secs, s.link.lost
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
				rtos, lost, secs = rtos+c.RTOExpired, lost+uint64(l), secs+s
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
