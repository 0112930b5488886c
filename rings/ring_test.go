package rings

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"testing"
	"time"
)

// scaled reduces a property test's entry count under the race detector and
// -short, keeping enough entries for many laps of the largest ring.
func scaled(n int) int {
	if raceEnabled {
		n /= 25
	}
	if testing.Short() {
		n /= 10
	}
	return max(n, 5000)
}

// runSides runs the two sides of a ring in their own goroutines and fails the
// test if either reports an error or they do not finish within d (a lost
// wake-up shows up as a hang, so it must fail, not stall the test binary).
func runSides(t *testing.T, d time.Duration, sides ...func() error) {
	t.Helper()
	errc := make(chan error, len(sides))
	for _, f := range sides {
		go func() { errc <- f() }()
	}
	deadline := time.After(d)
	for range sides {
		select {
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			buf := make([]byte, 1<<16)
			buf = buf[:runtime.Stack(buf, true)]
			t.Fatalf("sides did not finish within %v (lost wake-up?)\n%s", d, buf)
		}
	}
}

type propConfig struct {
	name      string
	count     uint32
	entrySize uint32
	total     int
	consSpin  int  // polls before the consumer parks; 0: park at once
	waitSpace bool // producer parks with WaitSpace when full (else spins)
	slowCons  int  // consumer yields with probability 1/slowCons per entry (0: never)
	burst     bool // Reserve/CommitN and Burst/PopN with random sizes instead of one entry at a time
}

// TestRingProperty: a producer and a consumer in two goroutines never lose,
// duplicate or reorder entries across many laps, with random batch sizes,
// random extra publishes and releases, a consumer that spins or parks and is
// woken by kicks, and a producer that spins or parks waiting for space.
func TestRingProperty(t *testing.T) {
	configs := []propConfig{
		{name: "8x16/spin", count: 8, entrySize: 16, total: scaled(4_000_000), consSpin: 1000},
		{name: "64x64/spin", count: 64, entrySize: 64, total: scaled(4_000_000), consSpin: 1000},
		{name: "8x32/park", count: 8, entrySize: 32, total: scaled(1_000_000), consSpin: 0},
		{name: "64x64/park+waitspace", count: 64, entrySize: 64, total: scaled(1_000_000), consSpin: 0, waitSpace: true, slowCons: 8},
		{name: "8x16/waitspace", count: 8, entrySize: 16, total: scaled(2_000_000), consSpin: 200, waitSpace: true, slowCons: 4},
		{name: "64x64/burst/spin", count: 64, entrySize: 64, total: scaled(4_000_000), consSpin: 1000, burst: true},
		{name: "8x32/burst/park+waitspace", count: 8, entrySize: 32, total: scaled(1_000_000), consSpin: 0, waitSpace: true, slowCons: 4, burst: true},
	}
	for i, cfg := range configs {
		t.Run(cfg.name, func(t *testing.T) {
			seed := uint64(time.Now().UnixNano()) + uint64(i)
			t.Logf("seed %d", seed)
			testRingProperty(t, cfg, seed)
		})
	}
}

