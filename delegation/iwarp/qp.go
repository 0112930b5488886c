package iwarp

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/emunic/emunic/rings"
)

// State is a QP's state (RFC 5040 / verbs iWARP QP states).
type State uint8

// QP states.
const (
	StateIdle      State = iota // created; MPA negotiation not done
	StateRTR                    // initiator: request sent, awaiting the reply; responder: reply sent, awaiting the first FPDU (may receive, may not send)
	StateRTS                    // FPDU mode both ways
	StateClosing                // orderly close requested; nothing more is sent
	StateTerminate              // a Terminate is queued for transmission; work already flushed
	StateError                  // dead: every work request completes flushed
)

var stateNames = [...]string{"IDLE", "RTR", "RTS", "CLOSING", "TERMINATE", "ERROR"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "STATE_" + strconv.Itoa(int(s))
}

// Event is something the device must tell the host (or the TCP engine)
// about. Events are delivered synchronously through Config.OnEvent from
// inside the QP call that caused them.
type Event uint8

// QP events.
const (
	// EvConnectRequest: a responder received a valid MPA request
	// (PeerPrivateData); answer with Accept or Reject.
	EvConnectRequest Event = iota + 1
	// EvEstablished: the QP entered RTS.
	EvEstablished
	// EvRejected: the peer's reply had the R bit, or this responder sent
	// one. Close the connection once Transmit has nothing left.
	EvRejected
	// EvTerminate: a Terminate was received, or one was queued to be sent
	// (LastTermError / PeerTermError say which). Close the connection once
	// Transmit has nothing left.
	EvTerminate
	// EvError: a local failure without a Terminate (MPA negotiation, CQ
	// overrun, a corrupt host ring). Close the connection.
	EvError
	// EvClosed: an orderly close finished (Close, then LLPClosed).
	EvClosed
)

var eventNames = [...]string{"", "CONNECT_REQUEST", "ESTABLISHED", "REJECTED", "TERMINATE", "ERROR", "CLOSED"}

func (e Event) String() string {
	if int(e) < len(eventNames) && e != 0 {
		return eventNames[e]
	}
	return "EVENT_" + strconv.Itoa(int(e))
}

// Config describes a QP.
type Config struct {
	QPN       uint32
	PD        uint32 // protection domain: only regions of this PD are reachable
	Initiator bool   // sends the MPA request and the first FPDU
	// MSS is the TCP connection's effective send MSS: no FPDU is larger
	// (RFC 5044 MULPDU with markers off). Default 1460.
	MSS int
	// IRD is how many inbound RDMA Read Requests may wait for their
	// response; ORD how many of ours may be outstanding. Default 16 each.
	IRD, ORD int
	// PrivateData is sent in the MPA request (initiator) or reply
	// (responder; Accept may replace it). At most 512 bytes, 508 in a
	// revision-2 frame (the enhanced connection data takes 4).
	PrivateData []byte
	// MPARev is the MPA revision an initiator requests: 2 (RFC 6581, the
	// default when 0: IRD/ORD negotiated) or 1 (RFC 5044). A responder
	// answers a request of either revision in kind.
	MPARev int
	// NoCRC: do not ask for MPA CRC. CRC is used, both ways, when either
	// side asks (RFC 5044); when neither does the CRC field is sent as
	// zero and not checked.
	NoCRC bool
	// PeerToPeer: an initiator asks for RFC 6581 peer-to-peer mode and
	// sends a zero-length RDMA Write as its ready-to-receive message
	// (revision 2 only), at the host's first doorbell (Poll) after the
	// reply: the host decides when (see docs/iwarp.md, siw's first-FPDU
	// race). A responder always honours a request for it.
	PeerToPeer bool
	// SQ and RQ are the host's work request rings (SQEntrySize and
	// RQEntrySize entries).
	SQ, RQ rings.Layout
	// SendCQ and RecvCQ receive the completions; they may be the same CQ.
	SendCQ, RecvCQ *CQ
	// TxBuffer is the size of Pump's device buffer (default 64 KiB).
	TxBuffer int
	// OnEvent is called for every Event (may be nil). It must not call
	// Receive, Transmit or Pump; it may call Accept, Reject and Close.
	OnEvent func(*QP, Event)
}

