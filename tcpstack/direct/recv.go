package direct

// The receive side of a connection: Read, the sink side of the
// rendezvous (RDMA Reads of a source's region, sinks registered and
// advertised on request), and the sink chunks Read frees.

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// userSink is the buffer of a Read blocked on the conn when it is
// registered memory (Alloc) of at least Threshold bytes: the peer's next
// large send may land in it directly.
type userSink struct {
	p    []byte
	addr rings.Addr
	lmr  *verbs.MR // its local registration (RDMA Read rendezvous), nil if none
	// used is the bytes of p given to transfers as their sink, pending
	// those whose WR_DONE has not come: the Read waits for them.
	used, pending int
}

// userSinkLocked makes the buffer p (registered memory at addr) of a
// blocked Read the sink of the peer's next transfers: registered through
// the registration cache for local access (an RDMA Read places into it;
// the lock is released for a miss), and announced with SINK_WAIT when
// this side takes RDMA Write.
func (c *Conn) userSinkLocked(p []byte, addr rings.Addr) *userSink {
	us := &userSink{p: p, addr: addr}
	if c.sw.cacheCB && c.myCaps&CapRead != 0 {
		c.mu.Unlock()
		mr, err := c.sw.cache.Get(c.sw.pd, addr, len(p), verbs.AccessLocalWrite)
		c.mu.Lock()
		if err == nil {
			us.lmr = mr
		}
	}
	c.usink = us
	if c.myCaps&CapWrite != 0 {
		c.queueLocked(ctlItem{m: Msg{Type: TypeSinkWait, Len: uint32(min(len(p), maxTransfer)), ID: c.dataRecv}, src: -1})
	}
	c.startSinksLocked()
	c.flushLocked()
	return us
}

// dropUserSinkLocked ends a Read's user sink.
func (c *Conn) dropUserSinkLocked(us *userSink) {
	if c.usink == us {
		c.usink = nil
	}
	if us.lmr != nil {
		_ = c.sw.cache.Put(us.lmr)
		us.lmr = nil
	}
}

// Read implements net.Conn. A Read into registered memory (Alloc) of at
// least Threshold bytes with nothing to read tells the peer (SINK_WAIT),
// and the peer's next large sends, up to the Read's length, are
// RDMA-written into the Read's buffer: no copy. Once part of the buffer is
// advertised the Read waits for every transfer given a part, whatever its
// deadline (the peer may write into it until their WR_DONE); a failed or
// closed conn ends the wait.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var us *userSink
	for {
		if c.closed || c.closing {
			return 0, c.opErr("read", net.ErrClosed)
		}
		claimed := us != nil && us.pending > 0
		if c.rdl.passed() && !claimed {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if len(c.rq) > 0 && c.rq[0].ready && !claimed {
			if len(p) == 0 {
				return 0, nil
			}
			return c.readLocked(p), nil
		}
		if c.finRecv && len(c.rq) == 0 {
			return 0, io.EOF
		}
		if c.err != nil {
			return 0, c.opErr("read", c.err)
		}
		if us == nil && c.usink == nil && len(c.rq) == 0 && len(p) >= c.cfg.Threshold && c.myCaps != 0 {
			if addr, ok := c.sw.registered(p); ok {
				us = c.userSinkLocked(p, addr)
				defer c.dropUserSinkLocked(us)
			}
		}
		if claimed {
			c.cond.Wait()
		} else if err := c.waitLocked(&c.rdl, false); err != nil && !(us != nil && us.pending > 0) {
			return 0, c.opErr("read", err)
		}
	}
}

// readLocked copies ready bytes into p (partial reads take what fits). A
// read stops at the urgent mark.
func (c *Conn) readLocked(p []byte) int {
	if c.markSet && c.readBytes < c.mark {
		p = p[:min(uint64(len(p)), c.mark-c.readBytes)]
	}
	n := 0
	for n < len(p) && len(c.rq) > 0 && c.rq[0].ready {
		s := &c.rq[0]
		k := min(len(p)-n, s.n-s.off)
		if !s.rdma {
			// Inline bytes, from the ring.
			c.countCopy(k)
			for k > 0 {
				i := c.ihead
				m := copy(p[n:n+min(k, len(c.ibuf)-i)], c.ibuf[i:])
				c.ihead = (c.ihead + m) % len(c.ibuf)
				c.ilen -= m
				n += m
				k -= m
				s.off += m
			}
		} else {
			if src := s.data[s.off:]; &src[0] != &p[n] {
				copy(p[n:n+k], src)
				c.countCopy(k)
			} // else the peer wrote them into p itself
			n += k
			s.off += k
		}
		if s.off < s.n {
			break
		}
		// The item's bytes are all read: the last item of a message gives
		// its buffer's credit back, and a sink chunk is free again.
		sink, credit := s.sink, s.credit
		c.rq = popFront(c.rq)
		if credit {
			c.cs.consumed()
		}
		if sink >= 0 {
			c.sinkFreeLocked(sink)
		}
	}
	c.readBytes += uint64(n)
	if len(c.urgHeld) > 0 {
		c.passedMarksLocked()
	}
	c.flushLocked()
	c.cond.Broadcast()
	return n
}

