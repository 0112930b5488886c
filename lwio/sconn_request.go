package lwio

import (
	"errors"
	"fmt"
	"sync/atomic"
)

// The server's one dispatch table for client requests after AUTH: per
// opcode what the request is, what it must carry and who handles it, in
// one place. request applies the common checks in a fixed order, which
// decides the status a request with several faults gets:
//
//  1. the header decodes (else the connection ends: no cookie to answer);
//  2. before AUTH only AUTH (sconn.auth); after it, credits;
//  3. the opcode has an entry with a handler (INVALID_DEVICE_REQUEST);
//  4. the entry's arrival counter;
//  5. the Fid names a registered file (INVALID_HANDLE), and one not
//     closed when the entry says so (its closedStatus);
//  6. the message's size (INVALID_PARAMETER);
//  7. the entry's validator (the status it returns);
//  8. the handler, which answers or queues the request.
//
// A refusal at 3 and 5–7 is counted as a bad request (ServerStats.BadRequests),
// its receive buffer goes back and it is answered with the status.

// reqOp is one opcode's entry.
type reqOp struct {
	op   Opcode
	name string // the constant, as docs/lwio.md's opcode table names it
	// count is the counter the request bumps on arrival, before any check;
	// nil for reads and writes, which count when done (sconn.do).
	count func(*serverCounters) *atomic.Uint64
	// fid: the request names a registered file. closedStatus is the answer
	// when that Fid is closed; 0 accepts a closed Fid.
	fid          bool
	closedStatus uint32
	// size is the least a message may hold (the header and any fixed
	// parameters); exact: exactly that.
	size  int
	exact bool
	// validate judges what the table cannot say; StatusSuccess passes.
	// The header is passed by value: a pointer handed to a call through
	// a function value would move every request's header to the heap.
	validate func(c *sconn, h Header, msg []byte) uint32
	// handle answers the request or queues it for a worker; fe is the
	// request's Fid (nil unless fid). nil: the opcode is no request after
	// AUTH (AUTH itself, which only a connection's first message may be).
	handle func(c *sconn, slot int, h Header, fe *fidEntry, msg []byte)
}

// reqOps is indexed by opcode; an opcode beyond it, or with no handler, is
// answered INVALID_DEVICE_REQUEST.
var reqOps = [...]reqOp{
	OpRead: {op: OpRead, name: "OpRead", fid: true, closedStatus: StatusFileClosed,
		size: HeaderSize, exact: true, validate: validateRead, handle: (*sconn).ioRequest},
	OpWrite: {op: OpWrite, name: "OpWrite", fid: true, closedStatus: StatusFileClosed,
		size: HeaderSize, validate: validateWrite, handle: (*sconn).ioRequest},
	OpVecRead: {op: OpVecRead, name: "OpVecRead", fid: true, closedStatus: StatusFileClosed,
		size: HeaderSize + RegionSize, validate: validateIO, handle: (*sconn).ioRequest},
	OpVecWrite: {op: OpVecWrite, name: "OpVecWrite", fid: true, closedStatus: StatusFileClosed,
		size: HeaderSize, validate: validateWrite, handle: (*sconn).ioRequest},
	OpClose: {op: OpClose, name: "OpClose", count: func(s *serverCounters) *atomic.Uint64 { return &s.closes },
		fid: true, closedStatus: StatusInvalidHandle, size: HeaderSize, handle: (*sconn).closeFid},
	OpCancel: {op: OpCancel, name: "OpCancel", count: func(s *serverCounters) *atomic.Uint64 { return &s.cancels },
		fid: true, size: HeaderSize, handle: (*sconn).cancel},
	OpAuth: {op: OpAuth, name: "OpAuth"},
	OpRegister: {op: OpRegister, name: "OpRegister", count: func(s *serverCounters) *atomic.Uint64 { return &s.registers },
		size: HeaderSize + FidParamsSize, handle: (*sconn).register},
	OpCredit: {op: OpCredit, name: "OpCredit", size: HeaderSize, handle: (*sconn).credit},
	OpInterrupt: {op: OpInterrupt, name: "OpInterrupt", count: func(s *serverCounters) *atomic.Uint64 { return &s.interrupts },
		size: HeaderSize, validate: validateInterrupt, handle: (*sconn).interrupt},
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
	if !c.orderLocked(&h, len(msg)) {
		return
	}
	c.outstanding++
	if c.outstanding > c.credits {
		c.s.st.creditViol.Add(1)
		c.repostLocked(slot)
		c.answerLocked(&h, StatusInsufficientRes, 0, nil, nil)
		return
	}
	// Every message but a CREDIT carries the client's pending requests.
	if h.Opcode != OpCredit {
		c.adjustCreditsLocked(int(h.Credits))
	}
	if int(h.Opcode) >= len(reqOps) || reqOps[h.Opcode].handle == nil {
		c.refuseLocked(slot, &h, StatusInvalidDeviceReq)
		return
	}
	e := &reqOps[h.Opcode]
	if e.count != nil {
		e.count(&c.s.st).Add(1)
	}
	var fe *fidEntry
	if e.fid {
		fe = c.fidLocked(h.Fid)
		switch {
		case fe == nil:
			c.refuseLocked(slot, &h, StatusInvalidHandle)
			return
		case fe.closed && e.closedStatus != 0:
			c.refuseLocked(slot, &h, e.closedStatus)
			return
		}
	}
	if len(msg) < e.size || e.exact && len(msg) != e.size {
		c.refuseLocked(slot, &h, StatusInvalidParameter)
		return
	}
	if e.validate != nil {
		if st := e.validate(c, h, msg); st != StatusSuccess {
			c.refuseLocked(slot, &h, st)
			return
		}
	}
	e.handle(c, slot, h, fe, msg)
}

