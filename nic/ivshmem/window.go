package ivshmem

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// Registers is the register block a window stands for: the model in
// nic/regs, which every transport drives.
type Registers interface {
	Read32(off uint32) (uint32, rings.Bar0ErrCode)
	Write32(off, v uint32) rings.Bar0ErrCode
}

// Window is emunic's register block (docs/bar0.md) as the first page of
// BAR2: the guest stores registers into the page and rings ivshmem vector
// 0; Scan applies what changed to the register model and puts the
// model's view back into the page, where the guest reads it with plain
// loads.
//
// What the page loses is the order of the guest's stores: Scan applies
// the changed registers in offset order with RegCtrl last, so that a
// driver that stores a configuration and then an enable (or anything and
// then a control bit) and rings once has the control applied after the
// rest, as its program order said. A reset the driver wants before its
// configuration it commits, and waits for (RegCtrl reads 0), first.
//
// The page is written by both sides at once. The device never overwrites
// a store the guest made after the scan read it: it puts its own value
// back with a compare-and-swap from the value the scan read, so a word
// the guest changed in between keeps the guest's value, and the next
// vector-0 doorbell applies it. x86 and other little-endian hosts only:
// the page's u32s are little-endian and read as native words.
type Window struct {
	regs Registers
	mem  []byte // the page, BAR2[0:Bar0Bytes]

	mu   sync.Mutex
	last [rings.Bar0Bytes / 4]uint32 // each word as the device last put it in the page

	scans, writes, refused atomic.Uint64
}

// NewWindow puts regs's current values into mem's first page (which must
// hold rings.Bar0Bytes) and returns the window over it. Words that are no
// register read 0.
func NewWindow(regs Registers, mem []byte) *Window {
	w := &Window{regs: regs, mem: mem[:rings.Bar0Bytes:rings.Bar0Bytes]}
	for off := uint32(0); off < rings.Bar0Bytes; off += 4 {
		v := w.device(off)
		atomic.StoreUint32(w.word(off), v)
		w.last[off/4] = v
	}
	return w
}

func (w *Window) word(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&w.mem[off])) }

// device is the register's value as the device reports it, 0 for a word
// that is no register (reading those through the model would count a
// refusal that no one made).
func (w *Window) device(off uint32) uint32 {
	if !isRegister(off) {
		return 0
	}
	v, _ := w.regs.Read32(off)
	return v
}

// WindowStats counts a window's work.
type WindowStats struct {
	Scans   uint64 // vector-0 doorbells served
	Writes  uint64 // words the guest changed, applied as register writes
	Refused uint64 // of those, refused by the model (counted there by kind)
}

// Stats returns the window's counters.
func (w *Window) Stats() WindowStats {
	return WindowStats{Scans: w.scans.Load(), Writes: w.writes.Load(), Refused: w.refused.Load()}
}

// Scan applies the guest's stores since the last scan: every word that
// differs from what the device last put there is a write of that register
// (a word that is no register, or a read-only one, is refused and
// counted by the model, and put back). Then the page gets the model's
// view of every register the scan saw change or the writes may have
// changed.
func (w *Window) Scan() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.scans.Add(1)
	var seen [rings.Bar0Bytes / 4]uint32
	ctrl := false
	for off := uint32(0); off < rings.Bar0Bytes; off += 4 {
		v := atomic.LoadUint32(w.word(off))
		seen[off/4] = v
		if v == w.last[off/4] {
			continue
		}
		if off == rings.RegCtrl {
			ctrl = true // last, after the rest
			continue
		}
		w.apply(off, v)
	}
	if ctrl {
		w.apply(rings.RegCtrl, seen[rings.RegCtrl/4])
	}
	// A write can change any register (a reset zeroes them all, an
	// enable sets the status, a refusal the error registers): the page
	// gets the model's view of all of them.
	for off := uint32(0); off < rings.Bar0Bytes; off += 4 {
		v := w.device(off)
		if v != seen[off/4] {
			atomic.CompareAndSwapUint32(w.word(off), seen[off/4], v)
		}
		w.last[off/4] = v
	}
}

func (w *Window) apply(off, v uint32) {
	w.writes.Add(1)
	if w.regs.Write32(off, v) != rings.ErrNone {
		w.refused.Add(1)
	}
}

// Doorbell serves ring r's ivshmem doorbell (vector 1 + r): the write of
// ring r's Doorbell register. The register reads 0, so the page's word
// goes back to 0, unless the guest has stored to it again since.
func (w *Window) Doorbell(r int, bell rings.Doorbell, enabled bool) {
	off := rings.Bar0Ring(r, rings.RingRegDoorbell)
	v := atomic.LoadUint32(w.word(off))
	if v != 0 {
		atomic.CompareAndSwapUint32(w.word(off), v, 0)
	}
	if enabled {
		// The running device's doorbell: no lock, no register scan.
		bell.Kick()
		return
	}
	// Refused (the device is disabled): the model counts it and sets
	// RegError, which the page then shows.
	w.mu.Lock()
	defer w.mu.Unlock()
	w.apply(off, 1)
	for _, o := range []uint32{rings.RegError, rings.RegErrorOffset} {
		v := w.device(o)
		atomic.StoreUint32(w.word(o), v)
		w.last[o/4] = v
	}
	for id := rings.RegCounterID(0); id < rings.Bar0RegCounters; id++ {
		o := rings.Bar0Counter(id)
		v := w.device(o)
		atomic.StoreUint32(w.word(o), v)
		w.last[o/4] = v
	}
}

// isRegister says whether off is one of the register block's registers
// (docs/bar0.md): the identification and control block, the ring, vector
// and MSI-X blocks, the access counters and the pending bits. Reserved
// words are not.
func isRegister(off uint32) bool {
	switch {
	case off < rings.Bar0RingBase:
		return off <= rings.RegCounterLen && off != rings.RegMemFirst+4 // the one reserved word before the rings
	case off < rings.Bar0Ring(rings.Bar0Rings, 0):
		return (off-rings.Bar0RingBase)%rings.Bar0RingStride < rings.RingRegRsvd
	case off >= rings.Bar0VecBase && off < rings.Bar0Vec(rings.Bar0Vectors, 0):
		return true
	case off >= rings.Bar0CounterBase && off < rings.Bar0Counter(rings.Bar0RegCounters):
		return true
	case off >= rings.Bar0MsixTable && off < rings.Bar0Msix(rings.Bar0Vectors, 0):
		return true
	case off >= rings.Bar0MsixPBA && off < rings.Bar0MsixPBA+8:
		return true
	}
	return false
}