// QPStats count a QP's traffic and its rejections.
type QPStats struct {
	RxFPDUs, TxFPDUs  uint64
	RxBytes, TxBytes  uint64 // stream bytes, MPA frames included
	Placed            uint64 // payload bytes written to host memory
	Sourced           uint64 // payload bytes read from host memory
	RxMessages        uint64 // completed inbound messages of every opcode
	CRCErrors         uint64
	TerminatesSent    uint64
	TerminatesRecv    uint64
	DiscardedBytes    uint64 // received after the QP stopped processing
	BadHostEntries    uint64 // ring entries with a wrong phase or an impossible index
	CompletionsLost   uint64 // CQ overruns
	FlushedWRs        uint64
	ReadRequestsRecv  uint64
	ReadResponsesSent uint64
	MPAFailures       uint64 // MPA negotiations that failed here: bad frame, reject sent or received
	IRDORDAdjusted    uint64 // a peer's IRD/ORD we answered with other values (0, or more than we hold)
	RTRsSent          uint64 // peer-to-peer ready-to-receive messages sent (initiator)
	RTRsRecv          uint64 // and received (responder)
}

// RTRSTag is the STag of the zero-length RDMA Write (or the source STag of
// the zero-length RDMA Read) an initiator sends as its RFC 6581
// ready-to-receive message: STag 1, as siw, never a valid STag here.
const RTRSTag = 1

// MPAResult is what the MPA negotiation settled (Negotiated).
type MPAResult struct {
	Rev        uint8
	CRC        bool
	Enhanced   bool // IRD/ORD exchanged (revision 2 with S)
	IRD, ORD   int  // in force: the peer's reads we queue, ours outstanding
	PeerToPeer bool
	RTR        int // RTRWrite or RTRRead in peer-to-peer mode, else 0
}

// mpa negotiation sub-states.
const (
	mpaInit       = iota // initiator before Connect
	mpaAwaitReply        // initiator: request queued or sent
	mpaAwaitReq          // responder
	mpaGotReq            // responder: valid request, waiting for Accept/Reject
	mpaDone              // FPDU mode
	mpaFailed
)

// sendWork is a send work request the device has fetched: a private copy
// (the host may not change what the device already validated).
type sendWork struct {
	wr     SendWR
	total  uint64
	status WCStatus
	done   bool
	wcOp   WCOpcode
}

// readWork is an outstanding outbound RDMA Read (ORQ entry).
type readWork struct {
	sqIdx    uint32
	sinkSTag uint32
	sinkTO   uint64
	size     uint32
	got      uint32
}

// readResp is an inbound RDMA Read Request waiting for (or in) its response
// (IRQ entry).
type readResp struct {
	rr   ReadRequest
	msn  uint32
	sent uint32
	rtr  bool // the zero-length RTR Read of peer-to-peer mode: no source to check
}

// rxMsg is the inbound untagged message on QN 0 being placed.
type rxMsg struct {
	active bool
	op     Opcode
	wr     RecvWR
	cap    uint64
	off    uint32
}

// txMsg is the outbound SQ message being framed.
type txMsg struct {
	active bool
	idx    uint32 // SQ index
	stage  uint8  // 0: the message; 1: the Immediate Data after an RDMA Write
	off    uint64 // payload bytes framed
	sge    int
	sgeOff uint32
}

