package iwarp

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"

	"github.com/emunic/emunic/rings"
)

// Memory regions and STags.
//
// An STag is a 24-bit index in the high bits and an 8-bit key in the low
// byte, as Linux siw makes them: index<<8 | key. Indices are handed out round
// robin from a random start and are offset by a random base, so STags are not
// small predictable numbers; the key of a slot is bumped every time the slot
// is registered again, so an STag kept after its region was deregistered never
// names the next region in that slot. Index 0 is never used: an STag below
// 0x100 is always invalid.
//
// Every access from the wire and from work requests goes through Resolve,
// which checks, in this order: the STag names a valid region (index in
// range, slot registered, key equal, not invalidated); the protection domain
// is the QP's; the region grants the access; TO+length does not wrap 2^64;
// [TO, TO+length) lies inside [VA, VA+Length). All arithmetic is overflow
// safe.

// Access is a region's rights (ibv_access_flags values).
type Access uint8

// Access rights. Local read is implicit for every region.
const (
	AccessLocalWrite   Access = 1 << 0
	AccessRemoteWrite  Access = 1 << 1
	AccessRemoteRead   Access = 1 << 2
	AccessRemoteAtomic Access = 1 << 3
	AccessZeroBased    Access = 1 << 5 // tagged offsets start at 0, not at VA
	accessAll                 = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased
	accessRemote              = AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic
)

// AccessError is why Resolve refused an access.
type AccessError uint8

// Access errors, in the order Resolve checks them.
const (
	AccessOK        AccessError = iota
	ErrSTagInvalid              // no such region, wrong key, or invalidated
	ErrPDMismatch               // the region belongs to another protection domain
	ErrAccessRights             // the region does not grant the access
	ErrTOWrap                   // TO + length overflows 64 bits
	ErrBaseBounds               // outside [VA, VA+Length)
	accessErrorCount
)

var accessErrorNames = [accessErrorCount]string{"OK", "invalid STag", "PD mismatch", "access rights", "TO wrap", "base or bounds"}

func (e AccessError) Error() string {
	if e < accessErrorCount {
		return "iwarp: " + accessErrorNames[e]
	}
	return fmt.Sprintf("iwarp: access error %d", uint8(e))
}

// MaxSTagIndex is the largest 24-bit index.
const MaxSTagIndex = 1<<24 - 1

// STag builds an STag from index and key.
func STag(index uint32, key uint8) uint32 { return index<<8 | uint32(key) }

// STagIndex and STagKey split an STag.
func STagIndex(stag uint32) uint32 { return stag >> 8 }
func STagKey(stag uint32) uint8    { return uint8(stag) }

// Region is a registered memory region as the table holds it.
type Region struct {
	STag   uint32
	PD     uint32
	Access Access
	VA     uint64     // first tagged offset (0 with AccessZeroBased)
	Length uint64     // bytes
	Addr   rings.Addr // host memory of the first byte
	Valid  bool       // false after an invalidation
}

const (
	slotFree  = 0
	slotValid = 1
	slotInval = 2
)

type slot struct {
	addr   rings.Addr
	va     uint64
	length uint64
	pd     uint32
	access Access
	key    uint8
	state  uint8
	// fast: allocated for fast registration; bound and boundLen are the
	// host memory a REG_MR work request may map under it.
	fast     bool
	bound    rings.Addr
	boundLen uint64
}

// Errors of the registration calls.
var (
	ErrNoSTag    = errors.New("iwarp: memory table full")
	ErrBadRegion = errors.New("iwarp: region not in host memory")
	ErrBadAccess = errors.New("iwarp: unknown access flags")
	ErrNotFound  = errors.New("iwarp: no such STag")
)

// MemTable is the device's table of memory regions, shared by every QP of
// the device (single-threaded: the offload unit goroutine).
type MemTable struct {
	dma   rings.DMA
	slots []slot
	base  uint32 // index of slot 0
	next  int    // round-robin cursor
	used  int
}

