package rings

import (
	"errors"
	"fmt"
	"runtime"
	"time"
)

// Ring header layout. The header is four cache lines at the ring's base
// address; each index or flag word is written by exactly one agent and sits on
// its own line so the producer and consumer never false-share.
const (
	OffProducerIndex = 0x00 // u32, free-running; written by the producer only
	OffConsumerIndex = 0x40 // u32, free-running; written by the consumer only
	OffConsumerFlags = 0x80 // u32, written by the consumer: FlagNeedWakeup
	OffProducerFlags = 0xC0 // u32, written by the producer: FlagNeedWakeup (waiting for space)
	HeaderSize       = 0x100
)

// FlagNeedWakeup in a flags word says "I am parked: kick me". A peer that
// publishes work (or frees space) only rings the doorbell when this is set, as
// io_uring's IORING_SQ_NEED_WAKEUP and virtio's event suppression do: a kick
// costs microseconds, a ring that kicks on every entry is hundreds of times
// slower than one that doesn't.
const FlagNeedWakeup = 1 << 0

// Every entry begins with a 32-bit control word. The producer writes it last,
// atomically, so an entry is never seen half written.
const (
	OffCtl = 0 // u32 control word of every entry

	// CtlPhase is the NVMe-style phase tag: the producer writes 1 on the
	// first lap, 0 on the second, and so on. A consumer that finds an entry
	// with the wrong phase below the published producer index has found a
	// protocol violation (counted, never trusted).
	CtlPhase = 1 << 0
	// CtlDone is set by the consumer of a command ring entry after it has
	// written the command's status into the entry (status write-back in
	// place). It carries the phase of the lap in CtlDonePhase so a stale DONE
	// from the previous lap is never mistaken for a new completion.
	CtlDone      = 1 << 1
	CtlDonePhase = 1 << 2
	// CtlReservedMask are the bits ring mechanics own; entry types use
	// bits 8..31 of the control word for their own kind/flags.
	CtlReservedMask = 0xFF
)

// Layout places a ring in host memory: a header followed by Count entries of
// EntrySize bytes. The same Layout given to both sides is the whole contract.
type Layout struct {
	Base      Addr
	Count     uint32 // power of two
	EntrySize uint32 // multiple of 16, at least 16
}

// Size is the number of bytes of host memory the ring occupies.
func (l Layout) Size() int { return HeaderSize + int(l.Count)*int(l.EntrySize) }

// Validate checks the geometry.
func (l Layout) Validate() error {
	switch {
	case l.Count == 0 || l.Count&(l.Count-1) != 0:
		return fmt.Errorf("ring: entry count %d is not a power of two", l.Count)
	case l.Count > 1<<20:
		return fmt.Errorf("ring: entry count %d exceeds 1M", l.Count)
	case l.EntrySize < 16 || l.EntrySize%16 != 0 || l.EntrySize > 4096:
		return fmt.Errorf("ring: entry size %d must be a multiple of 16 in [16, 4096]", l.EntrySize)
	case l.Base%CacheLine != 0:
		return fmt.Errorf("ring: base %#x is not 64-byte aligned", uint64(l.Base))
	}
	return nil
}

// AllocRing allocates and zeroes host memory for a ring.
func AllocRing(a *Arena, count, entrySize uint32) (Layout, error) {
	l := Layout{Count: count, EntrySize: entrySize}
	if err := (Layout{Base: a.Base(), Count: count, EntrySize: entrySize}).Validate(); err != nil {
		return l, err
	}
	base, err := a.Alloc(l.Size(), CacheLine)
	if err != nil {
		return l, err
	}
	l.Base = base
	return l, nil
}

// Ring is one side's view of a ring in host memory. Producer and Consumer
// embed it; they keep their private state outside host memory, as a driver
// and a chip each keep their own shadow copies of the indices.
type Ring struct {
	layout Layout
	mem    []byte
	mask   uint32
	shift  uint32 // log2(Count), for the phase of an index
}

