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

// watchCtxLocked ties cl, just posted, to ctx. Under c.mu, so the answer
// cannot come first.
func (c *Client) watchCtxLocked(ctx context.Context, cl *Call) {
	if ctx.Done() == nil {
		return
	}
	cl.ctx = ctx
	cl.stopCtx = context.AfterFunc(ctx, func() { c.cancelCall(cl) })
}

// cancelCall queues a CANCEL for cl, whose context ended.
func (c *Client) cancelCall(cl *Call) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if cl.answered || c.err != nil || cl.cancelQueued {
		return
	}
	cl.cancelQueued = true
	c.cancelQ = append(c.cancelQ, cl)
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
			return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize)}, nil
		}) == nil {
			t.cancelOut = true
			c.st.cancels.Add(1)
		}
	}
}