// NewMemTable returns a table of size regions (at most 2^24-1) over host
// memory dma. seed drives the random start index and keys (0: random).
func NewMemTable(dma rings.DMA, size int, seed uint64) *MemTable {
	if size <= 0 || size > MaxSTagIndex {
		panic("iwarp: memory table size out of range")
	}
	var r *rand.Rand
	if seed == 0 {
		r = rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	} else {
		r = rand.New(rand.NewPCG(seed, seed^0x9E3779B97F4A7C15))
	}
	t := &MemTable{dma: dma, slots: make([]slot, size)}
	t.base = uint32(r.Uint64N(MaxSTagIndex + 1))
	t.next = int(r.Uint64N(uint64(size)))
	for i := range t.slots {
		t.slots[i].key = uint8(r.Uint32())
	}
	return t
}

// Len is the number of registered regions.
func (t *MemTable) Len() int { return t.used }

func (t *MemTable) index(s int) uint32 { return (uint32(s) + t.base) & MaxSTagIndex }

// slotOf returns the slot an STag names, or -1.
func (t *MemTable) slotOf(stag uint32) int {
	s := int((STagIndex(stag) - t.base) & MaxSTagIndex)
	if s >= len(t.slots) {
		return -1
	}
	return s
}

// Register adds a region of length bytes of host memory at addr, tagged from
// va (0 with AccessZeroBased), in protection domain pd, and returns its STag.
func (t *MemTable) Register(pd uint32, addr rings.Addr, va, length uint64, access Access) (uint32, error) {
	if access&^accessAll != 0 {
		return 0, ErrBadAccess
	}
	if length > uint64(math.MaxInt) {
		return 0, fmt.Errorf("%w: length %d", ErrBadRegion, length)
	}
	if err := rings.Check(t.dma, addr, int(length)); err != nil {
		return 0, fmt.Errorf("%w: %v", ErrBadRegion, err)
	}
	if access&AccessZeroBased != 0 {
		va = 0
	}
	if length > 0 && va > math.MaxUint64-(length-1) {
		return 0, fmt.Errorf("%w: VA %#x + %d wraps", ErrBadRegion, va, length)
	}
	for n := 0; n < len(t.slots); n++ {
		s := t.next
		t.next++
		if t.next == len(t.slots) {
			t.next = 0
		}
		if t.slots[s].state != slotFree || t.index(s) == 0 {
			continue
		}
		sl := &t.slots[s]
		sl.key++
		sl.addr, sl.va, sl.length, sl.pd, sl.access, sl.state = addr, va, length, pd, access, slotValid
		t.used++
		return STag(t.index(s), sl.key), nil
	}
	return 0, ErrNoSTag
}

// Allocate reserves an STag for fast registration (REG_MR with
// MRAccessFastReg) in protection domain pd: invalid, with no access, until
// FastRegister maps memory inside [addr, addr+length) under it.
func (t *MemTable) Allocate(pd uint32, addr rings.Addr, length uint64) (uint32, error) {
	stag, err := t.Register(pd, addr, 0, length, 0)
	if err != nil {
		return 0, err
	}
	sl := t.lookup(stag)
	sl.fast, sl.bound, sl.boundLen, sl.state, sl.length = true, addr, length, slotInval, 0
	return stag, nil
}

// FastRegister is a REG_MR work request from a QP of protection domain
// pd: the invalid fast-registration region whose index stag names becomes
// valid under stag's key (which must differ from its last one, so that the
// STags of earlier mappings stay dead), over length bytes of host memory
// at addr inside its bound, tagged from va (0 with AccessZeroBased), with
// access. ErrSTagInvalid: no such region, not one for fast registration,
// valid, or the same key; ErrPDMismatch; ErrAccessRights for bad access
// flags; ErrBaseBounds for memory outside the bound or a VA that wraps.
func (t *MemTable) FastRegister(stag, pd uint32, addr rings.Addr, va, length uint64, access Access) AccessError {
	s := t.slotOf(stag)
	if s < 0 {
		return ErrSTagInvalid
	}
	sl := &t.slots[s]
	switch {
	case !sl.fast || sl.state != slotInval || sl.key == STagKey(stag):
		return ErrSTagInvalid
	case sl.pd != pd:
		return ErrPDMismatch
	case access&^accessAll != 0 || access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		return ErrAccessRights
	case addr < sl.bound || uint64(addr-sl.bound) > sl.boundLen || length > sl.boundLen-uint64(addr-sl.bound):
		return ErrBaseBounds
	}
	if access&AccessZeroBased != 0 {
		va = 0
	}
	if length > 0 && va > math.MaxUint64-(length-1) {
		return ErrTOWrap
	}
	sl.key, sl.addr, sl.va, sl.length, sl.access, sl.state = STagKey(stag), addr, va, length, access, slotValid
	return AccessOK
}

