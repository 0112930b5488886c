package iwarp

import (
	"errors"
	"fmt"

	"github.com/emunic/emunic/rings"
)

// Receive consumes the next in-order bytes of the TCP stream under the QP,
// as the TCP engine delivers them: any split, FPDUs straddling calls. It
// always takes all of b. An FPDU is processed only once it is complete and
// its CRC verified, so nothing from a corrupted FPDU is ever placed; a
// complete FPDU inside b is processed in place, a partial one is held in a
// device buffer (at most one FPDU) until the rest arrives. After the QP
// stopped (TERMINATE, ERROR, CLOSING) the bytes are counted and dropped.
func (qp *QP) Receive(b []byte) {
	qp.stats.RxBytes += uint64(len(b))
	for len(b) > 0 {
		switch {
		case qp.state >= StateClosing:
			qp.stats.DiscardedBytes += uint64(len(b))
			b = nil
		case qp.mpa == mpaAwaitReq || qp.mpa == mpaAwaitReply:
			b = qp.rxMPA(b)
		case qp.mpa == mpaDone:
			b = qp.rxFPDUs(b)
		default:
			// Bytes before our MPA reply went out (or before we even
			// connected): the peer broke RFC 5044's order.
			qp.mpaFail(errors.New("iwarp: data before the MPA exchange finished"))
		}
	}
	qp.flushCQs()
}

// mpaFail ends a connection whose MPA negotiation failed (no Terminate: the
// peer is not in FPDU mode).
func (qp *QP) mpaFail(err error) {
	qp.stats.MPAFailures++
	qp.mpa = mpaFailed
	qp.closeAfter = true
	qp.termErr, qp.hasTerm = TermError{LayerLLP, ETypeMPA, CodeMPAInvalidReqResp}, false
	qp.toError(err)
	qp.event(EvError)
}

// rxMPA accumulates an MPA request or reply frame and acts on it.
func (qp *QP) rxMPA(b []byte) []byte {
	if qp.holdN < MPAFrameHeaderLen {
		k := copy(qp.hold[qp.holdN:MPAFrameHeaderLen], b)
		qp.holdN += k
		b = b[k:]
		if qp.holdN < MPAFrameHeaderLen {
			return b
		}
		// Judge the header before waiting for private data.
		if !qp.mpaHeaderOK(MPAFrame(qp.hold)) {
			qp.stats.DiscardedBytes += uint64(len(b))
			return nil
		}
	}
	f := MPAFrame(qp.hold)
	total := MPAFrameHeaderLen + int(f.PrivateDataLen())
	k := copy(qp.hold[qp.holdN:total], b)
	qp.holdN += k
	b = b[k:]
	if qp.holdN < total {
		return b
	}
	qp.holdN = 0
	var ff MPAFrameFields
	if _, err := ff.Decode(qp.hold[:total]); err != nil {
		// mpaHeaderOK judged everything Decode does.
		panic("iwarp: MPA frame judged twice: " + err.Error())
	}
	c, err := ff.Conn()
	if qp.cfg.Initiator {
		if f.Reject() {
			qp.peerPDLen = copy(qp.peerPD[:], c.AppData)
			qp.rejected()
			return nil
		}
		if err != nil {
			qp.mpaFail(err)
			return nil
		}
		qp.peerPDLen = copy(qp.peerPD[:], c.AppData)
		return qp.replyReceived(c, b)
	}
	if err != nil {
		// Enhanced flag without the enhanced data: refuse.
		qp.localErr = err
		qp.acceptLen = 0
		qp.replyRev = ff.Rev
		qp.sendReply(true)
		return nil
	}
	qp.peerPDLen = copy(qp.peerPD[:], c.AppData)
	qp.requestReceived(c)
	switch {
	case qp.rejectPending:
		qp.sendReply(true)
		return nil
	case qp.accepted:
		qp.sendReply(false)
	default:
		qp.mpa = mpaGotReq
		qp.event(EvConnectRequest)
	}
	return b
}

