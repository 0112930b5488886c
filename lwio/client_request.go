package lwio

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// The client's requests: a call takes a credit and a slot, fills the
// header and posts the Send; wait blocks until its completion.

// limitLocked is how many requests may be in flight: the credits, the
// client's own bound, and in polling mode one credit kept for INTERRUPT.
func (c *Client) limitLocked() int {
	l := min(c.credits, c.cfg.MaxOutstanding)
	if c.cfg.Polling && l >= 2 {
		l--
	}
	return l
}

// sgl is a request's gather list in the client's scratch array (fill
// runs under c.mu, and postLocked copies it into the work request).
func (c *Client) sgl(sges ...rings.SGE) []rings.SGE { return append(c.sgeScratch[:0], sges...) }

// fill builds a request in its slot: it sets the header fields it owns
// and returns the SGEs of the send after the header's own.
type fill func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error)

// start admits a request (waiting for a credit), builds it and posts it.
func (c *Client) start(ctx context.Context, op Opcode, f fill) (*Call, error) {
	return c.startTo(ctx, op, nil, f)
}

// startTo is start with the channel the Call goes to when done (nil: a new
// one). It is set before the request is posted: the answer can come before
// startTo returns.
func (c *Client) startTo(ctx context.Context, op Opcode, done chan *Call, f fill) (*Call, error) {
	if done == nil {
		done = make(chan *Call, 1)
	}
	cl := &Call{Op: op, c: c, Done: done, watched: ctx == syncCtx}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.waiting++
	for c.err == nil && (c.outstanding >= c.limitLocked() || c.retireNext != 0 || c.ackGrant || len(c.freeSlots) == 0) {
		if ctx.Err() != nil {
			c.waiting--
			return nil, ctx.Err()
		}
		c.cond.Wait()
	}
	c.waiting--
	if c.err != nil {
		return nil, c.err
	}
	if err := c.postLocked(cl, f); err != nil {
		return nil, err
	}
	if isIO(op) {
		c.watchCtxLocked(ctx, cl)
	}
	return cl, nil
}

// postLocked builds cl in a free slot and sends it.
func (c *Client) postLocked(cl *Call, f fill) error {
	cl.slot = c.freeSlots[len(c.freeSlots)-1]
	c.freeSlots = c.freeSlots[:len(c.freeSlots)-1]
	c.cookie++
	if uint32(c.cookie) == 0 {
		c.cookie++
	}
	cl.cookie = c.cookie
	slot := c.smem[cl.slot*slotSize : (cl.slot+1)*slotSize]
	// Sequence numbers the requests in the order they are sent (postLocked
	// runs under mu and posts at once); Tid is the cookie's low half,
	// unique among the requests in flight, as ImmCookie must be.
	h := &c.hdr // under c.mu; fill does not post, so nothing reenters
	*h = Header{Opcode: cl.Op, Flags: FlagInterrupt, Credits: uint8(min(c.outstanding+c.waiting+1, MaxCredits)),
		Cookie: cl.cookie, ImmCookie: uint32(cl.cookie), Sequence: c.seq, Tid: uint32(cl.cookie)}
	if c.cfg.Polling && isIO(cl.Op) {
		h.Flags = 0
		h.IosVa, h.IosMh = c.smr.TO(cl.slot*slotSize+slotIOSB), c.smr.RKey
		atomic.StoreUint64(c.iosbWord(cl.slot), uint64(StatusPending)<<32)
	}
	sges, err := f(cl, h, slot)
	if err != nil {
		c.freeSlots = append(c.freeSlots, cl.slot)
		return err
	}
	h.Encode(slot)
	// Unsignaled: the request's answer says the server has the message,
	// so its slot is free then, and a send completion would only cost
	// the device a CQE and the client a poll. A send that fails still
	// completes (in error), which ends the client. The exception: a
	// polling request while the completion loop sleeps, which nothing
	// else would wake to watch its status block (and ask for an
	// interrupt before it sleeps again).
	w := &c.wr // under c.mu: a work request on the stack would escape to the heap
	*w = rings.SendWR{Opcode: rings.WRSend, WRID: cl.cookie}
	switch {
	case !c.cfg.Polling || !isIO(cl.Op):
		cl.watched = false
	case cl.watched:
		// Its caller will watch the status block (spin), counted from
		// the post (below), so that the loop neither asks for an
		// interrupt nor needs the send's completion to wake it in the
		// moment between this post and the caller's first look.
	case c.asleep:
		w.Flags = rings.WRSignaled
	}
	if len(sges) > rings.MaxSendSGE {
		c.freeSlots = append(c.freeSlots, cl.slot)
		return fmt.Errorf("lwio: %d SGEs", len(sges))
	}
	w.NumSGE = copy(w.SGL[:], sges)
	c.byCookie[cl.cookie] = cl
	c.outstanding++
	c.maxSeen = max(c.maxSeen, c.outstanding)
	if c.cfg.Polling && isIO(cl.Op) {
		c.polling = append(c.polling, cl)
	}
	c.seq++
	if err := c.qp.PostSend(w); err != nil {
		delete(c.byCookie, cl.cookie)
		c.outstanding--
		c.failLocked(err)
		return err
	}
	if cl.watched {
		c.callerPolls++
	}
	c.st.requests.Add(1)
	return nil
}

