package tcpstack

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestPlainDialBesideDelegated: a host holding 2,000 delegated connections
// to one server dials it 300 more times on netstack. netstack has
// forgotten the delegated connections' local ports (their endpoints were
// handed off), so Stack.Dial picked one of them now and then (about 1 in
// 14 here), and its SYN was dropped as the delegated flow's: the dial
// timed out. Host.Dial picks only ports whose 4-tuple no delegated
// connection holds: every dial connects, and no frame of netstack's is
// dropped.
func TestPlainDialBesideDelegated(t *testing.T) {
	a, b := plainHosts(t, OffloadConfig{})
	holdAccepted(t, b, 5120)
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 5120)
	dial := func(what string, f func(context.Context) (interface{ Close() error }, error)) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		c, err := f(ctx)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		t.Cleanup(func() { c.Close() })
	}
	for range 2000 {
		dial("DialOffload", func(ctx context.Context) (interface{ Close() error }, error) { return a.DialOffload(ctx, dst) })
	}
	for range 300 {
		dial("Dial", func(ctx context.Context) (interface{ Close() error }, error) { return a.Dial(ctx, dst) })
	}
	if n := a.Driver.Stats().FrozenDropsOut; n != 0 {
		t.Errorf("%d of netstack's frames dropped as a delegated flow's", n)
	}
}

// TestDialNoFreeTuple: with every port of netstack's range held by a
// delegated connection to the server, a dial to it says so (netstack
// itself would only say that no port is available: dialFree holds the
// busy ones while it looks).
func TestDialNoFreeTuple(t *testing.T) {
	a, b := plainHosts(t, OffloadConfig{})
	holdAccepted(t, b, 5121)
	if terr := a.S.SetPortRange(40000, 40003); terr != nil {
		t.Fatal(terr)
	}
	dst := netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 5121)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for range 4 {
		dc, err := a.DialOffload(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { dc.Close() })
	}
	for _, dial := range []func() error{
		func() error { _, err := a.Dial(ctx, dst); return err },
		func() error { _, err := a.DialOffload(ctx, dst); return err },
	} {
		if err := dial(); err == nil || !strings.Contains(err.Error(), "no local port whose 4-tuple is free") {
			t.Errorf("dial with every port's tuple delegated: %v", err)
		}
	}
	// Another destination has every port free.
	holdAccepted(t, b, 5122)
	c, err := a.Dial(ctx, netip.AddrPortFrom(dst.Addr(), 5122))
	if err != nil {
		t.Fatalf("dial elsewhere: %v", err)
	}
	c.Close()
}

// holdAccepted accepts connections on h's port until the test ends; they
// close then too.
func holdAccepted(t *testing.T, h *Host, port uint16) {
	t.Helper()
	l, err := h.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
}
