package delegation

import (
	"github.com/emunic/emunic/rings"
)

// The receive side's data path, after conn.input accepted a segment:
// out-of-order segments queued and drained, the FIN, and in-order bytes
// delivered into the host's user buffers (or legacy uploads).

// queueOOO holds an out-of-order segment.
func (c *conn) queueOOO(start seq, data []byte, fin, push bool) {
	e := c.e
	if fin && len(data) == 0 {
		if !c.oooFin {
			c.oooFin, c.oooFinSeq = true, start
		}
		return
	}
	if len(data) == 0 {
		return
	}
	limit := c.rcvNxt.Add(e.cfg.OOOLimit)
	if end := start.Add(uint32(len(data))); end.GreaterThan(limit) {
		keep := uint32(0)
		if limit.GreaterThan(start) {
			keep = limit.Sub(start)
		}
		e.ctr.OOOBytesDropped += uint64(uint32(len(data)) - keep)
		data = data[:keep]
		fin = false
		if keep == 0 {
			return
		}
	}
	end := start.Add(uint32(len(data)))
	if !c.ooo.canAdd(start, end) {
		e.ctr.OOODropRanges++
		return
	}
	n := c.ooo.write(&e.pool, start, data)
	if n < len(data) {
		e.ctr.OOOBytesDropped += uint64(len(data) - n)
		fin = false
		if n == 0 {
			return
		}
		end = start.Add(uint32(n))
	}
	e.ctr.OOOSegments++
	c.ooo.add(start, end, push)
	if fin {
		c.oooFin, c.oooFinSeq = true, end
	}
}

// drainOOO delivers held data that RCV.NXT has reached.
func (c *conn) drainOOO() {
	e := c.e
	for c.ooo.n > 0 && c.ooo.ranges[0].start.LessThanEq(c.rcvNxt) {
		r := c.ooo.ranges[0]
		for c.rcvNxt.LessThan(r.end) {
			chunk := c.ooo.read(&e.pool, c.rcvNxt, r.end.Sub(c.rcvNxt))
			placed := c.deliver(chunk, false)
			e.ctr.OOOBytesRestored += uint64(placed)
			if placed < len(chunk) {
				c.ooo.trimBelow(c.rcvNxt)
				return
			}
		}
		c.ooo.trimBelow(c.rcvNxt)
		if r.push {
			c.completeUserBuf()
		}
	}
	c.ooo.trimBelow(c.rcvNxt)
	c.ooo.releaseBelow(&e.pool, c.rcvNxt, c.rcvNxt)
}

// retryOOO delivers held data that became in-order earlier but found no
// buffer then (called when buffers may have appeared). It ACKs progress at
// once, as for a filled hole.
func (c *conn) retryOOO(now int64) {
	if c.ooo.n == 0 || c.ooo.ranges[0].start.GreaterThan(c.rcvNxt) || c.finRcvd {
		return
	}
	old := c.rcvNxt
	c.drainOOO()
	if c.oooFin && c.rcvNxt == c.oooFinSeq {
		c.rcvFin(now)
	}
	if c.rcvNxt != old && c.state != rings.StateClosed {
		c.sendAck(now)
	}
}

// rcvFin: RCV.NXT reached the peer's FIN.
func (c *conn) rcvFin(now int64) {
	c.completeUserBuf()
	c.rcvNxt = c.rcvNxt.Add(1)
	c.finRcvd = true
	c.oooFin = false
	c.ooo.reset(&c.e.pool)
	c.ackNow = true
	c.checkSeqThreshold()
	c.notify(rings.NtfFin, c.rcvNxt, 0, 0)
	switch c.state {
	case rings.StateEstablished:
		c.state = rings.StateCloseWait
	case rings.StateFinWait1:
		c.state = rings.StateClosing
	case rings.StateFinWait2:
		c.sendAck(now)
		c.enterTimeWait(now)
	}
}

