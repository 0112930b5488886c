package ringmodel

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// The conformance test ties the standard agents to the Go code they
// mirror. The model's steps are finer than the Go calls (a Publish is three
// steps: store PI, load the flags, kick), and a Go call cannot be stopped
// half way, so interleavings are not replayed; instead every call is
// checked on its own, from every state the model can reach:
//
// For every reachable state of a small system, and every agent standing at
// the first step of a call (Step.Call), the test builds the real thing in
// that state — a rings.Arena holding the model's ring memory, a
// rings.Producer or rings.Consumer whose private copies (tail, published,
// cached CI; head, released, cached PI) are the agent's registers, real
// rings.Bells latched as the model's are — makes the real call, runs the
// model's steps of that call without interruption, and compares: the
// header words, every slot's control byte, every doorbell's latch, Tail or
// Head, Pending, what the call returned (Reserve's and Burst's counts,
// Next's and Peek's nil, IsDone, Free, Available) and afterwards Free or
// Available (which reveal the cached peer index). Calls that sleep (Wait,
// WaitSpace, Park) run in a goroutine inside a synctest bubble: the model
// sleeping must mean the real call blocks, with the same memory; both are
// then kicked and compared again.
//
// The states include every interleaving of the peer's steps, so each call
// is checked against every state its peer can leave mid-call. What it
// cannot check is the order of the accesses inside one Go call (that PI is
// stored before the flags are loaded): that is the model's assumption
// about the code, stated in docs/rings.md and kept by reading ring.go.

const confEntrySize = 64

var conformanceConfigs = []Config{
	{Count: 1, Entries: 3, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 1, Spin: 0},
	{Count: 2, Entries: 5, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 2, Spin: 1, IdleFlush: true},
	{Count: 2, Entries: 5, PBatch: 1, PBurst: 1, CBatch: 1, CBurst: 2, Spin: 1, Base: 1<<32 - 3},
	{Count: 4, Entries: 6, PBatch: 2, PBurst: 2, CBatch: 2, CBurst: 4, Spin: 0, IdleFlush: true},
}

// world is the real code put in a model state, seen from one agent.
type world struct {
	sys   *System
	a     int
	mem   []byte
	ring  rings.Layout
	bells []*rings.Bell
	p     *rings.Producer
	c     *rings.Consumer
}

func (w *world) word(off int) *uint32 { return (*uint32)(unsafe.Pointer(&w.mem[off])) }
func (w *world) ctl(slot uint32) *byte {
	return &w.mem[rings.HeaderSize+int(slot)*confEntrySize]
}

func (w *world) bell(i int) rings.Doorbell {
	if i < 0 {
		return nil
	}
	return w.bells[i]
}

// hostMem is one ring in host memory, reused from check to check (every
// byte the ring mechanics read is rewritten each time).
type hostMem struct {
	arena *rings.Arena
	ring  rings.Layout
	mem   []byte
}

func newHostMem(count uint32) (*hostMem, error) {
	arena, err := rings.NewArena(rings.HeaderSize + MaxSlots*confEntrySize + rings.CacheLine)
	if err != nil {
		return nil, err
	}
	l, err := rings.AllocRing(arena, count, confEntrySize)
	if err != nil {
		return nil, err
	}
	mem, err := arena.Map(l.Base, l.Size())
	return &hostMem{arena: arena, ring: l, mem: mem}, err
}

