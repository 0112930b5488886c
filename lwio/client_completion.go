package lwio

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
)

// The client's completion loop: status responses, Immediate Data, the
// status blocks of polling requests, the server's credit messages, and
// the calls they complete.

// run takes every completion: sends, status responses, immediate data and,
// in polling mode, the status blocks of outstanding requests.
func (c *Client) run() {
	defer close(c.loopDone)
	wc := make([]rings.Completion, 64)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-c.done; cancel() }()
	idle := 0
	backoff := minPollBackoff
	for {
		n := c.cq.Poll(wc)
		progress := n > 0
		c.mu.Lock()
		for i := range n {
			c.handleLocked(&wc[i])
		}
		if c.scanLocked() {
			progress = true
		}
		// While a caller watches its own status block the loop does not
		// spin beside it: on a machine whose CPUs the NICs need, a second
		// poller only delays the one that will find the completion.
		watched := c.callerPolls > 0
		c.mu.Unlock()
		if progress {
			idle, backoff = 0, minPollBackoff
			continue
		}
		if idle++; idle < c.cfg.SpinPolls && !watched {
			runtime.Gosched()
			continue
		}
		c.mu.Lock()
		if c.err != nil {
			c.mu.Unlock()
			return
		}
		// A status block arrives by RDMA Write, which completes nothing
		// here: with a polling request outstanding the loop sleeps only
		// when an INTERRUPT will wake it. Without a credit for one (a
		// client holding a single credit, or one a CREDIT message holds)
		// it goes on polling the status blocks, sleeping a little longer
		// each time it finds none done, up to maxPollBackoff; any
		// completion (a send, a response, a delta credit) still wakes it.
		// So it does while a caller polls its own status block (spin):
		// an interrupt then would only cost the server a message.
		wctx, stop := ctx, func() bool { return false }
		if len(c.polling) > 0 && !c.intrOut && (c.callerPolls > 0 || !c.interruptLocked()) {
			var cancelW context.CancelFunc
			wctx, cancelW = context.WithCancel(ctx)
			stop = c.h.AfterFunc(backoff, cancelW)
			backoff = min(2*backoff, maxPollBackoff)
			c.st.pollBackoffs.Add(1)
		}
		c.asleep = true
		c.mu.Unlock()
		n, err := c.cq.PollWait(wctx, wc, false)
		stop()
		c.mu.Lock()
		c.asleep = false
		if err != nil {
			c.mu.Unlock()
			if ctx.Err() == nil && wctx.Err() != nil {
				// The backoff ran out: scan the status blocks again.
				continue
			}
			return
		}
		for i := range n {
			c.handleLocked(&wc[i])
		}
		c.scanLocked()
		c.mu.Unlock()
	}
}

// scanLocked completes the polling requests whose status block arrived.
func (c *Client) scanLocked() bool {
	done := false
	for i := 0; i < len(c.polling); {
		cl := c.polling[i]
		w := atomic.LoadUint64(c.iosbWord(cl.slot))
		if uint32(w>>32) == StatusPending {
			i++
			continue
		}
		c.polling[i] = c.polling[len(c.polling)-1]
		c.polling = c.polling[:len(c.polling)-1]
		cl.status, cl.info, cl.answered = uint32(w>>32), uint32(w), true
		c.st.polled.Add(1)
		c.maybeDoneLocked(cl)
		done = true
	}
	return done
}

// The polling client's backoff while it has no credit for INTERRUPT.
const (
	minPollBackoff = 20 * time.Microsecond
	maxPollBackoff = time.Millisecond
)

// interruptLocked sends INTERRUPT (the credit kept for it) so the server
// wakes the client at its next completion. false: no credit or slot was
// free, or the send failed; nothing will wake the client.
func (c *Client) interruptLocked() bool {
	if c.outstanding >= c.credits || len(c.freeSlots) == 0 {
		return false
	}
	cl := &Call{Op: OpInterrupt, c: c, internal: true}
	if c.postLocked(cl, func(_ *Call, h *Header, _ []byte) ([]rings.SGE, error) {
		h.Flags = FlagInterrupt | FlagControl
		h.Length = HeaderSize
		return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize)), nil
	}) != nil {
		return false
	}
	c.intrOut = true
	c.st.interrupts.Add(1)
	return true
}

func (c *Client) handleLocked(wc *rings.Completion) {
	if c.err != nil {
		return
	}
	if wc.Status != rings.WCSuccess {
		c.failLocked(fmt.Errorf("lwio: connection lost: %v", wc.Status))
		return
	}
	switch wc.Opcode {
	case rings.WCRecv:
		s := int(wc.WRID)
		var r StatusResponse
		if wc.ByteLen != StatusResponseSize || r.Decode(c.rmem[s*StatusResponseSize:(s+1)*StatusResponseSize]) != nil {
			c.failLocked(fmt.Errorf("lwio: server sent a message of %d bytes", wc.ByteLen))
			return
		}
		c.posted--
		c.response(&r)
	case rings.WCRecvRDMAWithImm:
		c.posted--
		c.repostLocked()
		cl := c.byCookie[c.cookieOfImm(uint32(wc.ImmData))]
		if cl == nil || cl.answered {
			c.failLocked(fmt.Errorf("lwio: immediate data %#x names no request", wc.ImmData))
			return
		}
		cl.status, cl.info, cl.answered = StatusSuccess, uint32(cl.length), true
		c.st.imm.Add(1)
		c.maybeDoneLocked(cl)
	}
}

