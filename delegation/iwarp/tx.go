package iwarp

import (
	"errors"

	"github.com/emunic/emunic/rings"
)

// Stream is the transmit side of the TCP connection under a QP, owned by the
// TCP engine: the bytes written are queued on the connection's send stream,
// kept for retransmission, and segmented at the connection's MSS.
type Stream interface {
	// Space is how many bytes Write accepts now.
	Space() int
	// Write appends p to the send stream. The QP never writes more than
	// Space; it writes whole FPDUs only.
	Write(p []byte) int
}

// Transmit fills dst with the QP's next output — the MPA frame while
// negotiating, then whole FPDUs — and returns the bytes written. An FPDU never
// exceeds the MSS (Config.MSS) and is never split across calls, so a TCP
// engine that calls Transmit with one segment's room gets FPDU-aligned
// segments; a larger dst is packed with several. Payload is read from host
// memory by DMA straight into dst. Read Responses go before new send work; a
// message is finished before the next one starts. A queued Terminate goes
// first, then the QP is in ERROR.
func (qp *QP) Transmit(dst []byte) int {
	n := 0
	if qp.mpaOutOff < qp.mpaOutLen {
		k := copy(dst, qp.mpaOut[qp.mpaOutOff:qp.mpaOutLen])
		qp.mpaOutOff += k
		n += k
		if qp.mpaOutOff < qp.mpaOutLen {
			qp.stats.TxBytes += uint64(n)
			return n
		}
	}
	for qp.state == StateRTS {
		k := qp.nextFPDU(dst[n:])
		if k == 0 {
			break
		}
		n += k
		qp.stats.TxFPDUs++
	}
	if qp.state == StateRTS {
		qp.drainSendCompletions()
	}
	// A Terminate queued now or earlier (framing can fail and queue one).
	if qp.termPending && len(dst)-n >= qp.termLen {
		n += copy(dst[n:], qp.termBuf[:qp.termLen])
		qp.termPending = false
		qp.state = StateError
		qp.stats.TerminatesSent++
		qp.stats.TxFPDUs++
	}
	if qp.state == StateClosing || qp.state == StateError {
		qp.flushAll(WCWRFlushErr)
	}
	qp.flushCQs()
	qp.stats.TxBytes += uint64(n)
	return n
}

// Pump moves the QP's output into s through the device's transmit buffer
// while s has space, and returns the bytes moved.
func (qp *QP) Pump(s Stream) int {
	total := 0
	for {
		room := min(s.Space(), len(qp.txbuf))
		if room <= 0 {
			return total
		}
		n := qp.Transmit(qp.txbuf[:room])
		if n == 0 {
			return total
		}
		s.Write(qp.txbuf[:n])
		total += n
	}
}

// WantClose reports whether the connection under the QP should now be
// closed: the QP is dead (rejected, terminated, closing or failed) and its
// last bytes (reject reply, Terminate) were transmitted.
func (qp *QP) WantClose() bool {
	return qp.closeAfter && qp.mpaOutOff >= qp.mpaOutLen && !qp.termPending
}

// nextFPDU writes the next FPDU into dst and returns its length, 0 if there
// is none or it does not fit.
func (qp *QP) nextFPDU(dst []byte) int {
	if qp.rtrOut != 0 {
		if !qp.rtrGo {
			return 0
		}
		return qp.txRTR(dst)
	}
	if !qp.tx.active {
		if qp.irqN > 0 {
			return qp.txReadResponse(dst)
		}
		if !qp.startSend() {
			return 0
		}
	}
	return qp.txSend(dst)
}

// txRTR frames the initiator's ready-to-receive message of RFC 6581
// peer-to-peer mode, its first FPDU: a zero-length RDMA Write to STag 1,
// TO 0 (as siw sends; STag 1 is never valid here, index 0 is never used,
// and a zero-length Write is not checked against its STag by the peer).
func (qp *QP) txRTR(dst []byte) int {
	need := FPDULen(DDPTaggedHeaderLen)
	if len(dst) < need {
		return 0
	}
	d := DDP{Tagged: true, Last: true, Version: DDPVersion, ULPCtrl: RDMAPCtrl(OpWrite), STag: RTRSTag}
	d.Encode(dst[FPDUHeaderLen:])
	qp.rtrOut = 0
	qp.stats.RTRsSent++
	return sealFPDU(dst, DDPTaggedHeaderLen, qp.crc)
}

