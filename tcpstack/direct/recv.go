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

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return 0, c.opErr("read", net.ErrClosed)
		}
		if c.rdl.passed() {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if len(c.rq) > 0 && c.rq[0].ready {
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
		if err := c.waitLocked(&c.rdl, false); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// readLocked copies ready bytes into p (partial reads take what fits).
func (c *Conn) readLocked(p []byte) int {
	n := 0
	for n < len(p) && len(c.rq) > 0 && c.rq[0].ready {
		s := &c.rq[0]
		k := min(len(p)-n, s.n-s.off)
		c.countCopy(k)
		if s.sink < 0 {
			// Inline bytes, from the ring.
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
			copy(p[n:n+k], s.data[s.off:])
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
	s := rseg{n: rest, sink: -1, srcID: m.ID, credit: true}
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
	c.rq = append(c.rq, rseg{n: len(payload), ready: true, sink: -1, credit: credit})
}

// startSinksLocked gives free sink chunks to the RDMA items waiting, in
// order: RDMA Read rendezvous posts the Read at once (the data is pulled
// as soon as it is announced, not when the application reads, so the
// source gets its memory back early); RDMA Write rendezvous registers the
// chunk for remote write for this transfer (WSPRegisterRdmaMemory, off the
// poller) and advertises it with SINK_AVAIL.
func (c *Conn) startSinksLocked() {
	for i := range c.rq {
		s := &c.rq[i]
		if s.ready || s.sink >= 0 || s.srcID == 0 {
			continue
		}
		if len(c.sink.free) == 0 || c.err != nil {
			return
		}
		ci := c.sink.free[len(c.sink.free)-1]
		c.sink.free = c.sink.free[:len(c.sink.free)-1]
		ch := &c.sink.chunks[ci]
		ch.busy, ch.n, ch.id = true, s.n, s.srcID
		s.sink = ci
		if s.write {
			ch.state = sinkRegistering
			c.regSinkAsync(ci, s.n)
			continue
		}
		ch.state = sinkReading
		w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: wrRead | c.gen | uint64(ci),
			RemoteAddr: s.srcTO, RKey: s.stag, NumSGE: 1}
		w.SGL[0] = c.sink.mr.SGE(ch.off+int(c.sink.buf.Addr-c.sink.mr.Addr), s.n)
		c.readsOut++
		if err := c.qp.PostSend(&w); err != nil {
			c.failLocked(fmt.Errorf("%w: post RDMA Read: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
			return
		}
	}
}

// regSinkAsync registers sink chunk ci's first n bytes for remote write
// and queues the SINK_AVAIL, on a goroutine: the registration is a device
// command, and the poller serves every conn of the host.
func (c *Conn) regSinkAsync(ci, n int) {
	ch := &c.sink.chunks[ci]
	addr, id := c.sink.buf.Addr+rings.Addr(ch.off), ch.id
	c.deregs.Add(1)
	go func() {
		defer c.deregs.Done()
		mr, err := c.sw.v.RegMRAddr(c.sw.pd, addr, n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		c.mu.Lock()
		defer c.mu.Unlock()
		if err != nil {
			c.sw.stats.noBuffers.Add(1)
			c.failLocked(fmt.Errorf("%w: the sink of transfer %d: %v", ErrNoBuffers, id, err), nil)
			return
		}
		c.sw.stats.registrations.Add(1)
		if c.err != nil || c.closed || c.sink == nil || c.sink.chunks[ci].state != sinkRegistering || c.sink.chunks[ci].id != id {
			c.deregAsync(mr)
			return
		}
		ch := &c.sink.chunks[ci]
		ch.rmr, ch.state = mr, sinkAdvertised
		c.queueLocked(ctlItem{m: Msg{Type: TypeSinkAvail, Len: uint32(n), ID: id, STag: mr.RKey, TO: mr.TO(0)}, src: -1})
		c.flushLocked()
	}()
}

// wrDoneLocked takes a WR_DONE: the source wrote the rest of transfer
// m.ID into the sink it was advertised, and the message invalidated the
// sink's STag (wc says which it did); the region is deregistered and the
// bytes are ready.
func (c *Conn) wrDoneLocked(m *Msg, wc *rings.Completion) error {
	for i := range c.rq {
		s := &c.rq[i]
		if s.ready || !s.write || s.srcID != m.ID || s.sink < 0 {
			continue
		}
		ch := &c.sink.chunks[s.sink]
		if ch.state != sinkAdvertised {
			break
		}
		if int(m.Len) != s.n {
			return fmt.Errorf("WR_DONE of %d bytes for transfer %d of %d", m.Len, m.ID, s.n)
		}
		if wc.Flags&rings.WCWithInv == 0 || uint32(wc.ImmData) != ch.rmr.RKey {
			return fmt.Errorf("WR_DONE of transfer %d did not invalidate the sink's STag %#x", m.ID, ch.rmr.RKey)
		}
		c.deregAsync(ch.rmr)
		ch.rmr, ch.state = nil, sinkFull
		s.ready, s.data = true, c.sink.mem[ch.off:ch.off+s.n]
		return nil
	}
	return fmt.Errorf("WR_DONE of transfer %d, which has no sink advertised", m.ID)
}

// readDoneLocked takes the completion of the RDMA Read into sink chunk
// ci: the bytes are ready, and RD_DONE (a Send with Invalidate of the
// source's STag) is queued.
func (c *Conn) readDoneLocked(ci int) {
	for i := range c.rq {
		s := &c.rq[i]
		if s.sink == ci && !s.ready && !s.write {
			ch := &c.sink.chunks[ci]
			ch.state = sinkFull
			s.ready, s.data = true, c.sink.mem[ch.off:ch.off+s.n]
			c.queueLocked(ctlItem{m: Msg{Type: TypeRdDone, ID: s.srcID, Len: uint32(s.n)}, inv: s.stag, src: -1})
			return
		}
	}
}
