// Package ringmodel is an exhaustive model checker for the ring protocol of
// docs/rings.md ("Index and doorbell protocol"): one producer and one
// consumer (or a few agents sharing rings) whose every interleaving is
// explored for small rings, with the invariants of the protocol checked in
// every reachable state.
//
// A ring implementation is described as agents, each a Program: a list of
// Steps over the shared State, run one at a time. A step is atomic and makes
// at most one access to shared memory (an index or flag word, an entry's
// control word, a doorbell); that is the granularity at which a real agent
// can be interleaved with its peer. Memory is sequentially consistent, as
// Go's sync/atomic and the full barriers docs/rings.md asks for make it.
//
// The checker (Check) explores every interleaving breadth first, with a
// visited set of states, and reports the first violation as a *Violation
// holding the shortest interleaving that reaches it. What it checks:
//
//   - ghost invariants of the shared memory in every state: every entry
//     below the published PI carries its lap's phase tag and was written,
//     PI − CI never exceeds Count, CI never passes what was consumed;
//   - at every entry write: no slot is overwritten before its previous
//     entry was consumed and released (and, on a command ring, its status
//     read by the producer);
//   - at every entry the consumer takes: in order, exactly once, below the
//     published PI, with the right phase tag and contents;
//   - at every status read-back (command ring): the status belongs to that
//     entry, never to the previous lap's;
//   - the agents' own invariants (Program.Invariant);
//   - no lost wake-up: a state in which no agent can move must have the
//     work done (System.Goal); one in which agents can move but the work
//     can never be completed is reported too (progress).
//
// Standard agents that follow docs/rings.md and mirror the Go code in
// package rings and its users are in agents.go (Producer, Consumer,
// NotifyProducer, Device), standard systems in systems.go (TxRing,
// NotifyRing, CommandRing, DeviceRings). Another implementation (RTL,
// firmware, C) is checked by writing its agent as a Program against the
// same Ctx operations (whose ghost checks are the rules) and pairing it
// with a standard peer: see the package example.
package ringmodel

import (
	"fmt"
	"strings"

	"github.com/emunic/emunic/rings"
)

// Limits of the state vector. Small on purpose: the checker is exhaustive
// and the state space grows exponentially with every one of them.
const (
	MaxSlots   = 8   // entries per ring
	MaxRings   = 2   // rings in one system
	MaxBells   = 4   // doorbells in one system
	MaxAgents  = 3   // agents in one system
	NumRegs    = 10  // private registers per agent
	MaxEntries = 254 // entries per ring in all (ghost counters are bytes)
)

// Halted is the program counter of an agent that has finished.
const Halted = 0xFF

// Regs are an agent's private registers: its copies of the indices,
// counters, loaded values. Their meaning is up to the Program.
type Regs [NumRegs]uint32

// RingMem is one ring's shared memory as the protocol sees it, plus the
// checker's ghost bookkeeping (which a correct agent never needs to read).
type RingMem struct {
	PI, CI         uint32          // header index words
	CFlags, PFlags uint32          // header flag words: consumer's, producer's
	Ctl            [MaxSlots]uint8 // low byte of each slot's control word

	// Ghost state. Body and Status hold 1 + (index − Base) of the entry
	// whose body, or whose command status, the slot holds; 0 for none (or
	// an entry from before Base).
	Body     [MaxSlots]uint8
	Status   [MaxSlots]uint8
	Produced uint8 // entries written (the producer writes Base+Produced next)
	Consumed uint8 // entries taken (the consumer takes Base+Consumed next)
	Reaped   uint8 // command ring: statuses read back by the producer
}

// Bell is a doorbell. Latched is the one-deep latch of rings.Bell: a kick
// while nobody waits is remembered once. Waiting is used only by lossy
// bells (BellSpec.Lossy), which drop a kick nobody waits for.
type Bell struct {
	Latched, Waiting bool
}

// Mem is the shared state of a system.
type Mem struct {
	Rings [MaxRings]RingMem
	Bells [MaxBells]Bell
}

// State is one global state: shared memory and every agent's program
// counter, return address and registers.
type State struct {
	Mem
	PC   [MaxAgents]uint8
	Ret  [MaxAgents]uint8
	Regs [MaxAgents]Regs
}

