package ringmodel

import (
	"fmt"

	"github.com/emunic/emunic/rings"
)

// The standard agents follow docs/rings.md step by step and mirror the Go
// code in package rings and its two users: every step is one shared access
// of rings.Producer, rings.Consumer or of the driver or device loop that
// calls them, in the same order, and Step.Call names the call it begins
// (conformance_test.go replays those calls on the real code). Private
// copies of the peer's index are kept as the Go code keeps them, so a
// step loads a shared index exactly where the Go code does.

// Fault is a deliberate departure from the protocol, for showing that the
// checker catches it (and for checking a checker set up for another
// implementation). The zero value is the protocol of docs/rings.md.
type Fault uint32

const (
	// NoRecheck: after setting NEED_WAKEUP, sleep without re-reading the
	// peer's index (or, waiting for a command, its control word).
	NoRecheck Fault = 1 << iota
	// FlagBeforeIndex: load the peer's flags before storing the index
	// (publish, release; the device's interrupt decision), not after.
	FlagBeforeIndex
	// NoReleaseBeforePark: the consumer parks without releasing the
	// entries it has consumed.
	NoReleaseBeforePark
	// NoPublishBeforeWait: the producer waits for space without publishing
	// the entries it has committed.
	NoPublishBeforeWait
	// IndexBeforeEntry: the producer stores PI before it writes the entry.
	IndexBeforeEntry
	// IgnoreDonePhase: the command producer's IsDone tests DONE alone.
	IgnoreDonePhase
	// KeepDoneOnCommit: the commit stamps the phase bit alone and leaves
	// the previous lap's DONE and DONE_PHASE in the control word.
	KeepDoneOnCommit
	// NoIdleInterrupt: the moderating device raises the interrupt only on
	// its thresholds, not always before going idle.
	NoIdleInterrupt
	// PartialRecheck: a device consuming several rings re-checks only the
	// first after setting NEED_WAKEUP on all of them.
	PartialRecheck
)

var faultNames = []string{"NoRecheck", "FlagBeforeIndex", "NoReleaseBeforePark", "NoPublishBeforeWait",
	"IndexBeforeEntry", "IgnoreDonePhase", "KeepDoneOnCommit", "NoIdleInterrupt", "PartialRecheck"}

func (f Fault) String() string {
	if f == 0 {
		return "none"
	}
	s := ""
	for i, n := range faultNames {
		if f&(1<<i) != 0 {
			if s != "" {
				s += "|"
			}
			s += n
		}
	}
	return s
}

const needWakeup = rings.FlagNeedWakeup

// ProducerOpts configure Producer.
type ProducerOpts struct {
	Ring  int    // the ring it produces on
	Kick  int    // the consumer's doorbell, rung by a publish that finds NEED_WAKEUP
	Wake  int    // the doorbell it sleeps on (waiting for space, or for a completion)
	Batch uint32 // Commit publishes every Batch entries (rings.NewProducer's batch)
	Burst uint32 // entries reserved at once (Reserve; 1 is Next); on a command ring, commands per batch
	Spin  int    // failed polls before it parks (it polls Spin+1 times)
	// IdleFlush explores a Publish after every burst, as a producer does
	// when it has nothing more to write for now (WritePackets' Publish).
	IdleFlush bool
	// Completions makes it a command ring host (the driver's command
	// path): after each batch it publishes and waits for every command's
	// DONE, in order, polling, then with NEED_WAKEUP in the producer flags
	// and the completion doorbell, and reads each status back.
	Completions bool
	Faults      Fault
}

// Producer registers.
const (
	pTail  = iota // next index to write (Producer.Tail)
	pPub          // index last stored to PI
	pCI           // cached CI (the Go code's headCache)
	pN            // slots reserved and not yet committed
	pSpin         // polls made
	pFlags        // consumer flags loaded by a publish
	pReap         // command ring: next command to wait for
	pRegs
)

var producerNames = []string{"tail", "published", "ciCache", "reserved", "polls", "flags", "reap"}

