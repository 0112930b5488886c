package ringmodel

import (
	"errors"
	"flag"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

var grid = flag.Bool("ringmodel.grid", false, "check every system on the full grid of ring sizes, batches, bursts and spins (about a minute)")

// modelConfigs are checked by default: every ring size of the grid, every
// batch and burst of 1 and 2 on each side in some combination, with and
// without spinning and idle publishes, and a start just below the u32 wrap.
// Entries cover two to three laps, so phase tags and DONE_PHASE wrap.
var modelConfigs = []Config{
	{Count: 1, Entries: 3, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
	{Count: 1, Entries: 3, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 1, IdleFlush: true},
	{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
	{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 2, Spin: 1, IdleFlush: true},
	{Count: 2, Entries: 5, PBatch: 2, PBurst: 1, CBatch: 1, CBurst: 2, Spin: 0, IdleFlush: true},
	{Count: 2, Entries: 5, PBatch: 1, PBurst: 2, CBatch: 2, CBurst: 1, Spin: 1},
	{Count: 2, Entries: 5, PBatch: 2, PBurst: 1, CBatch: 2, CBurst: 2, Spin: 0, Base: 1<<32 - 3},
	{Count: 4, Entries: 9, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 2, Spin: 0, IdleFlush: true},
	{Count: 4, Entries: 9, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 4, Spin: 0},
}

// deviceConfigs are checked with DeviceRings (three agents: its state
// space is the largest); -ringmodel.grid adds the others.
var deviceConfigs = []Config{
	{Count: 1, Entries: 2, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
}

var deviceGrid = []Config{
	{Count: 1, Entries: 3, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
	{Count: 2, Entries: 3, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
	{Count: 2, Entries: 3, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 1, Spin: 1},
	{Count: 2, Entries: 4, PBatch: 2, PBurst: 1, CBatch: 2, CBurst: 1, Spin: 0},
}

// shortConfigs are the -short (and -race) subset.
var shortConfigs = []Config{modelConfigs[0], modelConfigs[3], modelConfigs[6]}

// gridConfigs is every combination of ring size 1, 2, 4 (3, 5, 9
// entries), batch and burst 1 and 2 on both sides, spin 0 and 1, with
// idle publishes.
func gridConfigs() []Config {
	var cs []Config
	for _, n := range []uint32{1, 2, 4} {
		for _, pb := range []uint32{1, 2} {
			for _, pu := range []uint32{1, 2} {
				for _, cb := range []uint32{1, 2} {
					for _, cu := range []uint32{1, 2} {
						for _, sp := range []int{0, 1} {
							cs = append(cs, Config{Count: n, Entries: 2*n + 1, PBatch: pb, PBurst: pu, CBatch: cb, CBurst: cu, Spin: sp, IdleFlush: true})
						}
					}
				}
			}
		}
	}
	return cs
}

// systems are the one-ring standard systems.
var systems = []func(Config) *System{TxRing, NotifyRing, CommandRing}

// TestModel checks every standard system exhaustively: no invariant
// broken, no lost wake-up, and from every state the work can complete.
func TestModel(t *testing.T) {
	type run struct {
		mk  func(Config) *System
		cfg Config
	}
	var runs []run
	configs, devices := modelConfigs, deviceConfigs
	switch {
	case *grid:
		configs, devices = gridConfigs(), append(deviceConfigs, deviceGrid...)
	case testing.Short() || raceEnabled:
		configs, devices = shortConfigs, nil
	}
	for _, c := range configs {
		for _, mk := range systems {
			runs = append(runs, run{mk, c})
		}
	}
	for _, c := range devices {
		runs = append(runs, run{DeviceRings, c})
	}
	var mu sync.Mutex
	var lines []string
	states := 0
	start := time.Now()
	t.Run("systems", func(t *testing.T) {
		for _, r := range runs {
			sys := r.mk(r.cfg)
			{
				t.Run(sys.Name, func(t *testing.T) {
					t.Parallel()
					begin := time.Now()
					res, err := Check(sys, Options{})
					if err != nil {
						t.Fatal(err)
					}
					if res.Terminal == 0 {
						t.Errorf("%s: no terminal state: the work never completes", sys.Name)
					}
					mu.Lock()
					defer mu.Unlock()
					states += res.States
					lines = append(lines, fmt.Sprintf("%-75s %8d states %8d transitions  depth %3d  %v", sys.Name, res.States,
						res.Transitions, res.Depth, time.Since(begin).Round(time.Millisecond)))
				})
			}
		}
	})
	sort.Strings(lines)
	t.Logf("%d systems, %d states in all, %v:\n%s", len(lines), states, time.Since(start).Round(time.Millisecond), strings.Join(lines, "\n"))
}

// TestDeterministic: the same system explores the same states and finds
// the same counterexample.
func TestDeterministic(t *testing.T) {
	c := Config{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 2, Spin: 1, IdleFlush: true}
	r1, err1 := Check(NotifyRing(c), Options{})
	r2, err2 := Check(NotifyRing(c), Options{})
	if r1 != r2 || err1 != nil || err2 != nil {
		t.Fatalf("%v %v / %v %v", r1, err1, r2, err2)
	}
	c.ConsumerFaults = NoRecheck
	_, err1 = Check(NotifyRing(c), Options{})
	_, err2 = Check(NotifyRing(c), Options{})
	if err1 == nil || err1.Error() != err2.Error() {
		t.Fatalf("counterexamples differ:\n%v\n%v", err1, err2)
	}
}

// fault is a deliberate protocol violation the checker must catch, with
// the interleaving that shows it: the events (agent, then text in the
// step's label or accesses) must appear in the trace in this order.
type fault struct {
	name  string
	sys   func(Config) *System
	cfg   Config
	kind  string
	in    string   // in the violation's message
	trace []string // "agent: text", in order
}

var faults = []fault{
	{
		name: "consumer sleeps without re-checking PI after NEED_WAKEUP",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ConsumerFaults: NoRecheck},
		kind: "lost wake-up", in: "device asleep at park.sleep",
		// The device finds the ring empty; the host publishes and,
		// seeing no flag yet, does not kick; the device then announces
		// sleep and sleeps on entries it never looks at again.
		trace: []string{"device: load tx.PI = 0", "host: store tx.PI = 1", "host: load tx.cflags = 0", "device: store tx.cflags = NEED_WAKEUP"},
	},
	{
		name: "host interrupt handler sleeps without re-checking PI",
		sys:  NotifyRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, CBatch: 1, CBurst: 1, ConsumerFaults: NoRecheck},
		kind: "lost wake-up", in: "host asleep at park.sleep",
		trace: []string{"host: load ntf.PI = 0", "device: store ntf.PI = 1", "device: irq.load load ntf.cflags = 0", "host: store ntf.cflags = NEED_WAKEUP"},
	},
	{
		name: "producer waits for space without re-checking CI",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: NoRecheck},
		kind: "lost wake-up", in: "host asleep at ws.sleep",
		trace: []string{"host: spin load tx.CI = 0", "device: store tx.CI = 2", "device: load tx.pflags = 0", "host: store tx.pflags = NEED_WAKEUP"},
	},
	{
		name: "command host waits for DONE without re-checking the entry",
		sys:  CommandRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: NoRecheck},
		kind: "lost wake-up", in: "host asleep at done.sleep",
		trace: []string{"host: done.poll load cmd[0].ctl = phase 1", "device: complete cmd[0]", "device: load cmd.pflags = 0", "host: store cmd.pflags = NEED_WAKEUP"},
	},
	{
		name: "device waits for notification space without re-checking CI",
		sys:  NotifyRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, CBatch: 1, CBurst: 1, ProducerFaults: NoRecheck},
		kind: "lost wake-up", in: "device asleep at stall.sleep",
		trace: []string{"host: store ntf.CI = 2", "host: load ntf.pflags = 0", "device: store ntf.pflags = NEED_WAKEUP"},
	},
	{
		name: "producer loads the consumer flags before storing PI",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: FlagBeforeIndex},
		kind: "lost wake-up", in: "device asleep at park.sleep",
		trace: []string{"host: pub.store load tx.cflags = 0", "device: store tx.cflags = NEED_WAKEUP", "device: park.recheck load tx.PI", "host: pub.late store tx.PI"},
	},
	{
		name: "command host loads the consumer flags before storing PI",
		sys:  CommandRing, cfg: Config{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 1, CBurst: 1, ProducerFaults: FlagBeforeIndex},
		kind: "lost wake-up", in: "device asleep at park.sleep",
		trace: []string{"host: load cmd.cflags = 0", "device: store cmd.cflags = NEED_WAKEUP", "device: park.recheck load cmd.PI = 0", "host: store cmd.PI = 2"},
	},
	{
		name: "moderating device decides the interrupt on flags loaded before PI",
		sys:  NotifyRing, cfg: Config{Count: 2, Entries: 5, PBatch: 2, CBatch: 1, CBurst: 1, ProducerFaults: FlagBeforeIndex},
		kind: "lost wake-up", in: "host asleep at park.sleep",
		trace: []string{"device: load ntf.cflags = 0", "host: store ntf.cflags = NEED_WAKEUP", "host: park.recheck load ntf.PI", "device: mod.late store ntf.PI"},
	},
	{
		name: "consumer loads the producer flags before storing CI",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 2, CBurst: 2, ConsumerFaults: FlagBeforeIndex},
		kind: "lost wake-up", in: "host asleep at ws.sleep",
		trace: []string{"device: rel.store load tx.pflags = 0", "host: store tx.pflags = NEED_WAKEUP", "host: ws.recheck load tx.CI = 0", "device: rel.late store tx.CI = 2"},
	},
	{
		name: "command device loads the producer flags before storing CI (host waiting for space)",
		sys:  CommandRing, cfg: Config{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 1, ConsumerFaults: FlagBeforeIndex},
		kind: "lost wake-up", in: "host asleep at ws.sleep",
		trace: []string{"device: rel.store load cmd.pflags = 0", "host: store cmd.pflags = NEED_WAKEUP", "host: ws.recheck load cmd.CI = 0", "device: rel.late store cmd.CI = 2"},
	},
	{
		name: "moderating device does not interrupt before going idle",
		sys:  NotifyRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, CBatch: 1, CBurst: 1, ProducerFaults: NoIdleInterrupt},
		kind: "lost wake-up", in: "host asleep at park.sleep",
		trace: []string{"host: store ntf.cflags = NEED_WAKEUP", "device: below threshold: no interrupt yet"},
	},
	{
		name: "consumer parks without releasing what it consumed",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 2, CBurst: 1, ConsumerFaults: NoReleaseBeforePark},
		kind: "lost wake-up", in: "consumed entries not released",
		trace: []string{"device: popn head = 5", "device: store tx.cflags = NEED_WAKEUP"},
	},
	{
		name: "doorbell without a latch: a kick between re-check and sleep is lost",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, LossyBells: true},
		kind: "lost wake-up", in: "asleep",
		trace: []string{"device: park.recheck load tx.PI = 0", "host: store tx.PI = 1", "host: kick doorbell (lost: nobody waits)", "device: wait on doorbell"},
	},
	{
		name: "device parks across two rings without re-checking them",
		sys:  DeviceRings, cfg: Config{Count: 1, Entries: 2, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ConsumerFaults: NoRecheck},
		kind: "lost wake-up", in: "device asleep at park.sleep",
		trace: []string{"device: load cmd.PI = 0", "cmd: store cmd.PI = 1", "cmd: load cmd.cflags = 0", "device: store cmd.cflags = NEED_WAKEUP"},
	},
	{
		name: "device parks across two rings re-checking only the first",
		sys:  DeviceRings, cfg: Config{Count: 1, Entries: 2, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ConsumerFaults: PartialRecheck},
		kind: "lost wake-up", in: "tx: 1 published entries not consumed",
		trace: []string{"device: svc load tx.PI = 0", "tx: store tx.PI = 1", "tx: load tx.cflags = 0", "device: store tx.cflags = NEED_WAKEUP", "device: park.recheck load cmd.PI"},
	},
	{
		name: "producer stores PI before writing the entry",
		sys:  TxRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: IndexBeforeEntry},
		kind: "invariant", in: "entry 0 below it is not written: its slot has phase 0, its lap's is 1",
		trace: []string{"host: commit store tx.PI = 1"},
	},
	{
		name: "IsDone ignores DONE_PHASE: the previous lap's DONE is taken for the next",
		sys:  CommandRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: IgnoreDonePhase},
		kind: "invariant", in: "IsDone(2) is true, but the slot holds the status of command 0",
		trace: []string{"device: complete cmd[0]"},
	},
	{
		name: "the commit keeps the previous lap's DONE: two laps back looks done",
		sys:  CommandRing, cfg: Config{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, ProducerFaults: KeepDoneOnCommit},
		kind: "invariant", in: "IsDone(4) is true, but the slot holds the status of command 0",
		trace: []string{"device: complete cmd[0]", "host: write cmd[2] (slot 0, phase 0)"},
	},
}