// RingSpec is one ring's geometry and workload.
type RingSpec struct {
	Name    string
	Count   uint32 // entries, a power of two, at most MaxSlots
	Entries uint32 // entries the producer writes in all (a few laps)
	// Base is the initial PI and CI. Non-zero starts the ring as if Base
	// entries had gone through it (slots carry the last lap's phase, and
	// on a command ring its DONE): near 1<<32 it crosses the u32 wrap.
	Base    uint32
	Command bool // entries are completed in place (status write-back)
}

// BellSpec names a doorbell. Lossy makes it drop kicks that arrive while
// nobody waits (no latch): a deliberate defect, to show the latch matters.
type BellSpec struct {
	Name  string
	Lossy bool
}

// System is what Check explores: rings, doorbells and agents.
type System struct {
	Name   string
	Rings  []RingSpec
	Bells  []BellSpec
	Agents []*Program
	// Goal reports whether the work is done. Nil: every ring's entries
	// were all written, published, consumed and released, and on a command
	// ring every status was read back.
	Goal func(sys *System, s *State) bool
}

// Step is one atomic step of a Program.
type Step struct {
	Label string
	// Call names the API call this step begins (for conformance tests and
	// traces); "" continues the current call.
	Call string
	Do   func(c *Ctx)
}

// Program is an agent: its steps, the first of which runs first.
type Program struct {
	Name  string
	Steps []Step
	// Regs is how many registers the program uses (kept in the state).
	Regs int
	// Init sets the initial registers.
	Init func(sys *System, r *Regs)
	// Invariant, if set, must hold in every reachable state.
	Invariant func(sys *System, m *Mem, r *Regs) error
	// Names, if set, names registers in traces.
	Names []string

	index map[string]int
	opts  any // a standard agent's options (ProducerOpts, ...)
}

// NewProgram returns a program with its labels resolved.
func NewProgram(name string, regs int, steps ...Step) *Program {
	p := &Program{Name: name, Steps: steps, Regs: regs, index: map[string]int{}}
	if len(steps) >= Halted {
		panic("ringmodel: too many steps")
	}
	for i, s := range steps {
		if _, dup := p.index[s.Label]; dup || s.Label == "" || s.Label == haltLabel {
			panic(fmt.Sprintf("ringmodel: program %s: bad or duplicate label %q", name, s.Label))
		}
		p.index[s.Label] = i
	}
	return p
}

// Label returns the label of the step at pc ("halt" when halted).
func (p *Program) Label(pc uint8) string {
	if pc == Halted || int(pc) >= len(p.Steps) {
		return haltLabel
	}
	return p.Steps[pc].Label
}

func (p *Program) pc(label string) uint8 {
	if label == haltLabel {
		return Halted
	}
	i, ok := p.index[label]
	if !ok {
		panic(fmt.Sprintf("ringmodel: program %s: no step %q", p.Name, label))
	}
	return uint8(i)
}

// haltLabel is the pseudo-label of an agent that has finished: Goto or
// Gosub to it halts the agent.
const haltLabel = "halt"

// Phase is the phase tag of free-running index i on a ring of count
// entries: 1 on even laps, 0 on odd ones (docs/rings.md "Phase tags").
func Phase(count, i uint32) uint8 {
	shift := uint32(0)
	for 1<<shift < count {
		shift++
	}
	return uint8((i>>shift)&1) ^ 1
}

// IsDone is the command producer's completion test on a control byte:
// DONE set and DONE_PHASE equal to entry i's phase (rings.IsDone).
func IsDone(count, i uint32, ctl uint8) bool {
	if ctl&rings.CtlDone == 0 {
		return false
	}
	return (ctl&rings.CtlDonePhase != 0) == (Phase(count, i) != 0)
}

// Init returns the initial state of sys: rings as docs/rings.md allocates
// them (zero at Base 0; otherwise as Base entries would have left them),
// bells clear, every agent at its first step.
func (sys *System) Init() State {
	var s State
	sys.validate()
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		m.PI, m.CI = spec.Base, spec.Base
		for slot := uint32(0); slot < spec.Count; slot++ {
			if spec.Base < spec.Count && slot >= spec.Base {
				continue // never used
			}
			// The last index below Base that used this slot.
			j := spec.Base - 1 - (spec.Base-1-slot)&(spec.Count-1)
			m.Ctl[slot] = Phase(spec.Count, j)
			if spec.Command {
				m.Ctl[slot] |= rings.CtlDone
				if Phase(spec.Count, j) != 0 {
					m.Ctl[slot] |= rings.CtlDonePhase
				}
			}
		}
	}
	for a, p := range sys.Agents {
		s.PC[a] = 0
		if p.Init != nil {
			p.Init(sys, &s.Regs[a])
		}
	}
	return s
}

