package lockstep

import (
	"container/heap"
	"runtime"
	"runtime/metrics"
	"sync"
	"time"

	"github.com/emunic/emunic/nic/port"
	"gvisor.dev/gvisor/pkg/tcpip"
)

// Clock is the run's virtual clock: the devices' time and netstack's
// (stack.Options.Clock). It moves only when the Sched finds nothing
// runnable, to the earliest device or netstack timer, whose function it
// then starts, one timer at a time, each in its own goroutine.
type Clock struct {
	mu     sync.Mutex
	now    int64 // ns since the start of the run
	seq    uint64
	timers timerHeap
}

var _ tcpip.Clock = (*Clock)(nil)

// epoch is the wall time of virtual time 0: fixed, so that what netstack
// derives from Now is the same in every run.
var epoch = time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)

// Nanos is the time in ns since the start of the run.
func (c *Clock) Nanos() int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Now implements tcpip.Clock.
func (c *Clock) Now() time.Time { return epoch.Add(time.Duration(c.Nanos())) }

// NowMonotonic implements tcpip.Clock.
func (c *Clock) NowMonotonic() tcpip.MonotonicTime {
	return tcpip.MonotonicTime{}.Add(time.Duration(c.Nanos()))
}

// AfterFunc implements tcpip.Clock.
func (c *Clock) AfterFunc(d time.Duration, f func()) tcpip.Timer {
	t := &timer{c: c, f: f, index: -1}
	t.Reset(d)
	return t
}

// next is the time of the earliest timer, if any.
func (c *Clock) next() (int64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.timers) == 0 {
		return 0, false
	}
	return c.timers[0].when, true
}

// advance moves the clock to at (never back).
func (c *Clock) advance(at int64) {
	c.mu.Lock()
	c.now = max(c.now, at)
	c.mu.Unlock()
}

// fireOne starts the earliest timer that is due, and says whether there
// was one.
func (c *Clock) fireOne() bool {
	c.mu.Lock()
	if len(c.timers) == 0 || c.timers[0].when > c.now {
		c.mu.Unlock()
		return false
	}
	t := heap.Pop(&c.timers).(*timer)
	c.mu.Unlock()
	go t.f()
	return true
}

type timer struct {
	c     *Clock
	f     func()
	when  int64
	seq   uint64 // order among timers due at the same time: creation of the deadline
	index int    // in the heap, -1 when not pending
}

// Stop implements tcpip.Timer.
func (t *timer) Stop() bool {
	t.c.mu.Lock()
	defer t.c.mu.Unlock()
	if t.index < 0 {
		return false
	}
	heap.Remove(&t.c.timers, t.index)
	return true
}

// Reset implements tcpip.Timer.
func (t *timer) Reset(d time.Duration) {
	c := t.c
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.index >= 0 {
		heap.Remove(&c.timers, t.index)
	}
	c.seq++
	t.when, t.seq = c.now+int64(max(d, 0)), c.seq
	heap.Push(&c.timers, t)
}

type timerHeap []*timer

func (h timerHeap) Len() int { return len(h) }
func (h timerHeap) Less(i, j int) bool {
	if h[i].when != h[j].when {
		return h[i].when < h[j].when
	}
	return h[i].seq < h[j].seq
}
func (h timerHeap) Swap(i, j int) {
	h[i], h[j] = h[j], h[i]
	h[i].index, h[j].index = i, j
}
func (h *timerHeap) Push(x any) {
	t := x.(*timer)
	t.index = len(*h)
	*h = append(*h, t)
}
func (h *timerHeap) Pop() any {
	old := *h
	t := old[len(old)-1]
	old[len(old)-1] = nil
	*h = old[:len(old)-1]
	t.index = -1
	return t
}

// settler waits for the process's goroutines to block.
type settler struct {
	samples []metrics.Sample
	pauses  []metrics.Sample
	// parked is how many goroutines sat in a system call for good when
	// the run began: os/signal's receiver waits for signals in one.
	parked uint64
}

func newSettler() *settler {
	s := &settler{samples: []metrics.Sample{
		{Name: "/sched/goroutines/running:goroutines"},
		{Name: "/sched/goroutines/runnable:goroutines"},
		{Name: "/sched/goroutines/not-in-go:goroutines"},
	}, pauses: []metrics.Sample{
		{Name: "/sched/pauses/total/gc:seconds"},
		{Name: "/sched/pauses/total/other:seconds"},
	}}
	s.parked = ^uint64(0)
	for range 16 {
		metrics.Read(s.samples)
		s.parked = min(s.parked, s.samples[2].Value.Uint64())
		runtime.Gosched()
	}
	return s
}

// quiet reads the scheduler's counts once: nothing running but the
// caller, nothing runnable, nothing in a system call.
func (s *settler) quiet() bool {
	metrics.Read(s.samples)
	return s.samples[0].Value.Uint64() <= 1 && s.samples[1].Value.Uint64() == 0 && s.samples[2].Value.Uint64() <= s.parked
}

// stops counts the stop-the-world pauses so far. A goroutine whose P is
// stopping for one is in none of the counts quiet reads; the pause is
// counted once the world starts again.
func (s *settler) stops() uint64 {
	metrics.Read(s.pauses)
	var n uint64
	for _, p := range s.pauses {
		for _, c := range p.Value.Float64Histogram().Counts {
			n += c
		}
	}
	return n
}

// settle returns once no other goroutine of the process is running,
// runnable or in a system call (beyond those that were there for good when
// the run began): every one is blocked, and only another could wake it
// (or a timer of the real clock, which a deterministic run must not
// depend on). It reads the scheduler's counts (runtime/metrics) until two
// readings in a row, a yield apart, say so, with no stop of the world
// begun or ended around them (the yield after the second waits for one in
// progress).
func (s *settler) settle() {
	for spins := 0; ; spins++ {
		if spins >= 64 {
			// A goroutine in a system call (a file written) can take
			// a while; do not burn the CPU it needs.
			time.Sleep(20 * time.Microsecond)
		}
		stw := s.stops()
		if !s.quiet() {
			runtime.Gosched()
			continue
		}
		runtime.Gosched()
		if !s.quiet() {
			runtime.Gosched()
			continue
		}
		runtime.Gosched()
		if s.stops() == stw {
			return
		}
	}
}

// Wire is the clock for the wire's impairments (port.WireConfig.Clock).
func (c *Clock) Wire() port.Clock { return wireClock{c} }

type wireClock struct{ c *Clock }

func (w wireClock) Nanos() int64 { return w.c.Nanos() }
func (w wireClock) AfterFunc(d time.Duration, f func()) port.ClockTimer {
	return w.c.AfterFunc(d, f)
}
