package ringmodel

import "github.com/emunic/emunic/rings"

// ConsumerOpts configure Consumer.
type ConsumerOpts struct {
	Ring  int    // the ring it consumes
	Wake  int    // the doorbell it sleeps on
	Kick  int    // the producer's doorbell, rung by a release that finds NEED_WAKEUP; -1: none
	Batch uint32 // PopN releases every Batch entries (rings.NewConsumer's batch)
	Burst uint32 // most entries taken at once (Burst; 1 is Peek)
	Spin  int    // polls of PI after going idle, before setting NEED_WAKEUP
	// ReleaseEachBurst releases after every burst, as the host's
	// interrupt handler does; otherwise it releases every Batch and before
	// parking, as the device's transmit service does.
	ReleaseEachBurst bool
	// Complete makes it a command ring device: each entry is completed
	// in place (status, then DONE with DONE_PHASE) before it is popped.
	Complete bool
	Faults   Fault
}

// Consumer registers.
const (
	cHead  = iota // next index to consume (Consumer.Head)
	cRel          // index last stored to CI
	cPI           // cached PI (the Go code's tailCache)
	cN            // entries in the current burst
	cI            // entries of the burst taken
	cSpin         // polls made while idle
	cFlags        // producer flags loaded by a release
	cRegs
)

var consumerNames = []string{"head", "released", "piCache", "burst", "taken", "polls", "flags"}

// Consumer is the consuming side: the host's notification interrupt
// handler (Driver.interrupts: Burst, PopN, Release, Park), the device's
// transmit service (Burst, PopN; park), or with Complete the device's
// command service (Peek, execute, Complete, Pop).
//
// Steps: burst (load PI only when the cached copy is used up) → take each
// entry (load its control word, check the phase tag, read it) → complete
// it on a command ring → PopN (release every Batch: store CI, then load the
// producer flags, then kick if NEED_WAKEUP). Idle: release, poll PI Spin
// times, store NEED_WAKEUP in the consumer flags, re-check PI, sleep,
// re-read PI, clear the flag.
func Consumer(name string, o ConsumerOpts) *Program {
	o.Batch = max(o.Batch, 1)
	o.Burst = max(o.Burst, 1)
	ring := o.Ring
	avail := func(c *Ctx) uint32 {
		if c.R[cHead] == c.R[cPI] {
			c.R[cPI] = c.LoadPI(ring)
		}
		return c.R[cPI] - c.R[cHead]
	}
	parkAt := "park.flag"
	if o.Spin > 0 {
		parkAt = "park.spin"
	}
	steps := []Step{
		{Label: "burst", Call: "Burst", Do: func(c *Ctx) {
			n := avail(c)
			if n > c.Count(ring) {
				c.Failf("%s: PI %d is more than a ring ahead of head %d", c.sys.Rings[ring].Name, c.R[cPI], c.R[cHead])
				return
			}
			n = min(n, o.Burst)
			c.R[cN], c.R[cI] = n, 0
			if n > 0 {
				c.Notef("%d entries", n)
				c.Goto("take")
				return
			}
			// Idle: Park. It gives consumed slots back first.
			c.Notef("empty")
			c.R[cSpin] = 0
			if c.R[cHead] != c.R[cRel] && o.Faults&NoReleaseBeforePark == 0 {
				c.Gosub("rel.store", parkAt)
			} else {
				c.Goto(parkAt)
			}
		}},
		{Label: "take", Call: "Entry", Do: func(c *Ctx) {
			i := c.R[cHead] + c.R[cI]
			if ctl := c.LoadCtl(ring, i); ctl&rings.CtlPhase != c.Phase(ring, i) {
				c.Failf("%s: phase error: entry %d below PI %d has phase %d, its lap's is %d",
					c.sys.Rings[ring].Name, i, c.R[cPI], ctl&rings.CtlPhase, c.Phase(ring, i))
				return
			}
			c.Take(ring, i)
			c.R[cI]++
			switch {
			case o.Complete:
				c.Goto("complete")
			case c.R[cI] < c.R[cN]:
				c.Goto("take")
			default:
				c.Goto("popn")
			}
		}},
		{Label: "complete", Call: "Complete", Do: func(c *Ctx) {
			c.Complete(ring, c.R[cHead]+c.R[cI]-1)
			if c.R[cI] < c.R[cN] {
				c.Goto("take")
			} else {
				c.Goto("popn")
			}
		}},
		{Label: "popn", Call: "PopN", Do: func(c *Ctx) {
			c.R[cHead] += c.R[cN]
			c.Notef("head = %d", c.R[cHead])
			if c.R[cHead]-c.R[cRel] >= min(o.Batch, c.Count(ring)) || o.ReleaseEachBurst && c.R[cHead] != c.R[cRel] {
				c.Gosub("rel.store", "burst")
			} else {
				c.Goto("burst")
			}
		}},
	}
	steps = append(steps, signalSteps("rel", o.Faults, o.Kick, cRel, cHead, cFlags,
		func(c *Ctx, v uint32) { c.StoreCI(ring, v) }, func(c *Ctx) uint32 { return c.LoadPFlags(ring) })...)
	steps = append(steps, []Step{
		// Consumer.Park after its Release.
		{Label: "park.spin", Call: "Available", Do: func(c *Ctx) {
			if avail(c) > 0 {
				c.Goto("burst")
				return
			}
			c.R[cSpin]++
			if int(c.R[cSpin]) >= o.Spin {
				c.Goto("park.flag")
			} else {
				c.Goto("park.spin")
			}
		}},
		{Label: "park.flag", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StoreCFlags(ring, needWakeup)
			if o.Faults&NoRecheck != 0 {
				c.Goto("park.sleep")
			}
		}},
		{Label: "park.recheck", Call: "Available", Do: func(c *Ctx) {
			if avail(c) > 0 {
				c.Goto("park.clear")
			}
		}},
		{Label: "park.sleep", Call: "Wait", Do: func(c *Ctx) { c.Sleep(o.Wake) }},
		{Label: "park.woken", Call: "Available", Do: func(c *Ctx) { avail(c) }},
		{Label: "park.clear", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StoreCFlags(ring, 0)
			c.Goto("burst")
		}},
	}...)
	p := NewProgram(name, cRegs, steps...)
	p.Names = consumerNames
	p.opts = o
	p.Init = func(sys *System, r *Regs) {
		b := sys.Rings[ring].Base
		r[cHead], r[cRel], r[cPI] = b, b, b
	}
	return p
}
