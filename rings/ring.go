package rings

import (
	"errors"
	"fmt"
	"runtime"
	"sync/atomic"
	"time"
	"unsafe"
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

// Every entry begins with a 32-bit control word. Bits 0..7 belong to the ring
// mechanics; the producer writes that low byte after the entry body and
// before it publishes the producer index. A consumer reads an entry only
// below an index it has loaded, so the index store is what makes the whole
// entry visible; the phase tag is the check that the producer kept that
// order. The consumer of a command ring later rewrites the word atomically to
// mark completion, and the producer polls it atomically (IsDone).
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
	// CtlReservedMask are the bits ring mechanics own; entry types may use
	// bits 8..23 of the control word for their own kind/flags. Bits 24..31
	// are reserved and zero: a producer may store zero there in a slot it
	// owns (Producer.warm does, to take the line before writing the entry).
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
	shift  uint32         // log2(Count), for the phase of an index
	slots  unsafe.Pointer // &mem[HeaderSize]: entry slot 0
	esize  uintptr        // EntrySize
	pi, ci *uint32        // the header's index words
	cf, pf *uint32        // the header's flags words (consumer's, producer's)
	tap    Tap            // nil unless host memory is traced (TracedDMA)
}

func openRing(dma DMA, l Layout, producer bool) (Ring, error) {
	if err := l.Validate(); err != nil {
		return Ring{}, err
	}
	traced, isTraced := dma.(TracedDMA)
	if isTraced {
		dma = traced.Raw()
	}
	mem, err := dma.Map(l.Base, l.Size())
	if err != nil {
		return Ring{}, fmt.Errorf("ring at %#x: %w", uint64(l.Base), err)
	}
	shift := uint32(0)
	for 1<<shift < l.Count {
		shift++
	}
	r := Ring{layout: l, mem: mem, mask: l.Count - 1, shift: shift,
		slots: unsafe.Pointer(&mem[HeaderSize]), esize: uintptr(l.EntrySize),
		pi: word(mem[OffProducerIndex:]), ci: word(mem[OffConsumerIndex:]),
		cf: word(mem[OffConsumerFlags:]), pf: word(mem[OffProducerFlags:])}
	if isTraced {
		// The tap may point the other side's words at shadows it keeps
		// (see TracedDMA); this side's stay in memory.
		r.tap = traced.RingTap(l, producer, &r)
	}
	return r, nil
}

// Redirect points the header word at off (the other side's index or flags)
// at w: a traced ring's tap keeps that word's value there (see TracedDMA).
func (r *Ring) Redirect(off int, w *uint32) {
	switch off {
	case OffProducerIndex:
		r.pi = w
	case OffConsumerIndex:
		r.ci = w
	case OffConsumerFlags:
		r.cf = w
	case OffProducerFlags:
		r.pf = w
	}
}

// Mem is the ring's memory, header and entries (for a tap).
func (r *Ring) Mem() []byte { return r.mem }

// openSide opens one side's view of the ring and clamps its batch to
// [1, Count].
func openSide(dma DMA, l Layout, batch uint32, producer bool) (Ring, uint32, error) {
	r, err := openRing(dma, l, producer)
	return r, min(max(batch, 1), l.Count), err
}

// signal makes this side's progress visible and wakes the peer if it sleeps:
// it stores the side's index (at idxOff) as v, counts the entries since
// last, and then, after the full barrier of that store, rings peer if the
// other side's flags word (at flagsOff) says it is parked. Publish and
// Release are the two uses.
func (r *Ring) signal(st *RingStats, idxOff int, v, last uint32, flagsOff int, peer Doorbell) {
	r.store(idxOff, v)
	st.Entries += uint64(v - last)
	st.Publishes++
	if r.flags(flagsOff)&FlagNeedWakeup != 0 && peer != nil {
		st.Kicks++
		peer.Kick()
	} else {
		st.Suppressed++
	}
}

// Layout returns the ring's placement.
func (r *Ring) Layout() Layout { return r.layout }

// Entry returns the bytes of the entry slot for free-running index i.
func (r *Ring) Entry(i uint32) []byte {
	// mem was bounds checked once when the ring was opened and i&mask is
	// a slot number, so the slot is always inside it: no checks per entry.
	return unsafe.Slice((*byte)(r.slot(i)), r.esize)
}

// slot is the address of the slot for free-running index i.
func (r *Ring) slot(i uint32) unsafe.Pointer {
	return unsafe.Add(r.slots, uintptr(i&r.mask)*r.esize)
}