func (sys *System) validate() {
	if len(sys.Rings) > MaxRings || len(sys.Bells) > MaxBells || len(sys.Agents) > MaxAgents || len(sys.Agents) == 0 {
		panic(fmt.Sprintf("ringmodel: system %s exceeds the model's limits", sys.Name))
	}
	for _, r := range sys.Rings {
		if r.Count == 0 || r.Count&(r.Count-1) != 0 || r.Count > MaxSlots || r.Entries > MaxEntries {
			panic(fmt.Sprintf("ringmodel: ring %s: bad geometry", r.Name))
		}
	}
	for _, p := range sys.Agents {
		if p.Regs > NumRegs {
			panic(fmt.Sprintf("ringmodel: program %s uses %d registers", p.Name, p.Regs))
		}
	}
}

// Done is the default goal: every ring's entries all written, published,
// consumed, released, and on a command ring read back.
func Done(sys *System, s *State) bool {
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		n := uint8(spec.Entries)
		end := spec.Base + spec.Entries
		if m.Produced != n || m.Consumed != n || m.PI != end || m.CI != end || spec.Command && m.Reaped != n {
			return false
		}
	}
	return true
}

func (sys *System) goal(s *State) bool {
	if sys.Goal != nil {
		return sys.Goal(sys, s)
	}
	return Done(sys, s)
}

// Outcome is what happened when an agent was given a step.
type Outcome int

const (
	Moved   Outcome = iota // the step ran
	Blocked                // the step cannot run in this state (asleep)
	Stopped                // the agent has halted
)

// Event is one executed step, as a trace shows it.
type Event struct {
	Agent  string
	Label  string
	Call   string
	Choice int    // which branch of a Choose, if the step chose
	Did    string // the step's shared accesses and decisions, human readable
}

func (e Event) String() string {
	return fmt.Sprintf("%-8s %-14s %s", e.Agent, e.Label, e.Did)
}

// Ctx is a step's view of the state: the operations a Step may perform.
// Every operation that touches shared memory counts as one access; a step
// making more than one panics, so a model cannot hide a race inside a step.
type Ctx struct {
	R *Regs // the agent's registers

	sys      *System
	st       *State
	prog     *Program
	agent    int
	next     uint8
	ret      int // -1: unchanged
	blocked  bool
	choice   int
	choices  int
	accesses int
	trace    bool
	did      []string
	err      error
}

// Count is ring r's entry count.
func (c *Ctx) Count(r int) uint32 { return c.sys.Rings[r].Count }

// Base is ring r's initial index.
func (c *Ctx) Base(r int) uint32 { return c.sys.Rings[r].Base }

// End is the index after ring r's last entry (Base + Entries).
func (c *Ctx) End(r int) uint32 { return c.sys.Rings[r].Base + c.sys.Rings[r].Entries }

// Phase is the phase tag of index i on ring r.
func (c *Ctx) Phase(r int, i uint32) uint8 { return Phase(c.Count(r), i) }

func (c *Ctx) slot(r int, i uint32) uint32 { return i & (c.Count(r) - 1) }

func (c *Ctx) access() {
	c.accesses++
	if c.accesses > 1 {
		panic(fmt.Sprintf("ringmodel: %s step %q makes more than one shared access", c.prog.Name, c.prog.Label(c.pcNow())))
	}
}

func (c *Ctx) pcNow() uint8 { return c.st.PC[c.agent] }

// Notef records what the step did, for traces; it costs nothing while the
// checker explores.
func (c *Ctx) Notef(format string, args ...any) {
	if c.trace {
		c.did = append(c.did, fmt.Sprintf(format, args...))
	}
}

// Failf reports a violation of the protocol found by this step.
func (c *Ctx) Failf(format string, args ...any) {
	if c.err == nil {
		c.err = fmt.Errorf(format, args...)
	}
}