// QP is the device side of one iWARP queue pair on a delegated TCP
// connection. Every method must be called from the offload unit goroutine.
type QP struct {
	cfg    Config
	dma    rings.DMA
	mem    *MemTable
	state  State
	mpa    int
	mulpdu int

	// MPA.
	mpaOut        [MPAFrameHeaderLen + MPAMaxPrivateData]byte
	mpaOutLen     int
	mpaOutOff     int
	accepted      bool // Accept called (possibly before the request arrived)
	rejectPending bool // Reject called before the request arrived
	acceptPD      [MPAMaxPrivateData]byte
	acceptLen     int
	peerPD        [MPAMaxPrivateData]byte
	peerPDLen     int
	closeAfter    bool // the connection is over once output drains
	crc           bool // CRC-32C in use (negotiated; until then what we ask)
	ird, ord      int  // in force (negotiated)
	neg           MPAResult
	replyRev      uint8       // responder: the revision of its reply
	replyV2       bool        // responder: the reply carries enhanced data
	replyData     MPAv2Fields // responder: its enhanced data
	rtrOut        int         // initiator: the RTR still to send first (RTRWrite)
	rtrGo         bool        // initiator: the host rang the doorbell since the reply: the RTR may go
	rtrIn         bool        // responder: the next FPDU is the peer's RTR (zero-length, not checked)

	// Receive.
	hold  []byte // reassembly of an FPDU (or MPA frame) split across calls
	holdN int
	rxMSN [3]uint32
	rx    rxMsg
	rq    *rings.Consumer

	// Outbound reads (ORQ) and inbound read requests (IRQ).
	orq            []readWork
	orqHead, orqN  int
	irq            []readResp
	irqHead, irqN  int
	txMSN          [3]uint32
	sq             *rings.Consumer
	sqWork         []sendWork
	sqMask         uint32
	sqHead, sqNext uint32
	tx             txMsg

	// Terminate.
	termBuf     [80]byte
	termLen     int
	termPending bool
	termErr     TermError // what we sent (or would have)
	peerTerm    TermError // what the peer sent
	hasTerm     bool
	hasPeerTerm bool
	localErr    error

	txbuf []byte // Pump's device buffer
	stats QPStats
}

// Errors of NewQP and the control calls.
var (
	ErrBadConfig = errors.New("iwarp: bad QP configuration")
	ErrBadState  = errors.New("iwarp: not valid in the QP's state")
)

// NewQP creates a QP in IDLE over host memory dma and the device's memory
// table. A responder waits for the MPA request; an initiator sends its
// request when Connect is called.
func NewQP(dma rings.DMA, mem *MemTable, cfg Config) (*QP, error) {
	if cfg.MSS == 0 {
		cfg.MSS = 1460
	}
	if cfg.IRD == 0 {
		cfg.IRD = 16
	}
	if cfg.ORD == 0 {
		cfg.ORD = 16
	}
	if cfg.TxBuffer == 0 {
		cfg.TxBuffer = 64 << 10
	}
	if cfg.MPARev == 0 {
		cfg.MPARev = MPARevision
	}
	switch {
	case mem == nil || dma == nil:
		return nil, fmt.Errorf("%w: no DMA or memory table", ErrBadConfig)
	case MULPDU(cfg.MSS) < DDPUntaggedHeaderLen+ReadRequestLen+8:
		return nil, fmt.Errorf("%w: MSS %d too small for an FPDU", ErrBadConfig, cfg.MSS)
	case cfg.IRD < 0 || cfg.ORD < 0 || cfg.IRD > MPAv2MaxIRDORD || cfg.ORD > MPAv2MaxIRDORD:
		return nil, fmt.Errorf("%w: IRD %d / ORD %d", ErrBadConfig, cfg.IRD, cfg.ORD)
	case cfg.MPARev < 0 || cfg.MPARev > MPARevision2:
		return nil, fmt.Errorf("%w: MPA revision %d (1 or 2)", ErrBadConfig, cfg.MPARev)
	case len(cfg.PrivateData) > MPAMaxPrivateData,
		cfg.Initiator && cfg.MPARev != MPARevision1 && len(cfg.PrivateData) > MPAv2MaxAppPrivateData:
		return nil, fmt.Errorf("%w: %d bytes of private data", ErrBadConfig, len(cfg.PrivateData))
	case cfg.PeerToPeer && cfg.MPARev == MPARevision1:
		return nil, fmt.Errorf("%w: peer-to-peer mode needs MPA revision 2", ErrBadConfig)
	case cfg.SendCQ == nil || cfg.RecvCQ == nil:
		return nil, fmt.Errorf("%w: no CQ", ErrBadConfig)
	case cfg.SQ.EntrySize != SQEntrySize || cfg.RQ.EntrySize != RQEntrySize:
		return nil, fmt.Errorf("%w: SQ/RQ entry sizes must be %d/%d", ErrBadConfig, SQEntrySize, RQEntrySize)
	case cfg.TxBuffer < cfg.MSS:
		return nil, fmt.Errorf("%w: TxBuffer smaller than MSS", ErrBadConfig)
	}
	sq, err := rings.NewConsumer(dma, cfg.SQ, cfg.SQ.Count, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: SQ: %v", ErrBadConfig, err)
	}
	rq, err := rings.NewConsumer(dma, cfg.RQ, cfg.RQ.Count, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: RQ: %v", ErrBadConfig, err)
	}
	qp := &QP{
		cfg: cfg, dma: dma, mem: mem, mulpdu: MULPDU(cfg.MSS),
		hold:   make([]byte, MaxFPDULen),
		rq:     rq,
		sq:     sq,
		sqWork: make([]sendWork, cfg.SQ.Count),
		sqMask: cfg.SQ.Count - 1,
		orq:    make([]readWork, max(cfg.ORD, 1)),
		irq:    make([]readResp, max(cfg.IRD, 1)),
		rxMSN:  [3]uint32{1, 1, 1},
		txMSN:  [3]uint32{1, 1, 1},
		txbuf:  make([]byte, cfg.TxBuffer),
	}
	qp.sqHead = sq.Head()
	qp.sqNext = qp.sqHead
	qp.crc, qp.ird, qp.ord, qp.replyRev = !cfg.NoCRC, cfg.IRD, cfg.ORD, MPARevision1
	if cfg.Initiator {
		qp.mpa = mpaInit
	} else {
		qp.mpa = mpaAwaitReq
		copy(qp.acceptPD[:], cfg.PrivateData)
		qp.acceptLen = len(cfg.PrivateData)
	}
	return qp, nil
}