func testRingProperty(t *testing.T, cfg propConfig, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	pBatch := uint32(1 + r.IntN(int(cfg.count)))
	cBatch := uint32(1 + r.IntN(int(cfg.count)))
	bp := newBenchPair(t, cfg.count, cfg.entrySize, pBatch, cBatch)
	p, c := bp.p, bp.c
	last := int(cfg.entrySize) - 1

	put := func(e []byte, i int) {
		le.PutUint64(e[8:], uint64(i))
		e[4] = byte(i * 7)
		if cfg.entrySize >= 32 {
			le.PutUint64(e[16:], ^uint64(i))
			e[last] = byte(i)
		}
	}
	check := func(e []byte, i int) error {
		if got := le.Uint64(e[8:]); got != uint64(i) {
			return fmt.Errorf("entry %d carries sequence number %d (lost, duplicated or reordered)", i, got)
		}
		if e[4] != byte(i*7) || (cfg.entrySize >= 32 && (le.Uint64(e[16:]) != ^uint64(i) || e[last] != byte(i))) {
			return fmt.Errorf("entry %d is torn: % x", i, e)
		}
		return nil
	}
	wait := func() {
		if cfg.waitSpace {
			p.WaitSpace(bp.pBell, 0)
		} else {
			p.Publish()
			runtime.Gosched()
		}
	}
	burstProducer := func() error {
		r := rand.New(rand.NewPCG(seed, 2))
		for i := 0; i < cfg.total; {
			k := p.Reserve(min(1+r.IntN(int(cfg.count)), cfg.total-i))
			if k == 0 {
				wait()
				continue
			}
			t := p.Tail()
			for j := range k { // filled out of order: any order is allowed
				put(p.Entry(t+uint32(k-1-j)), i+k-1-j)
			}
			p.CommitN(k)
			i += k
			if r.IntN(8) == 0 {
				p.Publish()
			}
		}
		p.Publish()
		return nil
	}
	burstConsumer := func() error {
		r := rand.New(rand.NewPCG(seed, 3))
		for i := 0; i < cfg.total; {
			k, err := c.Burst(1 + r.IntN(2*int(cfg.count)))
			if err != nil {
				return fmt.Errorf("entry %d: %v", i, err)
			}
			if k == 0 {
				c.Park(bp.cBell, cfg.consSpin, 0)
				continue
			}
			h := c.Head()
			for j := range k {
				if err := check(c.Entry(h+uint32(j)), i+j); err != nil {
					return err
				}
			}
			c.PopN(k)
			i += k
			if r.IntN(8) == 0 {
				c.Release()
			}
			if cfg.slowCons > 0 && r.IntN(cfg.slowCons) == 0 {
				runtime.Gosched()
			}
		}
		c.Release()
		if k, err := c.Burst(1); k != 0 || err != nil {
			return fmt.Errorf("after %d entries Burst = %d, %v", cfg.total, k, err)
		}
		return nil
	}
	producer := func() error {
		r := rand.New(rand.NewPCG(seed, 2))
		for i := 0; i < cfg.total; {
			e := p.Next()
			if e == nil {
				wait()
				continue
			}
			put(e, i)
			p.Commit()
			i++
			switch r.IntN(16) {
			case 0:
				p.Publish()
			case 1:
				if r.IntN(64) == 0 {
					runtime.Gosched()
				}
			}
		}
		p.Publish()
		return nil
	}
	consumer := func() error {
		r := rand.New(rand.NewPCG(seed, 3))
		for i := 0; i < cfg.total; {
			e, err := c.Peek()
			if err != nil {
				return fmt.Errorf("entry %d: %v", i, err)
			}
			if e == nil {
				c.Park(bp.cBell, cfg.consSpin, 0)
				continue
			}
			// Drain the burst that is available.
			for n := c.Available(); n > 0; n-- {
				e, err := c.Peek()
				if err != nil || e == nil {
					return fmt.Errorf("entry %d: Available said %d more, Peek = %v, %v", i, n, e != nil, err)
				}
				if err := check(e, i); err != nil {
					return err
				}
				c.Pop()
				i++
				if r.IntN(8) == 0 {
					c.Release()
				}
				if cfg.slowCons > 0 && r.IntN(cfg.slowCons) == 0 {
					runtime.Gosched()
				}
			}
		}
		c.Release()
		// Nothing more may appear.
		if e, err := c.Peek(); e != nil || err != nil {
			return fmt.Errorf("after %d entries Peek = %v, %v", cfg.total, e != nil, err)
		}
		return nil
	}
	if cfg.burst {
		producer, consumer = burstProducer, burstConsumer
	}
	runSides(t, 60*time.Second, producer, consumer)

	ps, cs := p.Stats(), c.Stats()
	t.Logf("batches p=%d c=%d; producer %+v; consumer %+v", pBatch, cBatch, ps, cs)
	if ps.Entries != uint64(cfg.total) || cs.Entries != uint64(cfg.total) {
		t.Errorf("entries: produced %d, consumed %d, want %d", ps.Entries, cs.Entries, cfg.total)
	}
	if cs.PhaseErrs != 0 {
		t.Errorf("%d phase errors on a correct producer", cs.PhaseErrs)
	}
	if p.ProducerIndex() != uint32(cfg.total) || p.ConsumerIndex() != uint32(cfg.total) {
		t.Errorf("indices PI=%d CI=%d, want %d", p.ProducerIndex(), p.ConsumerIndex(), cfg.total)
	}
	if cfg.consSpin == 0 && cs.Parks == 0 {
		t.Errorf("the consumer never parked: the park path was not exercised")
	}
	if cfg.consSpin == 0 && ps.Kicks == 0 {
		t.Errorf("the producer never kicked a parked consumer")
	}
	if ps.Kicks > ps.Publishes {
		t.Errorf("%d kicks for %d publishes", ps.Kicks, ps.Publishes)
	}
	if ps.Kicks+ps.Suppressed != ps.Publishes {
		t.Errorf("kicks %d + suppressed %d != publishes %d", ps.Kicks, ps.Suppressed, ps.Publishes)
	}
	if cfg.waitSpace && !raceEnabled && ps.Parks == 0 {
		t.Errorf("the producer never waited for space: WaitSpace was not exercised")
	}
}