// requestReceived settles a responder's side of the negotiation from the
// initiator's valid request: the reply's revision, CRC, IRD/ORD and RTR.
func (qp *QP) requestReceived(c MPAConn) {
	qp.crc = c.CRC || !qp.cfg.NoCRC
	qp.replyRev = c.Rev
	qp.neg = MPAResult{Rev: c.Rev, CRC: qp.crc, IRD: qp.cfg.IRD, ORD: qp.cfg.ORD}
	if c.Enhanced {
		// Our IRD answers the peer's ORD and our ORD its IRD; neither
		// above what this QP holds. The initiator decides whether what
		// we grant is enough (RFC 6581).
		v := MPAv2Fields{IRD: uint16(min(int(c.V2.ORD), qp.cfg.IRD)), ORD: uint16(min(int(c.V2.IRD), qp.cfg.ORD))}
		if c.V2.ORD > uint16(qp.cfg.IRD) || c.V2.IRD == 0 || c.V2.ORD == 0 || c.V2.IRD > uint16(qp.cfg.ORD) {
			qp.stats.IRDORDAdjusted++
		}
		if c.V2.PeerToPeer {
			// Prefer the zero-length Write (no IRD slot, as siw); a
			// Read if that is all the peer offers; a Write also when it
			// offers only a Send (a Send would take one of the
			// application's receives): siw does the same.
			v.PeerToPeer = true
			if c.V2.ReadRTR && !c.V2.WriteRTR {
				v.ReadRTR = true
				qp.neg.RTR = RTRRead
			} else {
				v.WriteRTR = true
				qp.neg.RTR = RTRWrite
			}
			qp.rtrIn = true
		}
		qp.replyV2, qp.replyData = true, v
		qp.neg.Enhanced, qp.neg.PeerToPeer = true, v.PeerToPeer
		qp.neg.IRD, qp.neg.ORD = int(v.IRD), int(v.ORD)
	}
	qp.ird, qp.ord = qp.neg.IRD, qp.neg.ORD
}

// replyReceived settles an initiator's side of the negotiation from the
// responder's accepting reply and enters RTS; b is what follows the reply.
func (qp *QP) replyReceived(c MPAConn, b []byte) []byte {
	qp.crc = c.CRC || !qp.cfg.NoCRC
	qp.neg = MPAResult{Rev: c.Rev, CRC: qp.crc, IRD: qp.cfg.IRD, ORD: qp.cfg.ORD}
	qp.mpa = mpaDone
	qp.state = StateRTS
	var te TermError
	if c.Enhanced && qp.cfg.MPARev == MPARevision2 {
		qp.neg.Enhanced = true
		// Our reads in flight are bounded by the IRD the peer grants;
		// the reads it may send us by the IRD we offered.
		qp.neg.ORD = min(qp.cfg.ORD, int(c.V2.IRD))
		if int(c.V2.IRD) < qp.cfg.ORD {
			qp.stats.IRDORDAdjusted++
		}
		if int(c.V2.ORD) > qp.cfg.IRD {
			te = TermError{LayerLLP, ETypeMPA, CodeMPAInsufficientIRD}
		}
		if qp.cfg.PeerToPeer {
			switch {
			case !c.V2.PeerToPeer || !c.V2.WriteRTR:
				te = TermError{LayerLLP, ETypeMPA, CodeMPANoMatchingRTR}
			default:
				qp.neg.PeerToPeer, qp.neg.RTR = true, RTRWrite
				qp.rtrOut = RTRWrite
			}
		}
	}
	qp.ird, qp.ord = qp.neg.IRD, qp.neg.ORD
	if te != (TermError{}) {
		// The responder is in FPDU mode: tell it why with a Terminate.
		qp.stats.MPAFailures++
		qp.rtrOut = 0
		qp.localErr = fmt.Errorf("iwarp: MPA reply unacceptable (%v): IRD %d ORD %d P2P %v, ours IRD %d ORD %d",
			te, c.V2.IRD, c.V2.ORD, c.V2.PeerToPeer, qp.cfg.IRD, qp.cfg.ORD)
		qp.terminate(te, nil, false, false)
		return nil
	}
	qp.event(EvEstablished)
	return b
}

