// Package lockstep runs emulated hosts and their NICs one at a time on a
// virtual clock, so that two runs of one scenario do the same things in the
// same order: the same ring entries, memory writes and frames, at the same
// device times (a deterministic run; docs/trace.md).
//
// The devices are manual (nic.Config.Manual): a Sched steps each in turn
// on one goroutine, and between two steps lets the hosts run until every
// goroutine of the process is blocked (runtime/metrics counts them). A device's step then sees
// whatever the hosts had done by the end of the previous one, never a
// publish racing it; the hosts in turn see a step's notifications and
// interrupts only once it is over, one vector at a time.
//
// Hosts A and B share nothing but the wire, which only the devices touch,
// so what one host does between two steps cannot depend on what the other
// does meanwhile. Inside one host, a burst of received frames would race
// netstack's processor against the interrupt handler (how many segments
// one processor pass takes decides the ACKs it sends): the handler yields
// after each packet it hands up (tcpstack.DriverConfig.Yield), and the
// Sched lets it go on only when the host is quiet again, one host at a
// time in the order the devices were added.
//
// Time is virtual (Clock) and advances only when nothing can run, to the
// earliest device or netstack timer; timers due together fire one at a
// time, in the order they were set. Nothing of a run may wait on the real
// clock for anything but a failure (the demo's idle timeouts): a real
// timer firing would come at a different point of the run each time.
package lockstep

import (
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/rings"
)

// Sched steps manual devices in lockstep with their hosts.
type Sched struct {
	settle func()
	clock  Clock
	wake   chan struct{} // a doorbell, a frame at a port, a yield, a change of devices
	done   chan struct{} // closed when the loop has ended

	mu      sync.Mutex
	devs    []*Dev // in the order they were added
	nextID  int
	closing bool
}

// New starts a Sched. No other goroutine of the process should be busy
// meanwhile: between steps, the Sched waits for every one to block.
func New() *Sched {
	s := &Sched{settle: newSettler().settle, wake: make(chan struct{}, 1), done: make(chan struct{})}
	go s.run()
	return s
}

// Clock is the run's clock, for the hosts' netstacks.
func (s *Sched) Clock() *Clock { return &s.clock }

// Now is the device clock: nanoseconds of virtual time since the Sched
// started.
func (s *Sched) Now() int64 { return s.clock.Nanos() }

// Close ends the loop once every device has stopped, and waits for it.
func (s *Sched) Close() {
	s.mu.Lock()
	s.closing = true
	s.mu.Unlock()
	s.kick()
	<-s.done
}