// Producer is the producing side: the host on the transmit ring
// (Driver.WritePackets, waitTxSpace and Producer.WaitSpace), or with
// Completions the host on the command ring (the driver's command path: a
// batch published at once, IsDone polled, then NEED_WAKEUP, a re-check and
// the Command vector).
//
// Steps: reserve (Reserve, loading CI only when the cached copy says the
// batch does not fit) → commit each entry (write + phase tag; every Batch a
// publish: store PI, then load the consumer flags, then kick if
// NEED_WAKEUP) → at the end, publish. A full ring: publish, poll CI, then
// WaitSpace: store NEED_WAKEUP in the producer flags, re-check CI, sleep,
// re-read CI, clear the flag. Command ring: publish the batch, then for
// each command poll IsDone, then set NEED_WAKEUP, re-check IsDone, sleep,
// clear; read the status back.
func Producer(name string, o ProducerOpts) *Program {
	o.Batch = max(o.Batch, 1)
	o.Burst = max(o.Burst, 1)
	ring := o.Ring
	isDone := func(c *Ctx, i uint32) bool {
		ctl := c.LoadCtl(ring, i)
		if o.Faults&IgnoreDonePhase != 0 {
			return ctl&rings.CtlDone != 0
		}
		return IsDone(c.Count(ring), i, ctl)
	}
	free := func(c *Ctx) uint32 { return c.Count(ring) - (c.R[pTail] - c.R[pCI]) }
	// publish continues at next, publishing first if anything is pending.
	publish := func(c *Ctx, next string) {
		if c.R[pTail] != c.R[pPub] {
			c.Gosub("pub.store", next)
		} else {
			c.Goto(next)
		}
	}
	steps := []Step{
		{Label: "reserve", Call: "Reserve", Do: func(c *Ctx) {
			want := min(o.Burst, c.End(ring)-c.R[pTail])
			if want > free(c) {
				c.R[pCI] = c.LoadCI(ring)
			}
			n := min(want, free(c))
			if n > 0 {
				c.R[pN] = n
				c.Notef("%d free", n)
				c.Goto("commit")
				return
			}
			// Full: waitTxSpace publishes, then polls.
			c.Notef("ring full")
			c.R[pSpin] = 0
			if o.Faults&NoPublishBeforeWait != 0 {
				c.Goto("spin")
				return
			}
			publish(c, "spin")
		}},
		{Label: "commit", Call: "Commit", Do: func(c *Ctx) {
			if o.Faults&IndexBeforeEntry != 0 {
				c.R[pPub] = c.R[pTail] + 1
				c.StorePI(ring, c.R[pPub])
				c.Goto("commit.late")
				return
			}
			write(c, ring, o.Faults)
			commitNext(c, o, false, publish)
		}},
		{Label: "commit.late", Do: func(c *Ctx) {
			write(c, ring, o.Faults)
			// PI is already out: load the flags after it, as a publish does.
			commitNext(c, o, true, func(c *Ctx, next string) { c.Gosub("pub.load", next) })
		}},
	}
	steps = append(steps, signalSteps("pub", o.Faults, o.Kick, pPub, pTail, pFlags,
		func(c *Ctx, v uint32) { c.StorePI(ring, v) }, func(c *Ctx) uint32 { return c.LoadCFlags(ring) })...)
	steps = append(steps, []Step{
		// A full ring (waitTxSpace): poll with Next, Spin+1 times.
		{Label: "spin", Call: "Next", Do: func(c *Ctx) {
			if free(c) == 0 {
				c.R[pCI] = c.LoadCI(ring)
			}
			if free(c) > 0 {
				c.Goto("reserve")
				return
			}
			c.R[pSpin]++
			if int(c.R[pSpin]) > o.Spin {
				c.Goto("ws.flag")
			} else {
				c.Goto("spin")
			}
		}},
		// Producer.WaitSpace (its Publish has nothing left to do).
		{Label: "ws.flag", Call: "WaitSpace", Do: func(c *Ctx) {
			c.StorePFlags(ring, needWakeup)
			if o.Faults&NoRecheck != 0 {
				c.Goto("ws.sleep")
			}
		}},
		{Label: "ws.recheck", Do: func(c *Ctx) {
			if free(c) == 0 {
				c.R[pCI] = c.LoadCI(ring)
			}
			if free(c) > 0 {
				c.Goto("ws.clear")
			}
		}},
		{Label: "ws.sleep", Do: func(c *Ctx) { c.Sleep(o.Wake) }},
		{Label: "ws.woken", Do: func(c *Ctx) {
			if free(c) == 0 {
				c.R[pCI] = c.LoadCI(ring)
			}
		}},
		{Label: "ws.clear", Do: func(c *Ctx) {
			c.StorePFlags(ring, 0)
			c.R[pSpin] = uint32(o.Spin) // waitTxSpace: one Next, then WaitSpace again
			c.Goto("spin")
		}},
		// The command path: wait for each command's DONE.
		{Label: "done.poll", Call: "IsDone", Do: func(c *Ctx) {
			i := c.R[pReap]
			if isDone(c, i) {
				c.Reap(ring, i)
				c.R[pReap]++
				c.R[pSpin] = 0
				switch {
				case c.R[pReap] != c.R[pTail]:
					c.Goto("done.poll")
				case c.R[pTail] == c.End(ring):
					c.Halt()
				default:
					c.Goto("reserve")
				}
				return
			}
			c.R[pSpin]++
			if int(c.R[pSpin]) > o.Spin {
				c.Goto("done.flag")
			} else {
				c.Goto("done.poll")
			}
		}},
		{Label: "done.flag", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StorePFlags(ring, needWakeup)
			if o.Faults&NoRecheck != 0 {
				c.Goto("done.sleep")
			}
		}},
		{Label: "done.recheck", Call: "IsDone", Do: func(c *Ctx) {
			if isDone(c, c.R[pReap]) {
				c.Goto("done.clear")
			}
		}},
		{Label: "done.sleep", Call: "Wait", Do: func(c *Ctx) { c.Sleep(o.Wake) }},
		{Label: "done.clear", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StorePFlags(ring, 0)
			c.R[pSpin] = uint32(o.Spin)
			c.Goto("done.poll")
		}},
	}...)
	p := NewProgram(name, pRegs, steps...)
	p.Names = producerNames
	p.opts = o
	p.Init = func(sys *System, r *Regs) {
		b := sys.Rings[ring].Base
		r[pTail], r[pPub], r[pCI], r[pReap] = b, b, b, b
	}
	if o.Completions {
		// IsDone is asked, at the latest, about every command not yet
		// read back and about the next lap's: it must never report a
		// completion that is not that command's own.
		p.Invariant = func(sys *System, m *Mem, r *Regs) error {
			spec := &sys.Rings[ring]
			rm := &m.Rings[ring]
			for i := r[pReap]; i != r[pTail]+spec.Count; i++ {
				s := i & (spec.Count - 1)
				ctl := rm.Ctl[s]
				done := IsDone(spec.Count, i, ctl)
				if o.Faults&IgnoreDonePhase != 0 {
					done = ctl&rings.CtlDone != 0
				}
				if done && rm.Status[s] != uint8(i-spec.Base+1) {
					return fmt.Errorf("IsDone(%d) is true, but the slot holds %s", i, statusStr(spec, rm.Status[s]))
				}
			}
			return nil
		}
	}
	return p
}