// newWorld builds the real producer or consumer of agent a in state s.
func newWorld(hm *hostMem, sys *System, s *State, a int) (*world, error) {
	spec := sys.Rings[0]
	arena, l, mem := hm.arena, hm.ring, hm.mem
	clear(mem)
	var err error
	w := &world{sys: sys, a: a, mem: mem, ring: l}
	for range sys.Bells {
		w.bells = append(w.bells, rings.NewBell())
	}
	r := &s.Regs[a]
	// The private copies come from the header as it is when the side is
	// opened (and from the calls that follow): write the model's copies
	// there first, then the model's memory over them.
	producer := func(batch uint32, peer rings.Doorbell, tail, pub, ci uint32) error {
		binary.LittleEndian.PutUint32(mem[rings.OffProducerIndex:], pub)
		binary.LittleEndian.PutUint32(mem[rings.OffConsumerIndex:], ci)
		if w.p, err = rings.NewProducer(arena, l, batch, peer); err != nil {
			return err
		}
		for i := pub; i != tail; i++ {
			w.p.Commit()
		}
		if w.p.Tail() != tail || w.p.Pending() != int(tail-pub) {
			return fmt.Errorf("could not set the producer up: tail %d pending %d", w.p.Tail(), w.p.Pending())
		}
		return nil
	}
	switch o := sys.Agents[a].opts.(type) {
	case ProducerOpts:
		err = producer(o.Batch, w.bell(o.Kick), r[pTail], r[pPub], r[pCI])
	case NotifyOpts:
		err = producer(o.Batch, nil, r[nTail], r[nPub], r[nCI])
	case ConsumerOpts:
		binary.LittleEndian.PutUint32(mem[rings.OffProducerIndex:], r[cPI])
		binary.LittleEndian.PutUint32(mem[rings.OffConsumerIndex:], r[cRel])
		if w.c, err = rings.NewConsumer(arena, l, o.Batch, w.bell(o.Kick)); err != nil {
			return nil, err
		}
		if n := r[cHead] - r[cRel]; n > 0 {
			if n >= min(o.Batch, spec.Count) {
				return nil, fmt.Errorf("%d consumed entries not released at a call boundary", n)
			}
			w.c.PopN(int(n))
		}
	default:
		return nil, fmt.Errorf("agent %s is not a standard agent", sys.Agents[a].Name)
	}
	if err != nil {
		return nil, err
	}
	m := &s.Rings[0]
	binary.LittleEndian.PutUint32(mem[rings.OffProducerIndex:], m.PI)
	binary.LittleEndian.PutUint32(mem[rings.OffConsumerIndex:], m.CI)
	binary.LittleEndian.PutUint32(mem[rings.OffConsumerFlags:], m.CFlags)
	binary.LittleEndian.PutUint32(mem[rings.OffProducerFlags:], m.PFlags)
	for slot := uint32(0); slot < spec.Count; slot++ {
		*w.ctl(slot) = m.Ctl[slot]
	}
	for i := range sys.Bells {
		if s.Bells[i].Latched {
			w.bells[i].Kick()
		}
	}
	return w, nil
}

// obs is what the test compares: shared memory, doorbells, the agent's
// own index and unpublished count.
type obs struct {
	PI, CI, CFlags, PFlags uint32
	Ctl                    [MaxSlots]uint8
	Latched                [MaxBells]bool
	Index                  uint32 // Tail or Head
	Pending                uint32 // producer: committed, not published
}

func (o obs) diff(want obs) string {
	var d []string
	f := func(name string, got, want any) {
		if got != want {
			d = append(d, fmt.Sprintf("%s: real %v, model %v", name, got, want))
		}
	}
	f("PI", o.PI, want.PI)
	f("CI", o.CI, want.CI)
	f("cflags", o.CFlags, want.CFlags)
	f("pflags", o.PFlags, want.PFlags)
	f("ctl", o.Ctl, want.Ctl)
	f("latches", o.Latched, want.Latched)
	f("index", o.Index, want.Index)
	f("pending", o.Pending, want.Pending)
	return strings.Join(d, "; ")
}

// observe reads the real side. Only the shared words and latches (mid
// call, with the call's goroutine asleep) or everything (after it).
func (w *world) observe(private bool) obs {
	var o obs
	o.PI = atomic.LoadUint32(w.word(rings.OffProducerIndex))
	o.CI = atomic.LoadUint32(w.word(rings.OffConsumerIndex))
	o.CFlags = atomic.LoadUint32(w.word(rings.OffConsumerFlags))
	o.PFlags = atomic.LoadUint32(w.word(rings.OffProducerFlags))
	for i := range w.sys.Bells {
		o.Latched[i] = len(w.bells[i].C()) == 1
	}
	if !private {
		return o
	}
	for slot := uint32(0); slot < w.sys.Rings[0].Count; slot++ {
		o.Ctl[slot] = *w.ctl(slot)
	}
	if w.p != nil {
		o.Index, o.Pending = w.p.Tail(), uint32(w.p.Pending())
	} else {
		o.Index = w.c.Head()
	}
	return o
}