func (s *Sched) kick() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Dev is a manual device as its host sees it under a Sched (it satisfies
// tcpstack.Device): started, stepped and stopped by the Sched.
type Dev struct {
	s   *Sched
	d   *nic.Device
	id  int
	vec rings.Vectors // the host's vectors

	rang    atomic.Bool    // the host rang since the last step
	pending [3]atomic.Bool // vectors the current step raised: notify, tx space, command
	parked  bool           // the last step found nothing to do (Sched goroutine)
	stopped bool           // under s.mu

	yieldMu sync.Mutex
	yields  []yielder // the host's goroutines waiting to go on
}

// yielder is a host goroutine waiting in Yield.
type yielder struct {
	key uint32
	ch  chan struct{}
}

// Device wraps a manual device (nic.Config.Manual) for its host; the Sched
// steps it from Start to Stop.
func (s *Sched) Device(d *nic.Device) *Dev {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nextID++
	return &Dev{s: s, d: d, id: s.nextID}
}

// MAC implements tcpstack.Device.
func (v *Dev) MAC() [6]byte { return v.d.MAC() }

// MTU implements tcpstack.Device.
func (v *Dev) MTU() int { return v.d.MTU() }

// TxChecksum implements tcpstack.TxChecksummer.
func (v *Dev) TxChecksum() bool { return v.d.TxChecksum() }

// Start implements tcpstack.Device: the device raises its vectors into the
// Sched, which passes them on when the step is over.
func (v *Dev) Start(rc rings.RingConfig, vec rings.Vectors) error {
	v.vec = vec
	held := rings.Vectors{}
	if vec.Notify != nil {
		held.Notify = heldVector{v, 0}
	}
	if vec.TxSpace != nil {
		held.TxSpace = heldVector{v, 1}
	}
	if vec.Command != nil {
		held.Command = heldVector{v, 2}
	}
	if err := v.d.Start(rc, held); err != nil {
		return err
	}
	v.d.WatchPort(v.s.kick)
	v.s.mu.Lock()
	v.s.devs = append(v.s.devs, v)
	v.s.mu.Unlock()
	v.s.kick()
	return nil
}

// Doorbell implements tcpstack.Device.
func (v *Dev) Doorbell() rings.Doorbell { return doorbell{v, v.d.Doorbell()} }

// Stop implements tcpstack.Device: the device's final step, at the Sched's
// clock, and it is stepped no more.
func (v *Dev) Stop() error {
	v.s.mu.Lock()
	if v.stopped {
		v.s.mu.Unlock()
		return nil
	}
	v.stopped = true
	for i, d := range v.s.devs {
		if d == v {
			v.s.devs = append(v.s.devs[:i], v.s.devs[i+1:]...)
			break
		}
	}
	v.s.mu.Unlock()
	v.s.kick()
	return v.d.StopAt(v.s.Now())
}

// Yield returns once the Sched has let every other goroutine of the run
// block (and the yielders before it go on): the host's interrupt handler
// calls it after each thing it hands up, a completion loop before it
// announces that it sleeps. key orders yielders of the host that wait at
// the same time (lowest first; the interrupt handler is 0), since their
// arrival order is the scheduler's.
func (v *Dev) Yield(key uint32) {
	ch := make(chan struct{})
	v.yieldMu.Lock()
	v.yields = append(v.yields, yielder{key, ch})
	v.yieldMu.Unlock()
	v.s.kick()
	<-ch
}

// release lets the yielder with the lowest key go on; false if none
// waits.
func (v *Dev) release() bool {
	v.yieldMu.Lock()
	defer v.yieldMu.Unlock()
	if len(v.yields) == 0 {
		return false
	}
	k := 0
	for i, y := range v.yields {
		if y.key < v.yields[k].key {
			k = i
		}
	}
	close(v.yields[k].ch)
	v.yields = append(v.yields[:k], v.yields[k+1:]...)
	return true
}

type doorbell struct {
	v    *Dev
	real rings.Doorbell
}

func (b doorbell) Kick() {
	b.v.rang.Store(true)
	b.real.Kick()
	b.v.s.kick()
}

// RDMADoorbell implements tcpstack.RDMADoorbellDevice: the device's RDMA
// doorbell registers, each write a doorbell the Sched steps the device for.
func (v *Dev) RDMADoorbell() rings.RDMADoorbell { return rdmaDoorbell{v, v.d.RDMADoorbell()} }

type rdmaDoorbell struct {
	v    *Dev
	real rings.RDMADoorbell
}

func (b rdmaDoorbell) QPDoorbell(qpn uint32) bool {
	if !b.real.QPDoorbell(qpn) {
		return false
	}
	b.v.rang.Store(true)
	b.v.s.kick()
	return true
}

func (b rdmaDoorbell) ArmCQ(cq, flags uint32) bool {
	if !b.real.ArmCQ(cq, flags) {
		return false
	}
	b.v.rang.Store(true)
	b.v.s.kick()
	return true
}

// heldVector is a vector the device raises during a step: the Sched raises
// the host's once the step is over.
type heldVector struct {
	v *Dev
	i int
}

func (h heldVector) Kick() { h.v.pending[h.i].Store(true) }

func (v *Dev) vector(i int) rings.Doorbell {
	switch i {
	case 0:
		return v.vec.Notify
	case 1:
		return v.vec.TxSpace
	}
	return v.vec.Command
}

// devices returns the devices to step, or nil once the Sched closes and
// none is left.
func (s *Sched) devices() ([]*Dev, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*Dev(nil), s.devs...), s.closing && len(s.devs) == 0
}

// quiet lets the hosts run until nothing can: settle, then each yielder
// in turn (lowest device, then lowest key, first), settling after each.
func (s *Sched) quiet() {
	for {
		s.settle()
		s.mu.Lock()
		devs := s.devs
		s.mu.Unlock()
		released := false
		for _, v := range devs {
			if v.release() {
				released = true
				break
			}
		}
		if !released {
			return
		}
	}
}

func (s *Sched) run() {
	defer close(s.done)
	for {
		s.quiet()
		// What woke us is about to be looked at: a kick from now on
		// is news.
		select {
		case <-s.wake:
		default:
		}
		devs, end := s.devices()
		if end {
			return
		}
		work := 0
		for _, v := range devs {
			w := v.d.Step(s.Now(), v.rang.Swap(false), v.parked)
			v.parked = w == 0
			work += w
			for i := range v.pending {
				if v.pending[i].Swap(false) {
					v.vector(i).Kick()
					s.quiet()
				}
			}
		}
		if work > 0 {
			continue
		}
		select {
		case <-s.wake: // a doorbell, a frame, a device come or gone
			continue
		default:
		}
		if s.clock.fireOne() {
			continue // the next pass settles what it started
		}
		// Nothing to do at this time: on to the earliest timer.
		now := s.Now()
		next, ok := s.clock.next()
		for _, v := range devs {
			if dl := v.d.NextDeadline(); dl != delegation.NoDeadline && (!ok || dl < next) {
				next, ok = dl, true
			}
		}
		if !ok {
			<-s.wake // only the real clock's timers are left
			continue
		}
		// A device whose deadline has passed did what it could at
		// this time: never step it again at the same time.
		s.clock.advance(max(next, now+1))
	}
}
