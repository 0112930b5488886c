package port

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"
)

// Impairments describe what one direction of a wire does to frames, in the spirit of Linux
// netem. The zero value is a perfect wire. Each frame goes through the stages in this order:
//
//	loss → duplication → corruption → reordering → rate (serialization) → delay + jitter → FIFO
//
// Every random decision comes from the wire's Seed, and each impairment draws from its own
// stream, so that, say, turning corruption on does not change which frames are lost. Given the
// same seed, configuration and frames, the outcome for every frame is the same on every run.
// (What is not reproducible is wall-clock timing: when a delayed frame is due, and when
// the reorder hold timer fires if traffic stops.)
type Impairments struct {
	// LossPercent of frames are dropped on the wire (counted in the sender's TxDropLoss).
	LossPercent float64
	// LossBurst is how many consecutive frames one loss takes (0 or 1: one). A TAP whose
	// kernel side drops a TCP super-frame drops all the segments it carries at once (up to 44
	// of 1,448 bytes in 64 KiB); a wire of single segments shows that loss with LossBurst 44.
	// LossPercent stays the share of frames lost: a burst starts at a frame with chance
	// LossPercent/LossBurst, and the frames it takes draw nothing. A super-frame's segments
	// leave back to back, so a burst takes only frames written within LossBurstSpan of its
	// first: a sender down to one retransmission per timeout loses one, not the next 44.
	LossBurst int
	// DuplicatePercent of frames arrive twice (the copy right behind the original).
	DuplicatePercent float64
	// CorruptPercent of frames have one byte past the Ethernet header XORed with a random
	// non-zero value: exactly one byte changes, and the IP/TCP/UDP checksum or the MPA CRC is
	// what catches it. (Real corruption would be caught by the FCS and the frame dropped; this
	// lets the layers above be tested against corrupt payloads.) Frames with no payload are
	// left alone.
	CorruptPercent float64
	// ReorderPercent of frames are held back and released after the next ReorderGap frames
	// have been sent, so that those overtake it.
	ReorderPercent float64
	// ReorderGap is how many frames overtake a held one. Default 1.
	ReorderGap int
	// ReorderHoldMax releases a held frame even if fewer than ReorderGap frames follow it, so
	// that the last frame of a burst is late rather than lost. Default 10ms.
	ReorderHoldMax time.Duration

	// RateBitsPerSec is the line rate. Each frame occupies the line for its Ethernet wire
	// time: the frame padded to 60 bytes, plus FCS (4), preamble and SFD (8) and inter-frame
	// gap (12), so a 1514-byte frame takes 12.304 µs at 1 Gbit/s, as on a real GigE link.
	// Frames waiting for the line queue in the delay line. 0 means unlimited.
	RateBitsPerSec uint64
	// Delay is the propagation delay added to every frame.
	Delay time.Duration
	// Jitter adds a uniformly distributed offset in [-Jitter, +Jitter] to Delay (the total is
	// never negative). Jitter never reorders frames: a frame is never due before the one ahead
	// of it, as on a real cable; use ReorderPercent for reordering.
	Jitter time.Duration
}

// LossBurstSpan is the longest a loss burst lasts (Impairments.LossBurst): far longer
// than a 64 KiB super-frame's segments take to be written, far shorter than any timeout.
const LossBurstSpan = time.Millisecond

// DefaultReorderHoldMax is the default for Impairments.ReorderHoldMax.
const DefaultReorderHoldMax = 10 * time.Millisecond

// maxHeld bounds the frames the reorder stage holds at once; a frame picked for reordering
// while the hold is full is sent in order (and not counted as reordered).
const maxHeld = 64

// Validate reports the first out-of-range field, or nil.
func (im Impairments) Validate() error {
	for _, p := range []struct {
		name string
		v    float64
	}{
		{"LossPercent", im.LossPercent},
		{"DuplicatePercent", im.DuplicatePercent},
		{"CorruptPercent", im.CorruptPercent},
		{"ReorderPercent", im.ReorderPercent},
	} {
		if !(p.v >= 0 && p.v <= 100) { // also rejects NaN
			return fmt.Errorf("%s %v is not between 0 and 100", p.name, p.v)
		}
	}
	switch {
	case im.LossBurst < 0:
		return fmt.Errorf("LossBurst %d is negative", im.LossBurst)
	case im.ReorderGap < 0:
		return fmt.Errorf("ReorderGap %d is negative", im.ReorderGap)
	case im.ReorderHoldMax < 0:
		return fmt.Errorf("ReorderHoldMax %v is negative", im.ReorderHoldMax)
	case im.Delay < 0:
		return fmt.Errorf("Delay %v is negative", im.Delay)
	case im.Jitter < 0:
		return fmt.Errorf("Jitter %v is negative", im.Jitter)
	}
	return nil
}