func openRing(dma DMA, l Layout) (Ring, error) {
	if err := l.Validate(); err != nil {
		return Ring{}, err
	}
	mem, err := dma.Map(l.Base, l.Size())
	if err != nil {
		return Ring{}, fmt.Errorf("ring at %#x: %w", uint64(l.Base), err)
	}
	shift := uint32(0)
	for 1<<shift < l.Count {
		shift++
	}
	return Ring{layout: l, mem: mem, mask: l.Count - 1, shift: shift}, nil
}

// Layout returns the ring's placement.
func (r *Ring) Layout() Layout { return r.layout }

// Entry returns the bytes of the entry slot for free-running index i.
func (r *Ring) Entry(i uint32) []byte {
	off := HeaderSize + int(i&r.mask)*int(r.layout.EntrySize)
	end := off + int(r.layout.EntrySize)
	return r.mem[off:end:end]
}

// Phase is the phase tag value for free-running index i: 1 on even laps.
func (r *Ring) Phase(i uint32) uint32 { return ((i >> r.shift) & 1) ^ 1 }

func (r *Ring) hdr(off int) []byte { return r.mem[off : off+4] }

// ProducerIndex reads the published producer index.
func (r *Ring) ProducerIndex() uint32 { return load32(r.hdr(OffProducerIndex)) }

// ConsumerIndex reads the published consumer index.
func (r *Ring) ConsumerIndex() uint32 { return load32(r.hdr(OffConsumerIndex)) }

// Doorbell is how one side wakes the other: a write to a doorbell register, an
// interrupt, or in another process an eventfd.
type Doorbell interface {
	Kick()
}

// Bell is an in-process doorbell with a one-deep latch: kicks while nobody
// waits collapse into one, and a kick is never lost between a waiter's last
// check and its sleep.
type Bell struct {
	c chan struct{}
}

// NewBell returns a doorbell.
func NewBell() *Bell { return &Bell{c: make(chan struct{}, 1)} }

// Kick implements Doorbell.
func (b *Bell) Kick() {
	select {
	case b.c <- struct{}{}:
	default:
	}
}

// C is the channel a waiter selects on.
func (b *Bell) C() <-chan struct{} { return b.c }

// Wait blocks until a kick or the timeout (0 means forever); it reports
// whether it was kicked.
func (b *Bell) Wait(timeout time.Duration) bool {
	if timeout <= 0 {
		<-b.c
		return true
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-b.c:
		return true
	case <-t.C:
		return false
	}
}

// RingStats count the mechanics of one side of a ring.
type RingStats struct {
	Entries    uint64 // entries produced or consumed
	Publishes  uint64 // index stores made visible to the peer
	Kicks      uint64 // doorbells rung because the peer was parked
	Suppressed uint64 // publishes that needed no doorbell
	Full       uint64 // producer found no space
	Parks      uint64 // this side went to sleep
	PhaseErrs  uint64 // entries with the wrong phase tag (protocol violation)
}

// ErrPhase means an entry below the published producer index carries the
// wrong phase tag: the producer published an index before writing the entry,
// or something overwrote the ring.
var ErrPhase = errors.New("ring: entry phase tag does not match its lap")

// Producer is the writing side of a ring.
type Producer struct {
	Ring
	tail      uint32 // next index to fill
	published uint32 // last index stored to the header
	headCache uint32 // last consumer index read
	batch     uint32
	peer      Doorbell
	stats     RingStats
}

// NewProducer opens the producing side. batch is the number of committed
// entries after which Commit publishes by itself (1 publishes every entry);
// peer is rung when the consumer has said it is parked.
func NewProducer(dma DMA, l Layout, batch uint32, peer Doorbell) (*Producer, error) {
	r, err := openRing(dma, l)
	if err != nil {
		return nil, err
	}
	if batch == 0 {
		batch = 1
	}
	if batch > l.Count {
		batch = l.Count
	}
	p := &Producer{Ring: r, batch: batch, peer: peer}
	p.tail = r.ProducerIndex()
	p.published = p.tail
	p.headCache = r.ConsumerIndex()
	return p, nil
}

