package verbs

// Queue pairs (ibv_qp): the send and receive queues, rings in host memory
// the host produces into with the QP_DOORBELL command, and the QP's state
// as the device's events tell it.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// QPAttr describes a QP (ibv_qp_init_attr plus the connection parameters
// of rdma_conn_param).
type QPAttr struct {
	PD             PD
	SendCQ, RecvCQ *CQ // may be the same CQ
	// SQDepth and RQDepth are the work queue sizes, rounded up to a power
	// of two (0: DefaultQueueDepth).
	SQDepth, RQDepth int
	// IRD bounds the peer's RDMA Reads waiting for our response, ORD our
	// RDMA Reads outstanding (0: the device default, 16; at most 16383).
	// With MPA revision 2 they are what we offer: the exchange can only
	// lower them (QP.Negotiated).
	IRD, ORD int
	// MPA: NoCRC does not ask for CRC (still used when the peer asks);
	// PeerToPeer asks, as initiator, for RFC 6581 peer-to-peer mode (the
	// responder may then send first; a listener honours it whenever asked);
	// MPARev1 connects with revision 1 (RFC 5044, no IRD/ORD exchange)
	// instead of 2.
	NoCRC, PeerToPeer, MPARev1 bool
	// RTRDelay: in peer-to-peer mode DialRDMA lets the RTR go this long
	// after the reply came (0: at once). Linux siw as responder misses
	// bytes that arrive right after its reply (docs/iwarp.md); a client
	// that sends nothing after the RTR needs the delay against it.
	RTRDelay time.Duration
	// PrivateData goes in the MPA request (DialRDMA) or is the default
	// of the MPA reply (listener); at most MaxPrivateData bytes.
	PrivateData []byte
	// Setup, if set, runs right after CREATE_QP, before the connection is
	// established: post receives here. A responder must have receives
	// posted before it accepts (the initiator may send at once).
	Setup func(*QP) error
	// ConnectTimeout bounds a listener's wait for the peer's MPA request
	// (0: DefaultConnectTimeout). DialRDMA uses its context instead.
	ConnectTimeout time.Duration
}

func (a *QPAttr) check(v *Provider) error {
	switch {
	case a.SendCQ == nil || a.RecvCQ == nil:
		return errors.New("verbs: QPAttr: SendCQ and RecvCQ are required")
	case a.SendCQ.v != v || a.RecvCQ.v != v:
		return errors.New("verbs: QPAttr: a CQ of another host")
	case a.SendCQ.dead.Load() || a.RecvCQ.dead.Load():
		return fmt.Errorf("verbs: QPAttr: %w", ErrCQDestroyed)
	case a.SQDepth < 0 || a.SQDepth > MaxQueueDepth || a.RQDepth < 0 || a.RQDepth > MaxQueueDepth:
		return fmt.Errorf("verbs: QPAttr: SQ depth %d / RQ depth %d (0..%d)", a.SQDepth, a.RQDepth, MaxQueueDepth)
	case a.IRD < 0 || a.IRD > MaxIRDORD || a.ORD < 0 || a.ORD > MaxIRDORD:
		return fmt.Errorf("verbs: QPAttr: IRD %d / ORD %d (0..%d)", a.IRD, a.ORD, MaxIRDORD)
	case a.RTRDelay < 0:
		return errors.New("verbs: QPAttr: negative RTRDelay")
	case a.PeerToPeer && a.MPARev1:
		return errors.New("verbs: QPAttr: peer-to-peer mode needs MPA revision 2")
	case len(a.PrivateData) > MaxPrivateData:
		return fmt.Errorf("verbs: QPAttr: %d bytes of private data (at most %d)", len(a.PrivateData), MaxPrivateData)
	case a.ConnectTimeout < 0:
		return errors.New("verbs: QPAttr: negative ConnectTimeout")
	}
	return nil
}

// QPState is the host's view of a QP, from the device's events.
type QPState int