// signalSteps are a producer's publish (prefix "pub": PI, then the
// consumer flags) or a consumer's release ("rel": CI, then the producer
// flags), as Producer.signal and Consumer.release do it, called with Gosub:
// store register pos as the index (and in register idx), then load the
// peer's flags and ring the peer's doorbell kick (unless it is -1) if they
// say NEED_WAKEUP. FlagBeforeIndex loads the flags (into register flags)
// before it stores the index.
func signalSteps(prefix string, f Fault, kick, idx, pos, flags int, store func(c *Ctx, v uint32), load func(c *Ctx) uint32) []Step {
	load2, late, kicks := prefix+".load", prefix+".late", prefix+".kick"
	// signal kicks if the flags loaded say NEED_WAKEUP, else returns.
	signal := func(c *Ctx, flags uint32) {
		if flags&needWakeup != 0 && kick >= 0 {
			c.Goto(kicks)
		} else {
			c.Return()
		}
	}
	return []Step{
		{Label: prefix + ".store", Do: func(c *Ctx) {
			if f&FlagBeforeIndex != 0 {
				c.R[flags] = load(c)
				c.Goto(late)
				return
			}
			c.R[idx] = c.R[pos]
			store(c, c.R[idx])
			c.Goto(load2)
		}},
		{Label: load2, Do: func(c *Ctx) { signal(c, load(c)) }},
		{Label: late, Do: func(c *Ctx) {
			c.R[idx] = c.R[pos]
			store(c, c.R[idx])
			signal(c, c.R[flags])
		}},
		{Label: kicks, Do: func(c *Ctx) {
			c.Kick(kick)
			c.Return()
		}},
	}
}