// TestFaults: every deliberate violation is caught, with the interleaving.
func TestFaults(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			res, err := Check(f.sys(f.cfg), Options{})
			var v *Violation
			if !errors.As(err, &v) {
				t.Fatalf("not caught (%v, %v)", res, err)
			}
			t.Logf("%v", v)
			if v.Kind != f.kind || !strings.Contains(v.Err.Error(), f.in) {
				t.Errorf("caught as %s: %v; want %s: …%s…", v.Kind, v.Err, f.kind, f.in)
			}
			if i := inOrder(v.Trace, f.trace); i >= 0 {
				t.Errorf("the trace does not show %q (after the events before it)", f.trace[i])
			}
		})
	}
}

// inOrder returns the index of the first pattern not found in order in
// the trace, or -1.
func inOrder(trace []Event, pats []string) int {
	k := 0
	for _, e := range trace {
		if k == len(pats) {
			break
		}
		agent, text, _ := strings.Cut(pats[k], ": ")
		if e.Agent == agent && strings.Contains(e.Label+" "+e.Did, text) {
			k++
		}
	}
	if k == len(pats) {
		return -1
	}
	return k
}

// TestPublishBeforeWaitNotNeeded records what the model shows about a rule
// of docs/rings.md: WaitSpace publishes committed entries before it
// sleeps, but since the batch is clamped to Count, a full ring always
// holds at least one published entry the consumer has not released, so
// its release wakes the producer anyway. Skipping the publish costs
// latency (the last batch waits for the next publish), never liveness.
func TestPublishBeforeWaitNotNeeded(t *testing.T) {
	for _, c := range []Config{
		{Count: 2, Entries: 5, PBatch: 2, PBurst: 1, CBatch: 1, CBurst: 1},
		{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 2, Spin: 1},
		{Count: 4, Entries: 9, PBatch: 4, PBurst: 2, CBatch: 2, CBurst: 2},
	} {
		c.ProducerFaults = NoPublishBeforeWait
		for _, mk := range []func(Config) *System{TxRing, CommandRing} {
			if _, err := Check(mk(c), Options{}); err != nil {
				t.Error(err)
			}
		}
	}
}