// TestParkKickPingPong bounces one entry at a time between two rings whose
// consumers park at once (no spinning), so every entry needs a kick to be
// noticed. A single lost wake-up hangs the exchange and fails the test.
func TestParkKickPingPong(t *testing.T) {
	rounds := scaled(50_000)
	req := newBenchPair(t, 8, 16, 1, 1)
	rsp := newBenchPair(t, 8, 16, 1, 1)
	host := func() error {
		for i := 0; i < rounds; i++ {
			e := req.p.Next()
			if e == nil {
				return fmt.Errorf("round %d: request ring full", i)
			}
			le.PutUint64(e[8:], uint64(i))
			req.p.Commit()
			for {
				e, err := rsp.c.Peek()
				if err != nil {
					return err
				}
				if e != nil {
					if got := le.Uint64(e[8:]); got != uint64(i)+1 {
						return fmt.Errorf("round %d: response %d", i, got)
					}
					rsp.c.Pop()
					break
				}
				rsp.c.Park(rsp.cBell, 0, 0)
			}
		}
		return nil
	}
	device := func() error {
		for i := 0; i < rounds; {
			e, err := req.c.Peek()
			if err != nil {
				return err
			}
			if e == nil {
				req.c.Park(req.cBell, 0, 0)
				continue
			}
			v := le.Uint64(e[8:])
			req.c.Pop()
			out := rsp.p.Next()
			if out == nil {
				return fmt.Errorf("round %d: response ring full", i)
			}
			le.PutUint64(out[8:], v+1)
			rsp.p.Commit()
			i++
		}
		return nil
	}
	runSides(t, 60*time.Second, host, device)
	ps := req.p.Stats()
	t.Logf("request producer %+v, device parks %d", ps, req.c.Stats().Parks)
	if ps.Kicks == 0 || req.c.Stats().Parks == 0 {
		t.Errorf("no kicks (%d) or no parks (%d): the test did not exercise parking", ps.Kicks, req.c.Stats().Parks)
	}
}

// TestWaitSpaceWakeup: a producer on a tiny ring always waits for space with
// WaitSpace (no spinning, no timeout) and must always be woken by the
// consumer's release.
func TestWaitSpaceWakeup(t *testing.T) {
	total := scaled(100_000)
	bp := newBenchPair(t, 4, 16, 2, 1)
	producer := func() error {
		for i := 0; i < total; {
			e := bp.p.Next()
			if e == nil {
				bp.p.WaitSpace(bp.pBell, 0)
				continue
			}
			le.PutUint64(e[8:], uint64(i))
			bp.p.Commit()
			i++
		}
		bp.p.Publish()
		return nil
	}
	consumer := func() error {
		for i := 0; i < total; {
			e, err := bp.c.Peek()
			if err != nil {
				return err
			}
			if e == nil {
				bp.c.Park(bp.cBell, 0, 0)
				continue
			}
			if got := le.Uint64(e[8:]); got != uint64(i) {
				return fmt.Errorf("entry %d carries %d", i, got)
			}
			bp.c.Pop()
			i++
			if i%3 == 0 {
				runtime.Gosched()
			}
		}
		return nil
	}
	runSides(t, 60*time.Second, producer, consumer)
	if bp.p.Stats().Parks == 0 || bp.c.Stats().Kicks == 0 {
		t.Errorf("producer parks %d, consumer kicks %d: WaitSpace was not exercised", bp.p.Stats().Parks, bp.c.Stats().Kicks)
	}
}

// TestCommandRoundTrip: the host produces commands, the device completes each
// with a status and result written in place, the host observes IsDone and
// reads them back, across many laps. Before reusing a slot the host checks
// that the previous lap's DONE does not count for the new index.
func TestCommandRoundTrip(t *testing.T) {
	for _, count := range []uint32{8, 64} {
		t.Run(fmt.Sprint(count), func(t *testing.T) {
			seed := uint64(time.Now().UnixNano())
			t.Logf("seed %d", seed)
			testCommandRoundTrip(t, count, scaled(1_000_000), seed)
		})
	}
}

func cmdStatus(tag uint64) Status { return Status(tag % 9) }
func cmdResult(tag uint64) uint64 { return tag*3 + 1 }