// cookieOfImm finds the request whose ImmCookie (the low 32 bits of its
// cookie) is imm.
func (c *Client) cookieOfImm(imm uint32) uint64 {
	for k := range c.byCookie {
		if uint32(k) == imm {
			return k
		}
	}
	return 0
}

func (c *Client) repostLocked() {
	if err := c.postRecv(1); err != nil {
		c.failLocked(err)
	}
}

// response handles a status response or a delta credit message.
func (c *Client) response(r *StatusResponse) {
	if r.Cookie == 0 && r.Status == StatusNotifyCredit {
		c.repostLocked()
		d := int32(r.Information)
		switch {
		case d > 0:
			c.st.grants.Add(1)
			if err := c.postRecv(int(d)); err != nil {
				c.failLocked(err)
				return
			}
			c.credits += int(d)
			c.ackGrant = true
		case d < 0:
			c.retireNext = int(d)
		}
		c.creditMessagesLocked()
		c.cond.Broadcast()
		return
	}
	cl := c.byCookie[r.Cookie]
	if cl == nil || cl.answered {
		c.failLocked(fmt.Errorf("lwio: a status response for cookie %#x, which is not outstanding", r.Cookie))
		return
	}
	if cl.retire && r.Status == StatusNotifyCredit {
		// The returned credit's buffer is not posted again.
		c.credits--
		c.st.retires.Add(1)
	} else {
		c.repostLocked()
	}
	cl.status, cl.info, cl.answered = r.Status, r.Information, true
	if cl.Op == OpInterrupt {
		c.intrOut = false
	}
	c.maybeDoneLocked(cl)
	c.creditMessagesLocked()
}

// creditMessagesLocked sends the CREDIT messages owed: the
// acknowledgement of a grant, or the next returned credit. Each is a
// request and needs a free credit.
func (c *Client) creditMessagesLocked() {
	for c.err == nil && (c.ackGrant || c.retireNext != 0) && c.outstanding < c.credits && len(c.freeSlots) > 0 {
		v := int32(0)
		cl := &Call{Op: OpCredit, c: c, internal: true}
		if c.ackGrant {
			c.ackGrant = false
		} else {
			v = int32(c.retireNext)
			cl.retire = true
			c.retireNext++
		}
		_ = c.postLocked(cl, func(_ *Call, h *Header, _ []byte) ([]rings.SGE, error) {
			h.Offset = uint64(uint32(v)) << 32
			h.Length = HeaderSize
			return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize)), nil
		})
	}
	c.cancelMessagesLocked()
}

func (c *Client) maybeDoneLocked(cl *Call) {
	if !cl.answered {
		return
	}
	delete(c.byCookie, cl.cookie)
	c.outstanding--
	switch {
	case cl.Op == OpAuth: // its slot holds the server's parameters until authenticate reads them
	case cl.cancelOut:
		cl.slotDone = true // the CANCEL naming it may still name its slot (polling: its IosVa)
	default:
		c.freeSlots = append(c.freeSlots, cl.slot)
	}
	c.unwatchLocked(cl)
	c.st.completions.Add(1)
	c.cond.Broadcast()
	if cl.internal {
		if cl.status != StatusSuccess && cl.status != StatusNotifyCredit {
			c.failLocked(fmt.Errorf("lwio: %v answered %#08x", cl.Op, cl.status))
		}
		if t := cl.target; t != nil {
			t.cancelOut = false
			if t.slotDone {
				c.freeSlots = append(c.freeSlots, t.slot)
			}
		}
		c.creditMessagesLocked()
		return
	}
	cl.N = int(cl.info)
	switch cl.status {
	case StatusSuccess:
	case StatusEndOfFile:
		cl.N, cl.Err = 0, io.EOF
	case StatusCancelled:
		cl.N, cl.Err = 0, &StatusError{Op: cl.Op, Status: cl.status}
		if cl.ctx != nil && cl.ctx.Err() != nil {
			cl.Err = fmt.Errorf("%w: %w", cl.ctx.Err(), cl.Err)
		}
	default:
		cl.N, cl.Err = 0, &StatusError{Op: cl.Op, Status: cl.status}
	}
	if cl.Err == nil && (cl.Op == OpRead || cl.Op == OpVecRead) {
		if cl.N > cl.length {
			cl.N, cl.Err = 0, fmt.Errorf("lwio: server says it read %d bytes of %d", cl.N, cl.length)
		}
		c.st.bytesRead.Add(uint64(cl.N))
	}
	if cl.Err == nil && (cl.Op == OpWrite || cl.Op == OpVecWrite) {
		c.st.bytesWrote.Add(uint64(cl.N))
	}
	if cl.bounce != nil && cl.Err == nil {
		b := cl.bounce.buf.Bytes()
		if cl.user != nil {
			copy(cl.user, b[:cl.N])
		}
		off := 0
		for _, p := range cl.pages {
			if off >= cl.N {
				break
			}
			off += copy(p, b[off:cl.N])
		}
	}
	c.releaseLocked(cl)
	c.creditMessagesLocked()
	cl.finished.Store(true)
	cl.Done <- cl
}