// QPN is the QP's number.
func (qp *QP) QPN() uint32 { return qp.cfg.QPN }

// State is the QP's state.
func (qp *QP) State() State { return qp.state }

// Stats returns the QP's counters.
func (qp *QP) Stats() QPStats { return qp.stats }

// MULPDU is the largest ULPDU this QP sends.
func (qp *QP) MULPDU() int { return qp.mulpdu }

// Negotiated is what the MPA exchange settled; valid once the QP is in
// RTR or RTS.
func (qp *QP) Negotiated() MPAResult { return qp.neg }

// PeerPrivateData is the private data of the peer's MPA request or reply
// (after the enhanced connection data of a revision-2 frame).
func (qp *QP) PeerPrivateData() []byte { return qp.peerPD[:qp.peerPDLen] }

// LastTermError is the error of the Terminate this QP sent (ok false if none).
func (qp *QP) LastTermError() (TermError, bool) { return qp.termErr, qp.hasTerm }

// PeerTermError is the error of the Terminate the peer sent (ok false if none).
func (qp *QP) PeerTermError() (TermError, bool) { return qp.peerTerm, qp.hasPeerTerm }

// Err is the local failure that moved the QP to ERROR without a Terminate
// (nil if none).
func (qp *QP) Err() error { return qp.localErr }

func (qp *QP) event(ev Event) {
	if qp.cfg.OnEvent != nil {
		qp.cfg.OnEvent(qp, ev)
	}
}

// Connect starts an initiator: the MPA request (with Config.PrivateData) is
// queued for Transmit and the QP goes to RTR.
func (qp *QP) Connect() error {
	if !qp.cfg.Initiator || qp.state != StateIdle || qp.mpa != mpaInit {
		return ErrBadState
	}
	f := MPAFrameFields{CRC: !qp.cfg.NoCRC, Rev: uint8(qp.cfg.MPARev), PrivateData: qp.cfg.PrivateData}
	if f.Rev == MPARevision2 {
		var pd [MPAMaxPrivateData]byte
		v := MPAv2Fields{IRD: uint16(qp.cfg.IRD), ORD: uint16(qp.cfg.ORD),
			PeerToPeer: qp.cfg.PeerToPeer, WriteRTR: qp.cfg.PeerToPeer}
		n := v.Encode(pd[:])
		n += copy(pd[n:], qp.cfg.PrivateData)
		f.Enhanced, f.PrivateData = true, pd[:n]
	}
	qp.mpaOutLen = f.Encode(qp.mpaOut[:])
	qp.mpaOutOff = 0
	qp.mpa = mpaAwaitReply
	qp.state = StateRTR
	return nil
}