// Phase is the phase tag value for free-running index i: 1 on even laps.
func (r *Ring) Phase(i uint32) uint32 { return ((i >> r.shift) & 1) ^ 1 }

func (r *Ring) hdr(off int) []byte { return r.mem[off : off+4] }

// ProducerIndex reads the published producer index.
func (r *Ring) ProducerIndex() uint32 { return atomic.LoadUint32(r.pi) }

// ConsumerIndex reads the published consumer index.
func (r *Ring) ConsumerIndex() uint32 { return atomic.LoadUint32(r.ci) }

// flags reads the flags word at off (OffConsumerFlags or OffProducerFlags).
func (r *Ring) flags(off int) uint32 {
	if off == OffConsumerFlags {
		return atomic.LoadUint32(r.cf)
	}
	return atomic.LoadUint32(r.pf)
}

// store writes this side's header word at off and tells the tap.
func (r *Ring) store(off int, v uint32) {
	store32(r.hdr(off), v)
	if r.tap != nil {
		r.tap.Stored(off, v)
	}
}

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

// ErrBadIndex is wrapped by the error Peek returns when the published
// producer index is more than a whole ring ahead of the consumer: a corrupt
// or hostile index. It is counted with the phase errors.
var ErrBadIndex = errors.New("ring: producer index more than a ring ahead of the consumer")

// Producer is the writing side of a ring.
type Producer struct {
	_ [CacheLine]byte // keep the hot private fields off a neighbour's lines
	Ring
	tail      uint32 // next index to fill
	published uint32 // last index stored to the header
	headCache uint32 // last consumer index read
	warmed    uint32 // slots before this index have been warmed
	batch     uint32
	peer      Doorbell
	stats     RingStats
	_         [CacheLine]byte
}

// NewProducer opens the producing side. batch is the number of committed
// entries after which Commit publishes by itself (1 publishes every entry);
// peer is rung when the consumer has said it is parked.
func NewProducer(dma DMA, l Layout, batch uint32, peer Doorbell) (*Producer, error) {
	r, batch, err := openSide(dma, l, batch, true)
	if err != nil {
		return nil, err
	}
	p := &Producer{Ring: r, batch: batch, peer: peer}
	p.tail = r.ProducerIndex()
	p.published = p.tail
	p.headCache = r.ConsumerIndex()
	return p, nil
}

// Free returns a lower bound on how many entries can be produced before the
// ring is full: it answers from the consumer index it last read and reads
// it again only when that one shows the ring full, so that a producer that
// keeps pace costs no cache miss per entry. A caller that needs room for a
// batch of k entries must not take Free() < k as "no room" (63 released
// single commands on a 64-slot ring still read 1); Outstanding is exact.
func (p *Producer) Free() int {
	n := p.layout.Count - (p.tail - p.headCache)
	if n == 0 {
		p.headCache = p.ConsumerIndex()
		n = p.layout.Count - (p.tail - p.headCache)
	}
	return int(n)
}