func (c *Ctx) ring(r int) *RingMem { return &c.st.Rings[r] }

func flagStr(v uint32) string {
	if v&rings.FlagNeedWakeup != 0 {
		return "NEED_WAKEUP"
	}
	return "0"
}

// LoadPI loads ring r's producer index.
func (c *Ctx) LoadPI(r int) uint32 {
	c.access()
	v := c.ring(r).PI
	c.Notef("load %s.PI = %d", c.sys.Rings[r].Name, v)
	return v
}

// StorePI stores ring r's producer index.
func (c *Ctx) StorePI(r int, v uint32) {
	c.access()
	c.ring(r).PI = v
	c.Notef("store %s.PI = %d", c.sys.Rings[r].Name, v)
}

// LoadCI loads ring r's consumer index.
func (c *Ctx) LoadCI(r int) uint32 {
	c.access()
	v := c.ring(r).CI
	c.Notef("load %s.CI = %d", c.sys.Rings[r].Name, v)
	return v
}

// StoreCI stores ring r's consumer index: the slots below it are the
// producer's again.
func (c *Ctx) StoreCI(r int, v uint32) {
	c.access()
	m := c.ring(r)
	if int32(v-c.Base(r)) > int32(m.Consumed) || int32(v-m.CI) < 0 {
		c.Failf("%s: CI stored as %d: %d entries consumed, CI was %d", c.sys.Rings[r].Name, v, m.Consumed, m.CI)
	}
	m.CI = v
	c.Notef("store %s.CI = %d", c.sys.Rings[r].Name, v)
}

// LoadCFlags loads ring r's consumer flags.
func (c *Ctx) LoadCFlags(r int) uint32 { return c.loadFlags(r, true) }

// StoreCFlags stores ring r's consumer flags.
func (c *Ctx) StoreCFlags(r int, v uint32) { c.storeFlags(r, true, v) }

// LoadPFlags loads ring r's producer flags.
func (c *Ctx) LoadPFlags(r int) uint32 { return c.loadFlags(r, false) }

// StorePFlags stores ring r's producer flags.
func (c *Ctx) StorePFlags(r int, v uint32) { c.storeFlags(r, false, v) }

// flags is ring r's consumer (cflags) or producer (pflags) flag word.
func (c *Ctx) flags(r int, consumer bool) (*uint32, string) {
	if consumer {
		return &c.ring(r).CFlags, "cflags"
	}
	return &c.ring(r).PFlags, "pflags"
}

func (c *Ctx) loadFlags(r int, consumer bool) uint32 {
	c.access()
	w, name := c.flags(r, consumer)
	v := *w
	c.Notef("load %s.%s = %s", c.sys.Rings[r].Name, name, flagStr(v))
	return v
}

func (c *Ctx) storeFlags(r int, consumer bool, v uint32) {
	c.access()
	w, name := c.flags(r, consumer)
	*w = v
	c.Notef("store %s.%s = %s", c.sys.Rings[r].Name, name, flagStr(v))
}

// Write writes entry i of ring r: its body, then the control word's low
// byte as the lap's phase tag (which clears a stale DONE), as one step:
// both are plain stores ordered before the next index store.
func (c *Ctx) Write(r int, i uint32) { c.WriteCtl(r, i, c.Phase(r, i)) }

// WriteCtl is Write with an explicit control byte (for defective agents).
func (c *Ctx) WriteCtl(r int, i uint32, ctl uint8) {
	c.access()
	spec := &c.sys.Rings[r]
	m := c.ring(r)
	rel := i - spec.Base
	switch {
	case rel != uint32(m.Produced):
		c.Failf("%s: entry %d written out of order (next is %d)", spec.Name, i, spec.Base+uint32(m.Produced))
	case rel >= spec.Entries:
		c.Failf("%s: entry %d written beyond the workload", spec.Name, i)
	case rel >= spec.Count:
		prev := i - spec.Count
		switch {
		case uint32(m.Consumed) <= prev-spec.Base:
			c.Failf("%s: entry %d overwrites entry %d, which was not consumed", spec.Name, i, prev)
		case int32(m.CI-prev) <= 0:
			c.Failf("%s: entry %d overwrites entry %d, which was not released (CI %d)", spec.Name, i, prev, m.CI)
		case spec.Command && uint32(m.Reaped) <= prev-spec.Base:
			c.Failf("%s: entry %d overwrites command %d before its status was read", spec.Name, i, prev)
		}
	}
	s := c.slot(r, i)
	m.Ctl[s] = ctl
	m.Body[s] = uint8(rel + 1)
	m.Produced++
	c.Notef("write %s[%d] (slot %d, phase %d)", spec.Name, i, s, ctl&rings.CtlPhase)
}

