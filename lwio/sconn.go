package lwio

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// sconn is the server side of one RDMA connection. The server's poller
// hands it every completion (completion); the first message is AUTH (auth,
// here), every later one goes through the request table (sconn_request.go):
// the cheap requests (REGISTER, CLOSE, CANCEL, CREDIT, INTERRUPT) are
// answered there, reads and writes go to the connection's queue, which
// Workers goroutines drain with the file I/O outside the lock (sconn_io.go).
// Credits are in sconn_credit.go. This file holds the connection's life: its
// buffers, authentication and teardown.
//
// Invariants, under mu:
//   - receive buffers posted = credits + creditSlack (before AUTH: 1 + slack);
//   - outstanding counts requests received and not yet answered, and an
//     answer is posted only after the buffer its request arrived in is
//     posted again, so a client that waits for answers before sending
//     more always finds a buffer;
//   - every request's last work request is signaled and carries the
//     count of work requests it retires (sqUsed), and its staging slot.
type sconn struct {
	s    *Server
	qp   *verbs.QP
	inst int // the provider instance (listener) it came in on

	rbuf     *verbs.Buffer
	rmr      *verbs.MR
	slotSize int
	nslots   int
	ctlOff   int // a small area after the slots: the server's AUTH_PARAMS

	mu        sync.Mutex
	cond      *sync.Cond
	unposted  []int
	authed    bool
	sessionID int64
	sess      *session
	peer      AuthParams
	stopTimer func() bool // the authentication timeout's (on the host's clock)
	denied    bool
	peerEnded bool // a completion error ended the connection (teardown counts how)

	credits, outstanding int
	// nextSeq is the Sequence the next request must carry: the client's
	// BaseSequence + 1 after AUTH (the server's BaseSequence), then one
	// more per request, modulo 2^16. tids holds the Tid of every request
	// not yet answered; intrTid is the held INTERRUPT's.
	nextSeq uint16
	tids    map[uint32]struct{}
	intrTid uint32

	txn        int // >0: a grant waits for its CREDIT; <0: the next retire's value
	noPositive bool
	lowStreak  int // requests in a row whose hint wanted fewer credits

	fids    []*fidEntry
	fidNext int

	queue     []*sreq
	active    []*sreq // requests workers hold (CANCEL marks them)
	reqFree   []*sreq // finished requests, for the next (no allocation per request)
	workers   int
	sqWaiters int             // workers waiting for send queue room (a vectored read's batches)
	answer    [1]rings.SendWR // answerLocked's work request when it posts nothing before it
	// While the completion poller works through a batch of completions,
	// batching is set and the work requests posted go to pend, to be
	// posted with one doorbell when the batch is done (flush).
	batching bool
	pend     []rings.SendWR

	intrPending  bool
	intrCookie   uint64
	completedIO  bool // an I/O finished since the last interrupt answer
	stageFree    []*stageSlot
	stageAll     []*stageSlot
	sqUsed       int
	sqDepth      int
	wrid         uint64
	inflight     map[uint64]posted
	err          error
	teardownDone chan struct{}
}

// posted is what a signaled work request retires when it completes.
type posted struct {
	n     int
	stage *stageSlot
	deny  bool
}

type fidEntry struct {
	fid    uint16
	f      *file
	flags  uint32
	closed bool
	busy   int
}

type stageSlot struct {
	buf *verbs.Buffer
	mr  *verbs.MR
	b   []byte
}

// sreq is a read or write waiting for a worker.
type sreq struct {
	h       Header
	fe      *fidEntry
	slot    int    // the receive buffer a write's data is in (-1 once posted again)
	data    []byte // write data (a view of the receive buffer)
	regions []Region
	// cancelled: a CANCEL named the request while a worker held it.
	cancelled atomic.Bool
	wrs       [2]rings.SendWR // a read's data Write and its answer (sconn_io.go)
}