// QP states.
const (
	QPStateIdle           QPState = iota // created, not connected
	QPStateConnecting                    // initiator: MPA request sent
	QPStateConnectRequest                // responder: the peer's MPA request arrived
	QPStateAccepted                      // responder: MPA reply sent, waiting for the first FPDU (may post; sends wait)
	QPStateRTS                           // established
	QPStateClosing                       // orderly close requested: work flushed, connection closing
	QPStateError                         // Terminate, reject, lost connection or CQ overrun
	QPStateClosed                        // the connection is over
	QPStateDestroyed
)

var qpStateNames = [...]string{"IDLE", "CONNECTING", "CONNECT_REQUEST", "ACCEPTED", "RTS", "CLOSING", "ERROR", "CLOSED", "DESTROYED"}

func (s QPState) String() string {
	if s >= 0 && int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", int(s))
}

// QP is a queue pair (ibv_qp) on a delegated connection.
type QP struct {
	v         *Provider
	conn      *tcpstack.DelegatedConn // nil in unit tests
	qpn       uint32
	pd        PD
	sendCQ    *CQ
	recvCQ    *CQ
	initiator bool
	adoptable bool // made by prepareQP, not yet taken by adoptQP (under v.mu)

	cfgBase    rings.Addr // config block at +0, private data at +qpPrivOff
	sqL, rqL   rings.Layout
	sqMu, rqMu sync.Mutex
	sq, rq     *rings.Producer
	sqDead     bool // under sqMu
	rqDead     bool // under rqMu
	ctlMu      sync.Mutex
	ctlBusy    atomic.Bool // a MODIFY_QP with private data is unanswered
	asyncDB    atomic.Bool // SetAsyncDoorbell
	// An asynchronous doorbell's command and outcome function, made once
	// (SubmitAsync copies the command before it returns): a post then
	// allocates nothing.
	dbMu          sync.Mutex
	dbCmd         [1]tcpstack.HostCommand
	dbDone        func([]rings.Command, error)
	destroyOnce   sync.Once
	destroyErr    error
	local, remote net.Addr

	mu        sync.Mutex
	state     QPState
	err       error // why the QP is in ERROR
	lastEv    rings.QPEvent
	peerPriv  []byte // the peer's MPA private data (request or reply)
	closeReq  bool
	llpClosed bool
	changed   chan struct{} // closed and replaced on every change
	failed    chan struct{} // closed when the QP enters ERROR or is destroyed
	dbErr     error         // the first refused asynchronous doorbell
}

const (
	qpPrivOff     = 128                        // private data, after the config block
	qpPeerPrivOff = qpPrivOff + MaxPrivateData // the peer's private data, written by the device
	qpCtlSize     = qpPeerPrivOff + MaxPrivateData
)

// newQP allocates a QP's rings and control block (no command).
func (v *Provider) newQP(attr *QPAttr, qpn uint32, initiator bool) (*QP, error) {
	sqd, rqd := attr.SQDepth, attr.RQDepth
	if sqd == 0 {
		sqd = DefaultQueueDepth
	}
	if rqd == 0 {
		rqd = DefaultQueueDepth
	}
	sqc, err := queueCount(sqd, "SQ")
	if err != nil {
		return nil, err
	}
	rqc, err := queueCount(rqd, "RQ")
	if err != nil {
		return nil, err
	}
	qp := &QP{v: v, qpn: qpn, pd: attr.PD, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, initiator: initiator,
		changed: make(chan struct{}), failed: make(chan struct{})}
	fail := func(err error) (*QP, error) {
		qp.freeMem()
		return nil, fmt.Errorf("verbs: QP memory: %w", err)
	}
	if qp.sqL, err = rings.AllocSQ(v.mem, sqc); err != nil {
		return fail(err)
	}
	if qp.rqL, err = rings.AllocRQ(v.mem, rqc); err != nil {
		return fail(err)
	}
	if qp.cfgBase, err = v.mem.Alloc(qpCtlSize, rings.CacheLine); err != nil {
		return fail(err)
	}
	// The doorbell is the QP doorbell register or the QP_DOORBELL command
	// (doorbell.go), so the producers publish only when told (batch =
	// whole ring) and kick nobody.
	if qp.sq, err = rings.NewProducer(v.mem, qp.sqL, qp.sqL.Count, nil); err != nil {
		return fail(err)
	}
	if qp.rq, err = rings.NewProducer(v.mem, qp.rqL, qp.rqL.Count, nil); err != nil {
		return fail(err)
	}
	blk, _ := v.mem.Map(qp.cfgBase, qpCtlSize)
	cfg := qp.config(attr)
	cfg.Encode(blk)
	copy(blk[qpPrivOff:], attr.PrivateData)
	v.copied(len(attr.PrivateData))
	return qp, nil
}