// refuseLocked answers a bad request with st and counts it.
func (c *sconn) refuseLocked(slot int, h *Header, st uint32) {
	c.s.st.badReq.Add(1)
	c.repostLocked(slot)
	c.answerLocked(h, st, 0, nil, nil)
}

// validateIO: a read or write carries the I/O marker and a length.
func validateIO(_ *sconn, h Header, _ []byte) uint32 {
	if h.Marker != IOMarker || h.Length == 0 {
		return StatusInvalidParameter
	}
	return StatusSuccess
}

// validateWrite: a write is an I/O request, and the export is writable
// (ACCESS_DENIED, counted, on a read-only one).
func validateWrite(c *sconn, h Header, msg []byte) uint32 {
	if st := validateIO(c, h, msg); st != StatusSuccess {
		return st
	}
	if c.s.exp.ReadOnly() {
		c.s.st.readOnly.Add(1)
		return StatusAccessDenied
	}
	return StatusSuccess
}

// validateRead: a read moves at most the window.
func validateRead(c *sconn, h Header, msg []byte) uint32 {
	if st := validateIO(c, h, msg); st != StatusSuccess {
		return st
	}
	if int(h.Length) > c.window() {
		return StatusInvalidParameter
	}
	return StatusSuccess
}

// validateInterrupt: INTERRUPT carries both control flags, and at most one
// is outstanding.
func validateInterrupt(c *sconn, h Header, _ []byte) uint32 {
	if h.Flags&(FlagInterrupt|FlagControl) != FlagInterrupt|FlagControl || c.intrPending {
		return StatusInvalidParameter
	}
	return StatusSuccess
}

// closeFid marks the Fid closed; the file stays open until its last request
// under way finishes.
func (c *sconn) closeFid(slot int, h Header, fe *fidEntry, _ []byte) {
	c.repostLocked(slot)
	fe.closed = true
	if fe.busy == 0 {
		c.s.unref(fe.f)
	}
	c.answerLocked(&h, StatusSuccess, 0, nil, nil)
}

// cancel cancels the Fid's requests, or the one its Offset names
// (cancelLocked).
func (c *sconn) cancel(slot int, h Header, _ *fidEntry, _ []byte) {
	c.repostLocked(slot)
	c.cancelLocked(h.Fid, h.Offset)
	c.answerLocked(&h, StatusSuccess, 0, nil, nil)
}

// interrupt answers at once when a status block was written since the last
// answer, else holds the request for the next one (answerLocked).
func (c *sconn) interrupt(slot int, h Header, _ *fidEntry, _ []byte) {
	c.repostLocked(slot)
	if c.completedIO {
		c.completedIO = false
		c.answerLocked(&h, StatusSuccess, 0, nil, nil)
		return
	}
	c.intrPending, c.intrCookie, c.intrTid = true, h.Cookie, h.Tid
}

// orderLocked checks what binds a request to its place on the connection:
// its Sequence is the next one, its Tid is not that of a request still
// outstanding, and the message is no longer than the client said it would
// send (its MaxSendBufferSize). The QP delivers messages reliably and in
// order, so a failure is a client that lies or has lost track of its own
// requests: its answers could not be matched, and the connection ends
// (counted). false: the connection is ending.
func (c *sconn) orderLocked(h *Header, n int) bool {
	var err error
	switch _, dup := c.tids[h.Tid]; {
	case h.Sequence != c.nextSeq:
		c.s.st.seqErr.Add(1)
		err = fmt.Errorf("lwio: request Sequence %d, want %d", h.Sequence, c.nextSeq)
	case dup:
		c.s.st.tidReuse.Add(1)
		err = fmt.Errorf("lwio: Tid %#x reused while outstanding", h.Tid)
	case n > int(c.peer.MaxSendBufferSize):
		err = fmt.Errorf("lwio: a message of %d bytes, the client's MaxSendBufferSize is %d", n, c.peer.MaxSendBufferSize)
	}
	if err != nil {
		c.s.st.protoErr.Add(1)
		c.failLocked(err)
		return false
	}
	c.nextSeq++
	c.tids[h.Tid] = struct{}{}
	return true
}