// txReadResponse frames the next segment of the oldest queued Read Response.
func (qp *QP) txReadResponse(dst []byte) int {
	r := &qp.irq[qp.irqHead]
	chunk := min(r.rr.Size-r.sent, uint32(qp.mulpdu-DDPTaggedHeaderLen))
	need := FPDULen(DDPTaggedHeaderLen + int(chunk))
	if len(dst) < need {
		return 0
	}
	last := r.sent+chunk == r.rr.Size
	a, ae := qp.mem.Resolve(r.rr.SrcSTag, qp.cfg.PD, r.rr.SrcTO+uint64(r.sent), uint64(chunk), AccessRemoteRead)
	if ae != AccessOK && !r.rtr {
		// The source went away after the request was accepted: report
		// it against the peer's Read Request, rebuilt from the IRQ.
		var u [DDPUntaggedHeaderLen + ReadRequestLen]byte
		d := DDP{Last: true, Version: DDPVersion, ULPCtrl: RDMAPCtrl(OpReadRequest), QN: QNReadRequest, MSN: r.msn}
		r.rr.Encode(u[d.Encode(u[:]):])
		qp.terminate(protectionError(ae), u[:], true, true)
		return 0
	}
	d := DDP{Tagged: true, Last: last, Version: DDPVersion, ULPCtrl: RDMAPCtrl(OpReadResponse),
		STag: r.rr.SinkSTag, TO: r.rr.SinkTO + uint64(r.sent)}
	h := FPDUHeaderLen + d.Encode(dst[FPDUHeaderLen:])
	if chunk > 0 {
		if err := qp.dma.ReadAt(dst[h:h+int(chunk)], a); err != nil {
			qp.localErr = err
			qp.terminate(TermError{LayerRDMAP, ETypeRDMAPCatastrophic, CodeUnspecified}, nil, false, false)
			return 0
		}
	}
	qp.stats.Sourced += uint64(chunk)
	r.sent += chunk
	if last {
		qp.irqHead++
		if qp.irqHead == len(qp.irq) {
			qp.irqHead = 0
		}
		qp.irqN--
		qp.stats.ReadResponsesSent++
	}
	return sealFPDU(dst, DDPTaggedHeaderLen+int(chunk), qp.crc)
}

var errBadSQ = errors.New("iwarp: send queue entry with a wrong phase or index")

// startSend fetches the next send work request and makes it the message in
// transmission. Local operations (LOCAL_INV) execute here. It returns false
// when there is nothing to send now.
func (qp *QP) startSend() bool {
	for qp.state == StateRTS {
		pi := qp.sq.ProducerIndex()
		if pi == qp.sqNext {
			return false
		}
		if pi-qp.sqHead > qp.cfg.SQ.Count || qp.sqNext-qp.sqHead >= qp.cfg.SQ.Count {
			qp.stats.BadHostEntries++
			qp.localFail(errBadSQ)
			return false
		}
		e := SQEntry(qp.sq.Entry(qp.sqNext))
		if uint32(e[0])&1 != qp.sq.Phase(qp.sqNext) {
			qp.stats.BadHostEntries++
			qp.localFail(errBadSQ)
			return false
		}
		// Fences and the ORD limit hold the queue without consuming.
		if qp.held(e) {
			return false
		}
		w := &qp.sqWork[qp.sqNext&qp.sqMask]
		_ = w.wr.Decode(e)
		w.done, w.status, w.total = false, WCSuccess, 0
		w.wcOp = wcOpcodeOf(w.wr.Opcode)
		qp.sqNext++
		if st := qp.validateSend(w); st != WCSuccess {
			w.done, w.status = true, st
			qp.localFail(nil)
			return false
		}
		if w.wr.Opcode == WRLocalInv || w.wr.Opcode == WRRegMR {
			if qp.memoryOp(&w.wr) != AccessOK {
				w.done, w.status = true, WCLocProtErr
				qp.localFail(nil)
				return false
			}
			w.done = true
			qp.drainSendCompletions()
			continue
		}
		qp.tx = txMsg{active: true, idx: qp.sqNext - 1}
		return true
	}
	return false
}