func isIO(op Opcode) bool { return op <= OpVecWrite }

func (c *Client) iosbWord(slot int) *uint64 {
	return (*uint64)(unsafe.Pointer(&c.smem[slot*slotSize+slotIOSB]))
}

// wait waits for cl and returns its error.
func (c *Client) wait(ctx context.Context, cl *Call) error {
	c.spin(cl)
	select {
	case <-cl.Done:
		return cl.Err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// spin is a polling client's caller watching its own request's status
// block before it blocks on Done: when the server's RDMA Write lands, the
// caller completes the request itself (and any other found done), so no
// goroutine has to hand it over; and while a caller watches, the
// completion loop asks for no interrupt (it polls on a timer instead).
// It gives up after callerSpin.
func (c *Client) spin(cl *Call) {
	if !c.cfg.Polling || !isIO(cl.Op) || cl.slot < 0 {
		return
	}
	c.mu.Lock()
	if cl.answered {
		if cl.watched { // counted at the post
			cl.watched = false
			c.callerPolls--
		}
		c.mu.Unlock()
		return
	}
	if !cl.watched {
		cl.watched = true
		c.callerPolls++
	}
	w := c.iosbWord(cl.slot) // the slot is cl's until it is answered
	c.mu.Unlock()
	start := time.Now()
	for i := 0; ; i++ {
		if cl.finished.Load() || i%16 == 15 && time.Since(start) > callerSpin {
			break
		}
		if uint32(atomic.LoadUint64(w)>>32) != StatusPending {
			c.mu.Lock()
			c.scanLocked()
			c.mu.Unlock()
			continue
		}
		runtime.Gosched()
	}
	c.mu.Lock()
	cl.watched = false
	c.callerPolls--
	if !cl.answered && c.callerPolls == 0 && c.asleep && !c.intrOut {
		// The caller gives up and will block on Done, while the loop,
		// which asked for no interrupt because the caller watched,
		// sleeps on a timer: ask now, so the completion wakes it.
		c.interruptLocked()
	}
	c.mu.Unlock()
}

// callerSpin bounds a caller's polling (spin): about the time a small
// read takes; past it the caller blocks and the loop takes over (with an
// interrupt), rather than hold a CPU the NICs and the server may need.
const callerSpin = 50 * time.Microsecond

func (c *Client) freeSlot(cl *Call) {
	c.mu.Lock()
	c.freeSlots = append(c.freeSlots, cl.slot)
	c.cond.Broadcast()
	c.mu.Unlock()
}
