package tests

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
)

// envCount reads a positive count from environment variable name, or
// returns def.
func envCount(t testing.TB, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		t.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// The ways a churned connection ends; the client's first byte tells the
// server which.
const (
	endServerFirst = 'S' // the server sends its reply and closes first (TIME_WAIT on the server)
	endClientFirst = 'C' // the client closes first after the reply (TIME_WAIT on the client)
	endServerAbort = 'A' // the server resets after the request
	endClientAbort = 'R' // the client resets after the reply
	endBoth        = 'B' // both close right after the reply
)

var churnEndings = []byte{endServerFirst, endClientFirst, endServerAbort, endClientAbort, endBoth}

// churnReply is what the server answers request byte e of connection i.
func churnReply(e byte, i uint32) []byte {
	return fmt.Appendf(nil, "%c reply to connection %08d", e, i)
}

// churnServe serves one churned connection (delegated or not).
func churnServe(c net.Conn) error {
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	var req [5]byte
	if _, err := io.ReadFull(c, req[:]); err != nil {
		return fmt.Errorf("request: %w", err)
	}
	e, i := req[0], uint32(req[1])<<24|uint32(req[2])<<16|uint32(req[3])<<8|uint32(req[4])
	if e == endServerAbort {
		if dc, ok := c.(*tcpstack.DelegatedConn); ok {
			return dc.Abort()
		}
		return errors.New("abort asked of a connection on netstack")
	}
	if _, err := c.Write(churnReply(e, i)); err != nil {
		return fmt.Errorf("reply: %w", err)
	}
	switch e {
	case endServerFirst, endBoth:
		return nil // Close
	}
	// Wait for the client's FIN (or reset).
	_, err := io.Copy(io.Discard, c)
	if e == endClientAbort {
		return nil
	}
	return err
}

// churnClient runs connection i, ending it the way e says.
func churnClient(ctx context.Context, a *tcpstack.Host, dst netip.AddrPort, e byte, i uint32) error {
	c, err := a.DialOffload(ctx, dst)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write([]byte{e, byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}); err != nil {
		c.Abort()
		return fmt.Errorf("request: %w", err)
	}
	if e == endServerAbort {
		_, err := io.ReadAll(c)
		c.Close()
		if !errors.Is(err, tcpstack.ErrConnReset) {
			return fmt.Errorf("after the server's abort: %v, want a reset", err)
		}
		return nil
	}
	want := churnReply(e, i)
	got := make([]byte, len(want))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		c.Abort()
		return fmt.Errorf("reply %q (%v), want %q", got, err, want)
	}
	switch e {
	case endServerFirst:
		if n, err := c.Read(got[:1]); n != 0 || err != io.EOF {
			c.Abort()
			return fmt.Errorf("after the reply: %d bytes, %v; want EOF", n, err)
		}
		return c.Close()
	case endClientAbort:
		return c.Abort()
	}
	return c.Close()
}