// spinner is a consumer written against the API, as another team would
// write theirs: it busy-polls its cached copy of PI and never reloads it
// once it has seen the ring empty. No state deadlocks (it can always
// poll), but the work never completes: the progress check finds it.
func spinner() *Program {
	const head, pi = 0, 1
	p := NewProgram("poller", 2,
		Step{Label: "poll", Do: func(c *Ctx) {
			if c.R[head] == c.R[pi] {
				c.R[pi] = c.LoadPI(0)
				if c.R[pi] == c.R[head] {
					c.Goto("spin")
				}
				return
			}
		}},
		Step{Label: "take", Do: func(c *Ctx) {
			i := c.R[head]
			if c.LoadCtl(0, i)&rings.CtlPhase != c.Phase(0, i) {
				c.Failf("phase error at %d", i)
			}
			c.Take(0, i)
			c.R[head]++
		}},
		Step{Label: "release", Do: func(c *Ctx) {
			c.StoreCI(0, c.R[head])
			c.Goto("poll")
		}},
		Step{Label: "spin", Do: func(c *Ctx) {
			// The bug: it polls the cached index, not the shared one.
			c.Notef("cached PI = %d", c.R[pi])
			if c.R[pi] != c.R[head] {
				c.Goto("take")
			} else {
				c.Goto("spin")
			}
		}},
	)
	p.Init = func(sys *System, r *Regs) { r[head], r[pi] = sys.Rings[0].Base, sys.Rings[0].Base }
	return p
}

