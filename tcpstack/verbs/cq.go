package verbs

// Completion queues (ibv_cq): rings in host memory the device produces
// completions into; CQ events arrive as notifications (Provider.Route).

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// CQ is a completion queue (ibv_cq): a ring in host memory the device
// produces completions into and Poll consumes, with no command per
// completion.
type CQ struct {
	v      *Provider
	num    uint32
	layout rings.Layout

	mu     sync.Mutex // the consumer
	cons   *rings.Consumer
	ringEr uint64
	lastEr error

	ev     chan struct{} // one-deep latch of CQ events
	done   chan struct{} // closed by Destroy
	events atomic.Uint64
	qpRefs atomic.Int32
	dead   atomic.Bool

	// Busy polling (SetBusyPoll): the spin's bound in nanoseconds (0:
	// off), and what the spins cost and found.
	busyPoll                  atomic.Int64
	spins, spinHits, spinNano atomic.Uint64

	// The posted arm (armPosted): its command and outcome function, made
	// once; armSync is set once a posted arm failed (the waiters then arm
	// synchronously and see the error).
	armMu   sync.Mutex
	armCmd  [1]tcpstack.HostCommand
	armDone func([]rings.Command, error)
	armSync atomic.Bool
}

// CQStats count a CQ's host side.
type CQStats struct {
	Events     uint64 // NtfCQEvent notifications received
	RingErrors uint64 // entries with a wrong phase tag or a bad index (skipped, never trusted)
	// Busy polling (SetBusyPoll): how many waits spun, how many of them
	// found a completion before the bound (the ARM_CQ command and the
	// wake-up they saved), and the wall time spent spinning, which is
	// what busy polling costs in CPU (the spinning goroutine keeps its
	// processor, yielding it only to runnable goroutines).
	BusySpins    uint64
	BusySpinHits uint64
	BusySpinTime time.Duration
}

// CreateCQ allocates a completion queue of at least entries entries
// (rounded up to a power of two) and announces it with CREATE_CQ. Size it
// for every completion that can be outstanding: a full CQ is an overrun
// that moves its QPs to ERROR.
func (v *Provider) CreateCQ(entries int) (*CQ, error) {
	return v.createCQ(entries)
}

func queueCount(n int, what string) (uint32, error) {
	if n <= 0 || n > MaxQueueDepth {
		return 0, fmt.Errorf("verbs: %s of %d entries (1..%d)", what, n, MaxQueueDepth)
	}
	return 1 << bits.Len32(uint32(n)-1), nil // the power of two at or above n
}

func (v *Provider) createCQ(entries int) (*CQ, error) {
	count, err := queueCount(entries, "CQ")
	if err != nil {
		return nil, err
	}
	l, err := rings.AllocCQ(v.mem, count)
	if err != nil {
		return nil, fmt.Errorf("verbs: CQ ring: %w", err)
	}
	cq, err := newCQOn(v, l)
	if err != nil {
		_ = v.mem.Free(l.Base)
		return nil, err
	}
	v.mu.Lock()
	num := -1
	for i, c := range v.cqs {
		if c == nil {
			num = i
			break
		}
	}
	if num < 0 {
		v.mu.Unlock()
		_ = v.mem.Free(l.Base)
		return nil, fmt.Errorf("verbs: all %d CQ numbers in use", maxCQNum)
	}
	cq.num = uint32(num)
	v.cqs[num] = cq
	v.mu.Unlock()
	drop := func() {
		v.mu.Lock()
		v.cqs[num] = nil
		v.mu.Unlock()
		_ = v.mem.Free(l.Base)
	}
	late := func(r rings.Command, err error) {
		switch {
		case err != nil:
			// Lost: the device may have the ring; it stays.
		case r.Status == rings.StatusOK:
			// Created after we gave up: destroy it, then free.
			v.submitLate(rings.Command{Opcode: rings.OpDestroyCQ, Conn: cq.num}, func(r rings.Command, err error) {
				if err == nil && (r.Status == rings.StatusOK || r.Status == rings.StatusBadParam) {
					drop()
					v.quarantined(-1)
				}
			})
		default:
			drop()
			v.quarantined(-1)
		}
	}
	if _, err := v.doLate(rings.Command{Opcode: rings.OpCreateCQ, Conn: cq.num, Addr: l.Base, Arg0: l.Count}, late); err != nil {
		var ce *CommandError
		if errors.As(err, &ce) || errors.Is(err, tcpstack.ErrNotSubmitted) {
			drop()
		} else {
			// Not answered: the device may write completions into the
			// ring, so its memory and number stay reserved until it does.
			v.quarantined(1)
		}
		return nil, err
	}
	return cq, nil
}

