package porttest

import (
	"bytes"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
)

func frame(n int, b byte) []byte {
	f := make([]byte, n)
	for i := range f {
		f[i] = b + byte(i)
	}
	return f
}

func TestInjectRead(t *testing.T) {
	CheckGoroutines(t)
	p := New(Config{})
	defer p.Close()
	woke := 0
	p.SetReadableFunc(func() { woke++ })
	f := frame(64, 1)
	if err := p.Inject(f); err != nil {
		t.Fatal(err)
	}
	f[0] = 0xFF // Inject copied
	if p.Pending() != 1 || p.Injected() != 1 || woke != 1 {
		t.Fatalf("pending %d injected %d woke %d", p.Pending(), p.Injected(), woke)
	}
	buf := make([]byte, 100)
	n, err := p.ReadFrame(buf)
	if err != nil || !bytes.Equal(buf[:n], frame(64, 1)) {
		t.Fatalf("ReadFrame = %d, %v", n, err)
	}
	if _, ok, err := p.TryReadFrame(buf); ok || err != nil {
		t.Fatal("TryReadFrame on an empty port")
	}
	_ = p.Inject(frame(200, 2))
	if _, err := p.ReadFrame(buf); !errors.Is(err, port.ErrFrameTooBig) {
		t.Fatalf("short buffer: %v", err)
	}
	_ = p.Inject(frame(20, 3))
	if n, ok, err := p.TryReadFrame(buf); !ok || err != nil || n != 20 {
		t.Fatalf("TryReadFrame = %d %v %v", n, ok, err)
	}
	s := p.Stats()
	if s.RxFrames != 2 || s.RxBytes != 84 || s.RxDropTooBig != 1 {
		t.Fatalf("stats %v", s)
	}
}

func TestWriteSniff(t *testing.T) {
	CheckGoroutines(t)
	p := New(Config{TxDepth: 2, MaxFrame: 100})
	defer p.Close()
	f := frame(60, 5)
	if err := p.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
	f[0] = 0 // WriteFrame copied
	if got := p.Next(t, time.Second); !bytes.Equal(got, frame(60, 5)) {
		t.Fatalf("written % x", got)
	}
	if err := p.WriteFrame(frame(10, 0)); !errors.Is(err, port.ErrRuntFrame) {
		t.Fatalf("runt: %v", err)
	}
	if err := p.WriteFrame(frame(101, 0)); !errors.Is(err, port.ErrFrameTooBig) {
		t.Fatalf("too big: %v", err)
	}
	for i := range 3 { // the third finds Written full: dropped, never blocks
		if err := p.WriteFrame(frame(20, byte(i))); err != nil {
			t.Fatal(err)
		}
	}
	if got := p.Drain(); len(got) != 2 || got[1][0] != 1 {
		t.Fatalf("drained %d frames", len(got))
	}
	s := p.Stats()
	if s.TxFrames != 4 || s.TxBytes != 120 || s.TxDropRunt != 1 || s.TxDropTooBig != 1 || s.TxDropQueueFull != 1 {
		t.Fatalf("stats %v", s)
	}
}

func TestTryInjectFull(t *testing.T) {
	p := New(Config{RxDepth: 1})
	defer p.Close()
	if !p.TryInject(frame(20, 0)) || p.TryInject(frame(20, 1)) {
		t.Fatal("TryInject")
	}
	if s := p.Stats(); s.RxDropQueueFull != 1 {
		t.Fatalf("stats %v", s)
	}
}

func TestCloseReleases(t *testing.T) {
	CheckGoroutines(t)
	p := New(Config{RxDepth: 1})
	done := make(chan error, 2)
	go func() { _, err := p.ReadFrame(make([]byte, 100)); done <- err }()
	testutil.WaitBlocked(t, "github.com/emunic/emunic/nic/port/porttest.(*Port).ReadFrame", 1)
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-done; !errors.Is(err, port.ErrClosed) {
		t.Fatalf("blocked reader: %v", err)
	}
	if err := p.Inject(frame(20, 0)); !errors.Is(err, port.ErrClosed) {
		t.Fatalf("Inject after Close: %v", err)
	}
	if err := p.WriteFrame(frame(20, 0)); !errors.Is(err, port.ErrClosed) {
		t.Fatalf("WriteFrame after Close: %v", err)
	}
	if _, ok, err := p.TryReadFrame(nil); ok || !errors.Is(err, port.ErrClosed) {
		t.Fatal("TryReadFrame after Close")
	}
	if !p.Closed() || p.Close() != nil || p.Stats().TxDropClosed != 1 {
		t.Fatalf("after Close: %v", p.Stats())
	}
}

func TestCloseCountsQueued(t *testing.T) {
	p := New(Config{})
	_ = p.Inject(frame(20, 0))
	_ = p.Inject(frame(20, 1))
	p.Close()
	if s := p.Stats(); s.RxDropClosed != 2 {
		t.Fatalf("stats %v", s)
	}
}

func TestBlockingHidesPolling(t *testing.T) {
	p := New(Config{})
	defer p.Close()
	b := p.Blocking()
	if _, ok := b.(interface{ Pending() int }); ok {
		t.Fatal("Blocking still exposes Pending")
	}
	_ = p.Inject(frame(30, 0))
	if n, err := b.ReadFrame(make([]byte, 64)); n != 30 || err != nil {
		t.Fatal(n, err)
	}
	if err := b.WriteFrame(frame(30, 0)); err != nil || len(p.Drain()) != 1 || b.Stats().TxFrames != 1 {
		t.Fatal("Blocking write")
	}
}

// TestCheckGoroutinesCatchesLeak runs the check against a fake test that
// leaves a goroutine blocked.
func TestCheckGoroutinesCatchesLeak(t *testing.T) {
	stop := make(chan struct{})
	defer close(stop)
	ft := &fakeTB{TB: t}
	CheckGoroutines(ft)
	go func() { <-stop }()
	ft.runCleanups()
	if !ft.failed {
		t.Fatal("a leaked goroutine went unnoticed")
	}
}

type fakeTB struct {
	testing.TB
	cleanups []func()
	failed   bool
}

func (f *fakeTB) Helper()               {}
func (f *fakeTB) Cleanup(fn func())     { f.cleanups = append(f.cleanups, fn) }
func (f *fakeTB) Errorf(string, ...any) { f.failed = true }
func (f *fakeTB) runCleanups() {
	for i := len(f.cleanups) - 1; i >= 0; i-- {
		f.cleanups[i]()
	}
}