func TestNoProgress(t *testing.T) {
	sys := &System{
		Name:  "poller",
		Rings: []RingSpec{{Name: "tx", Count: 2, Entries: 3}},
		Bells: []BellSpec{{Name: "doorbell"}, {Name: "txspace"}},
		Agents: []*Program{
			Producer("host", ProducerOpts{Ring: 0, Kick: 0, Wake: 1, Batch: 1, Burst: 1}),
			spinner(),
		},
	}
	_, err := Check(sys, Options{})
	var v *Violation
	if !errors.As(err, &v) || v.Kind != "no progress" {
		t.Fatalf("want a progress violation, got %v", err)
	}
	t.Log(v)
}

// TestInitAtBase: a ring started at Base holds what the real code leaves
// in it after Base entries went through (phase tags and, on a command
// ring, DONE with DONE_PHASE).
func TestInitAtBase(t *testing.T) {
	for _, count := range []uint32{1, 2, 4} {
		for _, base := range []uint32{0, 1, 2, 3, 5, 6, 9} {
			hm, err := newHostMem(count)
			if err != nil {
				t.Fatal(err)
			}
			p, _ := rings.NewProducer(hm.arena, hm.ring, 1, nil)
			c, _ := rings.NewConsumer(hm.arena, hm.ring, 1, nil)
			for i := uint32(0); i < base; i++ {
				p.Next()
				p.Commit()
				e, err := c.Peek()
				if e == nil || err != nil {
					t.Fatal(e, err)
				}
				c.Complete(e)
				c.Pop()
			}
			sys := &System{Rings: []RingSpec{{Name: "cmd", Count: count, Base: base, Command: true}}, Agents: []*Program{spinner()}}
			s := sys.Init()
			for slot := uint32(0); slot < count; slot++ {
				if got := hm.mem[rings.HeaderSize+int(slot)*confEntrySize]; got != s.Rings[0].Ctl[slot] {
					t.Errorf("count %d base %d slot %d: real ctl %#x, model %#x", count, base, slot, got, s.Rings[0].Ctl[slot])
				}
			}
		}
	}
}

// TestModelConstants: the model uses the wire constants of package rings.
func TestModelConstants(t *testing.T) {
	hm, err := newHostMem(4)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := rings.NewProducer(hm.arena, hm.ring, 1, nil)
	for i := uint32(0); i < 12; i++ {
		if got, want := uint8(p.Phase(i)), Phase(4, i); got != want {
			t.Errorf("phase(%d): rings %d, model %d", i, got, want)
		}
	}
	for _, i := range []uint32{1<<32 - 1, 0} {
		if got, want := uint8(p.Phase(i)), Phase(4, i); got != want {
			t.Errorf("phase(%#x): rings %d, model %d", i, got, want)
		}
	}
}
