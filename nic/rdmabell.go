package nic

import (
	"math/bits"
	"sync/atomic"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/rings"
)

// The RDMA doorbell registers (rings.RegQPDoorbell, rings.RegCQArm;
// docs/bar0.md): a host's store that names a QP or a CQ reaches the unit
// without a command. The store sets the QP's (or CQ's) bit in a pending
// set and wakes the unit; the unit takes the whole set at the start of a
// pass and does for each what QP_DOORBELL and ARM_CQ do. Nothing is
// allocated per doorbell: the sets are bitmaps sized when the device
// starts, and a doorbell rung twice before the unit looks is one doorbell
// (the unit reads the queues' producer indices, not a count of stores).
//
// Which QPs and CQs exist is published by the unit (live bitmaps) so that
// the store can be refused at once for one that does not: the unit sets a
// QP's bit before CREATE_QP's completion is written, so a host that rings
// only after it saw the completion is never refused, and clears it when
// the QP goes (DESTROY_QP, ABORT, RELEASE). A doorbell that passed the
// check for a QP destroyed before the unit takes it finds no QP and is
// dropped: harmless, as a doorbell for a destroyed QP is on an RNIC.

// RegBell is one RDMA doorbell a step of the unit took (StepInfo.Bells):
// a QP's doorbell, or a CQ's arm with ARM_CQ's flags.
type RegBell struct {
	CQ   bool   // an arm of CQ Num; else the doorbell of QP Num
	Num  uint32 // the QP number (connection index) or CQ number
	Arms uint32 // CQ: the arms rung, merged (BellArmAll, ...)
}

// A CQ's pending arms, as four bits: the arms rung since the unit last
// took the CQ's (a trace records them: docs/trace.md).
const (
	BellArmAll                = 1 << iota // ARM_CQ's flags without ArmIfPending: all completions
	BellArmSolicited                      // ArmSolicited
	BellArmIfPendingAll                   // ArmIfPending
	BellArmIfPendingSolicited             // ArmIfPending and ArmSolicited
	BellArmsValid             = 1<<iota - 1

	armPlainAny = BellArmAll
	armPlainSol = BellArmSolicited
	armIfpAny   = BellArmIfPendingAll
	armIfpSol   = BellArmIfPendingSolicited
)

// armBits is the pending-arm bit of ARM_CQ flags.
func armBits(flags uint32) uint32 {
	sol := flags&rings.ArmSolicited != 0
	switch {
	case flags&rings.ArmIfPending != 0 && sol:
		return armIfpSol
	case flags&rings.ArmIfPending != 0:
		return armIfpAny
	case sol:
		return armPlainSol
	}
	return armPlainAny
}

// regBells is the device's RDMA doorbell state. The host's stores touch
// the atomics; only the unit reads the pending sets back.
type regBells struct {
	any    atomic.Bool     // something is pending
	qpLive []atomic.Uint64 // bit per connection index: a QP exists there
	qpPend []atomic.Uint64 // bit per connection index: its doorbell rang
	qpSum  []atomic.Uint64 // bit per qpPend word that may have a bit set
	cqLive [maxCQs / 64]atomic.Uint64
	cqPend [maxCQs / 64]atomic.Uint64
	cqArm  [maxCQs]atomic.Uint32 // arm bits per CQ
	taken  []RegBell             // the unit's list of this pass's doorbells (reused)
}

func (r *regBells) init(conns int) {
	w := (conns + 63) / 64
	r.qpLive, r.qpPend = make([]atomic.Uint64, w), make([]atomic.Uint64, w)
	r.qpSum = make([]atomic.Uint64, (w+63)/64)
}

func setBit(ws []atomic.Uint64, i uint32)       { ws[i/64].Or(1 << (i % 64)) }
func clearBit(ws []atomic.Uint64, i uint32)     { ws[i/64].And(^(uint64(1) << (i % 64))) }
func hasBit(ws []atomic.Uint64, i uint32) bool  { return ws[i/64].Load()&(1<<(i%64)) != 0 }
func inRange(ws []atomic.Uint64, i uint32) bool { return uint64(i) < uint64(len(ws))*64 }
func connTableSize(c delegation.Config) int {
	if c.MaxConns > 0 {
		return c.MaxConns
	}
	return delegation.DefaultMaxConns
}

// QPDoorbell implements the register RegQPDoorbell on the running device
// (regs.RDMADoorbells): qpn's queues have new entries. False: there is no
// such QP.
func (h hostDoorbell) QPDoorbell(qpn uint32) bool {
	r := &h.d.bells
	if h.d.cfg.Withheld&rings.FeatQPDoorbell != 0 || !inRange(r.qpLive, qpn) || !hasBit(r.qpLive, qpn) {
		h.d.count(rings.StatRDMABellErrors)
		return false
	}
	h.d.ringQP(qpn)
	return true
}

// ArmCQ implements the register RegCQArm: ARM_CQ's flags for CQ cq. False:
// there is no such CQ.
func (h hostDoorbell) ArmCQ(cq, flags uint32) bool {
	r := &h.d.bells
	if h.d.cfg.Withheld&rings.FeatQPDoorbell != 0 || cq >= maxCQs || !hasBit(r.cqLive[:], cq) {
		h.d.count(rings.StatRDMABellErrors)
		return false
	}
	h.d.armCQ(cq, flags)
	return true
}

