package ringmodel

// NotifyOpts configure NotifyProducer.
type NotifyOpts struct {
	Ring      int    // the notification ring
	Interrupt int    // the host's interrupt vector
	Wake      int    // the device's doorbell (the host kicks it when it frees space the device waits for)
	Batch     uint32 // Commit publishes every Batch entries, without a kick (the device's producer has no peer doorbell)
	Spin      int    // failed polls for space before the device parks
	Faults    Fault
}

// NotifyProducer registers.
const (
	nTail  = iota
	nPub   // index last stored to PI
	nCI    // cached CI
	nPend  // notifications since the last interrupt decision (intrPending)
	nSpin  // polls for space
	nFlags // consumer flags loaded before the index (FlagBeforeIndex only)
	nRaise // this pass raises the interrupt
	nIdle  // this pass found no work
	nRegs
)

var notifyNames = []string{"tail", "published", "ciCache", "pending", "polls", "flags", "raise", "idle"}

// NotifyProducer is the device posting notifications with interrupt
// moderation (nic.Device: post, moderate, raiseInterrupt, park). Each pass
// posts one notification (Next, Commit; a full Batch publishes without a
// kick) and then moderates: it publishes eagerly (PublishNoKick: store PI,
// load the consumer flags) and raises the interrupt when its thresholds say
// so (explored both ways) and always when it goes idle; raising is loading
// the consumer flags and kicking the host only if it said NEED_WAKEUP. A
// full ring makes it idle, then park with NEED_WAKEUP in the producer flags
// (re-check CI, sleep, clear) until the host releases space.
func NotifyProducer(name string, o NotifyOpts) *Program {
	o.Batch = max(o.Batch, 1)
	ring := o.Ring
	free := func(c *Ctx) uint32 { return c.Count(ring) - (c.R[nTail] - c.R[nCI]) }
	// after continues once the pass's moderation is done.
	after := func(c *Ctx) {
		switch {
		case c.R[nIdle] == 0:
			c.Goto("post")
		case c.R[nTail] == c.End(ring):
			c.Halt() // nothing more will ever come: the unit parks for good
		case o.Spin > 0:
			c.R[nSpin] = 0
			c.Goto("stall.spin")
		default:
			c.Goto("stall.flag")
		}
	}
	// moderate publishes (if anything is pending) and then makes the
	// interrupt decision.
	moderate := func(c *Ctx, idle bool) {
		c.R[nIdle] = 0
		if idle {
			c.R[nIdle] = 1
		}
		if c.R[nPend] == 0 {
			c.Notef("no notification since the last interrupt decision")
			after(c)
			return
		}
		raise := idle && o.Faults&NoIdleInterrupt == 0
		switch {
		case raise:
			c.Notef("idle: interrupt due")
		case c.Choose(2) == 1:
			raise = true
			c.Notef("threshold reached: interrupt due")
		default:
			c.Notef("below threshold: no interrupt yet")
		}
		c.R[nRaise] = 0
		if raise {
			c.R[nRaise] = 1
		}
		if o.Faults&FlagBeforeIndex != 0 {
			c.R[nFlags] = c.LoadCFlags(ring)
			c.Goto("mod.late")
			return
		}
		if c.R[nTail] != c.R[nPub] {
			c.R[nPub] = c.R[nTail]
			c.StorePI(ring, c.R[nPub])
		}
		c.Goto("mod.peer")
	}
	steps := []Step{
		{Label: "post", Call: "Next", Do: func(c *Ctx) {
			if c.R[nTail] == c.End(ring) {
				c.Notef("nothing to post")
				c.Goto("idle")
				return
			}
			if free(c) == 0 {
				c.R[nCI] = c.LoadCI(ring)
			}
			if free(c) == 0 {
				c.Notef("ring full")
				c.Goto("idle")
				return
			}
			c.Notef("slot free")
			c.Goto("commit")
		}},
		{Label: "commit", Call: "Commit", Do: func(c *Ctx) {
			c.Write(ring, c.R[nTail])
			c.R[nTail]++
			c.R[nPend]++
			if c.R[nTail]-c.R[nPub] >= min(o.Batch, c.Count(ring)) {
				c.Gosub("sig.store", "moderate")
			} else {
				c.Goto("moderate")
			}
		}},
		// Commit's own publish: Producer.signal with a nil doorbell.
		{Label: "sig.store", Do: func(c *Ctx) {
			c.R[nPub] = c.R[nTail]
			c.StorePI(ring, c.R[nPub])
		}},
		{Label: "sig.load", Do: func(c *Ctx) {
			c.LoadCFlags(ring)
			c.Return()
		}},
		{Label: "moderate", Call: "moderate", Do: func(c *Ctx) { moderate(c, false) }},
		{Label: "idle", Call: "moderate", Do: func(c *Ctx) { moderate(c, true) }},
		// The rest of PublishNoKick: its flag load, whose result
		// moderate ignores.
		{Label: "mod.peer", Do: func(c *Ctx) {
			c.LoadCFlags(ring)
			if c.R[nRaise] != 0 {
				c.Goto("irq.load")
			} else {
				after(c)
			}
		}},
		{Label: "mod.late", Do: func(c *Ctx) {
			if c.R[nTail] != c.R[nPub] {
				c.R[nPub] = c.R[nTail]
				c.StorePI(ring, c.R[nPub])
			}
			if c.R[nRaise] != 0 && c.R[nFlags]&needWakeup != 0 {
				c.Goto("irq.kick")
				return
			}
			if c.R[nRaise] != 0 {
				c.R[nPend] = 0
			}
			after(c)
		}},
		// raiseInterrupt: PeerSleeping, then the vector.
		{Label: "irq.load", Call: "raiseInterrupt", Do: func(c *Ctx) {
			if c.LoadCFlags(ring)&needWakeup != 0 {
				c.Goto("irq.kick")
				return
			}
			c.R[nPend] = 0
			after(c)
		}},
		{Label: "irq.kick", Do: func(c *Ctx) {
			c.Kick(o.Interrupt)
			c.R[nPend] = 0
			after(c)
		}},
		// A full ring: idle passes poll for space, then the unit parks.
		{Label: "stall.spin", Call: "Next", Do: func(c *Ctx) {
			if free(c) == 0 {
				c.R[nCI] = c.LoadCI(ring)
			}
			if free(c) > 0 {
				c.Goto("post")
				return
			}
			c.R[nSpin]++
			if int(c.R[nSpin]) >= o.Spin {
				c.Goto("stall.flag")
			} else {
				c.Goto("stall.spin")
			}
		}},
		{Label: "stall.flag", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StorePFlags(ring, needWakeup)
			if o.Faults&NoRecheck != 0 {
				c.Goto("stall.sleep")
			}
		}},
		{Label: "stall.recheck", Call: "Free", Do: func(c *Ctx) {
			if free(c) == 0 {
				c.R[nCI] = c.LoadCI(ring)
			}
			if free(c) > 0 {
				c.Goto("stall.clear")
			}
		}},
		{Label: "stall.sleep", Call: "Wait", Do: func(c *Ctx) { c.Sleep(o.Wake) }},
		{Label: "stall.clear", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StorePFlags(ring, 0)
			c.Goto("post")
		}},
	}
	p := NewProgram(name, nRegs, steps...)
	p.Names = notifyNames
	p.opts = o
	p.Init = func(sys *System, r *Regs) {
		b := sys.Rings[ring].Base
		r[nTail], r[nPub], r[nCI] = b, b, b
	}
	return p
}