// register turns a resume key and the session id into a Fid.
func (c *sconn) register(slot int, h Header, _ *fidEntry, msg []byte) {
	st, info := c.registerLocked(msg)
	c.repostLocked(slot)
	c.answerLocked(&h, st, info, nil, nil)
}

func (c *sconn) registerLocked(msg []byte) (uint32, uint32) {
	var p FidParams
	if p.Decode(msg[HeaderSize:]) != nil {
		c.s.st.badReq.Add(1)
		return StatusInvalidParameter, 0
	}
	if p.SessionID != c.sessionID {
		c.s.st.badReq.Add(1)
		return StatusAccessDenied, 0
	}
	l := c.sess.logon
	l.mu.Lock()
	f := l.open[p.ResumeKey.ResumeKey]
	if f != nil && (p.ResumeKey.Timestamp != l.ts || p.ResumeKey.Pid != c.s.pid) {
		f = nil
	}
	if f != nil {
		f.mu.Lock()
		f.refs++
		f.mu.Unlock()
	}
	l.mu.Unlock()
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
		if i >= c.s.cfg.MaxFiles {
			continue
		}
		if e := c.fids[i]; e == nil || (e.closed && e.busy == 0) {
			c.fids[i] = &fidEntry{fid: uint16(i + 1), f: f, flags: p.FlagsAndAttributes}
			if p.FlagsAndAttributes&FileNoIntermediate != 0 {
				f.enableDirect()
			}
			return StatusSuccess, uint32(i + 1)
		}
	}
	c.s.unref(f)
	c.s.st.fileLimit.Add(1)
	return StatusInsufficientRes, 0
}

func (c *sconn) fidLocked(fid uint16) *fidEntry {
	if fid == 0 || int(fid) > len(c.fids) {
		return nil
	}
	return c.fids[fid-1]
}

// ioRequest queues a read or write for a worker; the table checked its
// Fid, marker and length.
func (c *sconn) ioRequest(slot int, h Header, fe *fidEntry, msg []byte) {
	r := c.newReqLocked()
	r.h, r.fe = h, fe
	switch h.Opcode {
	case OpRead:
		c.repostLocked(slot)
	case OpVecRead:
		regs, ok := c.regions(&h, msg)
		if !ok {
			c.refuseLocked(slot, &h, StatusInvalidParameter)
			return
		}
		r.regions = regs
		c.repostLocked(slot)
	case OpWrite, OpVecWrite:
		data := msg[HeaderSize:]
		collapsed := h.Opcode == OpVecWrite && h.Flags&FlagCollapseIO != 0
		if int(h.Length) > c.s.cfg.MaxRecvBuffer && !collapsed {
			// More than the receive buffer could have held: the source
			// terminates the connection. A collapsed write's Length is
			// the span its one page covers, not what was sent: only
			// the page must fit, and a longer one never arrives (the
			// RDMA layer refuses it).
			c.s.st.protoErr.Add(1)
			c.failLocked(errors.New("lwio: write beyond MaxRecvBufferSize"))
			return
		}
		if !collapsed {
			if len(data) != int(h.Length) || h.Flags&FlagCollapseIO != 0 ||
				(h.Opcode == OpVecWrite && (h.PageSize == 0 || int(h.NumPages)*int(h.PageSize) < int(h.Length))) {
				c.refuseLocked(slot, &h, StatusInvalidParameter)
				return
			}
		} else if !c.collapseOK(&h, fe, len(data)) {
			c.refuseLocked(slot, &h, StatusInvalidParameter)
			return
		}
		r.slot, r.data = slot, data
	}
	fe.busy++
	c.dispatchLocked(r)
}

// newReqLocked is a request from the connection's free list, or a new one.
func (c *sconn) newReqLocked() *sreq {
	if n := len(c.reqFree); n > 0 {
		r := c.reqFree[n-1]
		c.reqFree[n-1] = nil
		c.reqFree = c.reqFree[:n-1]
		return r
	}
	return &sreq{slot: -1}
}

// freeReqLocked takes back a finished request: nothing refers to it any
// more (it left the queue and the active list, and its work requests were
// copied into the send queue). The free list holds at most the credits'
// worth.
func (c *sconn) freeReqLocked(r *sreq) {
	if len(c.reqFree) >= c.s.cfg.MaxCredits+creditSlack {
		return
	}
	*r = sreq{slot: -1}
	c.reqFree = append(c.reqFree, r)
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
	if n == 0 || n > c.maxRegions() || ps == 0 || len(msg) != HeaderSize+n*RegionSize || int(h.Length) > c.window() {
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
