package nic

import (
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

// rdmaBells is the device's RDMA doorbell registers as the register model
// reaches them (regs.RDMADoorbells).
type rdmaBells interface {
	QPDoorbell(qpn uint32) bool
	ArmCQ(cq, flags uint32) bool
}

func (h *hostSide) bells() rdmaBells { return h.dev.Doorbell().(rdmaBells) }

// regMR registers n bytes of fresh memory for local writes and returns
// its address and key.
func (h *hostSide) regMR(n int) (rings.Addr, uint32) {
	h.t.Helper()
	a, err := h.mem.Alloc(n, 64)
	if err != nil {
		h.t.Fatal(err)
	}
	k := uint32(h.must(rings.Command{Opcode: rings.OpRegMR, Addr: a, Len: uint32(n), Arg0: 7,
		Arg1: rings.MRAccessLocalWrite, Arg3: uint64(a)}).Result)
	return a, k
}

// TestRDMADoorbellRegisters drives a QP pair with the doorbell registers
// and the QP_DOORBELL command in turn, in both directions, with the units
// parking after every pass (SpinPolls 1), so that many doorbells find the
// unit going to sleep: a lost wake-up leaves a message undelivered and the
// test waiting for its completion. The producers of the queues kick
// nobody: the doorbell is the only thing that tells the device.
func TestRDMADoorbellRegisters(t *testing.T) {
	a, b := rdmaPairConfig(t, Config{SpinPolls: 1})
	// No QP, no CQ yet: refused, and nothing is queued.
	if a.bells().QPDoorbell(3) || a.bells().ArmCQ(1, 0) {
		t.Fatal("a doorbell for a QP or CQ not yet created was accepted")
	}
	if a.bells().QPDoorbell(1<<30) || a.bells().ArmCQ(maxCQs, 0) || a.bells().ArmCQ(1<<31, 0) {
		t.Fatal("a doorbell out of range was accepted")
	}
	if n := a.dev.Stat(rings.StatRDMABellErrors); n != 5 {
		t.Fatalf("rdma_bell_errors = %d after 5 refusals", n)
	}
	asq, arq, acq := a.qpSetupKick(true, nil)
	bsq, brq, bcq := b.qpSetupKick(false, nil)
	a.must(rings.Command{Opcode: rings.OpModifyQP, Conn: 3, Arg0: uint32(rings.QPConnect)})
	b.waitQPEvent(rings.QPEvConnectRequest)
	b.must(rings.Command{Opcode: rings.OpModifyQP, Conn: 3, Arg0: uint32(rings.QPAccept)})
	a.waitQPEvent(rings.QPEvEstablished)

	abuf, akey := a.regMR(64)
	bbuf, bkey := b.regMR(64)
	send := func(h *hostSide, sq *rings.Producer, buf rings.Addr, key uint32, id uint64, reg bool) {
		w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: id, NumSGE: 1}
		w.SGL[0] = rings.SGE{Addr: uint64(buf), Length: 8, LKey: key}
		w.Encode(sq.Next())
		sq.Commit()
		h.ring(reg)
	}
	recv := func(h *hostSide, rq *rings.Producer, buf rings.Addr, key uint32, id uint64, reg bool) {
		r := rings.RecvWR{WRID: id, NumSGE: 1}
		r.SGL[0] = rings.SGE{Addr: uint64(buf), Length: 64, LKey: key}
		r.Encode(rq.Next())
		rq.Commit()
		h.ring(reg)
	}
	want := func(cq *rings.Consumer, id uint64) {
		t.Helper()
		if c := pollCQ(t, cq); c.WRID != id || c.Status != rings.WCSuccess {
			t.Fatalf("completion %v, want WRID %d success", &c, id)
		}
	}
	n := 400
	if testing.Short() {
		n = 100
	}
	for i := range n {
		id := uint64(i)
		// Which doorbell each post uses cycles through all four
		// combinations of the two hosts' two ways.
		ra, rb := i%2 == 0, i%4 < 2
		recv(b, brq, bbuf, bkey, id, rb)
		send(a, asq, abuf, akey, id, ra)
		want(acq, id) // A's send completes, then B's receive
		want(bcq, id)
		recv(a, arq, abuf, akey, id, !ra)
		send(b, bsq, bbuf, bkey, id, !rb)
		want(bcq, id)
		want(acq, id)
	}
	if a.dev.Stat(rings.StatParks) == 0 || b.dev.Stat(rings.StatParks) == 0 {
		t.Errorf("the units never parked (%d, %d): the test did not test wake-ups", a.dev.Stat(rings.StatParks), b.dev.Stat(rings.StatParks))
	}

	// CQ arms by register, as ARM_CQ. Armed for all completions, the next
	// one posts one CQ event.
	if !a.bells().ArmCQ(1, 0) {
		t.Fatal("arm of CQ 1 refused")
	}
	recv(b, brq, bbuf, bkey, 1000, true)
	send(a, asq, abuf, akey, 1000, true)
	a.waitCQEvent(1)
	want(acq, 1000)
	want(bcq, 1000)
	// If-pending with an entry the host has not consumed: the event comes
	// at once.
	recv(b, brq, bbuf, bkey, 1001, true)
	send(a, asq, abuf, akey, 1001, true)
	want(bcq, 1001)
	waitUnconsumed(t, acq)
	if !a.bells().ArmCQ(1, rings.ArmIfPending) {
		t.Fatal("if-pending arm of CQ 1 refused")
	}
	a.waitCQEvent(1)
	want(acq, 1001)

	// Destroyed: refused from the moment DESTROY_QP completes. A
	// doorbell accepted just before the QP goes is harmless.
	if !a.bells().QPDoorbell(3) {
		t.Fatal("doorbell of a live QP refused")
	}
	a.must(rings.Command{Opcode: rings.OpDestroyQP, Conn: 3})
	if a.bells().QPDoorbell(3) {
		t.Fatal("doorbell of a destroyed QP accepted")
	}
	a.must(rings.Command{Opcode: rings.OpDestroyCQ, Conn: 1})
	if a.bells().ArmCQ(1, 0) {
		t.Fatal("arm of a destroyed CQ accepted")
	}
	if n := a.dev.Stat(rings.StatRDMABellErrors); n != 7 {
		t.Fatalf("rdma_bell_errors = %d after 7 refusals", n)
	}
}

