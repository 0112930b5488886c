package ringmodel_test

import (
	"errors"
	"fmt"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/rings/ringmodel"
)

// A team implementing the device side of the transmit ring in RTL writes
// its consumer as a Program: one step per access it makes to host memory
// or to a doorbell, in its order. Paired with the reference host producer,
// the checker explores every interleaving; the rules (order, phase tags,
// no overwrite, no lost wake-up) are in the State operations and in the
// goal, so the team writes none of them.
func Example() {
	device := func(recheck bool) *ringmodel.Program {
		const head, pi = 0, 1 // registers
		const ring, doorbell, txspace = 0, 0, 1
		p := ringmodel.NewProgram("rtl", 2,
			ringmodel.Step{Label: "poll", Do: func(c *ringmodel.Ctx) {
				c.R[pi] = c.LoadPI(ring)
				if c.R[pi] == c.R[head] {
					c.Goto("flag")
				}
			}},
			ringmodel.Step{Label: "read", Do: func(c *ringmodel.Ctx) {
				i := c.R[head]
				if c.LoadCtl(ring, i)&rings.CtlPhase != c.Phase(ring, i) {
					c.Failf("phase error at %d", i)
				}
				c.Take(ring, i) // the descriptor is read: checked in order, once
				c.R[head]++
			}},
			// One descriptor at a time: write CI, then look at the
			// producer flags, and kick if the host waits for space.
			ringmodel.Step{Label: "release", Do: func(c *ringmodel.Ctx) { c.StoreCI(ring, c.R[head]) }},
			ringmodel.Step{Label: "release.flags", Do: func(c *ringmodel.Ctx) {
				if c.LoadPFlags(ring)&rings.FlagNeedWakeup == 0 {
					c.Goto("poll")
				}
			}},
			ringmodel.Step{Label: "release.kick", Do: func(c *ringmodel.Ctx) {
				c.Kick(txspace)
				c.Goto("poll")
			}},
			// Idle: NEED_WAKEUP, re-check PI, sleep on the doorbell.
			ringmodel.Step{Label: "flag", Do: func(c *ringmodel.Ctx) {
				c.StoreCFlags(ring, rings.FlagNeedWakeup)
				if !recheck {
					c.Goto("sleep")
				}
			}},
			ringmodel.Step{Label: "recheck", Do: func(c *ringmodel.Ctx) {
				if c.LoadPI(ring) != c.R[head] {
					c.Goto("clear")
				}
			}},
			ringmodel.Step{Label: "sleep", Do: func(c *ringmodel.Ctx) { c.Sleep(doorbell) }},
			ringmodel.Step{Label: "clear", Do: func(c *ringmodel.Ctx) {
				c.StoreCFlags(ring, 0)
				c.Goto("poll")
			}},
		)
		p.Init = func(sys *ringmodel.System, r *ringmodel.Regs) { r[head] = sys.Rings[ring].Base }
		return p
	}
	system := func(recheck bool) *ringmodel.System {
		return &ringmodel.System{
			Name:  "rtl tx",
			Rings: []ringmodel.RingSpec{{Name: "tx", Count: 2, Entries: 5}},
			Bells: []ringmodel.BellSpec{{Name: "doorbell"}, {Name: "txspace"}},
			Agents: []*ringmodel.Program{
				ringmodel.Producer("host", ringmodel.ProducerOpts{Ring: 0, Kick: 0, Wake: 1, Batch: 2, Burst: 2, Spin: 1}),
				device(recheck),
			},
		}
	}

	res, err := ringmodel.Check(system(true), ringmodel.Options{})
	fmt.Println(res, err)

	_, err = ringmodel.Check(system(false), ringmodel.Options{})
	var v *ringmodel.Violation
	if errors.As(err, &v) {
		fmt.Printf("without the re-check: %s after %d steps\n", v.Kind, len(v.Trace))
	}
	// Output:
	// 5823 states, 10959 transitions, 8 terminal, depth 54 <nil>
	// without the re-check: lost wake-up after 12 steps
}
