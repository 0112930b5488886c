package direct

// The receive side of a connection: Read, the sink chunks it frees and
// advertises, and the RDMA Reads that pull a source's chunks.

import (
	"fmt"
	"io"
	"net"
	"os"

	"github.com/emunic/emunic/rings"
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
		// The message's bytes are all read: its buffer's credit goes
		// back, and its sink chunk is free again.
		sink := s.sink
		c.rq = popFront(c.rq)
		c.cs.consumed()
		if sink >= 0 {
			c.sinkFreeLocked(sink)
		}
	}
	c.flushLocked()
	c.cond.Broadcast()
	return n
}

func (c *Conn) sinkFreeLocked(i int) {
	if c.rxMode == TransferWrite {
		c.advertiseLocked(i)
		return
	}
	c.sink.chunks[i].busy = false
	c.sink.free = append(c.sink.free, i)
	c.startReadsLocked()
}

// advertiseLocked queues SINK_AVAIL for sink chunk i.
func (c *Conn) advertiseLocked(i int) {
	ch := &c.sink.chunks[i]
	c.nextID++
	ch.id, ch.busy, ch.n = c.nextID, true, 0
	to := ch.mr.TO(int(c.sink.buf.Addr) + ch.off - int(ch.mr.Addr))
	c.ctlQ = append(c.ctlQ, Msg{Type: TypeSinkAvail, Len: uint32(c.cfg.ChunkSize), ID: ch.id, STag: ch.mr.RKey, TO: to})
}

// startReadsLocked posts RDMA Reads for SRC_AVAIL items in order while
// sink chunks are free: data is pulled as soon as it is announced, not when
// the application reads, so the source gets its memory back early.
func (c *Conn) startReadsLocked() {
	for i := range c.rq {
		s := &c.rq[i]
		if s.ready || s.sink >= 0 || s.stag == 0 {
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
		w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: wrRead | c.gen | uint64(ci),
			RemoteAddr: s.srcTO, RKey: s.stag, NumSGE: 1}
		w.SGL[0] = rings.SGE{Addr: ch.mr.TO(int(c.sink.buf.Addr) + ch.off - int(ch.mr.Addr)), Length: uint32(s.n), LKey: ch.mr.LKey}
		c.readsOut++
		if err := c.qp.PostSend(&w); err != nil {
			c.failLocked(fmt.Errorf("%w: post RDMA Read: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
			return
		}
	}
}
