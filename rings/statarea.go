package rings

import (
	"errors"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// The counter publication area: host memory the host registers once with
// STATS (flag StatsFlagPublish) and the device rewrites at every idle
// point (before it parks, and when it stops) with all of its counters: the
// stat block, the rings' mechanics counters, the delegated engine's
// counters and each QP's. A host, in process or in another process, reads
// the device's counters there and never calls into the device: this is how
// a driver reads a NIC's statistics DMA. Every word is written and read
// with 64-bit atomics under a sequence lock (Gen odd while the device
// writes), so a reader never sees a torn copy.
const (
	StatsFlagPublish = 0x0001 // STATS Flags: Addr/Len is the publication area from now on (Len 0: stop publishing)

	StatAreaHeaderSize = 64
	SaOffGen           = 0x00 // u64 sequence lock: odd while the device writes the area, +2 per publication
	SaOffFlags         = 0x08 // u32 StatAreaFlags of this publication
	SaOffNumQPs        = 0x0C // u32 QP records in this publication
	SaOffEngineN       = 0x10 // u32 engine counters (u64 each) after the ring counters
	SaOffQPCap         = 0x14 // u32 QP records the area has room for
	SaOffRingN         = 0x18 // u32 counters per ring (RingCounterCount)
	SaOffQPN           = 0x1C // u32 counters per QP record after its index word
	SaOffOccN          = 0x20 // u32 engine occupancy words after the engine counters
	SaOffReserved      = 0x24 // 28 bytes reserved, zero
	StatAreaStatsOff   = StatAreaHeaderSize

	RingCounterCount = 7 // RingStats' fields, in order
	StatAreaRings    = 4 // command, notification, transmit, receive
	StatAreaParked   = 0x1
	QPRecordHeader   = 8 // u32 QP index, u32 reserved, then the QP's counters
)

// StatAreaHeader is the fields of the area's header.
type StatAreaHeader struct {
	Gen     uint64
	Flags   uint32
	NumQPs  uint32
	EngineN uint32
	QPCap   uint32
	RingN   uint32
	QPN     uint32
	OccN    uint32
}

// Encode writes the header at the start of b (not atomically: for tests
// and tools; the device publishes with StatAreaWriter).
func (h *StatAreaHeader) Encode(b []byte) {
	b = b[:StatAreaHeaderSize]
	clear(b)
	le.PutUint64(b[SaOffGen:], h.Gen)
	le.PutUint32(b[SaOffFlags:], h.Flags)
	le.PutUint32(b[SaOffNumQPs:], h.NumQPs)
	le.PutUint32(b[SaOffEngineN:], h.EngineN)
	le.PutUint32(b[SaOffQPCap:], h.QPCap)
	le.PutUint32(b[SaOffRingN:], h.RingN)
	le.PutUint32(b[SaOffQPN:], h.QPN)
	le.PutUint32(b[SaOffOccN:], h.OccN)
}

// Decode reads the header at the start of b.
func (h *StatAreaHeader) Decode(b []byte) error {
	if len(b) < StatAreaHeaderSize {
		return errShort("stat area header", len(b), StatAreaHeaderSize)
	}
	*h = StatAreaHeader{Gen: le.Uint64(b[SaOffGen:]), Flags: le.Uint32(b[SaOffFlags:]), NumQPs: le.Uint32(b[SaOffNumQPs:]),
		EngineN: le.Uint32(b[SaOffEngineN:]), QPCap: le.Uint32(b[SaOffQPCap:]), RingN: le.Uint32(b[SaOffRingN:]),
		QPN: le.Uint32(b[SaOffQPN:]), OccN: le.Uint32(b[SaOffOccN:])}
	return nil
}

// StatAreaLayout is where things sit in an area for a device with EngineN
// engine counters, OccN occupancy words and QPN counters per QP.
type StatAreaLayout struct{ EngineN, OccN, QPN int }

// RingsOff is the offset of the ring counters (after the stat block).
func (l StatAreaLayout) RingsOff() int { return StatAreaStatsOff + StatBlockSize }

// EngineOff is the offset of the engine counters.
func (l StatAreaLayout) EngineOff() int { return l.RingsOff() + StatAreaRings*RingCounterCount*8 }

// OccOff is the offset of the engine's occupancy words.
func (l StatAreaLayout) OccOff() int { return l.EngineOff() + l.EngineN*8 }

// QPOff is the offset of QP record i.
func (l StatAreaLayout) QPOff(i int) int { return l.OccOff() + l.OccN*8 + i*l.QPRecordSize() }

// QPRecordSize is one QP record's size.
func (l StatAreaLayout) QPRecordSize() int { return QPRecordHeader + l.QPN*8 }

// MinSize is the smallest area: everything but QP records.
func (l StatAreaLayout) MinSize() int { return l.QPOff(0) }

// QPCap is how many QP records an area of n bytes holds.
func (l StatAreaLayout) QPCap(n int) int {
	if n < l.MinSize() {
		return 0
	}
	return (n - l.MinSize()) / l.QPRecordSize()
}

func u64p(b []byte, off int) *uint64 {
	_ = b[off : off+8]
	return (*uint64)(unsafe.Pointer(&b[off]))
}

// AtomicStore64 and AtomicLoad64 access the 8-byte aligned word at off of
// host memory b: the counters areas are read and written only this way.
func AtomicStore64(b []byte, off int, v uint64) { atomic.StoreUint64(u64p(b, off), v) }
func AtomicLoad64(b []byte, off int) uint64     { return atomic.LoadUint64(u64p(b, off)) }

// CounterFields checks that T is a struct of uint64 fields only (a
// counters struct, published as that many words in declaration order) and
// returns their number. Call it once per type (at init): U64s relies on it.
func CounterFields[T any]() (int, error) {
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Struct {
		return 0, errors.New("rings: " + t.String() + " is not a struct")
	}
	for i := range t.NumField() {
		if f := t.Field(i); f.Type.Kind() != reflect.Uint64 || f.Offset != uintptr(8*i) {
			return 0, errors.New("rings: " + t.String() + "." + f.Name + " is not a uint64 in sequence: counters structs hold uint64 fields only")
		}
	}
	return t.NumField(), nil
}

// U64s views a counters struct (checked by CounterFields) as its words,
// without copying or allocating.
func U64s[T any](p *T) []uint64 {
	return unsafe.Slice((*uint64)(unsafe.Pointer(p)), unsafe.Sizeof(*p)/8)
}

// ErrStatAreaBusy: the device kept rewriting the area while it was read.
var ErrStatAreaBusy = errors.New("rings: the counters area changed under every read")

// ReadStatArea copies a consistent publication out of area (atomic loads
// under the sequence lock) into dst, which must be as long as area, and
// returns its header. A publication in progress is waited out (bounded).
func ReadStatArea(area, dst []byte) (StatAreaHeader, error) {
	var h StatAreaHeader
	for try := 0; try < 1000; try++ {
		g1 := AtomicLoad64(area, SaOffGen)
		if g1&1 != 0 {
			continue
		}
		for off := 8; off+8 <= len(area); off += 8 {
			le.PutUint64(dst[off:], AtomicLoad64(area, off))
		}
		if AtomicLoad64(area, SaOffGen) == g1 {
			le.PutUint64(dst[SaOffGen:], g1)
			err := h.Decode(dst)
			return h, err
		}
	}
	return h, ErrStatAreaBusy
}