// Free returns how many entries can be produced before the ring is full.
func (p *Producer) Free() int {
	n := p.layout.Count - (p.tail - p.headCache)
	if n == 0 {
		p.headCache = p.ConsumerIndex()
		n = p.layout.Count - (p.tail - p.headCache)
	}
	return int(n)
}

// Next returns the slot for the next entry, or nil if the ring is full. The
// caller fills it (bytes 4 and up, plus type bits 8..31 of the control word)
// and calls Commit. Calling Next twice without Commit returns the same slot.
func (p *Producer) Next() []byte {
	if p.tail-p.headCache == p.layout.Count {
		p.headCache = p.ConsumerIndex()
		if p.tail-p.headCache == p.layout.Count {
			p.stats.Full++
			return nil
		}
	}
	return p.Entry(p.tail)
}

// Tail is the free-running index the next Commit will use.
func (p *Producer) Tail() uint32 { return p.tail }

// Commit stamps the slot returned by Next with this lap's phase and makes it
// part of the next publish; every batch entries it publishes.
func (p *Producer) Commit() {
	e := p.Entry(p.tail)
	ctl := le.Uint32(e[OffCtl:])&^CtlReservedMask | p.Phase(p.tail)
	store32(e[OffCtl:], ctl)
	p.tail++
	p.stats.Entries++
	if p.tail-p.published >= p.batch {
		p.Publish()
	}
}

// Publish makes every committed entry visible and rings the doorbell if the
// consumer is parked. The index store and the flag load are both
// sequentially consistent atomics; paired with the consumer's flag store and
// index re-check in Park, no wake-up can be lost.
func (p *Producer) Publish() {
	if p.tail == p.published {
		return
	}
	store32(p.hdr(OffProducerIndex), p.tail)
	p.published = p.tail
	p.stats.Publishes++
	if load32(p.hdr(OffConsumerFlags))&FlagNeedWakeup != 0 && p.peer != nil {
		p.stats.Kicks++
		p.peer.Kick()
	} else {
		p.stats.Suppressed++
	}
}

// Pending is the number of committed entries not yet published.
func (p *Producer) Pending() int { return int(p.tail - p.published) }

// Outstanding is the number of published entries the consumer has not
// released.
func (p *Producer) Outstanding() int { return int(p.tail - p.ConsumerIndex()) }

// WaitSpace parks the producer until the consumer frees space or the timeout
// passes; bell must be the doorbell the consumer rings (its peer).
func (p *Producer) WaitSpace(bell *Bell, timeout time.Duration) bool {
	flags := p.hdr(OffProducerFlags)
	store32(flags, FlagNeedWakeup)
	defer store32(flags, 0)
	if p.Free() > 0 {
		return true
	}
	p.stats.Parks++
	bell.Wait(timeout)
	return p.Free() > 0
}

// Stats returns this side's counters. Not safe concurrently with the
// producer's own goroutine; callers snapshot from that goroutine.
func (p *Producer) Stats() RingStats { return p.stats }

// Consumer is the reading side of a ring.
type Consumer struct {
	Ring
	head      uint32 // next index to consume
	released  uint32 // last index stored to the header
	tailCache uint32 // last producer index read
	batch     uint32
	peer      Doorbell // the producer's, rung when it waits for space
	stats     RingStats
}

// NewConsumer opens the consuming side. Released entries are published back
// to the producer every batch entries (or on Release).
func NewConsumer(dma DMA, l Layout, batch uint32, peer Doorbell) (*Consumer, error) {
	r, err := openRing(dma, l)
	if err != nil {
		return nil, err
	}
	if batch == 0 {
		batch = 1
	}
	if batch > l.Count {
		batch = l.Count
	}
	c := &Consumer{Ring: r, batch: batch, peer: peer}
	c.head = r.ConsumerIndex()
	c.released = c.head
	c.tailCache = r.ProducerIndex()
	return c, nil
}

