package tests

import (
	"testing"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// Burst loss as a TAP makes it: the kernel drops a TCP super-frame whole, up
// to 44 segments in a row, so a wire of single segments loses 2% of its
// frames in runs of 44 (port.Impairments.LossBurst). Each test moves 256 MiB
// each way at once on one delegated connection and checks both hashes
// (bothWaysOn); -short moves 16 MiB.

// burstLossWire is the wire: 2% of frames lost each way in bursts of 44.
func burstLossWire(seed uint64) port.WireConfig {
	imp := port.Impairments{LossPercent: 2, LossBurst: 44}
	return port.WireConfig{Seed: seed, AToB: imp, BToA: imp}
}

func burstLossBytes() int64 {
	if testing.Short() {
		return 16 << 20
	}
	return 256 << 20
}

// TestDelegatedBurstLoss: both devices in this process.
func TestDelegatedBurstLoss(t *testing.T) {
	r := hostrig.New(t, hostrig.Config{Wire: burstLossWire(25)})
	bothWaysOn(t, r.A, r.B, 6010, burstLossBytes())
	checkBurstLoss(t, r)
}

// TestSplitBurstLoss: each device in a process of its own.
func TestSplitBurstLoss(t *testing.T) {
	split := func(c *board.HostConfig) { c.Split = &board.SplitConfig{} }
	r := hostrig.New(t, hostrig.Config{Wire: burstLossWire(26), HostA: split, HostB: split})
	bothWaysOn(t, r.A, r.B, 6305, burstLossBytes())
	checkBurstLoss(t, r)
}

// checkBurstLoss checks the wire lost frames each way and both engines
// resent: the transfer went through the loss, not around it; and that few
// recoveries were undone as needless, the wire reordering nothing.
func checkBurstLoss(t *testing.T, r *hostrig.Rig) {
	t.Helper()
	ea, eb := engineOf(t, r.A), engineOf(t, r.B)
	la, lb := r.PortA.Stats().TxDropLoss, r.PortB.Stats().TxDropLoss
	for _, e := range []struct {
		name string
		lost uint64
		c    tcpstack.EngineCounters
	}{{"A", la, ea}, {"B", lb, eb}} {
		t.Logf("%s: the wire lost %d of its frames; it retransmitted %d segments in %d recoveries (%d shown needless by D-SACKs), %d RTOs (%d needless), %d probes",
			e.name, e.lost, e.c.TxRetransSegs, e.c.FastRetransmits, e.c.SpuriousRecoveries, e.c.RTOExpired, e.c.SpuriousTimeouts, e.c.TailLossProbes)
		// The wire reorders nothing: a recovery undone by D-SACKs put
		// back a window that real loss had cut. Some are: a lost
		// retransmission resent while the first copy was only late, and
		// on a loaded machine (the race detector, tests beside this
		// one) ACKs late enough for an RTO whose retransmission the
		// D-SACK then shows needless; in a short run of ~20 recoveries
		// that has reached 5. An undo that fires wrongly undoes most.
		if e.c.SpuriousRecoveries*2 > e.c.FastRetransmits {
			t.Errorf("%s: %d of %d recoveries undone on a wire that only loses", e.name, e.c.SpuriousRecoveries, e.c.FastRetransmits)
		}
	}
	if la == 0 || lb == 0 || ea.TxRetransSegs == 0 || eb.TxRetransSegs == 0 {
		t.Errorf("wire lost %d and %d frames, engines resent %d and %d segments: want all non-zero", la, lb, ea.TxRetransSegs, eb.TxRetransSegs)
	}
	if ea.Timeouts != 0 || eb.Timeouts != 0 {
		t.Errorf("connection timeouts: A %d, B %d", ea.Timeouts, eb.Timeouts)
	}
}
