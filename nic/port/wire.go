package port

import (
	"fmt"
	"sync/atomic"
)

// Defaults for WireConfig.
const (
	// DefaultQueueLen is the receive FIFO depth in frames. Deep enough that a clean wire under
	// a netstack TCP flow (a few MB in flight at most) never drops; shallow enough that a
	// runaway sender is told by drops, as a switch would tell it.
	DefaultQueueLen = 4096
	// DefaultQueueBytes caps the bytes queued per stage, so that a FIFO full of 64 KiB frames
	// holds 16 MiB rather than QueueLen × 64 KiB.
	DefaultQueueBytes = 16 << 20
)

// WireConfig describes an in-memory cable between two ports, A and B.
// The zero value is a clean wire with the defaults.
type WireConfig struct {
	// Name labels the ports in String ("<name>.a", "<name>.b"); default "wire".
	Name string
	// QueueLen is the depth in frames of each receive FIFO, and of each direction's delay line
	// when one is configured. A frame arriving at a full FIFO is dropped (drop-tail) and
	// counted in the receiver's RxDropQueueFull. Default DefaultQueueLen.
	QueueLen int
	// QueueBytes caps the bytes held by each FIFO and delay line. Default DefaultQueueBytes.
	QueueBytes int
	// MaxFrameSize is the longest frame the wire carries (header included, no FCS); longer
	// frames are refused by WriteFrame with ErrFrameTooBig. Default MaxFrameSize.
	MaxFrameSize int
	// Seed drives every random decision the impairments make. Two wires with the same Seed
	// and impairments, fed the same frames, make the same decisions for every frame.
	Seed uint64
	// AToB and BToA impair frames written to A (read from B) and written to B (read from A).
	AToB, BToA Impairments
	// Clock, when set, times the reorder stage's holds (ReorderHoldMax)
	// instead of the real clock: a deterministic run's virtual clock, on
	// which the wire releases a held frame at the same point of the run
	// each time. The delay line (Delay, Jitter, RateBps) always runs on
	// the real clock.
	Clock Clock `json:"-"`
}

// Validate reports the first problem with c, or nil (NewWire returns it).
func (c WireConfig) Validate() error {
	if c.QueueLen < 0 {
		return fmt.Errorf("wire: QueueLen %d is negative", c.QueueLen)
	}
	if c.QueueBytes < 0 {
		return fmt.Errorf("wire: QueueBytes %d is negative", c.QueueBytes)
	}
	if c.MaxFrameSize != 0 && c.MaxFrameSize < EthHeaderLen {
		return fmt.Errorf("wire: MaxFrameSize %d is shorter than an Ethernet header", c.MaxFrameSize)
	}
	if c.QueueBytes != 0 && c.QueueBytes < c.withDefaults().MaxFrameSize {
		return fmt.Errorf("wire: QueueBytes %d cannot hold one frame of MaxFrameSize %d",
			c.QueueBytes, c.withDefaults().MaxFrameSize)
	}
	if err := c.AToB.Validate(); err != nil {
		return fmt.Errorf("wire: AToB: %w", err)
	}
	if err := c.BToA.Validate(); err != nil {
		return fmt.Errorf("wire: BToA: %w", err)
	}
	if c.Clock != nil && (c.AToB.needsDelayLine() || c.BToA.needsDelayLine()) {
		return fmt.Errorf("wire: the delay line (Delay, Jitter, RateBps) runs on the real clock only, not on WireConfig.Clock")
	}
	return nil
}

func (c WireConfig) withDefaults() WireConfig {
	if c.Name == "" {
		c.Name = "wire"
	}
	if c.QueueLen == 0 {
		c.QueueLen = DefaultQueueLen
	}
	if c.MaxFrameSize == 0 {
		c.MaxFrameSize = MaxFrameSize
	}
	if c.QueueBytes == 0 {
		c.QueueBytes = max(DefaultQueueBytes, c.MaxFrameSize)
	}
	return c
}

// WirePort is one end of an in-memory wire made by NewWire. It implements Port and is safe for
// concurrent use, although frames written concurrently are carried in no particular order.
type WirePort struct {
	name  string
	stats counters

	closed atomic.Bool
	done   chan struct{} // closed by Close, to wake a blocked ReadFrame

	rxq fifo // frames waiting for ReadFrame

	onReadable atomic.Pointer[func()] // poll mode: called after a frame is queued

	out  *direction // frames this port transmits
	in   *direction // frames this port receives
	peer *WirePort
}

// NewWire returns the two ends of a new in-memory wire, or cfg.Validate's
// error.
func NewWire(cfg WireConfig) (a, b *WirePort, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, nil, fmt.Errorf("port.NewWire: %w", err)
	}
	a, b = newWire(cfg)
	return a, b, nil
}

// MustNewWire is NewWire for configurations known to be valid (tests,
// literals): it panics if cfg.Validate fails.
func MustNewWire(cfg WireConfig) (a, b *WirePort) {
	a, b, err := NewWire(cfg)
	if err != nil {
		panic(err.Error())
	}
	return a, b
}

func newWire(cfg WireConfig) (a, b *WirePort) {
	cfg = cfg.withDefaults()
	a = newWirePort(cfg.Name+".a", cfg)
	b = newWirePort(cfg.Name+".b", cfg)
	a.peer, b.peer = b, a
	a.out = newDirection(a, b, cfg, cfg.AToB, 0)
	b.out = newDirection(b, a, cfg, cfg.BToA, 1)
	a.in, b.in = b.out, a.out
	return a, b
}

func newWirePort(name string, cfg WireConfig) *WirePort {
	return &WirePort{
		name: name,
		done: make(chan struct{}),
		rxq:  newFIFO(cfg.QueueLen, cfg.QueueBytes),
	}
}