// mpaHeaderOK judges the fixed part of the peer's MPA frame in qp.hold; when
// it is unacceptable it ends the negotiation and returns false.
func (qp *QP) mpaHeaderOK(f MPAFrame) bool {
	badRev := f.Rev() != MPARevision1 && f.Rev() != MPARevision2
	bad := badRev || f.Markers() || f.PrivateDataLen() > MPAMaxPrivateData
	if qp.cfg.Initiator {
		switch {
		case !f.IsReply():
			qp.holdN = 0
			qp.mpaFail(errors.New("iwarp: MPA reply has a wrong key"))
			return false
		case f.Reject() && f.PrivateDataLen() > MPAMaxPrivateData:
			qp.holdN = 0
			qp.rejected()
			return false
		case f.Reject():
			return true
		case bad || int(f.Rev()) > qp.cfg.MPARev:
			qp.holdN = 0
			qp.mpaFail(fmt.Errorf("iwarp: invalid MPA reply: revision %d (asked %d), markers %v, private data length %d",
				f.Rev(), qp.cfg.MPARev, f.Markers(), f.PrivateDataLen()))
			return false
		}
		return true
	}
	if !f.IsRequest() || bad {
		// Wrong key, revision, markers or oversize private data: reply
		// with the reject bit and drop the connection. The reject is of
		// the highest revision we know not above the request's.
		qp.holdN = 0
		qp.termErr = TermError{LayerLLP, ETypeMPA, CodeMPAInvalidReqResp}
		qp.acceptLen = 0
		qp.replyRev = MPARevision1
		if f.Rev() >= MPARevision2 {
			qp.replyRev = MPARevision2
		}
		switch {
		case !f.IsRequest():
			qp.localErr = ErrBadKey
		case badRev:
			qp.localErr = fmt.Errorf("%w: %d (want 1 or 2)", ErrMPARevision, f.Rev())
		case f.Markers():
			qp.localErr = errors.New("iwarp: MPA request asks for markers")
		default:
			qp.localErr = fmt.Errorf("%w: MPA private data length %d > %d", ErrBadLength, f.PrivateDataLen(), MPAMaxPrivateData)
		}
		qp.sendReply(true)
		return false
	}
	return true
}

// rejected ends an initiator whose request the peer rejected.
func (qp *QP) rejected() {
	qp.stats.MPAFailures++
	qp.mpa = mpaFailed
	qp.closeAfter = true
	qp.toError(errors.New("iwarp: connection rejected by the peer"))
	qp.event(EvRejected)
}

// rxFPDUs parses FPDUs from b.
func (qp *QP) rxFPDUs(b []byte) []byte {
	for len(b) > 0 && qp.state < StateClosing {
		if qp.holdN == 0 && len(b) >= FPDUHeaderLen {
			if n := FPDU(b).WireLen(); len(b) >= n {
				qp.fpdu(b[:n])
				b = b[n:]
				continue
			}
		}
		// Straddling FPDU: hold it until it is whole.
		if qp.holdN < FPDUHeaderLen {
			k := copy(qp.hold[qp.holdN:FPDUHeaderLen], b)
			qp.holdN += k
			b = b[k:]
			if qp.holdN < FPDUHeaderLen {
				return b
			}
		}
		n := FPDU(qp.hold).WireLen()
		k := copy(qp.hold[qp.holdN:n], b)
		qp.holdN += k
		b = b[k:]
		if qp.holdN < n {
			return b
		}
		qp.holdN = 0
		qp.fpdu(qp.hold[:n])
	}
	if len(b) > 0 {
		qp.stats.DiscardedBytes += uint64(len(b))
	}
	return nil
}

