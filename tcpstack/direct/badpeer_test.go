package direct

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// liar is a hostile peer: raw verbs on host A that speak the hello and then
// whatever the test wants.
type liar struct {
	t    *testing.T
	n    *hostrig.Node
	qp   *verbs.QP
	sent int
}

func newLiar(t *testing.T, a, b *tcpstack.Host, port uint16, pref Transfer) *liar {
	t.Helper()
	n := hostrig.NewNode(t, a, hostrig.NodeConfig{})
	h := Hello{Pref: pref, Port: port, Slots: 33, Pool: 32, MaxInline: uint32(n.Cfg.RecvSize - HeaderSize), MaxTransfer: 1 << 20}
	hb := make([]byte, HelloSize)
	h.Encode(hb)
	attr := n.Attr()
	attr.PrivateData = hb
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, err := n.V.DialRDMA(ctx, netip.AddrPortFrom(b.Addr(), DefaultSwitchPort), attr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = qp.Destroy() })
	return &liar{t: t, n: n, qp: qp}
}

// send sends raw bytes as one message and waits for its completion (which
// is flushed once the victim tore the connection down).
func (l *liar) send(b []byte) {
	l.t.Helper()
	off := (l.sent % 64) * 2048
	copy(l.n.Local.Bytes()[off:], b)
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: uint64(l.sent), NumSGE: 1}
	w.SGL[0] = l.n.LocalMR.SGE(off, len(b))
	l.sent++
	if err := l.qp.PostSend(&w); err != nil {
		l.t.Fatal(err)
	}
	for {
		c := testutil.WaitCompletions(l.t, l.n.CQ, 1)[0]
		if c.WRID == w.WRID {
			if c.Status != rings.WCSuccess && c.Status != rings.WCWRFlushErr {
				l.t.Fatalf("liar's send: %v", &c)
			}
			return
		}
	}
}

func (l *liar) msg(m Msg, payload []byte) {
	l.t.Helper()
	b := make([]byte, HeaderSize+len(payload))
	m.Encode(b)
	copy(b[HeaderSize:], payload)
	l.send(b)
}

// TestBadPeer: a peer that sends malformed messages, overruns its credits,
// advertises a region it then deregisters, or disappears mid-transfer:
// the conn it talks to fails with the right error, the right counter moves,
// and another conn between the same hosts goes on unaffected.
func TestBadPeer(t *testing.T) {
	a, b := rig(t)
	const port = 8201
	l, err := Listen(b, port, Config{Linger: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	// The bystander: a good connection that must stay usable.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	good, err := Dial(ctx, a, netip.AddrPortFrom(b.Addr(), port), Config{})
	if err != nil {
		t.Fatal(err)
	}
	defer good.Close()
	goodB := <-accepted
	go echoAll(goodB)
	roundTrip(t, good, "before")

	stats := func() Stats { return HostStats(b) }
	readErr := func(c net.Conn) error {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		_, err := io.Copy(io.Discard, c)
		if err == nil {
			t.Fatal("EOF from a conn whose peer misbehaved, want an error")
		}
		if errors.Is(err, os.ErrDeadlineExceeded) {
			t.Fatalf("no error within 10 s: %v", err)
		}
		return err
	}

	cases := []struct {
		name    string
		pref    Transfer
		act     func(l *liar)
		want    error
		counter func(Stats) uint64
	}{
		{"malformed", TransferInline, func(l *liar) {
			l.send([]byte("this is not a control message"))
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"unknown transfer", TransferInline, func(l *liar) {
			l.msg(Msg{Type: TypeRdDone, ID: 77, Len: 5}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"credit overrun", TransferInline, func(l *liar) {
			// The listener's pool is 32 buffers: the 33rd DATA while
			// nothing was read is beyond the credits it granted.
			for range 33 {
				l.msg(Msg{Type: TypeData, Len: 3}, []byte("abc"))
			}
		}, ErrProtocol, func(s Stats) uint64 { return s.CreditViolations }},
		{"grant beyond the pool", TransferInline, func(l *liar) {
			l.msg(Msg{Type: TypeCredit, Credits: 1000}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.CreditViolations }},
		{"deregistered source", TransferRead, func(l *liar) {
			buf := hostrig.Must[*verbs.Buffer](t)(l.n.V.AllocBuffer(64 << 10))
			mr := hostrig.Must[*verbs.MR](t)(l.n.V.RegMR(l.n.PD, buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead))
			stag, to := mr.RKey, mr.TO(0)
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			l.msg(Msg{Type: TypeSrcAvail, Total: 64 << 10, ID: 1, STag: stag, TO: to}, nil)
		}, ErrPeerFailed, func(s Stats) uint64 { return s.RemoteAccessErrors }},
		{"disappears mid-transfer", TransferInline, func(l *liar) {
			l.msg(Msg{Type: TypeData, Len: 5}, []byte("hello"))
			_ = l.qp.Destroy()
		}, ErrPeerFailed, func(s Stats) uint64 { return s.PeerFailures }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stats()
			lr := newLiar(t, a, b, port, tc.pref)
			c := <-accepted
			defer c.Close()
			tc.act(lr)
			// Wait for the failure without reading: a reader would give
			// credits back, and a grant in flight makes the liar's
			// overrun legal as far as the victim can tell.
			if err := waitFailed(c.(*Conn), 10*time.Second); err == nil {
				t.Fatalf("%s: the conn did not fail (%s)", tc.name, c.(*Conn).debugState())
			}
			err := readErr(c)
			if !errors.Is(err, tc.want) {
				t.Fatalf("read error %v, want %v", err, tc.want)
			}
			t.Logf("%v", err)
			if got, was := tc.counter(stats()), tc.counter(before); got != was+1 {
				t.Errorf("counter %d -> %d, want +1 (stats %+v)", was, got, stats())
			}
			roundTrip(t, good, "still there after "+tc.name)
		})
	}
}

// waitFailed waits until c has an error, or d passed.
func waitFailed(c *Conn, d time.Duration) error {
	t := time.AfterFunc(d, func() {
		c.mu.Lock()
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	defer t.Stop()
	limit := time.Now().Add(d)
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.err == nil && time.Now().Before(limit) {
		c.cond.Wait()
	}
	return c.err
}
