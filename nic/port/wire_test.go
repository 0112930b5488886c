package port

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

func TestWireCleanIntactAndInOrder(t *testing.T) {
	defer checkGoroutines(t)()
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	defer b.Close()

	// Sizes across every buffer class boundary, up to the largest frame.
	sizes := []int{14, 15, 18, 60, 64, 1514, 1518, 2047, 2048, 2049, 9018, 16383, 16384, 16385, 65000, MaxFrameSize}
	var sent, got [][]byte
	for i := range 3000 {
		f := testFrame(uint32(i), sizes[i%len(sizes)])
		if err := a.WriteFrame(f); err != nil {
			t.Fatalf("WriteFrame %d: %v", i, err)
		}
		sent = append(sent, f)
		if i%100 == 99 { // stay under the FIFO's byte limit
			got = append(got, drain(t, b)...)
		}
	}
	if len(got) != len(sent) {
		t.Fatalf("received %d frames, sent %d", len(got), len(sent))
	}
	var bytesSent uint64
	for i := range sent {
		if !bytes.Equal(got[i], sent[i]) {
			t.Fatalf("frame %d (%d bytes) differs", i, len(sent[i]))
		}
		bytesSent += uint64(len(sent[i]))
	}
	as, bs := a.Stats(), b.Stats()
	if as.TxFrames != 3000 || as.TxBytes != bytesSent || bs.RxFrames != 3000 || bs.RxBytes != bytesSent {
		t.Errorf("counters: a{%v} b{%v}", as, bs)
	}
	if as.TxDropped()+bs.RxDropped() != 0 {
		t.Errorf("drops on a clean wire: a{%v} b{%v}", as, bs)
	}

	// And the other way.
	if err := b.WriteFrame(sent[5]); err != nil {
		t.Fatal(err)
	}
	if got := drain(t, a); len(got) != 1 || !bytes.Equal(got[0], sent[5]) {
		t.Fatalf("b→a: got %d frames", len(got))
	}
}

func TestWireCopySemantics(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	defer b.Close()
	f := testFrame(1, 100)
	want := append([]byte(nil), f...)
	if err := a.WriteFrame(f); err != nil {
		t.Fatal(err)
	}
	for i := range f {
		f[i] = 0xff // the caller reuses its buffer at once
	}
	if got := drain(t, b); !bytes.Equal(got[0], want) {
		t.Fatal("frame changed after WriteFrame returned: the wire kept the caller's slice")
	}
}

func TestWireConcurrentWriterReader(t *testing.T) {
	defer checkGoroutines(t)()
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	const n = 50000
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f := testFrame(0, 1514)
		for i := range uint32(n) {
			copy(f[14:18], testFrame(i, 18)[14:18])
			for b.Pending() > 3000 { // the flow control TCP would provide
				runtime.Gosched()
			}
			if err := a.WriteFrame(f); err != nil {
				t.Errorf("WriteFrame: %v", err)
				return
			}
		}
	}()
	buf := make([]byte, 2048)
	for i := range uint32(n) {
		k, err := b.ReadFrame(buf)
		if err != nil {
			t.Fatalf("ReadFrame %d: %v", i, err)
		}
		if k != 1514 || frameSeq(buf) != i {
			t.Fatalf("frame %d: len %d seq %d", i, k, frameSeq(buf))
		}
	}
	wg.Wait()
	if s := b.Stats(); s.RxDropped() != 0 {
		t.Errorf("drops: %v", s)
	}
	b.Close()
}

func TestWireQueueFullDropsTail(t *testing.T) {
	a, b := MustNewWire(WireConfig{QueueLen: 8})
	defer a.Close()
	defer b.Close()
	for i := range uint32(20) {
		if err := a.WriteFrame(testFrame(i, 100)); err != nil {
			t.Fatal(err) // a full far end is not the sender's error
		}
	}
	got := drain(t, b)
	if len(got) != 8 {
		t.Fatalf("received %d frames, want the FIFO depth 8", len(got))
	}
	for i, f := range got {
		if frameSeq(f) != uint32(i) {
			t.Fatalf("frame %d has seq %d: drop-tail keeps the oldest frames", i, frameSeq(f))
		}
	}
	if s := b.Stats(); s.RxDropQueueFull != 12 {
		t.Errorf("RxDropQueueFull = %d, want 12 (%v)", s.RxDropQueueFull, s)
	}
	if s := a.Stats(); s.TxFrames != 20 || s.TxDropped() != 0 {
		t.Errorf("sender: %v", s)
	}
}