// String returns the port's name.
func (p *WirePort) String() string { return p.name }

// Peer returns the port at the other end of the wire.
func (p *WirePort) Peer() *WirePort { return p.peer }

// MaxFrameSize returns the longest frame the wire carries.
func (p *WirePort) MaxFrameSize() int { return p.out.maxFrame }

// WriteFrame copies frame onto the wire towards the peer. It returns nil once the frame is on
// the wire, whatever happens to it there: frames lost to impairments, to a full FIFO at the far
// end or to a closed far end are counted, not reported, as on a real link.
func (p *WirePort) WriteFrame(frame []byte) error {
	d := p.out
	n := len(frame)
	if err := p.stats.checkTx(p.closed.Load(), n, d.maxFrame); err != nil {
		return err
	}
	p.stats.txFrames.Add(1)
	p.stats.txBytes.Add(uint64(n))
	if d.impaired.Load() {
		d.transmit(frame)
		return nil
	}
	// Clean wire: straight into the peer's FIFO, no goroutine or timer in between.
	d.deliver(d.pool.copyOf(frame))
	return nil
}

// TryReadFrame is ReadFrame without waiting: ok is false when no frame is
// queued. With SetReadableFunc it lets a device poll the port from its own
// loop instead of parking a goroutine in ReadFrame (one hand-off fewer per
// frame, as a MAC that DMAs straight into the engine's FIFO).
func (p *WirePort) TryReadFrame(buf []byte) (n int, ok bool, err error) {
	if p.closed.Load() {
		return 0, false, ErrClosed
	}
	var f *frame
	select {
	case f = <-p.rxq.q:
	default:
		return 0, false, nil
	}
	n = f.n
	p.rxq.bytes.Add(-int64(n))
	if n > len(buf) {
		f.release()
		p.stats.rxDropTooBig.Add(1)
		return 0, true, ErrFrameTooBig
	}
	copy(buf, f.bytes())
	f.release()
	p.stats.rxFrames.Add(1)
	p.stats.rxBytes.Add(uint64(n))
	return n, true, nil
}

// SetReadableFunc installs fn, called (on the writer's goroutine) each time
// a frame is queued for this port; nil removes it. fn must not block.
func (p *WirePort) SetReadableFunc(fn func()) { storeFunc(&p.onReadable, fn) }

// storeFunc stores fn in v, or nil for a nil fn (a pointer to a nil func
// would be called).
func storeFunc(v *atomic.Pointer[func()], fn func()) {
	if fn == nil {
		v.Store(nil)
		return
	}
	v.Store(&fn)
}

// ReadFrame waits for the next frame from the peer and copies it into buf.
func (p *WirePort) ReadFrame(buf []byte) (int, error) {
	if p.closed.Load() {
		return 0, ErrClosed
	}
	var f *frame
	// Try the FIFO alone first: a single-case receive is cheaper than a two-case select, and
	// under load the FIFO is rarely empty.
	select {
	case f = <-p.rxq.q:
	default:
		select {
		case f = <-p.rxq.q:
		case <-p.done:
			return 0, ErrClosed
		}
	}
	n := f.n
	p.rxq.bytes.Add(-int64(n))
	if n > len(buf) {
		f.release()
		p.stats.rxDropTooBig.Add(1)
		return 0, ErrFrameTooBig
	}
	copy(buf, f.bytes())
	f.release()
	p.stats.rxFrames.Add(1)
	p.stats.rxBytes.Add(uint64(n))
	return n, nil
}

// Close takes the port off the wire, like unplugging its cable: a blocked ReadFrame returns
// ErrClosed, frames still queued for this port are dropped (RxDropClosed), frames this port
// had on the wire are dropped (TxDropClosed), and from now on frames the peer writes are
// dropped and counted in the peer's TxDropLinkDown. The peer itself stays open. Any delay-line
// goroutines of the wire have exited when Close returns. Closing twice is harmless.
func (p *WirePort) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	close(p.done)
	p.out.shutdown(&p.stats.txDropClosed)
	p.in.shutdown(&p.peer.stats.txDropLinkDown)
	p.drainRx()
	return nil
}

// drainRx discards whatever is queued for a closed port. It may run more than once (Close, and
// a late deliver that raced with Close), so every frame is counted exactly once.
func (p *WirePort) drainRx() {
	for {
		select {
		case f := <-p.rxq.q:
			p.rxq.bytes.Add(-int64(f.n))
			p.stats.rxDropClosed.Add(1)
			f.release()
		default:
			return
		}
	}
}

// Stats returns a snapshot of the port's counters.
func (p *WirePort) Stats() Stats { return p.stats.snapshot() }

// Pending returns the number of frames waiting in the receive FIFO, so that a poll-mode
// reader (or a test) can drain the FIFO without blocking.
func (p *WirePort) Pending() int { return len(p.rxq.q) }

// fifo is a bounded frame queue: at most cap(q) frames and maxBytes bytes.
type fifo struct {
	q        chan *frame
	bytes    atomic.Int64
	maxBytes int64
}

func newFIFO(frames, bytes int) fifo {
	return fifo{q: make(chan *frame, frames), maxBytes: int64(bytes)}
}

// push enqueues f, or reports false when the queue is full (the caller drops f: drop-tail).
func (q *fifo) push(f *frame) bool {
	n := int64(f.n)
	if q.bytes.Add(n) > q.maxBytes {
		q.bytes.Add(-n)
		return false
	}
	select {
	case q.q <- f:
		return true
	default:
		q.bytes.Add(-n)
		return false
	}
}

var _ Port = (*WirePort)(nil)