// LoadCtl loads the control byte of entry i of ring r.
func (c *Ctx) LoadCtl(r int, i uint32) uint8 {
	c.access()
	v := c.ring(r).Ctl[c.slot(r, i)]
	c.Notef("load %s[%d].ctl = %s", c.sys.Rings[r].Name, i, ctlStr(v))
	return v
}

// LoadDone is rings.IsDone: it loads entry i's control byte and reports
// whether the command is complete on this lap.
func (c *Ctx) LoadDone(r int, i uint32) bool {
	return IsDone(c.Count(r), i, c.LoadCtl(r, i))
}

func ctlStr(v uint8) string {
	s := fmt.Sprintf("phase %d", v&rings.CtlPhase)
	if v&rings.CtlDone != 0 {
		s += fmt.Sprintf(" DONE(phase %d)", (v&rings.CtlDonePhase)>>2)
	}
	return s
}

// Take is the consumer reading entry i of ring r (its body): ghost only,
// no access of its own (the control word was loaded by LoadCtl). It checks
// order, exactly-once delivery, publication and the phase tag.
func (c *Ctx) Take(r int, i uint32) {
	spec := &c.sys.Rings[r]
	m := c.ring(r)
	rel := i - spec.Base
	s := c.slot(r, i)
	switch {
	case rel != uint32(m.Consumed):
		c.Failf("%s: consumer took entry %d, next in order is %d", spec.Name, i, spec.Base+uint32(m.Consumed))
	case int32(m.PI-i) <= 0:
		c.Failf("%s: consumer took entry %d, not yet published (PI %d)", spec.Name, i, m.PI)
	case m.Ctl[s]&rings.CtlPhase != Phase(spec.Count, i):
		c.Failf("%s: consumer took entry %d with the wrong phase tag (%d)", spec.Name, i, m.Ctl[s]&rings.CtlPhase)
	case m.Body[s] != uint8(rel+1):
		c.Failf("%s: consumer took entry %d but the slot holds %s", spec.Name, i, bodyStr(spec, m.Body[s]))
	}
	m.Consumed++
	c.Notef("take %s[%d]", spec.Name, i)
}

func bodyStr(spec *RingSpec, b uint8) string {
	if b == 0 {
		return "no entry written since Base"
	}
	return fmt.Sprintf("entry %d", spec.Base+uint32(b)-1)
}

// Complete writes command i's status and then its control word with DONE
// and DONE_PHASE, keeping the phase tag (rings.Consumer.Complete). The
// consumer owns the slot, so the read-modify-write is one access.
func (c *Ctx) Complete(r int, i uint32) {
	ctl := c.ring(r).Ctl[c.slot(r, i)]&^(rings.CtlDone|rings.CtlDonePhase) | rings.CtlDone
	if c.Phase(r, i) != 0 {
		ctl |= rings.CtlDonePhase
	}
	c.CompleteCtl(r, i, ctl)
}

// CompleteCtl is Complete with an explicit control byte.
func (c *Ctx) CompleteCtl(r int, i uint32, ctl uint8) {
	c.access()
	spec := &c.sys.Rings[r]
	m := c.ring(r)
	rel := i - spec.Base
	if !spec.Command {
		c.Failf("%s: completion on a ring that is not a command ring", spec.Name)
	}
	if rel >= uint32(m.Consumed) || int32(i-m.CI) < 0 {
		c.Failf("%s: command %d completed while the consumer does not own it", spec.Name, i)
	}
	s := c.slot(r, i)
	m.Ctl[s] = ctl
	m.Status[s] = uint8(rel + 1)
	c.Notef("complete %s[%d]: status, ctl = %s", spec.Name, i, ctlStr(ctl))
}