// config is the QP's CREATE_QP block.
func (qp *QP) config(attr *QPAttr) rings.QPConfig {
	privLen := len(attr.PrivateData)
	c := rings.QPConfig{
		PD: uint32(qp.pd), IRD: uint16(attr.IRD), ORD: uint16(attr.ORD),
		SendCQ: qp.sendCQ.num, RecvCQ: qp.recvCQ.num,
		SQBase: qp.sqL.Base, SQCount: qp.sqL.Count,
		RQBase: qp.rqL.Base, RQCount: qp.rqL.Count,
		PeerPrivAddr: qp.cfgBase + qpPeerPrivOff,
	}
	if qp.initiator {
		c.Flags |= rings.QPFlagInitiator
	}
	for _, f := range []struct {
		on   bool
		flag uint32
	}{{attr.NoCRC, rings.QPFlagNoCRC}, {attr.PeerToPeer && qp.initiator, rings.QPFlagPeerToPeer}, {attr.MPARev1 && qp.initiator, rings.QPFlagMPARev1}} {
		if f.on {
			c.Flags |= f.flag
		}
	}
	if privLen > 0 {
		c.PrivAddr, c.PrivLen = qp.cfgBase+qpPrivOff, uint32(privLen)
	}
	return c
}

func (qp *QP) freeMem() {
	mem := qp.v.mem
	for _, a := range []*rings.Addr{&qp.sqL.Base, &qp.rqL.Base, &qp.cfgBase} {
		if *a != 0 {
			_ = mem.Free(*a)
			*a = 0
		}
	}
}

// register enters the QP under its number (before CREATE_QP: events may
// follow at once) and counts it on its CQs.
func (qp *QP) register() error {
	v := qp.v
	v.mu.Lock()
	if v.qps[qp.qpn] != nil {
		v.mu.Unlock()
		return fmt.Errorf("verbs: CREATE_QP: connection %d already has a QP", qp.qpn)
	}
	v.qps[qp.qpn] = qp
	v.mu.Unlock()
	qp.sendCQ.qpRefs.Add(1)
	qp.recvCQ.qpRefs.Add(1)
	return nil
}

func (qp *QP) unregister() {
	v := qp.v
	v.mu.Lock()
	if v.qps[qp.qpn] == qp {
		delete(v.qps, qp.qpn)
	}
	v.mu.Unlock()
	qp.sendCQ.qpRefs.Add(-1)
	qp.recvCQ.qpRefs.Add(-1)
}

// QPN is the QP number (the delegated connection's index).
func (qp *QP) QPN() uint32 { return qp.qpn }

// PD is the QP's protection domain.
func (qp *QP) PD() PD { return qp.pd }

// SendCQ and RecvCQ are the QP's completion queues.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ is the CQ of the QP's receive completions.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// LocalAddr and RemoteAddr are the connection's TCP endpoints.
func (qp *QP) LocalAddr() net.Addr { return qp.local }

// RemoteAddr is the peer's TCP endpoint.
func (qp *QP) RemoteAddr() net.Addr { return qp.remote }

