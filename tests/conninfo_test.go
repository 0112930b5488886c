package tests

import (
	"crypto/sha256"
	"io"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// TestConnInfoUnderLoss: a delegated sender on a wire that loses frames in
// bursts; DelegatedConn.Info (QUERY_CONN) shows what its engine did about
// it, and its counts agree with what the same device published in its
// counter area (one connection on it, so the engine-wide totals are the
// connection's) and with the wire's own count of what it lost.
func TestConnInfoUnderLoss(t *testing.T) {
	imp := port.Impairments{LossPercent: 2, LossBurst: 8}
	r := hostrig.New(t, hostrig.Config{Wire: port.WireConfig{Seed: 41, AToB: imp}})
	ca, cb := delegatedPair(t, r.A, r.B, 6440)
	da := ca.(*tcpstack.DelegatedConn)
	before, err := da.Info()
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if !before.Device || before.State != rings.StateEstablished || before.Retransmits != 0 || before.MSS == 0 {
		t.Fatalf("a fresh connection: %+v", before)
	}

	n := int64(16 << 20)
	if testing.Short() {
		n = 4 << 20
	}
	got := make(chan [32]byte, 1)
	go func() {
		h := sha256.New()
		if _, err := io.CopyN(h, cb, n); err != nil {
			t.Error(err)
		}
		got <- [32]byte(h.Sum(nil))
	}()
	want := sendRandom(t, ca, n, 9)
	select {
	case g := <-got:
		if g != want {
			t.Fatal("the receiver's bytes differ")
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("stuck; engine A %+v", engineOf(t, r.A))
	}
	// Everything acknowledged: the sender is quiet.
	testutil.WaitFor(t, "the last ACK", func() bool { return da.HostInfo().BytesQueued == 0 })
	i, err := da.Info()
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	lost := r.PortA.Stats().TxDropLoss
	t.Logf("before: cwnd %d ssthresh %d; after %d MiB, %d frames lost: %+v", before.Cwnd, before.Ssthresh, n>>20, lost, i)
	if lost == 0 {
		t.Fatal("the wire lost nothing: the test shows nothing")
	}
	if i.Retransmits == 0 || i.DeviceFastRecoveries+i.RTOs == 0 {
		t.Errorf("the wire lost %d frames; the engine resent %d segments in %d recoveries and %d RTOs", lost, i.Retransmits, i.DeviceFastRecoveries, i.RTOs)
	}
	if i.Ssthresh >= before.Ssthresh || i.Ssthresh == 0 || i.Cwnd == 0 {
		t.Errorf("the window was never cut: ssthresh %d (at the start %d), cwnd %d", i.Ssthresh, before.Ssthresh, i.Cwnd)
	}
	if i.DeviceRTT <= 0 || i.DeviceRTT > time.Second || i.MinRTT <= 0 || i.MinRTT > i.DeviceRTT+i.DeviceRTTVar ||
		i.RTO < i.DeviceRTT {
		t.Errorf("RTT implausible: srtt %v rttvar %v min %v RTO %v", i.DeviceRTT, i.DeviceRTTVar, i.MinRTT, i.RTO)
	}
	if i.BytesAcked != uint64(n) || i.SndUna != i.SndNxt || i.BytesInFlight != 0 || i.SegsOut < uint64(n)/uint64(i.MSS) {
		t.Errorf("sender's numbers: %+v", i)
	}
	// The host saw a DUP_ACK for each recovery the engine entered
	// (notifications merged while the ring was full carry one for
	// several).
	if i.FastRecoveries == 0 || i.FastRecoveries > i.DeviceFastRecoveries || i.DeviceErrors != 0 {
		t.Errorf("the host counted %d recoveries and %d device errors, the engine %d recoveries", i.FastRecoveries, i.DeviceErrors, i.DeviceFastRecoveries)
	}

	// The counter area, once it covers everything done so far.
	_, gen := r.A.CountersSettled(0)
	testutil.WaitFor(t, "the counter area to settle", func() bool { ok, _ := r.A.CountersSettled(gen); return ok })
	e := engineOf(t, r.A)
	if e.TxRetransSegs != i.Retransmits || e.FastRetransmits != i.DeviceFastRecoveries || e.RTOExpired != i.RTOs ||
		e.TailLossProbes != i.TailLossProbes || e.TxSegments != i.SegsOut {
		t.Errorf("the connection's counts (retrans %d, recoveries %d, RTOs %d, TLPs %d, segments out %d) differ from the device's counter area (%d, %d, %d, %d, %d)",
			i.Retransmits, i.DeviceFastRecoveries, i.RTOs, i.TailLossProbes, i.SegsOut,
			e.TxRetransSegs, e.FastRetransmits, e.RTOExpired, e.TailLossProbes, e.TxSegments)
	}
	// A frame the wire lost is a segment the engine had to send again
	// (each frame one segment: no super-frames on this wire).
	if e.TSOFrames == 0 && i.Retransmits < lost {
		t.Errorf("the wire lost %d segments; the engine resent %d", lost, i.Retransmits)
	}
	if s := r.A.Driver.Stats(); s.ConnQueries < 2 || s.ConnQueryBad != 0 {
		t.Errorf("driver: %d queries, %d rejected", s.ConnQueries, s.ConnQueryBad)
	}

	// Released: Info says so, and still gives the host's view.
	ca.Close()
	cb.Close()
	testutil.WaitFor(t, "the release", func() bool { _, err := da.Info(); return err != nil })
	if _, err := da.Info(); err == nil {
		t.Error("Info of a closed connection gave no error")
	}
}