// Reap is the producer reading command i's status after it saw it done:
// ghost only (the control word was loaded by LoadDone). It checks order and
// that the status is i's own, not the previous lap's.
func (c *Ctx) Reap(r int, i uint32) {
	spec := &c.sys.Rings[r]
	m := c.ring(r)
	rel := i - spec.Base
	s := c.slot(r, i)
	switch {
	case rel != uint32(m.Reaped):
		c.Failf("%s: producer read the status of command %d, next in order is %d", spec.Name, i, spec.Base+uint32(m.Reaped))
	case rel >= uint32(m.Produced):
		c.Failf("%s: producer read the status of command %d, which it has not written", spec.Name, i)
	case m.Status[s] != uint8(rel+1):
		c.Failf("%s: producer read the status of command %d but the slot holds %s", spec.Name, i, statusStr(spec, m.Status[s]))
	}
	m.Reaped++
	c.Notef("read status of %s[%d]", spec.Name, i)
}

func statusStr(spec *RingSpec, b uint8) string {
	if b == 0 {
		return "no status written since Base (an earlier lap's)"
	}
	return fmt.Sprintf("the status of command %d", spec.Base+uint32(b)-1)
}

// Kick rings doorbell b.
func (c *Ctx) Kick(b int) {
	c.access()
	bell := &c.st.Bells[b]
	if c.sys.Bells[b].Lossy && !bell.Waiting {
		c.Notef("kick %s (lost: nobody waits)", c.sys.Bells[b].Name)
		return
	}
	bell.Latched = true
	c.Notef("kick %s", c.sys.Bells[b].Name)
}

// Sleep waits on doorbell b: the step runs only when the bell has been
// rung (consuming the kick); until then the agent is asleep. On a lossy
// bell the agent first starts waiting (one step), and only kicks from then
// on wake it.
func (c *Ctx) Sleep(b int) {
	c.access()
	bell := &c.st.Bells[b]
	if c.sys.Bells[b].Lossy && !bell.Waiting {
		bell.Waiting = true
		c.next = c.pcNow() // wait on the same step
		c.Notef("wait on %s", c.sys.Bells[b].Name)
		return
	}
	if !bell.Latched {
		c.blocked = true
		return
	}
	bell.Latched, bell.Waiting = false, false
	c.Notef("woken by %s", c.sys.Bells[b].Name)
}

// Choose branches the exploration: the step runs once for every value in
// [0, n). At most one Choose per step.
func (c *Ctx) Choose(n int) int {
	if c.choices != 0 {
		panic("ringmodel: more than one Choose in a step")
	}
	c.choices = n
	if c.choice >= n {
		c.blocked = true // no such branch
		return 0
	}
	return c.choice
}

// Goto continues at the step labelled label ("halt" halts the agent).
func (c *Ctx) Goto(label string) { c.next = c.prog.pc(label) }

// Gosub continues at label and makes Return continue at ret: one level of
// subroutine (publish, release) shared by several callers.
func (c *Ctx) Gosub(label, ret string) {
	c.next = c.prog.pc(label)
	c.ret = int(c.prog.pc(ret))
}

// Return continues where the last Gosub said.
func (c *Ctx) Return() { c.next = c.st.Ret[c.agent] }

// Halt stops the agent: it has finished its work.
func (c *Ctx) Halt() { c.next = Halted }

// Step runs agent a's next step from state s with the given branch of its
// Choose (0 if it does not choose) and returns the new state. choices is
// the number of branches the step offers (0 or 1 if it does not choose);
// err is a violation the step found.
func (sys *System) Step(s *State, a, choice int) (next State, out Outcome, choices int, ev Event, err error) {
	return sys.step(s, a, choice, true)
}

func (sys *System) step(s *State, a, choice int, trace bool) (next State, out Outcome, choices int, ev Event, err error) {
	p := sys.Agents[a]
	pc := s.PC[a]
	if pc == Halted {
		return *s, Stopped, 0, ev, nil
	}
	next = *s
	c := Ctx{sys: sys, st: &next, prog: p, agent: a, R: &next.Regs[a], next: pc + 1, ret: -1, choice: choice, trace: trace}
	st := &p.Steps[pc]
	st.Do(&c)
	if c.blocked {
		return *s, Blocked, c.choices, ev, nil
	}
	if int(c.next) >= len(p.Steps) && c.next != Halted {
		panic(fmt.Sprintf("ringmodel: %s runs off the end of its program after %q", p.Name, st.Label))
	}
	next.PC[a] = c.next
	if c.ret >= 0 {
		next.Ret[a] = uint8(c.ret)
	}
	if trace {
		ev = Event{Agent: p.Name, Label: st.Label, Call: st.Call, Choice: choice, Did: strings.Join(c.did, "; ")}
		if c.choices > 1 {
			ev.Did += fmt.Sprintf(" [branch %d of %d]", choice, c.choices)
		}
		if c.next == Halted {
			ev.Did = strings.TrimPrefix(ev.Did+"; halt", "; ")
		}
	}
	return next, Moved, c.choices, ev, c.err
}