// Accept answers (or pre-answers) the MPA request of a responder with a reply
// carrying pd; the QP goes to RTR once the request has arrived.
func (qp *QP) Accept(pd []byte) error {
	if qp.cfg.Initiator || len(pd) > MPAMaxPrivateData {
		return ErrBadConfig
	}
	if qp.state != StateIdle || (qp.mpa != mpaAwaitReq && qp.mpa != mpaGotReq) {
		return ErrBadState
	}
	qp.acceptLen = copy(qp.acceptPD[:], pd)
	qp.accepted = true
	if qp.mpa == mpaGotReq {
		qp.sendReply(false)
	}
	return nil
}

// Reject answers the MPA request of a responder with a reply carrying the R
// bit and pd, and kills the QP. Called before the request arrived, it rejects
// the request whenever it comes.
func (qp *QP) Reject(pd []byte) error {
	if qp.cfg.Initiator || len(pd) > MPAMaxPrivateData {
		return ErrBadConfig
	}
	if qp.state != StateIdle || (qp.mpa != mpaAwaitReq && qp.mpa != mpaGotReq) {
		return ErrBadState
	}
	qp.acceptLen = copy(qp.acceptPD[:], pd)
	if qp.mpa == mpaGotReq {
		qp.sendReply(true)
		return nil
	}
	qp.accepted = false
	qp.rejectPending = true
	return nil
}

// sendReply queues the MPA reply.
func (qp *QP) sendReply(reject bool) {
	f := MPAFrameFields{Reply: true, CRC: qp.crc, Reject: reject, Rev: qp.replyRev, PrivateData: qp.acceptPD[:qp.acceptLen]}
	if qp.replyV2 {
		if !reject && qp.acceptLen > MPAv2MaxAppPrivateData {
			// No room for the enhanced data: refuse rather than cut.
			qp.localErr = fmt.Errorf("%w: %d bytes of private data in a revision-2 reply (at most %d)",
				ErrBadConfig, qp.acceptLen, MPAv2MaxAppPrivateData)
			reject = true
			f.Reject = true
		}
		var pd [MPAMaxPrivateData]byte
		n := qp.replyData.Encode(pd[:])
		n += copy(pd[n:min(len(pd), n+qp.acceptLen)], qp.acceptPD[:qp.acceptLen])
		f.Enhanced, f.PrivateData = true, pd[:n]
	}
	qp.mpaOutLen = f.Encode(qp.mpaOut[:])
	qp.mpaOutOff = 0
	if reject {
		qp.stats.MPAFailures++
		qp.mpa = mpaFailed
		qp.closeAfter = true
		qp.toError(nil)
		qp.event(EvRejected)
		return
	}
	qp.mpa = mpaDone
	qp.state = StateRTR
}

// Close requests an orderly close: nothing more is sent; outstanding work is
// flushed. Call LLPClosed when the TCP connection is closed.
func (qp *QP) Close() {
	switch qp.state {
	case StateRTS, StateRTR, StateIdle:
		qp.state = StateClosing
		qp.closeAfter = true
		qp.flushAll(WCWRFlushErr)
		qp.flushCQs()
	}
}

// LLPClosed tells the QP its TCP connection is gone (FIN exchanged, reset,
// or timed out). After Close that is the end of an orderly close (EvClosed);
// otherwise the QP goes to ERROR with everything flushed (EvError).
func (qp *QP) LLPClosed() {
	switch qp.state {
	case StateClosing:
		qp.state = StateError
		qp.event(EvClosed)
	case StateError:
	case StateTerminate:
		qp.termPending = false
		qp.state = StateError
	default:
		qp.localErr = errors.New("iwarp: LLP connection lost")
		qp.toError(nil)
		qp.event(EvError)
	}
	qp.flushCQs()
}

// Poll is called when the host rang the QP's doorbell: in ERROR it flushes
// newly posted work requests. It reports whether Transmit has work.
func (qp *QP) Poll() bool {
	if qp.state >= StateClosing {
		qp.flushAll(WCWRFlushErr)
		qp.flushCQs()
	}
	if qp.rtrOut != 0 && qp.state == StateRTS {
		qp.rtrGo = true
	}
	return qp.HasOutput()
}

