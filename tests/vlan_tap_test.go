//go:build linux

package tests

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/services"
)

// vlanHost is one emulated host behind the trunk: its VLAN, the kernel's
// VLAN interface and addresses.
type vlanHost struct {
	vid         uint16
	kernel, emu netip.Prefix
	offload     bool // serve echo on delegated connections
	host        *board.Host
	kernelIf    string
	echo        *services.Server
}

// requireVLAN skips the test when the kernel cannot make VLAN interfaces
// (no 8021q: a minimal VM kernel, say), trying one on a TAP of its own.
// TestVLANTrunkVM runs the same trunk against the siw VM's kernel, which
// has 8021q, so the VLAN path meets a Linux VLAN stack on such hosts too.
func requireVLAN(t *testing.T, ns *netns) {
	t.Helper()
	if err := testutil.RunIP("-n", ns.name, "tuntap", "add", "mode", "tap", "name", "vlanprobe"); err != nil {
		t.Fatalf("a TAP to probe 802.1Q support with: %v", err)
	}
	defer testutil.RunIP("-n", ns.name, "link", "del", "vlanprobe")
	if err := testutil.RunIP("-n", ns.name, "link", "add", "link", "vlanprobe", "name", "vlanprobe.5", "type", "vlan", "id", "5"); err != nil {
		t.Skipf("the kernel makes no 802.1Q VLAN interfaces (8021q missing?): %v; TestVLANTrunkVM runs the trunk against the siw VM's kernel instead (scripts/siw-vm)", err)
	}
}

// trunkTAP makes a TAP in a fresh namespace carrying the hosts' VLANs: the
// kernel has one VLAN interface per host on it (NAME.VID), and the
// emulated hosts share the TAP through a port.Hub, each NIC on its own
// VLAN. mtu is the IP MTU of the TAP, its VLAN interfaces and the NICs.
func trunkTAP(t *testing.T, mtu int, hosts []*vlanHost) *netns {
	t.Helper()
	testutil.RequireTAP(t)
	ns := newNetns(t)
	requireVLAN(t, ns)
	tap, name := ns.openTAP(t, "emuv")
	if err := tap.SetMTU(mtu); err != nil {
		tap.Close()
		t.Fatal(err)
	}
	testutil.IP(t, "link", "set", name, "netns", ns.name)
	testutil.IP(t, "-n", ns.name, "link", "set", name, "up")
	for _, h := range hosts {
		h.kernelIf = fmt.Sprintf("%s.%d", name, h.vid)
		testutil.IP(t, "-n", ns.name, "link", "add", "link", name, "name", h.kernelIf, "type", "vlan", "id", fmt.Sprint(h.vid))
		testutil.IP(t, "-n", ns.name, "link", "set", h.kernelIf, "mtu", fmt.Sprint(mtu))
		testutil.IP(t, "-n", ns.name, "addr", "add", h.kernel.String(), "dev", h.kernelIf)
		testutil.IP(t, "-n", ns.name, "link", "set", h.kernelIf, "up")
	}
	serveVLANHosts(t, tap, mtu, hosts)
	return ns
}

// serveVLANHosts shares the trunk tap among the hosts through a port.Hub,
// each a NIC on its own VLAN (MAC 02:00 and its IPv4 address) serving echo,
// and returns the hub's members in the hosts' order. mtu is the hosts' IP
// MTU; the hub carries it tagged.
func serveVLANHosts(t *testing.T, tap port.Port, mtu int, hosts []*vlanHost) []*port.HubPort {
	t.Helper()
	_, members, err := port.NewHub(tap, len(hosts), mtu+hdr.EthernetVLANSize, 1024)
	if err != nil {
		tap.Close()
		t.Fatal(err)
	}
	for i, h := range hosts {
		b := h.emu.Addr().As4()
		h.host, err = board.NewHost(board.HostConfig{MAC: [6]byte{2, 0, b[0], b[1], b[2], b[3]}, Addr: h.emu, MTU: mtu,
			Device: nic.Config{VLAN: h.vid}}, members[i])
		if err != nil {
			for _, m := range members[i:] {
				m.Close()
			}
			t.Fatal(err)
		}
		hh := h
		t.Cleanup(func() {
			hh.host.Close()
			t.Logf("VLAN %d host: device counters %v", hh.vid, stats(hh.host.Host))
		})
		h.echo = services.NewEcho(t.Logf)
		var l net.Listener
		if h.offload {
			l, err = h.host.ListenOffload(services.EchoPort)
		} else {
			l, err = h.host.Listen(services.EchoPort)
		}
		if err != nil {
			t.Fatal(err)
		}
		go h.echo.Serve(l)
		t.Cleanup(func() { hh.echo.Close() })
	}
	return members
}