// sqDepthFor is the send queue a connection needs when every request it
// can have outstanding (its credits and the slack) is a vectored read
// posting a batch of RDMA Writes (vecBatch) and then its completion, plus
// a delta credit message and an interrupt answer, and one more batch: the
// poller posts answers itself, so it must never wait for room, while a
// worker placing a larger vectored read waits for room beyond that.
func sqDepthFor(maxCredits int) int { return (maxCredits+creditSlack)*(vecBatch+1) + 2 + vecBatch }

const (
	// shrinkAfter is how many requests in a row must want fewer credits
	// before the server asks for some back.
	shrinkAfter = 64
	maxFids     = 4096
	ctlAreaSize = 128
)

func newSconn(s *Server, qp *verbs.QP, inst int) (*sconn, error) {
	c := &sconn{s: s, qp: qp, inst: inst, slotSize: HeaderSize + s.cfg.MaxRecvBuffer, nslots: s.cfg.MaxCredits + creditSlack,
		inflight: map[uint64]posted{}, sqDepth: sqDepthFor(s.cfg.MaxCredits), teardownDone: make(chan struct{}), fidNext: 0}
	c.cond = sync.NewCond(&c.mu)
	c.slotSize = (c.slotSize + 63) &^ 63
	c.ctlOff = c.nslots * c.slotSize
	var err error
	if c.rbuf, err = s.v.AllocBuffer(c.ctlOff + ctlAreaSize); err != nil {
		return nil, err
	}
	if c.rmr, err = s.v.RegMR(s.pd, c.rbuf, verbs.AccessLocalWrite); err != nil {
		_ = c.rbuf.Free()
		return nil, err
	}
	for i := c.nslots - 1; i >= 0; i-- {
		c.unposted = append(c.unposted, i)
	}
	c.mu.Lock()
	err = c.postRecvLocked(1 + creditSlack)
	c.mu.Unlock()
	if err != nil {
		c.freeMem()
		return nil, err
	}
	// Posts (answers, reposted receives) need not wait for the device's
	// answer to the doorbell; a refused one fails the QP, which
	// watchDoorbell turns into the end of the connection.
	qp.SetAsyncDoorbell(true)
	go c.watchDoorbell()
	c.stopTimer = s.h.AfterFunc(s.cfg.AuthTimeout, func() {
		c.mu.Lock()
		authed := c.authed
		c.mu.Unlock()
		if !authed {
			s.st.authTimeout.Add(1)
			c.fail(errors.New("lwio: authentication timed out"))
		}
	})
	return c, nil
}

// postRecvLocked posts n more receive buffers.
func (c *sconn) postRecvLocked(n int) error {
	if n > len(c.unposted) {
		return fmt.Errorf("lwio: %d receive buffers wanted, %d left", n, len(c.unposted))
	}
	// One buffer at a time is the common case (a request's buffer goes
	// back): a stack array of every credit's work requests would be
	// cleared on every call.
	var one [1]rings.RecvWR
	wrs := one[:]
	if n > 1 {
		wrs = make([]rings.RecvWR, n)
	}
	for i := range n {
		slot := c.unposted[len(c.unposted)-1-i]
		wrs[i] = rings.RecvWR{WRID: uint64(slot), NumSGE: 1}
		wrs[i].SGL[0] = c.rmr.SGE(slot*c.slotSize, c.slotSize)
	}
	// After AUTH a buffer goes back without a doorbell: the NIC finds it
	// in the queue when a message arrives, and the client sends into it
	// only after our answer, whose doorbell follows.
	// (Two calls, not a function value: through one, wrs would escape to
	// the heap on every post.)
	var err error
	if c.authed {
		_, err = c.qp.PostRecvListQuiet(wrs[:n])
	} else {
		_, err = c.qp.PostRecvList(wrs[:n])
	}
	if err != nil {
		return err
	}
	c.unposted = c.unposted[:len(c.unposted)-n]
	return nil
}

func (c *sconn) repostLocked(slot int) {
	c.unposted = append(c.unposted, slot)
	if err := c.postRecvLocked(1); err != nil {
		c.failLocked(err)
	}
}