// active reports whether any impairment is configured.
func (im Impairments) active() bool {
	return im.LossPercent > 0 || im.DuplicatePercent > 0 || im.CorruptPercent > 0 ||
		im.ReorderPercent > 0 || im.needsDelayLine()
}

// needsDelayLine reports whether frames must wait for a due time.
func (im Impairments) needsDelayLine() bool {
	return im.RateBitsPerSec > 0 || im.Delay > 0 || im.Jitter > 0
}

func (im Impairments) withDefaults() Impairments {
	if im.ReorderGap == 0 {
		im.ReorderGap = 1
	}
	if im.ReorderHoldMax == 0 {
		im.ReorderHoldMax = DefaultReorderHoldMax
	}
	return im
}

// Random streams, one per impairment (see Impairments).
const (
	streamLoss = iota
	streamDuplicate
	streamCorrupt
	streamReorder
	streamJitter
	numStreams
)

// direction is one way along a wire: frames written to tx and read from rx.
type direction struct {
	tx, rx   *WirePort
	maxFrame int
	pool     *bufferPool

	// impaired routes WriteFrame through transmit. It stays set once a delay line exists, so
	// that frames written after the impairments are removed cannot overtake frames still on
	// the line.
	impaired atomic.Bool

	mu       sync.Mutex // guards everything below; taken only on the impaired path
	imp      Impairments
	stopped  bool
	rng      [numStreams]*rand.Rand
	held     []heldFrame // reorder stage, oldest first
	holdTime ClockTimer
	line     *delayLine
	epoch    time.Time
	clock    Clock // WireConfig.Clock, or nil: the real clock
	lineFree int64 // rate: when the line finishes serializing the last accepted frame
	lastDue  int64 // due time of the last frame put on the delay line
	burst    int   // frames the loss burst in progress still takes (Impairments.LossBurst)
	burstEnd int64 // and until when
	queueLen int
	queueB   int
}

type heldFrame struct {
	f        *frame
	left     int   // frames still to overtake it
	deadline int64 // ReorderHoldMax expiry, ns since epoch
}

func newDirection(tx, rx *WirePort, cfg WireConfig, imp Impairments, index uint64) *direction {
	d := &direction{
		tx:       tx,
		rx:       rx,
		maxFrame: cfg.MaxFrameSize,
		pool:     newBufferPool(cfg.MaxFrameSize, cfg.QueueLen, cfg.QueueBytes),
		epoch:    time.Now(),
		clock:    cfg.Clock,
		queueLen: cfg.QueueLen,
		queueB:   cfg.QueueBytes,
		held:     make([]heldFrame, 0, maxHeld),
	}
	for i := range d.rng {
		// splitmix64 turns (seed, direction, stream) into well-separated PCG states.
		s := cfg.Seed ^ (index+1)*0x9e3779b97f4a7c15 ^ uint64(i+1)*0xbf58476d1ce4e5b9
		d.rng[i] = rand.New(rand.NewPCG(splitmix64(s), splitmix64(s+1)))
	}
	if d.clock != nil {
		d.holdTime = d.clock.AfterFunc(time.Hour, d.holdExpired)
	} else {
		d.holdTime = realTimer{time.AfterFunc(time.Hour, d.holdExpired)}
	}
	d.holdTime.Stop()
	d.configure(imp.withDefaults())
	return d
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ x>>30) * 0xbf58476d1ce4e5b9
	x = (x ^ x>>27) * 0x94d049bb133111eb
	return x ^ x>>31
}

// SetTxImpairments replaces the impairments applied to frames this port transmits, while the
// wire runs: a test can cut the link (LossPercent 100) and restore it. Frames held for
// reordering are released when reordering is turned off; frames on the delay line keep their
// due time. The random streams continue where they were.
func (p *WirePort) SetTxImpairments(imp Impairments) error {
	if err := imp.Validate(); err != nil {
		return fmt.Errorf("%s: %w", p.name, err)
	}
	d := p.out
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return ErrClosed
	}
	d.configure(imp.withDefaults())
	return nil
}

// TxImpairments returns the impairments applied to frames this port transmits.
func (p *WirePort) TxImpairments() Impairments {
	d := p.out
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.imp
}