func testCommandRoundTrip(t *testing.T, count uint32, total int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	bp := newBenchPair(t, count, CommandEntrySize, uint32(1+r.IntN(16)), uint32(1+r.IntN(int(count))))
	p, c := bp.p, bp.c
	host := func() error {
		r := rand.New(rand.NewPCG(seed, 2))
		reap := uint32(0)
		limit := 1 + r.IntN(int(count))
		var cmd Command
		for i := uint32(0); reap != uint32(total); {
			// Reap every completion available, in order.
			for reap != i && IsDone(&p.Ring, reap) {
				var got Command
				if err := got.Decode(p.Entry(reap)); err != nil {
					return err
				}
				want := Command{Opcode: OpNop, Flags: uint16(reap), Conn: reap, Tag: uint64(reap),
					Addr: Addr(reap) << 8, Len: reap ^ 0x55, Arg0: 1, Arg1: 2, Arg2: 3, Arg3: uint64(reap) << 32,
					Status: cmdStatus(uint64(reap)), Result: cmdResult(uint64(reap))}
				if got != want {
					return fmt.Errorf("command %d completed as %+v, want %+v", reap, got, want)
				}
				reap++
			}
			if i == uint32(total) || int(i-reap) >= limit {
				p.Publish()
				runtime.Gosched()
				if r.IntN(64) == 0 {
					limit = 1 + r.IntN(int(count))
				}
				continue
			}
			// Nothing not yet produced is done, up to a lap ahead, although
			// the slots hold completed commands of the previous lap.
			for j := i; j != i+count; j++ {
				if IsDone(&p.Ring, j) {
					return fmt.Errorf("IsDone(%d) before it was produced (stale DONE of %d)", j, j-count)
				}
			}
			e := p.Next()
			if e == nil {
				p.Publish()
				runtime.Gosched()
				continue
			}
			cmd = Command{Opcode: OpNop, Flags: uint16(i), Conn: i, Tag: uint64(i),
				Addr: Addr(i) << 8, Len: i ^ 0x55, Arg0: 1, Arg1: 2, Arg2: 3, Arg3: uint64(i) << 32}
			cmd.Encode(e)
			p.Commit()
			i++
			if r.IntN(4) == 0 {
				p.Publish()
			}
		}
		return nil
	}
	device := func() error {
		for i := 0; i < total; {
			e, err := c.Peek()
			if err != nil {
				return fmt.Errorf("device at %d: %v", i, err)
			}
			if e == nil {
				c.Park(bp.cBell, 100, 0)
				continue
			}
			ce := CommandEntry(e)
			if ce.Tag() != uint64(i) || ce.Opcode() != OpNop {
				return fmt.Errorf("device at %d got tag %d opcode %v", i, ce.Tag(), ce.Opcode())
			}
			ce.SetWriteBack(cmdStatus(ce.Tag()), cmdResult(ce.Tag()))
			c.Complete(e)
			c.Pop()
			i++
		}
		c.Release()
		return nil
	}
	runSides(t, 60*time.Second, host, device)
}

// TestCommandCompletionBits checks the control word step by step in one
// goroutine: commit sets the phase and clears the last lap's DONE bits, keeps
// the entry type's bits 8..31; Complete sets DONE with this lap's phase and
// keeps everything else; IsDone is true only for the completed index.
func TestCommandCompletionBits(t *testing.T) {
	const count = 4
	bp := newBenchPair(t, count, CommandEntrySize, 1, 1)
	p, c := bp.p, bp.c
	for i := uint32(0); i < 6*count; i++ {
		e := p.Next()
		if e == nil {
			t.Fatalf("%d: ring full", i)
		}
		e[1], e[2], e[3] = 0xA1, 0xB2, byte(i) // entry type bits 8..31
		(&Command{Opcode: OpNop, Tag: uint64(i)}).Encode(e)
		p.Commit()
		ctl := load32(e[OffCtl:])
		if want := uint32(i)<<24 | 0xB2A100 | p.Phase(i); ctl != want {
			t.Fatalf("%d: control word after commit %#08x, want %#08x", i, ctl, want)
		}
		if IsDone(&p.Ring, i) {
			t.Fatalf("%d: done before the device saw it", i)
		}
		d, err := c.Peek()
		if err != nil || d == nil {
			t.Fatalf("%d: Peek = %v, %v", i, d != nil, err)
		}
		CommandEntry(d).SetWriteBack(StatusBadConn, uint64(i)+100)
		c.Complete(d)
		wantDone := ctl | CtlDone
		if p.Phase(i) == 1 {
			wantDone |= CtlDonePhase
		}
		if got := load32(d[OffCtl:]); got != wantDone {
			t.Fatalf("%d: control word after Complete %#08x, want %#08x", i, got, wantDone)
		}
		c.Pop()
		if !IsDone(&p.Ring, i) {
			t.Fatalf("%d: not done after Complete", i)
		}
		if st, res := CommandEntry(e).Status(), CommandEntry(e).Result(); st != StatusBadConn || res != uint64(i)+100 {
			t.Fatalf("%d: status %v result %d", i, st, res)
		}
		// The same slot one lap on: the stale DONE must not count.
		if IsDone(&p.Ring, i+count) {
			t.Fatalf("%d: IsDone(%d) true from the previous lap's DONE", i, i+count)
		}
	}
}