// Describe renders a state for humans.
func (sys *System) Describe(s *State) string {
	var b strings.Builder
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		fmt.Fprintf(&b, "%s: PI=%d CI=%d cflags=%s pflags=%s ctl=[", spec.Name, m.PI, m.CI, flagStr(m.CFlags), flagStr(m.PFlags))
		for i := uint32(0); i < spec.Count; i++ {
			if i > 0 {
				b.WriteString(" | ")
			}
			b.WriteString(ctlStr(m.Ctl[i]))
		}
		fmt.Fprintf(&b, "] written=%d consumed=%d", m.Produced, m.Consumed)
		if spec.Command {
			fmt.Fprintf(&b, " read-back=%d", m.Reaped)
		}
		fmt.Fprintf(&b, " of %d\n", spec.Entries)
	}
	for i, bs := range sys.Bells {
		st := "clear"
		if s.Bells[i].Latched {
			st = "latched"
		}
		fmt.Fprintf(&b, "bell %s: %s\n", bs.Name, st)
	}
	for a, p := range sys.Agents {
		fmt.Fprintf(&b, "%s: ", p.Name)
		pc := s.PC[a]
		switch {
		case pc == Halted:
			b.WriteString("halted")
		default:
			_, out, _, _, _ := sys.step(s, a, 0, false)
			if out == Blocked {
				fmt.Fprintf(&b, "asleep at %s", p.Label(pc))
			} else {
				fmt.Fprintf(&b, "at %s", p.Label(pc))
			}
		}
		if p.Names != nil {
			b.WriteString(" (")
			for i, n := range p.Names {
				if i > 0 {
					b.WriteString(" ")
				}
				fmt.Fprintf(&b, "%s=%d", n, s.Regs[a][i])
			}
			b.WriteString(")")
		}
		b.WriteString("\n")
	}
	return strings.TrimSuffix(b.String(), "\n")
}

// checkState checks the memory invariants and the agents' own.
func (sys *System) checkState(s *State) error {
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		out := m.PI - m.CI
		if out > spec.Count {
			return fmt.Errorf("%s: PI %d is more than a ring ahead of CI %d", spec.Name, m.PI, m.CI)
		}
		if m.PI-spec.Base > uint32(m.Produced) {
			// Report it as the consumer would see it: the entry at
			// the first unwritten index has a stale phase tag.
			i := spec.Base + uint32(m.Produced)
			s := i & (spec.Count - 1)
			return fmt.Errorf("%s: PI %d published, but entry %d below it is not written: its slot has phase %d, its lap's is %d",
				spec.Name, m.PI, i, m.Ctl[s]&rings.CtlPhase, Phase(spec.Count, i))
		}
		if m.CI-spec.Base > uint32(m.Consumed) {
			return fmt.Errorf("%s: CI %d passes the %d entries consumed", spec.Name, m.CI, m.Consumed)
		}
		for i := m.CI; i != m.PI; i++ {
			s := i & (spec.Count - 1)
			if m.Ctl[s]&rings.CtlPhase != Phase(spec.Count, i) || m.Body[s] != uint8(i-spec.Base+1) {
				return fmt.Errorf("%s: entry %d below PI %d has phase %d (its lap's is %d) and holds %s",
					spec.Name, i, m.PI, m.Ctl[s]&rings.CtlPhase, Phase(spec.Count, i), bodyStr(&spec, m.Body[s]))
			}
		}
	}
	for a, p := range sys.Agents {
		if p.Invariant != nil {
			if err := p.Invariant(sys, &s.Mem, &s.Regs[a]); err != nil {
				return fmt.Errorf("%s: %w", p.Name, err)
			}
		}
	}
	return nil
}
