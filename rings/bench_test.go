package rings

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/emunic/emunic/internal/testutil"
)

// Benchmarks for the ring mechanism against a buffered Go channel, on the
// same 64-byte payload (a Command is exactly 64 bytes, as is a command ring
// entry). Compare only figures from one run, side by side:
//
//	go test -run '^$' -bench 'Channel64B|RingBatched' -count 5 ./rings/
//
// or sh rings/testdata/bench.sh, which also prints the medians and the ratio.

const (
	benchRingCount = 256
	// benchSpin is how many polls a side makes before it parks: long
	// enough (tens of µs) to outlast the peer's wake-up after a kick. With
	// a spin shorter than a wake-up the two sides can fall into a convoy,
	// each parking just as the other wakes, and every batch then pays a
	// kick (2,000 polls did that here about one run in five: 13 → 25 ns).
	benchSpin = 20000
)

func TestCommandIs64Bytes(t *testing.T) {
	if s := int(unsafe.Sizeof(Command{})); s != CommandEntrySize {
		t.Fatalf("Command struct is %d bytes, the channel benchmark assumes %d", s, CommandEntrySize)
	}
}

// BenchmarkChannel64B: a buffered channel of 64-byte structs, producer
// goroutine to consumer goroutine, b.N entries.
func BenchmarkChannel64B(b *testing.B) {
	b.ReportAllocs()
	ch := make(chan Command, benchRingCount)
	b.ResetTimer()
	chanChunk(ch, b.N, b.Errorf)
}

// chanChunk sends n commands tagged 0..n-1 through ch to a consumer
// goroutine and returns when it has received them all.
func chanChunk(ch chan Command, n int, fail func(string, ...any)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		var c Command
		for i := 0; i < n; i++ {
			c = <-ch
			if c.Tag != uint64(i) {
				fail("entry %d carries tag %d", i, c.Tag)
				for range n - i - 1 {
					<-ch
				}
				return
			}
		}
	}()
	c := Command{Opcode: OpNop, Conn: 7}
	for i := 0; i < n; i++ {
		c.Tag = uint64(i)
		ch <- c
	}
	<-done
}

// BenchmarkCoreToCore is the context for every other figure here: the
// one-way latency of handing a cache line from one goroutine's core to the
// other's (an atomic ping-pong, two handoffs per round trip). On these VMs it
// moves between ~50 and ~250 ns as the hypervisor places the vCPUs, and
// the ring's figures move with it; a channel, whose goroutines can share a
// core, much less.
func BenchmarkCoreToCore(b *testing.B) {
	b.ReportMetric(handoffNs(b.N), "ns/handoff")
}

// handoffNs plays n rounds of cache-line ping-pong between two goroutines
// and returns the mean one-way handoff in ns.
func handoffNs(n int) float64 {
	var line [3 * CacheLine / 4]atomic.Uint32 // ping and pong on separate lines
	ping, pong := &line[0], &line[2*CacheLine/4]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint32(1); i <= uint32(n); i++ {
			for ping.Load() != i {
			}
			pong.Store(i)
		}
	}()
	t0 := time.Now()
	for i := uint32(1); i <= uint32(n); i++ {
		ping.Store(i)
		for pong.Load() != i {
		}
	}
	el := time.Since(t0)
	<-done
	return float64(el.Nanoseconds()) / float64(2*n)
}

// benchPair builds a ring of 64-byte entries with a producer and a consumer.
type benchPair struct {
	p            *Producer
	c            *Consumer
	cBell, pBell *Bell // consumer's doorbell (rung by p), producer's (rung by c)
	arena        *Arena
	layout       Layout
}

func newBenchPair(tb testing.TB, count, entrySize, pBatch, cBatch uint32) *benchPair {
	tb.Helper()
	a, err := NewArena(HeaderSize + int(count*entrySize) + 4096)
	if err != nil {
		tb.Fatal(err)
	}

	l, err := AllocRing(a, count, entrySize)
	if err != nil {
		tb.Fatal(err)
	}
	bp := &benchPair{cBell: NewBell(), pBell: NewBell(), arena: a, layout: l}
	if bp.p, err = NewProducer(a, l, pBatch, bp.cBell); err != nil {
		tb.Fatal(err)
	}
	if bp.c, err = NewConsumer(a, l, cBatch, bp.pBell); err != nil {
		tb.Fatal(err)
	}
	return bp
}

// nextSlot returns a free slot, publishing what is pending and spinning
// (without yielding, as Park does), then parking with WaitSpace, while the
// ring is full.
func nextSlot(p *Producer, bell *Bell, spin int) []byte {
	if e := p.Next(); e != nil {
		return e
	}
	p.Publish()
	for {
		for i := 0; i < spin; i++ {
			if e := p.Next(); e != nil {
				return e
			}
		}
		p.WaitSpace(bell, 0)
		if e := p.Next(); e != nil {
			return e
		}
	}
}

