package nic

import "sync/atomic"

// With large receive offload (Config.NoLRO) the FIFO's slots hold a
// super-frame each, and there are few of them: lroFIFODepth at most. The
// MAC waits for a free slot (flow control: the rest wait in the port, the
// kernel's queue for a TAP), so a few slots keep the MAC and the unit
// busy, and they stay in the processor's cache, where the kernel's copy
// into a slot and the unit's copy out of it find them. 128 slots, cycled
// through 8 MiB, cost the TAP path 7% more CPU per GiB and 10% of its
// throughput (docs/benchmarks-history.md). A MAC that drops when the FIFO is full
// (Config.DropWhenFull) gets lroDropFIFODepth slots, to ride out a burst
// as a real one's buffer does.
const (
	lroFrameSize     = 65535 + EthHeaderLen
	lroFIFODepth     = 4
	lroDropFIFODepth = 128
)

// rxFIFO is the receive FIFO between the MAC (the goroutine reading the
// port) and the offload unit: fixed frame slots allocated once, free-running
// indices, no allocation per frame. One writer, one reader.
type rxFIFO struct {
	slots [][]byte
	lens  []int
	offs  []int   // where the frame starts in its slot (port.LROFrame.Off)
	ok    []bool  // the port vouched for the frame's transport checksum
	gso   []int32 // > 0: a super-frame of segments of this payload size (Config.NoLRO)
	segs  []int32 // the wire frames a super-frame stands for
	mask  uint32
	head  atomic.Uint32 // next slot the unit reads; written by the unit
	_     [60]byte
	tail  atomic.Uint32 // next slot the MAC fills; written by the MAC
}

func newRxFIFO(depth, frameSize int) *rxFIFO {
	n := 1
	for n < depth {
		n <<= 1
	}
	f := &rxFIFO{slots: make([][]byte, n), lens: make([]int, n), offs: make([]int, n), ok: make([]bool, n), gso: make([]int32, n), segs: make([]int32, n), mask: uint32(n - 1)}
	backing := make([]byte, n*frameSize)
	for i := range f.slots {
		f.slots[i] = backing[i*frameSize : (i+1)*frameSize : (i+1)*frameSize]
	}
	return f
}

// reserve returns the slot the MAC fills next, or nil when the FIFO is full.
func (f *rxFIFO) reserve() []byte {
	t := f.tail.Load()
	if t-f.head.Load() == uint32(len(f.slots)) {
		return nil
	}
	return f.slots[t&f.mask]
}

// push publishes the reserved slot holding n bytes.
func (f *rxFIFO) push(n int) { f.pushCsum(n, false) }

// pushCsum is push, saying whether the port verified the frame's transport
// checksum (port.CsumReader).
func (f *rxFIFO) pushCsum(n int, l4OK bool) { f.pushLRO(0, n, l4OK, 0, 1) }

// pushLRO is pushCsum for a frame at off in its slot that may be a
// super-frame of segs segments of gso payload bytes (gso 0: an ordinary
// frame).
func (f *rxFIFO) pushLRO(off, n int, l4OK bool, gso, segs int) {
	t := f.tail.Load()
	f.offs[t&f.mask] = off
	f.lens[t&f.mask] = n
	f.ok[t&f.mask] = l4OK
	f.gso[t&f.mask], f.segs[t&f.mask] = int32(gso), int32(segs)
	f.tail.Store(t + 1)
}

// headLRO returns the oldest frame's GSO size (0: not a super-frame) and
// the segments it stands for.
func (f *rxFIFO) headLRO() (gso, segs int) {
	i := f.head.Load() & f.mask
	return int(f.gso[i]), int(f.segs[i])
}

// headVerified reports whether the port verified the oldest frame's
// transport checksum.
func (f *rxFIFO) headVerified() bool { return f.ok[f.head.Load()&f.mask] }

// peek returns the oldest frame, or nil.
func (f *rxFIFO) peek() []byte {
	h := f.head.Load()
	if h == f.tail.Load() {
		return nil
	}
	i := h & f.mask
	return f.slots[i][f.offs[i] : f.offs[i]+f.lens[i]]
}

func (f *rxFIFO) pop() { f.head.Add(1) }

func (f *rxFIFO) empty() bool { return f.head.Load() == f.tail.Load() }
