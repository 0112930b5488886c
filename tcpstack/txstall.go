package tcpstack

import (
	"fmt"

	"github.com/emunic/emunic/rings"
)

// Transmit NO_RESOURCES is back-pressure. The device refuses a transmit
// descriptor for want of room when the connection already has as many
// queued as the device's own limit allows (which may be lower than the
// MaxTxBuffers the host gave in the state block). The descriptors the host
// queued behind it are already in the transmit ring; the device refuses
// them too, and every later one, until the host queues a resume (a
// descriptor with Len 0 and no flags). The first refusal says where the
// hole starts (Seq: the device's send-queue end) and what the device has
// acknowledged (Ack). The host then:
//
//   - takes the refusals of what it had queued behind the hole as expected
//     (it knows how many there are);
//   - learns the device's limit: the descriptors the device held then, the
//     host's that end after Ack and no later than the hole;
//   - queues the resume, and the refused bytes again from the hole as the
//     device frees room (ACKs), never more descriptors than the limit;
//   - holds its writer meanwhile (the send buffer is the writer's limit as
//     ever) and the FIN behind the bytes.
//
// The connection lives: nothing is lost and the stream stays in order.

// txStall is a connection's refused-transmit state (DelegatedConn.mu).
type txStall struct {
	stale      int  // refusals still to come for descriptors queued behind the hole
	cap        int  // the device's limit, learned from a refusal (0: none learned)
	finIssued  bool // a FIN is queued (in the ring or taken)
	finPending bool // a FIN waits for the refused bytes to go again
}

// txLimit is how many descriptors the connection may have queued.
func (c *DelegatedConn) txLimit() int {
	if c.tx.cap > 0 {
		return min(c.tx.cap, c.o.cfg.MaxTxBuffers)
	}
	return c.o.cfg.MaxTxBuffers
}

// streamOff lifts a sequence number of the send stream to its stream
// offset, the one nearest the unacknowledged bytes.
func (c *DelegatedConn) streamOff(sq uint32) uint64 {
	return uint64(int64(c.sndHead) + int64(int32(sq-c.sndISS-uint32(c.sndHead))))
}

// txRefusedLocked takes the device's refusal of a transmit descriptor
// (ERROR alone, Aux = the status). NO_RESOURCES is back-pressure (above);
// any other status means the device will never take those bytes, and the
// connection fails with it. mu held.
func (c *DelegatedConn) txRefusedLocked(n *rings.Notification) {
	st := rings.Status(n.Aux)
	if st != rings.StatusNoResources {
		c.fail(fmt.Errorf("offload unit refused a transmit descriptor of %d bytes: %v", n.Len, st))
		return
	}
	c.nv.txRefused++
	c.o.drv.stats.txRefused.Add(1)
	if c.tx.stale > 0 {
		c.tx.stale-- // queued behind a hole the host already knows
		return
	}
	if c.stateErr != nil || c.released {
		return
	}
	at := c.streamOff(n.Seq)
	k := 0 // the first descriptor past the hole
	for k < len(c.txEnds) && c.txEnds[k] <= at {
		k++
	}
	fin := n.Len == 0
	// The hole is at a descriptor's start, within what was queued: the
	// refused descriptor is txEnds[k] (or the FIN, after them all).
	start := c.sndHead
	if k > 0 {
		start = c.txEnds[k-1]
	}
	if at < c.sndHead || at > c.txQueued || (k < len(c.txEnds) && at != start && k > 0) ||
		(fin && (k != len(c.txEnds) || !c.tx.finIssued)) || (!fin && k == len(c.txEnds)) {
		why := fmt.Sprintf("transmit refusal at %d, queued [%d, %d)", n.Seq, c.sndISS+uint32(c.sndHead), c.sndISS+uint32(c.txQueued))
		c.deviceErrorLocked(&c.o.drv.stats.ntfImpossible, why)
		c.fail(fmt.Errorf("offload unit refused a transmit descriptor it cannot have had: %s", why))
		return
	}
	c.tx.stale = len(c.txEnds) - k
	if !fin {
		c.tx.stale-- // this one
	}
	if c.tx.finIssued {
		// The FIN was queued behind the data: refused (now, or later).
		if !fin {
			c.tx.stale++
		}
		c.tx.finIssued, c.tx.finPending = false, true
	}
	acked := c.streamOff(n.Ack)
	held := 0
	for _, end := range c.txEnds[:k] {
		if end > acked {
			held++
		}
	}
	c.tx.cap = max(held, 1)
	c.txEnds, c.txTimes = c.txEnds[:k], c.txTimes[:k]
	c.txQueued = at
	// The resume goes behind everything the device will refuse; the
	// refused bytes follow it as room frees.
	c.o.drv.sendDelegatedAsync(rings.Tx{Conn: c.idx})
	c.resendLocked()
}

// resendLocked queues the refused bytes again, from txQueued, as far as
// the learned limit allows, then the FIN if one waits. It never waits (a
// full transmit ring keeps them in the driver's backlog, in order). It
// reports whether the writer may go on. mu held.
func (c *DelegatedConn) resendLocked() bool {
	if c.stateErr != nil || c.released {
		return false
	}
	for c.txQueued < c.sndTail && len(c.txEnds) < c.txLimit() {
		var ch *sndChunk
		for i := range c.snd {
			if s := &c.snd[i]; s.start <= c.txQueued && c.txQueued < s.start+uint64(len(s.mem)) {
				ch = s
				break
			}
		}
		if ch == nil {
			return false // cannot happen: unacknowledged bytes are in a chunk
		}
		off := c.txQueued - ch.start
		k := min(uint64(len(ch.mem))-off, c.sndTail-c.txQueued, uint64(c.o.cfg.MaxTxDescBytes))
		c.o.drv.sendDelegatedAsync(rings.Tx{Conn: c.idx, Addr: ch.addr + rings.Addr(off), Len: uint32(k)})
		c.txQueued += k
		c.txEnds = append(c.txEnds, c.txQueued)
		c.txTimes = append(c.txTimes, c.o.drv.nanos())
	}
	if c.txQueued != c.sndTail {
		return false
	}
	if c.tx.finPending {
		c.tx.finPending, c.tx.finIssued = false, true
		c.o.drv.sendDelegatedAsync(rings.Tx{Conn: c.idx, Flags: rings.TxFin})
	}
	return true
}
