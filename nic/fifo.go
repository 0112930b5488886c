package nic

import "sync/atomic"

// rxFIFO is the receive FIFO between the MAC (the goroutine reading the
// port) and the offload unit: fixed frame slots allocated once, free-running
// indices, no allocation per frame. One writer, one reader.
type rxFIFO struct {
	slots [][]byte
	lens  []int
	ok    []bool // the port vouched for the frame's transport checksum
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
	f := &rxFIFO{slots: make([][]byte, n), lens: make([]int, n), ok: make([]bool, n), mask: uint32(n - 1)}
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
func (f *rxFIFO) pushCsum(n int, l4OK bool) {
	t := f.tail.Load()
	f.lens[t&f.mask] = n
	f.ok[t&f.mask] = l4OK
	f.tail.Store(t + 1)
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
	return f.slots[i][:f.lens[i]]
}

func (f *rxFIFO) pop() { f.head.Add(1) }

func (f *rxFIFO) empty() bool { return f.head.Load() == f.tail.Load() }
