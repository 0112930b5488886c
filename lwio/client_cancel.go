package lwio

import (
	"context"

	"github.com/emunic/emunic/rings"
)

// Cancel tied to context: a request started with a context that can end
// is watched; if the context ends before the answer, the client sends
// CANCEL naming that one request (its Fid, and in Offset its Cookie, or
// in polling mode, where a request carries no cookie, its IosVa). The
// server completes the request CANCELLED if it is still queued, and
// abandons a read a worker holds before its data is placed; a request
// already done completes as it went. The Call still completes only when
// the server answers: until then the NIC may write into its memory.

// ctxWatch is the requests in flight under one context (by its Done
// channel: contexts that end together share it), with the one AfterFunc
// that cancels them: a pipeline of requests under one context costs one
// registration with it, not one per request.
type ctxWatch struct {
	calls []*Call
	stop  func() bool
}

// watchCtxLocked ties cl, just posted, to ctx. Under c.mu, so the answer
// cannot come first.
func (c *Client) watchCtxLocked(ctx context.Context, cl *Call) {
	done := ctx.Done()
	if done == nil {
		return
	}
	w := c.watches[done]
	if w == nil {
		if c.watches == nil {
			c.watches = map[<-chan struct{}]*ctxWatch{}
		}
		w = &ctxWatch{}
		c.watches[done] = w
		w.stop = context.AfterFunc(ctx, func() { c.ctxDone(done) })
	}
	cl.ctx, cl.watch, cl.watchIdx = ctx, w, len(w.calls)
	w.calls = append(w.calls, cl)
}

// unwatchLocked unties cl, answered, from its context.
func (c *Client) unwatchLocked(cl *Call) {
	w, i := cl.watch, cl.watchIdx
	cl.watch = nil
	if w == nil || i >= len(w.calls) || w.calls[i] != cl {
		return
	}
	last := w.calls[len(w.calls)-1]
	w.calls[i], last.watchIdx = last, i
	w.calls[len(w.calls)-1] = nil
	w.calls = w.calls[:len(w.calls)-1]
	if len(w.calls) == 0 {
		w.stop()
		delete(c.watches, cl.ctx.Done())
	}
}

// ctxDone queues a CANCEL for every request of the context that ended.
func (c *Client) ctxDone(done <-chan struct{}) {
	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.watches[done]
	if w == nil {
		return
	}
	delete(c.watches, done)
	for _, cl := range w.calls {
		cl.watch = nil
		if !cl.answered && c.err == nil {
			c.cancelQ = append(c.cancelQ, cl)
		}
	}
	w.calls = nil
	c.cancelMessagesLocked()
}

// cancelMessagesLocked sends the CANCELs queued, as credits allow (after
// any CREDIT message owed, as other requests wait for those).
func (c *Client) cancelMessagesLocked() {
	for c.err == nil && len(c.cancelQ) > 0 && !c.ackGrant && c.retireNext == 0 &&
		c.outstanding < c.credits && len(c.freeSlots) > 0 {
		t := c.cancelQ[0]
		c.cancelQ[0] = nil
		c.cancelQ = c.cancelQ[1:]
		if t.answered {
			continue
		}
		target := t.cookie
		if c.cfg.Polling {
			target = c.smr.TO(t.slot*slotSize + slotIOSB)
		}
		cl := &Call{Op: OpCancel, c: c, internal: true, target: t}
		if c.postLocked(cl, func(_ *Call, h *Header, _ []byte) ([]rings.SGE, error) {
			h.Fid, h.Offset, h.Length = t.fid, target, HeaderSize
			return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize)), nil
		}) == nil {
			t.cancelOut = true
			c.st.cancels.Add(1)
		}
	}
}