// benchMode says how much of each 64-byte entry the two sides touch.
type benchMode int

const (
	// modeFull: the producer encodes all twelve fields (the whole entry)
	// and the consumer decodes all twelve: the same 64 bytes in and out
	// that the channel copies.
	modeFull benchMode = iota
	// modeInPlace: both sides touch in place only what a NOP carries.
	modeInPlace
	// modeBurst: as modeFull, through the batch calls: the producer
	// reserves up to a batch of slots, fills them and commits them at once
	// (Reserve, CommitN), the consumer takes what is published in one burst
	// (Burst, PopN): the rings' rule that producers publish in batches and
	// consumers drain in bursts, so one index store and one doorbell serve
	// many entries.
	modeBurst
)

// consumeN drains n entries in bursts, checking sequence numbers, parking
// (Park) when the ring is empty. It reports the first error on fail.
func consumeN(c *Consumer, bell *Bell, n int, spin int, mode benchMode, fail func(string, ...any)) {
	var cmd Command
	for i := 0; i < n; {
		e, err := c.Peek()
		if err != nil {
			fail("peek at %d: %v", i, err)
			return
		}
		if e == nil {
			c.Park(bell, spin, 0)
			continue
		}
		var tag uint64
		var op Opcode
		if mode == modeFull {
			_ = cmd.Decode(e)
			tag, op = cmd.Tag, cmd.Opcode
		} else {
			ce := CommandEntry(e)
			tag, op = ce.Tag(), ce.Opcode()
		}
		if tag != uint64(i) || op != OpNop {
			fail("entry %d carries tag %d opcode %v", i, tag, op)
			return
		}
		c.Pop()
		i++
	}
	c.Release()
}

// consumeBursts is consumeN through Burst and PopN, decoding every entry.
func consumeBursts(c *Consumer, bell *Bell, n int, spin int, fail func(string, ...any)) {
	var cmd Command
	for i := 0; i < n; {
		k, err := c.Burst(benchBurst)
		if err != nil {
			fail("burst at %d: %v", i, err)
			return
		}
		if k == 0 {
			c.Park(bell, spin, 0)
			continue
		}
		h := c.Head()
		for j := range k {
			_ = cmd.Decode(c.Entry(h + uint32(j)))
			if cmd.Tag != uint64(i+j) || cmd.Opcode != OpNop {
				fail("entry %d carries tag %d opcode %v", i+j, cmd.Tag, cmd.Opcode)
				return
			}
		}
		c.PopN(k)
		i += k
	}
	c.Release()
}

// benchBurst is the most the burst benchmarks reserve or drain at once.
const benchBurst = 32

// produceBursts is ringChunk's producer through Reserve and CommitN.
func produceBursts(bp *benchPair, n int) {
	p := bp.p
	cmd := Command{Opcode: OpNop, Conn: 7}
	for i := 0; i < n; {
		k := p.Reserve(min(benchBurst, n-i))
		if k == 0 {
			nextSlot(p, bp.pBell, benchSpin) // publish, spin, then wait for space
			continue
		}
		t := p.Tail()
		for j := range k {
			cmd.Tag = uint64(i + j)
			cmd.Encode(p.Entry(t + uint32(j)))
		}
		p.CommitN(k)
		i += k
	}
	p.Publish()
}

// ringChunk moves n NOP commands tagged 0..n-1 through the ring and returns
// when the consumer goroutine has taken them all.
func ringChunk(bp *benchPair, n int, mode benchMode, fail func(string, ...any)) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		if mode == modeBurst {
			consumeBursts(bp.c, bp.cBell, n, benchSpin, fail)
			return
		}
		consumeN(bp.c, bp.cBell, n, benchSpin, mode, fail)
	}()
	if mode == modeBurst {
		produceBursts(bp, n)
		<-done
		return
	}
	cmd := Command{Opcode: OpNop, Conn: 7}
	for i := 0; i < n; i++ {
		e := bp.p.Next() // inlined; nextSlot only when the ring is full
		if e == nil {
			e = nextSlot(bp.p, bp.pBell, benchSpin)
		}
		if mode == modeInPlace {
			le.PutUint32(e[CmdOffOpcode:], uint32(OpNop))
			le.PutUint32(e[CmdOffConn:], 7)
			le.PutUint64(e[CmdOffTag:], uint64(i))
		} else {
			cmd.Tag = uint64(i)
			cmd.Encode(e)
		}
		bp.p.Commit()
	}
	bp.p.Publish()
	<-done
}

// benchRing moves b.N NOP commands through a ring of 64-byte entries.
func benchRing(b *testing.B, pBatch, cBatch uint32, mode benchMode) {
	b.ReportAllocs()
	bp := newBenchPair(b, benchRingCount, CommandEntrySize, pBatch, cBatch)
	b.ResetTimer()
	ringChunk(bp, b.N, mode, b.Errorf)
}