// Available is the number of published entries not yet consumed.
func (c *Consumer) Available() int {
	if c.head == c.tailCache {
		c.tailCache = c.ProducerIndex()
	}
	return int(c.tailCache - c.head)
}

// Peek returns the next published entry without consuming it, nil if there is
// none, and ErrPhase if the entry's phase tag is wrong (the entry is then
// skipped by the caller with Pop after it records the error).
func (c *Consumer) Peek() ([]byte, error) {
	if c.head == c.tailCache {
		c.tailCache = c.ProducerIndex()
		if c.head == c.tailCache {
			return nil, nil
		}
	}
	if c.tailCache-c.head > c.layout.Count {
		// The producer published an index more than a ring ahead of us:
		// a corrupt or hostile index. Clamp and report.
		c.stats.PhaseErrs++
		c.tailCache = c.head
		return nil, fmt.Errorf("ring: producer index %d is more than %d ahead of consumer %d", c.tailCache, c.layout.Count, c.head)
	}
	e := c.Entry(c.head)
	if load32(e[OffCtl:])&CtlPhase != c.Phase(c.head) {
		c.stats.PhaseErrs++
		return e, ErrPhase
	}
	return e, nil
}

// Head is the free-running index of the entry Peek returns.
func (c *Consumer) Head() uint32 { return c.head }

// Complete marks the entry at the head done (status write-back in place): the
// caller has written the command's status into the entry first.
func (c *Consumer) Complete(e []byte) {
	ctl := load32(e[OffCtl:])&^(CtlDone|CtlDonePhase) | CtlDone
	if c.Phase(c.head) != 0 {
		ctl |= CtlDonePhase
	}
	store32(e[OffCtl:], ctl)
}

// Pop consumes the entry at the head; every batch entries the slots are
// released back to the producer.
func (c *Consumer) Pop() {
	c.head++
	c.stats.Entries++
	if c.head-c.released >= c.batch {
		c.Release()
	}
}

// Release publishes the consumer index, freeing consumed slots, and wakes the
// producer if it is waiting for space.
func (c *Consumer) Release() {
	if c.head == c.released {
		return
	}
	store32(c.hdr(OffConsumerIndex), c.head)
	c.released = c.head
	c.stats.Publishes++
	if load32(c.hdr(OffProducerFlags))&FlagNeedWakeup != 0 && c.peer != nil {
		c.stats.Kicks++
		c.peer.Kick()
	}
}

// SetNeedWakeup announces (or withdraws) that this consumer is about to
// sleep. After setting it the consumer must re-check Available before it
// parks: a producer that published just before seeing the flag did not kick.
func (c *Consumer) SetNeedWakeup(on bool) {
	v := uint32(0)
	if on {
		v = FlagNeedWakeup
	}
	store32(c.hdr(OffConsumerFlags), v)
}

// Park is the consumer's idle step when it owns no other event source: spin
// for up to spin polls, then announce sleep, re-check, and wait on bell for a
// kick (or timeout; 0 waits forever). It reports whether entries are
// available.
func (c *Consumer) Park(bell *Bell, spin int, timeout time.Duration) bool {
	for i := 0; i < spin; i++ {
		if c.Available() > 0 {
			return true
		}
		runtime.Gosched()
	}
	c.Release()
	c.SetNeedWakeup(true)
	defer c.SetNeedWakeup(false)
	if c.Available() > 0 {
		return true
	}
	c.stats.Parks++
	bell.Wait(timeout)
	return c.Available() > 0
}

// Stats returns this side's counters (call from the consumer's goroutine).
func (c *Consumer) Stats() RingStats { return c.stats }

// IsDone reports whether a command ring entry produced at free-running index
// i has been completed by the consumer on this lap.
func IsDone(r *Ring, i uint32) bool {
	ctl := load32(r.Entry(i)[OffCtl:])
	if ctl&CtlDone == 0 {
		return false
	}
	return (ctl&CtlDonePhase != 0) == (r.Phase(i) != 0)
}
