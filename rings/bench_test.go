package rings

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"
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
	done := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(done)
		var c Command
		for i := 0; i < b.N; i++ {
			c = <-ch
			if c.Tag != uint64(i) {
				b.Errorf("entry %d carries tag %d", i, c.Tag)
				return
			}
		}
	}()
	c := Command{Opcode: OpNop, Conn: 7}
	for i := 0; i < b.N; i++ {
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
	var line [3 * CacheLine / 4]atomic.Uint32 // ping and pong on separate lines
	ping, pong := &line[0], &line[2*CacheLine/4]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := uint32(1); i <= uint32(b.N); i++ {
			for ping.Load() != i {
			}
			pong.Store(i)
		}
	}()
	b.ResetTimer()
	for i := uint32(1); i <= uint32(b.N); i++ {
		ping.Store(i)
		for pong.Load() != i {
		}
	}
	b.StopTimer()
	<-done
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(2*b.N), "ns/handoff")
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

// consumeN drains n entries in bursts, checking sequence numbers, parking
// (Park) when the ring is empty. With full it decodes whole entries, else it
// reads the fields a NOP needs in place. It reports the first error on fail.
func consumeN(c *Consumer, bell *Bell, n int, spin int, full bool, fail func(string, ...any)) {
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
		ce := CommandEntry(e)
		tag, op := ce.Tag(), ce.Opcode()
		if full {
			_ = cmd.Decode(e)
			tag, op = cmd.Tag, cmd.Opcode
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

// benchRing moves b.N NOP commands through a ring of 64-byte entries. With
// full the producer encodes all twelve fields (64 bytes, like the channel's
// copy) and the consumer decodes them; otherwise each side touches in place
// only what a NOP carries (opcode, connection, tag), which is the point of a
// ring in shared memory.
func benchRing(b *testing.B, pBatch, cBatch uint32, full bool) {
	b.ReportAllocs()
	bp := newBenchPair(b, benchRingCount, CommandEntrySize, pBatch, cBatch)
	done := make(chan struct{})
	b.ResetTimer()
	go func() {
		defer close(done)
		consumeN(bp.c, bp.cBell, b.N, benchSpin, full, b.Errorf)
	}()
	cmd := Command{Opcode: OpNop, Conn: 7}
	for i := 0; i < b.N; i++ {
		e := nextSlot(bp.p, bp.pBell, benchSpin)
		if full {
			cmd.Tag = uint64(i)
			cmd.Encode(e)
		} else {
			le.PutUint32(e[CmdOffOpcode:], uint32(OpNop))
			le.PutUint32(e[CmdOffConn:], 7)
			le.PutUint64(e[CmdOffTag:], uint64(i))
		}
		bp.p.Commit()
	}
	bp.p.Publish()
	<-done
}

// BenchmarkRingBatched: SPSC ring of 64-byte entries, the producer publishes
// every 32 entries, the consumer drains in bursts and releases every 32.
// Every entry is fully encoded and decoded: the same 64 bytes the channel
// copies.
func BenchmarkRingBatched(b *testing.B) { benchRing(b, 32, 32, true) }

// BenchmarkRingBatchedInPlace: the same, each side touching in place only
// the fields a NOP carries.
func BenchmarkRingBatchedInPlace(b *testing.B) { benchRing(b, 32, 32, false) }

// BenchmarkRingUnbatched: every entry is published and released on its own.
func BenchmarkRingUnbatched(b *testing.B) { benchRing(b, 1, 1, true) }

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