// TestChurnEveryEnding opens and closes connections between two hosts on
// the in-memory wire, each delegated on both ends, ending each of five
// ways in turn (either side closing first, either side resetting, both at
// once), several at a time; every exchange is checked, and at the end
// every index, flow, TIME_WAIT record and pooled buffer is back, with the
// host memory (arena, pool, Go heap) where it stood after the first tenth.
//
// 100,000 connections by default (-short: 5,000); EMUNIC_CHURN sets the
// count.
func TestChurnEveryEnding(t *testing.T) {
	n := envCount(t, "EMUNIC_CHURN", 100000)
	if testing.Short() && os.Getenv("EMUNIC_CHURN") == "" {
		n = 5000
	}
	const workers = 16
	r := hostrig.New(t, hostrig.Config{})
	a, b := r.A, r.B
	l, err := b.ListenOffload(7007)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	var serveErrs atomic.Uint64
	var firstServeErr atomic.Value
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				if err := churnServe(c); err != nil {
					serveErrs.Add(1)
					firstServeErr.CompareAndSwap(nil, err)
				}
			}()
		}
	}()
	dst := netip.AddrPortFrom(b.Addr(), 7007)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	var next atomic.Int64
	var failed atomic.Bool
	run := func(upto int64) {
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for !failed.Load() {
					i := next.Add(1) - 1
					if i >= upto {
						return
					}
					e := churnEndings[i%int64(len(churnEndings))]
					if err := churnClient(ctx, a, dst, e, uint32(i)); err != nil {
						failed.Store(true)
						t.Errorf("connection %d (%c): %v", i, e, err)
						return
					}
				}
			}()
		}
		wg.Wait()
	}
	// settle waits until both hosts and devices hold nothing for a
	// connection, TIME_WAIT records included.
	settle := func(what string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second)
		for {
			ua, ub := a.OffloadUsage(), b.OffloadUsage()
			oa, ob := counters(t, a).Occupancy, counters(t, b).Occupancy
			if ua.Conns == 0 && ub.Conns == 0 && oa.Conns == 0 && ob.Conns == 0 && oa.TimeWait == 0 && ob.TimeWait == 0 &&
				ua.Pool.InUse == 0 && ub.Pool.InUse == 0 && ua.Flows == 0 && ub.Flows == 1 && oa.Timers == 0 && ob.Timers == 0 {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: not settled: host A %+v B %+v; device A %+v B %+v", what, ua, ub, oa, ob)
			}
			time.Sleep(20 * time.Millisecond) // polling published snapshots, not synchronising
		}
	}
	start := time.Now()
	warm := int64(n / 10)
	run(warm)
	if t.Failed() {
		return
	}
	settle("after the first tenth")
	baseHeap := heap()
	ua0, ub0 := a.OffloadUsage(), b.OffloadUsage()
	arenaA0, arenaB0 := a.Mem.InUse(), b.Mem.InUse()
	run(int64(n))
	if t.Failed() {
		return
	}
	elapsed := time.Since(start)
	settle("at the end")
	if k := serveErrs.Load(); k != 0 {
		t.Fatalf("%d server errors, the first: %v", k, firstServeErr.Load())
	}
	if f := l.Fallbacks() + l.Lost(); f != 0 {
		t.Fatalf("%d connections not delegated: %v", f, l.FallbackErr())
	}
	endHeap := heap()
	ua, ub := a.OffloadUsage(), b.OffloadUsage()
	oa, ob := counters(t, a).Occupancy, counters(t, b).Occupancy
	t.Logf("%d connections in %v (%.0f/s, %d at a time); heap %d → %d KiB; pool A %+v B %+v; arena A %d → %d KiB, B %d → %d KiB; engine A %+v B %+v",
		n, elapsed.Round(time.Millisecond), float64(n)/elapsed.Seconds(), workers, baseHeap>>10, endHeap>>10,
		ua.Pool, ub.Pool, arenaA0>>10, a.Mem.InUse()>>10, arenaB0>>10, b.Mem.InUse()>>10, oa, ob)
	// Flat: the pool's slabs (its high-water mark) may have grown by one
	// while the burst's peak moved, never with the count.
	const slack = 2 << 20
	if ua.Pool.Reserved > ua0.Pool.Reserved+slack || ub.Pool.Reserved > ub0.Pool.Reserved+slack {
		t.Errorf("pool grew: A %d → %d, B %d → %d", ua0.Pool.Reserved, ua.Pool.Reserved, ub0.Pool.Reserved, ub.Pool.Reserved)
	}
	if a.Mem.InUse() > arenaA0+slack || b.Mem.InUse() > arenaB0+slack {
		t.Errorf("arena grew: A %d → %d, B %d → %d", arenaA0, a.Mem.InUse(), arenaB0, b.Mem.InUse())
	}
	if endHeap > baseHeap+32<<20 {
		t.Errorf("Go heap grew from %d to %d KiB over %d connections", baseHeap>>10, endHeap>>10, n-int(warm))
	}
	if ua.Quarantined+ub.Quarantined != 0 || ua.FreeIdx != ua0.FreeIdx || ub.FreeIdx != ub0.FreeIdx {
		t.Errorf("indices not all back: A %+v B %+v", ua, ub)
	}
	// Control blocks are per index, reused: as many as indices were taken
	// at once (connections open, closing, or awaiting their release; on a
	// busy machine the server's goroutines lag and this reaches ~1,000),
	// never one per connection: a leaked index per connection would reach
	// the table's 10,000 (and then fall back).
	if oa.ControlSlabs > 4096 || ob.ControlSlabs > 4096 {
		t.Errorf("control blocks A %d B %d for %d connections at a time", oa.ControlSlabs, ob.ControlSlabs, workers)
	}
}
