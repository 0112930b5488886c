package nic

import (
	"bytes"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// rdmaPair is two devices on one wire with one delegated connection
// between them (installed by OFFLOAD on both sides with mirrored state).
func rdmaPair(t *testing.T) (a, b *hostSide) { return rdmaPairConfig(t, Config{}) }

// rdmaPairConfig is rdmaPair with both devices configured by cfg (their
// MACs set).
func rdmaPairConfig(t *testing.T, cfg Config) (a, b *hostSide) {
	pa, pb := port.MustNewWire(port.WireConfig{})
	ca, cb := cfg, cfg
	ca.MAC, cb.MAC = devMAC, peerMAC
	a = newHostSideOn(t, 8, ca, pa, nil)
	b = newHostSideOn(t, 8, cb, pb, nil)
	off := func(h *hostSide, lip, rip [4]byte, lmac, rmac [6]byte, lp, rp uint16, snd, rcv uint32) {
		st := rings.ConnState{Version: rings.ConnStateVersion, State: rings.StateEstablished,
			LocalIP: lip, RemoteIP: rip, LocalPort: lp, RemotePort: rp, LocalMAC: lmac, NextHopMAC: rmac,
			SndUna: snd, SndNxt: snd, RcvNxt: rcv, SndWnd: 65535, MSS: 1460, RcvBufSize: 256 << 10, RcvAdvertised: 65535}
		blk, _ := h.mem.Alloc(rings.ConnStateSize, 64)
		m, _ := h.mem.Map(blk, rings.ConnStateSize)
		st.Encode(m)
		if s := h.command(rings.Command{Opcode: rings.OpOffload, Conn: 3, Addr: blk, Len: rings.ConnStateSize}).Status; s != rings.StatusOK {
			t.Fatalf("OFFLOAD: %v", s)
		}
	}
	off(a, devIP, peerIP, devMAC, peerMAC, 1000, 2000, 1000, 5000)
	off(b, peerIP, devIP, peerMAC, devMAC, 2000, 1000, 5000, 1000)
	return a, b
}

func (h *hostSide) must(c rings.Command) rings.Command {
	h.t.Helper()
	out := h.command(c)
	if out.Status != rings.StatusOK {
		h.t.Fatalf("%v: %v", c.Opcode, out.Status)
	}
	return out
}

// qpSetup creates a CQ (number 1) and a QP on connection 3; it returns the
// SQ and RQ producers and the CQ consumer.
func (h *hostSide) qpSetup(initiator bool) (sq, rq *rings.Producer, cq *rings.Consumer) {
	h.t.Helper()
	return h.qpSetupKick(initiator, h.dev.Doorbell())
}

// qpSetupKick is qpSetup with the queues' producers kicking door (nil:
// nobody).
func (h *hostSide) qpSetupKick(initiator bool, door rings.Doorbell) (sq, rq *rings.Producer, cq *rings.Consumer) {
	h.t.Helper()
	cql, _ := rings.AllocRing(h.mem, 64, rings.CQEntrySize)
	h.must(rings.Command{Opcode: rings.OpCreateCQ, Conn: 1, Addr: cql.Base, Arg0: 64})
	sql, _ := rings.AllocRing(h.mem, 16, rings.SQEntrySize)
	rql, _ := rings.AllocRing(h.mem, 16, rings.RQEntrySize)
	qc := rings.QPConfig{PD: 7, SendCQ: 1, RecvCQ: 1, SQBase: sql.Base, SQCount: 16, RQBase: rql.Base, RQCount: 16}
	if initiator {
		qc.Flags = rings.QPFlagInitiator
	}
	blk, _ := h.mem.Alloc(rings.QPConfigSize, 64)
	m, _ := h.mem.Map(blk, rings.QPConfigSize)
	qc.Encode(m)
	h.must(rings.Command{Opcode: rings.OpCreateQP, Conn: 3, Addr: blk, Len: rings.QPConfigSize})
	sq, _ = rings.NewProducer(h.mem, sql, 1, door)
	rq, _ = rings.NewProducer(h.mem, rql, 1, door)
	cq, _ = rings.NewConsumer(h.mem, cql, 1, nil)
	return sq, rq, cq
}

func (h *hostSide) waitQPEvent(ev rings.QPEvent) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, ok := h.notification()
		if ok && n.Flags&rings.NtfQPEvent != 0 && rings.QPEvent(n.Aux) == ev {
			return
		}
	}
	h.t.Fatalf("no QP event %d", ev)
}