func (c *Conn) sinkFreeLocked(i int) {
	ch := &c.sink.chunks[i]
	ch.busy, ch.state = false, 0
	c.sink.free = append(c.sink.free, i)
	c.startSinksLocked()
}

// srcAvailLocked takes a SRC_AVAIL: its first part is stream bytes at
// once, the rest an item that waits for a sink chunk. IDs go 1, 2, 3...:
// a reused or skipped ID is refused.
func (c *Conn) srcAvailLocked(m *Msg, payload []byte) error {
	rest := int(m.Total - m.Len)
	switch {
	case m.ID != c.rxID+1:
		return fmt.Errorf("SRC_AVAIL with transfer ID %d, expected %d", m.ID, c.rxID+1)
	case c.sink == nil:
		return fmt.Errorf("SRC_AVAIL to a side that offered no sink")
	case rest > c.cfg.ChunkSize:
		return fmt.Errorf("SRC_AVAIL of %d bytes by RDMA, more than our %d", rest, c.cfg.ChunkSize)
	case m.Flags&FlagSinkReq != 0 && c.myCaps&CapWrite == 0:
		return fmt.Errorf("SRC_AVAIL asking for a sink of a side without RDMA Write")
	case m.Flags&FlagSinkReq == 0 && c.myCaps&CapRead == 0:
		return fmt.Errorf("SRC_AVAIL for RDMA Read to a side without RDMA Read")
	}
	c.rxID = m.ID
	if len(payload) > 0 {
		c.inlineLocked(payload, false)
	}
	c.recvBytes += uint64(rest)
	s := rseg{n: rest, sink: -1, srcID: m.ID, credit: true, rdma: true}
	if m.Flags&FlagSinkReq != 0 {
		s.write = true
	} else {
		s.srcTO, s.stag = m.TO, m.STag
	}
	c.rq = append(c.rq, s)
	c.startSinksLocked()
	return nil
}

// inlineLocked appends inline stream bytes to the ring and the stream.
func (c *Conn) inlineLocked(payload []byte, credit bool) {
	t := (c.ihead + c.ilen) % len(c.ibuf)
	k := copy(c.ibuf[t:], payload)
	copy(c.ibuf, payload[k:])
	c.countCopy(len(payload))
	c.ilen += len(payload)
	c.recvBytes += uint64(len(payload))
	c.rq = append(c.rq, rseg{n: len(payload), ready: true, sink: -1, credit: credit})
}

// startSinksLocked finds a sink for each RDMA item waiting, in order. A
// Write rendezvous that is the head of the stream while a Read is blocked
// on a registered buffer large enough gets that buffer (zero copy). The
// others get free sink chunks: RDMA Read rendezvous posts the Read at once
// (the data is pulled as soon as it is announced, not when the application
// reads, so the source gets its memory back early); RDMA Write rendezvous
// registers the sink for remote write for this transfer
// (WSPRegisterRdmaMemory, by fast registration) and advertises it with
// SINK_AVAIL.
func (c *Conn) startSinksLocked() {
	for i := range c.rq {
		s := &c.rq[i]
		if s.ready || !s.rdma || s.sunk {
			continue
		}
		if c.err != nil {
			return
		}
		if us := c.usink; us != nil && s.n <= len(us.p)-us.used && c.userRunLocked(i) && (s.write || us.lmr != nil) {
			at := us.used
			s.user, s.sunk, s.data = true, true, us.p[at:at+s.n]
			us.used += s.n
			us.pending++
			c.zcRecvs++
			if s.write {
				s.sinking = true
				c.regSinkLocked(s, us.addr+rings.Addr(at), s.n)
				continue
			}
			// RDMA Read straight into the Read's buffer.
			w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: wrRead | c.gen | wrUserRead | uint64(s.srcID&^wrUserRead),
				RemoteAddr: s.srcTO, RKey: s.stag, NumSGE: 1}
			w.SGL[0] = us.lmr.SGE(int(us.addr-us.lmr.Addr)+at, s.n)
			if !c.postReadLocked(&w, s) {
				return
			}
			continue
		}
		if len(c.sink.free) == 0 {
			return
		}
		ci := c.sink.free[len(c.sink.free)-1]
		c.sink.free = c.sink.free[:len(c.sink.free)-1]
		ch := &c.sink.chunks[ci]
		ch.busy, ch.state, ch.n, ch.id = true, sinkBusy, s.n, s.srcID
		s.sink, s.sunk, s.data = ci, true, c.sink.mem[ch.off:ch.off+s.n]
		if s.write {
			s.sinking = true
			c.regSinkLocked(s, c.sink.buf.Addr+rings.Addr(ch.off), s.n)
			continue
		}
		w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: wrRead | c.gen | uint64(ci),
			RemoteAddr: s.srcTO, RKey: s.stag, NumSGE: 1}
		w.SGL[0] = c.sink.mr.SGE(ch.off+int(c.sink.buf.Addr-c.sink.mr.Addr), s.n)
		if !c.postReadLocked(&w, s) {
			return
		}
	}
}

