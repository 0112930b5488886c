package direct

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
)

// echoOnce answers one line on c and closes it.
func echoAll(c net.Conn) {
	io.Copy(c, c)
	c.Close()
}

func roundTrip(t *testing.T, c net.Conn, msg string) {
	t.Helper()
	if _, err := c.Write([]byte(msg)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != msg {
		t.Fatalf("echo %q, %v", got, err)
	}
}

// TestFallback: every way the RDMA path can be missing ends on TCP, with
// the reason, and the bytes go through.
func TestFallback(t *testing.T) {
	a, b := rig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// 1. A plain netstack listener on a host with no switch: the switch
	// port answers RST, Dial falls back to the port itself.
	pl, err := b.Listen(8101)
	if err != nil {
		t.Fatal(err)
	}
	defer pl.Close()
	go func() {
		c, err := pl.Accept()
		if err == nil {
			echoAll(c)
		}
	}()
	c, err := Dial(ctx, a, netip.AddrPortFrom(b.Addr(), 8101), Config{})
	if err != nil {
		t.Fatal(err)
	}
	p := PathOf(c)
	if p.Path != PathTCP || !strings.Contains(p.Reason.Error(), "no sockets-direct switch") {
		t.Fatalf("plain listener: %v", p)
	}
	roundTrip(t, c, "to a plain netstack listener")
	c.Close()

	// 2. The dialling host has no RDMA.
	l, err := Listen(b, 8102, Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	if ok, why := l.RDMA(); !ok {
		t.Fatalf("listener without RDMA: %v", why)
	}
	go echoEach(l)
	c, err = Dial(ctx, a, netip.AddrPortFrom(b.Addr(), 8102), Config{NoRDMA: true})
	if err != nil {
		t.Fatal(err)
	}
	if p := PathOf(c); p.Path != PathTCP || !strings.Contains(p.Reason.Error(), "RDMA disabled") {
		t.Fatalf("dialler without RDMA: %v", p)
	}
	roundTrip(t, c, "from a host without RDMA")
	c.Close()

	// 3. The listening side has no RDMA: its host's switch (started by
	// the listener of step 2) has no listener on the port and rejects.
	l3, err := Listen(b, 8103, Config{NoRDMA: true})
	if err != nil {
		t.Fatal(err)
	}
	defer l3.Close()
	if ok, _ := l3.RDMA(); ok {
		t.Fatal("NoRDMA listener registered with the switch")
	}
	go func() {
		c, err := l3.Accept()
		if err == nil {
			echoAll(c)
		}
	}()
	c, err = Dial(ctx, a, netip.AddrPortFrom(b.Addr(), 8103), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := PathOf(c); p.Path != PathTCP || !strings.Contains(p.Reason.Error(), "no sockets-direct listener on port 8103") {
		t.Fatalf("listener without RDMA: %v", p)
	}
	roundTrip(t, c, "to a listener without RDMA")
	c.Close()

	// 4. A plain TCP client reaches a sockets-direct listener.
	pc, err := a.Dial(ctx, netip.AddrPortFrom(b.Addr(), 8102))
	if err != nil {
		t.Fatal(err)
	}
	roundTrip(t, pc, "plain client")
	pc.Close()

	// 5. And the RDMA path on the same listener.
	c, err = Dial(ctx, a, netip.AddrPortFrom(b.Addr(), 8102), Config{})
	if err != nil {
		t.Fatal(err)
	}
	if p := PathOf(c); p.Path != PathRDMA {
		t.Fatalf("RDMA path: %v", p)
	}
	roundTrip(t, c, "over RDMA")
	c.Close()
	if s := HostStats(a); s.Fallbacks != 3 || s.Dialed != 1 {
		t.Errorf("stats of A: %+v", s)
	}
}

// echoEach echoes every conn l accepts until it is closed.
func echoEach(l net.Listener) {
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go echoAll(c)
	}
}

// plainEcho listens on port of h over plain TCP and echoes every conn.
func plainEcho(t *testing.T, h *tcpstack.Host, port uint16) {
	t.Helper()
	l, err := h.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go echoEach(l)
}

// TestFallbackTimeout: the peer's switch port accepts the TCP connection
// but never answers the MPA request (a plain listener there): Dial gives
// up after NegotiateTimeout and falls back to TCP, and says so.
func TestFallbackTimeout(t *testing.T) {
	a, b := rig(t)
	const swPort, port = 8111, 8112
	silent, err := b.Listen(swPort)
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			defer c.Close() // held open, never a byte
		}
	}()
	plainEcho(t, b, port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	start := time.Now()
	c, err := Dial(ctx, a, netip.AddrPortFrom(b.Addr(), port), Config{SwitchPort: swPort, NegotiateTimeout: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := PathOf(c)
	t.Logf("%v after %v", p, time.Since(start))
	if p.Path != PathTCP || !errors.Is(p.Reason, context.DeadlineExceeded) || !strings.Contains(p.Reason.Error(), "NegotiateTimeout") {
		t.Fatalf("path %v, want a TCP fallback after the negotiation timed out", p)
	}
	if s := HostStats(a); s.Fallbacks != 1 {
		t.Errorf("stats %+v, want one fallback", s)
	}
	roundTrip(t, c, "after a timeout")
}

// TestFallbackBadReply: the peer's switch port is an RDMA listener that
// accepts with private data that is not a hello: Dial counts a bad
// message, tears the QP down and falls back to TCP.
func TestFallbackBadReply(t *testing.T) {
	a, b := rig(t)
	const swPort, port = 8113, 8114
	n := hostrig.NewNode(t, b, hostrig.NodeConfig{})
	rl, err := n.V.ListenRDMA(swPort, n.Attr())
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	go func() {
		for {
			r, err := rl.GetRequest(context.Background())
			if err != nil {
				return
			}
			_ = r.Accept([]byte("not a hello"))
		}
	}()
	plainEcho(t, b, port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := Dial(ctx, a, netip.AddrPortFrom(b.Addr(), port), Config{SwitchPort: swPort})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	p := PathOf(c)
	t.Logf("%v", p)
	if p.Path != PathTCP || !errors.Is(p.Reason, ErrBadHello) {
		t.Fatalf("path %v, want a TCP fallback after a bad reply", p)
	}
	if s := HostStats(a); s.Fallbacks != 1 || s.BadMessages != 1 {
		t.Errorf("stats %+v, want one fallback and one bad message", s)
	}
	roundTrip(t, c, "after a bad reply")
}