// BenchmarkRingBatched: SPSC ring of 64-byte entries, the producer publishes
// every 32 entries, the consumer drains in bursts and releases every 32.
// Every entry is fully encoded and decoded: the same 64 bytes the channel
// copies.
func BenchmarkRingBatched(b *testing.B) { benchRing(b, 32, 32, modeFull) }

// BenchmarkRingBurst: the same ring and batches, every entry fully encoded
// and decoded, through the batch calls (Reserve/CommitN, Burst/PopN).
func BenchmarkRingBurst(b *testing.B) { benchRing(b, 32, 32, modeBurst) }

// BenchmarkRingBatchedInPlace: the same, each side touching in place only
// the fields a NOP carries.
func BenchmarkRingBatchedInPlace(b *testing.B) { benchRing(b, 32, 32, modeInPlace) }

// BenchmarkRingUnbatched: every entry is published and released on its own.
func BenchmarkRingUnbatched(b *testing.B) { benchRing(b, 1, 1, modeFull) }

// BenchmarkRingVsChannel is the ring bar's measurement. The hypervisor
// moves these two vCPUs between placements (a cache-line handoff of ~45 ns
// or ~250 ns) every few seconds, and separate benchmarks run seconds apart
// can land in different placements. This one interleaves short chunks
// (benchChunk entries each) of the channel and the ring variants with a
// handoff measurement before and after, so every ratio compares figures
// taken milliseconds apart. The variants are the channel, the ring one
// entry at a time (Next/Commit, Peek/Pop; ratio), the ring through the
// batch calls (Reserve/CommitN, Burst/PopN; ratio-burst), both with every
// field encoded and decoded, and the ring with fields touched in place
// (ratio-inplace). It reports per-entry medians over the chunks, the
// median of the per-chunk ratios channel/ring, and the same ratios over the
// chunks whose handoffs before and after were both near (< 100 ns) or both
// far, with how many chunks each had. ns/op means nothing here.
func BenchmarkRingVsChannel(b *testing.B) {
	const benchChunk = 1 << 21
	bp := newBenchPair(b, benchRingCount, CommandEntrySize, 32, 32)
	ch := make(chan Command, benchRingCount)
	type chunk struct{ handoff, ch, full, burst, inPlace float64 }
	var chunks []chunk
	timed := func(n int, f func()) float64 {
		t0 := time.Now()
		f()
		return float64(time.Since(t0).Nanoseconds()) / float64(n)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += benchChunk {
		n := min(benchChunk, b.N-done)
		h0 := handoffNs(1 << 12)
		var c chunk
		c.ch = timed(n, func() { chanChunk(ch, n, b.Errorf) })
		c.full = timed(n, func() { ringChunk(bp, n, modeFull, b.Errorf) })
		c.burst = timed(n, func() { ringChunk(bp, n, modeBurst, b.Errorf) })
		c.inPlace = timed(n, func() { ringChunk(bp, n, modeInPlace, b.Errorf) })
		h1 := handoffNs(1 << 12)
		c.handoff = max(h0, h1)
		if (h0 < nearHandoff) != (h1 < nearHandoff) {
			c.handoff = -1 // the placement changed during the chunk
		}
		chunks = append(chunks, c)
	}
	b.StopTimer()
	med := func(f func(chunk) float64, keep func(chunk) bool) (float64, int) {
		var v []float64
		for _, c := range chunks {
			if keep(c) {
				v = append(v, f(c))
			}
		}
		return testutil.Median(v), len(v)
	}
	all := func(chunk) bool { return true }
	near := func(c chunk) bool { return c.handoff >= 0 && c.handoff < nearHandoff }
	far := func(c chunk) bool { return c.handoff >= nearHandoff }
	for _, m := range []struct {
		unit string
		f    func(chunk) float64
	}{
		{"chan-ns/entry", func(c chunk) float64 { return c.ch }},
		{"ring-ns/entry", func(c chunk) float64 { return c.full }},
		{"burst-ns/entry", func(c chunk) float64 { return c.burst }},
		{"ratio", func(c chunk) float64 { return c.ch / c.full }},
		{"ratio-burst", func(c chunk) float64 { return c.ch / c.burst }},
		{"ratio-inplace", func(c chunk) float64 { return c.ch / c.inPlace }},
	} {
		v, _ := med(m.f, all)
		b.ReportMetric(v, m.unit)
	}
	for _, s := range []struct {
		name string
		keep func(chunk) bool
	}{{"near", near}, {"far", far}} {
		v, n := med(func(c chunk) float64 { return c.ch / c.full }, s.keep)
		b.ReportMetric(v, "ratio-"+s.name)
		v, _ = med(func(c chunk) float64 { return c.ch / c.burst }, s.keep)
		b.ReportMetric(v, "ratio-burst-"+s.name)
		b.ReportMetric(float64(n), s.name+"-chunks")
	}
}

// nearHandoff splits the two placements BenchmarkRingVsChannel sees.
const nearHandoff = 100 // ns

// cmdDevice runs a device that completes every command in place with
// StatusOK and Result = Tag+1, until stop is closed.
func cmdDevice(c *Consumer, bell *Bell, spin int, stop <-chan struct{}, fail func(string, ...any)) {
	for {
		e, err := c.Peek()
		if err != nil {
			fail("device peek: %v", err)
			return
		}
		if e == nil {
			select {
			case <-stop:
				c.Release()
				return
			default:
			}
			c.Park(bell, spin, 0)
			continue
		}
		ce := CommandEntry(e)
		ce.SetWriteBack(StatusOK, ce.Tag()+1)
		c.Complete(e)
		c.Pop()
	}
}

// BenchmarkCommandRoundTrip1: one outstanding command: the host produces it,
// the spinning device completes it in place, the host polls IsDone and reads
// the status back.
func BenchmarkCommandRoundTrip1(b *testing.B) {
	benchCommands(b, 1, 1, benchSpin)
}

// BenchmarkCommandRoundTrip256: up to 256 outstanding commands, published
// every 16; the host reaps completions in order.
func BenchmarkCommandRoundTrip256(b *testing.B) {
	benchCommands(b, 256, 16, benchSpin)
}

// BenchmarkCommandParkedKick: before each command the device has parked (no
// spinning) and been asleep for 20 µs, so every command costs a kick and a
// wake-up. The figure is kick-ns/op: from the commit that rings the doorbell
// to the host seeing DONE (ns/op also counts the 20 µs of idling).
func BenchmarkCommandParkedKick(b *testing.B) {
	b.ReportAllocs()
	bp := newBenchPair(b, benchRingCount, CommandEntrySize, 1, 1)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cmdDevice(bp.c, bp.cBell, 0, stop, b.Errorf)
	}()
	p := bp.p
	var total time.Duration
	cmd := Command{Opcode: OpNop}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		waitParked(bp)
		for t := time.Now(); time.Since(t) < 20*time.Microsecond; {
		}
		t0 := time.Now()
		cmd.Tag = uint64(i)
		cmd.Encode(p.Next())
		p.Commit() // publishes and kicks
		reapDone(b, p, p.Tail()-1, true)
		total += time.Since(t0)
	}
	b.StopTimer()
	if p.Stats().Kicks < uint64(b.N) {
		b.Errorf("%d kicks for %d commands", p.Stats().Kicks, b.N)
	}
	b.ReportMetric(float64(total.Nanoseconds())/float64(b.N), "kick-ns/op")
	close(stop)
	bp.cBell.Kick()
	<-done
}