// TestPhaseError: an index published ahead of an entry the producer has not
// written is reported as ErrPhase and counted, on the first lap (zeroed
// memory) and on later laps (the slot holds the previous lap's entry); a late
// write makes the entry valid; an index more than a ring ahead is ErrBadIndex.
func TestPhaseError(t *testing.T) {
	const count = 8
	bp := newBenchPair(t, count, 16, 1, 1)
	p, c := bp.p, bp.c
	pi := p.hdr(OffProducerIndex)

	// Lap 0: a hostile PI of 1 with entry 0 never written.
	store32(pi, 1)
	for k := 1; k <= 2; k++ {
		e, err := c.Peek()
		if !errors.Is(err, ErrPhase) || e == nil {
			t.Fatalf("lap 0: Peek = %v, %v; want the slot and ErrPhase", e != nil, err)
		}
		if got := c.Stats().PhaseErrs; got != uint64(k) {
			t.Fatalf("PhaseErrs = %d after %d observations", got, k)
		}
	}
	// The producer writes entry 0 late and publishes: now it is valid.
	e := p.Next()
	le.PutUint64(e[8:], 42)
	p.Commit() // batch 1: publishes PI = 1
	if e, err := c.Peek(); err != nil || le.Uint64(e[8:]) != 42 {
		t.Fatalf("after the late write: Peek = %v", err)
	}
	c.Pop()

	// Fill the rest of lap 0 and all of lap 1 but the last entry properly.
	for i := uint32(1); i < 2*count-1; i++ {
		e := p.Next()
		le.PutUint64(e[8:], uint64(i))
		p.Commit()
		e2, err := c.Peek()
		if err != nil || le.Uint64(e2[8:]) != uint64(i) {
			t.Fatalf("entry %d: %v", i, err)
		}
		c.Pop()
	}
	// Lap 1, slot 7 still holds entry 7 of lap 0 (phase 1; lap 1 wants 0).
	store32(pi, 2*count)
	if e, err := c.Peek(); !errors.Is(err, ErrPhase) || le.Uint64(e[8:]) != count-1 {
		t.Fatalf("lap 1: Peek = %v; want ErrPhase on the stale entry", err)
	}
	// The late write again makes it valid.
	e = p.Next()
	le.PutUint64(e[8:], 99)
	p.Commit()
	if e, err := c.Peek(); err != nil || le.Uint64(e[8:]) != 99 {
		t.Fatalf("lap 1 after the late write: %v", err)
	}
	c.Pop()
	before := c.Stats().PhaseErrs

	// A corrupted phase bit on a published entry is caught the same way.
	e = p.Next()
	p.Commit()
	c.Entry(c.Head())[OffCtl] ^= CtlPhase
	if _, err := c.Peek(); !errors.Is(err, ErrPhase) {
		t.Fatalf("flipped phase: %v", err)
	}

	c.Pop() // skip it (the consumer's choice; the entry is lost)

	// An index more than a ring ahead: ErrBadIndex, nothing returned,
	// counted. (The consumer reads PI again only once its copy is used up.)
	store32(pi, c.Head()+count+1)
	e, err := c.Peek()
	if !errors.Is(err, ErrBadIndex) || e != nil || errors.Is(err, ErrPhase) {
		t.Fatalf("hostile index: Peek = %v, %v; want nil, ErrBadIndex", e != nil, err)
	}
	if got := c.Stats().PhaseErrs; got != before+2 {
		t.Fatalf("PhaseErrs %d, want %d", got, before+2)
	}
	// Exactly a ring ahead is legal (a full ring).
	store32(pi, c.Head()+count)
	if n := c.Available(); n != count {
		t.Fatalf("Available = %d with a full ring", n)
	}
}