func (c *sconn) slot(i int) []byte { return c.rbuf.Bytes()[i*c.slotSize : (i+1)*c.slotSize] }

// completion handles one completion of this connection (poller goroutine).
func (c *sconn) completion(wc *rings.Completion) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return
	}
	c.batching = true // the poller flushes when its batch is done
	if wc.Status != rings.WCSuccess {
		// The connection ended under us: the client closed it in order,
		// or it was lost (a Terminate either way, a reset). Which one is
		// known once the QP has settled: teardown counts it.
		c.peerEnded = true
		c.failLocked(fmt.Errorf("lwio: the connection ended: %v", wc.Status))
		return
	}
	if wc.Opcode&rings.WCRecv == 0 {
		p, ok := c.inflight[wc.WRID]
		if !ok {
			return
		}
		delete(c.inflight, wc.WRID)
		c.sqUsed -= p.n
		if c.sqWaiters > 0 {
			c.cond.Broadcast() // a worker waits for room (placeLocked)
		}
		if p.stage != nil {
			c.stageFree = append(c.stageFree, p.stage)
		}
		if p.deny {
			c.failLocked(errors.New("lwio: access denied"))
		}
		return
	}
	slot := int(wc.WRID)
	if slot < 0 || slot >= c.nslots || int(wc.ByteLen) > c.slotSize {
		c.s.st.protoErr.Add(1)
		c.failLocked(errors.New("lwio: receive completion of an unknown buffer"))
		return
	}
	c.request(slot, c.slot(slot)[:wc.ByteLen])
}

// auth handles the first message: AUTH_PARAMS with the negotiate key and
// a good signature get the server's parameters RDMA-written to DataVa/DataMh
// and a status response; anything else ACCESS_DENIED and the end of the
// connection.
func (c *sconn) auth(slot int, h *Header, msg []byte) {
	if c.denied {
		return
	}
	deny := func(st uint32) {
		c.s.st.authFail.Add(1)
		c.denied = true
		c.repostLocked(slot)
		c.outstanding++
		c.answerLocked(h, st, 0, nil, nil)
	}
	if h.Opcode != OpAuth || h.Flags&FlagInterrupt == 0 {
		deny(StatusAccessDenied)
		return
	}
	var a AuthParams
	if err := a.DecodeSigned(msg[HeaderSize:], c.s.cfg.Secret); err != nil {
		deny(StatusAccessDenied)
		return
	}
	// The key must be a live pipe's, and this connection's instance one
	// the pipe was offered and has not used: a key authenticates one
	// connection per instance, once.
	ss := c.s.session(getGUID(a.Key[:]))
	if ss == nil || !ss.claim(c.inst) {
		c.s.st.keyRefused.Add(1)
		deny(StatusAccessDenied)
		return
	}
	if st := a.checkClient(h, len(msg)); st != StatusSuccess {
		deny(st)
		return
	}
	want := min(max(int(a.Credits), 1), c.s.cfg.InitialCredits)
	got := c.s.takeCredits(want)
	if got == 0 {
		deny(StatusInsufficientRes)
		return
	}
	if err := c.postRecvLocked(got - 1); err != nil {
		c.s.giveCredits(got)
		deny(StatusInsufficientRes)
		return
	}
	var sid [8]byte
	_, _ = io.ReadFull(c.s.rnd, sid[:])
	c.sessionID = int64(binary.LittleEndian.Uint64(sid[:]) &^ (1 << 63))
	c.peer, c.sess, c.credits, c.authed = a, ss, got, true
	c.nextSeq = a.BaseSequence + 1
	c.tids = make(map[uint32]struct{}, c.nslots)
	c.stopTimer()
	c.s.st.authed.Add(1)
	mine := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: uint16(c.s.cfg.PageSize),
		BaseSequence: a.BaseSequence + 1, MaxRdmaWindowSize: uint32(c.s.cfg.MaxRdmaWindow),
		MaxSendBufferSize: StatusResponseSize, MaxRecvBufferSize: uint32(c.s.cfg.MaxRecvBuffer),
		HeaderSize: HeaderSize, Credits: uint16(got), RdmaReadSupported: serverRdmaRead, Key: a.Key,
		HasSessionID: true, SessionID: c.sessionID}
	p := mine.AppendSigned(c.rbuf.Bytes()[c.ctlOff:c.ctlOff:c.ctlOff+ctlAreaSize], c.s.cfg.Secret)
	c.s.log("connection authenticated", "client", ss.logon.name, "addr", ss.logon.addr, "instance", c.inst, "qp", c.qp.QPN())
	write := rings.SendWR{Opcode: rings.WRRDMAWrite, RemoteAddr: h.DataVa, RKey: h.DataMh, NumSGE: 1}
	write.SGL[0] = c.rmr.SGE(c.ctlOff, len(p))
	c.repostLocked(slot)
	c.outstanding++
	c.answerLocked(h, StatusSuccess, uint32(len(p)+8), []rings.SendWR{write}, nil)
	for range c.s.cfg.Workers {
		go c.worker()
	}
	c.workers = c.s.cfg.Workers
}

