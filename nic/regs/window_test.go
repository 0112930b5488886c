package regs

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/emunic/emunic/rings"
)

// windowHost is a driver's view of the register window: plain stores and
// loads of the page, then "the window changed".
type windowHost struct {
	t   *testing.T
	w   *Window
	mem []byte
}

func (h *windowHost) st(off, v uint32) { binary.LittleEndian.PutUint32(h.mem[off:], v) }
func (h *windowHost) ld(off uint32) uint32 {
	return binary.LittleEndian.Uint32(h.mem[off:])
}

func (h *windowHost) changed(want ...rings.Bar0ErrCode) {
	h.t.Helper()
	got := h.w.Changed()
	if len(got) != len(want) {
		h.t.Fatalf("refusals %v, want %v", got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			h.t.Fatalf("refusals %v, want %v", got, want)
		}
	}
}

func newWindowHost(t *testing.T) (*windowHost, *fakeDev, [3]*counter) {
	m, f, vs := attached(t, rings.Bar0Bytes)
	mem := make([]byte, rings.Bar0Bytes)
	w := NewWindow(m, mem)
	m.AttachVectors(w.Interrupts([3]rings.Doorbell{vs[0], vs[1], vs[2]}))
	return &windowHost{t: t, w: w, mem: mem}, f, vs
}

func TestWindowBringUp(t *testing.T) {
	h, f, _ := newWindowHost(t)
	if h.ld(rings.RegID) != rings.Bar0VendorID|rings.Bar0DeviceID<<16 || h.ld(rings.RegMemFirst) != rings.Bar0Bytes ||
		h.ld(rings.Bar0Ring(0, rings.RingRegEntry)) != rings.CommandEntrySize {
		t.Fatal("the window does not show the identification")
	}
	base := uint32(memBase) + rings.Bar0Bytes
	for r := 0; r < rings.Bar0Rings; r++ {
		h.st(rings.Bar0Ring(r, rings.RingRegBaseLo), base+uint32(r)*0x1000)
		h.st(rings.Bar0Ring(r, rings.RingRegCount), 16)
	}
	h.st(rings.RegCtrl, uint32(rings.CtrlEnable))
	h.changed()
	if !f.running || h.ld(rings.RegStatus)&uint32(rings.StatusEnabled) == 0 {
		t.Fatalf("not enabled: status %#x error %d", h.ld(rings.RegStatus), h.ld(rings.RegError))
	}
	// Doorbells: the value in the window, then the ring's vector.
	h.st(rings.Bar0Ring(2, rings.RingRegDoorbell), 5)
	if e := h.w.Doorbell(2); e != rings.ErrNone || f.kicks.Load() != 1 {
		t.Fatalf("doorbell: %v, %d kicks", e, f.kicks.Load())
	}
	// Bad stores: a read-only register, a ring base while enabled, a
	// reserved register. Each refused, counted, put back.
	h.st(rings.RegMTU, 9000)
	h.st(rings.Bar0Ring(1, rings.RingRegBaseLo), base+0x10000)
	h.st(0x044, 7)
	h.changed(rings.ErrReadOnly, rings.ErrBadOffset, rings.ErrWrongState)
	if h.ld(rings.RegMTU) != 1500 || h.ld(rings.Bar0Ring(1, rings.RingRegBaseLo)) != base+0x1000 || h.ld(0x044) != 0 {
		t.Fatal("a refused store was not put back")
	}
	if h.ld(rings.Bar0Counter(rings.RegCtrWrongState)) != 1 || h.ld(rings.Bar0Counter(rings.RegCtrReadOnly)) != 1 ||
		h.ld(rings.RegError) != uint32(rings.ErrWrongState) {
		t.Fatal("the window does not show the counters and the error")
	}
	if !f.running || f.last.Rings.Notify.Base != rings.Addr(base+0x1000) {
		t.Fatal("a refused store reached the device")
	}
	// Reset: the window shows every read-write register zero.
	h.st(rings.RegCtrl, uint32(rings.CtrlReset))
	h.changed()
	if f.running || h.ld(rings.RegCtrl) != 0 || h.ld(rings.Bar0Ring(3, rings.RingRegCount)) != 0 || h.ld(rings.RegStatus)&uint32(rings.StatusEnabled) != 0 {
		t.Fatal("reset not shown in the window")
	}
	if e := h.w.Doorbell(1); e != rings.ErrNoDoorbell || h.ld(rings.Bar0Counter(rings.RegCtrNoDoorbell)) != 1 {
		t.Fatalf("doorbell after reset: %v", e)
	}
	if e := h.w.Doorbell(9); e != rings.ErrBadOffset {
		t.Fatalf("doorbell of ring 9: %v", e)
	}
}