// HasOutput reports whether Transmit would produce bytes given room.
func (qp *QP) HasOutput() bool {
	if qp.mpaOutOff < qp.mpaOutLen || qp.termPending {
		return true
	}
	if qp.state != StateRTS {
		return false
	}
	if qp.rtrOut != 0 {
		// Nothing goes before the RTR, and the RTR waits for the host.
		return qp.rtrGo
	}
	if qp.tx.active || qp.irqN > 0 {
		return true
	}
	if qp.sq.ProducerIndex() == qp.sqNext {
		return false
	}
	// Posted work may be held by a fence or the ORD limit.
	e := SQEntry(qp.sq.Entry(qp.sqNext))
	return !qp.held(e)
}

// held reports whether the SQ entry e must wait: an RDMA Read at the ORD
// limit, or a fenced request while reads are outstanding.
func (qp *QP) held(e SQEntry) bool {
	return (e.Opcode() == WRRDMARead && qp.ord > 0 && qp.orqN >= qp.ord) ||
		(e.Flags()&WRFence != 0 && qp.orqN > 0)
}

// toError moves the QP to ERROR (or TERMINATE when a Terminate is queued) and
// flushes every outstanding work request; the one a local error concerns
// was completed by the caller.
func (qp *QP) toError(err error) {
	if err != nil && qp.localErr == nil {
		qp.localErr = err
	}
	if qp.termPending {
		qp.state = StateTerminate
	} else {
		qp.state = StateError
	}
	qp.holdN = 0
	qp.flushAll(WCWRFlushErr)
	qp.flushCQs()
}

// flushAll completes every outstanding and posted work request. Send work
// already done completes with its own status (success completions only if
// signaled); the rest with st.
func (qp *QP) flushAll(st WCStatus) {
	// Receive side: the message in progress, then every posted entry.
	if qp.rx.active {
		qp.rx.active = false
		qp.completeRecv(&qp.rx.wr, WCRecv, st, 0, 0, 0)
	}
	for {
		e, err := qp.rq.Peek()
		if e == nil && err == nil {
			break
		}
		if err != nil {
			qp.stats.BadHostEntries++
			if e == nil {
				break
			}
			qp.rq.Pop()
			continue
		}
		var w RecvWR
		_ = w.Decode(e)
		qp.rq.Pop()
		qp.completeRecv(&w, WCRecv, st, 0, 0, 0)
	}
	qp.rq.Release()
	// Send side: fetched work in order, then everything posted.
	qp.tx.active = false
	qp.orqN = 0
	qp.irqN = 0
	// As in verbs, once a work request completes in error every later one
	// completes flushed, even if its bytes were already handed to TCP.
	failed := false
	for qp.sqHead != qp.sqNext {
		w := &qp.sqWork[qp.sqHead&qp.sqMask]
		switch {
		case !w.done:
			w.done, w.status = true, st
		case failed && w.status == WCSuccess:
			w.status = st
		}
		if w.status != WCSuccess {
			failed = true
		}
		qp.retireSend(w)
	}
	pi := qp.sq.ProducerIndex()
	if pi-qp.sqHead > qp.cfg.SQ.Count {
		qp.stats.BadHostEntries++
		return
	}
	for qp.sqHead != pi {
		var w sendWork
		e := qp.sq.Entry(qp.sqHead)
		if uint32(e[0])&rings.CtlPhase != qp.sq.Phase(qp.sqHead) {
			qp.stats.BadHostEntries++
		}
		_ = w.wr.Decode(e)
		w.wcOp, w.done, w.status = wcOpcodeOf(w.wr.Opcode), true, st
		qp.sqNext = qp.sqHead + 1
		qp.retireSend(&w)
	}
	qp.sqNext = qp.sqHead
	qp.sq.Release()
}

