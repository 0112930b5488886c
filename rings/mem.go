// Package rings is the meeting point of the host and the device: host memory
// (an arena addressed by DMA addresses), the single-producer/single-consumer
// ring mechanism that lives in it, and the byte-exact entry layouts of the
// command, notification, transmit and receive descriptor rings.
//
// Both sides import this package; neither imports the other. The device only
// ever reaches host memory through the DMA interface, by address, exactly as a
// bus-mastering NIC does. That is what lets a later co-design mode move the
// device into another process with the arena in shared memory: the backing
// store changes, the protocol does not.
package rings

import (
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"unsafe"
)

// Addr is a DMA address: a bus address in host memory. It is never a Go
// pointer. Address 0 is never valid, so a zeroed descriptor cannot alias real
// memory.
type Addr uint64

// ArenaBase is the bus address of the first byte of an arena. It is not zero on
// purpose: a descriptor left zeroed by a buggy driver must fault, not scribble
// over the ring at the start of memory.
const ArenaBase Addr = 0x1000_0000

// ErrOutOfRange is wrapped by every DMA error for an address range that is not
// entirely inside host memory.
var ErrOutOfRange = errors.New("dma: address range outside host memory")

// DMAError says which access faulted and why.
type DMAError struct {
	Op   string // "read", "write" or "map"
	Addr Addr
	Len  int
}

func (e *DMAError) Error() string {
	return fmt.Sprintf("dma %s of %d bytes at %#x: outside host memory", e.Op, e.Len, uint64(e.Addr))
}

func (e *DMAError) Unwrap() error { return ErrOutOfRange }

// DMA is the device's only window onto host memory. Every access is bounds
// checked; an address range that is not entirely inside host memory is an
// error, never a panic and never a wrap-around.
type DMA interface {
	// ReadAt copies len(p) bytes of host memory starting at a into p.
	ReadAt(p []byte, a Addr) error
	// WriteAt copies p into host memory starting at a.
	WriteAt(p []byte, a Addr) error
	// Map returns host memory [a, a+n) as a slice for in-place access
	// (descriptor parsing, placement without an intermediate copy). The
	// slice's capacity is clipped to n, so an append can never reach past it.
	Map(a Addr, n int) ([]byte, error)
}

// Arena is host memory: one contiguous byte region with a DMA address space
// starting at ArenaBase and a simple allocator for rings and buffers. The
// allocator is for set-up time (rings, buffer pools, registered regions); fast
// paths reuse what they allocated.
type Arena struct {
	mem  []byte
	base Addr

	mu    sync.Mutex
	free  []span         // sorted by address, coalesced
	sizes map[Addr]int64 // live allocations
	inUse int64
}

type span struct {
	off, n int64
}

// CacheLine is the alignment of ring indices and the default allocation
// alignment: two indices written by different agents must never share a line.
const CacheLine = 64

// NewArena returns size bytes of host memory (rounded up to a cache line),
// zeroed and 64-byte aligned.
func NewArena(size int) (*Arena, error) {
	if size <= 0 {
		return nil, fmt.Errorf("arena: size %d must be positive", size)
	}
	size = (size + CacheLine - 1) &^ (CacheLine - 1)
	raw := make([]byte, size+CacheLine)
	skew := int(uintptr(unsafe.Pointer(&raw[0])) & (CacheLine - 1))
	pad := 0
	if skew != 0 {
		pad = CacheLine - skew
	}
	return NewArenaOn(raw[pad : pad+size : pad+size])
}

// NewArenaOn makes an arena over existing memory (for example a shared
// mapping). mem must be 64-byte aligned.
func NewArenaOn(mem []byte) (*Arena, error) {
	if len(mem) == 0 {
		return nil, errors.New("arena: empty memory")
	}
	if uintptr(unsafe.Pointer(&mem[0]))&(CacheLine-1) != 0 {
		return nil, errors.New("arena: memory is not 64-byte aligned")
	}
	return &Arena{
		mem:   mem,
		base:  ArenaBase,
		free:  []span{{0, int64(len(mem))}},
		sizes: make(map[Addr]int64),
	}, nil
}

// Base is the bus address of the first byte.
func (a *Arena) Base() Addr { return a.base }

// Size is the number of bytes of host memory.
func (a *Arena) Size() int { return len(a.mem) }

// InUse is the number of bytes currently allocated.
func (a *Arena) InUse() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.inUse
}

// Contains reports whether [addr, addr+n) lies entirely in host memory.
func (a *Arena) Contains(addr Addr, n int) bool {
	_, ok := a.offset(addr, n)
	return ok
}