func pollCQ(t *testing.T, cq *rings.Consumer) rings.Completion {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		e, err := cq.Peek()
		if err != nil {
			t.Fatal(err)
		}
		if e != nil {
			var c rings.Completion
			_ = c.Decode(e)
			cq.Pop()
			cq.Release()
			return c
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
	return rings.Completion{}
}

// TestRDMAThroughCommandRing sets up a QP pair purely through the command
// ring (REG_MR, CREATE_CQ, CREATE_QP, MODIFY_QP) and moves an RDMA Write
// and a Send; the data lands in the other host's memory by the device.
func TestRDMAThroughCommandRing(t *testing.T) {
	a, b := rdmaPair(t)
	// B exposes a region for remote writes, with guard bytes around it.
	region, _ := b.mem.Alloc(4096+128, 64)
	guard, _ := b.mem.Map(region, 4096+128)
	for i := range guard {
		guard[i] = 0xEE
	}
	stag := uint32(b.must(rings.Command{Opcode: rings.OpRegMR, Addr: region + 64, Len: 4096, Arg0: 7,
		Arg1: rings.MRAccessLocalWrite | rings.MRAccessRemoteWrite, Arg3: 0x10000}).Result)
	src, _ := a.mem.Alloc(4096, 64)
	sb, _ := a.mem.Map(src, 4096)
	for i := range sb {
		sb[i] = byte(i * 13)
	}
	lkey := uint32(a.must(rings.Command{Opcode: rings.OpRegMR, Addr: src, Len: 4096, Arg0: 7, Arg3: uint64(src)}).Result)

	asq, _, acq := a.qpSetup(true)
	_, brq, bcq := b.qpSetup(false)
	// B posts a receive for the Send.
	rbuf, _ := b.mem.Alloc(256, 64)
	rkey := uint32(b.must(rings.Command{Opcode: rings.OpRegMR, Addr: rbuf, Len: 256, Arg0: 7, Arg1: rings.MRAccessLocalWrite, Arg3: uint64(rbuf)}).Result)
	rw := rings.RecvWR{WRID: 77, NumSGE: 1}
	rw.SGL[0] = rings.SGE{Addr: uint64(rbuf), Length: 256, LKey: rkey}
	rw.Encode(brq.Next())
	brq.Commit()
	b.must(rings.Command{Opcode: rings.OpQPDoorbell, Conn: 3})

	a.must(rings.Command{Opcode: rings.OpModifyQP, Conn: 3, Arg0: uint32(rings.QPConnect)})
	b.waitQPEvent(rings.QPEvConnectRequest)
	b.must(rings.Command{Opcode: rings.OpModifyQP, Conn: 3, Arg0: uint32(rings.QPAccept)})
	a.waitQPEvent(rings.QPEvEstablished)

	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 1, RemoteAddr: 0x10000, RKey: stag, NumSGE: 1}
	w.SGL[0] = rings.SGE{Addr: uint64(src), Length: 4096, LKey: lkey}
	w.Encode(asq.Next())
	asq.Commit()
	s := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 2, NumSGE: 1}
	s.SGL[0] = rings.SGE{Addr: uint64(src), Length: 100, LKey: lkey}
	s.Encode(asq.Next())
	asq.Commit()
	a.must(rings.Command{Opcode: rings.OpQPDoorbell, Conn: 3})

	for _, want := range []uint64{1, 2} {
		if c := pollCQ(t, acq); c.WRID != want || c.Status != rings.WCSuccess {
			t.Fatalf("A completion %v, want WRID %d success", &c, want)
		}
	}
	c := pollCQ(t, bcq)
	if c.WRID != 77 || c.Status != rings.WCSuccess || c.ByteLen != 100 {
		t.Fatalf("B receive completion %v", &c)
	}
	if !bytes.Equal(guard[64:64+4096], sb) {
		t.Fatal("RDMA Write data not in B's region")
	}
	for _, g := range append(guard[:64:64], guard[64+4096:]...) {
		if g != 0xEE {
			t.Fatal("guard bytes around the region changed")
		}
	}
	got, _ := b.mem.Map(rbuf, 100)
	if !bytes.Equal(got, sb[:100]) {
		t.Fatal("Send data not in B's receive buffer")
	}
	st, ok := b.dev.QPStats(3)
	for i := 0; i < 100 && (!ok || st.Placed < 4096); i++ {
		time.Sleep(5 * time.Millisecond)
		st, ok = b.dev.QPStats(3)
	}
	t.Logf("B QP stats %+v", st)

	// Bad commands: unknown CQ, duplicate QP, unknown STag.
	if s := a.command(rings.Command{Opcode: rings.OpArmCQ, Conn: 99}).Status; s != rings.StatusBadParam {
		t.Errorf("ARM_CQ of an unknown CQ: %v", s)
	}
	if s := a.command(rings.Command{Opcode: rings.OpDeregMR, Arg0: 0xdeadbe00}).Status; s != rings.StatusBadParam {
		t.Errorf("DEREG_MR of an unknown STag: %v", s)
	}
	if s := a.command(rings.Command{Opcode: rings.OpDestroyCQ, Conn: 1}).Status; s != rings.StatusBadState {
		t.Errorf("DESTROY_CQ in use: %v", s)
	}
}

