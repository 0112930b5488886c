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
// hands it every completion (completion); the cheap requests (AUTH,
// REGISTER, CLOSE, CANCEL, CREDIT, INTERRUPT) are answered there, reads
// and writes go to the connection's queue, which Workers goroutines drain
// with the file I/O outside the lock.
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
	s  *Server
	qp *verbs.QP

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
	txn                  int // >0: a grant waits for its CREDIT; <0: the next retire's value
	noPositive           bool
	lowStreak            int // requests in a row whose hint wanted fewer credits

	fids    []*fidEntry
	fidNext int

	queue   []*sreq
	workers int

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
}

// sqDepthFor is the send queue a connection needs when every request it
// can have outstanding (its credits and the slack) is a vectored read of
// the most regions, each region an RDMA Write and then its completion, plus
// a delta credit message and an interrupt answer. The poller posts answers
// itself, so it must never wait for room: the queue holds the worst case.
func sqDepthFor(maxCredits int) int { return (maxCredits+creditSlack)*(MaxVecRegions+1) + 2 }

const (
	// shrinkAfter is how many requests in a row must want fewer credits
	// before the server asks for some back.
	shrinkAfter = 64
	maxFids     = 4096
	ctlAreaSize = 128
)

func newSconn(s *Server, qp *verbs.QP) (*sconn, error) {
	c := &sconn{s: s, qp: qp, slotSize: HeaderSize + s.cfg.MaxRecvBuffer, nslots: s.cfg.MaxCredits + creditSlack,
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
	var wrs [MaxCredits + creditSlack]rings.RecvWR
	for i := range n {
		slot := c.unposted[len(c.unposted)-1-i]
		wrs[i] = rings.RecvWR{WRID: uint64(slot), NumSGE: 1}
		wrs[i].SGL[0] = c.rmr.SGE(slot*c.slotSize, c.slotSize)
	}
	if _, err := c.qp.PostRecvList(wrs[:n]); err != nil {
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

// request handles one client message that arrived in receive buffer slot.
func (c *sconn) request(slot int, msg []byte) {
	var h Header
	if err := h.Decode(msg); err != nil {
		// Without a header there is no cookie or status block to answer
		// to: the client is broken.
		c.s.st.protoErr.Add(1)
		c.failLocked(fmt.Errorf("lwio: request: %w", err))
		return
	}
	if !c.authed {
		c.auth(slot, &h, msg)
		return
	}
	c.outstanding++
	if c.outstanding > c.credits {
		c.s.st.creditViol.Add(1)
		c.repostLocked(slot)
		c.answerLocked(&h, StatusInsufficientRes, 0, nil, nil)
		return
	}
	if h.Opcode != OpCredit {
		c.adjustCreditsLocked(int(h.Credits))
	}
	switch h.Opcode {
	case OpRead, OpVecRead, OpWrite, OpVecWrite:
		c.ioRequest(slot, &h, msg)
	case OpRegister:
		st, info := c.register(msg)
		c.repostLocked(slot)
		c.answerLocked(&h, st, info, nil, nil)
	case OpClose:
		c.s.st.closes.Add(1)
		c.repostLocked(slot)
		fe := c.fidLocked(h.Fid)
		if fe == nil || fe.closed {
			c.s.st.badReq.Add(1)
			c.answerLocked(&h, StatusInvalidHandle, 0, nil, nil)
			return
		}
		fe.closed = true
		if fe.busy == 0 {
			c.s.unref(fe.f)
		}
		c.answerLocked(&h, StatusSuccess, 0, nil, nil)
	case OpCancel:
		c.s.st.cancels.Add(1)
		c.repostLocked(slot)
		if fe := c.fidLocked(h.Fid); fe == nil {
			c.s.st.badReq.Add(1)
			c.answerLocked(&h, StatusInvalidHandle, 0, nil, nil)
			return
		}
		c.cancelLocked(h.Fid)
		c.answerLocked(&h, StatusSuccess, 0, nil, nil)
	case OpCredit:
		c.credit(slot, &h)
	case OpInterrupt:
		c.s.st.interrupts.Add(1)
		c.repostLocked(slot)
		if h.Flags&(FlagInterrupt|FlagControl) != FlagInterrupt|FlagControl || c.intrPending {
			c.s.st.badReq.Add(1)
			c.answerLocked(&h, StatusInvalidParameter, 0, nil, nil)
			return
		}
		if c.completedIO {
			c.completedIO = false
			c.answerLocked(&h, StatusSuccess, 0, nil, nil)
			return
		}
		c.intrPending, c.intrCookie = true, h.Cookie
	default:
		c.s.st.badReq.Add(1)
		c.repostLocked(slot)
		c.answerLocked(&h, StatusInvalidDeviceReq, 0, nil, nil)
	}
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
	if err := a.Decode(msg[HeaderSize:]); err != nil {
		deny(StatusAccessDenied)
		return
	}
	ss := c.s.session(getGUID(a.Key[:]))
	if ss == nil {
		deny(StatusAccessDenied)
		return
	}
	if a.HeaderSize != HeaderSize || a.PageSize == 0 || a.MaxRdmaWindowSize == 0 {
		deny(StatusInvalidParameter)
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
	c.stopTimer()
	c.s.st.authed.Add(1)
	mine := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: uint16(c.s.cfg.PageSize),
		BaseSequence: a.BaseSequence + 1, MaxRdmaWindowSize: uint32(c.s.cfg.MaxRdmaWindow),
		MaxSendBufferSize: StatusResponseSize, MaxRecvBufferSize: uint32(c.s.cfg.MaxRecvBuffer),
		HeaderSize: HeaderSize, Credits: uint16(got), RdmaReadSupported: 1, Key: a.Key,
		HasSessionID: true, SessionID: c.sessionID}
	p := mine.Append(c.rbuf.Bytes()[c.ctlOff : c.ctlOff : c.ctlOff+ctlAreaSize])
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

// register turns a resume key and the session id into a Fid.
func (c *sconn) register(msg []byte) (uint32, uint32) {
	c.s.st.registers.Add(1)
	var p FidParams
	if len(msg) < HeaderSize+FidParamsSize || p.Decode(msg[HeaderSize:]) != nil {
		c.s.st.badReq.Add(1)
		return StatusInvalidParameter, 0
	}
	if p.SessionID != c.sessionID {
		c.s.st.badReq.Add(1)
		return StatusAccessDenied, 0
	}
	c.sess.mu.Lock()
	f := c.sess.open[p.ResumeKey.ResumeKey]
	if f != nil && (p.ResumeKey.Timestamp != c.sess.ts || p.ResumeKey.Pid != c.s.pid) {
		f = nil
	}
	if f != nil {
		f.mu.Lock()
		f.refs++
		f.mu.Unlock()
	}
	c.sess.mu.Unlock()
	if f == nil {
		c.s.st.badReq.Add(1)
		return StatusObjectNameNotFound, 0
	}
	// Fids are handed out round robin over the table, so a closed Fid is
	// recycled as late as possible.
	if c.fids == nil {
		c.fids = make([]*fidEntry, maxFids)
	}
	for range maxFids {
		i := c.fidNext
		c.fidNext = (c.fidNext + 1) % maxFids
		if e := c.fids[i]; e == nil || (e.closed && e.busy == 0) {
			c.fids[i] = &fidEntry{fid: uint16(i + 1), f: f, flags: p.FlagsAndAttributes}
			if p.FlagsAndAttributes&FileNoIntermediate != 0 {
				f.enableDirect()
			}
			return StatusSuccess, uint32(i + 1)
		}
	}
	c.s.unref(f)
	return StatusInsufficientRes, 0
}

func (c *sconn) fidLocked(fid uint16) *fidEntry {
	if fid == 0 || int(fid) > len(c.fids) {
		return nil
	}
	return c.fids[fid-1]
}

// ioRequest validates a read or write and queues it for a worker.
func (c *sconn) ioRequest(slot int, h *Header, msg []byte) {
	r := &sreq{h: *h, slot: -1}
	bad := func(st uint32) {
		c.s.st.badReq.Add(1)
		c.repostLocked(slot)
		c.answerLocked(h, st, 0, nil, nil)
	}
	fe := c.fidLocked(h.Fid)
	switch {
	case fe == nil:
		bad(StatusInvalidHandle)
		return
	case fe.closed:
		bad(StatusFileClosed)
		return
	case h.Marker != IOMarker || h.Length == 0:
		bad(StatusInvalidParameter)
		return
	}
	r.fe = fe
	switch h.Opcode {
	case OpRead:
		if int(h.Length) > c.window() || len(msg) != HeaderSize {
			bad(StatusInvalidParameter)
			return
		}
		c.repostLocked(slot)
	case OpVecRead:
		regs, ok := c.regions(h, msg)
		if !ok {
			bad(StatusInvalidParameter)
			return
		}
		r.regions = regs
		c.repostLocked(slot)
	case OpWrite, OpVecWrite:
		data := msg[HeaderSize:]
		if int(h.Length) > c.s.cfg.MaxRecvBuffer {
			// More than the receive buffer could have held: the source
			// terminates the connection.
			c.s.st.protoErr.Add(1)
			c.failLocked(errors.New("lwio: write beyond MaxRecvBufferSize"))
			return
		}
		if h.Opcode == OpWrite || h.Flags&FlagCollapseIO == 0 {
			if len(data) != int(h.Length) || h.Flags&FlagCollapseIO != 0 ||
				(h.Opcode == OpVecWrite && (h.PageSize == 0 || int(h.NumPages)*int(h.PageSize) < int(h.Length))) {
				bad(StatusInvalidParameter)
				return
			}
		} else if !c.collapseOK(h, fe, len(data)) {
			bad(StatusInvalidParameter)
			return
		}
		r.slot, r.data = slot, data
	}
	fe.busy++
	c.queue = append(c.queue, r)
	// One request, one worker: while the connection works only idle
	// workers wait on cond (teardown waits there only after err is set),
	// so Signal wakes one of them, not the whole pool.
	c.cond.Signal()
}

// window is the most one read may move: the smaller of the two sides'
// MaxRdmaWindowSize.
func (c *sconn) window() int {
	return min(c.s.cfg.MaxRdmaWindow, int(c.peer.MaxRdmaWindowSize))
}

// regions parses and checks a vectored read's regions: NumPages of them
// follow the header, every one but the last is PageSize bytes, the last at
// most that and a multiple of the sector size, and together they cover
// Length with no region left wholly unused.
func (c *sconn) regions(h *Header, msg []byte) ([]Region, bool) {
	n, ps := int(h.NumPages), int(h.PageSize)
	if n == 0 || n > MaxVecRegions || ps == 0 || len(msg) != HeaderSize+n*RegionSize || int(h.Length) > c.window() {
		return nil, false
	}
	regs := make([]Region, n)
	total := 0
	for i := range regs {
		if regs[i].Decode(msg[HeaderSize+i*RegionSize:]) != nil {
			return nil, false
		}
		l := int(regs[i].Length)
		if i < n-1 && l != ps || i == n-1 && (l == 0 || l > ps || l%SectorSize != 0) {
			return nil, false
		}
		total += l
	}
	if total < int(h.Length) || total-int(regs[n-1].Length) >= int(h.Length) {
		return nil, false
	}
	return regs, true
}

// collapseOK checks a collapsed vectored write: the file was registered
// without intermediate buffering, the two page sizes divide one another,
// NumPages pages span Length, and one page (or all of a shorter Length)
// was sent.
func (c *sconn) collapseOK(h *Header, fe *fidEntry, sent int) bool {
	ps, mine := int(h.PageSize), c.s.cfg.PageSize
	if fe.flags&FileNoIntermediate == 0 || ps == 0 || max(ps, mine)%min(ps, mine) != 0 {
		return false
	}
	if int(h.NumPages) != (int(h.Length)+ps-1)/ps {
		return false
	}
	return sent == min(ps, int(h.Length))
}

// cancelLocked completes every queued request of fid with CANCELLED.
func (c *sconn) cancelLocked(fid uint16) {
	q := c.queue[:0]
	for _, r := range c.queue {
		if r.h.Fid != fid {
			q = append(q, r)
			continue
		}
		c.s.st.cancelled.Add(1)
		c.finishLocked(r, StatusCancelled, 0, nil, nil)
	}
	clear(c.queue[len(q):])
	c.queue = q
}

// workerYieldKey orders a file worker among its host's yielders in a
// lockstep run (tcpstack.Host.Yield): after the completion loops (CQ
// numbers), by QP number.
const workerYieldKey = 1 << 31

// worker runs queued reads and writes.
func (c *sconn) worker() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		for len(c.queue) == 0 && c.err == nil {
			c.cond.Wait()
		}
		if c.err != nil {
			c.workers--
			c.cond.Broadcast()
			return
		}
		r := c.queue[0]
		c.queue[0] = nil
		c.queue = c.queue[1:]
		var stage *stageSlot
		if r.h.Opcode == OpRead || r.h.Opcode == OpVecRead {
			var err error
			if stage, err = c.stageLocked(); err != nil {
				c.finishLocked(r, StatusInsufficientRes, 0, nil, nil)
				continue
			}
		}
		c.mu.Unlock()
		// (A lockstep run: the completion loop that queued r and woke
		// us goes on first, so its posts and ours reach the device
		// in the same order every time.)
		c.s.h.Yield(workerYieldKey | c.qp.QPN())
		if hook := testHookIO.Load(); hook != nil {
			(*hook)(r.h.Opcode)
		}
		st, info, wrs := c.do(r, stage)
		c.mu.Lock()
		if c.err != nil {
			continue
		}
		c.finishLocked(r, st, info, wrs, stage)
	}
}

// testHookIO, when set (tests only), runs before every read or write a
// worker does: a test stalls the workers with it to queue requests.
var testHookIO atomic.Pointer[func(Opcode)]

// do runs the file I/O of r (no lock held) and returns its status, its
// Information and, for reads, the RDMA Writes of the data.
func (c *sconn) do(r *sreq, stage *stageSlot) (uint32, uint32, []rings.SendWR) {
	h, f := &r.h, r.fe.f
	direct := r.fe.flags&FileNoIntermediate != 0
	switch h.Opcode {
	case OpRead, OpVecRead:
		b := stage.b[:h.Length]
		n, err := f.readAt(b, int64(h.Offset), direct)
		if err != nil && err != io.EOF {
			return StatusIOError, 0, nil
		}
		if n == 0 {
			return StatusEndOfFile, 0, nil
		}
		if f.dfd != nil && direct && f.direct(b, int64(h.Offset), len(b)) != nil {
			c.s.st.direct.Add(1)
		}
		if h.Opcode == OpRead {
			c.s.st.reads.Add(1)
			c.s.st.bytesRead.Add(uint64(n))
			w := rings.SendWR{Opcode: rings.WRRDMAWrite, RemoteAddr: h.DataVa, RKey: h.DataMh, NumSGE: 1}
			w.SGL[0] = stage.mr.SGE(0, n)
			return StatusSuccess, uint32(n), []rings.SendWR{w}
		}
		c.s.st.vecReads.Add(1)
		c.s.st.bytesRead.Add(uint64(n))
		wrs := make([]rings.SendWR, 0, len(r.regions))
		for off, i := 0, 0; off < n; i++ {
			l := min(int(r.regions[i].Length), n-off)
			w := rings.SendWR{Opcode: rings.WRRDMAWrite, RemoteAddr: r.regions[i].DataVa, RKey: r.regions[i].DataMh, NumSGE: 1}
			w.SGL[0] = stage.mr.SGE(off, l)
			wrs = append(wrs, w)
			off += l
		}
		return StatusSuccess, uint32(n), wrs
	case OpWrite:
		c.s.st.writes.Add(1)
		if _, err := f.writeAt(r.data, int64(h.Offset), direct); err != nil {
			return StatusIOError, 0, nil
		}
		c.s.st.bytesWritten.Add(uint64(len(r.data)))
		return StatusSuccess, h.Length, nil
	default: // OpVecWrite
		c.s.st.vecWrites.Add(1)
		if h.Flags&FlagCollapseIO == 0 {
			if _, err := f.writeAt(r.data, int64(h.Offset), direct); err != nil {
				return StatusIOError, 0, nil
			}
		} else {
			ps := int(h.PageSize)
			for i := range int(h.NumPages) {
				l := min(ps, int(h.Length)-i*ps)
				if _, err := f.writeAt(r.data[:l], int64(h.Offset)+int64(i*ps), direct); err != nil {
					return StatusIOError, 0, nil
				}
			}
		}
		c.s.st.bytesWritten.Add(uint64(h.Length))
		return StatusSuccess, h.Length, nil
	}
}

// StatusIOError is an I/O error of the server's file system
// (STATUS_UNEXPECTED_IO_ERROR).
const StatusIOError = 0xC00000E9

// finishLocked completes an I/O request: its receive buffer goes back,
// then the data Writes and the completion are posted, then a waiting
// interrupt request is answered.
func (c *sconn) finishLocked(r *sreq, st, info uint32, wrs []rings.SendWR, stage *stageSlot) {
	if r.slot >= 0 {
		c.repostLocked(r.slot)
		r.slot, r.data = -1, nil
	}
	r.fe.busy--
	if r.fe.closed && r.fe.busy == 0 {
		c.s.unref(r.fe.f)
	}
	h := &r.h
	// Immediate Data carries no byte count: only a read that moved all it
	// asked for completes that way.
	if st == StatusSuccess && len(wrs) > 0 && info == h.Length && !h.Polling() && c.s.cfg.ImmediateReads && h.ImmCookie != 0 {
		last := &wrs[len(wrs)-1]
		last.Opcode, last.ImmData = rings.WRRDMAWriteImm, uint64(h.ImmCookie)
		c.s.st.imm.Add(1)
		c.postLocked(wrs, stage, false)
		c.outstanding--
	} else {
		if st != StatusSuccess {
			wrs = nil
		}
		c.answerLocked(h, st, info, wrs, stage)
	}
}

// answerLocked posts before (data Writes), then the request's completion:
// a status response by Send, or in polling mode its status block by RDMA
// Write to IosVa/IosMh. The request is no longer outstanding.
func (c *sconn) answerLocked(h *Header, st, info uint32, before []rings.SendWR, stage *stageSlot) {
	var w rings.SendWR
	if h.Polling() {
		w = rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRInline, RemoteAddr: h.IosVa, RKey: h.IosMh, InlineLen: IOSBSize}
		(&IOSB{Information: info, Status: st}).Encode(w.InlineData[:])
		c.s.st.polled.Add(1)
	} else {
		w = rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRInline | rings.WRSolicited, InlineLen: StatusResponseSize}
		(&StatusResponse{Cookie: h.Cookie, IOSB: IOSB{Information: info, Status: st}}).Encode(w.InlineData[:])
		c.s.st.intrDone.Add(1)
	}
	wrs := append(before, w)
	c.postLocked(wrs, stage, c.denied)
	c.outstanding--
	if h.Polling() {
		// A status block written: the completion a sleeping polling client
		// may be waiting for, whatever its status (a refused request
		// included), so it answers a held interrupt request, or lets the
		// next one be answered at once.
		if c.intrPending {
			c.intrPending = false // answerLocked retires the interrupt request
			c.answerLocked(&Header{Flags: FlagInterrupt | FlagControl, Cookie: c.intrCookie}, StatusSuccess, 0, nil, nil)
		} else {
			c.completedIO = true
		}
	}
}