// Next returns the slot for the next entry, or nil if the ring is full. The
// caller fills it (bytes 4 and up, plus type bits 8..23 of the control word)
// and calls Commit. Calling Next twice without Commit returns the same slot.
func (p *Producer) Next() []byte {
	// Small enough to inline: the shared consumer index is read only when
	// the cached one says the ring is full.
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

// Reserve is Next for a batch: it returns how many slots, up to max, are
// free from Tail() on. The caller fills the slots Entry(Tail()+i) for i
// below that count, in any order, then calls CommitN. A producer that has
// several entries to post saves the per-entry checks of Next and Commit.
func (p *Producer) Reserve(max int) int {
	if max <= 0 {
		return 0
	}
	want := uint32(min(max, int(p.layout.Count)))
	free := p.layout.Count - (p.tail - p.headCache)
	if want > free {
		p.headCache = p.ConsumerIndex()
		free = p.layout.Count - (p.tail - p.headCache)
		if free == 0 {
			p.stats.Full++
		}
	}
	return int(min(want, free))
}

// CommitN commits n slots filled after Reserve, stamping each with its
// lap's phase (as Commit does, one byte each), and publishes every batch
// entries on the way, as n calls of Commit would.
func (p *Producer) CommitN(n int) {
	for ; n > 0; n-- {
		*(*byte)(p.slot(p.tail)) = byte(p.Phase(p.tail))
		p.tail++
		if p.tail-p.published >= p.batch || int32(p.tail-p.warmed) >= 0 {
			p.commitSlow()
		}
	}
}

// Commit stamps the slot returned by Next with this lap's phase and makes it
// part of the next publish; every batch entries it publishes.
//
// The stamp is a one-byte store of the ring-owned low byte of the control
// word: it sets the phase and clears DONE, DONE_PHASE and the reserved bits
// left from the previous lap, and leaves the entry type's bits 8..31 alone
// without reading them. (A read-modify-write of the word would load a line
// the consumer still holds from the last lap and stall the producer on every
// entry.) No atomic is needed: nobody reads the entry before the index
// store in Publish, which orders it.
func (p *Producer) Commit() {
	*(*byte)(p.slot(p.tail)) = byte(p.Phase(p.tail)) // control word byte 0
	p.tail++
	if p.tail-p.published >= p.batch || int32(p.tail-p.warmed) >= 0 {
		p.commitSlow()
	}
}

// commitSlow publishes a full batch (Publish counts the entries), and warms
// the next slots whenever the producer has reached the end of the warmed
// ones. Warming only at publishes is not enough: a producer that keeps up
// with its consumer meets a full ring at every publish, can warm nothing
// then, and would write every slot freed later into a cold line, one miss
// after another (measured: 11–17 ns/entry that way, 11–12 this way).
func (p *Producer) commitSlow() {
	if p.tail-p.published >= p.batch {
		p.Publish()
	}
	p.warm()
}

// warm takes ownership of the cache lines of the next free slots before
// they are written. A slot's line was last read by the consumer, so the
// producer's first store to it waits for the line to come back; stores
// retire in order, so with an entry's worth of stores queued behind each such
// miss only a few lines are ever in flight. One store per slot in a tight
// loop puts a whole batch of lines in flight at once, and the entries are
// then written into lines the producer already owns.
//
// The store writes zero to the control word's top byte (bits 24..31), which
// no entry type uses (they are written zero): it changes nothing a reader
// of a free slot could see (a command ring host may still read the previous
// lap's DONE bits, status and result there), and it needs no load first.
func (p *Producer) warm() {
	w := p.batch * 2
	if w > warmMax {
		w = warmMax
	}
	end := p.tail + w
	start := p.warmed
	if start-p.tail > w { // behind the tail (or never warmed)
		start = p.tail
	}
	if end-p.headCache > p.layout.Count {
		p.headCache = p.ConsumerIndex()
		if end-p.headCache > p.layout.Count {
			end = p.headCache + p.layout.Count
		}
	}
	if end-start > w {
		return
	}
	for i := start; i != end; i++ {
		warmStore(p.slot(i))
	}
	p.warmed = end
}

// Publish makes every committed entry visible and rings the doorbell if the
// consumer is parked. The index store and the flag load are both
// sequentially consistent atomics; paired with the consumer's flag store and
// index re-check in Park, no wake-up can be lost.
func (p *Producer) Publish() {
	if p.tail == p.published {
		return
	}
	p.signal(&p.stats, OffProducerIndex, p.tail, p.published, OffConsumerFlags, p.peer)
	p.published = p.tail
}

// Pending is the number of committed entries not yet published.
func (p *Producer) Pending() int { return int(p.tail - p.published) }

// Outstanding is the number of published entries the consumer has not
// released.
func (p *Producer) Outstanding() int { return int(p.tail - p.ConsumerIndex()) }

// WaitSpace parks the producer until the consumer frees space or the timeout
// passes; bell must be the doorbell the consumer rings (its peer). It first
// publishes any committed entries: a producer that sleeps on a full ring
// with unpublished entries would wait for a consumer that has nothing to do.
func (p *Producer) WaitSpace(bell *Bell, timeout time.Duration) bool {
	p.Publish()
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
func (p *Producer) Stats() RingStats {
	s := p.stats
	s.Entries += uint64(p.tail - p.published) // committed, not yet published
	return s
}

// Consumer is the reading side of a ring.
type Consumer struct {
	_ [CacheLine]byte // keep the hot private fields off a neighbour's lines
	Ring
	head      uint32 // next index to consume
	released  uint32 // last index stored to the header
	tailCache uint32 // last producer index read
	touched   byte   // sink for refresh's loads
	singleP   bool   // GOMAXPROCS was 1 when last read: Park does not spin
	batch     uint32
	peer      Doorbell // the producer's, rung when it waits for space
	stats     RingStats
	_         [CacheLine]byte
}

// NewConsumer opens the consuming side. Released entries are published back
// to the producer every batch entries (or on Release).
func NewConsumer(dma DMA, l Layout, batch uint32, peer Doorbell) (*Consumer, error) {
	r, batch, err := openSide(dma, l, batch, false)
	if err != nil {
		return nil, err
	}
	c := &Consumer{Ring: r, batch: batch, peer: peer, singleP: runtime.GOMAXPROCS(0) == 1}
	c.head = r.ConsumerIndex()
	c.released = c.head
	c.tailCache = r.ProducerIndex()
	return c, nil
}

// refresh reloads the producer index and touches the control words of the
// newly published entries in a tight loop: their lines (last written by the
// producer's core) then travel together, where parsing the entries one by
// one would take each line's miss in turn.
func (c *Consumer) refresh() {
	t := c.ProducerIndex()
	n := t - c.tailCache
	c.tailCache = t
	if n > c.layout.Count {
		return // a bad index: Peek reports it
	}
	n = min(n, warmMax)
	var x byte
	for i := t - n; i != t; i++ {
		x ^= *(*byte)(c.slot(i))
	}
	c.touched = x
}

// Available is the number of published entries not yet consumed.
func (c *Consumer) Available() int {
	if c.head == c.tailCache {
		c.refresh()
	}
	return int(c.tailCache - c.head)
}

// Peek returns the next published entry without consuming it, nil if there is
// none, and ErrPhase (with the slot) if the entry's phase tag is wrong: the
// producer published the index before the entry, so the slot must not be
// interpreted. The caller records it and either tries again later (the
// entry becomes valid when the producer's write lands; the device does
// this) or skips it with Pop (the entry is then lost). Every call that sees
// a bad entry counts it in RingStats.PhaseErrs. An index more than a ring
// ahead returns nil and an error wrapping ErrBadIndex.
func (c *Consumer) Peek() ([]byte, error) {
	// Fast path: 1 <= tailCache-head <= Count (the subtraction wraps for
	// 0) and the phase tag matches.
	if c.tailCache-c.head-1 < c.layout.Count && c.stamped(c.head) {
		return c.Entry(c.head), nil
	}
	return c.peekSlow()
}

// peekSlow is Peek when the cached producer index is used up (or bad).
func (c *Consumer) peekSlow() ([]byte, error) {
	if c.head == c.tailCache {
		c.refresh()
		if c.head == c.tailCache {
			return nil, nil
		}
	}
	if c.tailCache-c.head > c.layout.Count {
		// The producer published an index more than a ring ahead of us:
		// a corrupt or hostile index. Report it and forget it; the next
		// Peek reads the index again.
		c.stats.PhaseErrs++
		t := c.tailCache
		c.tailCache = c.head
		return nil, fmt.Errorf("%w: producer index %d, consumer index %d, %d entries", ErrBadIndex, t, c.head, c.layout.Count)
	}
	e := c.Entry(c.head)
	if !c.stamped(c.head) {
		return c.phaseError(e)
	}
	return e, nil
}

// stamped reports whether the entry at free-running index i carries its
// lap's phase tag. The tag is read with a plain load: a consumer looks only
// below an index it loaded atomically, which orders the load after the
// producer's writes of the entry.
func (c *Consumer) stamped(i uint32) bool {
	return uint32(*(*byte)(c.slot(i)))&CtlPhase == c.Phase(i)
}

func (c *Consumer) phaseError(e []byte) ([]byte, error) {
	c.stats.PhaseErrs++
	return e, ErrPhase
}

// Head is the free-running index of the entry Peek returns.
func (c *Consumer) Head() uint32 { return c.head }

// Burst is Peek for a batch: it returns how many entries, up to max, are
// published from Head() on with the right phase tag. The caller reads
// Entry(Head()+i) for i below that count and consumes them with PopN. If
// the entry at the head itself is bad it returns 0 and the error Peek would
// (a bad entry further on only ends the burst before it; the next Burst
// reports it). A consumer draining a burst saves Peek's per-entry checks.
func (c *Consumer) Burst(max int) (int, error) {
	if max <= 0 {
		return 0, nil
	}
	if c.head == c.tailCache || c.tailCache-c.head > c.layout.Count {
		if _, err := c.peekSlow(); err != nil || c.head == c.tailCache {
			return 0, err
		}
	}
	n := min(uint32(min(max, int(c.layout.Count))), c.tailCache-c.head)
	for i := uint32(0); i < n; i++ {
		if !c.stamped(c.head + i) {
			if i == 0 {
				_, err := c.peekSlow()
				return 0, err
			}
			return int(i), nil
		}
	}
	return int(n), nil
}

// PopN consumes n entries, releasing slots every batch entries as Pop
// does. n must be at most what Burst returned: more would hand the producer
// slots nobody read.
func (c *Consumer) PopN(n int) {
	c.head += uint32(n)
	if c.head-c.released >= c.batch {
		c.Release()
	}
}

// Complete marks entry e done (status write-back in place): the caller has
// written the command's status into the entry first. e is the head entry
// or one a Burst returned beyond it; its DONE_PHASE is the phase of its own
// index, not the head's (a burst can cross a lap; the model checker in
// ringmodel found the head's phase wrong there, leaving IsDone false for
// good).
func (c *Consumer) Complete(e []byte) {
	slot := uint32((uintptr(unsafe.Pointer(&e[0])) - uintptr(c.slots)) / c.esize)
	i := c.head + (slot-c.head)&c.mask // the index in [head, head+Count) in that slot
	ctl := load32(e[OffCtl:])&^(CtlDone|CtlDonePhase) | CtlDone
	if c.Phase(i) != 0 {
		ctl |= CtlDonePhase
	}
	store32(e[OffCtl:], ctl)
	if c.tap != nil {
		c.tap.Completed(i, e)
	}
}

// Pop consumes the entry at the head; every batch entries the slots are
// released back to the producer.
func (c *Consumer) Pop() {
	c.head++
	if c.head-c.released >= c.batch { // Release counts the entries
		c.Release()
	}
}

// Release publishes the consumer index, freeing consumed slots, and wakes the
// producer if it is waiting for space.
func (c *Consumer) Release() {
	if c.head == c.released {
		return
	}
	c.signal(&c.stats, OffConsumerIndex, c.head, c.released, OffProducerFlags, c.peer)
	c.released = c.head
}

// SetNeedWakeup announces (or withdraws) that this consumer is about to
// sleep. After setting it the consumer must re-check Available before it
// parks: a producer that published just before seeing the flag did not kick.
func (c *Consumer) SetNeedWakeup(on bool) {
	v := uint32(0)
	if on {
		v = FlagNeedWakeup
	}
	c.store(OffConsumerFlags, v)
}

// Park is the consumer's idle step when it owns no other event source:
// release consumed slots, spin for up to spin polls, then announce sleep,
// re-check, and wait on bell for a kick (or timeout; 0 waits forever). It
// reports whether entries are available.
//
// The spin does not yield the processor (runtime.Gosched would put this
// goroutine on the global run queue without waking an idle processor, and a
// producer and consumer that both spin that way can end up sharing one
// processor for good while the other sleeps). With a single processor
// (GOMAXPROCS=1) spinning cannot help, so Park goes straight to sleep.
//
// GOMAXPROCS is read when the consumer is opened and again after every
// sleep, never per Park: runtime.GOMAXPROCS takes the scheduler's global
// lock, whose cache line the other processor also writes, and a consumer
// that keeps pace with its producer calls Park once per batch. Reading it
// there cost 13.4 → 10.6 ns/entry with a 60 ns core-to-core handoff and
// 42 → 24 ns/entry with a 250 ns one (BenchmarkRingVsChannel's ring).
func (c *Consumer) Park(bell *Bell, spin int, timeout time.Duration) bool {
	// Give consumed slots back before spinning: a producer waiting for
	// space must not wait out this side's spin.
	c.Release()
	if c.singleP {
		spin = 0
	}
	for i := 0; i < spin; i++ {
		if c.Available() > 0 {
			return true
		}
	}
	c.SetNeedWakeup(true)
	defer c.SetNeedWakeup(false)
	if c.Available() > 0 {
		return true
	}
	c.stats.Parks++
	bell.Wait(timeout)
	c.singleP = runtime.GOMAXPROCS(0) == 1
	return c.Available() > 0
}

// Stats returns this side's counters (call from the consumer's goroutine).
func (c *Consumer) Stats() RingStats {
	s := c.stats
	s.Entries += uint64(c.head - c.released) // consumed, not yet released
	return s
}

// IsDone reports whether a command ring entry produced at free-running index
// i has been completed by the consumer on this lap.
func IsDone(r *Ring, i uint32) bool {
	ctl := load32(r.Entry(i)[OffCtl:])
	if ctl&CtlDone == 0 {
		return false
	}
	return (ctl&CtlDonePhase != 0) == (r.Phase(i) != 0)
}

// warmMax bounds how many slots warm and refresh touch at once.
const warmMax = 64
