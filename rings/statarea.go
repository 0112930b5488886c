package rings

import (
	"errors"
	"runtime"
	"sync/atomic"
	"time"
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

	RingCounterCount = 7 // counters per ring: RingCounterID 0 to 6
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
// engine counters, OccN occupancy words and QPN counters per QP (the
// header's counts): a reader takes them from the header it read, so it
// finds every counter by ID in a device's area whatever that device adds
// after the IDs the reader knows.
type StatAreaLayout struct{ EngineN, OccN, QPN int }

// CounterAreaLayout is the layout of this version's device: every counter
// ID of counterid.go.
var CounterAreaLayout = StatAreaLayout{EngineN: EngineCounterCount, OccN: OccupancyWords, QPN: QPCounterCount}

// LayoutOf is the layout a header describes.
func LayoutOf(h StatAreaHeader) StatAreaLayout {
	return StatAreaLayout{EngineN: int(h.EngineN), OccN: int(h.OccN), QPN: int(h.QPN)}
}

// Ring is the offset of ring r's counter id (RingN is RingCounterCount in
// every area so far: a reader refuses another).
func (l StatAreaLayout) Ring(r AreaRing, id RingCounterID) int {
	return l.RingsOff() + (int(r)*RingCounterCount+int(id))*8
}

// Engine is the offset of engine counter id.
func (l StatAreaLayout) Engine(id EngineCounterID) int { return l.EngineOff() + int(id)*8 }

// Occupancy is the offset of occupancy word id.
func (l StatAreaLayout) Occupancy(id OccupancyID) int { return l.OccOff() + int(id)*8 }

// QP is the offset of counter id of QP record i (the record's first word
// is its QP index, at QPOff(i)).
func (l StatAreaLayout) QP(i int, id QPCounterID) int { return l.QPOff(i) + QPRecordHeader + int(id)*8 }

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

// ErrStatAreaBusy: the device kept rewriting the area while it was read.
var ErrStatAreaBusy = errors.New("rings: the counters area changed under every read")

// ReadStatArea copies a consistent publication out of area (atomic loads
// under the sequence lock) into dst, which must be as long as area, and
// returns its header. Only the part in use is copied (the header says how
// many QP records follow), so a reader keeps up with a device that
// republishes at every idle point; a publication in progress is waited out
// (yielding, for up to a second) and ErrStatAreaBusy returned only if the
// device never held still that long.
func ReadStatArea(area, dst []byte) (StatAreaHeader, error) {
	var h StatAreaHeader
	deadline := time.Now().Add(time.Second)
	for try := 0; ; try++ {
		if try > 0 {
			if try%64 == 0 && time.Now().After(deadline) {
				return h, ErrStatAreaBusy
			}
			if try < 16 {
				runtime.Gosched()
			} else {
				time.Sleep(time.Duration(min(try, 200)) * time.Microsecond)
			}
		}
		g1 := AtomicLoad64(area, SaOffGen)
		if g1&1 != 0 {
			continue
		}
		for off := 8; off < StatAreaHeaderSize; off += 8 {
			le.PutUint64(dst[off:], AtomicLoad64(area, off))
		}
		le.PutUint64(dst[SaOffGen:], g1)
		if err := h.Decode(dst); err != nil {
			return h, err
		}
		used := StatAreaLayout{EngineN: int(h.EngineN), OccN: int(h.OccN), QPN: int(h.QPN)}.QPOff(int(h.NumQPs))
		if used > len(area) || used < StatAreaHeaderSize {
			used = len(area) &^ 7
		}
		for off := StatAreaHeaderSize; off+8 <= used; off += 8 {
			le.PutUint64(dst[off:], AtomicLoad64(area, off))
		}
		if AtomicLoad64(area, SaOffGen) == g1 {
			return h, nil
		}
	}
}