// RDMADoorbell is the device's RDMA doorbell registers (the register
// model's RegQPDoorbell and RegCQArm, as Doorbell is its ring doorbells),
// for a driver in the device's process (tcpstack.RDMADoorbellDevice).
func (d *Device) RDMADoorbell() rings.RDMADoorbell { return hostDoorbell{d} }

func (d *Device) ringQP(qpn uint32) {
	r := &d.bells
	setBit(r.qpPend, qpn)
	setBit(r.qpSum, qpn/64)
	d.regBellKick()
}

func (d *Device) armCQ(cq, flags uint32) {
	r := &d.bells
	r.cqArm[cq].Or(armBits(flags))
	setBit(r.cqPend[:], cq)
	d.regBellKick()
}

// regBellKick wakes the unit for a pending RDMA doorbell. The pending bit
// and r.any are set before parked is read, and the unit sets parked before
// it re-checks r.any (park): one of the two sees the other, so a doorbell
// rung as the unit goes to sleep is never lost. A running unit takes it
// in its next pass without a kick.
func (d *Device) regBellKick() {
	d.bells.any.Store(true)
	if d.traced || d.cfg.Manual {
		// As hostDoorbell: the step that takes it counts it.
		d.hostRang.Store(true)
		d.bell.Kick()
		return
	}
	if d.parked.Load() {
		d.count(rings.StatDoorbells)
		d.bell.Kick()
	}
}

// takeBells moves every pending RDMA doorbell into r.taken, QPs in number
// order then CQs in number order (unit goroutine).
func (d *Device) takeBells() []RegBell {
	r := &d.bells
	r.taken = r.taken[:0]
	if !r.any.Load() {
		return r.taken
	}
	r.any.Store(false) // before the sets: a doorbell rung from now on sets it again
	for si := range r.qpSum {
		for sw := r.qpSum[si].Swap(0); sw != 0; sw &= sw - 1 {
			w := si*64 + bits.TrailingZeros64(sw)
			for pw := r.qpPend[w].Swap(0); pw != 0; pw &= pw - 1 {
				r.taken = append(r.taken, RegBell{Num: uint32(w*64 + bits.TrailingZeros64(pw))})
			}
		}
	}
	for w := range r.cqPend {
		for pw := r.cqPend[w].Swap(0); pw != 0; pw &= pw - 1 {
			n := uint32(w*64 + bits.TrailingZeros64(pw))
			if a := r.cqArm[n].Swap(0); a != 0 {
				r.taken = append(r.taken, RegBell{CQ: true, Num: n, Arms: a})
			}
		}
	}
	return r.taken
}

// A pass serves the doorbells it took before the command ring, the CQ
// arms first. An arm served early is harmless (a host arms and then polls
// its CQ again, so an event for a completion it finds is at worst one too
// many), while an arm served after a completion it was rung before loses
// that completion's event: so every arm rung before the pass is in force
// before any QP is polled, by register or by QP_DOORBELL command. The QP
// doorbells go before the commands too, so that a doorbell rung before a
// command is served no later than it whenever the pass took it at its
// start. One rung just before a command that the same pass then finds
// (the bells were taken first) is served a pass after that command: the
// register and the command ring are two queues, and nothing orders them
// but the host waiting. That loses nothing: the commands a host sends
// after posting (MODIFY_QP CLOSE, DESTROY_QP, ABORT) flush whatever the
// QP has not sent, seen or not, and a command a host sends before a
// doorbell it then rings is one it waited for (CREATE_QP, CONNECT).

// serveQPs does what QP_DOORBELL does for each QP doorbell taken (unit
// goroutine); it returns how many it served.
func (d *Device) serveQPs(bs []RegBell) int {
	n := 0
	for _, b := range bs {
		if b.CQ {
			continue
		}
		n++
		if q := d.rdma.qps[b.Num]; q != nil {
			q.qp.Poll()
			d.eng.ULPKick(b.Num)
		}
	}
	return n
}

// serveArms does what ARM_CQ does for each CQ arm taken (unit goroutine);
// it returns how many it served.
func (d *Device) serveArms(bs []RegBell) int {
	n := 0
	for _, b := range bs {
		if !b.CQ {
			continue
		}
		n++
		cq := d.rdma.cqs[b.Num]
		if cq == nil {
			continue // destroyed since: harmless
		}
		// Arms merge: an arm only ever widens (solicited, then any), so
		// the plain arms first and the if-pending ones after leave the
		// CQ as the arms one by one would, with at most one event.
		if p := b.Arms & (armPlainAny | armPlainSol); p != 0 {
			cq.Arm(p&armPlainAny == 0)
		}
		if p := b.Arms & (armIfpAny | armIfpSol); p != 0 && cq.ArmIfPending(p&armIfpAny == 0) {
			d.postEvent(rings.Notification{Flags: rings.NtfCQEvent, Conn: b.Num})
		}
	}
	return n
}

// setQPLive and setCQLive publish which QPs and CQs exist (unit goroutine).
func (d *Device) setQPLive(idx uint32, live bool) {
	if !inRange(d.bells.qpLive, idx) {
		return
	}
	if live {
		setBit(d.bells.qpLive, idx)
	} else {
		clearBit(d.bells.qpLive, idx)
	}
}

func (d *Device) setCQLive(num uint32, live bool) {
	if live {
		setBit(d.bells.cqLive[:], num)
	} else {
		clearBit(d.bells.cqLive[:], num)
	}
}

// dropQP forgets the QP on connection idx.
func (d *Device) dropQP(idx uint32) {
	delete(d.rdma.qps, idx)
	d.setQPLive(idx, false)
}
