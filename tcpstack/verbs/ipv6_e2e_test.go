package verbs_test

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

var (
	v6A = netip.MustParsePrefix("fd00:77::1/64")
	v6B = netip.MustParsePrefix("fd00:77::2/64")
)

// TestRDMAIPv6EarlyRequest: a QP pair over IPv6 whose initiator's MPA
// request reaches the responder's host before its delegation (as
// TestRDMAEarlyRequestInjected over IPv4): the request is held from the
// IPv6 frame and injected behind the CREATE_QP, so the connection
// completes at once, and the QPs carry data. Both ends name IPv6 peers.
func TestRDMAIPv6EarlyRequest(t *testing.T) {
	rc := hostrig.Config{HostA: func(c *board.HostConfig) { c.Device.Engine.MinRTO = 30e9 }}
	rc.DualStack(v6A, v6B)
	r := hostrig.New(t, rc)
	a, b := hostrig.NewNode(t, r.A, hostrig.NodeConfig{}), hostrig.NewNode(t, r.B, hostrig.NodeConfig{})
	held := make(chan struct{})
	var once sync.Once
	var heldKey hdr.Tuple
	verbs.SetEarlyHooks(b.V, func(k hdr.Tuple) { once.Do(func() { heldKey = k; close(held) }) }, func(hdr.Tuple) {
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Error("no early MPA request held")
		}
	})
	start := time.Now()
	hostrig.ConnectAt(t, a, b, v6B.Addr(), 4795)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("connected in %v: the MPA request waited for a retransmission", d)
	}
	if held, injected, dropped := verbs.EarlyCounts(b.V); held != 1 || injected != 1 || dropped != 0 {
		t.Fatalf("early frames: held %d injected %d dropped %d", held, injected, dropped)
	}
	if heldKey.LocalIP != v6B.Addr() || heldKey.RemoteIP != v6A.Addr() {
		t.Fatalf("held flow %+v, want %v from %v", heldKey, v6B.Addr(), v6A.Addr())
	}
	for _, c := range []struct {
		name string
		got  net.Addr
		want netip.Addr
	}{{"A's remote", a.QP.RemoteAddr(), v6B.Addr()}, {"B's remote", b.QP.RemoteAddr(), v6A.Addr()}, {"A's local", a.QP.LocalAddr(), v6A.Addr()}} {
		if ta, ok := c.got.(*net.TCPAddr); !ok || ta.AddrPort().Addr().Unmap() != c.want {
			t.Errorf("%s address %v, want %v", c.name, c.got, c.want)
		}
	}
	sendCheck(t, a, b, "over IPv6")
}

// sendCheck sends msg from a's QP to b's and checks that b received it.
func sendCheck(t *testing.T, a, b *hostrig.Node, msg string) {
	t.Helper()
	wr := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 9, NumSGE: 1}
	copy(a.Local.Bytes(), msg)
	wr.SGL[0] = a.LocalMR.SGE(0, len(msg))
	if err := a.QP.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]rings.Completion, 1)
	if _, err := b.CQ.PollWait(ctx, wc, false); err != nil {
		t.Fatal(err)
	}
	if wc[0].Status != rings.WCSuccess || string(b.RecvData(wc[0])) != msg {
		t.Fatalf("receive %v %q", &wc[0], b.RecvData(wc[0]))
	}
}

// TestRDMAListenerBothFamilies: one RDMA listener on a dual-stack host
// takes connections to its IPv4 and its IPv6 address alike.
func TestRDMAListenerBothFamilies(t *testing.T) {
	rc := hostrig.Config{}
	rc.DualStack(v6A, v6B)
	r := hostrig.New(t, rc)
	b := hostrig.NewNode(t, r.B, hostrig.NodeConfig{})
	l, err := b.V.ListenRDMA(4796, b.Attr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for _, at := range []netip.Addr{r.B.Addr(), v6B.Addr(), r.B.Addr()} {
		a := hostrig.NewNode(t, r.A, hostrig.NodeConfig{})
		acc := make(chan error, 1)
		var bqp *verbs.QP
		go func() {
			var err error
			bqp, err = l.Accept(ctx)
			acc <- err
		}()
		qp, err := a.V.DialRDMA(ctx, netip.AddrPortFrom(at, 4796), a.Attr())
		if err != nil {
			t.Fatalf("dial %v: %v (listener: %d failed, last %v)", at, err, l.Failed(), l.LastError())
		}
		if err := <-acc; err != nil {
			t.Fatalf("accept from %v: %v", at, err)
		}
		if ta := bqp.LocalAddr().(*net.TCPAddr); ta.AddrPort().Addr().Unmap() != at {
			t.Errorf("connection to %v accepted on %v", at, ta)
		}
		_ = qp.Destroy()
		_ = bqp.Destroy()
	}
}