// write writes the entry at the producer's tail.
func write(c *Ctx, ring int, f Fault) {
	i := c.R[pTail]
	if f&KeepDoneOnCommit != 0 {
		c.WriteCtl(ring, i, c.st.Rings[ring].Ctl[i&(c.Count(ring)-1)]&(rings.CtlDone|rings.CtlDonePhase)|c.Phase(ring, i))
	} else {
		c.Write(ring, i)
	}
	c.R[pTail]++
	c.R[pN]--
}

// commitNext decides what follows a commit: another commit, a publish
// (every Batch, at the end of a command batch, at the end of the work, or
// when the producer goes idle), waiting for completions, or the next
// reservation.
func commitNext(c *Ctx, o ProducerOpts, always bool, publish func(c *Ctx, next string)) {
	tail := c.R[pTail]
	next := "reserve"
	switch {
	case c.R[pN] > 0:
		next = "commit"
	case o.Completions:
		next = "done.poll"
		c.R[pSpin] = 0
	case tail == c.End(o.Ring):
		next = haltLabel
	}
	now := always || tail-c.R[pPub] >= min(o.Batch, c.Count(o.Ring))
	if !now && c.R[pN] == 0 {
		now = o.Completions || tail == c.End(o.Ring) || o.IdleFlush && c.Choose(2) == 1
	}
	if now {
		publish(c, next)
	} else {
		c.Goto(next)
	}
}

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

// DeviceRing is one ring a Device consumes.
type DeviceRing struct {
	Ring     int
	Kick     int    // the host's vector for this ring, rung by a release that finds NEED_WAKEUP
	Batch    uint32 // release every Batch entries
	Complete bool   // a command ring: complete each entry in place before popping it
}

// DeviceOpts configure Device.
type DeviceOpts struct {
	Rings  []DeviceRing // in service order, at most 2
	Wake   int          // the device's doorbell, shared by all its rings
	Spin   int          // idle passes after the first before it parks
	Faults Fault
}

// Device registers: head, released and cached PI of each ring, then
// these.
const (
	dCur  = 6 + iota // the ring being serviced, released, flagged
	dWork            // this pass did work
	dSpin            // idle passes
	dRegs
)