// postLocked posts wrs in order, the last signaled; it waits for send
// queue room.
func (c *sconn) postLocked(wrs []rings.SendWR, stage *stageSlot, deny bool) {
	if c.err != nil {
		return
	}
	if c.sqUsed+len(wrs) > c.sqDepth {
		// The send queue is sized for every request of every credit at
		// once (sqDepthFor); this is a bug, not back pressure.
		c.failLocked(fmt.Errorf("lwio: send queue overflow (%d + %d of %d)", c.sqUsed, len(wrs), c.sqDepth))
		return
	}
	c.wrid++
	last := &wrs[len(wrs)-1]
	last.Flags |= rings.WRSignaled
	last.WRID = c.wrid
	if n, err := c.qp.PostSendList(wrs); err != nil {
		if n > 0 {
			c.s.st.connErr.Add(1)
		}
		c.failLocked(fmt.Errorf("lwio: post: %w", err))
		return
	}
	c.sqUsed += len(wrs)
	c.inflight[c.wrid] = posted{n: len(wrs), stage: stage, deny: deny}
}

// stageLocked takes a staging slot for a read's data.
func (c *sconn) stageLocked() (*stageSlot, error) {
	if n := len(c.stageFree); n > 0 {
		s := c.stageFree[n-1]
		c.stageFree = c.stageFree[:n-1]
		return s, nil
	}
	if len(c.stageAll) >= c.nslots {
		return nil, errors.New("lwio: staging exhausted")
	}
	size := c.s.cfg.MaxRdmaWindow
	buf, err := c.s.v.AllocBuffer(size + directAlign)
	if err != nil {
		return nil, err
	}
	pad := int((directAlign - uint64(buf.Addr)%directAlign) % directAlign)
	mr, err := c.s.v.RegMRAddr(c.s.pd, buf.Addr+rings.Addr(pad), size, verbs.AccessLocalWrite)
	if err != nil {
		_ = buf.Free()
		return nil, err
	}
	s := &stageSlot{buf: buf, mr: mr, b: buf.Bytes()[pad : pad+size]}
	c.stageAll = append(c.stageAll, s)
	return s, nil
}

