package lwio

import "github.com/emunic/emunic/rings"

// Credits on the server side: the policy's grants and returns, and the
// client's CREDIT that acknowledges them (docs/lwio.md, "Credits").

// adjustCreditsLocked starts a credit transaction when the policy wants a
// different number of credits and none is under way.
func (c *sconn) adjustCreditsLocked(hint int) {
	if c.txn != 0 {
		return
	}
	want := min(max(c.s.cfg.CreditPolicy(c.credits, hint), 1), c.s.cfg.MaxCredits)
	if want >= c.credits {
		c.lowStreak = 0
	}
	switch {
	case want > c.credits && !c.noPositive:
		n := c.s.takeCredits(want - c.credits)
		if n == 0 {
			return
		}
		if err := c.postRecvLocked(n); err != nil {
			c.s.giveCredits(n)
			return
		}
		c.credits += n
		c.txn = n
		c.s.st.grants.Add(1)
		c.sendDeltaLocked(int32(n))
	case want < c.credits:
		// Give back only after a sustained lull: a client between bursts
		// must not lose its credits to one quiet request.
		if c.lowStreak++; c.lowStreak < shrinkAfter {
			return
		}
		c.lowStreak = 0
		n := c.credits - want
		c.txn = -n
		c.s.st.grants.Add(1)
		c.sendDeltaLocked(int32(-n))
	}
}

// sendDeltaLocked sends a delta credit message: a status response with
// Cookie 0, Status NOTIFY_CREDIT and the signed delta as Information. It
// lands in the receive buffer the client keeps beyond its credits.
func (c *sconn) sendDeltaLocked(d int32) {
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRInline | rings.WRSolicited, InlineLen: StatusResponseSize}
	(&StatusResponse{IOSB: IOSB{Information: uint32(d), Status: StatusNotifyCredit}}).Encode(w.InlineData[:])
	c.postLocked([]rings.SendWR{w}, nil, false)
}

// credit handles the client's CREDIT: the acknowledgement of a grant
// (Offset's upper 32 bits: credits it did not use, ≥ 0) or one returned
// credit (-N … -1), whose receive buffer is not posted again.
func (c *sconn) credit(slot int, h Header, _ *fidEntry, _ []byte) {
	v := int32(h.Offset >> 32)
	switch {
	case c.txn > 0 && v >= 0:
		c.txn = 0
		if v > 0 {
			c.noPositive = true
		}
		c.repostLocked(slot)
		c.answerLocked(&h, StatusSuccess, 0, nil, nil)
	case c.txn < 0 && int(v) == c.txn:
		c.unposted = append(c.unposted, slot)
		c.credits--
		c.s.giveCredits(1)
		c.s.st.retires.Add(1)
		c.txn++
		c.noPositive = false
		c.answerLocked(&h, StatusNotifyCredit, 0, nil, nil)
	default:
		c.s.st.badReq.Add(1)
		c.repostLocked(slot)
		c.answerLocked(&h, StatusInvalidParameter, 0, nil, nil)
	}
}