// newCQOn opens the host side of a CQ ring (no command).
func newCQOn(v *Provider, l rings.Layout) (*CQ, error) {
	cons, err := rings.NewConsumer(v.mem, l, l.Count, nil)
	if err != nil {
		return nil, fmt.Errorf("verbs: CQ ring: %w", err)
	}
	return &CQ{v: v, layout: l, cons: cons, ev: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Num is the CQ number the device knows it by.
func (cq *CQ) Num() uint32 { return cq.num }

// Entries is the ring's size.
func (cq *CQ) Entries() int { return int(cq.layout.Count) }

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It is a ring read: no command, no lock shared with the
// device. Safe for concurrent use.
func (cq *CQ) Poll(wc []rings.Completion) int {
	if cq == nil || len(wc) == 0 {
		return 0
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cons == nil {
		return 0
	}
	n := 0
	for n < len(wc) {
		e, err := cq.cons.Peek()
		if err != nil {
			cq.ringEr++
			cq.lastEr = err
			if e == nil {
				break // a bad producer index: forgotten, re-read next time
			}
			cq.cons.Pop() // a wrong phase tag: counted and skipped
			continue
		}
		if e == nil {
			break
		}
		_ = wc[n].Decode(rings.CQEntry(e))
		cq.cons.Pop()
		n++
	}
	cq.cons.Release()
	return n
}

// ReqNotify arms the CQ (ibv_req_notify_cq, ARM_CQ): the next completion,
// or with solicitedOnly the next solicited or unsuccessful one, posts one
// CQ event, which Wait returns. Poll again after arming: a completion that
// arrived before the arm does not fire it.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq == nil {
		return errors.New("verbs: ARM_CQ: nil CQ")
	}
	if cq.dead.Load() {
		return ErrCQDestroyed
	}
	arg := uint32(0)
	if solicitedOnly {
		arg = 1
	}
	_, err := cq.v.do(rings.Command{Opcode: rings.OpArmCQ, Conn: cq.num, Arg0: arg})
	return err
}

// Wait blocks until a CQ event (ibv_get_cq_event) or ctx ends. Events
// are latched one deep: one that came before Wait is returned at once.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq == nil {
		return errors.New("verbs: wait on a nil CQ")
	}
	select {
	case <-cq.ev:
		return nil
	default:
	}
	select {
	case <-cq.ev:
		return nil
	case <-cq.done:
		return ErrCQDestroyed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// C is the CQ's event channel, for select: it yields once per latched
// event (the same events Wait consumes).
func (cq *CQ) C() <-chan struct{} { return cq.ev }

// PollWait returns at least one completion: it polls, and when the CQ is
// empty arms it, polls again (a completion that came before the arm fires
// nothing), and waits for the event.
func (cq *CQ) PollWait(ctx context.Context, wc []rings.Completion, solicitedOnly bool) (int, error) {
	if len(wc) == 0 {
		return 0, errors.New("verbs: PollWait with no room for completions")
	}
	for {
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if n := cq.busySpin(ctx, wc); n > 0 {
			return n, nil
		}
		if cq.v.h != nil && cq.v.h.Yield(1+cq.num) {
			// (A lockstep run: arm only once the goroutines this
			// loop's completions woke have done their work.)
			if n := cq.Poll(wc); n > 0 {
				return n, nil
			}
		}
		if err := cq.arm(solicitedOnly); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

// arm arms the CQ for PollWait: with the arm register where the device has
// it, else posted (ARM_CQ with ArmIfPending, not waited for) where the
// host takes posted commands, else ReqNotify. The
// posted arm saves the waiter a command round trip; ArmIfPending makes it
// safe: a completion that lands after the waiter's last poll but before
// the device runs the ARM_CQ is still in the ring, unconsumed, so the
// device posts the event at once.
func (cq *CQ) arm(solicitedOnly bool) error {
	if db := cq.v.db; db != nil && !cq.armSync.Load() {
		return cq.armRegister(db, solicitedOnly)
	}
	ps, ok := cq.v.host.(tcpstack.RDMAPostedSubmitter)
	if !ok || cq.armSync.Load() {
		return cq.ReqNotify(solicitedOnly)
	}
	if cq.dead.Load() {
		return ErrCQDestroyed
	}
	arg := rings.ArmIfPending
	if solicitedOnly {
		arg |= rings.ArmSolicited
	}
	cq.armMu.Lock()
	if cq.armDone == nil {
		cq.armDone = cq.armFailed
	}
	cq.armCmd[0] = tcpstack.HostCommand{Cmd: rings.Command{Opcode: rings.OpArmCQ, Conn: cq.num, Arg0: arg}}
	err := ps.SubmitPosted(cq.armCmd[:], cq.armDone)
	cq.armMu.Unlock()
	if err != nil {
		return fmt.Errorf("verbs: ARM_CQ: %w", err)
	}
	return nil
}

// armFailed is a posted arm's outcome when it failed: the waiters are
// woken to poll again and from then on arm synchronously, which reports
// the error.
func (cq *CQ) armFailed([]rings.Command, error) {
	cq.armSync.Store(true)
	cq.signal()
}

// PollSpin is PollWait for a completion loop that expects more work soon:
// it polls up to spins times, yielding the processor between polls,
// before it arms the CQ and sleeps as PollWait does. The spin saves the
// ARM_CQ command and the wake-up when completions follow each other
// closely.
func (cq *CQ) PollSpin(ctx context.Context, wc []rings.Completion, spins int) (int, error) {
	for range spins {
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		runtime.Gosched()
	}
	return cq.PollWait(ctx, wc, false)
}

// SetBusyPoll turns busy polling on (d > 0) or off (d <= 0): PollWait
// and PollSpin, finding the CQ empty, go on polling the ring in host
// memory for up to d, yielding the processor to runnable goroutines
// between polls, before they arm the CQ and sleep (NAPI busy-poll, or an
// ibv_poll_cq loop ahead of ibv_req_notify_cq). A completion that comes
// within d costs neither the ARM_CQ command round trip nor the CQ event's
// path through the interrupt goroutine to the waiter: for request/response
// traffic that is most of the host's share of the round trip. The price is
// CPU: the spinning goroutine holds a processor for up to d per wait
// (CQStats.BusySpinTime adds it up). Safe to change at any time.
func (cq *CQ) SetBusyPoll(d time.Duration) {
	if d < 0 {
		d = 0
	}
	cq.busyPoll.Store(int64(d))
}

// BusyPoll is the busy-poll bound SetBusyPoll set (0: off).
func (cq *CQ) BusyPoll() time.Duration { return time.Duration(cq.busyPoll.Load()) }

// busySpin polls the ring for up to the busy-poll bound; 0 if it found
// nothing (or busy polling is off). It ends early when ctx does or the CQ
// is destroyed.
func (cq *CQ) busySpin(ctx context.Context, wc []rings.Completion) int {
	d := cq.busyPoll.Load()
	if d <= 0 {
		return 0
	}
	done := ctx.Done()
	start := time.Now()
	n := 0
spin:
	for {
		runtime.Gosched()
		if n = cq.Poll(wc); n > 0 {
			break
		}
		if int64(time.Since(start)) >= d || cq.dead.Load() {
			break
		}
		select {
		case <-done:
			break spin
		default:
		}
	}
	cq.spins.Add(1)
	if n > 0 {
		cq.spinHits.Add(1)
	}
	cq.spinNano.Add(uint64(time.Since(start)))
	return n
}

func (cq *CQ) signal() {
	cq.events.Add(1)
	select {
	case cq.ev <- struct{}{}:
	default:
	}
}

// Stats returns the CQ's host-side counters.
func (cq *CQ) Stats() CQStats {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return CQStats{Events: cq.events.Load(), RingErrors: cq.ringEr,
		BusySpins: cq.spins.Load(), BusySpinHits: cq.spinHits.Load(), BusySpinTime: time.Duration(cq.spinNano.Load())}
}

// Destroy removes the CQ (ibv_destroy_cq, DESTROY_CQ) and frees its ring.
// A CQ some QP still uses is not destroyed.
func (cq *CQ) Destroy() error {
	if cq == nil {
		return errors.New("verbs: DESTROY_CQ: nil CQ")
	}
	if n := cq.qpRefs.Load(); n > 0 {
		return fmt.Errorf("verbs: DESTROY_CQ: in use by %d QP(s)", n)
	}
	if !cq.dead.CompareAndSwap(false, true) {
		return nil
	}
	v := cq.v
	finish := func() error {
		v.mu.Lock()
		if v.cqs[cq.num] == cq {
			v.cqs[cq.num] = nil
		}
		v.mu.Unlock()
		cq.mu.Lock()
		cq.cons = nil
		cq.mu.Unlock()
		close(cq.done)
		return v.mem.Free(cq.layout.Base)
	}
	_, err := v.doLate(rings.Command{Opcode: rings.OpDestroyCQ, Conn: cq.num}, func(r rings.Command, err error) {
		// The answer to a DESTROY_CQ we gave up on: the ring was kept
		// (the device may still write it) until now.
		switch {
		case err == nil && r.Status == rings.StatusOK:
			_ = finish()
			v.quarantined(-1)
		case err == nil:
			cq.dead.Store(false) // refused: the CQ lives on
			v.quarantined(-1)
		}
	})
	if err != nil {
		var ce *CommandError
		if !errors.As(err, &ce) && !errors.Is(err, tcpstack.ErrNotSubmitted) {
			v.quarantined(1) // dead stays set: the late answer finishes it
			return err
		}
		cq.dead.Store(false)
		return err
	}
	return finish()
}
