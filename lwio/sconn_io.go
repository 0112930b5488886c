package lwio

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// The server connection's I/O: the workers that run reads and writes
// outside the lock, and the completions (status responses, status blocks,
// Immediate Data) that answer every request.

// workerYieldKey orders a file worker among its host's yielders in a
// lockstep run (tcpstack.Host.Yield): after the completion loops (CQ
// numbers), by QP number.
const workerYieldKey = 1 << 31

// worker runs queued reads and writes. A request it holds is in c.active
// until it is answered, where CANCEL finds it (cancelLocked).
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
		c.runLocked(r, true)
	}
}

// dispatchLocked hands a read or write to a worker, or does a small read
// itself (the completion poller) when it is the connection's only request
// (a client waiting for each read before the next): a few KiB from the
// page cache cost less than waking a worker and handing the answer back,
// which is most of such a read's latency. With more outstanding, the
// workers read while the poller takes the next requests. (Not while a
// test stalls the workers: its hook must not stall the poller.)
func (c *sconn) dispatchLocked(r *sreq) {
	if r.h.Opcode != OpRead || int(r.h.Length) > inlineReadMax || c.outstanding > 1 || testHookIO.Load() != nil {
		c.queue = append(c.queue, r)
		// One request, one worker: while the connection works only idle
		// workers wait on cond (teardown waits there only after err is
		// set), so Signal wakes one of them, not the whole pool.
		c.cond.Signal()
		return
	}
	c.runLocked(r, false)
}

// inlineReadMax is the largest read the poller does itself.
const inlineReadMax = 16 << 10

// runLocked does r's file I/O with the lock released and posts its data
// and answer; worker: on a worker goroutine (else the poller).
func (c *sconn) runLocked(r *sreq, worker bool) {
	var stage *stageSlot
	if r.h.Opcode == OpRead || r.h.Opcode == OpVecRead {
		var err error
		if stage, err = c.stageLocked(); err != nil {
			c.finishLocked(r, StatusInsufficientRes, 0, nil, nil)
			return
		}
	}
	c.active = append(c.active, r)
	c.mu.Unlock()
	if worker {
		// (A lockstep run: the completion loop that queued r and woke
		// us goes on first, so its posts and ours reach the device
		// in the same order every time.)
		c.s.h.Yield(workerYieldKey | c.qp.QPN())
		if hook := testHookIO.Load(); hook != nil {
			(*hook)(r.h.Opcode)
		}
	}
	st, info, wrs := c.do(r, stage)
	c.mu.Lock()
	c.dropActiveLocked(r)
	if c.err != nil {
		return
	}
	c.placeLocked(r, st, info, wrs, stage)
}

// placeLocked posts a finished request's data and answer. A read whose
// CANCEL came while the worker held it is abandoned before any byte is
// placed (or, for a vectored read of more regions than one batch, before
// the next batch): it completes CANCELLED. A write has been done by then
// and completes as it went, as the source allows for requests that can no
// longer be cancelled.
func (c *sconn) placeLocked(r *sreq, st, info uint32, wrs []rings.SendWR, stage *stageSlot) {
	isRead := r.h.Opcode == OpRead || r.h.Opcode == OpVecRead
	for st == StatusSuccess && len(wrs) > vecBatch && !r.cancelled.Load() {
		// A vectored read of more regions than the send queue keeps
		// for one request: a batch at a time, as room allows, always
		// leaving room for every outstanding request's last post and
		// the poller's own answers.
		for c.err == nil && c.sqUsed+vecBatch+c.outstanding*(vecBatch+1)+2 > c.sqDepth {
			c.sqWaiters++
			c.cond.Wait()
			c.sqWaiters--
		}
		if c.err != nil {
			return
		}
		c.postLocked(wrs[:vecBatch], nil, false)
		wrs = wrs[vecBatch:]
	}
	if isRead && r.cancelled.Load() {
		c.s.st.abandoned.Add(1)
		st, info = StatusCancelled, 0
	}
	if st == StatusCancelled {
		c.s.st.cancelled.Add(1)
	}
	c.finishLocked(r, st, info, wrs, stage)
}

// vecBatch is the most RDMA Writes of one vectored read in the send queue
// at once: a read of more regions (up to the server's MaxRecvBufferSize ÷
// RegionSize) is placed a batch at a time as the queue drains.
const vecBatch = 64

// maxRegions is the most regions a vectored read may carry here: as many
// as the receive buffer holds after the header (the source's limit,
// MaxRecvBufferSize ÷ sizeof(LWIO_RDMA_REGION)), and NumPages is a u16.
func (c *sconn) maxRegions() int { return min(c.s.cfg.MaxRecvBuffer/RegionSize, MaxVecRegions) }

func (c *sconn) dropActiveLocked(r *sreq) {
	for i, a := range c.active {
		if a == r {
			c.active[i] = c.active[len(c.active)-1]
			c.active[len(c.active)-1] = nil
			c.active = c.active[:len(c.active)-1]
			return
		}
	}
}

