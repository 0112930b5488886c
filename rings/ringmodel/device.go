package ringmodel

import "github.com/emunic/emunic/rings"

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