func TestWireQueueBytes(t *testing.T) {
	a, b := MustNewWire(WireConfig{QueueLen: 100, QueueBytes: 10000, MaxFrameSize: 1514})
	defer a.Close()
	defer b.Close()
	for i := range uint32(10) {
		a.WriteFrame(testFrame(i, 1514))
	}
	// 6 × 1514 = 9084 fits, a 7th would make 10598.
	if got := len(drain(t, b)); got != 6 {
		t.Fatalf("received %d frames, want 6", got)
	}
	if s := b.Stats(); s.RxDropQueueFull != 4 {
		t.Errorf("RxDropQueueFull = %d, want 4", s.RxDropQueueFull)
	}
	// The byte count went back to zero as frames were read: the FIFO takes 6 again.
	for i := range uint32(6) {
		a.WriteFrame(testFrame(i, 1514))
	}
	if got := len(drain(t, b)); got != 6 {
		t.Fatalf("second round: received %d frames, want 6", got)
	}
}

func TestWireWriteErrors(t *testing.T) {
	a, b := MustNewWire(WireConfig{MaxFrameSize: 1514})
	defer b.Close()
	if err := a.WriteFrame(make([]byte, 13)); !errors.Is(err, ErrRuntFrame) {
		t.Errorf("13-byte frame: %v, want ErrRuntFrame", err)
	}
	if err := a.WriteFrame(make([]byte, 1515)); !errors.Is(err, ErrFrameTooBig) {
		t.Errorf("1515-byte frame on a 1514 wire: %v, want ErrFrameTooBig", err)
	}
	if err := a.WriteFrame(make([]byte, 1514)); err != nil {
		t.Errorf("1514-byte frame: %v", err)
	}
	a.Close()
	if err := a.WriteFrame(make([]byte, 60)); !errors.Is(err, ErrClosed) {
		t.Errorf("after Close: %v, want ErrClosed", err)
	}
	s := a.Stats()
	if s.TxDropRunt != 1 || s.TxDropTooBig != 1 || s.TxDropClosed != 1 || s.TxFrames != 1 {
		t.Errorf("counters: %v", s)
	}
}

func TestWireReadBufferTooSmall(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	defer b.Close()
	a.WriteFrame(testFrame(1, 1514))
	a.WriteFrame(testFrame(2, 60))
	buf := make([]byte, 100)
	if _, err := b.ReadFrame(buf); !errors.Is(err, ErrFrameTooBig) {
		t.Fatalf("1514-byte frame into 100-byte buffer: %v, want ErrFrameTooBig", err)
	}
	n, err := b.ReadFrame(buf) // the caller keeps reading
	if err != nil || n != 60 || frameSeq(buf) != 2 {
		t.Fatalf("next frame: n=%d err=%v", n, err)
	}
	if s := b.Stats(); s.RxDropTooBig != 1 || s.RxFrames != 1 {
		t.Errorf("counters: %v", s)
	}
}

func TestWireCloseUnblocksReader(t *testing.T) {
	defer checkGoroutines(t)()
	for _, cfg := range []WireConfig{{}, {AToB: Impairments{Delay: time.Millisecond}, BToA: Impairments{Delay: time.Millisecond}}} {
		a, b := MustNewWire(cfg)
		errc := make(chan error, 2)
		for _, p := range []*WirePort{a, b} {
			go func() {
				_, err := p.ReadFrame(make([]byte, 2048))
				errc <- err
			}()
		}
		testutil.WaitBlocked(t, "github.com/emunic/emunic/nic/port.(*WirePort).ReadFrame", 2)
		b.Close()
		select {
		case err := <-errc:
			if !errors.Is(err, ErrClosed) {
				t.Fatalf("blocked ReadFrame on closed port returned %v, want ErrClosed", err)
			}
		case <-time.After(2 * time.Second):
			t.Fatal("Close did not unblock ReadFrame")
		}
		// a's reader stays blocked: its port is open, its cable is just unplugged.
		select {
		case err := <-errc:
			t.Fatalf("reader of the open peer returned %v", err)
		case <-time.After(20 * time.Millisecond):
		}
		a.Close()
		if err := <-errc; !errors.Is(err, ErrClosed) {
			t.Fatalf("got %v, want ErrClosed", err)
		}
		if _, err := a.ReadFrame(make([]byte, 10)); !errors.Is(err, ErrClosed) {
			t.Fatalf("ReadFrame after Close: %v", err)
		}
		if err := a.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
	}
}

func TestWireCloseCountsEveryFrame(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	for i := range uint32(5) {
		a.WriteFrame(testFrame(i, 60))
	}
	b.Close()
	a.WriteFrame(testFrame(9, 60))
	if s := b.Stats(); s.RxDropClosed != 5 {
		t.Errorf("b: RxDropClosed = %d, want the 5 queued frames (%v)", s.RxDropClosed, s)
	}
	if s := a.Stats(); s.TxDropLinkDown != 1 || s.TxFrames != 6 {
		t.Errorf("a: %v, want tx_frames=6 tx_drop_link_down=1", s)
	}
}

