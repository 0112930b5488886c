package tcpstack

import (
	"context"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"
)

// TestDelegateAfterNetstackDrop: netstack drops a data segment the driver
// handed it (the flow tracker counted it), as its listener does with data
// racing a handshake it completes from a SYN cookie. The delegation, its
// flow frozen, waits for bytes netstack will never have; after quiesceStall
// it lets the flow through, the peer's resend reaches netstack, and the
// connection is delegated with every byte (it failed over to netstack
// after the 2 s quiesce timeout before, the resend held by the frozen flow).
func TestDelegateAfterNetstackDrop(t *testing.T) {
	a, b, _ := gateHosts(t, nil, nil)
	l, err := b.ListenOffload(5060)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	// The listener delegates as soon as netstack has the connection,
	// before the data is sent: hold it until the data segment was
	// dropped, as a busy listener would be.
	release := l.hold()
	dropped := make(chan struct{})
	var once sync.Once
	drop := func(f []byte) bool {
		var s tcpSeg
		if !parseTCPFrame(f, &s) || s.rx.LocalPort != 5060 || s.payload == 0 {
			return false
		}
		hit := false
		once.Do(func() { hit = true; close(dropped) })
		return hit
	}
	b.Driver.netstackDrop.Store(&drop)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, err := a.Dial(ctx, netip.AddrPortFrom(b.Addr(), 5060))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	if _, err := nc.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	select {
	case <-dropped:
	case <-ctx.Done():
		t.Fatal("the data segment never reached b's driver")
	}
	release()
	c, err := l.Accept() // delegates: the tracker has 5 bytes, netstack none
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*DelegatedConn); !ok {
		t.Fatalf("accepted %T (fallback: %v), want a delegated connection", c, l.FallbackErr())
	}
	got := make([]byte, 5)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || string(got) != "hello" {
		t.Fatalf("read %q, %v", got, err)
	}
	if n := b.OffloadUsage().QuiesceRetries; n != 1 {
		t.Errorf("%d quiesce retries, want 1", n)
	}
}

// hold stops l from starting delegations (every slot taken) until the
// returned function is called: a test's way to have a connection wait in
// netstack's accept queue, as it does behind a busy listener.
func (l *OffloadListener) hold() (release func()) {
	for range maxDelegating {
		l.slots <- struct{}{}
	}
	return func() {
		for range maxDelegating {
			<-l.slots
		}
	}
}