// fpdu processes one whole FPDU.
func (qp *QP) fpdu(f []byte) {
	qp.stats.RxFPDUs++
	if qp.crc && !FPDU(f).Verify() {
		qp.stats.CRCErrors++
		qp.terminate(TermError{LayerLLP, ETypeMPA, CodeMPACRC}, nil, false, false)
		return
	}
	if qp.state == StateRTR {
		// The responder's first FPDU from the initiator: we may send now.
		qp.state = StateRTS
		qp.event(EvEstablished)
		if qp.state != StateRTS {
			return
		}
		if qp.rtrIn {
			// Peer-to-peer mode: this is the RTR, whose zero length
			// exempts it from the STag checks (RFC 6581, as siw).
			qp.ulpdu(FPDU(f).ULPDU())
			qp.rtrIn = false
			return
		}
	}
	qp.ulpdu(FPDU(f).ULPDU())
}

// taggedError maps a failed tagged placement to its Terminate error: DDP
// tagged buffer errors, except missing rights, which only RDMAP can name.
func taggedError(e AccessError) TermError {
	switch e {
	case ErrBaseBounds:
		return TermError{LayerDDP, ETypeTaggedBuffer, CodeTBaseBounds}
	case ErrPDMismatch:
		return TermError{LayerDDP, ETypeTaggedBuffer, CodeTNotAssociated}
	case ErrTOWrap:
		return TermError{LayerDDP, ETypeTaggedBuffer, CodeTTOWrap}
	case ErrAccessRights:
		return TermError{LayerRDMAP, ETypeRemoteProtection, CodeAccessRights}
	}
	return TermError{LayerDDP, ETypeTaggedBuffer, CodeTInvalidSTag}
}

// protectionError maps a failed RDMA Read source check to its RDMAP Remote
// Protection error.
func protectionError(e AccessError) TermError {
	c := uint8(CodeInvalidSTag)
	switch e {
	case ErrBaseBounds:
		c = CodeBaseBounds
	case ErrAccessRights:
		c = CodeAccessRights
	case ErrPDMismatch:
		c = CodeSTagNotAssociated
	case ErrTOWrap:
		c = CodeTOWrap
	}
	return TermError{LayerRDMAP, ETypeRemoteProtection, c}
}

var catastrophic = TermError{LayerDDP, ETypeDDPCatastrophic, 0}

// place writes p to host memory at a (a range Resolve granted).
func (qp *QP) place(p []byte, a rings.Addr) bool {
	if err := qp.dma.WriteAt(p, a); err != nil {
		qp.localErr = err
		return false
	}
	qp.stats.Placed += uint64(len(p))
	return true
}

// rxWrite places a tagged RDMA Write segment straight into the region its
// STag names.
func (qp *QP) rxWrite(u []byte, e *rxOp) {
	h := DDPHeader(u)
	p := u[e.hdrLen:]
	if qp.rtrIn && len(p) == 0 && h.Last() && qp.neg.RTR == RTRWrite {
		qp.stats.RTRsRecv++
		return
	}
	a, ae := qp.mem.Resolve(h.STag(), qp.cfg.PD, h.TO(), uint64(len(p)), AccessRemoteWrite)
	if ae != AccessOK {
		qp.terminate(taggedError(ae), u, true, false)
		return
	}
	if len(p) > 0 && !qp.place(p, a) {
		qp.terminate(catastrophic, u, true, false)
		return
	}
	if h.Last() {
		qp.stats.RxMessages++
	}
}