// retireSend emits the completion of the send work at the SQ head (w) if
// due and frees its slot.
func (qp *QP) retireSend(w *sendWork) {
	if w.status != WCSuccess || w.wr.Flags&WRSignaled != 0 {
		if w.status == WCWRFlushErr {
			qp.stats.FlushedWRs++
		}
		c := Completion{Opcode: w.wcOp, Status: w.status, WRID: w.wr.WRID, QPN: qp.cfg.QPN}
		if w.status == WCSuccess && w.wcOp == WCRDMARead {
			c.ByteLen = uint32(w.total)
		}
		qp.pushCQ(qp.cfg.SendCQ, &c, false)
	}
	qp.sq.Pop()
	qp.sqHead++
}

// completeRecv emits a receive completion.
func (qp *QP) completeRecv(w *RecvWR, op WCOpcode, st WCStatus, n uint32, fl WCFlags, imm uint64) {
	if st == WCWRFlushErr {
		qp.stats.FlushedWRs++
	}
	c := Completion{Opcode: op, Status: st, Flags: fl, WRID: w.WRID, ByteLen: n, QPN: qp.cfg.QPN, ImmData: imm}
	qp.pushCQ(qp.cfg.RecvCQ, &c, fl&WCSolicitedF != 0)
}

func (qp *QP) pushCQ(cq *CQ, c *Completion, solicited bool) {
	if !cq.push(c, solicited) {
		qp.stats.CompletionsLost++
		if qp.state < StateTerminate {
			qp.localErr = ErrCQOverrun
			qp.closeAfter = true
			// Stop everything; further completions are lost too.
			qp.state = StateError
			qp.holdN = 0
			qp.event(EvError)
		}
	}
}

// drainSendCompletions retires done work at the SQ head in order.
func (qp *QP) drainSendCompletions() {
	for qp.sqHead != qp.sqNext {
		w := &qp.sqWork[qp.sqHead&qp.sqMask]
		if !w.done {
			return
		}
		qp.retireSend(w)
	}
}

func (qp *QP) flushCQs() {
	qp.sq.Release()
	qp.rq.Release()
	qp.cfg.SendCQ.Flush()
	if qp.cfg.RecvCQ != qp.cfg.SendCQ {
		qp.cfg.RecvCQ.Flush()
	}
}

func wcOpcodeOf(op WROpcode) WCOpcode {
	switch op {
	case WRRDMAWrite, WRRDMAWriteImm:
		return WCRDMAWrite
	case WRRDMARead:
		return WCRDMARead
	case WRLocalInv:
		return WCLocalInv
	case WRRegMR:
		return WCRegMR
	case WRAtomicCmpSwap:
		return WCCompSwap
	case WRAtomicFetchAdd:
		return WCFetchAdd
	case WRBindMW:
		return WCBindMW
	}
	return WCSend
}

// terminate queues a Terminate for err (carrying the offending ULPDU's DDP
// header when hdr is set, and its Read Request header when rr is set),
// flushes everything and moves the QP to TERMINATE; Transmit sends the
// Terminate and the QP goes to ERROR.
func (qp *QP) terminate(te TermError, u []byte, hdr, rr bool) {
	if qp.state >= StateTerminate {
		return
	}
	b := qp.termBuf[:]
	d := DDP{Last: true, Version: DDPVersion, ULPCtrl: RDMAPCtrl(OpTerminate), QN: QNTerminate, MSN: qp.txMSN[QNTerminate]}
	qp.txMSN[QNTerminate]++
	n := FPDUHeaderLen + d.Encode(b[FPDUHeaderLen:])
	t := Terminate{TermError: te}
	if hdr && len(u) > 0 && len(u) >= DDPHeaderLen(u[0]) {
		t.M, t.D = true, true
		t.SegLen = uint16(len(u))
		t.DDPHeader = u[:DDPHeaderLen(u[0])]
		if rr && len(u) >= DDPUntaggedHeaderLen+ReadRequestLen {
			t.R = true
			t.RDMAHdr = u[DDPUntaggedHeaderLen : DDPUntaggedHeaderLen+ReadRequestLen]
		}
	}
	n += t.Encode(b[n:])
	qp.termLen = sealFPDU(b, n-FPDUHeaderLen, qp.crc)
	qp.termPending = true
	qp.termErr, qp.hasTerm = te, true
	qp.closeAfter = true
	qp.toError(nil)
	qp.event(EvTerminate)
}
