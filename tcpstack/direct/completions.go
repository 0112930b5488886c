package direct

// A connection's completions, taken by the host switch's poller: sends
// finished, control messages received, RDMA transfers done, and the
// failures that end the connection.

import (
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/emunic/emunic/rings"
)

// handleLocked takes one completion of the conn's QP.
func (c *Conn) handleLocked(wc *rings.Completion) {
	if wc.WRID&wrGenMsk != c.gen {
		return // a completion of an earlier QP with this number
	}
	idx := int(wc.WRID & wrIdxMsk)
	if wc.Status != rings.WCSuccess {
		if c.closed {
			return
		}
		if wc.WRID&wrKind == wrRead {
			c.readsOut--
		}
		if wc.Status == rings.WCWRFlushErr {
			// The QP is in ERROR. The device may flush the receives
			// before it completes the work that failed, so the reason
			// waits for every outstanding RDMA Read (afterBatchLocked).
			c.flushed = true
			return
		}
		if wc.Status == rings.WCRemAccessErr || wc.Status == rings.WCLocProtErr || wc.Status == rings.WCRemInvRdReqErr || wc.Status == rings.WCLocAccessErr {
			c.failLocked(fmt.Errorf("%w: %v on %v (an advertised region is not there)", ErrPeerFailed, wc.Status, wc.Opcode), &c.sw.stats.remoteAccess)
			return
		}
		c.failLocked(fmt.Errorf("%w: %v", ErrPeerFailed, wc.Status), &c.sw.stats.peerFailures)
		return
	}
	switch wc.WRID & wrKind {
	case wrRecv:
		if idx >= c.nRecv {
			return
		}
		c.recvLocked(idx, wc)
	case wrSend:
		if idx >= c.nSend {
			return
		}
		if s := c.sends[idx].src; s >= 0 {
			c.sends[idx].src = -1
			c.releaseSrcLocked(s)
		}
		c.free = append(c.free, idx)
	case wrRead:
		user := wc.WRID&wrUserRead != 0
		if !user && (c.sink == nil || idx >= len(c.sink.chunks)) {
			return
		}
		c.readsOut--
		c.readDoneLocked(int(wc.WRID&wrIdxMsk&^wrUserRead), user)
	}
	c.cond.Broadcast()
}

// recvLocked takes the message in receive buffer i (completion wc) and
// re-posts the buffer.
func (c *Conn) recvLocked(i int, wc *rings.Completion) {
	n := int(wc.ByteLen)
	o := i * c.bufSize
	var m Msg
	payload, err := m.Decode(c.ctrlMem[o:o+min(n, c.bufSize)], c.maxIn)
	if err == nil && n > c.bufSize {
		err = fmt.Errorf("%w: %d bytes into a %d-byte buffer", ErrBadMessage, n, c.bufSize)
	}
	if err == nil && wc.Flags&rings.WCWithInv != 0 && m.Type != TypeRdDone && m.Type != TypeWrDone {
		// Only the completion messages end a region's life.
		err = fmt.Errorf("%w: %v as a Send with Invalidate of STag %#x", ErrBadMessage, m.Type, uint32(wc.ImmData))
	}
	if err != nil {
		c.failLocked(fmt.Errorf("%w: %v", ErrProtocol, err), &c.sw.stats.badMessages)
		return
	}
	if m.Type == TypeCredit && m.Credits == 0 {
		// Only the dialler's first message may grant nothing: the
		// credit-only slots are sized for messages that grant.
		if c.bareSeen {
			c.failLocked(fmt.Errorf("%w: a second CREDIT with no credits", ErrProtocol), &c.sw.stats.creditViolations)
			return
		}
		c.bareSeen = true
	}
	if !c.cs.granted(m.Credits) || !c.cs.received(m.Type.class()) {
		c.failLocked(fmt.Errorf("%w: %v beyond its credits (grant %d)", ErrProtocol, m.Type, m.Credits), &c.sw.stats.creditViolations)
		return
	}
	// A WR_DONE may follow the FIN: its bytes were announced before it.
	if c.finRecv && m.Type.class() == classData {
		c.failLocked(fmt.Errorf("%w: %v after FIN", ErrProtocol, m.Type), &c.sw.stats.badMessages)
		return
	}
	if m.Type.class() == classData {
		c.dataRecv++
	}
	switch m.Type {
	case TypeData:
		if m.Flags == FlagUrgent {
			c.urgentLocked(payload[0])
			break
		}
		if c.ilen+len(payload) > len(c.ibuf) {
			c.failLocked(fmt.Errorf("%w: inline data beyond the pool", ErrProtocol), &c.sw.stats.creditViolations)
			return
		}
		c.inlineLocked(payload, true)
	case TypeSrcAvail:
		if c.ilen+len(payload) > len(c.ibuf) {
			c.failLocked(fmt.Errorf("%w: inline data beyond the pool", ErrProtocol), &c.sw.stats.creditViolations)
			return
		}
		err = c.srcAvailLocked(&m, payload)
	case TypeRdDone:
		err = c.rdDoneLocked(&m, wc)
	case TypeSinkAvail:
		err = c.sinkAvailLocked(&m)
	case TypeWrDone:
		err = c.wrDoneLocked(&m, wc)
	case TypeSinkWait:
		// The peer's application waits in a read of registered memory:
		// this side's next large sends go into it (writeRendezvousLocked),
		// unless data this side sent crossed the hint.
		if m.ID == c.dataSent {
			c.peerWait = int(m.Len)
			c.cond.Broadcast()
		} else {
			c.sw.stats.staleHints.Add(1)
		}
	case TypeFin:
		c.finRecv = true
	}
	if err != nil {
		c.failLocked(fmt.Errorf("%w: %v", ErrProtocol, err), &c.sw.stats.badMessages)
		return
	}
	c.reposts = append(c.reposts, c.recvWR(i))
}

