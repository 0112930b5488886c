package ringmodel

import (
	"fmt"

	"github.com/emunic/emunic/rings"
)

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
