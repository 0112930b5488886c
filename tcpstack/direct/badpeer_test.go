package direct

import (
	"bytes"
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
	rx   []rings.Completion // receive completions seen while waiting for others
	vc   *Conn              // the victim, once accepted
}

func newLiar(t *testing.T, a, b *tcpstack.Host, port uint16, pref Transfer) *liar {
	return newLiarCaps(t, a, b, port, pref, 0)
}

// newLiarCaps is newLiar offering caps as a sink.
func newLiarCaps(t *testing.T, a, b *tcpstack.Host, port uint16, pref Transfer, caps uint8) *liar {
	t.Helper()
	n := hostrig.NewNode(t, a, hostrig.NodeConfig{LocalSize: 1 << 20})
	h := Hello{Pref: pref, Caps: caps, Port: port, Slots: 33, Pool: 32, MaxInline: uint32(n.Cfg.RecvSize - HeaderSize), MaxTransfer: 1 << 20}
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

// liarMsgArea is where the liar builds its messages: the first 128 KiB of
// its local buffer; the rest is for RDMA.
const liarMsgArea = 64 * 2048

// send sends raw bytes as one message and waits for its completion (which
// is flushed once the victim tore the connection down).
func (l *liar) send(b []byte) { l.sendInv(b, 0) }

// sendInv is send as a Send with Invalidate of the victim's STag inv (0:
// a plain Send).
func (l *liar) sendInv(b []byte, inv uint32) {
	l.t.Helper()
	off := (l.sent % 64) * 2048
	copy(l.n.Local.Bytes()[off:], b)
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, NumSGE: 1}
	if inv != 0 {
		w.Opcode, w.InvSTag = rings.WRSendInv, inv
	}
	w.SGL[0] = l.n.LocalMR.SGE(off, len(b))
	if c := l.post(w); c.Status != rings.WCSuccess && c.Status != rings.WCWRFlushErr {
		l.t.Fatalf("liar's send: %v", &c)
	}
}

// post posts one send work request (signalled) and returns its completion.
func (l *liar) post(w rings.SendWR) rings.Completion {
	l.t.Helper()
	w.WRID, w.Flags = uint64(l.sent), w.Flags|rings.WRSignaled
	l.sent++
	if err := l.qp.PostSend(&w); err != nil {
		l.t.Fatal(err)
	}
	for {
		c := testutil.WaitCompletions(l.t, l.n.CQ, 1)[0]
		if c.WRID == w.WRID {
			return c
		}
		if c.Opcode == rings.WCRecv {
			l.rx = append(l.rx, c)
		}
	}
}

// recv returns the next control message the victim sent, skipping
// credit-only ones.
func (l *liar) recv() (Msg, []byte) {
	l.t.Helper()
	for {
		var c rings.Completion
		if len(l.rx) > 0 {
			c, l.rx = l.rx[0], l.rx[1:]
		} else {
			c = testutil.WaitCompletions(l.t, l.n.CQ, 1)[0]
			if c.Opcode != rings.WCRecv {
				continue
			}
		}
		if c.Status != rings.WCSuccess {
			l.t.Fatalf("liar's receive: %v", &c)
		}
		var m Msg
		p, err := m.Decode(l.n.RecvData(c), l.n.Cfg.RecvSize)
		if err != nil {
			l.t.Fatalf("the victim sent a bad message: %v", err)
		}
		if m.Type != TypeCredit {
			return m, p
		}
	}
}

func (l *liar) msg(m Msg, payload []byte) { l.msgInv(m, payload, 0) }