// afterBatchLocked re-posts the receive buffers a batch consumed, then
// sends what waits: credits are granted only for buffers posted again.
func (c *Conn) afterBatchLocked() {
	if c.flushed && c.err == nil && c.readsOut <= 0 && !c.flushSeen {
		c.flushSeen = true
		go c.failFlushed()
	}
	if len(c.reposts) > 0 && c.err == nil && !c.closed {
		// No doorbell: the device reads the receive queue when a
		// message arrives, and the peer sends into these buffers only
		// after the grant, which goes in a message posted after them.
		_, err := c.qp.PostRecvListQuiet(c.reposts)
		c.reposts = c.reposts[:0]
		if err != nil {
			c.failLocked(fmt.Errorf("%w: re-post receives: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
			return
		}
	}
	c.flushLocked()
}

// flushEventWait bounds how long a flushed conn waits for its QP's event
// (which travels on the notification ring, not the CQ) to tell why.
const flushEventWait = 200 * time.Millisecond

// failFlushed fails the conn whose QP was flushed, with the reason its QP
// event gives: a Terminate means a NIC refused an RDMA access or message on
// the stream (the peer wrote or read outside what it was given, or named a
// region it no longer has); otherwise the peer closed or reset it.
func (c *Conn) failFlushed() {
	expired := make(chan struct{})
	stop := c.sw.h.AfterFunc(flushEventWait, func() { close(expired) })
	select {
	case <-c.qp.Failed():
	case <-expired:
	}
	stop()
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.qp.LastEvent() == rings.QPEvTerminate {
		c.failLocked(fmt.Errorf("%w: the RDMA stream was terminated (%v): a NIC refused an RDMA access or message", ErrPeerFailed, c.qp.Err()), &c.sw.stats.remoteAccess)
		return
	}
	c.failLocked(fmt.Errorf("%w: the QP was flushed (the peer closed or reset the connection)", ErrPeerFailed), &c.sw.stats.peerFailures)
}

// failLocked makes err the conn's error (the first one counts) and tears
// the QP down so the peer sees it.
func (c *Conn) failLocked(err error, counter interface{ Add(uint64) uint64 }) {
	if c.err != nil || c.closed {
		return
	}
	if c.finRecv && c.finSent && errors.Is(err, ErrPeerFailed) && c.readsOut == 0 {
		// Both FINs went: the peer closing its QP is the end, not a
		// failure.
		c.err = net.ErrClosed
		c.cond.Broadcast()
		return
	}
	c.err = err
	if counter != nil {
		counter.Add(1)
	}
	c.cond.Broadcast()
	qp := c.qp
	go func() { _ = qp.Destroy() }()
}

// popFront removes q's first item and moves the rest to the front of its
// array, so that appends reuse the array: the conn's queues (received
// segments, control messages, advertised regions) are short, and popping
// by reslicing would make every append past the end allocate anew.
func popFront[T any](q []T) []T {
	n := copy(q, q[1:])
	var zero T
	q[n] = zero // no stale reference past the end
	return q[:n]
}