// expect is obs of agent a in model state s.
func expect(sys *System, s *State, a int, private bool) obs {
	var o obs
	m := &s.Rings[0]
	o.PI, o.CI, o.CFlags, o.PFlags = m.PI, m.CI, m.CFlags, m.PFlags
	for i := range sys.Bells {
		o.Latched[i] = s.Bells[i].Latched
	}
	if !private {
		return o
	}
	o.Ctl = m.Ctl
	r := &s.Regs[a]
	switch sys.Agents[a].opts.(type) {
	case ProducerOpts:
		o.Index, o.Pending = r[pTail], r[pTail]-r[pPub]
	case NotifyOpts:
		o.Index, o.Pending = r[nTail], r[nTail]-r[nPub]
	case ConsumerOpts:
		o.Index = r[cHead]
	}
	return o
}

// branch is one way the model runs a call without interruption.
type branch struct {
	end     State
	labels  []string
	choice  int  // the branch taken at the call's Choose, -1 if none
	asleep  bool // stopped at a Sleep with no kick latched
	choices int
}

// runCall runs agent a from s until stop says a step begins the next call,
// the agent halts, or it falls asleep, once per branch of a Choose.
func runCall(t *testing.T, sys *System, s State, a int, stop func(pc uint8) bool) []branch {
	var out []branch
	var walk func(s State, b branch, first bool)
	walk = func(s State, b branch, first bool) {
		for n := 0; ; n++ {
			pc := s.PC[a]
			if pc == Halted || !first && stop(pc) {
				b.end = s
				out = append(out, b)
				return
			}
			if n > 64 {
				t.Fatalf("%s: call from %v does not end", sys.Name, b.labels)
			}
			next, res, choices, _, err := sys.step(&s, a, 0, false)
			if err != nil {
				t.Fatalf("%s: the model fails in a call: %v", sys.Name, err)
			}
			if res == Blocked {
				b.end, b.asleep = s, true
				out = append(out, b)
				return
			}
			b.labels = append(b.labels, sys.Agents[a].Label(pc))
			if choices > 1 {
				b.choices = choices
				for ch := 1; ch < choices; ch++ {
					alt, _, _, _, err := sys.step(&s, a, ch, false)
					if err != nil {
						t.Fatalf("%s: the model fails in a call: %v", sys.Name, err)
					}
					bb := b
					bb.labels = append([]string(nil), b.labels...)
					bb.choice = ch
					walk(alt, bb, false)
				}
				b.choice = 0
			}
			s, first = next, false
		}
	}
	walk(s, branch{choice: -1}, true)
	return out
}

// conformance checks the calls of every agent from every reachable state
// of sys and returns how many were checked, by call.
func conformance(t *testing.T, sys *System) map[string]int {
	counts := map[string]int{}
	hm, err := newHostMem(sys.Rings[0].Count)
	if err != nil {
		t.Fatal(err)
	}
	fails := 0
	fail := func(format string, args ...any) {
		t.Helper()
		fails++
		if fails <= 5 {
			t.Errorf(format, args...)
		}
	}
	_, err = Check(sys, Options{NoProgress: true, Visit: func(s *State) {
		if fails > 5 {
			return
		}
		for a, prog := range sys.Agents {
			pc := s.PC[a]
			if pc == Halted || prog.Steps[pc].Call == "" {
				continue
			}
			step := prog.Steps[pc]
			isCall := func(pc uint8) bool { return prog.Steps[pc].Call != "" }
			for _, br := range runCall(t, sys, *s, a, isCall) {
				key := prog.Name + "." + step.Call
				counts[key]++
				if msg := checkCall(t, hm, sys, s, a, step, br); msg != "" {
					fail("%s\n%s at %s (%s), model steps %v:\n  %s\nfrom state:\n%s", sys.Name, prog.Name, step.Label, step.Call,
						br.labels, msg, sys.Describe(s))
				}
			}
			// The host's Park as a whole, from where its Burst finds
			// nothing.
			if o, ok := prog.opts.(ConsumerOpts); ok && o.ReleaseEachBurst && step.Label == "burst" &&
				(runtime.GOMAXPROCS(0) > 1 || o.Spin == 0) {
				burst := prog.pc("burst")
				for _, br := range runCall(t, sys, *s, a, func(pc uint8) bool { return pc == burst }) {
					if len(br.labels) < 2 || br.labels[1] == "take" {
						continue // entries: no Park
					}
					counts[prog.Name+".Park"]++
					if msg := checkPark(t, hm, sys, s, a, o, br); msg != "" {
						fail("%s\n%s: Park from %s, model steps %v:\n  %s\nfrom state:\n%s", sys.Name, prog.Name, step.Label, br.labels, msg, sys.Describe(s))
					}
				}
			}
		}
	}})
	if err != nil {
		t.Fatalf("%s: %v", sys.Name, err)
	}
	return counts
}