// TestTAPVLANTrunk: one TAP carries VLANs 10 and 20 to two emulated hosts,
// the kernel reaching each through its own VLAN interface. Each host
// answers ping and echo (host 20's on delegated connections, whose frames
// the offload engine builds and the NIC tags), each NIC counts the other
// VLAN's frames as rx_drop_vlan, and nothing crosses: a frame for host
// 10's MAC and address sent on VLAN 20, and a double-tagged frame, are
// dropped and counted.
func TestTAPVLANTrunk(t *testing.T) {
	a := &vlanHost{vid: 10, kernel: netip.MustParsePrefix("10.71.10.1/24"), emu: netip.MustParsePrefix("10.71.10.2/24")}
	b := &vlanHost{vid: 20, kernel: netip.MustParsePrefix("10.71.20.1/24"), emu: netip.MustParsePrefix("10.71.20.2/24"), offload: true}
	ns := trunkTAP(t, 1500, []*vlanHost{a, b})
	for _, h := range []*vlanHost{a, b} {
		t.Run(fmt.Sprintf("vlan%d", h.vid), func(t *testing.T) {
			if err := ns.ping(h.emu.Addr(), 3); err != nil {
				t.Fatal(err)
			}
			c, err := ns.dial(netip.AddrPortFrom(h.emu.Addr(), services.EchoPort))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			echoExchange(t, c, 4<<20)
		})
	}
	if e := engineOf(t, b.host.Host); e.RxBytes < 4<<20 {
		t.Errorf("VLAN 20 host: the engine placed %d bytes, want the echo's 4 MiB on delegated connections", e.RxBytes)
	}
	for _, h := range []*vlanHost{a, b} {
		if n := statOf(t, h.host.Host, rings.StatRxDropVLAN); n == 0 {
			t.Errorf("VLAN %d host counted none of the other VLAN's frames", h.vid)
		}
	}

	// Host 10's address and MAC, reached on VLAN 20: the kernel sends it
	// there (a route and a permanent neighbour entry on NAME.20), host 10
	// drops it as another VLAN's and host 20 as not its MAC.
	t.Run("cross-VLAN", func(t *testing.T) {
		stray := netip.MustParseAddr("10.71.99.2")
		ab := a.emu.Addr().As4()
		testutil.IP(t, "-n", ns.name, "route", "add", stray.String()+"/32", "dev", b.kernelIf)
		testutil.IP(t, "-n", ns.name, "neigh", "add", stray.String(), "lladdr",
			net.HardwareAddr{2, 0, ab[0], ab[1], ab[2], ab[3]}.String(), "dev", b.kernelIf, "nud", "permanent")
		before := statOf(t, a.host.Host, rings.StatRxDropVLAN)
		if err := ns.ping(stray, 1); err == nil {
			t.Fatal("a ping on VLAN 20 to host 10's MAC was answered")
		}
		if after := statOf(t, a.host.Host, rings.StatRxDropVLAN); after == before {
			t.Error("host 10 did not count the VLAN 20 frames sent to its MAC")
		}
	})

	// Double tagging: a VLAN interface on NAME.10 puts a second tag inside
	// the first; host 10 must drop what it sends, counted as a bad tag.
	t.Run("QinQ", func(t *testing.T) {
		inner := uniqueName("emuq", 10)
		testutil.IP(t, "-n", ns.name, "link", "add", "link", a.kernelIf, "name", inner, "type", "vlan", "id", "30")
		testutil.IP(t, "-n", ns.name, "addr", "add", "10.71.30.1/24", "dev", inner)
		testutil.IP(t, "-n", ns.name, "link", "set", inner, "up")
		before := statOf(t, a.host.Host, rings.StatRxDropBadVLAN)
		if err := ns.ping(netip.MustParseAddr("10.71.30.2"), 1); err == nil {
			t.Fatal("a double-tagged ping was answered")
		}
		if after := statOf(t, a.host.Host, rings.StatRxDropBadVLAN); after == before {
			t.Error("host 10 did not count the double-tagged frames")
		}
	})
}