// watchDoorbell ends the connection when its QP fails because a doorbell
// was refused: the work behind it never reached the device, so no
// completion would ever come. It returns when the QP fails or is destroyed.
func (c *sconn) watchDoorbell() {
	<-c.qp.Failed()
	if err := c.qp.DoorbellErr(); err != nil {
		c.s.st.connErr.Add(1)
		c.fail(err)
	}
}

// fail ends the connection.
func (c *sconn) fail(err error) {
	c.mu.Lock()
	c.failLocked(err)
	c.mu.Unlock()
}

func (c *sconn) failLocked(err error) {
	if c.err != nil {
		return
	}
	if len(c.pend) > 0 {
		// Answers of the poller's batch go out as they would have
		// unbatched, ahead of the teardown (a failed post changes
		// nothing now).
		_, _ = c.qp.PostSendList(c.pend)
		clear(c.pend)
		c.pend = c.pend[:0]
	}
	c.err = err
	c.stopTimer()
	c.cond.Broadcast()
	go c.teardown()
}

// teardown closes the QP, waits for the workers, and frees what the
// device could have written into only once the QP is destroyed.
func (c *sconn) teardown() {
	defer close(c.teardownDone)
	_ = c.qp.Close()
	// Close waited for the QP's last event, so its error (a Terminate
	// sent or received, a lost connection) is known by now; none is a
	// client that closed in order.
	c.mu.Lock()
	if c.peerEnded {
		if c.qp.Err() != nil {
			c.s.st.connErr.Add(1)
		} else {
			c.s.st.connClosed.Add(1)
		}
	}
	c.mu.Unlock()
	c.mu.Lock()
	for c.workers > 0 {
		c.cond.Wait()
	}
	for _, r := range c.queue {
		r.fe.busy--
	}
	c.queue = nil
	for _, fe := range c.fids {
		if fe != nil && !fe.closed {
			fe.closed = true
			c.s.unref(fe.f)
		} else if fe != nil && fe.busy > 0 {
			c.s.unref(fe.f)
		}
	}
	c.mu.Unlock()
	c.s.forget(c)
	c.freeMem()
}

func (c *sconn) wait() { <-c.teardownDone }

// countRead and countWritten count bytes a request moved, for the server
// and for the client it belongs to (its logon: what the log says of it).
func (c *sconn) countRead(n uint64) {
	c.s.st.bytesRead.Add(n)
	c.sess.logon.read.Add(n)
}

func (c *sconn) countWritten(n uint64) {
	c.s.st.bytesWritten.Add(n)
	c.sess.logon.written.Add(n)
}

func (c *sconn) freeMem() {
	for _, s := range c.stageAll {
		_ = s.mr.Dereg()
		_ = s.buf.Free()
	}
	c.stageAll, c.stageFree = nil, nil
	if c.rmr != nil {
		_ = c.rmr.Dereg()
	}
	if c.rbuf != nil {
		_ = c.rbuf.Free()
	}
}
