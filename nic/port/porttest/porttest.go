// Package porttest is a fake port.Port for tests, in the manner of
// wireguard-go's tun/tuntest: the test plays the cable and the far end
// through channels.
//
//   - [Port.Inject] delivers a frame to whatever reads the port (the NIC's
//     MAC): it is what ReadFrame returns next.
//   - [Port.Written] is a channel of every frame written to the port (what
//     the NIC transmitted), each a private copy; [Port.Next] takes one with
//     a timeout, failing the test if none comes.
//   - [Port.Stats] keeps the counters a real port keeps, so a test can check
//     drops by reason.
//
// A Port also implements the polling interface the NIC's unit uses for
// in-memory wires (TryReadFrame, SetReadableFunc, Pending), so a device on
// a fake port runs exactly as on a port.Wire; wrap it with [Port.Blocking]
// to exercise the device's blocking MAC goroutine instead.
//
// [CheckGoroutines] fails a test that leaves goroutines behind.
package porttest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
)

// Config sizes a Port. Zero values take the defaults.
type Config struct {
	// RxDepth is how many injected frames wait for ReadFrame before
	// Inject blocks (TryInject drops). Default 256.
	RxDepth int
	// TxDepth is how many written frames wait in Written before
	// WriteFrame drops them (counted in TxDropQueueFull: a fake port must
	// never block the device). Default 4096.
	TxDepth int
	// MaxFrame is the largest frame WriteFrame takes. Default
	// port.MaxFrameSize.
	MaxFrame int
}

// Port is a channel-backed port.Port.
type Port struct {
	cfg      Config
	in       chan []byte
	out      chan []byte
	closed   chan struct{}
	once     sync.Once
	readable atomic.Pointer[func()]

	mu       sync.Mutex
	stats    port.Stats
	injected uint64
}

var _ port.Port = (*Port)(nil)

// New returns an open Port.
func New(cfg Config) *Port {
	if cfg.RxDepth <= 0 {
		cfg.RxDepth = 256
	}
	if cfg.TxDepth <= 0 {
		cfg.TxDepth = 4096
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = port.MaxFrameSize
	}
	return &Port{cfg: cfg, in: make(chan []byte, cfg.RxDepth), out: make(chan []byte, cfg.TxDepth),
		closed: make(chan struct{})}
}

// Inject delivers a copy of frame to the port's reader, blocking while
// RxDepth frames are already waiting. It returns port.ErrClosed once the
// port is closed.
func (p *Port) Inject(frame []byte) error {
	f := append([]byte(nil), frame...)
	select {
	case <-p.closed:
		return port.ErrClosed
	default:
	}
	select {
	case p.in <- f:
	case <-p.closed:
		return port.ErrClosed
	}
	p.mu.Lock()
	p.injected++
	p.mu.Unlock()
	p.notify()
	return nil
}

// TryInject is Inject without blocking: a frame that finds the receive
// queue full is dropped, counted in RxDropQueueFull, and false returned.
func (p *Port) TryInject(frame []byte) bool {
	select {
	case <-p.closed:
		return false
	default:
	}
	select {
	case p.in <- append([]byte(nil), frame...):
	default:
		p.mu.Lock()
		p.stats.RxDropQueueFull++
		p.mu.Unlock()
		return false
	}
	p.mu.Lock()
	p.injected++
	p.mu.Unlock()
	p.notify()
	return true
}

func (p *Port) notify() {
	if fn := p.readable.Load(); fn != nil {
		(*fn)()
	}
}

// Injected is the number of frames Inject and TryInject queued.
func (p *Port) Injected() uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.injected
}

// Written is the channel of frames written to the port, in order. It is
// never closed.
func (p *Port) Written() <-chan []byte { return p.out }

// Next returns the next written frame, failing t if none arrives within
// timeout.
func (p *Port) Next(t testing.TB, timeout time.Duration) []byte {
	t.Helper()
	select {
	case f := <-p.out:
		return f
	case <-time.After(timeout):
		t.Fatalf("porttest: no frame written within %v (%v)", timeout, p.Stats())
		return nil
	}
}

