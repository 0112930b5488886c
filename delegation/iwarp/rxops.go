package iwarp

// The receive side's one dispatch table: what the engine does with each RDMAP
// opcode of an inbound DDP segment, in one place. Linux siw's iwarp_pktinfo
// (header length, control bits, receive function per opcode) is the model;
// here an entry also names the untagged queue the opcode must arrive on and
// the checks that need no state change, so a handler only sees segments that
// passed them.
//
// Every segment goes through ulpdu in this order, which decides which
// Terminate a segment with several faults gets (docs/iwarp.md, "Terminate
// codes used"):
//
//  1. the ULPDU holds the DDP header its T bit announces (DDP catastrophic);
//  2. DDP version, then RDMAP version;
//  3. the opcode has an entry with a handler and the entry's buffer model
//     matches the T bit (unexpected opcode);
//  4. an untagged segment arrives on the entry's queue (invalid QN);
//  5. the entry's validator (MSN, MO, fixed payload, ...);
//  6. the handler, which places data, consumes receive work requests and
//     completes work; the checks that depend on what it consumed stay in it.

// rxOp is one RDMAP opcode's receive entry.
type rxOp struct {
	op   Opcode
	name string // the message, as docs/iwarp.md's RDMAP table names it
	// tagged is the DDP buffer model the opcode uses; hdrLen follows from
	// it (DDPTaggedHeaderLen or DDPUntaggedHeaderLen) and is where the
	// payload starts.
	tagged bool
	hdrLen int
	qn     uint32 // untagged queue number (RFC 5040 §5.1, RFC 7306 §8.1)
	// payload is the exact payload length of a fixed-size message (the
	// validator or handler checks it, where docs/iwarp.md's order puts
	// the check); 0 for a message of any length.
	payload int
	// validate judges the segment before anything is consumed; nil when
	// the opcode needs no check beyond the common ones. A failure is
	// answered by a Terminate carrying the segment's DDP header.
	validate func(qp *QP, u []byte, e *rxOp) (TermError, bool)
	// handle executes a valid segment. nil: the engine parses and encodes
	// the opcode but does not execute it, and answers it with an
	// unexpected-opcode Terminate (the atomics).
	handle func(qp *QP, u []byte, e *rxOp)
}

// rxOps is indexed by the 4-bit RDMAP opcode; the opcodes RDMAP does not
// define (12..15) have no entry and, like the atomics, get an
// unexpected-opcode Terminate.
var rxOps = [RDMAPMaskOpcode + 1]rxOp{
	OpWrite: {op: OpWrite, name: "RDMA Write", tagged: true, hdrLen: DDPTaggedHeaderLen,
		handle: (*QP).rxWrite},
	OpReadRequest: {op: OpReadRequest, name: "Read Request", hdrLen: DDPUntaggedHeaderLen, qn: QNReadRequest,
		payload: ReadRequestLen, validate: validateReadRequest, handle: (*QP).rxReadRequest},
	OpReadResponse: {op: OpReadResponse, name: "Read Response", tagged: true, hdrLen: DDPTaggedHeaderLen,
		validate: validateReadResponse, handle: (*QP).rxReadResponse},
	OpSend: {op: OpSend, name: "Send", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		validate: validateSend, handle: (*QP).rxSend},
	OpSendInv: {op: OpSendInv, name: "Send with Invalidate", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		validate: validateSend, handle: (*QP).rxSend},
	OpSendSE: {op: OpSendSE, name: "Send with SE", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		validate: validateSend, handle: (*QP).rxSend},
	OpSendSEInv: {op: OpSendSEInv, name: "Send with SE and Invalidate", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		validate: validateSend, handle: (*QP).rxSend},
	OpTerminate: {op: OpTerminate, name: "Terminate", hdrLen: DDPUntaggedHeaderLen, qn: QNTerminate,
		handle: (*QP).rxTerminate},
	OpImmediate: {op: OpImmediate, name: "Immediate Data", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		payload: ImmediateDataLen, validate: validateSend, handle: (*QP).rxSend},
	OpImmediateSE: {op: OpImmediateSE, name: "Immediate Data with SE", hdrLen: DDPUntaggedHeaderLen, qn: QNSend,
		payload: ImmediateDataLen, validate: validateSend, handle: (*QP).rxSend},
	OpAtomicRequest: {op: OpAtomicRequest, name: "Atomic Request", hdrLen: DDPUntaggedHeaderLen, qn: QNAtomicRequest,
		payload: AtomicRequestLen},
	OpAtomicResponse: {op: OpAtomicResponse, name: "Atomic Response", hdrLen: DDPUntaggedHeaderLen, qn: QNAtomicResponse,
		payload: AtomicResponseLen},
}

