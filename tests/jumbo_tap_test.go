//go:build linux

package tests

import (
	"net"
	"net/netip"
	"syscall"
	"testing"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestTAPJumbo: the kernel and the emulated host at MTU 9000 over a TAP.
// Echo on netstack and on delegated connections carries 8 MiB each way
// intact; on both the kernel's MSS toward the host is a jumbo one, which it
// takes from the MSS option the host's stack (or the offload engine, which
// answers for a delegated listener's connections once handed over) derived
// from the MTU, so full-size segments in both directions are ~9000-byte
// frames; none of them is dropped as oversize.
func TestTAPJumbo(t *testing.T) {
	const mtu = 9000
	testutil.RequireTAP(t)
	ns := newNetns(t)
	tap, name := ns.openTAP(t, "emuj")
	if err := tap.SetMTU(mtu); err != nil {
		tap.Close()
		t.Fatal(err)
	}
	kernel := netip.MustParsePrefix("10.78.0.1/24")
	emu := netip.MustParsePrefix("10.78.0.2/24")
	ns.moveTAP(t, name, kernel)
	host, err := board.NewHost(board.HostConfig{MAC: [6]byte{2, 0, 10, 78, 0, 2}, Addr: emu, MTU: mtu}, tap)
	if err != nil {
		tap.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		host.Close()
		t.Logf("device counters: %v; TAP port: %v", stats(host.Host), tap.Stats())
	})
	lNet, err := host.Listen(services.EchoPort)
	if err != nil {
		t.Fatal(err)
	}
	lOff, err := host.ListenOffload(services.EchoPort + 1000)
	if err != nil {
		t.Fatal(err)
	}
	echoNet, echoOff := services.NewEcho(t.Logf), services.NewEcho(t.Logf)
	go echoNet.Serve(lNet)
	go echoOff.Serve(lOff)
	t.Cleanup(func() { echoNet.Close(); echoOff.Close() })

	for _, c := range []struct {
		name string
		port uint16
	}{{"netstack", services.EchoPort}, {"delegated", services.EchoPort + 1000}} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := ns.dial(netip.AddrPortFrom(emu.Addr(), c.port))
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			echoExchange(t, conn, 8<<20)
			mss := kernelMSS(t, conn)
			t.Logf("kernel's MSS toward the host: %d", mss)
			if mss < mtu-40-40 {
				t.Errorf("kernel's MSS toward the host %d, want a jumbo one (about %d)", mss, mtu-40-12)
			}
		})
	}
	// The delegated echo's bytes are the engine's, less what the kernel
	// sent before the OFFLOAD completed: netstack took those and handed
	// them over (about 120 KiB with the device in its own process, where
	// the command's round trip is longer). The counters are read from the
	// area the device publishes when it goes idle: wait for the
	// publication that covers the echo.
	testutil.WaitFor(t, "the engine to count most of the delegated echo's 8 MiB placed", func() bool {
		return engineOf(t, host.Host).RxBytes >= 6<<20
	})
	if n := statOf(t, host.Host, rings.StatRxDropOversize); n != 0 {
		t.Errorf("rx_drop_oversize = %d at MTU %d", n, mtu)
	}
}

// kernelMSS is TCP_MAXSEG of a kernel socket: the segment size it sends
// with, from the peer's MSS option and its own MTU.
func kernelMSS(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var mss int
	var serr error
	if err := rc.Control(func(fd uintptr) {
		mss, serr = syscall.GetsockoptInt(int(fd), syscall.IPPROTO_TCP, syscall.TCP_MAXSEG)
	}); err != nil || serr != nil {
		t.Fatalf("TCP_MAXSEG: %v %v", err, serr)
	}
	return mss
}