// rxReadResponse places a Read Response segment into the sink of the oldest
// outstanding RDMA Read (validateReadResponse made sure there is one), which
// it must continue exactly.
func (qp *QP) rxReadResponse(u []byte, op *rxOp) {
	h := DDPHeader(u)
	p := u[op.hdrLen:]
	e := &qp.orq[qp.orqHead]
	w := &qp.sqWork[e.sqIdx&qp.sqMask]
	switch {
	case h.STag() != e.sinkSTag:
		w.done, w.status = true, WCBadRespErr
		qp.terminate(TermError{LayerDDP, ETypeTaggedBuffer, CodeTInvalidSTag}, u, true, false)
		return
	case h.TO() != e.sinkTO+uint64(e.got) || uint64(len(p)) > uint64(e.size-e.got) ||
		(h.Last() && e.got+uint32(len(p)) != e.size):
		w.done, w.status = true, WCBadRespErr
		qp.terminate(TermError{LayerDDP, ETypeTaggedBuffer, CodeTBaseBounds}, u, true, false)
		return
	}
	if len(p) > 0 {
		a, ae := qp.mem.Resolve(e.sinkSTag, qp.cfg.PD, h.TO(), uint64(len(p)), AccessLocalWrite)
		if ae != AccessOK {
			w.done, w.status = true, WCLocProtErr
			qp.terminate(taggedError(ae), u, true, false)
			return
		}
		if !qp.place(p, a) {
			w.done, w.status = true, WCLocProtErr
			qp.terminate(catastrophic, u, true, false)
			return
		}
	}
	e.got += uint32(len(p))
	if !h.Last() {
		return
	}
	w.done, w.status, w.total = true, WCSuccess, uint64(e.size)
	qp.orqHead++
	if qp.orqHead == len(qp.orq) {
		qp.orqHead = 0
	}
	qp.orqN--
	qp.stats.RxMessages++
	qp.drainSendCompletions()
}

// rxReadRequest queues an inbound RDMA Read (validateReadRequest judged its
// framing) for its response after checking the source region.
func (qp *QP) rxReadRequest(u []byte, e *rxOp) {
	h := DDPHeader(u)
	p := u[e.hdrLen:]
	var rr ReadRequest
	_, _ = rr.Decode(p)
	rtr := qp.rtrIn && rr.Size == 0 && qp.neg.RTR == RTRRead
	switch {
	case rtr:
		// The zero-length RTR Read: answered, never checked or counted
		// against IRD.
		qp.stats.RTRsRecv++
	case qp.irqN >= qp.ird || qp.irqN >= len(qp.irq):
		qp.terminate(TermError{LayerRDMAP, ETypeRemoteOperation, CodeCatastrophicLocal}, u, true, true)
		return
	default:
		if _, ae := qp.mem.Resolve(rr.SrcSTag, qp.cfg.PD, rr.SrcTO, uint64(rr.Size), AccessRemoteRead); ae != AccessOK {
			qp.terminate(protectionError(ae), u, true, true)
			return
		}
	}
	qp.rxMSN[QNReadRequest]++
	i := qp.irqHead + qp.irqN
	if i >= len(qp.irq) {
		i -= len(qp.irq)
	}
	qp.irq[i] = readResp{rr: rr, msn: h.MSN(), rtr: rtr}
	qp.irqN++
	qp.stats.ReadRequestsRecv++
	qp.stats.RxMessages++ // a Read Request is a whole inbound message too
}

// rxTerminate handles the peer's Terminate: the stream is dead.
func (qp *QP) rxTerminate(u []byte, e *rxOp) {
	qp.stats.TerminatesRecv++
	qp.stats.RxMessages++
	var t Terminate
	if _, err := t.Decode(u[e.hdrLen:]); err == nil {
		qp.peerTerm, qp.hasPeerTerm = t.TermError, true
	}
	st := WCRemOpErr
	if (t.Layer == LayerRDMAP && t.EType == ETypeRemoteProtection) || (t.Layer == LayerDDP && t.EType == ETypeTaggedBuffer) {
		st = WCRemAccessErr
	}
	// The oldest unfinished work request is the one the peer refused.
	for i := qp.sqHead; i != qp.sqNext; i++ {
		if w := &qp.sqWork[i&qp.sqMask]; !w.done {
			w.done, w.status = true, st
			break
		}
	}
	qp.closeAfter = true
	qp.toError(nil)
	qp.event(EvTerminate)
}

// takeRecv consumes the next posted receive work request.
func (qp *QP) takeRecv(w *RecvWR) (ok bool) {
	e, err := qp.rq.Peek()
	if err != nil {
		qp.stats.BadHostEntries++
		return false
	}
	if e == nil {
		return false
	}
	_ = w.Decode(e)
	qp.rq.Pop()
	return true
}