// blocking says which calls may sleep.
var blocking = map[string]bool{"Wait": true, "WaitSpace": true}

// checkCall makes the real call agent a's step begins and compares it
// with the model's branch br.
func checkCall(t *testing.T, hm *hostMem, sys *System, s *State, a int, step Step, br branch) (msg string) {
	if blocking[step.Call] {
		synctest.Test(t, func(t *testing.T) { msg = checkSleeping(t, hm, sys, s, a, br, step, nil) })
		return msg
	}
	w, err := newWorld(hm, sys, s, a)
	if err != nil {
		return err.Error()
	}
	res, err := w.call(s, a, step, br)
	if err != nil {
		return err.Error()
	}
	return w.compare(&br.end, a, res)
}

// result is what a call returned, compared with the model's decision.
type result struct {
	what      string
	got, want int
}

func (w *world) compare(end *State, a int, res []result) string {
	var d []string
	if diff := w.observe(true).diff(expect(w.sys, end, a, true)); diff != "" {
		d = append(d, diff)
	}
	for _, r := range res {
		if r.got != r.want {
			d = append(d, fmt.Sprintf("%s: real %d, model %d", r.what, r.got, r.want))
		}
	}
	// Free and Available answer from the cached peer index when it is
	// not used up: they show the real cache agrees with the model's.
	r := &end.Regs[a]
	m := &end.Rings[0]
	count := w.sys.Rings[0].Count
	switch w.sys.Agents[a].opts.(type) {
	case ConsumerOpts:
		want := r[cPI] - r[cHead]
		if want == 0 {
			want = m.PI - r[cHead]
		}
		if got := w.c.Available(); got != int(want) {
			d = append(d, fmt.Sprintf("Available after the call: real %d, model %d", got, want))
		}
	case ProducerOpts, NotifyOpts:
		tail, ci := r[pTail], r[pCI]
		if _, ok := w.sys.Agents[a].opts.(NotifyOpts); ok {
			tail, ci = r[nTail], r[nCI]
		}
		// The real producer also refreshes its copy while it warms
		// slots, so only whether there is space is compared.
		want := count - (tail - ci)
		if want == 0 {
			want = count - (tail - m.CI)
		}
		if got := w.p.Free(); (got > 0) != (want > 0) {
			d = append(d, fmt.Sprintf("Free after the call: real %d, model %d", got, want))
		}
	}
	return strings.Join(d, "; ")
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func has(labels []string, l string) bool {
	for _, x := range labels {
		if x == l {
			return true
		}
	}
	return false
}

// call makes the real call(s) of step: what the Go code that the agent
// mirrors calls there.
func (w *world) call(s *State, a int, step Step, br branch) ([]result, error) {
	r := &s.Regs[a]
	e := &br.end.Regs[a]
	end := w.sys.Rings[0].Base + w.sys.Rings[0].Entries
	switch o := w.sys.Agents[a].opts.(type) {
	case ProducerOpts:
		switch step.Call {
		case "Reserve":
			want := min(o.Burst, end-r[pTail])
			n := w.p.Reserve(int(want))
			if n == 0 {
				w.p.Publish() // waitTxSpace
			}
			model := 0
			if has(br.labels, "reserve") && br.end.PC[a] == w.sys.Agents[a].pc("commit") {
				model = int(e[pN])
			}
			return []result{{"Reserve", n, model}}, nil
		case "Commit":
			if o.Burst == 1 {
				if w.p.Next() == nil {
					return nil, fmt.Errorf("Next before Commit found the ring full")
				}
				w.p.Commit()
			} else {
				w.p.CommitN(1)
			}
			// The caller publishes when it stops writing: a command
			// batch, the end of the work, or going idle.
			if e[pN] == 0 && (o.Completions || e[pTail] == end || br.choice == 1) {
				w.p.Publish()
			}
			return nil, nil
		case "Next":
			got := w.p.Next() != nil
			return []result{{"Next found a slot", b2i(got), b2i(br.end.PC[a] == w.sys.Agents[a].pc("reserve"))}}, nil
		case "IsDone":
			got := rings.IsDone(&w.p.Ring, r[pReap])
			want := e[pReap] != r[pReap] || br.end.PC[a] == w.sys.Agents[a].pc("done.clear")
			return []result{{"IsDone", b2i(got), b2i(want)}}, nil
		case "SetNeedWakeup":
			w.p.SetNeedWakeup(step.Label == "done.flag")
			return nil, nil
		}
	case NotifyOpts:
		switch step.Call {
		case "Next":
			if step.Label == "post" && r[nTail] == end {
				return nil, nil // the unit's pass found nothing to post
			}
			got := w.p.Next() != nil
			want := br.end.PC[a] == w.sys.Agents[a].pc("commit") || step.Label == "stall.spin" && br.end.PC[a] == w.sys.Agents[a].pc("post")
			return []result{{"Next found a slot", b2i(got), b2i(want)}}, nil
		case "Commit":
			w.p.Commit()
			return nil, nil
		case "moderate":
			if r[nPend] > 0 {
				w.p.PublishNoKick()
			}
			return nil, nil
		case "raiseInterrupt":
			if w.p.PeerSleeping() {
				w.bells[o.Interrupt].Kick()
			}
			return nil, nil
		case "SetNeedWakeup":
			w.p.SetNeedWakeup(step.Label == "stall.flag")
			return nil, nil
		case "Free":
			got := w.p.Free() > 0
			return []result{{"Free > 0", b2i(got), b2i(br.end.PC[a] == w.sys.Agents[a].pc("stall.clear"))}}, nil
		}
	case ConsumerOpts:
		switch step.Call {
		case "Burst":
			var n int
			if o.Complete {
				// The device's command service: Peek.
				e, err := w.c.Peek()
				if err != nil {
					return nil, err
				}
				n = b2i(e != nil)
			} else {
				var err error
				if n, err = w.c.Burst(int(o.Burst)); err != nil {
					return nil, err
				}
			}
			if n == 0 && o.Faults&NoReleaseBeforePark == 0 {
				w.c.Release() // the first thing a parking consumer does
			}
			return []result{{"Burst", n, int(e[cN])}}, nil
		case "Entry":
			i := r[cHead] + r[cI]
			got := w.c.Entry(i)[rings.OffCtl] & rings.CtlPhase
			return []result{{"phase of the entry", int(got), int(Phase(w.sys.Rings[0].Count, i))}}, nil
		case "Complete":
			i := r[cHead] + r[cI] - 1
			if w.c.Head() != i {
				return nil, fmt.Errorf("completing %d, head is %d", i, w.c.Head())
			}
			w.c.Complete(w.c.Entry(i))
			return nil, nil
		case "PopN":
			if o.Complete {
				w.c.Pop()
			} else {
				w.c.PopN(int(r[cN]))
			}
			if o.ReleaseEachBurst {
				w.c.Release()
			}
			return nil, nil
		case "Available":
			got := w.c.Available()
			return []result{{"Available", got, int(e[cPI] - e[cHead])}}, nil
		case "SetNeedWakeup":
			w.c.SetNeedWakeup(step.Label == "park.flag")
			return nil, nil
		}
	}
	return nil, fmt.Errorf("no real call for %s", step.Call)
}

// wakeBell is the doorbell agent a sleeps on.
func wakeBell(sys *System, a int) int {
	switch o := sys.Agents[a].opts.(type) {
	case ProducerOpts:
		return o.Wake
	case NotifyOpts:
		return o.Wake
	case ConsumerOpts:
		return o.Wake
	}
	return -1
}

// checkSleeping runs a call that may sleep in a goroutine of the current
// synctest bubble. If the model sleeps, the real call must block with the
// same shared memory; then both are kicked and must end alike. run is the
// real call (nil: the one of step).
func checkSleeping(t *testing.T, hm *hostMem, sys *System, s *State, a int, br branch, step Step, run func(w *world) []result) string {
	w, err := newWorld(hm, sys, s, a)
	if err != nil {
		return err.Error()
	}
	bell := wakeBell(sys, a)
	if run == nil {
		run = func(w *world) []result {
			switch step.Call {
			case "WaitSpace":
				ok := w.p.WaitSpace(w.bells[bell], 0)
				return []result{{"WaitSpace", b2i(ok), -1}}
			case "Wait":
				w.bells[bell].Wait(0)
			}
			return nil
		}
	}
	done := make(chan []result, 1)
	go func() { done <- run(w) }()
	synctest.Wait()
	var res []result
	end := br.end
	select {
	case res = <-done:
		if br.asleep {
			return "the model sleeps, the real call returned"
		}
	default:
		if !br.asleep {
			w.bells[bell].Kick() // let it finish
			<-done
			return "the real call blocks, the model does not sleep"
		}
		if d := w.observe(false).diff(expect(sys, &br.end, a, false)); d != "" {
			w.bells[bell].Kick()
			<-done
			return "asleep: " + d
		}
		// Kick both.
		w.bells[bell].Kick()
		res = <-done
		woken := br.end
		woken.Bells[bell].Latched = true
		prog := sys.Agents[a]
		stop := func(pc uint8) bool { return prog.Steps[pc].Call != "" }
		if step.Call == "" || step.Label == "burst" { // Park
			burst := prog.pc("burst")
			stop = func(pc uint8) bool { return pc == burst }
		}
		after := runCall(t, sys, woken, a, stop)
		if len(after) != 1 || after[0].asleep {
			return "the model does not wake up"
		}
		end = after[0].end
	}
	// Fill in the model's answers.
	r := &end.Regs[a]
	count := sys.Rings[0].Count
	for i := range res {
		switch res[i].what {
		case "WaitSpace":
			res[i].want = b2i(count-(r[pTail]-r[pCI]) > 0)
		case "Park":
			res[i].want = b2i(r[cPI] != r[cHead])
		}
	}
	return w.compare(&end, a, res)
}

// checkPark runs the host's Burst and Park as Driver.interrupts does, from
// a state where the model's burst finds nothing.
func checkPark(t *testing.T, hm *hostMem, sys *System, s *State, a int, o ConsumerOpts, br branch) (msg string) {
	synctest.Test(t, func(t *testing.T) {
		msg = checkSleeping(t, hm, sys, s, a, br, Step{Label: "burst"}, func(w *world) []result {
			n, err := w.c.Burst(int(o.Burst))
			if err != nil || n != 0 {
				return []result{{"Burst before Park", n, 0}}
			}
			ok := w.c.Park(w.bells[o.Wake], o.Spin, 0)
			return []result{{"Park", b2i(ok), -1}}
		})
	})
	return msg
}

func TestConformance(t *testing.T) {
	configs := conformanceConfigs
	if testing.Short() || raceEnabled {
		configs = configs[:2]
	}
	var mu sync.Mutex
	total := map[string]int{}
	t.Run("systems", func(t *testing.T) {
		for _, c := range configs {
			for _, sys := range []*System{TxRing(c), NotifyRing(c), CommandRing(c)} {
				t.Run(sys.Name, func(t *testing.T) {
					t.Parallel()
					counts := conformance(t, sys)
					kind := sys.Name[:strings.IndexByte(sys.Name, ' ')]
					mu.Lock()
					defer mu.Unlock()
					for k, v := range counts {
						total[kind+" "+k] += v
					}
				})
			}
		}
	})
	if t.Failed() {
		return
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b strings.Builder
	n := 0
	for _, k := range keys {
		fmt.Fprintf(&b, "\n  %-32s %6d", k, total[k])
		n += total[k]
	}
	t.Logf("%d real calls checked against the model:%s", n, b.String())
	// Every call of every standard agent must have been exercised.
	for _, want := range []string{
		"tx host.Reserve", "tx host.Commit", "tx host.Next", "tx host.WaitSpace",
		"tx device.Burst", "tx device.Entry", "tx device.PopN", "tx device.Available", "tx device.SetNeedWakeup", "tx device.Wait",
		"notify device.Next", "notify device.Commit", "notify device.moderate", "notify device.raiseInterrupt",
		"notify device.SetNeedWakeup", "notify device.Free", "notify device.Wait",
		"notify host.Burst", "notify host.PopN", "notify host.Park", "notify host.Wait",
		"command host.Reserve", "command host.Commit", "command host.IsDone", "command host.SetNeedWakeup", "command host.Wait",
		"command device.Burst", "command device.Complete", "command device.PopN", "command device.Wait",
	} {
		if total[want] == 0 && !(want == "notify host.Park" && runtime.GOMAXPROCS(0) == 1) {
			t.Errorf("no %s checked", want)
		}
	}
}