func (t *MemTable) lookup(stag uint32) *slot {
	s := t.slotOf(stag)
	if s < 0 {
		return nil
	}
	sl := &t.slots[s]
	if sl.state == slotFree || sl.key != STagKey(stag) {
		return nil
	}
	return sl
}

// Deregister removes a region (valid or invalidated).
func (t *MemTable) Deregister(stag uint32) error {
	sl := t.lookup(stag)
	if sl == nil {
		return ErrNotFound
	}
	*sl = slot{key: sl.key}
	t.used--
	return nil
}

// Invalidate makes a valid region of protection domain pd unusable until
// Revalidate (local invalidate, or Send with Invalidate from the peer). It
// returns ErrSTagInvalid or ErrPDMismatch, or AccessOK.
func (t *MemTable) Invalidate(stag, pd uint32) AccessError {
	sl := t.lookup(stag)
	if sl == nil || sl.state != slotValid {
		return ErrSTagInvalid
	}
	if sl.pd != pd {
		return ErrPDMismatch
	}
	sl.state = slotInval
	return AccessOK
}

// Revalidate makes an invalidated region valid again under a new key (the
// fast-register step), returning the new STag.
func (t *MemTable) Revalidate(stag uint32, key uint8) (uint32, error) {
	sl := t.lookup(stag)
	if sl == nil || sl.state != slotInval {
		return 0, ErrNotFound
	}
	sl.key = key
	sl.state = slotValid
	return STagIndex(stag)<<8 | uint32(key), nil
}

// Lookup returns the region an STag names (valid or invalidated).
func (t *MemTable) Lookup(stag uint32) (Region, bool) {
	sl := t.lookup(stag)
	if sl == nil {
		return Region{}, false
	}
	return Region{STag: stag, PD: sl.pd, Access: sl.access, VA: sl.va, Length: sl.length, Addr: sl.addr,
		Valid: sl.state == slotValid}, true
}

// Resolve checks an access of n bytes at tagged offset to through stag from
// protection domain pd needing rights need (0: local read) and returns the
// host address of the first byte.
func (t *MemTable) Resolve(stag, pd uint32, to, n uint64, need Access) (rings.Addr, AccessError) {
	sl := t.lookup(stag)
	if sl == nil || sl.state != slotValid {
		return 0, ErrSTagInvalid
	}
	if sl.pd != pd {
		return 0, ErrPDMismatch
	}
	if sl.access&need != need {
		return 0, ErrAccessRights
	}
	if n > math.MaxUint64-to {
		return 0, ErrTOWrap
	}
	if to < sl.va {
		return 0, ErrBaseBounds
	}
	off := to - sl.va
	if off > sl.length || n > sl.length-off {
		return 0, ErrBaseBounds
	}
	return sl.addr + rings.Addr(off), AccessOK
}

// Regions calls fn for every registered region (diagnostics and tests).
func (t *MemTable) Regions(fn func(Region)) {
	for s := range t.slots {
		sl := &t.slots[s]
		if sl.state == slotFree {
			continue
		}
		fn(Region{STag: STag(t.index(s), sl.key), PD: sl.pd, Access: sl.access, VA: sl.va, Length: sl.length,
			Addr: sl.addr, Valid: sl.state == slotValid})
	}
}