// adjustCreditsLocked starts a credit transaction when the policy wants a
// different number of credits and none is under way.
func (c *sconn) adjustCreditsLocked(hint int) {
	if c.txn != 0 {
		return
	}
	want := min(max(c.s.cfg.CreditPolicy(c.credits, hint), 1), c.s.cfg.MaxCredits)
	if want >= c.credits {
		c.lowStreak = 0
	}
	switch {
	case want > c.credits && !c.noPositive:
		n := c.s.takeCredits(want - c.credits)
		if n == 0 {
			return
		}
		if err := c.postRecvLocked(n); err != nil {
			c.s.giveCredits(n)
			return
		}
		c.credits += n
		c.txn = n
		c.s.st.grants.Add(1)
		c.sendDeltaLocked(int32(n))
	case want < c.credits:
		// Give back only after a sustained lull: a client between bursts
		// must not lose its credits to one quiet request.
		if c.lowStreak++; c.lowStreak < shrinkAfter {
			return
		}
		c.lowStreak = 0
		n := c.credits - want
		c.txn = -n
		c.s.st.grants.Add(1)
		c.sendDeltaLocked(int32(-n))
	}
}

// sendDeltaLocked sends a delta credit message: a status response with
// Cookie 0, Status NOTIFY_CREDIT and the signed delta as Information. It
// lands in the receive buffer the client keeps beyond its credits.
func (c *sconn) sendDeltaLocked(d int32) {
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRInline | rings.WRSolicited, InlineLen: StatusResponseSize}
	(&StatusResponse{IOSB: IOSB{Information: uint32(d), Status: StatusNotifyCredit}}).Encode(w.InlineData[:])
	c.postLocked([]rings.SendWR{w}, nil, false)
}

// credit handles the client's CREDIT: the acknowledgement of a grant
// (Offset's upper 32 bits: credits it did not use, ≥ 0) or one returned
// credit (-N … -1), whose receive buffer is not posted again.
func (c *sconn) credit(slot int, h *Header) {
	v := int32(h.Offset >> 32)
	switch {
	case c.txn > 0 && v >= 0:
		c.txn = 0
		if v > 0 {
			c.noPositive = true
		}
		c.repostLocked(slot)
		c.answerLocked(h, StatusSuccess, 0, nil, nil)
	case c.txn < 0 && int(v) == c.txn:
		c.unposted = append(c.unposted, slot)
		c.credits--
		c.s.giveCredits(1)
		c.s.st.retires.Add(1)
		c.txn++
		c.noPositive = false
		c.answerLocked(h, StatusNotifyCredit, 0, nil, nil)
	default:
		c.s.st.badReq.Add(1)
		c.repostLocked(slot)
		c.answerLocked(h, StatusInvalidParameter, 0, nil, nil)
	}
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
