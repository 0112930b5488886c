//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack/services"
)

// Loss on a TAP as a link loses frames: whole super-frames, either way, and
// a loss each sender sees as one.
//
// nftables in the kernel's namespace (injectLoss) makes that loss for what
// the emulated host sends: a super-frame dropped on the kernel's input is
// gone. It does not for what the kernel sends. A packet the kernel's own
// output path drops (any nftables hook on output or postrouting, a tc
// egress filter) is reported to its TCP as a failed transmission: the
// segments stay unsent and go at the next chance, with no retransmission
// counted and no window cut (TcpRetransSegs stays 0 over hundreds of such
// drops). So the loss of the kernel's super-frames is made on the far side of
// the TAP instead, by the port (TAPOptions.RxLossPercent): a frame the kernel
// handed to the interface and that never arrives.

// newTAPWireLossLab is a lab whose TAP loses pct percent of super-frames
// each way, both as a real loss: the kernel's on the port's receive side,
// the emulated host's on the kernel's input (nftables). Skips without nft.
func newTAPWireLossLab(t testing.TB, subnet byte, pct int, seed uint64) *tapOffloadLab {
	t.Helper()
	lab := newTAPOffloadLabWith(t, subnet, port.TAPOptions{RxLossPercent: float64(pct), LossSeed: seed})
	lab.injectLossOn(t, pct, "input")
	return lab
}

// serveDelegated serves discard and source on the lab's host, delegated,
// until the test ends.
func (l *tapOffloadLab) serveDelegated(t testing.TB) {
	t.Helper()
	for _, svc := range []struct {
		srv  *services.Server
		port uint16
	}{{services.NewDiscard(nil), services.DiscardPort}, {services.NewSource(nil), services.SourcePort}} {
		ln, err := l.host.ListenOffload(svc.port)
		if err != nil {
			t.Fatal(err)
		}
		go svc.srv.Serve(ln)
		t.Cleanup(func() { svc.srv.Close() })
	}
}

// kernelTCP returns the namespace's TCP counters named (nstat's names, e.g.
// TcpRetransSegs), absolute; a counter nstat does not print is 0.
func (l *tapOffloadLab) kernelTCP(t testing.TB, names ...string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("ip", append([]string{"netns", "exec", l.ns.name, "nstat", "-asz"}, names...)...).CombinedOutput()
	if err != nil {
		t.Skipf("skipped: nstat in the namespace: %v: %s", err, bytes.TrimSpace(out))
	}
	m := make(map[string]uint64, len(names))
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 {
			var v uint64
			if _, err := fmt.Sscan(f[1], &v); err == nil {
				m[f[0]] = v
			}
		}
	}
	return m
}

// TestTAPOffloadBurstLoss moves 256 MiB each way at once between a delegated
// connection and the kernel over a TAP that loses 2% of super-frames each way
// (up to 44 segments in a row), both losses real: the kernel's sender must
// retransmit too (its TcpRetransSegs), which nftables alone cannot make it do
// (see above). Both directions arrive intact.
func TestTAPOffloadBurstLoss(t *testing.T) {
	lab := newTAPWireLossLab(t, 101, 2, 1)
	ours, theirs := lab.acceptDelegated(t, 5207)
	k0 := lab.kernelTCP(t, "TcpRetransSegs", "TcpExtTCPSackRecovery")
	n := tapOffloadLossyBytes()
	el := twoWay(t, ours, theirs, n)
	ours.Close()
	theirs.Close()
	k1 := lab.kernelTCP(t, "TcpRetransSegs", "TcpExtTCPSackRecovery")
	ps := lab.tap.Stats()
	in, _ := lab.nftInputDrops(t)
	lab.close()
	c := lab.engine()
	t.Logf("%d MiB each way in %v; the port lost %d of the kernel's reads (%d super-frames in all), nftables %d of the engine's",
		n>>20, el, ps.RxDropLoss, ps.RxGSOFrames, in)
	t.Logf("kernel: %d segments retransmitted, %d SACK recoveries; engine: %d retransmitted, %d recoveries, %d RTOs, %d probes",
		k1["TcpRetransSegs"]-k0["TcpRetransSegs"], k1["TcpExtTCPSackRecovery"]-k0["TcpExtTCPSackRecovery"],
		c.TxRetransSegs, c.FastRetransmits, c.RTOExpired, c.TailLossProbes)
	if ps.RxDropLoss == 0 || in == 0 {
		t.Fatalf("the port dropped %d reads and nftables %d packets: the loss was not injected", ps.RxDropLoss, in)
	}
	if n >= 64<<20 && k1["TcpRetransSegs"] == k0["TcpRetransSegs"] {
		t.Errorf("the kernel retransmitted nothing after %d of its super-frames were lost", ps.RxDropLoss)
	}
	if c.TxRetransSegs == 0 {
		t.Errorf("the engine retransmitted nothing after %d of its packets were dropped", in)
	}
	if c.DropBadChecksum != 0 || c.DMAErrors != 0 || c.Timeouts != 0 {
		t.Errorf("engine: DropBadChecksum %d, DMAErrors %d, Timeouts %d; want 0", c.DropBadChecksum, c.DMAErrors, c.Timeouts)
	}
}

// nftInputDrops is the input rule's packet count (injectInputLoss).
func (l *tapOffloadLab) nftInputDrops(t testing.TB) (uint64, error) {
	b, err := exec.Command("ip", "netns", "exec", l.ns.name, "nft", "list", "chain", "inet", "emuloss", "in").CombinedOutput()
	if err != nil {
		t.Errorf("nft list chain: %v: %s", err, bytes.TrimSpace(b))
		return 0, err
	}
	f := strings.Fields(string(b))
	for i := 0; i+1 < len(f); i++ {
		if f[i] == "packets" {
			var v uint64
			fmt.Sscan(f[i+1], &v)
			return v, nil
		}
	}
	return 0, nil
}
