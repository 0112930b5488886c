package regs

import (
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// Window is the register block mirrored in memory the driver maps: over
// QEMU's ivshmem, the first page of BAR2 (docs/bar0.md, "Over ivshmem").
// The driver stores to a register there and then rings "the window
// changed" (ivshmem vector 0): Changed finds every register whose value
// differs from the one last accepted and writes it to the model, in
// register order, and puts a refused write back. A ring's doorbell is the
// driver's store to its Doorbell register and ivshmem vector 1 + ring:
// Doorbell. Publish writes the read-only registers (status, error,
// counters, cause, pending bits) into the window; a transport calls it
// after Changed and Doorbell (both do) and before it delivers an interrupt,
// so the driver's handler reads a fresh cause.
//
// Every access to the window is a 32-bit atomic: the driver's CPU and the
// device process share the page.
type Window struct {
	m   *Model
	mem []byte // rings.Bar0Bytes bytes

	mu sync.Mutex // one Changed or Publish at a time
	// vmu guards shadow, in short sections that call nothing: an
	// interrupt's delivery (Interrupts) takes it from inside a register
	// write that Changed made.
	vmu    sync.Mutex
	shadow [rings.Bar0Bytes / 4]uint32 // the value last accepted or shown, per register
}

// show writes v to the window at off when it is not what the window last
// showed there.
func (w *Window) show(off, v uint32) {
	w.vmu.Lock()
	if v != w.shadow[off/4] {
		w.store(off, v)
		w.shadow[off/4] = v
	}
	w.vmu.Unlock()
}

// isDoorbell says whether off is a ring's Doorbell register, which the
// window writes only on the ring's own ivshmem vector, or an RDMA doorbell
// register, which the window does not carry (docs/bar0.md, "Over
// ivshmem": one window word cannot hold the doorbells of several QPs rung
// at once, and the model does not offer FeatQPDoorbell there).
func isDoorbell(off uint32) bool {
	rg, _, reg := locate(off)
	return rg == rgRing && reg == rings.RingRegDoorbell || off == rings.RegQPDoorbell || off == rings.RegCQArm
}

// isCause says whether off is a vector's Cause register.
func isCause(off uint32) bool {
	rg, _, reg := locate(off)
	return rg == rgVec && reg == rings.VecRegCause
}

// NewWindow mirrors m's registers into mem (at least rings.Bar0Bytes
// bytes, 4-byte aligned), writing every register's value there.
func NewWindow(m *Model, mem []byte) *Window {
	w := &Window{m: m, mem: mem[:rings.Bar0Bytes]}
	w.mu.Lock()
	defer w.mu.Unlock()
	for off := uint32(0); off < rings.Bar0Bytes; off += 4 {
		v, _ := m.peek(off)
		if isDoorbell(off) {
			v = 0
		}
		w.store(off, v)
		w.shadow[off/4] = v
	}
	return w
}

func (w *Window) word(off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&w.mem[off])) }
func (w *Window) load(off uint32) uint32  { return atomic.LoadUint32(w.word(off)) }
func (w *Window) store(off, v uint32)     { atomic.StoreUint32(w.word(off), v) }

// Changed applies the driver's stores since the last call: each register
// whose window value differs from the last accepted or published one is
// written to the model, RegDrvFeatures first, then in register order from
// the one after RegCtrl round to RegCtrl, so the enable or reset comes
// last (a store to a read-only or reserved register is refused and counted
// as any such write); then every register the model holds otherwise (a
// refused write, a reset's zeros, a new status) is written back. It
// returns the refusals, in order.
func (w *Window) Changed() []rings.Bar0ErrCode {
	w.mu.Lock()
	defer w.mu.Unlock()
	var refused []rings.Bar0ErrCode
	// A driver that stores its features, the rings, the counter area and
	// the enable before one "changed" gets them in a driver's order: the
	// features first (they gate the counter-area and moderation
	// registers), RegCtrl last.
	const n = rings.Bar0Bytes / 4
	for i := uint32(0); i <= n; i++ {
		off := uint32(rings.RegDrvFeatures)
		if i > 0 {
			// From the register after RegCtrl round to RegCtrl.
			if off = (i - 1 + rings.RegCtrl/4 + 1) % n * 4; off == rings.RegDrvFeatures {
				continue
			}
		}
		if isDoorbell(off) {
			continue
		}
		w.vmu.Lock()
		v, was := w.load(off), w.shadow[off/4]
		w.shadow[off/4] = v
		w.vmu.Unlock()
		if v == was {
			continue
		}
		wv := v
		if isCause(off) && v == 0 && was&1 != 0 {
			// Write 1 to clear, said as a store that changes the
			// register: a 0 over a published 1 clears it.
			wv = 1
		}
		if e := w.m.Write32(off, wv); e != rings.ErrNone {
			refused = append(refused, e)
		}
	}
	w.sync()
	return refused
}

// Doorbell is the driver's doorbell of ring r (ivshmem vector 1 + r): a
// write of the ring's Doorbell register with the value the driver stored
// there.
func (w *Window) Doorbell(r int) rings.Bar0ErrCode {
	if r < 0 || r >= rings.Bar0Rings {
		w.m.mu.Lock()
		defer w.m.mu.Unlock()
		return w.m.refuse(rings.Bar0Bytes, rings.ErrBadOffset)
	}
	off := rings.Bar0Ring(r, rings.RingRegDoorbell)
	e := w.m.Write32(off, w.load(off))
	if e != rings.ErrNone {
		w.Publish()
	}
	return e
}

// Publish writes into the window every register whose value the device
// changed (status, error, counters, cause, pending bits, a reset's zeros).
func (w *Window) Publish() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sync()
}

// sync writes each register whose model value differs from the one the
// window last showed (w.mu held). A register the driver stored to since is
// left to the next Changed unless the device changed it too.
func (w *Window) sync() {
	for off := uint32(0); off < rings.Bar0Bytes; off += 4 {
		if isDoorbell(off) {
			continue
		}
		v, _ := w.m.peek(off)
		w.show(off, v)
	}
}

// peek reads a register without counting anything: the window's view.
func (m *Model) peek(off uint32) (uint32, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.read(off)
}

// Interrupts wraps a transport's interrupt delivery (out[v] sends vector
// v to the driver) for AttachVectors: each delivery first writes the
// vector's cause and the pending bits into the window, so the driver's
// handler reads them fresh. A nil out stays nil (polling).
func (w *Window) Interrupts(out [rings.Bar0Vectors]rings.Doorbell) [rings.Bar0Vectors]rings.Doorbell {
	var in [rings.Bar0Vectors]rings.Doorbell
	for v, d := range out {
		if d != nil {
			in[v] = windowVector{w, v, d}
		}
	}
	return in
}

type windowVector struct {
	w   *Window
	v   int
	out rings.Doorbell
}

// Kick runs inside the model's gate, maybe under the model's lock (an
// unmask that delivers a pending raise): it reads the gates' atomics, not
// the registers.
func (wv windowVector) Kick() {
	m := wv.w.m
	wv.w.show(rings.Bar0Vec(wv.v, rings.VecRegCause), m.gates[wv.v].st.Load()&gateCause)
	wv.w.show(rings.Bar0MsixPBA, m.pending())
	wv.out.Kick()
}