// configure installs imp. Called with d.mu held (or before the direction is shared).
func (d *direction) configure(imp Impairments) {
	d.imp = imp
	if imp.needsDelayLine() && d.line == nil {
		d.line = startDelayLine(d)
	}
	if imp.ReorderPercent == 0 {
		for len(d.held) > 0 {
			d.send(d.popHeld())
		}
	}
	d.impaired.Store(imp.active() || d.line != nil)
}

func (d *direction) chance(stream int, percent float64) bool {
	return percent > 0 && d.rng[stream].Float64()*100 < percent
}

func (d *direction) now() int64 {
	if d.clock != nil {
		return d.clock.Nanos()
	}
	return int64(time.Since(d.epoch))
}

// Clock is a clock other than the real one for the impairments' timing
// (WireConfig.Clock).
type Clock interface {
	// Nanos is the time in ns (only differences matter).
	Nanos() int64
	// AfterFunc calls f in its own goroutine once d has passed.
	AfterFunc(d time.Duration, f func()) ClockTimer
}

// ClockTimer is a Clock's timer (and the reorder stage's hold timer on
// either clock): time.Timer's Stop and Reset.
type ClockTimer interface {
	Stop() bool
	Reset(time.Duration)
}

// realTimer is a time.Timer as a ClockTimer.
type realTimer struct{ t *time.Timer }

func (r realTimer) Stop() bool            { return r.t.Stop() }
func (r realTimer) Reset(d time.Duration) { r.t.Reset(d) }

// transmit is WriteFrame's impaired path.
func (d *direction) transmit(b []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		d.tx.stats.txDropLinkDown.Add(1)
		return
	}
	imp := &d.imp
	if d.burst > 0 {
		if d.now() <= d.burstEnd {
			d.burst--
			d.tx.stats.txDropLoss.Add(1)
			return
		}
		d.burst = 0
	}
	if imp.LossBurst > 1 {
		if d.chance(streamLoss, imp.LossPercent/float64(imp.LossBurst)) {
			d.burst, d.burstEnd = imp.LossBurst-1, d.now()+int64(LossBurstSpan)
			d.tx.stats.txDropLoss.Add(1)
			return
		}
	} else if d.chance(streamLoss, imp.LossPercent) {
		d.tx.stats.txDropLoss.Add(1)
		return
	}
	copies := 1
	if d.chance(streamDuplicate, imp.DuplicatePercent) {
		copies = 2
		d.tx.stats.duplicated.Add(1)
	}
	for range copies {
		f := d.pool.copyOf(b)
		if d.chance(streamCorrupt, imp.CorruptPercent) && f.n > EthHeaderLen {
			r := d.rng[streamCorrupt]
			f.buf[EthHeaderLen+r.IntN(f.n-EthHeaderLen)] ^= byte(1 + r.IntN(255))
			d.tx.stats.corrupted.Add(1)
		}
		if d.chance(streamReorder, imp.ReorderPercent) && len(d.held) < maxHeld {
			if len(d.held) == 0 {
				d.holdTime.Reset(imp.ReorderHoldMax)
			}
			d.held = append(d.held, heldFrame{f: f, left: imp.ReorderGap, deadline: d.now() + int64(imp.ReorderHoldMax)})
			d.tx.stats.reordered.Add(1)
			continue
		}
		d.send(f)
		// f overtook every held frame; release those that have now been overtaken enough.
		for i := range d.held {
			d.held[i].left--
		}
		for len(d.held) > 0 && d.held[0].left <= 0 {
			d.send(d.popHeld())
		}
	}
}

func (d *direction) popHeld() *frame {
	f := d.held[0].f
	n := copy(d.held, d.held[1:])
	d.held[n] = heldFrame{}
	d.held = d.held[:n]
	return f
}

// holdExpired runs on the hold timer: release held frames whose ReorderHoldMax has passed.
func (d *direction) holdExpired() {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.stopped {
		return
	}
	now := d.now()
	for len(d.held) > 0 && d.held[0].deadline <= now {
		d.send(d.popHeld())
	}
	if len(d.held) > 0 {
		d.holdTime.Reset(time.Duration(d.held[0].deadline - now))
	}
}

// send puts f on the delay line, or straight into the receiver's FIFO when there is none.
// Called with d.mu held.
func (d *direction) send(f *frame) {
	if d.line == nil {
		d.deliver(f)
		return
	}
	imp := &d.imp
	now := d.now()
	due, lineFree := now, d.lineFree
	if imp.RateBitsPerSec > 0 {
		wireBytes := uint64(max(f.n, 60) + 4 + 8 + 12) // pad, FCS, preamble+SFD, IFG
		lineFree = max(now, d.lineFree) + int64(wireBytes*8*1e9/imp.RateBitsPerSec)
		due = lineFree
	}
	delay := int64(imp.Delay)
	if j := int64(imp.Jitter); j > 0 {
		delay += d.rng[streamJitter].Int64N(2*j+1) - j
	}
	due += max(delay, 0)
	due = max(due, d.lastDue) // a cable does not reorder
	f.at = due
	if !d.line.q.push(f) {
		d.tx.stats.txDropQueueFull.Add(1)
		f.release()
		return
	}
	d.lastDue, d.lineFree = due, lineFree
}