// rxSend places a segment of a Send (or an Immediate Data message) into the
// current receive work request, taking the next one at a message's first
// segment.
func (qp *QP) rxSend(u []byte, e *rxOp) {
	h := DDPHeader(u)
	p := u[e.hdrLen:]
	op := e.op
	r := &qp.rx
	// validateSend judged MSN, MO and the opcode against the message in
	// progress.
	if !r.active {
		if !qp.takeRecv(&r.wr) {
			qp.terminate(TermError{LayerDDP, ETypeUntaggedBuffer, CodeUNoBuffer}, u, true, false)
			return
		}
		r.active, r.op, r.off, r.cap = true, op, 0, 0
		if r.wr.NumSGE > MaxRecvSGE {
			r.active = false
			qp.completeRecv(&r.wr, WCRecv, WCLocQPOpErr, 0, 0, 0)
			qp.terminate(catastrophic, u, true, false)
			return
		}
		for i := range r.wr.NumSGE {
			r.cap += uint64(r.wr.SGL[i].Length)
		}
	}
	if op == OpImmediate || op == OpImmediateSE {
		// Judged after the receive is taken: a malformed Immediate Data
		// message with no receive posted is answered "no buffer".
		if !h.Last() || len(p) != e.payload {
			qp.terminate(TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}, u, true, false)
			return
		}
		r.active = false
		qp.rxMSN[QNSend]++
		qp.stats.RxMessages++
		fl := WCWithImm
		if op == OpImmediateSE {
			fl |= WCSolicitedF
		}
		qp.completeRecv(&r.wr, WCRecvRDMAWithImm, WCSuccess, 0, fl, be.Uint64(p))
		return
	}
	if uint64(r.off)+uint64(len(p)) > r.cap {
		r.active = false
		qp.completeRecv(&r.wr, WCRecv, WCLocLenErr, r.off, 0, 0)
		qp.terminate(TermError{LayerDDP, ETypeUntaggedBuffer, CodeUTooLong}, u, true, false)
		return
	}
	if !qp.placeSGL(&r.wr, r.off, p) {
		r.active = false
		qp.completeRecv(&r.wr, WCRecv, WCLocProtErr, r.off, 0, 0)
		qp.terminate(catastrophic, u, true, false)
		return
	}
	r.off += uint32(len(p))
	if !h.Last() {
		return
	}
	r.active = false
	qp.rxMSN[QNSend]++
	qp.stats.RxMessages++
	var fl WCFlags
	var inv uint64
	if op.Solicited() {
		fl |= WCSolicitedF
	}
	if op.Invalidates() {
		stag := h.ULP32()
		if ae := qp.mem.Invalidate(stag, qp.cfg.PD); ae != AccessOK {
			qp.completeRecv(&r.wr, WCRecv, WCRemInvReqErr, r.off, 0, 0)
			qp.terminate(TermError{LayerRDMAP, ETypeRemoteProtection, CodeCannotInvalidate}, u, true, false)
			return
		}
		fl |= WCWithInv
		inv = uint64(stag)
	}
	qp.completeRecv(&r.wr, WCRecv, WCSuccess, r.off, fl, inv)
}

// placeSGL writes p at message offset off of a receive work request's
// scatter list, checking each piece against the memory table.
func (qp *QP) placeSGL(w *RecvWR, off uint32, p []byte) bool {
	o := uint64(off)
	for i := 0; i < w.NumSGE && len(p) > 0; i++ {
		s := &w.SGL[i]
		if o >= uint64(s.Length) {
			o -= uint64(s.Length)
			continue
		}
		k := min(uint64(s.Length)-o, uint64(len(p)))
		a, ae := qp.mem.Resolve(s.LKey, qp.cfg.PD, s.Addr+o, k, AccessLocalWrite)
		if ae != AccessOK || s.Addr+o < s.Addr {
			return false
		}
		if !qp.place(p[:k], a) {
			return false
		}
		p = p[k:]
		o = 0
	}
	return len(p) == 0
}