// TestAbortFlushesQP: ABORT of an RDMA connection takes its QP down with
// it, and every work request the host posted completes flushed, even those
// the device had not been told about (no doorbell) on a QP already closing.
func TestAbortFlushesQP(t *testing.T) {
	a, _ := rdmaPair(t)
	sq, rq, cq := a.qpSetup(true)
	a.must(rings.Command{Opcode: rings.OpModifyQP, Conn: 3, Arg0: uint32(rings.QPClose)})
	for i := range 3 {
		r := rings.RecvWR{WRID: uint64(10 + i)}
		r.Encode(rq.Next())
		rq.Commit()
	}
	s := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 20}
	s.Encode(sq.Next())
	sq.Commit()
	a.must(rings.Command{Opcode: rings.OpAbort, Conn: 3})
	got := map[uint64]rings.WCStatus{}
	for range 4 {
		c := pollCQ(t, cq)
		got[c.WRID] = c.Status
	}
	for _, id := range []uint64{10, 11, 12, 20} {
		if st, ok := got[id]; !ok || st != rings.WCWRFlushErr {
			t.Errorf("WR %d: %v (present %v), want a flush completion", id, st, ok)
		}
	}
	if s := a.command(rings.Command{Opcode: rings.OpQPDoorbell, Conn: 3}).Status; s != rings.StatusBadConn {
		t.Errorf("QP_DOORBELL after ABORT: %v, want BAD_CONN", s)
	}
}

// TestCreateQPFlags: CREATE_QP takes the MPA flags (no CRC, peer-to-peer,
// revision 1) and refuses a reserved bit and peer-to-peer at revision 1.
func TestCreateQPFlags(t *testing.T) {
	a, _ := rdmaPair(t)
	cql, _ := rings.AllocRing(a.mem, 64, rings.CQEntrySize)
	a.must(rings.Command{Opcode: rings.OpCreateCQ, Conn: 1, Addr: cql.Base, Arg0: 64})
	sql, _ := rings.AllocRing(a.mem, 16, rings.SQEntrySize)
	rql, _ := rings.AllocRing(a.mem, 16, rings.RQEntrySize)
	blk, _ := a.mem.Alloc(rings.QPConfigSize, 64)
	create := func(flags uint32) rings.Status {
		qc := rings.QPConfig{PD: 7, Flags: flags, SendCQ: 1, RecvCQ: 1, SQBase: sql.Base, SQCount: 16, RQBase: rql.Base, RQCount: 16}
		m, _ := a.mem.Map(blk, rings.QPConfigSize)
		qc.Encode(m)
		return a.command(rings.Command{Opcode: rings.OpCreateQP, Conn: 3, Addr: blk, Len: rings.QPConfigSize}).Status
	}
	for _, f := range []uint32{1 << 4, 1 << 31, rings.QPFlagInitiator | rings.QPFlagPeerToPeer | rings.QPFlagMPARev1} {
		if s := create(f); s != rings.StatusBadParam {
			t.Errorf("flags %#x: %v, want BAD_PARAM", f, s)
		}
	}
	if s := create(rings.QPFlagInitiator | rings.QPFlagNoCRC | rings.QPFlagPeerToPeer); s != rings.StatusOK {
		t.Fatalf("initiator, no CRC, peer-to-peer: %v", s)
	}
}