// ulpdu validates and executes one DDP segment through rxOps.
func (qp *QP) ulpdu(u []byte) {
	// The T bit says how long the header is; without the whole header
	// not even the opcode can be trusted.
	if len(u) == 0 || len(u) < DDPHeaderLen(u[0]) {
		qp.terminate(catastrophic, nil, false, false)
		return
	}
	h := DDPHeader(u)
	if h.Version() != DDPVersion {
		if h.Tagged() {
			qp.terminate(TermError{LayerDDP, ETypeTaggedBuffer, CodeTInvalidVersion}, nil, false, false)
		} else {
			qp.terminate(TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidVersion}, nil, false, false)
		}
		return
	}
	if h.RDMAPVer() != RDMAPVersion {
		qp.terminate(TermError{LayerRDMAP, ETypeRemoteOperation, CodeInvalidRDMAPVer}, nil, false, false)
		return
	}
	e := &rxOps[h.Opcode()]
	if e.handle == nil || e.tagged != h.Tagged() {
		qp.terminate(TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}, u, true, false)
		return
	}
	if !e.tagged && h.QN() != e.qn {
		qp.terminate(TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidQN}, u, true, false)
		return
	}
	if e.validate != nil {
		if te, ok := e.validate(qp, u, e); !ok {
			qp.terminate(te, u, true, false)
			return
		}
	}
	e.handle(qp, u, e)
}

// validateReadRequest: an RDMA Read Request is the next message of its queue
// and one whole segment of exactly its fixed payload.
func validateReadRequest(qp *QP, u []byte, e *rxOp) (TermError, bool) {
	h := DDPHeader(u)
	switch {
	case h.MSN() != qp.rxMSN[QNReadRequest]:
		return TermError{LayerDDP, ETypeUntaggedBuffer, CodeUMSNRange}, false
	case h.MO() != 0:
		return TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidMO}, false
	case !h.Last() || len(u)-e.hdrLen != e.payload:
		return TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}, false
	}
	return TermError{}, true
}

// validateReadResponse: a Read Response answers an RDMA Read of ours. The
// checks against that read (sink STag, TO, length) fail the read's work
// request too, so they are the handler's.
func validateReadResponse(qp *QP, _ []byte, _ *rxOp) (TermError, bool) {
	if qp.orqN == 0 {
		return TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}, false
	}
	return TermError{}, true
}

// validateSend: a segment of a Send or Immediate Data message is the next of
// queue 0's current message: a new message starts at MO 0, a continuing one
// at the next byte and with the same opcode.
func validateSend(qp *QP, u []byte, e *rxOp) (TermError, bool) {
	h := DDPHeader(u)
	r := &qp.rx
	mo := uint32(0)
	if r.active {
		mo = r.off
	}
	switch {
	case h.MSN() != qp.rxMSN[QNSend]:
		return TermError{LayerDDP, ETypeUntaggedBuffer, CodeUMSNRange}, false
	case h.MO() != mo:
		return TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidMO}, false
	case r.active && e.op != r.op:
		return TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}, false
	}
	return TermError{}, true
}