// TestWaitSpacePublishes: a producer that waits for space first publishes
// what it committed, or a consumer could sleep on entries it cannot see.
func TestWaitSpacePublishes(t *testing.T) {
	bp := newBenchPair(t, 8, 16, 8, 8)
	for i := 0; i < 3; i++ {
		bp.p.Next()
		bp.p.Commit()
	}
	if bp.p.ProducerIndex() != 0 || bp.p.Pending() != 3 {
		t.Fatalf("batch 8 published early: PI %d pending %d", bp.p.ProducerIndex(), bp.p.Pending())
	}
	if !bp.p.WaitSpace(bp.pBell, time.Millisecond) {
		t.Fatal("WaitSpace on a ring with space returned false")
	}
	if bp.p.ProducerIndex() != 3 || bp.p.Pending() != 0 {
		t.Fatalf("after WaitSpace PI %d pending %d", bp.p.ProducerIndex(), bp.p.Pending())
	}
	// Fill the ring: WaitSpace times out, then the consumer frees space.
	for bp.p.Next() != nil {
		bp.p.Commit()
	}
	if bp.p.WaitSpace(bp.pBell, time.Millisecond) {
		t.Fatal("WaitSpace on a full ring returned true")
	}
	if load32(bp.p.hdr(OffProducerFlags)) != 0 {
		t.Fatal("WaitSpace left FlagNeedWakeup set")
	}
	// Park releases consumed entries before it spins or sleeps.
	for i := 0; i < 3; i++ {
		if e, _ := bp.c.Peek(); e == nil {
			t.Fatal("no entry")
		}
		bp.c.Pop()
	}
	if bp.c.ConsumerIndex() != 0 {
		t.Fatalf("batch 8 released early")
	}
	bp.c.Park(bp.cBell, 0, time.Millisecond)
	if bp.c.ConsumerIndex() != 3 {
		t.Fatalf("Park did not release: CI %d", bp.c.ConsumerIndex())
	}
	if load32(bp.c.hdr(OffConsumerFlags)) != 0 {
		t.Fatal("Park left FlagNeedWakeup set")
	}
	if bp.p.Free() != 3 {
		t.Fatalf("Free = %d after 3 releases", bp.p.Free())
	}
}

// TestKickSuppression: a publish rings the doorbell only when the consumer
// said it is parked.
func TestKickSuppression(t *testing.T) {
	bp := newBenchPair(t, 8, 16, 1, 1)
	bp.p.Next()
	bp.p.Commit()
	if s := bp.p.Stats(); s.Kicks != 0 || s.Suppressed != 1 {
		t.Fatalf("awake consumer: %+v", s)
	}
	select {
	case <-bp.cBell.C():
		t.Fatal("doorbell rung for an awake consumer")
	default:
	}
	bp.c.SetNeedWakeup(true)
	bp.p.Next()
	bp.p.Commit()
	if s := bp.p.Stats(); s.Kicks != 1 {
		t.Fatalf("parked consumer: %+v", s)
	}
	if !bp.cBell.Wait(time.Second) {
		t.Fatal("no kick")
	}
	// The latch holds one kick: two kicks, one wake-up.
	bp.cBell.Kick()
	bp.cBell.Kick()
	if !bp.cBell.Wait(time.Second) || bp.cBell.Wait(time.Millisecond) {
		t.Fatal("the doorbell latch is not one deep")
	}
}

// TestIndexWrap runs the indices across the u32 wrap: slot and phase stay
// continuous because Count divides 2^32.
func TestIndexWrap(t *testing.T) {
	const count = 8
	a, _ := NewArena(1 << 12)
	l, err := AllocRing(a, count, 16)
	if err != nil {
		t.Fatal(err)
	}
	mem, _ := a.Map(l.Base, l.Size())
	start := uint32(1<<32 - 3*count - 3)
	// Reattach both sides to a ring whose indices are near the wrap and
	// whose slots hold the phase of the lap before start.
	store32(mem[OffProducerIndex:], start)
	store32(mem[OffConsumerIndex:], start)
	r0, _ := openRing(a, l, false)
	for i := start - count; i != start; i++ {
		r0.Entry(i)[OffCtl] = byte(r0.Phase(i))
	}
	p, _ := NewProducer(a, l, 3, nil)
	c, _ := NewConsumer(a, l, 2, nil)
	for k := 0; k < 10*count; k++ {
		i := start + uint32(k)
		e := p.Next()
		if e == nil {
			t.Fatalf("full at %d", k)
		}
		le.PutUint32(e[4:], i)
		p.Commit()
		p.Publish()
		e2, err := c.Peek()
		if err != nil || e2 == nil || le.Uint32(e2[4:]) != i {
			t.Fatalf("index %#x: %v", i, err)
		}
		c.Pop()
	}
	if c.Head() != start+10*count || c.Head() > start {
		t.Fatalf("head %#x did not wrap", c.Head())
	}
}

