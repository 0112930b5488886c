package direct

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// liarPair is a listener on b and a liar on a connected to it, with the
// victim conn it was accepted as (the liar has already spoken first).
func liarPair(t *testing.T, port uint16, pref Transfer, caps uint8) (*liar, *Conn) {
	t.Helper()
	a, b := rig(t)
	l, err := Listen(b, port, Config{Linger: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	lr := newLiarCaps(t, a, b, port, pref, caps)
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	lr.vc = c.(*Conn)
	lr.msg(Msg{Type: TypeCredit}, nil)
	return lr, lr.vc
}

// rdmaRead RDMA-reads n bytes of the victim's stag at to into the liar's
// RDMA area.
func (l *liar) rdmaRead(stag uint32, to uint64, n int) rings.Completion {
	w := rings.SendWR{Opcode: rings.WRRDMARead, RemoteAddr: to, RKey: stag, NumSGE: 1}
	w.SGL[0] = l.n.LocalMR.SGE(liarMsgArea, n)
	return l.post(w)
}

// TestSTagDeadAfterRdDone: RDMA Read rendezvous with a liar as the sink.
// The SRC_AVAIL carries the total and the first part; the liar reads the
// rest, answers RD_DONE as a Send with Invalidate, then reads the same
// STag again: the victim's NIC refuses it with a Terminate (the liar's
// Read completes in error), and the victim's switch deregistered the
// region.
func TestSTagDeadAfterRdDone(t *testing.T) {
	lr, vc := liarPair(t, 8301, TransferInline, CapRead)
	data := make([]byte, 128<<10)
	for i := range data {
		data[i] = byte(i * 13)
	}
	regs := HostStats(vc.sw.h).Registrations
	werr := make(chan error, 1)
	go func() { _, err := vc.Write(data); werr <- err }()
	m, first := lr.recv()
	if m.Type != TypeSrcAvail || m.Flags != 0 || m.Total != uint32(len(data)) || int(m.Len) != len(first) ||
		m.Len != uint32(lr.n.Cfg.RecvSize-HeaderSize) || !bytes.Equal(first, data[:m.Len]) {
		t.Fatalf("SRC_AVAIL %+v with %d bytes inline, want the total %d and the first %d bytes", m, len(first), len(data), lr.n.Cfg.RecvSize-HeaderSize)
	}
	rest := int(m.Total - m.Len)
	if wc := lr.rdmaRead(m.STag, m.TO, rest); wc.Status != rings.WCSuccess {
		t.Fatalf("RDMA Read of the source: %v", &wc)
	}
	if got := lr.n.Local.Bytes()[liarMsgArea : liarMsgArea+rest]; !bytes.Equal(got, data[m.Len:]) {
		t.Fatal("the source's region does not hold the rest of the send")
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if got := HostStats(vc.sw.h).Registrations - regs; got < 1 {
		t.Fatalf("%d registrations for the transfer", got)
	}
	lr.msgInv(Msg{Type: TypeRdDone, Len: uint32(rest), ID: m.ID}, nil, m.STag)
	// In order on the stream: the NIC invalidated the STag as the RD_DONE
	// arrived, before this Read's request.
	wc := lr.rdmaRead(m.STag, m.TO, 16)
	if wc.Status == rings.WCSuccess {
		t.Fatal("an RDMA Read of the source's STag after RD_DONE succeeded")
	}
	// The QP event comes on the notification ring, not the CQ.
	select {
	case <-lr.qp.Failed():
	case <-time.After(10 * time.Second):
	}
	t.Logf("the Read after RD_DONE: %v; liar's QP: %v", wc.Status, lr.qp.Err())
	if !errors.Is(lr.qp.Err(), verbs.ErrQPError) || lr.qp.LastEvent() != rings.QPEvTerminate {
		t.Errorf("the liar's QP is not terminated: %v (event %v)", lr.qp.Err(), lr.qp.LastEvent())
	}
	if err := waitFailed(vc, 10*time.Second); !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("the victim: %v, want ErrPeerFailed", err)
	}
	// The victim's QP is gone (its conn failed); the liar's device
	// counted the Terminate it got.
	if d := settled(t, lr.n.H); d.QPs[lr.qp.QPN()].TerminatesRecv == 0 {
		t.Errorf("no Terminate reached the liar: %+v", d.QPs[lr.qp.QPN()])
	}
	deadline := time.Now().Add(10 * time.Second)
	for HostStats(vc.sw.h).Deregistrations < HostStats(vc.sw.h).Registrations && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if s := HostStats(vc.sw.h); s.Deregistrations != s.Registrations {
		t.Errorf("%d registrations, %d deregistrations", s.Registrations, s.Deregistrations)
	}
}

// TestReadSinkNotRemoteWritable: in Read mode the sink area is registered
// for local access only: a liar that RDMA-writes into it with its STag is
// refused by the victim's NIC, and the memory is unchanged.
func TestReadSinkNotRemoteWritable(t *testing.T) {
	lr, vc := liarPair(t, 8302, TransferRead, 0)
	src := liarSource(t, lr)
	lr.msg(Msg{Type: TypeSrcAvail, Total: 4096, ID: 1, STag: src.RKey, TO: src.TO(0)}, nil)
	buf := make([]byte, 4096)
	vc.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(vc, buf); err != nil {
		t.Fatal(err)
	}
	vc.mu.Lock()
	mr, mem := vc.sink.mr, vc.sink.mem
	vc.mu.Unlock()
	if mr.Access&verbs.AccessRemoteWrite != 0 {
		t.Fatalf("the sink area is registered with access %#x", mr.Access)
	}
	before := bytes.Clone(mem)
	lr.rdmaWrite(mr.RKey, mr.TO(0), 4096)
	if err := waitFailed(vc, 10*time.Second); !errors.Is(err, ErrPeerFailed) {
		t.Fatalf("the victim: %v, want ErrPeerFailed", err)
	}
	if !bytes.Equal(mem, before) {
		t.Fatal("the RDMA Write changed the sink area")
	}
}

// liarSource gives the liar a 4 KiB source region (remote read), freed at
// cleanup.
func liarSource(t *testing.T, lr *liar) *verbs.MR {
	mr, err := lr.n.V.RegMRAddr(lr.n.PD, lr.n.Local.Addr+liarMsgArea, 4096, verbs.AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mr.Dereg() })
	return mr
}

// TestLingerExpiredCounted: a Close with a transfer still unanswered (the
// liar never pulls the SRC_AVAIL's source) returns at once; the conn
// drains in the background (Stats.Lingering) until Config.Linger runs out,
// which is counted in LingerExpired, once, and then lets the QP go.
func TestLingerExpiredCounted(t *testing.T) {
	lr, vc := liarPair(t, 8303, TransferInline, CapRead)
	before := HostStats(vc.sw.h)
	data := make([]byte, 128<<10)
	werr := make(chan error, 1)
	go func() { _, err := vc.Write(data); werr <- err }()
	if m, _ := lr.recv(); m.Type != TypeSrcAvail {
		t.Fatalf("got %+v, want a SRC_AVAIL", m)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := vc.Close(); err != nil {
		t.Fatal(err)
	}
	returned := time.Since(start)
	if s := HostStats(vc.sw.h); s.Lingering != before.Lingering+1 {
		t.Errorf("after Close: %d lingering, want %d", s.Lingering, before.Lingering+1)
	}
	if _, err := vc.Read(make([]byte, 1)); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Read after Close: %v, want net.ErrClosed", err)
	}
	if _, err := vc.Write([]byte{1}); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Write after Close: %v, want net.ErrClosed", err)
	}
	testutil.Eventually(t, "the linger ran out", 10*time.Second, func() bool {
		s := HostStats(vc.sw.h)
		return s.LingerExpired-before.LingerExpired == 1 && s.Lingering == before.Lingering
	})
	if d := time.Since(start); d < 100*time.Millisecond {
		t.Errorf("the linger ran out after %v, want the 100 ms linger", d)
	}
	if returned >= 100*time.Millisecond {
		t.Errorf("Close returned after %v, want at once (the drain is in the background)", returned)
	}
	vc.mu.Lock()
	closed := vc.closed
	vc.mu.Unlock()
	if !closed {
		t.Error("the conn was not torn down after its linger")
	}
}
