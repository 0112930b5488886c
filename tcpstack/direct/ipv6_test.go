package direct

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
)

// TestIPv6: sockets direct between dual-stack hosts over IPv6: Dial to the
// peer's IPv6 address takes the RDMA path, whose QP runs over IPv6 (the
// connection's addresses say so), and to a port with no sockets-direct
// listener it falls back to TCP over IPv6.
func TestIPv6(t *testing.T) {
	a6, b6 := netip.MustParsePrefix("fd00:d::1/64"), netip.MustParsePrefix("fd00:d::2/64")
	var rc hostrig.Config
	rc.DualStack(a6, b6)
	r := hostrig.New(t, rc)
	a, b := r.A, r.B
	t.Cleanup(func() { Shutdown(a); Shutdown(b) })
	l, err := Listen(b, 8601, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go echoEach(l)
	plainEcho(t, b, 8602)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	c, err := Dial(ctx, a, netip.AddrPortFrom(b6.Addr(), 8601), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := PathOf(c); p.Path != PathRDMA {
		t.Fatalf("to the IPv6 listener: %v", p)
	}
	for _, x := range []struct {
		name string
		got  net.Addr
		want netip.Addr
	}{{"local", c.LocalAddr(), a6.Addr()}, {"remote", c.RemoteAddr(), b6.Addr()}} {
		if ta, ok := x.got.(*net.TCPAddr); !ok || ta.AddrPort().Addr().Unmap() != x.want {
			t.Errorf("%s address %v, want %v", x.name, x.got, x.want)
		}
	}
	roundTrip(t, c, "over IPv6, by RDMA")
	c.Close()

	c, err = Dial(ctx, a, netip.AddrPortFrom(b6.Addr(), 8602), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := PathOf(c); p.Path != PathTCP || !strings.Contains(p.Reason.Error(), "no sockets-direct listener") {
		t.Fatalf("to a plain IPv6 listener: %v", p)
	}
	if ta := c.RemoteAddr().(*net.TCPAddr); ta.AddrPort().Addr() != b6.Addr() {
		t.Errorf("the fallback connection goes to %v, want %v", ta, b6.Addr())
	}
	roundTrip(t, c, "over IPv6, by TCP")
	c.Close()
}