func TestLayoutValidate(t *testing.T) {
	base := ArenaBase
	cases := []struct {
		l  Layout
		ok bool
	}{
		{Layout{base, 1, 16}, true},
		{Layout{base, 8, 64}, true},
		{Layout{base, 1 << 20, 16}, true},
		{Layout{base, 256, 4096}, true},
		{Layout{base + 64, 8, 32}, true},
		{Layout{base, 0, 64}, false},
		{Layout{base, 3, 64}, false},
		{Layout{base, 1<<20 + 1, 64}, false},
		{Layout{base, 1 << 21, 64}, false},
		{Layout{base, 1 << 31, 64}, false},
		{Layout{base, 8, 0}, false},
		{Layout{base, 8, 8}, false},
		{Layout{base, 8, 24}, false},
		{Layout{base, 8, 4112}, false},
		{Layout{base + 32, 8, 64}, false},
		{Layout{base + 1, 8, 64}, false},
	}
	for _, tc := range cases {
		err := tc.l.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%+v: Validate = %v, want ok=%v", tc.l, err, tc.ok)
		}
	}
	if got := (Layout{base, 8, 64}).Size(); got != HeaderSize+8*64 {
		t.Errorf("Size = %d", got)
	}
	// Opening a ring checks the layout and that it lies in host memory.
	a, _ := NewArena(4096)
	if _, err := NewProducer(a, Layout{base, 3, 64}, 1, nil); err == nil {
		t.Error("NewProducer accepted a bad layout")
	}
	_, err := NewConsumer(a, Layout{base, 64, 64}, 1, nil) // 4352 bytes > 4096
	if !errors.Is(err, ErrOutOfRange) {
		t.Errorf("NewConsumer on a ring past the end of memory: %v", err)
	}
	if _, err := AllocRing(a, 64, 64); err == nil {
		t.Error("AllocRing larger than the arena succeeded")
	}
	if _, err := AllocRing(a, 6, 64); err == nil {
		t.Error("AllocRing with count 6 succeeded")
	}
	l, err := AllocRing(a, 8, 64)
	if err != nil || l.Base%CacheLine != 0 || l.Validate() != nil {
		t.Errorf("AllocRing = %+v, %v", l, err)
	}
}

// TestWarmKeepsFreeSlots: taking the cache lines of free slots ahead of use
// must not change anything a reader of those slots could see: a command ring
// host may read a completed command's DONE bits, status and result after the
// device released the slot and before the host reuses it.
func TestWarmKeepsFreeSlots(t *testing.T) {
	const count = 16
	bp := newBenchPair(t, count, CommandEntrySize, 4, 4)
	p, c := bp.p, bp.c
	for i := uint32(0); i < count; i++ {
		(&Command{Opcode: OpNop, Tag: uint64(i), Conn: i}).Encode(p.Next())
		p.Commit()
		p.Publish()
		e, err := c.Peek()
		if err != nil || e == nil {
			t.Fatal(err)
		}
		CommandEntry(e).SetWriteBack(StatusNoResources, uint64(i)+7)
		c.Complete(e)
		c.Pop()
	}
	c.Release()
	before := append([]byte(nil), p.mem...)
	for i := uint32(count); i < count+4; i++ {
		(&Command{Opcode: OpNop, Tag: uint64(i)}).Encode(p.Next())
		p.Commit() // the 4th commit publishes and warms the next slots
	}
	if p.warmed == 0 {
		t.Fatal("no slots were warmed")
	}
	for i := uint32(count + 4); i < 2*count; i++ {
		old := i - count
		if !IsDone(&p.Ring, old) {
			t.Fatalf("command %d no longer done after warming", old)
		}
		got, want := p.Entry(i), before[HeaderSize+int(i%count)*CommandEntrySize:][:CommandEntrySize]
		if string(got) != string(want) {
			t.Fatalf("slot %d changed by warming:\n% x\n% x", i%count, got, want)
		}
	}
}