// deliver puts f into the receiver's FIFO, dropping it (and counting why) if the receiver is
// closed or its FIFO is full. Called by the writer on a clean wire, under d.mu on an impaired
// one, and by the delay line.
func (d *direction) deliver(f *frame) {
	rx := d.rx
	if rx.closed.Load() {
		d.tx.stats.txDropLinkDown.Add(1)
		f.release()
		return
	}
	if !rx.rxq.push(f) {
		rx.stats.rxDropQueueFull.Add(1)
		f.release()
		return
	}
	// The receiver may have closed between the check and the push, after its Close drained
	// the FIFO; drain again so that the frame is counted (RxDropClosed) rather than lost.
	if rx.closed.Load() {
		rx.drainRx()
	}
	if fn := rx.onReadable.Load(); fn != nil {
		(*fn)()
	}
}

// shutdown stops the direction when either end closes. Frames it still holds (reorder stage,
// delay line) are dropped and counted in drops. It waits for the delay line to exit.
func (d *direction) shutdown(drops *atomic.Uint64) {
	d.mu.Lock()
	if d.stopped {
		d.mu.Unlock()
		return
	}
	d.stopped = true
	d.holdTime.Stop()
	for len(d.held) > 0 {
		d.popHeld().release()
		drops.Add(1)
	}
	line := d.line
	d.mu.Unlock()
	if line != nil {
		line.stopAndWait(drops)
	}
}

// delayLine releases frames at their due time. Frames enter in due-time order (send makes due
// times non-decreasing), so a FIFO is all it needs. It is the only goroutine an impaired wire
// adds, one per direction, and only when a rate, delay or jitter is configured.
type delayLine struct {
	q      fifo
	stop   chan struct{}
	exited chan struct{}
	drops  *atomic.Uint64 // set by stopAndWait before stop is closed
}

func startDelayLine(d *direction) *delayLine {
	l := &delayLine{
		q:      newFIFO(d.queueLen, d.queueB),
		stop:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	go l.run(d)
	return l
}

func (l *delayLine) stopAndWait(drops *atomic.Uint64) {
	l.drops = drops
	close(l.stop)
	<-l.exited
}

func (l *delayLine) run(d *direction) {
	defer close(l.exited)
	s := newSleeper()
	defer s.close()
	for {
		var f *frame
		select {
		case f = <-l.q.q:
		case <-l.stop:
			l.drain()
			return
		}
		l.q.bytes.Add(-int64(f.n))
		if !s.sleepUntil(d, f.at, l.stop) {
			f.release()
			l.drops.Add(1)
			l.drain()
			return
		}
		d.deliver(f)
	}
}

// drain drops what is left on a stopped line. Nothing is added after stop: send runs under
// d.mu and checks d.stopped, which shutdown set before closing stop.
func (l *delayLine) drain() {
	for {
		select {
		case f := <-l.q.q:
			f.release()
			l.drops.Add(1)
		default:
			return
		}
	}
}

// sleeper waits for due times. Go's timers are only as fine as the runtime's poller, about
// 1 ms on an idle Linux machine, which would turn a 100 µs LAN delay into a 1 ms WAN one. So
// waits longer than coarseSleep use a timer (interruptible by Close) for all but the last
// millisecond, and the rest is slept precisely by fineSleep (see sleep_linux.go).
type sleeper struct {
	t *time.Timer
}

const coarseSleep = 2 * time.Millisecond

func newSleeper() *sleeper {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return &sleeper{t: t}
}

func (s *sleeper) close() { s.t.Stop() }

// sleepUntil returns true at or after due, or false if stop closes first.
func (s *sleeper) sleepUntil(d *direction, due int64, stop <-chan struct{}) bool {
	for {
		wait := time.Duration(due - d.now())
		if wait <= 0 {
			return true
		}
		if wait > coarseSleep {
			s.t.Reset(wait - time.Millisecond)
			select {
			case <-s.t.C:
			case <-stop:
				s.t.Stop()
				return false
			}
			continue
		}
		fineSleep(wait)
		select {
		case <-stop:
			return false
		default:
		}
	}
}