// State is the QP's state as the host knows it.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Err says why the QP is in ERROR (nil otherwise).
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.err
}

// LastEvent is the last QP event the device reported.
func (qp *QP) LastEvent() rings.QPEvent {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.lastEv
}

func (qp *QP) changedLocked() {
	close(qp.changed)
	qp.changed = make(chan struct{})
}

func (qp *QP) failLocked(err error) {
	if qp.err == nil {
		qp.err = err
	}
	if qp.state < QPStateError {
		qp.state = QPStateError
	}
	qp.markFailedLocked()
}

func (qp *QP) markFailedLocked() {
	select {
	case <-qp.failed:
	default:
		close(qp.failed)
	}
}

// Failed is closed when the QP enters ERROR (a Terminate, a reject, the
// connection lost, a CQ overrun, or a doorbell the device refused) or is
// destroyed. An upper layer selects on it to fail its waiters when no
// completion will come: work posted behind a refused doorbell never
// reached the device, so it is never flushed.
func (qp *QP) Failed() <-chan struct{} { return qp.failed }

// DoorbellErr is the first asynchronous doorbell the device refused or
// lost (wrapping ErrDoorbell), nil if none was.
func (qp *QP) DoorbellErr() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.dbErr
}

// onEvent applies a QP event (interrupt goroutine; never blocks).
func (qp *QP) onEvent(ev rings.QPEvent, privLen uint32) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.lastEv = ev
	if privLen > 0 && privLen <= MaxPrivateData {
		if b, err := qp.v.mem.Map(qp.cfgBase+qpPeerPrivOff, int(privLen)); err == nil {
			qp.peerPriv = append(qp.peerPriv[:0], b...)
			qp.v.copied(len(b))
		}
	}
	switch ev {
	case rings.QPEvConnectRequest:
		if qp.state == QPStateIdle {
			qp.state = QPStateConnectRequest
		}
	case rings.QPEvEstablished:
		if qp.state < QPStateRTS {
			qp.state = QPStateRTS
		}
	case rings.QPEvRejected:
		qp.failLocked(ErrRejected)
	case rings.QPEvTerminate:
		qp.failLocked(fmt.Errorf("%w: Terminate", ErrQPError))
	case rings.QPEvError:
		qp.failLocked(fmt.Errorf("%w: connection lost or CQ overrun", ErrQPError))
	case rings.QPEvClosed:
		qp.llpClosed = true
		if qp.state < QPStateClosed {
			qp.state = QPStateClosed
		}
	}
	qp.changedLocked()
}

// onConnNotify looks at a notification of the QP's connection.
func (qp *QP) onConnNotify(n *rings.Notification) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if n.Flags&(rings.NtfLegacyUpload|rings.NtfUserBufDone) != 0 && n.Len > 0 && qp.state < QPStateRTS {
		// The peer's bytes went to the host, not to the QP: the MPA
		// exchange can never complete.
		qp.failLocked(ErrEarlyData)
	}
	if n.Flags&(rings.NtfRst|rings.NtfTimeout) != 0 {
		qp.failLocked(fmt.Errorf("%w: connection %v", ErrQPError, n.Flags&(rings.NtfRst|rings.NtfTimeout)))
	}
	if n.Flags&rings.NtfClosed != 0 {
		qp.llpClosed = true
	}
	if n.Flags&rings.NtfFin != 0 && !qp.closeReq && qp.state < QPStateClosing {
		// The peer closed: iWARP has no half-close, so close our side
		// too (its work is flushed and the connection ends), off the
		// interrupt goroutine.
		qp.closeReq = true
		go func() { _ = qp.modify(rings.QPClose, nil) }()
	}
	qp.changedLocked()
}

// wait blocks until done says so, ctx ends, or the QP is destroyed.
func (qp *QP) wait(ctx context.Context, done func() (bool, error)) error {
	for {
		qp.mu.Lock()
		ok, err := done()
		ch := qp.changed
		st := qp.state
		qp.mu.Unlock()
		if ok || err != nil {
			return err
		}
		if st == QPStateDestroyed {
			return ErrQPDestroyed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("verbs: QP %d in %v: %w", qp.qpn, st, ctx.Err())
		}
	}
}