// Drain returns every frame already written and not yet taken, without
// waiting.
func (p *Port) Drain() [][]byte {
	var out [][]byte
	for {
		select {
		case f := <-p.out:
			out = append(out, f)
		default:
			return out
		}
	}
}

// WriteFrame implements port.Port: it checks the frame as a MAC would and
// queues a copy on Written. It never blocks: with TxDepth frames untaken
// the frame is dropped and counted.
func (p *Port) WriteFrame(frame []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.closed:
		p.stats.TxDropClosed++
		return port.ErrClosed
	default:
	}
	switch {
	case len(frame) < port.EthHeaderLen:
		p.stats.TxDropRunt++
		return port.ErrRuntFrame
	case len(frame) > p.cfg.MaxFrame:
		p.stats.TxDropTooBig++
		return port.ErrFrameTooBig
	}
	p.stats.TxFrames++
	p.stats.TxBytes += uint64(len(frame))
	select {
	case p.out <- append([]byte(nil), frame...):
	default:
		p.stats.TxDropQueueFull++
	}
	return nil
}

// ReadFrame implements port.Port: it blocks until a frame is injected or
// the port is closed.
func (p *Port) ReadFrame(buf []byte) (int, error) {
	select {
	case f := <-p.in:
		return p.deliver(buf, f)
	case <-p.closed:
		return 0, port.ErrClosed
	}
}

// TryReadFrame is ReadFrame without blocking: ok is false when no frame is
// waiting (or the port is closed, with port.ErrClosed).
func (p *Port) TryReadFrame(buf []byte) (n int, ok bool, err error) {
	select {
	case <-p.closed:
		return 0, false, port.ErrClosed
	default:
	}
	select {
	case f := <-p.in:
		n, err := p.deliver(buf, f)
		return n, true, err
	default:
		return 0, false, nil
	}
}

func (p *Port) deliver(buf, f []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(f) > len(buf) {
		p.stats.RxDropTooBig++
		return 0, port.ErrFrameTooBig
	}
	p.stats.RxFrames++
	p.stats.RxBytes += uint64(len(f))
	return copy(buf, f), nil
}

// SetReadableFunc registers fn to be called after each injected frame (the
// polling reader's wake-up).
func (p *Port) SetReadableFunc(fn func()) {
	if fn == nil {
		p.readable.Store(nil)
		return
	}
	p.readable.Store(&fn)
}

// Pending is the number of injected frames not yet read.
func (p *Port) Pending() int { return len(p.in) }

// Close implements port.Port: readers and injectors are released with
// port.ErrClosed, and frames still waiting are counted in RxDropClosed.
// Frames already written stay readable on Written. Safe to call twice.
func (p *Port) Close() error {
	p.once.Do(func() {
		p.mu.Lock()
		close(p.closed)
		p.mu.Unlock()
		for dropped := true; dropped; {
			select {
			case <-p.in:
				p.mu.Lock()
				p.stats.RxDropClosed++
				p.mu.Unlock()
			default:
				dropped = false
			}
		}
	})
	return nil
}

// Closed reports whether Close has been called.
func (p *Port) Closed() bool {
	select {
	case <-p.closed:
		return true
	default:
		return false
	}
}

// Stats implements port.Port.
func (p *Port) Stats() port.Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// String names the port and its counters, for test failures.
func (p *Port) String() string { return fmt.Sprintf("porttest.Port{%v}", p.Stats()) }

// Blocking returns p as a plain port.Port, hiding the polling methods, so
// that a device reads it from its blocking MAC goroutine.
func (p *Port) Blocking() port.Port { return blocking{p} }

type blocking struct{ p *Port }

func (b blocking) WriteFrame(f []byte) error         { return b.p.WriteFrame(f) }
func (b blocking) ReadFrame(buf []byte) (int, error) { return b.p.ReadFrame(buf) }
func (b blocking) Close() error                      { return b.p.Close() }
func (b blocking) Stats() port.Stats                 { return b.p.Stats() }
