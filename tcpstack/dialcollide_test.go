package tcpstack

import (
	"context"
	"net/netip"
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
	l, err := b.Listen(5120)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
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
