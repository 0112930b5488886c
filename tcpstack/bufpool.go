package tcpstack

import (
	"sync"

	"github.com/emunic/emunic/rings"
)

// bufPool is the host memory of delegated connections' byte streams: send
// chunks and posted receive buffers, shared by every connection of a host
// and taken only while data is in flight (like socket buffers, not like a
// per-connection reservation). Buffers come in power-of-two size classes
// from bufMinClass to bufMaxClass, carved from slabs the pool takes from the
// arena as it grows (up to its limit or until the arena has no room); a
// freed buffer goes on its class's free list and is reused, so a host's
// memory rises to the high-water mark of data in flight and stays there,
// whatever the number of connections opened and closed.
//
// Running out is back-pressure, never a failure: a Write waits (waitChan)
// for a buffer another connection frees; a connection that would post more
// receive buffers keeps receiving through the shared legacy buffers.
type bufPool struct {
	mem   *rings.Arena
	limit int64 // most bytes of slabs taken from the arena (0: the arena's size)

	mu       sync.Mutex
	free     [bufClasses][]rings.Addr
	slab     rings.Addr // carving position in the current slab
	slabLeft int
	reserved int64 // bytes of slabs taken from the arena
	inUse    int64 // bytes handed out
	waiters  chan struct{}
	misses   uint64 // gets that found nothing (the caller waited or went without)
}

const (
	bufMinShift = 12 // 4 KiB
	bufMaxShift = 16 // 64 KiB
	bufClasses  = bufMaxShift - bufMinShift + 1
	bufMinClass = 1 << bufMinShift
	bufMaxClass = 1 << bufMaxShift
	bufSlabSize = 1 << 20 // a multiple of every class
)

func newBufPool(mem *rings.Arena, limit int64) *bufPool {
	return &bufPool{mem: mem, limit: limit}
}

// classOf is the smallest class holding n bytes (n is clamped to the
// classes' range).
func classOf(n int) int {
	c := 0
	for c < bufClasses-1 && 1<<(bufMinShift+c) < n {
		c++
	}
	return c
}

// get returns a buffer for up to want bytes: of want's class if one is
// free or can be carved, else the largest free one of another class. It
// reports false when the pool has none and cannot grow.
func (p *bufPool) get(want int) (rings.Addr, []byte, bool) {
	p.mu.Lock()
	a, size, ok := p.getLocked(classOf(want))
	if ok {
		p.inUse += int64(size)
	} else {
		p.misses++
	}
	p.mu.Unlock()
	if !ok {
		return 0, nil, false
	}
	b, _ := p.mem.Map(a, size) // carved from the arena: always inside it
	return a, b, true
}

func (p *bufPool) getLocked(c int) (rings.Addr, int, bool) {
	size := 1 << (bufMinShift + c)
	if n := len(p.free[c]); n > 0 {
		a := p.free[c][n-1]
		p.free[c] = p.free[c][:n-1]
		return a, size, true
	}
	if p.slabLeft < size && p.grow() {
		// grow put the old slab's tail on the free lists.
		if n := len(p.free[c]); n > 0 {
			a := p.free[c][n-1]
			p.free[c] = p.free[c][:n-1]
			return a, size, true
		}
	}
	if p.slabLeft >= size {
		a := p.slab
		p.slab += rings.Addr(size)
		p.slabLeft -= size
		return a, size, true
	}
	// Nothing of this class: any free buffer will do (the callers take
	// what they get; a smaller one means more descriptors, not failure).
	for k := bufClasses - 1; k >= 0; k-- {
		if n := len(p.free[k]); n > 0 {
			a := p.free[k][n-1]
			p.free[k] = p.free[k][:n-1]
			return a, 1 << (bufMinShift + k), true
		}
	}
	return 0, 0, false
}

// grow takes a new slab from the arena, first putting what is left of the
// current one on the free lists (largest pieces first).
func (p *bufPool) grow() bool {
	limit := p.limit
	if limit <= 0 {
		limit = int64(p.mem.Size())
	}
	if p.reserved+bufSlabSize > limit {
		return false
	}
	a, err := p.mem.Alloc(bufSlabSize, rings.CacheLine)
	if err != nil {
		return false
	}
	for k := bufClasses - 1; k >= 0; k-- {
		size := 1 << (bufMinShift + k)
		for p.slabLeft >= size {
			p.free[k] = append(p.free[k], p.slab)
			p.slab += rings.Addr(size)
			p.slabLeft -= size
		}
	}
	p.slab, p.slabLeft = a, bufSlabSize
	p.reserved += bufSlabSize
	return true
}

// put gives back a buffer get returned (len(b) is its size).
func (p *bufPool) put(a rings.Addr, size int) {
	p.mu.Lock()
	c := classOf(size)
	p.free[c] = append(p.free[c], a)
	p.inUse -= int64(size)
	w := p.waiters
	p.waiters = nil
	p.mu.Unlock()
	if w != nil {
		close(w)
	}
}

// waitChan returns a channel closed when the next buffer is freed. A caller
// that found the pool empty takes it, then tries get once more before
// waiting (a buffer freed in between is not missed).
func (p *bufPool) waitChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.waiters == nil {
		p.waiters = make(chan struct{})
	}
	return p.waiters
}

// PoolStats describes the shared host memory of delegated connections.
type PoolStats struct {
	Reserved int64  // bytes of host memory the pool took from the arena (its high-water mark)
	InUse    int64  // bytes held by connections now: unacknowledged send data, posted receive buffers
	Misses   uint64 // times a connection found the pool empty (a Write waited, a receive buffer was not posted)
}

func (p *bufPool) stats() PoolStats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return PoolStats{Reserved: p.reserved, InUse: p.inUse, Misses: p.misses}
}