func (l *liar) msgInv(m Msg, payload []byte, inv uint32) {
	l.t.Helper()
	b := make([]byte, HeaderSize+len(payload))
	m.Encode(b)
	copy(b[HeaderSize:], payload)
	l.sendInv(b, inv)
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
		act     func(l *liar, c net.Conn)
		want    error
		counter func(Stats) uint64
	}{
		{"malformed", TransferInline, func(l *liar, _ net.Conn) {
			l.send([]byte("this is not a control message"))
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"unknown transfer", TransferInline, func(l *liar, _ net.Conn) {
			l.msg(Msg{Type: TypeRdDone, ID: 77, Len: 5}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"credit overrun", TransferInline, func(l *liar, _ net.Conn) {
			// The listener's pool is 32 buffers: the 33rd DATA while
			// nothing was read is beyond the credits it granted.
			for range 33 {
				l.msg(Msg{Type: TypeData, Len: 3}, []byte("abc"))
			}
		}, ErrProtocol, func(s Stats) uint64 { return s.CreditViolations }},
		{"grant beyond the pool", TransferInline, func(l *liar, _ net.Conn) {
			l.msg(Msg{Type: TypeCredit, Credits: 1000}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.CreditViolations }},
		{"deregistered source", TransferRead, func(l *liar, _ net.Conn) {
			buf := hostrig.Must[*verbs.Buffer](t)(l.n.V.AllocBuffer(64 << 10))
			mr := hostrig.Must[*verbs.MR](t)(l.n.V.RegMR(l.n.PD, buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead))
			stag, to := mr.RKey, mr.TO(0)
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			l.msg(Msg{Type: TypeSrcAvail, Total: 64 << 10, ID: 1, STag: stag, TO: to}, nil)
		}, ErrPeerFailed, func(s Stats) uint64 { return s.RemoteAccessErrors }},
		{"disappears mid-transfer", TransferInline, func(l *liar, _ net.Conn) {
			l.msg(Msg{Type: TypeData, Len: 5}, []byte("hello"))
			_ = l.qp.Destroy()
		}, ErrPeerFailed, func(s Stats) uint64 { return s.PeerFailures }},
		{"urgent data without credits", TransferInline, func(l *liar, _ net.Conn) {
			// Urgent bytes take a credit each until the application
			// reads them: the 33rd, with nothing read, has none.
			for range 33 {
				l.msg(Msg{Type: TypeData, Flags: FlagUrgent, Len: 1}, []byte("!"))
			}
		}, ErrProtocol, func(s Stats) uint64 { return s.CreditViolations }},
		{"reuses a transfer ID", TransferWrite, func(l *liar, _ net.Conn) {
			l.msg(Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 100, ID: 1}, nil)
			l.msg(Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 100, ID: 1}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"claims a total larger than its region", TransferRead, func(l *liar, _ net.Conn) {
			mr := hostrig.Must[*verbs.MR](t)(l.n.V.RegMRAddr(l.n.PD, l.n.Local.Addr+liarMsgArea, 4096, verbs.AccessRemoteRead))
			defer mr.Dereg()
			l.msg(Msg{Type: TypeSrcAvail, Total: 64 << 10, ID: 1, STag: mr.RKey, TO: mr.TO(0)}, nil)
			waitFailed(l.victim(), 10*time.Second)
		}, ErrPeerFailed, func(s Stats) uint64 { return s.RemoteAccessErrors }},
		{"claims a total larger than it writes", TransferWrite, func(l *liar, _ net.Conn) {
			l.msg(Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 64 << 10, ID: 1}, nil)
			m := l.expect(TypeSinkAvail)
			l.rdmaWrite(m.STag, m.TO, 100)
			l.msgInv(Msg{Type: TypeWrDone, Len: 100, ID: 1}, nil, m.STag)
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
		{"writes outside the sink", TransferWrite, func(l *liar, c net.Conn) {
			l.msg(Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 4096, ID: 1}, nil)
			m := l.expect(TypeSinkAvail)
			// The Write completes at the liar (iWARP completes it once
			// sent); the victim's NIC refuses it and sends a Terminate.
			l.rdmaWrite(m.STag, m.TO, 8192)
			vc := c.(*Conn)
			waitFailed(vc, 10*time.Second)
			vc.mu.Lock()
			past := vc.sink.mem[m.TO-vc.sink.mr.TO(0)+uint64(m.Len):][:8192]
			vc.mu.Unlock()
			if !bytes.Equal(past, make([]byte, len(past))) {
				t.Error("bytes past the advertised sink were written")
			}
		}, ErrPeerFailed, func(s Stats) uint64 { return s.RemoteAccessErrors }},
		{"advertises a sink then deregisters it", TransferAuto, func(l *liar, c net.Conn) {
			go c.Write(make([]byte, 64<<10))
			m := l.expect(TypeSrcAvail)
			rest := int(m.Total - m.Len)
			mr := hostrig.Must[*verbs.MR](t)(l.n.V.RegMRAddr(l.n.PD, l.n.Local.Addr+liarMsgArea, rest, verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
			if err := mr.Dereg(); err != nil {
				t.Fatal(err)
			}
			l.msg(Msg{Type: TypeSinkAvail, Len: uint32(rest), ID: m.ID, STag: mr.RKey, TO: mr.TO(0)}, nil)
		}, ErrPeerFailed, func(s Stats) uint64 { return s.RemoteAccessErrors }},
		{"RD_DONE without invalidating", TransferAuto, func(l *liar, c net.Conn) {
			go c.Write(make([]byte, 64<<10))
			m := l.expect(TypeSrcAvail)
			l.msg(Msg{Type: TypeRdDone, Len: m.Total - m.Len, ID: m.ID}, nil)
		}, ErrProtocol, func(s Stats) uint64 { return s.BadMessages }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := stats()
			lr := newLiarCaps(t, a, b, port, tc.pref, liarCaps[tc.name])
			c := <-accepted
			defer c.Close()
			lr.vc = c.(*Conn)
			// MPA: the initiator speaks first.
			lr.msg(Msg{Type: TypeCredit}, nil)
			tc.act(lr, c)
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

// liarCaps are the sink caps the liar offers per case (none otherwise):
// the cases where the victim is the source.
var liarCaps = map[string]uint8{
	"advertises a sink then deregisters it": CapWrite,
	"RD_DONE without invalidating":          CapRead,
}

// victim is the conn the liar talks to (for waiting on it).
func (l *liar) victim() *Conn { return l.vc }

// expect returns the victim's next message, which must be of type typ.
func (l *liar) expect(typ MsgType) Msg {
	l.t.Helper()
	m, _ := l.recv()
	if m.Type != typ {
		l.t.Fatalf("the victim sent %v, want %v", m.Type, typ)
	}
	return m
}

// rdmaWrite RDMA-writes n bytes of 0xEE from the liar's RDMA area to the
// victim's stag at to.
func (l *liar) rdmaWrite(stag uint32, to uint64, n int) rings.Completion {
	l.t.Helper()
	mem := l.n.Local.Bytes()[liarMsgArea : liarMsgArea+n]
	for i := range mem {
		mem[i] = 0xEE
	}
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, RemoteAddr: to, RKey: stag, NumSGE: 1}
	w.SGL[0] = l.n.LocalMR.SGE(liarMsgArea, n)
	return l.post(w)
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