// deliver places in-order payload at RCV.NXT: into posted user buffers, else
// into legacy buffers, or on a ULP connection to the ULP. It returns the
// bytes placed (fewer when buffers or notification room ran out) and
// advances RCV.NXT over them.
func (c *conn) deliver(data []byte, push bool) int {
	e := c.e
	placed := 0
	old := c.rcvNxt
	if c.ulp.u != nil {
		placed = c.deliverULP(data)
		c.rcvNxt = c.rcvNxt.Add(uint32(placed))
	}
	for placed < len(data) && c.ulp.u == nil {
		rest := data[placed:]
		if !c.ntfRoom() {
			// Every placement may end in a notification (buffer full,
			// PSH, FIN): keep the reserve for control events.
			e.ctr.DropBackpressure++
			break
		}
		if c.uqCount > 0 {
			ub := &c.userq[c.uqHead]
			n := ub.len - ub.filled
			if n > uint32(len(rest)) {
				n = uint32(len(rest))
			}
			if err := e.dma.WriteAt(rest[:n], ub.addr+rings.Addr(ub.filled)); err != nil {
				// The buffer stopped being host memory: hand it back
				// with an error and go on with the next one.
				e.ctr.DMAErrors++
				if ub.filled == 0 {
					ub.first = c.rcvNxt
				}
				c.notify(rings.NtfUserBufDone|rings.NtfError, ub.first, ub.filled, ub.id)
				c.uqHead = (c.uqHead + 1) % len(c.userq)
				c.uqCount--
				continue
			}
			if ub.filled == 0 {
				ub.first = c.rcvNxt
			}
			ub.filled += n
			c.rcvNxt = c.rcvNxt.Add(n)
			placed += int(n)
			if ub.filled == ub.len {
				c.completeUserBuf()
			}
			continue
		}
		id, addr, capacity, ok := e.env.TakeLegacyBuffer()
		if !ok || capacity == 0 {
			e.ctr.DropNoBuffer++
			if !c.userBufReqSent {
				c.userBufReqSent = true
				c.notify(rings.NtfUserBufReq, c.rcvNxt, 0, 0)
			}
			break
		}
		n := capacity
		if n > uint32(len(rest)) {
			n = uint32(len(rest))
		}
		if err := e.dma.WriteAt(rest[:n], addr); err != nil {
			// The host posted a buffer outside its memory: report it
			// as an empty upload so the buffer is not lost.
			e.ctr.DMAErrors++
			c.notify(rings.NtfLegacyUpload|rings.NtfError, c.rcvNxt, 0, id)
			break
		}
		flags := rings.NtfLegacyUpload
		if !c.userBufReqSent {
			c.userBufReqSent = true
			flags |= rings.NtfUserBufReq
		}
		e.ctr.LegacyUploads++
		c.legacyUncredited += n
		c.notify(flags, c.rcvNxt, n, id)
		c.rcvNxt = c.rcvNxt.Add(n)
		placed += int(n)
	}
	if placed > 0 {
		e.ctr.RxBytes += uint64(placed)
		c.st.bytesRecv += uint64(placed)
		if c.ooo.pages > 0 {
			c.ooo.trimBelow(c.rcvNxt)
			c.ooo.releaseBelow(&e.pool, old, c.rcvNxt)
		}
		c.checkSeqThreshold()
	}
	if push && placed == len(data) {
		c.completeUserBuf()
	}
	return placed
}

// completeUserBuf returns the current user buffer if it holds any data.
func (c *conn) completeUserBuf() {
	if c.uqCount == 0 {
		return
	}
	ub := &c.userq[c.uqHead]
	if ub.filled == 0 {
		return
	}
	c.e.ctr.UserBufsDone++
	c.notify(rings.NtfUserBufDone, ub.first, ub.filled, ub.id)
	c.uqHead = (c.uqHead + 1) % len(c.userq)
	c.uqCount--
}

// checkSeqThreshold raises NtfSeqThreshold once RCV.NXT reaches the armed
// threshold. The bytes up to RCV.NXT must then be the host's to read (it
// arms the threshold for a reader waiting for them), so a user buffer
// holding some of them completes first, as on PSH.
func (c *conn) checkSeqThreshold() {
	if c.seqArmed && c.rcvNxt.GreaterThanEq(c.seqThresh) {
		c.seqArmed = false
		c.completeUserBuf()
		c.notify(rings.NtfSeqThreshold, c.rcvNxt, 0, 0)
	}
}