// WaitEstablished waits until the QP is in RTS (for a responder: the
// initiator's first FPDU arrived).
func (qp *QP) WaitEstablished(ctx context.Context) error {
	return qp.wait(ctx, func() (bool, error) {
		if qp.state == QPStateRTS {
			return true, nil
		}
		if qp.state >= QPStateClosing {
			return false, qp.stateErr()
		}
		return false, nil
	})
}

func (qp *QP) stateErr() error {
	if qp.err != nil {
		return qp.err
	}
	if qp.state == QPStateDestroyed {
		return ErrQPDestroyed
	}
	return fmt.Errorf("verbs: QP %d is %v", qp.qpn, qp.state)
}

// modify runs MODIFY_QP with private data (ACCEPT/REJECT).
func (qp *QP) modify(a rings.QPAction, priv []byte) error {
	if len(priv) > MaxPrivateData {
		return fmt.Errorf("verbs: MODIFY_QP: %d bytes of private data (at most %d)", len(priv), MaxPrivateData)
	}
	qp.ctlMu.Lock()
	defer qp.ctlMu.Unlock()
	if qp.State() == QPStateDestroyed {
		return ErrQPDestroyed
	}
	if qp.ctlBusy.Load() {
		// A MODIFY_QP the device has not answered may still read the
		// private data area: it is not rewritten before the answer.
		return fmt.Errorf("verbs: MODIFY_QP: QP %d: an earlier MODIFY_QP is still unanswered", qp.qpn)
	}
	c := rings.Command{Opcode: rings.OpModifyQP, Conn: qp.qpn, Arg0: uint32(a)}
	if len(priv) > 0 {
		m, err := qp.v.mem.Map(qp.cfgBase+qpPrivOff, len(priv))
		if err != nil {
			return fmt.Errorf("verbs: MODIFY_QP: %w", err)
		}
		copy(m, priv)
		qp.v.copied(len(priv))
		c.Addr, c.Len = qp.cfgBase+qpPrivOff, uint32(len(priv))
	}
	if _, err := qp.v.doLate(c, func(rings.Command, error) { qp.ctlBusy.Store(false) }); err != nil {
		var ce *CommandError
		if c.Len > 0 && !errors.As(err, &ce) && !errors.Is(err, tcpstack.ErrNotSubmitted) {
			qp.ctlBusy.Store(true)
		}
		return err
	}
	qp.mu.Lock()
	switch a {
	case rings.QPConnect:
		if qp.state == QPStateIdle {
			qp.state = QPStateConnecting
		}
	case rings.QPAccept:
		if qp.state < QPStateAccepted {
			qp.state = QPStateAccepted
		}
	case rings.QPReject:
		qp.failLocked(errors.New("verbs: connection rejected"))
	case rings.QPClose:
		qp.closeReq = true
		if qp.state < QPStateClosing {
			qp.state = QPStateClosing
		}
	}
	qp.changedLocked()
	qp.mu.Unlock()
	return nil
}

// PostSend posts one send work request (ibv_post_send) and rings the
// doorbell. The device judges the opcode (iWARP has no SEND_WITH_IMM,
// atomics or memory windows: those complete with LOC_QP_OP_ERR); the host
// refuses only what cannot be encoded.
func (qp *QP) PostSend(wr *rings.SendWR) error {
	if wr == nil {
		return errors.New("verbs: post send: nil work request")
	}
	_, err := qp.PostSendList([]rings.SendWR{*wr})
	return err
}

