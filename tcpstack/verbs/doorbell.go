package verbs

import (
	"errors"
	"fmt"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// The QP doorbell and the CQ arm. Where the device has the RDMA doorbell
// registers (rings.FeatQPDoorbell: RegQPDoorbell, RegCQArm in
// docs/bar0.md) a post rings the QP with one posted register write, as on
// an RNIC's doorbell page: no command-ring entry, no dispatch, no
// completion. In the device's process that write is a call into the
// device (nic.Device.RDMADoorbell); over the split socket it is a
// REG_WRITE. Elsewhere the doorbell is the QP_DOORBELL command, and the
// arm ARM_CQ.
//
// A register write the device refuses (ErrNoDoorbell: the device has no
// such QP, or it is disabled) is known at once: the register model's
// answer comes back with the write (the in-process call's result,
// REG_WRITE's reply). The QP then fails as for a refused QP_DOORBELL: a
// synchronous doorbell returns the error (wrapping ErrDoorbell), an
// asynchronous one moves the QP to ERROR (QP.Failed, QP.DoorbellErr).

// errBellRefused is a refused doorbell register write.
var errBellRefused = errors.New("the device refused the doorbell register write (no such QP, or the device is disabled)")

// rdmaDoorbell finds the host's RDMA doorbell registers, nil where the
// device does not offer them.
func rdmaDoorbell(rh tcpstack.RDMAHost) rings.RDMADoorbell {
	if dh, ok := rh.(tcpstack.RDMADoorbellHost); ok {
		return dh.RDMADoorbell()
	}
	return nil
}

// SetAsyncDoorbell makes the QP's doorbell asynchronous: PostSend and
// PostRecv do not wait for the device's answer. With the doorbell
// register that changes only what a refusal does (it moves the QP to ERROR
// instead of failing the post): the register write is posted either way.
// With the QP_DOORBELL command, PostSend and PostRecv submit it and return
// (the unit runs commands in order and reads the queues when it runs the
// doorbell, so the entries are seen all the same); a doorbell the device
// refuses, or that is lost, moves the QP to ERROR. For callers that post
// often from a latency-sensitive path (sockets direct): a synchronous
// command doorbell is a command round trip per post. On a host that takes
// posted commands (tcpstack.RDMAPostedSubmitter) the command is posted:
// the host's command vector is neither woken for it nor by its
// completion, and a refusal reaches the QP within a millisecond of the
// device's answer instead of at once.
func (qp *QP) SetAsyncDoorbell(on bool) { qp.asyncDB.Store(on) }

// doorbell tells the device the QP's queues have new entries. Posting to a
// QP in ERROR is allowed (the work completes flushed, as in verbs).
func (qp *QP) doorbell() error {
	if db := qp.v.db; db != nil {
		if db.QPDoorbell(qp.qpn) {
			return nil
		}
		if qp.asyncDB.Load() {
			qp.doorbellDone(nil, errBellRefused)
			return nil
		}
		return fmt.Errorf("verbs: QP %d doorbell (work request queued): %w: %w", qp.qpn, ErrDoorbell, errBellRefused)
	}
	if qp.asyncDB.Load() {
		qp.dbMu.Lock()
		if qp.dbDone == nil {
			qp.dbDone = qp.doorbellDone
		}
		qp.dbCmd[0] = tcpstack.HostCommand{Cmd: rings.Command{Opcode: rings.OpQPDoorbell, Conn: qp.qpn}}
		var err error
		if ps, ok := qp.v.host.(tcpstack.RDMAPostedSubmitter); ok {
			err = ps.SubmitPosted(qp.dbCmd[:], qp.dbDone)
		} else {
			err = qp.v.host.SubmitAsync(qp.dbCmd[:], qp.dbDone)
		}
		qp.dbMu.Unlock()
		if err != nil {
			return fmt.Errorf("verbs: QP %d doorbell (work request queued): %w", qp.qpn, err)
		}
		return nil
	}
	_, err := qp.v.do(rings.Command{Opcode: rings.OpQPDoorbell, Conn: qp.qpn})
	if err != nil {
		return fmt.Errorf("verbs: QP %d doorbell (work request queued): %w", qp.qpn, err)
	}
	return nil
}

// doorbellDone is an asynchronous doorbell's outcome.
func (qp *QP) doorbellDone(res []rings.Command, err error) {
	if err == nil && len(res) == 1 && res[0].Status == rings.StatusOK {
		return
	}
	if err == nil && len(res) == 1 {
		err = &CommandError{Op: rings.OpQPDoorbell, Status: res[0].Status}
	}
	// Whatever state the QP is in, the work behind this doorbell will
	// never complete: Failed must close.
	qp.mu.Lock()
	e := fmt.Errorf("%w: %w: %v", ErrQPError, ErrDoorbell, err)
	if qp.dbErr == nil {
		qp.dbErr = e
	}
	qp.failLocked(e)
	qp.changedLocked()
	qp.mu.Unlock()
}

// bellRefused is a doorbell register write the device refused after the
// post that made it returned (a transport that does not wait: the split
// socket's REG_POST). The QP's work behind it will never complete, so the
// QP fails (ErrDoorbell), whichever doorbell mode it was in; a CQ's arm
// fails as a posted ARM_CQ does. Called on the transport's reader: it
// must not block.
func (v *Provider) bellRefused(off, val uint32) {
	switch off {
	case rings.RegQPDoorbell:
		v.mu.Lock()
		qp := v.qps[val]
		v.mu.Unlock()
		if qp != nil {
			qp.doorbellDone(nil, errBellRefused)
		}
	case rings.RegCQArm:
		num := val & rings.Bar0CQNumMask
		if num >= maxCQNum {
			return
		}
		v.mu.Lock()
		cq := v.cqs[num]
		v.mu.Unlock()
		if cq != nil {
			cq.armFailed(nil, errBellRefused)
		}
	}
}

// armRegister arms the CQ for PollWait with the arm register: ARM_CQ's
// ArmIfPending, posted. A refusal (the device has no such CQ) is reported
// as a posted ARM_CQ's failure is: the waiters poll again and arm by
// command from then on, which reports the error.
func (cq *CQ) armRegister(db rings.RDMADoorbell, solicitedOnly bool) error {
	if cq.dead.Load() {
		return ErrCQDestroyed
	}
	flags := rings.ArmIfPending
	if solicitedOnly {
		flags |= rings.ArmSolicited
	}
	if !db.ArmCQ(cq.num, flags) {
		cq.armFailed(nil, errBellRefused)
	}
	return nil
}
