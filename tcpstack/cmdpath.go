package tcpstack

// The driver's command path.
//
// Commands are submitted as tickets: a ticket is a batch of commands the
// driver publishes together (so the unit executes them back to back in one
// pass), and what waits for them. Submitting never blocks: a batch that
// finds the ring full waits, in order, in a queue the reapers drain as slots
// come back. Completions are reaped by whoever is around: a waiter that
// sees its own DONE while it spins, or the command-vector goroutine
// (vectors), which the device's completion interrupt wakes.
//
// A ring slot is the host's until its command is finished: the device wrote
// DONE with the right phase (a write-back), or released the slot (its
// consumer index passed it) without one, which loses the command. A waiter
// that times out gets ErrCommandTimeout, but its commands stay in flight:
// their slots, and the per-slot parameter blocks they name, are not reused,
// and the caller keeps quarantined whatever else they reference (connection
// index, buffers, rings) until the late completion is reaped and handed to
// the caller's late function (or the driver closes: the device is stopped,
// and nothing of it can write any more). Nothing the device writes is trusted without
// its phase: a DONE whose DONE_PHASE is not its lap's, or a DONE on a slot
// the host has not issued, is counted (DriverStats) and ignored.

import (
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// cmdScratchSize is the parameter block each command ring slot owns in
// host memory: enough for an offload state block, MPA private data
// (MODIFY_QP) or 32 user buffer descriptors. Larger blocks get memory of
// their own for the life of the command.
const cmdScratchSize = 512

// cmdSpin is how many times a waiter checks its DONE (yielding between
// checks) before it sleeps until the command vector goroutine wakes it.
const cmdSpin = 64

// Errors of the command path.
var (
	// ErrCommandTimeout: the device did not complete a command in time.
	// The command stays in flight: its slot, parameter block and whatever
	// it names stay reserved until the device answers.
	ErrCommandTimeout = errors.New("driver: command timed out")
	// ErrCommandLost: the device released a command's slot without writing
	// its status back; its outcome is unknown.
	ErrCommandLost = errors.New("driver: the device released a command without completing it")
	// ErrDriverClosed: the driver was closed.
	ErrDriverClosed = errors.New("driver: closed")
	// ErrNotSubmitted is wrapped by errors for commands the device never
	// saw (nothing they name can be in use by it, so the caller may free
	// it at once: the RDMA provider's clean-up relies on this).
	ErrNotSubmitted = errors.New("the command never reached the device")
)

// cmdReq is one command to submit. A non-nil param is the command's
// parameter block: the driver copies it into host memory the command owns
// and points Addr and Len at it, so no two commands share a block and a
// block lives as long as its command, not as long as its submitter waits.
type cmdReq struct {
	c     rings.Command
	param []byte
}

// lateFunc gets the outcome of commands nobody waits for (any more): the
// write-backs (res[k] is the command as submitted if it has none) and nil,
// ErrCommandLost or ErrDriverClosed. It runs on a reaper goroutine, possibly
// the command vector's: it must not block (submitting is fine) and must
// not keep res.
type lateFunc func(res []rings.Command, err error)

type ticketState uint8

const (
	tkNew ticketState = iota
	tkQueued
	tkInRing
	tkDone
)

// cmdTicket is a batch of commands submitted together.
type cmdTicket struct {
	reqs  []cmdReq
	res   []rings.Command
	pbuf  []byte       // the ticket's copy of small parameter blocks
	mem   []rings.Addr // host memory of large parameter blocks
	first uint32       // ring index of reqs[0], once in the ring

	// Under cmdPath.mu.
	state   ticketState
	left    int  // commands not finished
	lost    bool // a command was released without a write-back
	err     error
	waiter  bool // a goroutine collects the result (else late runs)
	gaveUp  bool // the waiter timed out while the batch was in flight
	asleep  bool // that goroutine sleeps: the vector goroutine reaps for it
	watched bool // counted in cmdPath.watch
	// posted: nobody waits and nobody watches (submitPosted); counted in
	// cmdPath.posted while in the ring, reaped lazily, and late runs only
	// if a command failed.
	posted bool
	late   lateFunc

	inRing atomic.Bool // first is valid
	done   atomic.Bool
	wake   chan struct{} // 1-buffered
}

// cmdPath is the driver's command ring state.
type cmdPath struct {
	mu      sync.Mutex
	slots   []*cmdTicket    // by slot: the ticket whose command occupies it
	badDone []uint32        // by slot: 1 + the index whose bad write-back was counted
	stray   []uint32        // by slot: 1 + the index whose stray DONE was counted
	oldest  uint32          // oldest index whose slot is still occupied (tail if none)
	watch   int             // tickets in the ring the vector goroutine must reap
	posted  int             // posted tickets in the ring, not reaped yet
	lazyOn  bool            // the vector goroutine's lazy timer is armed
	queue   []*cmdTicket    // waiting for ring space, in order
	wakes   []chan struct{} // waiters of tickets finished by a reap, to wake outside mu
	lateQ   []*cmdTicket    // tickets finished with nobody waiting: the vector goroutine's
	closed  bool
	lastErr error // the last fault the device made on the command ring

	scratch    rings.Addr
	scratchMem []byte
	kick       chan struct{} // wakes the vector goroutine (work for it, or close)
	lazy       *time.Timer   // the vector goroutine's lazy reap of posted commands
	pool       sync.Pool

	timeouts, late, lost, failed, badDone2, strayDone atomic.Uint64
	quarantined                                       atomic.Int64
}

// initCommands allocates the per-slot parameter blocks.
func (d *Driver) initCommands() error {
	cp := &d.cp
	n := d.rc.Command.Count
	cp.slots = make([]*cmdTicket, n)
	cp.badDone = make([]uint32, n)
	cp.stray = make([]uint32, n)
	cp.kick = make(chan struct{}, 1)
	cp.lazy = time.NewTimer(time.Hour)
	cp.lazy.Stop()
	cp.oldest = d.cmd.Tail()
	size := int(n) * cmdScratchSize
	var err error
	if cp.scratch, err = d.mem.Alloc(size, rings.CacheLine); err != nil {
		return fmt.Errorf("driver: command parameter blocks: %w", err)
	}
	cp.scratchMem, err = d.mem.Map(cp.scratch, size)
	return err
}

func loadCtl(e []byte) uint32 { return atomic.LoadUint32((*uint32)(unsafe.Pointer(&e[0]))) }

// Command submits one command and waits up to timeout for the device to
// write its status back; it returns the entry as the device left it. On
// ErrCommandTimeout the command is still in flight and its outcome will not
// be reported: commands that name host resources use submit with a late
// function instead.
func (d *Driver) Command(c rings.Command, timeout time.Duration) (rings.Command, error) {
	return d.command(c, timeout, nil)
}

// command is Command with a late function for the timeout case.
func (d *Driver) command(c rings.Command, timeout time.Duration, late func(rings.Command, error)) (rings.Command, error) {
	one := [1]cmdReq{{c: c}}
	var out [1]rings.Command
	var lf lateFunc
	if late != nil {
		lf = func(res []rings.Command, err error) { late(res[0], err) }
	}
	err := d.exec(one[:], out[:], timeout, lf)
	if err != nil && out[0].Opcode == 0 {
		out[0] = c
	}
	return out[0], err
}

// exec submits reqs as one batch and waits up to timeout for all of them;
// the write-backs go to out (len(reqs) long). On ErrCommandTimeout the batch
// stays in flight and late (if not nil) gets its outcome when it finishes.
// Errors that wrap ErrNotSubmitted mean the device never saw the batch.
func (d *Driver) exec(reqs []cmdReq, out []rings.Command, timeout time.Duration, late lateFunc) error {
	t, err := d.submit(reqs, true, nil)
	if err != nil {
		return err
	}
	return d.wait(t, timeout, late, out)
}

// submitAsync submits reqs as one batch without waiting; late (may be nil)
// gets the outcome. Safe on the interrupt goroutine: it never blocks.
func (d *Driver) submitAsync(reqs []cmdReq, late lateFunc) error {
	_, err := d.submit(reqs, false, late)
	return err
}

// postedReapDelay bounds how long a posted command's outcome waits to be
// reaped when nothing else reaps the ring (ring space, another command's
// reap): the vector goroutine looks that often while posted commands are
// outstanding, instead of being woken by each one's completion.
const postedReapDelay = time.Millisecond

// submitPosted submits reqs as a posted batch: like submitAsync, but the
// vector goroutine neither wakes for the submission nor watches for its
// completion (no NEED_WAKEUP on the command ring, so the device does not
// kick the command vector for it). The batch is reaped with the next reap
// of the ring, or after postedReapDelay at the latest; late runs only if a
// command failed or was lost. For doorbells (QP_DOORBELL), which are
// posted writes on a real NIC: a wake-up of the host's vector goroutine
// per doorbell is most of what a doorbell costs on a small machine.
func (d *Driver) submitPosted(reqs []cmdReq, late lateFunc) error {
	_, err := d.submitAs(reqs, false, true, late)
	return err
}

func (d *Driver) getTicket() *cmdTicket {
	if t, ok := d.cp.pool.Get().(*cmdTicket); ok {
		return t
	}
	return &cmdTicket{wake: make(chan struct{}, 1)}
}

func (d *Driver) putTicket(t *cmdTicket) {
	select {
	case <-t.wake:
	default:
	}
	clear(t.reqs)
	t.reqs, t.mem = t.reqs[:0], t.mem[:0]
	t.state, t.left, t.lost, t.err = tkNew, 0, false, nil
	t.waiter, t.gaveUp, t.asleep, t.watched, t.late = false, false, false, false, nil
	t.inRing.Store(false)
	t.done.Store(false)
	d.cp.pool.Put(t)
}

// freeParams gives back a ticket's large parameter blocks.
func (d *Driver) freeParams(t *cmdTicket) {
	for _, a := range t.mem {
		_ = d.mem.Free(a)
	}
	t.mem = t.mem[:0]
}

func (d *Driver) submit(reqs []cmdReq, waiter bool, late lateFunc) (*cmdTicket, error) {
	return d.submitAs(reqs, waiter, false, late)
}

// submitAs is submit, posted (submitPosted) or not.
func (d *Driver) submitAs(reqs []cmdReq, waiter, posted bool, late lateFunc) (*cmdTicket, error) {
	n := len(reqs)
	if n == 0 || n > int(d.rc.Command.Count) {
		return nil, fmt.Errorf("driver: a batch of %d commands on a ring of %d (%w)", n, d.rc.Command.Count, ErrNotSubmitted)
	}
	t := d.getTicket()
	t.reqs = append(t.reqs, reqs...)
	if cap(t.res) < n {
		t.res = make([]rings.Command, n)
	}
	t.res = t.res[:n]
	// The ticket owns copies of the parameter blocks from here on.
	small := 0
	for k := range t.reqs {
		if p := t.reqs[k].param; p != nil && len(p) <= cmdScratchSize {
			small += len(p)
		}
	}
	if cap(t.pbuf) < small {
		t.pbuf = make([]byte, small)
	}
	buf := t.pbuf[:0]
	for k := range t.reqs {
		p := t.reqs[k].param
		switch {
		case p == nil:
		case len(p) <= cmdScratchSize:
			at := len(buf)
			buf = append(buf, p...)
			t.reqs[k].param = buf[at:len(buf):len(buf)]
		default:
			a, err := d.mem.Alloc(len(p), rings.CacheLine)
			if err == nil {
				t.mem = append(t.mem, a)
				var m []byte
				if m, err = d.mem.Map(a, len(p)); err == nil {
					copy(m, p)
				}
			}
			if err != nil {
				d.freeParams(t)
				d.putTicket(t)
				return nil, fmt.Errorf("driver: %v parameter block: %w (%w)", t.reqs[k].c.Opcode, err, ErrNotSubmitted)
			}
		}
	}
	t.waiter, t.posted, t.late = waiter, posted && !waiter, late
	cp := &d.cp
	cp.mu.Lock()
	if cp.closed {
		cp.mu.Unlock()
		d.freeParams(t)
		d.putTicket(t)
		return nil, fmt.Errorf("%w (%w)", ErrDriverClosed, ErrNotSubmitted)
	}
	if len(cp.queue) > 0 || !d.placeLocked(t) {
		t.state = tkQueued
		cp.queue = append(cp.queue, t)
	}
	kick := cp.needsVectorLocked() || (cp.posted > 0 && !cp.lazyOn)
	cp.mu.Unlock()
	if kick {
		cp.wakeVector()
	}
	return t, nil
}

func (cp *cmdPath) wakeVector() {
	select {
	case cp.kick <- struct{}{}:
	default:
	}
}

// needsVectorLocked: the vector goroutine has commands to reap or place.
func (cp *cmdPath) needsVectorLocked() bool {
	return cp.watch > 0 || len(cp.queue) > 0 || len(cp.lateQ) > 0
}

// freeLocked is how many commands can be placed now: slots the device
// released (its consumer index) that the host has also finished with.
func (d *Driver) freeLocked() int {
	count := d.rc.Command.Count
	tail := d.cmd.Tail()
	host := count - (tail - d.cp.oldest)
	// The consumer index itself, not the producer's cached copy (which
	// it refreshes only when that says the ring is full: a batch needs
	// more than one slot).
	dev := count - (tail - d.cmd.ConsumerIndex())
	if dev > count { // a consumer index ahead of the producer: not trusted
		dev = 0
	}
	return int(min(host, dev))
}

// placeLocked writes t's commands into the ring and publishes them, if
// they all fit.
func (d *Driver) placeLocked(t *cmdTicket) bool {
	cp := &d.cp
	n := len(t.reqs)
	if d.freeLocked() < n {
		return false
	}
	mask := d.rc.Command.Count - 1
	first := d.cmd.Tail()
	big := 0
	for k := range t.reqs {
		idx := first + uint32(k)
		s := idx & mask
		c := t.reqs[k].c
		c.Status, c.Result = 0, 0
		if p := t.reqs[k].param; p != nil {
			if len(p) <= cmdScratchSize {
				off := int(s) * cmdScratchSize
				copy(cp.scratchMem[off:off+cmdScratchSize], p)
				c.Addr = cp.scratch + rings.Addr(off)
			} else {
				c.Addr = t.mem[big]
				big++
			}
			c.Len = uint32(len(p))
		}
		e := d.cmd.Next()
		d.checkStrayLocked(idx, e)
		c.Encode(rings.CommandEntry(e))
		d.cmd.Commit()
		cp.slots[s] = t
		t.res[k] = c
	}
	t.first, t.left, t.state = first, n, tkInRing
	t.inRing.Store(true)
	switch {
	case t.posted:
		cp.posted++
	case !t.waiter || t.asleep:
		t.watched = true
		cp.watch++
	}
	d.cmd.Publish() // kicks a sleeping device
	d.stats.commands.Add(uint64(n))
	return true
}

// checkStrayLocked counts a DONE the device wrote into slot idx before the
// host issued idx (a DONE with idx's phase in a slot the host owns). The
// commit that follows clears it: it is never mistaken for a completion.
func (d *Driver) checkStrayLocked(idx uint32, e []byte) {
	ctl := loadCtl(e)
	if ctl&rings.CtlDone == 0 || (ctl&rings.CtlDonePhase != 0) != (d.cmd.Phase(idx) != 0) {
		return
	}
	s := idx & (d.rc.Command.Count - 1)
	if d.cp.stray[s] != idx+1 {
		d.cp.stray[s] = idx + 1
		d.cp.strayDone.Add(1)
		d.cp.lastErr = fmt.Errorf("driver: the device wrote DONE into command slot %d for index %d, which the host had not issued", s, idx)
	}
}

// scanStrayLocked checks every slot the host owns for a stray DONE.
func (d *Driver) scanStrayLocked() {
	end := d.cp.oldest + d.rc.Command.Count
	for i := d.cmd.Tail(); i != end; i++ {
		d.checkStrayLocked(i, d.cmd.Entry(i))
	}
}

// reapLocked finishes every command the device completed (or released
// without completing), in ring order, then places queued batches in the
// slots that came back.
func (d *Driver) reapLocked() {
	cp := &d.cp
	count := d.rc.Command.Count
	mask := count - 1
	tail := d.cmd.Tail()
	// The consumer index first: a DONE is written before the slot is
	// released, so a slot released without one never gets one.
	ci := d.cmd.ConsumerIndex()
	ciSane := tail-ci <= count
	for i := cp.oldest; i != tail; i++ {
		s := i & mask
		t := cp.slots[s]
		if t == nil {
			continue
		}
		e := d.cmd.Entry(i)
		ctl := loadCtl(e)
		if ctl&rings.CtlDone != 0 {
			if (ctl&rings.CtlDonePhase != 0) == (d.cmd.Phase(i) != 0) {
				k := i - t.first
				_ = t.res[k].Decode(rings.CommandEntry(e))
				if t.res[k].Status != rings.StatusOK {
					cp.failed.Add(1)
				}
				cp.slots[s] = nil
				if t.left--; t.left == 0 {
					d.finishLocked(t, nil)
				}
				continue
			}
			if cp.badDone[s] != i+1 {
				cp.badDone[s] = i + 1
				cp.badDone2.Add(1)
				cp.lastErr = fmt.Errorf("driver: command %d (%v): DONE with the phase of another lap, not trusted", i, t.res[i-t.first].Opcode)
			}
		}
		if ciSane && int32(ci-i) > 0 {
			// Released without a write-back: the slot is the host's
			// again, the command's outcome unknown.
			cp.lost.Add(1)
			cp.lastErr = fmt.Errorf("driver: command %d (%v): %w", i, t.res[i-t.first].Opcode, ErrCommandLost)
			cp.slots[s] = nil
			t.lost = true
			if t.left--; t.left == 0 {
				d.finishLocked(t, nil)
			}
		}
	}
	for cp.oldest != tail && cp.slots[cp.oldest&mask] == nil {
		cp.oldest++
	}
	for len(cp.queue) > 0 && d.placeLocked(cp.queue[0]) {
		cp.queue[0] = nil
		cp.queue = cp.queue[1:]
	}
	if len(cp.queue) == 0 {
		cp.queue = nil
	}
}

// finishLocked ends a ticket (err for tickets that end without the device:
// closed). Who hears of it is decided here, under the lock.
func (d *Driver) finishLocked(t *cmdTicket, err error) {
	cp := &d.cp
	if t.lost && err == nil {
		err = ErrCommandLost
	}
	if t.state == tkInRing && t.watched {
		cp.watch--
	}
	if t.state == tkInRing && t.posted {
		cp.posted--
	}
	t.state, t.err = tkDone, err
	if t.lost || (errors.Is(err, ErrDriverClosed) && t.inRing.Load()) {
		// The device may still read the large parameter blocks: they
		// stay where they are (quarantined for good).
		t.mem = t.mem[:0]
	}
	if t.gaveUp && !errors.Is(err, ErrDriverClosed) {
		cp.late.Add(1)
	}
	// Who hears of it is decided here, under the lock: a waiter (woken
	// through its channel), or the late function, on the vector
	// goroutine, which then owns the ticket.
	if t.waiter {
		if t.asleep { // a spinning waiter sees done by itself
			cp.wakes = append(cp.wakes, t.wake)
		}
	} else if t.posted && err == nil && allOK(t.res) {
		// A posted batch that went through: nobody is told, and the
		// ticket goes back to the pool here.
		d.freeParams(t)
		d.putTicket(t)
		return
	} else {
		cp.lateQ = append(cp.lateQ, t)
	}
	// Last: a waiter that sees done owns the ticket again (and may give
	// it back to the pool), so nothing of it is touched after this.
	t.done.Store(true)
}

// allOK reports whether every write-back says OK.
func allOK(res []rings.Command) bool {
	for i := range res {
		if res[i].Status != rings.StatusOK {
			return false
		}
	}
	return true
}

// finished is what a reap finished, to act on outside mu.
type finished struct {
	wakes []chan struct{}
	late  []*cmdTicket
}

// takeFinished takes the waiters to wake and, with late, the tickets
// whose late functions are to run (mu held).
func (cp *cmdPath) takeFinished(late bool) finished {
	f := finished{wakes: cp.wakes}
	cp.wakes = nil
	if late {
		f.late, cp.lateQ = cp.lateQ, nil
	}
	return f
}

func (f finished) empty() bool { return len(f.wakes) == 0 && len(f.late) == 0 }

// notify wakes waiters and runs late functions (mu not held). Late
// functions run only on the vector goroutine, which holds no lock: a
// waiter that reaps leaves them in lateQ and wakes the vector goroutine.
func (d *Driver) notify(f finished) {
	for _, w := range f.wakes {
		select {
		case w <- struct{}{}:
		default:
		}
	}
	for _, t := range f.late {
		d.freeParams(t)
		if t.late != nil {
			t.late(t.res, t.err)
		}
		d.putTicket(t)
	}
}

// reap reaps with the lock taken and notifies after it (from a waiter).
func (d *Driver) reap() {
	cp := &d.cp
	cp.mu.Lock()
	d.reapLocked()
	f := cp.takeFinished(false)
	handOver := len(cp.lateQ) > 0
	cp.mu.Unlock()
	d.notify(f)
	if handOver {
		cp.wakeVector()
	}
}

// wait waits for t (submitted with waiter) and copies its write-backs to
// out. See exec.
func (d *Driver) wait(t *cmdTicket, timeout time.Duration, late lateFunc, out []rings.Command) error {
	cp := &d.cp
	last := uint32(len(t.reqs) - 1)
	for i := 0; i < cmdSpin && !t.done.Load(); i++ {
		if t.inRing.Load() && rings.IsDone(&d.cmd.Ring, t.first+last) {
			d.reap()
			continue
		}
		runtime.Gosched()
	}
	if !t.done.Load() {
		cp.mu.Lock()
		if t.state != tkDone {
			t.asleep = true
			if t.state == tkInRing && !t.watched {
				t.watched = true
				cp.watch++
			}
		}
		cp.mu.Unlock()
		cp.wakeVector()
		timer := d.newTimer(timeout)
		defer timer.Stop()
		for !t.done.Load() {
			select {
			case <-t.wake:
				continue
			case <-timer.C:
			}
			cp.mu.Lock()
			switch t.state {
			case tkDone:
			case tkQueued:
				// Never placed: take it back; the device never saw it.
				for k, q := range cp.queue {
					if q == t {
						cp.queue = append(cp.queue[:k], cp.queue[k+1:]...)
						break
					}
				}
				cp.mu.Unlock()
				cp.timeouts.Add(1)
				d.freeParams(t)
				d.putTicket(t)
				return fmt.Errorf("%w after %v (%w: the ring stayed full)", ErrCommandTimeout, timeout, ErrNotSubmitted)
			default:
				// In flight: the ticket is the reaper's now; its
				// slots and blocks stay reserved until it finishes.
				t.waiter, t.gaveUp, t.late = false, true, late
				if !t.watched {
					t.watched = true
					cp.watch++
				}
				cp.timeouts.Add(1)
				cp.lastErr = fmt.Errorf("driver: %v (command %d): %w after %v", t.res[0].Opcode, t.first, ErrCommandTimeout, timeout)
				cp.mu.Unlock()
				return fmt.Errorf("%v: %w after %v", t.res[0].Opcode, ErrCommandTimeout, timeout)
			}
			cp.mu.Unlock()
		}
	}
	// done was stored after the write-backs, under the lock: they are
	// visible, and nobody else touches a finished waiter's ticket.
	err := t.err
	copy(out, t.res)
	d.freeParams(t)
	d.putTicket(t)
	return err
}

// vectors is the handler of the command-completion and transmit-space
// interrupt vectors. It reaps the commands nobody spins on (asynchronous
// ones, abandoned ones, those whose waiter sleeps), places queued batches
// as slots come back, and wakes transmit-space waiters.
func (d *Driver) vectors() {
	defer d.wg.Done()
	cp := &d.cp
	for {
		cp.mu.Lock()
		d.reapLocked()
		watching := cp.needsVectorLocked()
		if watching {
			// Announce the sleep, then look again: a completion
			// between the reap and the flag did not kick.
			d.cmd.SetNeedWakeup(true)
			d.reapLocked()
		} else {
			d.cmd.SetNeedWakeup(false)
		}
		f := cp.takeFinished(true)
		// Posted commands are reaped at the latest after a delay; not
		// woken by their completions, the goroutine looks by itself.
		var lazy <-chan time.Time
		if cp.posted > 0 {
			if !cp.lazyOn {
				cp.lazy.Reset(postedReapDelay)
				cp.lazyOn = true
			}
			lazy = cp.lazy.C
		}
		cp.mu.Unlock()
		if !f.empty() {
			d.notify(f)
			continue
		}
		if d.closing.Load() {
			d.closeCommands()
			return
		}
		select {
		case <-lazy:
			cp.mu.Lock()
			cp.lazyOn = false
			cp.mu.Unlock()
		case <-d.cmdDone.C():
			cp.mu.Lock()
			d.scanStrayLocked()
			cp.mu.Unlock()
		case <-cp.kick:
		case <-d.txSpace.C():
			d.txSpaceFreed()
		}
	}
}

// closeCommands fails everything outstanding (the driver is closing).
func (d *Driver) closeCommands() {
	cp := &d.cp
	cp.mu.Lock()
	cp.closed = true
	for _, t := range cp.queue {
		t.state = tkQueued
		d.finishLocked(t, fmt.Errorf("%w (%w)", ErrDriverClosed, ErrNotSubmitted))
	}
	cp.queue = nil
	for s, t := range cp.slots {
		if t != nil && t.state == tkInRing {
			d.finishLocked(t, ErrDriverClosed)
		}
		cp.slots[s] = nil
	}
	f := cp.takeFinished(true)
	cp.mu.Unlock()
	d.notify(f)
}

// cmdInFlight counts the commands in the ring or waiting for it.
func (d *Driver) cmdInFlight() uint64 {
	cp := &d.cp
	cp.mu.Lock()
	defer cp.mu.Unlock()
	n := 0
	for _, t := range cp.slots {
		if t != nil {
			n++
		}
	}
	for _, t := range cp.queue {
		n += len(t.reqs)
	}
	return uint64(n)
}

// quarantine counts resources held back for a command the device has not
// answered (+1), or given back once it did (-1).
func (d *Driver) quarantine(delta int64) { d.cp.quarantined.Add(delta) }

// CommandFault is the last fault the device made on the command ring (a
// timeout, a lost command, a write-back not trusted), nil if none.
func (d *Driver) CommandFault() error {
	d.cp.mu.Lock()
	defer d.cp.mu.Unlock()
	return d.cp.lastErr
}