// TestWireCleanNeedsNoGoroutine checks the promise that a clean wire adds no goroutine and that
// a delay line, once configured, goes away with Close.
func TestWireCleanNeedsNoGoroutine(t *testing.T) {
	defer checkGoroutines(t)()
	before := settledGoroutines()
	a, b := MustNewWire(WireConfig{AToB: Impairments{LossPercent: 1, CorruptPercent: 1, DuplicatePercent: 1}})
	for i := range uint32(100) {
		a.WriteFrame(testFrame(i, 100))
	}
	drain(t, b)
	if n := settledGoroutines(); n != before {
		t.Errorf("%d goroutines after traffic on a wire without delay, want %d", n, before)
	}
	if err := a.SetTxImpairments(Impairments{Delay: time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	if n := settledGoroutines(); n != before+1 {
		t.Errorf("%d goroutines with a delay line, want %d", n, before+1)
	}
	a.Close()
	b.Close()
	if n := runtime.NumGoroutine(); n > before { // no settling: Close itself must wait
		t.Errorf("%d goroutines after Close, want %d: Close must wait for the delay line", n, before)
	}
}

// settledGoroutines returns the goroutine count once goroutines left over from earlier tests
// (timer callbacks, readers unblocked by Close) have finished exiting.
func settledGoroutines() int {
	n := runtime.NumGoroutine()
	for stable := 0; stable < 5; {
		time.Sleep(10 * time.Millisecond)
		if m := runtime.NumGoroutine(); m == n {
			stable++
		} else {
			n, stable = m, 0
		}
	}
	return n
}

func TestWireNoAllocs(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer a.Close()
	defer b.Close()
	f := testFrame(1, 1514)
	buf := make([]byte, 2048)
	allocs := testing.AllocsPerRun(1000, func() {
		a.WriteFrame(f)
		b.ReadFrame(buf)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per frame on a clean wire, want 0", allocs)
	}
}

func TestWireConfigValidate(t *testing.T) {
	bad := []WireConfig{
		{QueueLen: -1},
		{QueueBytes: -1},
		{MaxFrameSize: 10},
		{QueueBytes: 1000, MaxFrameSize: 1514},
		{AToB: Impairments{LossPercent: 101}},
		{BToA: Impairments{Delay: -1}},
	}
	for _, c := range bad {
		if c.Validate() == nil {
			t.Errorf("%+v: Validate accepted it", c)
		}
		if a, b, err := NewWire(c); err == nil || a != nil || b != nil {
			t.Errorf("%+v: NewWire accepted it", c)
		}
	}
	defer func() {
		if recover() == nil {
			t.Error("MustNewWire accepted an invalid config")
		}
	}()
	MustNewWire(WireConfig{QueueLen: -1})
}

// BenchmarkWireWriteRead is the clean wire's cost per 1514-byte frame: one WriteFrame and one
// ReadFrame on the same goroutine (two copies, two FIFO operations, two free-list operations).
func BenchmarkWireWriteRead1514(b *testing.B) {
	pa, pb := MustNewWire(WireConfig{})
	defer pa.Close()
	defer pb.Close()
	f := testFrame(1, 1514)
	buf := make([]byte, 2048)
	b.SetBytes(1514)
	b.ReportAllocs()
	for b.Loop() {
		if err := pa.WriteFrame(f); err != nil {
			b.Fatal(err)
		}
		if _, err := pb.ReadFrame(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWirePipelined1514 has a writer and a reader goroutine, as in a real run (netstack's
// transmit path on one side, the device's receive loop on the other).
func BenchmarkWirePipelined1514(b *testing.B) {
	pa, pb := MustNewWire(WireConfig{})
	defer pa.Close()
	f := testFrame(1, 1514)
	b.SetBytes(1514)
	b.ReportAllocs()
	done := make(chan int)
	go func() {
		buf := make([]byte, 2048)
		n := 0
		for {
			if _, err := pb.ReadFrame(buf); err != nil {
				done <- n
				return
			}
			n++
		}
	}()
	for b.Loop() {
		for pb.Pending() > DefaultQueueLen/2 { // stand-in for TCP's window
			runtime.Gosched()
		}
		pa.WriteFrame(f)
	}
	for pb.Pending() > 0 {
		runtime.Gosched()
	}
	pb.Close()
	<-done
	if s := pb.Stats(); s.RxDropped() != 0 {
		b.Errorf("drops: %v", s)
	}
}

// BenchmarkWireImpaired1514 is the impaired path without a delay line (1% loss).
func BenchmarkWireImpaired1514(b *testing.B) {
	pa, pb := MustNewWire(WireConfig{AToB: Impairments{LossPercent: 1}})
	defer pa.Close()
	defer pb.Close()
	f := testFrame(1, 1514)
	buf := make([]byte, 2048)
	b.SetBytes(1514)
	b.ReportAllocs()
	for b.Loop() {
		pa.WriteFrame(f)
		for pb.Pending() > 0 {
			pb.ReadFrame(buf)
		}
	}
}
