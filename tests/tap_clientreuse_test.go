//go:build linux

package tests

import (
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// TestTAPHostClientPortReuse: the emulated host is the client, dials the
// Linux kernel with DialOffload through 32 local ports, writes and closes
// first, so each connection ends in the engine's TIME_WAIT, a record
// netstack knows nothing of (its end was handed off). netstack picks those
// ports again at once; the host's SYN on a tuple in TIME_WAIT ends the
// record (the engine's OutboundSYN), and the kernel, whose end closed
// second, takes it as a new connection: nothing is sent twice or reset,
// and nothing is dropped as an old flow's.
func TestTAPHostClientPortReuse(t *testing.T) {
	const n, ports = 500, 32
	lab := newTAPOffloadLab(t, 111)
	kl := lab.ns.listen(t, netip.AddrPortFrom(lab.kernel.Addr(), 0))
	go func() {
		for {
			c, err := kl.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
	dst := netip.MustParseAddrPort(kl.Addr().String())
	if terr := lab.host.S.SetPortRange(40000, 40000+ports-1); terr != nil {
		t.Fatal(terr)
	}
	kernel := []string{"TcpExtTCPSynRetrans", "TcpRetransSegs", "TcpOutRsts", "TcpEstabResets", "TcpExtPAWSEstab", "TcpAttemptFails"}
	k0, e0 := lab.kernelTCP(t, kernel...), lab.engine()
	for i := range n {
		// Leave netstack a free port: the last connections' closes are
		// still under way (their tuples stay the driver's until the
		// device reports them CLOSED and the host releases them).
		testutil.WaitFor(t, "connections closing", func() bool { return lab.host.OffloadUsage().Conns <= ports/2 })
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		c, err := lab.host.DialOffload(ctx, dst)
		cancel()
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if _, err := c.Write([]byte("bye\n")); err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		c.Close()
	}
	testutil.WaitFor(t, "every connection closed", func() bool { return lab.host.OffloadUsage().Conns == 0 })
	k1, e1 := lab.kernelTCP(t, kernel...), lab.engine()
	for _, name := range kernel {
		if d := k1[name] - k0[name]; d != 0 {
			t.Errorf("the kernel's %s went up %d in %d connections", name, d, n)
		}
	}
	entered, reopened := e1.TimeWaitEntered-e0.TimeWaitEntered, e1.TimeWaitReopened-e0.TimeWaitReopened
	t.Logf("%d connections through %d ports: engine TIME_WAIT entered %d, reopened by the host's SYN %d", n, ports, entered, reopened)
	// Every use of a port after its first reopens the record (n-ports
	// in all) unless it expired first (1 s): on a slow machine, some.
	if entered != n || reopened < n/2 {
		t.Errorf("TIME_WAIT entered %d, reopened %d, want %d and at least %d", entered, reopened, n, n/2)
	}
	if d := lab.host.Driver.Stats(); d.FrozenDropsIn+d.FrozenDropsOut != 0 {
		t.Errorf("frozen-flow drops: in %d, out %d", d.FrozenDropsIn, d.FrozenDropsOut)
	}
}