// TestBurstPhase: Burst hands out only entries with the right phase tag. A
// bad entry further on ends the burst before it; at the head it is
// reported as Peek reports it, with the slot's index at Head.
func TestBurstPhase(t *testing.T) {
	const count = 8
	bp := newBenchPair(t, count, 16, count, count)
	p, c := bp.p, bp.c
	if k := p.Reserve(100); k != count {
		t.Fatalf("Reserve(100) on an empty ring of %d = %d", count, k)
	}
	if k := p.Reserve(0); k != 0 {
		t.Fatalf("Reserve(0) = %d", k)
	}
	if k := p.Reserve(-1); k != 0 {
		t.Fatalf("Reserve(-1) = %d", k)
	}
	if k := p.Reserve(1 << 40); k != count {
		t.Fatalf("Reserve(1<<40) = %d, want %d", k, count)
	}
	for i := range 5 {
		le.PutUint64(p.Entry(uint32(i))[8:], uint64(i))
	}
	p.CommitN(5)
	p.Publish()
	if k := p.Reserve(100); k != count-5 {
		t.Fatalf("Reserve after 5 = %d, want %d", k, count-5)
	}
	c.Entry(3)[OffCtl] ^= CtlPhase // corrupt entry 3
	if k, err := c.Burst(100); k != 3 || err != nil {
		t.Fatalf("Burst = %d, %v; want the 3 good entries before the bad one", k, err)
	}
	if k, err := c.Burst(2); k != 2 || err != nil {
		t.Fatalf("Burst(2) = %d, %v", k, err)
	}
	if k, err := c.Burst(-1); k != 0 || err != nil {
		t.Fatalf("Burst(-1) = %d, %v", k, err)
	}
	if k, err := c.Burst(1 << 40); k != 3 || err != nil {
		t.Fatalf("Burst(1<<40) = %d, %v; want the 3 good entries", k, err)
	}
	c.PopN(3)
	if k, err := c.Burst(100); k != 0 || !errors.Is(err, ErrPhase) {
		t.Fatalf("Burst at the bad entry = %d, %v; want 0, ErrPhase", k, err)
	}
	if got := c.Stats().PhaseErrs; got != 1 {
		t.Fatalf("PhaseErrs = %d, want 1", got)
	}
	c.PopN(1) // skip it
	if k, err := c.Burst(100); k != 1 || err != nil || le.Uint64(c.Entry(c.Head())[8:]) != 4 {
		t.Fatalf("Burst after skipping = %d, %v", k, err)
	}
	c.PopN(1)
	c.Release()
	if s := c.Stats(); s.Entries != 5 {
		t.Fatalf("consumer Entries = %d, want 5", s.Entries)
	}
	// An index more than a ring ahead: nothing handed out, ErrBadIndex.
	store32(p.hdr(OffProducerIndex), c.Head()+count+1)
	if k, err := c.Burst(100); k != 0 || !errors.Is(err, ErrBadIndex) {
		t.Fatalf("hostile index: Burst = %d, %v", k, err)
	}
	// A full ring: Reserve returns 0 and counts it.
	store32(p.hdr(OffProducerIndex), 5)
	if k := p.Reserve(100); k != count {
		t.Fatalf("Reserve with everything released = %d, want %d", k, count)
	}
	p.CommitN(count)
	if k := p.Reserve(1); k != 0 || p.Stats().Full == 0 {
		t.Fatalf("Reserve on a full ring = %d, Full = %d", k, p.Stats().Full)
	}
}

// TestCompleteAcrossLap: completing an entry a Burst returned past the end
// of a lap writes that entry's DONE_PHASE, not the head's (found by the
// model checker: a 2-slot ring, head 1, Burst(2), Complete(Entry(2)) left
// IsDone(2) false).
func TestCompleteAcrossLap(t *testing.T) {
	a, err := NewArena(1 << 16)
	if err != nil {
		t.Fatal(err)
	}
	l, err := AllocRing(a, 2, CommandEntrySize)
	if err != nil {
		t.Fatal(err)
	}
	p, _ := NewProducer(a, l, 1, nil)
	c, _ := NewConsumer(a, l, 1, nil)
	for i := 0; i < 3; i++ {
		if p.Next() == nil {
			t.Fatalf("entry %d: ring full", i)
		}
		p.Commit()
		p.Publish()
		if i == 0 {
			// Consume entry 0, so that entries 1 and 2 (slots 1 and
			// 0: two laps) arrive in one burst.
			e, err := c.Peek()
			if e == nil || err != nil {
				t.Fatalf("entry 0: %v", err)
			}
			c.Complete(e)
			c.Pop()
			c.Release()
		}
	}
	p.Publish()
	if n, err := c.Burst(2); n != 2 || err != nil {
		t.Fatalf("Burst = %d, %v; want entries 1 and 2", n, err)
	}
	for i := uint32(1); i <= 2; i++ {
		c.Complete(c.Entry(c.Head() + i - 1))
	}
	for i := uint32(1); i <= 2; i++ {
		if !IsDone(&p.Ring, i) {
			t.Fatalf("IsDone(%d) false after Complete", i)
		}
	}
}
