//go:build linux

package tests

import (
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestTAPPortReuseServerFirst: the Linux kernel churns server-first (qotd)
// connections through 32 ephemeral ports, so nearly every connection
// reuses a 4-tuple whose old connection the server still holds in
// TIME_WAIT: the engine's record on the offload path, netstack's on the
// other. Linux comes back to a port within the millisecond of the old
// connection's last segment, with the same timestamp and a later
// sequence number, and every such SYN must open the new connection at
// once (RFC 6191), on both paths, over IPv4 and IPv6: no SYN is sent
// twice, none is dropped as the old flow's while the host has not yet
// released it, and every offload connection is delegated.
//
// Before, the engine answered a same-timestamp SYN with an ACK (the
// kernel reset and sent it again) and the host dropped a SYN that came
// before the old connection's release: one run of 2,000 lost ~520 SYNs
// to the first and 7 to the second, a 1 s retransmission each.
func TestTAPPortReuseServerFirst(t *testing.T) {
	t.Run("ipv4", func(t *testing.T) {
		lab := newTAPOffloadLab(t, 95)
		portReuseServerFirst(t, lab, lab.emu.Addr())
	})
	t.Run("ipv6", func(t *testing.T) {
		lab := newTAPOffloadLab6(t, 110, port.TAPOptions{})
		portReuseServerFirst(t, lab, lab.emu6.Addr())
	})
}

func portReuseServerFirst(t *testing.T, lab *tapOffloadLab, emu netip.Addr) {
	const ports, conc = 32, 8
	n := 2000
	if testing.Short() {
		n = 500
	}
	off, _ := lab.serveQOTDBoth(t)
	(&portRanges{ns: lab.ns}).set(t, 20000, 20000+ports-1)
	kernel := []string{"TcpExtTCPSynRetrans", "TcpOutRsts", "TcpAttemptFails"}
	for _, p := range []struct {
		name string
		port uint16
	}{{"netstack", qotdNetstackPort}, {"offload", services.QOTDPort}} {
		k0, e0, d0 := lab.kernelTCP(t, kernel...), lab.engine(), lab.host.Driver.Stats()
		if err := kernelConns(lab.ns, netip.AddrPortFrom(emu, p.port), n, conc, readQuote); err != nil {
			t.Fatalf("%s: %v", p.name, err)
		}
		k1, e1, d1 := lab.kernelTCP(t, kernel...), lab.engine(), lab.host.Driver.Stats()
		for _, name := range kernel {
			if d := k1[name] - k0[name]; d != 0 {
				t.Errorf("%s path: the kernel's %s went up %d in %d connections", p.name, name, d, n)
			}
		}
		reopened := e1.TimeWaitReopened - e0.TimeWaitReopened
		t.Logf("%s path: %d connections through %d ports; engine TIME_WAIT entered %d, reopened %d; host flows reopened %d, frozen-flow drops in %d",
			p.name, n, ports, e1.TimeWaitEntered-e0.TimeWaitEntered, reopened, d1.FlowsReopened-d0.FlowsReopened, d1.FrozenDropsIn-d0.FrozenDropsIn)
		if d := d1.FrozenDropsIn - d0.FrozenDropsIn; d != 0 {
			t.Errorf("%s path: %d frames dropped as a frozen flow's", p.name, d)
		}
		if p.name == "offload" {
			// The kernel's connect takes ports at random from the
			// range: nearly all of n are reuses.
			if reopened < uint64(n)/2 {
				t.Errorf("offload path: %d TIME_WAIT records reopened by a SYN in %d connections through %d ports", reopened, n, ports)
			}
			if f := d1.FlowsReopened - d0.FlowsReopened; f > reopened {
				t.Errorf("host reopened %d flows, more than the engine's %d records", f, reopened)
			}
			if f, l := off.Fallbacks(), off.Lost(); f+l != 0 {
				t.Errorf("%d connections not delegated (%d lost): %v", f+l, l, off.FallbackErr())
			}
		}
	}
}