// ring tells the device the QP on connection 3 has new entries: the
// doorbell register (reg) or the QP_DOORBELL command.
func (h *hostSide) ring(reg bool) {
	h.t.Helper()
	if reg {
		if !h.bells().QPDoorbell(3) {
			h.t.Fatal("QP doorbell refused")
		}
		return
	}
	h.must(rings.Command{Opcode: rings.OpQPDoorbell, Conn: 3})
}

// waitCQEvent waits for CQ cq's event, skipping other notifications.
func (h *hostSide) waitCQEvent(cq uint32) {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, ok := h.notification()
		if ok && n.Flags&rings.NtfCQEvent != 0 && n.Conn == cq {
			return
		}
	}
	h.t.Fatalf("no event for CQ %d", cq)
}

// waitUnconsumed waits until cq holds an entry, leaving it there.
func waitUnconsumed(t *testing.T, cq *rings.Consumer) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if e, err := cq.Peek(); err != nil {
			t.Fatal(err)
		} else if e != nil {
			return
		}
		time.Sleep(100 * time.Microsecond)
	}
	t.Fatal("no completion")
}

// TestRDMADoorbellWithheld: a driver that did not ask for FeatQPDoorbell
// (nic.Config.Withheld) gets its register doorbells refused, even for a
// QP and a CQ that exist; QP_DOORBELL still works.
func TestRDMADoorbellWithheld(t *testing.T) {
	a, _ := rdmaPairConfig(t, Config{Withheld: rings.FeatQPDoorbell})
	a.qpSetupKick(true, nil)
	if a.bells().QPDoorbell(3) || a.bells().ArmCQ(1, 0) {
		t.Fatal("a doorbell register without FeatQPDoorbell was accepted")
	}
	if n := a.dev.Stat(rings.StatRDMABellErrors); n != 2 {
		t.Fatalf("rdma_bell_errors = %d after 2 refusals", n)
	}
	a.must(rings.Command{Opcode: rings.OpQPDoorbell, Conn: 3})
}