// offset converts a bus address range to an offset in mem. It is written so
// that no addition can overflow: a hostile descriptor with addr near 2^64 or a
// huge length must fail, not wrap to a small offset.
func (a *Arena) offset(addr Addr, n int) (int, bool) {
	if n < 0 || addr < a.base {
		return 0, false
	}
	off := uint64(addr - a.base)
	size := uint64(len(a.mem))
	if off > size || uint64(n) > size-off {
		return 0, false
	}
	return int(off), true
}

// ReadAt implements DMA.
func (a *Arena) ReadAt(p []byte, addr Addr) error {
	off, ok := a.offset(addr, len(p))
	if !ok {
		return &DMAError{Op: "read", Addr: addr, Len: len(p)}
	}
	copy(p, a.mem[off:])
	return nil
}

// WriteAt implements DMA.
func (a *Arena) WriteAt(p []byte, addr Addr) error {
	off, ok := a.offset(addr, len(p))
	if !ok {
		return &DMAError{Op: "write", Addr: addr, Len: len(p)}
	}
	if len(p) == 8 && off%8 == 0 {
		// An aligned quadword reaches host memory in one store, as a
		// PCIe write of an aligned quadword does: a host polling a
		// status word with an atomic load (LWIO's polling I/O status
		// block) sees it whole, and sees every byte the device wrote
		// before it.
		atomic.StoreUint64((*uint64)(unsafe.Pointer(&a.mem[off])), *(*uint64)(unsafe.Pointer(&p[0])))
		return nil
	}
	copy(a.mem[off:], p)
	return nil
}

// Map implements DMA.
func (a *Arena) Map(addr Addr, n int) ([]byte, error) {
	off, ok := a.offset(addr, n)
	if !ok {
		return nil, &DMAError{Op: "map", Addr: addr, Len: n}
	}
	return a.mem[off : off+n : off+n], nil
}

// Alloc reserves n bytes aligned to align (a power of two; 0 means a cache
// line) and returns their address. The memory is zeroed.
func (a *Arena) Alloc(n int, align int) (Addr, error) {
	if n <= 0 {
		return 0, fmt.Errorf("arena: alloc of %d bytes", n)
	}
	if align <= 0 {
		align = CacheLine
	}
	if align&(align-1) != 0 {
		return 0, fmt.Errorf("arena: alignment %d is not a power of two", align)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	al := int64(align)
	for i, s := range a.free {
		start := (s.off + al - 1) &^ (al - 1)
		// Compare lengths, not end addresses: start+n could overflow
		// for a huge n and pass a naive end check.
		if start > s.off+s.n || int64(n) > s.off+s.n-start {
			continue
		}
		end := start + int64(n)
		// Split the span into the head gap, the allocation and the tail.
		var repl []span
		if start > s.off {
			repl = append(repl, span{s.off, start - s.off})
		}
		if tail := s.off + s.n - end; tail > 0 {
			repl = append(repl, span{end, tail})
		}
		a.free = append(a.free[:i], append(repl, a.free[i+1:]...)...)
		addr := a.base + Addr(start)
		a.sizes[addr] = int64(n)
		a.inUse += int64(n)
		clear(a.mem[start:end])
		return addr, nil
	}
	return 0, fmt.Errorf("arena: out of host memory allocating %d bytes (%d of %d in use)", n, a.inUse, len(a.mem))
}

// Free returns an allocation made by Alloc.
func (a *Arena) Free(addr Addr) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	n, ok := a.sizes[addr]
	if !ok {
		return fmt.Errorf("arena: free of %#x, which is not an allocation", uint64(addr))
	}
	delete(a.sizes, addr)
	a.inUse -= n
	off := int64(addr - a.base)
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = span{off, n}
	// Coalesce with the neighbours so fragmentation cannot grow without bound.
	if i+1 < len(a.free) && a.free[i].off+a.free[i].n == a.free[i+1].off {
		a.free[i].n += a.free[i+1].n
		a.free = append(a.free[:i+1], a.free[i+2:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].n == a.free[i].off {
		a.free[i-1].n += a.free[i].n
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	return nil
}

// word returns the 32-bit word at b[0:4] for atomic access. b must come from
// host memory at a 4-byte aligned address (ring headers and entries are).
func word(b []byte) *uint32 {
	_ = b[:4] // bounds check without a plain read the race detector would see
	return (*uint32)(unsafe.Pointer(&b[0]))
}

func load32(b []byte) uint32     { return atomic.LoadUint32(word(b)) }
func store32(b []byte, v uint32) { atomic.StoreUint32(word(b), v) }