// memoryOp runs a work request on the memory table, in its place in the
// send queue (what was posted after it sees its effect): LOCAL_INV
// invalidates InvSTag; REG_MR maps SGE 0's host memory under RKey (fast
// registration), from VA RemoteAddr with ImmData's access flags.
func (qp *QP) memoryOp(wr *SendWR) AccessError {
	if wr.Opcode == WRLocalInv {
		return qp.mem.Invalidate(wr.InvSTag, qp.cfg.PD)
	}
	return qp.mem.FastRegister(wr.RKey, qp.cfg.PD, rings.Addr(wr.SGL[0].Addr), wr.RemoteAddr,
		uint64(wr.SGL[0].Length), Access(wr.ImmData))
}

// localFail ends the stream after a local error on the send side: Terminate
// (RDMAP, local catastrophic, unspecified) and ERROR.
func (qp *QP) localFail(err error) {
	if err != nil && qp.localErr == nil {
		qp.localErr = err
	}
	qp.terminate(TermError{LayerRDMAP, ETypeRDMAPCatastrophic, CodeUnspecified}, nil, false, false)
}

// validateSend checks a fetched work request; WCSuccess or its error status.
func (qp *QP) validateSend(w *sendWork) WCStatus {
	wr := &w.wr
	if wr.Flags&^WRFlagsAll != 0 {
		return WCLocQPOpErr
	}
	switch wr.Opcode {
	case WRSend, WRSendInv, WRRDMAWrite, WRRDMAWriteImm:
	case WRRDMARead:
		if qp.ord == 0 || wr.Flags&WRInline != 0 || wr.NumSGE > 1 {
			return WCLocQPOpErr
		}
	case WRLocalInv:
		return WCSuccess
	case WRRegMR:
		// One SGE, the memory itself: no region names it yet (LKey 0).
		if wr.Flags&WRInline != 0 || wr.NumSGE != 1 || wr.SGL[0].LKey != 0 || wr.ImmData > 0xFF {
			return WCLocQPOpErr
		}
		return WCSuccess
	default:
		return WCLocQPOpErr
	}
	if wr.Flags&WRInline != 0 {
		if wr.InlineLen > MaxInline {
			return WCLocLenErr
		}
		w.total = uint64(wr.InlineLen)
		return WCSuccess
	}
	if wr.NumSGE > MaxSendSGE {
		return WCLocQPOpErr
	}
	need := Access(0)
	if wr.Opcode == WRRDMARead {
		need = AccessLocalWrite
	}
	for i := range wr.NumSGE {
		s := &wr.SGL[i]
		if s.Length == 0 {
			continue
		}
		if _, ae := qp.mem.Resolve(s.LKey, qp.cfg.PD, s.Addr, uint64(s.Length), need); ae != AccessOK {
			return WCLocProtErr
		}
		w.total += uint64(s.Length)
	}
	if w.total > 1<<31 {
		return WCLocLenErr
	}
	return WCSuccess
}