// postReadLocked posts the RDMA Read of transfer s; false if the conn
// failed. When a credit and a send slot allow (and no control message
// waits, which it would overtake) the RD_DONE goes in the same doorbell,
// fenced behind the Read; else it is queued when the Read completes.
func (c *Conn) postReadLocked(w *rings.SendWR, s *rseg) bool {
	c.readsOut++
	if len(c.ctlQ) == 0 && len(c.free) > 0 && c.cs.peerPool != 0 && c.cs.canSend(classCtl) {
		s.doneSent = true
		return c.postLocked(ctlItem{m: Msg{Type: TypeRdDone, ID: s.srcID, Len: uint32(s.n)}, inv: s.stag, src: -1, rd: w}, nil) == nil
	}
	if err := c.qp.PostSend(w); err != nil {
		c.failLocked(fmt.Errorf("%w: post RDMA Read: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
		return false
	}
	return true
}

// userRunLocked says whether every item before rq[i] is a transfer into
// the blocked Read's buffer: rq[i]'s bytes then follow theirs in it.
func (c *Conn) userRunLocked(i int) bool {
	for j := range i {
		if !c.rq[j].user {
			return false
		}
	}
	return true
}

// regSinkLocked registers the n bytes at addr for remote write as the
// sink of transfer id, for this transfer, and queues the SINK_AVAIL that
// advertises it: the REG_MR of an STag of the pool goes in the same
// doorbell as the message. With no STag free, one is allocated on a
// goroutine (a device command must not hold up the poller every conn of
// the host shares), and the SINK_AVAIL is queued then.
func (c *Conn) regSinkLocked(s *rseg, addr rings.Addr, n int) {
	if f := c.sw.takeFast(); f != nil {
		c.sinkAvailQueueLocked(s, f, addr, n)
		return
	}
	id := s.srcID
	c.deregs.Add(1)
	go func() {
		defer c.deregs.Done()
		f, err := c.sw.allocFast()
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.failLocked(fmt.Errorf("%w: the sink of transfer %d: %v", ErrNoBuffers, id, err), nil)
			return
		}
		s := c.sinkingLocked(id)
		if c.err != nil || c.closed || s == nil || s.rmr != nil {
			c.sw.putFast(f)
			return
		}
		c.sinkAvailQueueLocked(s, f, addr, n)
		c.flushLocked()
	}()
}

// sinkAvailQueueLocked queues transfer s's SINK_AVAIL, with its sink's
// registration under STag f.
func (c *Conn) sinkAvailQueueLocked(s *rseg, f *verbs.FastMR, addr rings.Addr, n int) {
	s.rmr = f
	reg := regItem{f: f, addr: addr, n: n, access: verbs.AccessLocalWrite | verbs.AccessRemoteWrite}
	c.queueLocked(ctlItem{m: Msg{Type: TypeSinkAvail, Len: uint32(n), ID: s.srcID}, src: -1, reg: reg})
}

// sinkingLocked is the Write rendezvous item of transfer id whose sink is
// being registered or advertised (nil if none).
func (c *Conn) sinkingLocked(id uint32) *rseg {
	for i := range c.rq {
		if s := &c.rq[i]; s.sinking && !s.ready && s.srcID == id {
			return s
		}
	}
	return nil
}

// wrDoneLocked takes a WR_DONE: the source wrote the rest of transfer
// m.ID into the sink it was advertised, and the message invalidated the
// sink's STag (wc says which it did); the region is deregistered and the
// bytes are ready.
func (c *Conn) wrDoneLocked(m *Msg, wc *rings.Completion) error {
	s := c.sinkingLocked(m.ID)
	if s == nil || s.rmr == nil {
		return fmt.Errorf("WR_DONE of transfer %d, which has no sink advertised", m.ID)
	}
	if int(m.Len) != s.n {
		return fmt.Errorf("WR_DONE of %d bytes for transfer %d of %d", m.Len, m.ID, s.n)
	}
	if !c.invalidatedLocked(s.rmr, wc) {
		return fmt.Errorf("WR_DONE of transfer %d did not invalidate the sink's STag %#x", m.ID, s.rmr.STag())
	}
	s.rmr, s.sinking, s.ready = nil, false, true
	if s.user && c.usink != nil {
		c.usink.pending--
	}
	return nil
}

// readDoneLocked takes the completion of the RDMA Read into sink chunk
// ci, or (user) into the blocked Read's buffer for the transfer whose ID's
// low 31 bits are ci: the bytes are ready, and RD_DONE (a Send with
// Invalidate of the source's STag) is queued.
func (c *Conn) readDoneLocked(ci int, user bool) {
	for i := range c.rq {
		s := &c.rq[i]
		mine := !user && s.sink == ci || user && s.user && uint64(s.srcID&^wrUserRead) == uint64(ci)
		if mine && !s.ready && !s.write {
			if user && c.usink != nil {
				c.usink.pending--
			}
			s.ready = true
			if !s.doneSent {
				c.queueLocked(ctlItem{m: Msg{Type: TypeRdDone, ID: s.srcID, Len: uint32(s.n)}, inv: s.stag, src: -1})
			}
			return
		}
	}
}