// Device is the offload unit consuming several rings with one doorbell
// (nic.Device's unit loop and park): passes service each ring in turn
// (Peek, complete in place on a command ring, Pop releasing every Batch);
// after idle passes it parks: release every ring, set NEED_WAKEUP on every
// ring, re-check every ring (stopping at the first with work), sleep on
// the doorbell, clear every flag. Any host's kick wakes it; each wake-up
// is followed by a full pass.
func Device(name string, o DeviceOpts) *Program {
	if len(o.Rings) == 0 || len(o.Rings) > 2 {
		panic("ringmodel: a Device consumes one or two rings")
	}
	n := uint32(len(o.Rings))
	head := func(c *Ctx) *uint32 { return &c.R[3*c.R[dCur]] }
	rel := func(c *Ctx) *uint32 { return &c.R[3*c.R[dCur]+1] }
	pi := func(c *Ctx) *uint32 { return &c.R[3*c.R[dCur]+2] }
	cur := func(c *Ctx) DeviceRing { return o.Rings[c.R[dCur]] }
	avail := func(c *Ctx) uint32 {
		if *head(c) == *pi(c) {
			*pi(c) = c.LoadPI(cur(c).Ring)
		}
		return *pi(c) - *head(c)
	}
	steps := []Step{
		{Label: "svc", Call: "Peek", Do: func(c *Ctx) {
			if avail(c) > 0 {
				c.Goto("take")
				return
			}
			c.Notef("%s empty", c.sys.Rings[cur(c).Ring].Name)
			c.R[dCur]++
			switch {
			case c.R[dCur] < n:
				c.Goto("svc")
			case c.R[dWork] != 0:
				c.R[dCur], c.R[dWork], c.R[dSpin] = 0, 0, 0
				c.Goto("svc")
			case int(c.R[dSpin]) < o.Spin:
				c.R[dCur] = 0
				c.R[dSpin]++
				c.Goto("svc")
			default:
				c.R[dCur] = 0
				c.Goto("park.rel")
			}
		}},
		{Label: "take", Call: "Entry", Do: func(c *Ctx) {
			r, i := cur(c).Ring, *head(c)
			if ctl := c.LoadCtl(r, i); ctl&rings.CtlPhase != c.Phase(r, i) {
				c.Failf("%s: phase error: entry %d has phase %d, its lap's is %d", c.sys.Rings[r].Name, i, ctl&rings.CtlPhase, c.Phase(r, i))
				return
			}
			c.Take(r, i)
			if cur(c).Complete {
				c.Goto("complete")
			} else {
				c.Goto("pop")
			}
		}},
		{Label: "complete", Call: "Complete", Do: func(c *Ctx) { c.Complete(cur(c).Ring, *head(c)) }},
		{Label: "pop", Call: "Pop", Do: func(c *Ctx) {
			*head(c)++
			c.Notef("%s head = %d", c.sys.Rings[cur(c).Ring].Name, *head(c))
			c.R[dWork] = 1
			if *head(c)-*rel(c) >= min(max(cur(c).Batch, 1), c.Count(cur(c).Ring)) {
				c.Gosub("rel.store", "svc")
			} else {
				c.Goto("svc")
			}
		}},
		{Label: "rel.store", Do: func(c *Ctx) {
			*rel(c) = *head(c)
			c.StoreCI(cur(c).Ring, *rel(c))
		}},
		{Label: "rel.load", Do: func(c *Ctx) {
			if c.LoadPFlags(cur(c).Ring)&needWakeup != 0 && cur(c).Kick >= 0 {
				c.Goto("rel.kick")
			} else {
				c.Return()
			}
		}},
		{Label: "rel.kick", Do: func(c *Ctx) {
			c.Kick(cur(c).Kick)
			c.Return()
		}},
		// park: release every ring, then NEED_WAKEUP on every ring.
		{Label: "park.rel", Call: "Release", Do: func(c *Ctx) {
			switch {
			case c.R[dCur] == n:
				c.R[dCur] = 0
				c.Goto("park.flag")
			case *head(c) != *rel(c):
				c.Gosub("rel.store", "park.next")
			default:
				c.Notef("nothing to release on %s", c.sys.Rings[cur(c).Ring].Name)
				c.R[dCur]++
				c.Goto("park.rel")
			}
		}},
		{Label: "park.next", Do: func(c *Ctx) {
			c.R[dCur]++
			c.Goto("park.rel")
		}},
		{Label: "park.flag", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StoreCFlags(cur(c).Ring, needWakeup)
			c.R[dCur]++
			if c.R[dCur] < n {
				c.Goto("park.flag")
				return
			}
			c.R[dCur] = 0
			if o.Faults&NoRecheck != 0 {
				c.Goto("park.sleep")
			}
		}},
		// The re-check: anything published before a host could see the
		// flags did not kick.
		{Label: "park.recheck", Call: "Available", Do: func(c *Ctx) {
			if avail(c) > 0 {
				c.R[dCur] = 0
				c.Goto("park.clear")
				return
			}
			c.R[dCur]++
			if c.R[dCur] < n && o.Faults&PartialRecheck == 0 {
				c.Goto("park.recheck")
				return
			}
			c.R[dCur] = 0
			c.Goto("park.sleep")
		}},
		{Label: "park.sleep", Call: "Wait", Do: func(c *Ctx) { c.Sleep(o.Wake) }},
		{Label: "park.clear", Call: "SetNeedWakeup", Do: func(c *Ctx) {
			c.StoreCFlags(cur(c).Ring, 0)
			c.R[dCur]++
			if c.R[dCur] < n {
				c.Goto("park.clear")
				return
			}
			c.R[dCur], c.R[dWork], c.R[dSpin] = 0, 0, 0
			c.Goto("svc")
		}},
	}
	p := NewProgram(name, dRegs, steps...)
	p.Names = []string{"head0", "released0", "piCache0", "head1", "released1", "piCache1", "ring", "work", "idle"}
	p.opts = o
	p.Init = func(sys *System, r *Regs) {
		for k, dr := range o.Rings {
			b := sys.Rings[dr.Ring].Base
			r[3*k], r[3*k+1], r[3*k+2] = b, b, b
		}
	}
	return p
}