// txSend frames the next FPDU of the message in transmission.
func (qp *QP) txSend(dst []byte) int {
	t := &qp.tx
	w := &qp.sqWork[t.idx&qp.sqMask]
	wr := &w.wr
	var d DDP
	d.Version = DDPVersion
	var payload uint64 // bytes of message payload in this FPDU
	var fixed []byte   // a fixed payload (Read Request, Immediate Data)
	var fixedBuf [ReadRequestLen]byte
	var rr ReadRequest
	switch {
	case wr.Opcode == WRRDMARead:
		rr = ReadRequest{SinkSTag: wr.SGL[0].LKey, SinkTO: wr.SGL[0].Addr, Size: uint32(w.total),
			SrcSTag: wr.RKey, SrcTO: wr.RemoteAddr}
		if wr.NumSGE == 0 {
			rr.SinkSTag, rr.SinkTO = 0, 0
		}
		rr.Encode(fixedBuf[:])
		fixed = fixedBuf[:ReadRequestLen]
		d.ULPCtrl, d.Last, d.QN, d.MSN = RDMAPCtrl(OpReadRequest), true, QNReadRequest, qp.txMSN[QNReadRequest]
	case wr.Opcode == WRRDMAWriteImm && (t.stage == 1 || w.total == 0):
		t.stage = 1
		op := OpImmediate
		if wr.Flags&WRSolicited != 0 {
			op = OpImmediateSE
		}
		be.PutUint64(fixedBuf[:], wr.ImmData)
		fixed = fixedBuf[:ImmediateDataLen]
		d.ULPCtrl, d.Last, d.QN, d.MSN = RDMAPCtrl(op), true, QNSend, qp.txMSN[QNSend]
	case wr.Opcode == WRRDMAWrite || wr.Opcode == WRRDMAWriteImm:
		payload = min(w.total-t.off, uint64(qp.mulpdu-DDPTaggedHeaderLen))
		d.Tagged, d.ULPCtrl, d.STag, d.TO = true, RDMAPCtrl(OpWrite), wr.RKey, wr.RemoteAddr+t.off
		d.Last = t.off+payload == w.total
	default: // Sends
		op := OpSend
		if wr.Opcode == WRSendInv {
			op = OpSendInv
			d.ULP32 = wr.InvSTag
		}
		if wr.Flags&WRSolicited != 0 {
			op += OpSendSE - OpSend
		}
		payload = min(w.total-t.off, uint64(qp.mulpdu-DDPUntaggedHeaderLen))
		d.ULPCtrl, d.QN, d.MSN, d.MO = RDMAPCtrl(op), QNSend, qp.txMSN[QNSend], uint32(t.off)
		d.Last = t.off+payload == w.total
	}
	ulen := d.Len() + int(payload) + len(fixed)
	need := FPDULen(ulen)
	if len(dst) < need {
		return 0
	}
	h := FPDUHeaderLen + d.Encode(dst[FPDUHeaderLen:])
	h += copy(dst[h:], fixed)
	if payload > 0 && !qp.gather(w, dst[h:h+int(payload)]) {
		w.done, w.status = true, WCLocProtErr
		qp.tx.active = false
		qp.localFail(nil)
		return 0
	}
	t.off += payload
	if d.Last {
		switch {
		case wr.Opcode == WRRDMARead:
			qp.txMSN[QNReadRequest]++
			i := qp.orqHead + qp.orqN
			if i >= len(qp.orq) {
				i -= len(qp.orq)
			}
			qp.orq[i] = readWork{sqIdx: t.idx, sinkSTag: rr.SinkSTag, sinkTO: rr.SinkTO, size: rr.Size}
			qp.orqN++
			t.active = false
		case wr.Opcode == WRRDMAWriteImm && t.stage == 0:
			t.stage = 1 // the Immediate Data message follows
		default:
			if !d.Tagged {
				qp.txMSN[QNSend]++
			}
			w.done = true
			t.active = false
		}
	}
	return sealFPDU(dst, ulen, qp.crc)
}

// gather reads the next len(dst) payload bytes of the message from host
// memory (or the inline data) into dst.
func (qp *QP) gather(w *sendWork, dst []byte) bool {
	t := &qp.tx
	wr := &w.wr
	if wr.Flags&WRInline != 0 {
		copy(dst, wr.InlineData[t.off:])
		qp.stats.Sourced += uint64(len(dst))
		return true
	}
	for len(dst) > 0 {
		if t.sge >= wr.NumSGE {
			return false
		}
		s := &wr.SGL[t.sge]
		avail := s.Length - t.sgeOff
		if avail == 0 {
			t.sge++
			t.sgeOff = 0
			continue
		}
		k := min(int(avail), len(dst))
		a, ae := qp.mem.Resolve(s.LKey, qp.cfg.PD, s.Addr+uint64(t.sgeOff), uint64(k), 0)
		if ae != AccessOK {
			return false
		}
		if err := qp.dma.ReadAt(dst[:k], a); err != nil {
			qp.localErr = err
			return false
		}
		qp.stats.Sourced += uint64(k)
		dst = dst[k:]
		t.sgeOff += uint32(k)
	}
	return true
}