func benchCommands(b *testing.B, outstanding int, batch uint32, devSpin int) {
	b.ReportAllocs()
	bp := newBenchPair(b, benchRingCount, CommandEntrySize, batch, batch)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		cmdDevice(bp.c, bp.cBell, devSpin, stop, b.Errorf)
	}()
	p := bp.p
	reap := p.Tail()
	b.ResetTimer()
	cmd := Command{Opcode: OpNop}
	for i := 0; i < b.N; i++ {
		for int(p.Tail()-reap) >= outstanding {
			reap = reapDone(b, p, reap, p.Tail()-reap >= uint32(outstanding))
		}
		e := nextSlot(p, bp.pBell, benchSpin)
		cmd.Tag = uint64(i)
		cmd.Encode(e)
		p.Commit()
	}
	p.Publish()
	for reap != p.Tail() {
		reap = reapDone(b, p, reap, true)
	}
	b.StopTimer()
	close(stop)
	bp.cBell.Kick()
	<-done
}

// waitParked spins until the consumer has announced it is asleep.
func waitParked(bp *benchPair) {
	for load32(bp.p.hdr(OffConsumerFlags))&FlagNeedWakeup == 0 {
		runtime.Gosched()
	}
}

// reapDone reaps completed commands from reap on, in order; if must, it
// waits for at least one.
func reapDone(b *testing.B, p *Producer, reap uint32, must bool) uint32 {
	if must {
		p.Publish()
	}
	for {
		for reap != p.Tail() && IsDone(&p.Ring, reap) {
			e := CommandEntry(p.Entry(reap))
			if e.Status() != StatusOK || e.Result() != e.Tag()+1 {
				b.Fatalf("command %d: status %v result %d tag %d", reap, e.Status(), e.Result(), e.Tag())
			}
			reap++
			must = false
		}
		if !must {
			return reap
		}
		runtime.Gosched()
	}
}