// cancelLocked cancels fid's requests: those still queued complete
// CANCELLED now; those a worker holds are marked, and a read among them is
// abandoned before its data is placed (placeLocked). target 0 names every
// request of the Fid (the source's CANCEL); otherwise the one request
// whose Cookie (interrupt mode) or IosVa (polling mode, where the header
// has no cookie) it is, which is how a client cancels one request when
// its context ends.
func (c *sconn) cancelLocked(fid uint16, target uint64) {
	match := func(r *sreq) bool {
		if r.h.Fid != fid {
			return false
		}
		if target == 0 {
			return true
		}
		if r.h.Polling() {
			return r.h.IosVa == target
		}
		return r.h.Cookie == target
	}
	q := c.queue[:0]
	for _, r := range c.queue {
		if !match(r) {
			q = append(q, r)
			continue
		}
		c.s.st.cancelled.Add(1)
		c.finishLocked(r, StatusCancelled, 0, nil, nil)
	}
	clear(c.queue[len(q):])
	c.queue = q
	for _, r := range c.active {
		if match(r) {
			r.cancelled.Store(true)
		}
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
		if h.Opcode == OpRead {
			c.s.st.reads.Add(1)
		} else {
			c.s.st.vecReads.Add(1)
		}
		b := stage.b[:h.Length]
		n, st := readChunks(r, b, int64(h.Offset), direct)
		if st != StatusSuccess {
			return st, 0, nil
		}
		if f.dfd != nil && direct && f.direct(b, int64(h.Offset), len(b)) != nil {
			c.s.st.direct.Add(1)
		}
		if h.Opcode == OpRead {
			c.countRead(uint64(n))
			// The request's own room for the Write and the answer after
			// it: a slice literal here would be an allocation per read.
			w := &r.wrs[0]
			*w = rings.SendWR{Opcode: rings.WRRDMAWrite, RemoteAddr: h.DataVa, RKey: h.DataMh, NumSGE: 1}
			w.SGL[0] = stage.mr.SGE(0, n)
			return StatusSuccess, uint32(n), r.wrs[:1]
		}
		c.countRead(uint64(n))
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
		c.countWritten(uint64(len(r.data)))
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
		c.countWritten(uint64(h.Length))
		return StatusSuccess, h.Length, nil
	}
}

// readChunk is the most a worker reads from the file before it looks
// whether its request was cancelled.
const readChunk = 256 << 10

// readChunks reads len(b) bytes of r's file at off into b, a chunk at a
// time, stopping early at the end of the file or when r is cancelled.
func readChunks(r *sreq, b []byte, off int64, direct bool) (int, uint32) {
	n := 0
	for n < len(b) {
		if r.cancelled.Load() {
			return 0, StatusCancelled
		}
		m, err := r.fe.f.readAt(b[n:min(n+readChunk, len(b))], off+int64(n), direct)
		n += m
		if err == io.EOF || (err == nil && m == 0) {
			break
		}
		if err != nil {
			return 0, StatusIOError
		}
	}
	if n == 0 {
		return 0, StatusEndOfFile
	}
	return n, StatusSuccess
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
		delete(c.tids, h.Tid)
	} else {
		if st != StatusSuccess {
			wrs = nil
		}
		c.answerLocked(h, st, info, wrs, stage)
	}
	c.freeReqLocked(r)
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
	if before == nil {
		before = c.answer[:0] // under c.mu, posted (copied into the queue) before any reuse
	}
	wrs := append(before, w)
	c.postLocked(wrs, stage, c.denied)
	c.outstanding--
	delete(c.tids, h.Tid)
	if h.Polling() {
		// A status block written: the completion a sleeping polling client
		// may be waiting for, whatever its status (a refused request
		// included), so it answers a held interrupt request, or lets the
		// next one be answered at once.
		if c.intrPending {
			c.intrPending = false // answerLocked retires the interrupt request
			c.answerLocked(&Header{Flags: FlagInterrupt | FlagControl, Cookie: c.intrCookie, Tid: c.intrTid}, StatusSuccess, 0, nil, nil)
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
	c.sqUsed += len(wrs)
	c.inflight[c.wrid] = posted{n: len(wrs), stage: stage, deny: deny}
	if c.batching {
		c.pend = append(c.pend, wrs...)
		return
	}
	c.sendLocked(wrs)
}

// flush posts what the poller's batch left in pend, with one doorbell:
// requests often arrive several to a frame (a client with many
// outstanding packs its small Sends), and their answers then share the
// command that tells the NIC to look at the send queue.
func (c *sconn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.batching = false
	if len(c.pend) > 0 && c.err == nil {
		c.sendLocked(c.pend)
	}
	clear(c.pend)
	c.pend = c.pend[:0]
}

// sendLocked posts wrs to the send queue (one doorbell).
func (c *sconn) sendLocked(wrs []rings.SendWR) {
	if n, err := c.qp.PostSendList(wrs); err != nil {
		if n > 0 {
			c.s.st.connErr.Add(1)
		}
		c.failLocked(fmt.Errorf("lwio: post: %w", err))
	}
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