func TestWindowCauseAndMask(t *testing.T) {
	h, f, vs := newWindowHost(t)
	base := uint32(memBase) + rings.Bar0Bytes
	for r := 0; r < rings.Bar0Rings; r++ {
		h.st(rings.Bar0Ring(r, rings.RingRegBaseLo), base+uint32(r)*0x1000)
		h.st(rings.Bar0Ring(r, rings.RingRegCount), 16)
	}
	h.st(rings.RegCtrl, uint32(rings.CtrlEnable))
	h.st(rings.Bar0Vec(1, rings.VecRegMask), 1)
	h.changed()
	f.last.Vectors.Notify.Kick()
	if h.ld(rings.Bar0Vec(0, rings.VecRegCause)) != 1 {
		t.Fatal("the cause was not in the window when the interrupt went")
	}
	f.last.Vectors.TxSpace.Kick()
	h.w.Publish()
	if h.ld(rings.Bar0Vec(0, rings.VecRegCause)) != 1 || h.ld(rings.Bar0MsixPBA) != 1<<1 || vs[0].n.Load() != 1 || vs[1].n.Load() != 0 {
		t.Fatalf("cause %d, pending %#x", h.ld(rings.Bar0Vec(0, rings.VecRegCause)), h.ld(rings.Bar0MsixPBA))
	}
	// Clear the cause (a store of 0 over the 1) and unmask vector 1: its
	// pending raise is delivered.
	h.st(rings.Bar0Vec(0, rings.VecRegCause), 0)
	h.st(rings.Bar0Vec(1, rings.VecRegMask), 0)
	h.changed()
	if c, _ := h.w.m.Read32(rings.Bar0Vec(0, rings.VecRegCause)); c != 0 || vs[1].n.Load() != 1 || h.ld(rings.Bar0MsixPBA) != 0 {
		t.Fatal("cause not cleared or pending raise not delivered")
	}
}

// TestWindowGarbage: random stores over the whole window, with and
// without "changed" and doorbells between them, never panic, and the
// backend runs exactly when the device says it is enabled.
func TestWindowGarbage(t *testing.T) {
	h, f, _ := newWindowHost(t)
	rnd := rand.New(rand.NewSource(29))
	for i := 0; i < 20000; i++ {
		off := uint32(rnd.Intn(rings.Bar0Bytes/4)) * 4
		h.st(off, rnd.Uint32()>>uint(rnd.Intn(32)))
		switch rnd.Intn(8) {
		case 0:
			h.w.Changed()
		case 1:
			h.w.Doorbell(rnd.Intn(6) - 1)
		case 2:
			h.w.Publish()
		}
		if f.running != h.w.m.Enabled() {
			t.Fatal("backend and model disagree")
		}
	}
}

// TestWindowFeaturesFirst: a driver that stores its features and the
// registers they gate (the counter area's, at higher offsets) before one
// "changed" has them all taken: the features are applied first, as a
// driver orders its stores.
func TestWindowFeaturesFirst(t *testing.T) {
	h, f, _ := newWindowHost(t)
	base := uint32(memBase) + rings.Bar0Bytes
	h.st(rings.RegDrvFeatures, uint32(rings.FeatLegacy|rings.FeatCounters))
	for r := 0; r < rings.Bar0Rings; r++ {
		h.st(rings.Bar0Ring(r, rings.RingRegBaseLo), base+uint32(r)*0x1000)
		h.st(rings.Bar0Ring(r, rings.RingRegCount), 16)
	}
	ctr, n := base+0x8000, uint32(rings.CounterAreaLayout.MinSize()+7)&^7
	h.st(rings.RegCounterLo, ctr)
	h.st(rings.RegCounterLen, n)
	h.st(rings.RegCtrl, uint32(rings.CtrlEnable))
	h.changed()
	if !f.running || f.last.CounterBase != rings.Addr(ctr) || f.last.CounterLen != n ||
		f.last.Features != rings.FeatLegacy|rings.FeatCounters {
		t.Fatalf("enabled %v with counter area %#x+%d, features %#x", f.running, uint64(f.last.CounterBase), f.last.CounterLen, uint32(f.last.Features))
	}
}
