package iwarp

import (
	"errors"

	"github.com/emunic/emunic/rings"
)

// CQ is the device side of a completion queue: a ring in host memory the
// device produces Completion entries into, shared by any number of QPs of the
// offload unit (send and receive completions may go to one CQ or two).
// Entries are published in batches: at the end of every QP call that
// produced one (Receive, Transmit, Pump, Poll), so a burst of FPDUs costs one
// index store.
//
// Notification mirrors ibv_req_notify_cq: Arm(false) asks for an event at the
// next completion, Arm(true) at the next solicited receive completion or
// error completion; either is one-shot. The event is delivered through the
// notify function after the entries are published.
type CQ struct {
	prod    *rings.Producer
	notify  func(*CQ)
	arm     uint8 // armNone, armAny, armSolicited
	fire    bool  // an armed event is due at the next flush
	overrun bool
	stats   CQStats
}

// CQStats count a CQ's activity.
type CQStats struct {
	Completions uint64
	Errors      uint64 // completions with a status other than success
	Events      uint64 // notifications delivered
	Overruns    uint64 // completions lost to a full ring (the QP went to ERROR)
}

const (
	armNone = iota
	armAny
	armSolicited
)

// ErrCQOverrun is reported when a completion found its CQ full.
var ErrCQOverrun = errors.New("iwarp: completion queue overrun")

// NewCQ opens the device side of the completion queue ring l (entry size
// CQEntrySize). notify may be nil.
func NewCQ(dma rings.DMA, l rings.Layout, notify func(*CQ)) (*CQ, error) {
	if l.EntrySize != CQEntrySize {
		return nil, errors.New("iwarp: CQ entry size must be CQEntrySize")
	}
	p, err := rings.NewProducer(dma, l, l.Count, nil)
	if err != nil {
		return nil, err
	}
	return &CQ{prod: p, notify: notify}, nil
}

// Arm requests one notification: at the next completion, or with
// solicitedOnly at the next solicited or unsuccessful completion.
func (c *CQ) Arm(solicitedOnly bool) {
	if solicitedOnly {
		if c.arm != armAny {
			c.arm = armSolicited
		}
		return
	}
	c.arm = armAny
}

// ArmIfPending is Arm for a host that does not wait for its arm (ARM_CQ
// with ArmIfPending): if the ring holds entries the host has not consumed,
// the event is due now; it reports true (counted as an event, the CQ stays
// unarmed) and the caller delivers it. Otherwise it arms as Arm does.
func (c *CQ) ArmIfPending(solicitedOnly bool) bool {
	if c.prod.Tail() != c.prod.ConsumerIndex() {
		c.stats.Events++
		return true
	}
	c.Arm(solicitedOnly)
	return false
}

// Stats returns the CQ's counters.
func (c *CQ) Stats() CQStats { return c.stats }

// Overrun reports whether a completion was ever lost to a full ring.
func (c *CQ) Overrun() bool { return c.overrun }

// push produces one completion; false if the ring is full.
func (c *CQ) push(w *Completion, solicited bool) bool {
	e := c.prod.Next()
	if e == nil {
		c.overrun = true
		c.stats.Overruns++
		return false
	}
	w.Encode(e)
	c.prod.Commit()
	c.stats.Completions++
	if w.Status != WCSuccess {
		c.stats.Errors++
	}
	switch c.arm {
	case armAny:
		c.fire = true
	case armSolicited:
		if solicited || w.Status != WCSuccess {
			c.fire = true
		}
	}
	return true
}

// Flush publishes produced completions and delivers a due notification.
func (c *CQ) Flush() {
	c.prod.Publish()
	if c.fire {
		c.fire = false
		c.arm = armNone
		c.stats.Events++
		if c.notify != nil {
			c.notify(c)
		}
	}
}