// PostSendList posts the work requests in order with one doorbell and
// returns how many were posted; with fewer than len(wrs) the error says
// why (ErrQueueFull, or the first bad request).
func (qp *QP) PostSendList(wrs []rings.SendWR) (int, error) {
	if qp == nil {
		return 0, errors.New("verbs: post send: nil QP")
	}
	qp.sqMu.Lock()
	if qp.sqDead {
		qp.sqMu.Unlock()
		return 0, ErrQPDestroyed
	}
	n, inline := 0, 0
	var err error
	for i := range wrs {
		if err = checkSendWR(&wrs[i]); err != nil {
			break
		}
		if err = qp.v.checkExtension(&wrs[i]); err != nil {
			break
		}
		e := qp.sq.Next()
		if e == nil {
			err = ErrQueueFull
			break
		}
		wrs[i].Encode(rings.SQEntry(e))
		if wrs[i].Flags&rings.WRInline != 0 {
			inline += wrs[i].InlineLen // the CPU copied them into the SQ
		}
		qp.sq.Commit()
		n++
	}
	if n > 0 {
		qp.sq.Publish()
	}
	qp.sqMu.Unlock()
	qp.v.copied(inline)
	if n > 0 {
		if derr := qp.doorbell(); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

func checkSendWR(w *rings.SendWR) error {
	switch {
	case w.Flags&^rings.WRFlagsAll != 0:
		return fmt.Errorf("verbs: post send: unknown flags %#x", uint8(w.Flags&^rings.WRFlagsAll))
	case w.Flags&rings.WRInline != 0 && (w.InlineLen < 0 || w.InlineLen > rings.MaxInline):
		return fmt.Errorf("verbs: post send: %d bytes inline (at most %d)", w.InlineLen, rings.MaxInline)
	case w.Flags&rings.WRInline == 0 && (w.NumSGE < 0 || w.NumSGE > rings.MaxSendSGE):
		return fmt.Errorf("verbs: post send: %d SGEs (at most %d)", w.NumSGE, rings.MaxSendSGE)
	}
	return nil
}

// PostRecv posts one receive work request (ibv_post_recv).
func (qp *QP) PostRecv(wr *rings.RecvWR) error {
	if wr == nil {
		return errors.New("verbs: post recv: nil work request")
	}
	_, err := qp.PostRecvList([]rings.RecvWR{*wr})
	return err
}

// PostRecvList posts receive work requests with one doorbell; as
// PostSendList.
func (qp *QP) PostRecvList(wrs []rings.RecvWR) (int, error) { return qp.postRecvList(wrs, true) }

// PostRecvListQuiet posts receive work requests without ringing the
// doorbell. The device takes a receive work request from the ring itself
// when a message arrives (it reads the queue's producer index then), so
// the entries are found by any message that arrives after this returns.
// For a caller whose peer can only send into these buffers once told so in
// a message it posts afterwards (credits), whose doorbell follows them:
// the re-post then costs no command.
func (qp *QP) PostRecvListQuiet(wrs []rings.RecvWR) (int, error) { return qp.postRecvList(wrs, false) }

func (qp *QP) postRecvList(wrs []rings.RecvWR, ring bool) (int, error) {
	if qp == nil {
		return 0, errors.New("verbs: post recv: nil QP")
	}
	qp.rqMu.Lock()
	if qp.rqDead {
		qp.rqMu.Unlock()
		return 0, ErrQPDestroyed
	}
	n := 0
	var err error
	for i := range wrs {
		if wrs[i].NumSGE < 0 || wrs[i].NumSGE > rings.MaxRecvSGE {
			err = fmt.Errorf("verbs: post recv: %d SGEs (at most %d)", wrs[i].NumSGE, rings.MaxRecvSGE)
			break
		}
		e := qp.rq.Next()
		if e == nil {
			err = ErrQueueFull
			break
		}
		wrs[i].Encode(rings.RQEntry(e))
		qp.rq.Commit()
		n++
	}
	if n > 0 {
		qp.rq.Publish()
	}
	qp.rqMu.Unlock()
	if n > 0 && ring {
		if derr := qp.doorbell(); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

// SendQueueFree is how many send work requests can be posted now.
func (qp *QP) SendQueueFree() int {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.sqDead {
		return 0
	}
	return qp.sq.Free()
}

// RecvQueueFree is how many receive work requests can be posted now.
func (qp *QP) RecvQueueFree() int {
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	if qp.rqDead {
		return 0
	}
	return qp.rq.Free()
}

// Disconnect closes the connection in order (rdma_disconnect, MODIFY_QP
// CLOSE): nothing more is sent, outstanding work completes flushed, and the
// TCP connection closes; it waits until it has, or ctx ends.
func (qp *QP) Disconnect(ctx context.Context) error {
	if qp == nil {
		return errors.New("verbs: disconnect: nil QP")
	}
	qp.mu.Lock()
	st, req := qp.state, qp.closeReq
	qp.mu.Unlock()
	if st == QPStateDestroyed {
		return ErrQPDestroyed
	}
	if !req && st < QPStateClosing {
		if err := qp.modify(rings.QPClose, nil); err != nil {
			return err
		}
	}
	return qp.wait(ctx, func() (bool, error) {
		return qp.llpClosed || qp.state >= QPStateError, nil
	})
}

// WaitClosed waits, without closing anything itself, until the connection
// is over (the peer disconnected, or the QP failed), or ctx ends.
func (qp *QP) WaitClosed(ctx context.Context) error {
	return qp.wait(ctx, func() (bool, error) {
		return qp.llpClosed || qp.state >= QPStateError, nil
	})
}

// Close disconnects (bounded by a short timeout) and destroys the QP.
func (qp *QP) Close() error {
	if qp == nil {
		return errors.New("verbs: close: nil QP")
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	_ = qp.Disconnect(ctx)
	cancel()
	return qp.Destroy()
}

// Destroy removes the QP (ibv_destroy_qp, DESTROY_QP): outstanding work
// completes flushed into its CQs, the connection is aborted if still open
// (an RST, unless Disconnect finished), and the host memory of the queues
// and the connection is released. Later posts fail with ErrQPDestroyed.
func (qp *QP) Destroy() error {
	if qp == nil {
		return errors.New("verbs: destroy: nil QP")
	}
	qp.destroyOnce.Do(func() { qp.destroyErr = qp.destroy() })
	return qp.destroyErr
}

func (qp *QP) destroy() error {
	qp.sqMu.Lock()
	qp.sqDead = true
	qp.sqMu.Unlock()
	qp.rqMu.Lock()
	qp.rqDead = true
	qp.rqMu.Unlock()
	qp.ctlMu.Lock()
	// gone frees what the device no longer uses: DESTROY_QP (or, as
	// BAD_CONN says, an earlier ABORT) freed the connection in the unit
	// and flushed the QP's work.
	gone := func() {
		if qp.conn != nil {
			// The unit freed the index: no RELEASE, the host frees it.
			qp.v.host.Release(qp.conn)
		}
		qp.freeMem()
	}
	_, err := qp.v.doLate(rings.Command{Opcode: rings.OpDestroyQP, Conn: qp.qpn}, func(r rings.Command, err error) {
		if err == nil && (r.Status == rings.StatusOK || r.Status == rings.StatusBadConn) {
			gone()
			qp.v.quarantined(-1)
		}
	})
	qp.mu.Lock()
	qp.state = QPStateDestroyed
	qp.markFailedLocked()
	qp.changedLocked()
	qp.mu.Unlock()
	qp.ctlMu.Unlock()
	qp.unregister()
	var ce *CommandError
	if err != nil && !(errors.As(err, &ce) && ce.Status == rings.StatusBadConn) {
		// The device may still use the rings and the connection: keep
		// their memory and index rather than let it write into reused
		// ones (until a late answer says it no longer does).
		if !errors.As(err, &ce) && !errors.Is(err, tcpstack.ErrNotSubmitted) {
			qp.v.quarantined(1)
		}
		return err
	}
	gone()
	return nil
}
