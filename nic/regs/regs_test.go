package regs

import (
	"errors"
	"sync/atomic"
	"testing"

	"github.com/emunic/emunic/rings"
)

// fakeDev is a backend that records what the model asks of it.
type fakeDev struct {
	running bool
	starts  int
	last    Setup
	fail    error
	kicks   atomic.Int32
	rdma    *fakeRDMA // non-nil: the doorbell has the RDMA doorbells
}

func (f *fakeDev) Start(s Setup) (rings.Doorbell, error) {
	if f.running {
		panic("Start while running")
	}
	if f.fail != nil {
		return nil, f.fail
	}
	f.running, f.last = true, s
	f.starts++
	k := kickFunc(func() { f.kicks.Add(1) })
	if f.rdma != nil {
		return rdmaBell{k, f.rdma}, nil
	}
	return k, nil
}

func (f *fakeDev) Stop() {
	if !f.running {
		panic("Stop while stopped")
	}
	f.running = false
}

type kickFunc func()

func (k kickFunc) Kick() { k() }

type counter struct{ n atomic.Int32 }

func (c *counter) Kick() { c.n.Add(1) }

const (
	memBase = rings.Addr(0x10000000)
	memSize = 1 << 20
)

// attached is a model with memory and three vectors attached.
func attached(t *testing.T, first uint32) (*Model, *fakeDev, [3]*counter) {
	t.Helper()
	f := &fakeDev{}
	m := New(f)
	m.SetIdent(Ident{MAC: [6]byte{2, 0, 0, 0, 0, 7}, MTU: 1500})
	m.AttachMemory(Memory{Base: memBase, Size: memSize, First: first})
	var vs [3]*counter
	var out [3]rings.Doorbell
	for i := range vs {
		vs[i] = &counter{}
		out[i] = vs[i]
	}
	m.AttachVectors(out)
	return m, f, vs
}

func mustW(t *testing.T, m *Model, off, v uint32) {
	t.Helper()
	if e := m.Write32(off, v); e != rings.ErrNone {
		t.Fatalf("write %#x = %#x: %v", off, v, e)
	}
}

func mustR(t *testing.T, m *Model, off uint32) uint32 {
	t.Helper()
	v, e := m.Read32(off)
	if e != rings.ErrNone {
		t.Fatalf("read %#x: %v", off, e)
	}
	return v
}

// placeRings writes the four rings one after another from base, 64
// entries each.
func placeRings(t *testing.T, m *Model, base rings.Addr) {
	t.Helper()
	for r := 0; r < rings.Bar0Rings; r++ {
		l := rings.Layout{Base: base, Count: 64, EntrySize: rings.Bar0RingEntry(r)}
		for _, w := range rings.Bar0RingWrites(r, l) {
			mustW(t, m, w.Off, w.Val)
		}
		base += rings.Addr((l.Size() + 63) &^ 63)
	}
}

// wantRefused writes and checks the refusal, RegError, RegErrorOffset and
// the counter.
func wantRefused(t *testing.T, m *Model, off, v uint32, e rings.Bar0ErrCode) {
	t.Helper()
	before := m.Counter(rings.Bar0ErrCounter(e))
	if got := m.Write32(off, v); got != e {
		t.Fatalf("write %#x = %#x: %v, want %v", off, v, got, e)
	}
	if got := m.Counter(rings.Bar0ErrCounter(e)); got != before+1 {
		t.Errorf("counter %v: %d, want %d", rings.Bar0ErrCounter(e), got, before+1)
	}
	if got := mustR(t, m, rings.RegError); got != uint32(e) {
		t.Errorf("RegError %d, want %d", got, e)
	}
	if got := mustR(t, m, rings.RegErrorOffset); got != off {
		t.Errorf("RegErrorOffset %#x, want %#x", got, off)
	}
}

func TestIdentification(t *testing.T) {
	m, _, _ := attached(t, 0)
	if v := mustR(t, m, rings.RegID); v != rings.Bar0VendorID|rings.Bar0DeviceID<<16 {
		t.Errorf("ID %#x", v)
	}
	if v := mustR(t, m, rings.RegVersion); v>>16 != rings.Bar0VersionMajor {
		t.Errorf("version %#x", v)
	}
	if mustR(t, m, rings.RegMACLo) != 0x00000002 || mustR(t, m, rings.RegMACHi) != 0x0700 || mustR(t, m, rings.RegMTU) != 1500 {
		t.Error("MAC or MTU")
	}
	if mustR(t, m, rings.RegMemBaseLo) != uint32(memBase) || mustR(t, m, rings.RegMemSizeLo) != memSize {
		t.Error("memory")
	}
	if s := rings.Bar0Status(mustR(t, m, rings.RegStatus)); s != rings.StatusMemory|rings.StatusVectors {
		t.Errorf("status %#x", s)
	}
	for r := 0; r < rings.Bar0Rings; r++ {
		if mustR(t, m, rings.Bar0Ring(r, rings.RingRegEntry)) != rings.Bar0RingEntry(r) {
			t.Errorf("ring %d entry size", r)
		}
	}
}

func TestEnableDisableReset(t *testing.T) {
	m, f, _ := attached(t, 0)
	mustW(t, m, rings.RegDrvFeatures, uint32(rings.FeatCounters|rings.FeatModeration))
	placeRings(t, m, memBase+0x1000)
	mustW(t, m, rings.RegCounterLo, uint32(memBase+0x80000))
	mustW(t, m, rings.RegCounterLen, 0x4000)
	mustW(t, m, rings.Bar0Vec(rings.Bar0VecNotify, rings.VecRegModUsecs), 20)
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	if !f.running || !m.Enabled() || mustR(t, m, rings.RegStatus)&uint32(rings.StatusEnabled) == 0 {
		t.Fatal("not running after enable")
	}
	if f.last.ModUsecs != 20 || f.last.CounterBase != memBase+0x80000 || f.last.CounterLen != 0x4000 ||
		f.last.Rings.Command.Base != memBase+0x1000 || f.last.Vectors.Notify == nil {
		t.Errorf("setup %+v", f.last)
	}
	// What the driver did not ask for, the device withholds.
	if w := f.last.Withheld(); w != rings.Bar0Features&^(rings.FeatCounters|rings.FeatModeration) || w&rings.FeatLegacy == 0 {
		t.Errorf("withheld %#x for a driver of counters and moderation only", uint32(w))
	}
	mustW(t, m, rings.Bar0Ring(rings.Bar0RingTx, rings.RingRegDoorbell), 1)
	m.Doorbell(rings.Bar0RingCommand).Kick()
	if f.kicks.Load() != 2 {
		t.Errorf("%d doorbells reached the device, want 2", f.kicks.Load())
	}
	// Disable keeps the registers; enable again starts afresh on them.
	mustW(t, m, rings.RegCtrl, 0)
	if f.running || mustR(t, m, rings.Bar0Ring(0, rings.RingRegCount)) != 64 {
		t.Fatal("disable")
	}
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	if f.starts != 2 {
		t.Fatal("second enable")
	}
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlReset))
	if f.running || mustR(t, m, rings.RegCtrl) != 0 || mustR(t, m, rings.Bar0Ring(0, rings.RingRegCount)) != 0 ||
		mustR(t, m, rings.RegDrvFeatures) != 0 || m.Counter(rings.RegCtrResets) != 1 || m.Counter(rings.RegCtrEnables) != 2 {
		t.Fatal("reset")
	}
}

func TestBadAccesses(t *testing.T) {
	m, f, _ := attached(t, 0)
	for _, off := range []uint32{rings.Bar0Bytes, 0xFFFFFFFC, 2, rings.Bar0Ring(0, 1), 0x44, 0x0FC, rings.Bar0Ring(0, rings.RingRegRsvd),
		rings.Bar0Ring(rings.Bar0Rings, 0), rings.Bar0Vec(rings.Bar0Vectors, 0), rings.Bar0Counter(rings.Bar0RegCounters), 0xFFC} {
		wantRefused(t, m, off, 1, rings.ErrBadOffset)
		if v, e := m.Read32(off); v != 0 || e != rings.ErrBadOffset {
			t.Errorf("read %#x: %#x %v", off, v, e)
		}
	}
	for _, off := range []uint32{rings.RegID, rings.RegStatus, rings.RegMTU, rings.RegMemBaseLo, rings.RegError,
		rings.Bar0Ring(1, rings.RingRegEntry), rings.Bar0Ring(2, rings.RingRegVector), rings.Bar0Counter(0), rings.Bar0MsixPBA} {
		wantRefused(t, m, off, 1, rings.ErrReadOnly)
	}
	wantRefused(t, m, rings.Bar0Ring(0, rings.RingRegCount), 3, rings.ErrBadValue)
	wantRefused(t, m, rings.Bar0Ring(0, rings.RingRegCount), 2<<20, rings.ErrBadValue)
	wantRefused(t, m, rings.RegDrvFeatures, 1<<31, rings.ErrBadValue)
	wantRefused(t, m, rings.RegCtrl, 4, rings.ErrBadValue)
	wantRefused(t, m, rings.Bar0Vec(1, rings.VecRegMask), 2, rings.ErrBadValue)
	// Feature-owned registers without their feature.
	wantRefused(t, m, rings.RegCounterLen, 0x4000, rings.ErrWrongState)
	wantRefused(t, m, rings.Bar0Vec(0, rings.VecRegModCount), 8, rings.ErrWrongState)
	mustW(t, m, rings.RegDrvFeatures, uint32(rings.FeatModeration))
	wantRefused(t, m, rings.Bar0Vec(rings.Bar0VecCommand, rings.VecRegModCount), 8, rings.ErrBadValue)
	wantRefused(t, m, rings.Bar0Vec(0, rings.VecRegModUsecs), rings.Bar0MaxModUsecs+1, rings.ErrBadValue)
	// A doorbell for rings never set up.
	wantRefused(t, m, rings.Bar0Ring(rings.Bar0RingTx, rings.RingRegDoorbell), 1, rings.ErrNoDoorbell)
	before := m.Counter(rings.RegCtrNoDoorbell)
	m.Doorbell(rings.Bar0RingRx).Kick()
	if m.Counter(rings.RegCtrNoDoorbell) != before+1 {
		t.Error("an eventfd doorbell while disabled was not counted")
	}
	// Locked while enabled.
	placeRings(t, m, memBase)
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	wantRefused(t, m, rings.Bar0Ring(2, rings.RingRegBaseLo), 0x1000, rings.ErrWrongState)
	wantRefused(t, m, rings.Bar0Ring(2, rings.RingRegCount), 128, rings.ErrWrongState)
	wantRefused(t, m, rings.RegDrvFeatures, 0, rings.ErrWrongState)
	wantRefused(t, m, rings.Bar0Vec(0, rings.VecRegModUsecs), 0, rings.ErrWrongState)
	if !f.running || f.last.Rings.Tx.Count != 64 {
		t.Fatal("a refused write changed the running device")
	}
	// Still serving: a doorbell goes through.
	mustW(t, m, rings.Bar0Ring(2, rings.RingRegDoorbell), 1)
	if f.kicks.Load() != 1 {
		t.Error("the doorbell after the refusals")
	}
}

func TestEnableRefusals(t *testing.T) {
	const first = 4096
	cases := []struct {
		name string
		set  func(t *testing.T, m *Model)
		want rings.Bar0ErrCode
	}{
		{"nothing set up", func(*testing.T, *Model) {}, rings.ErrRingSetup},
		{"one ring missing", func(t *testing.T, m *Model) {
			placeRings(t, m, memBase+first)
			mustW(t, m, rings.Bar0Ring(3, rings.RingRegCount), 0)
		}, rings.ErrRingSetup},
		{"over the register window", func(t *testing.T, m *Model) { placeRings(t, m, memBase) }, rings.ErrRingOutside},
		{"past the end", func(t *testing.T, m *Model) { placeRings(t, m, memBase+memSize-0x2000) }, rings.ErrRingOutside},
		{"below the memory", func(t *testing.T, m *Model) { placeRings(t, m, 0x1000) }, rings.ErrRingOutside},
		{"at the top of the address space", func(t *testing.T, m *Model) { placeRings(t, m, rings.Addr(1<<64-0x1000)) }, rings.ErrRingOutside},
		{"unaligned", func(t *testing.T, m *Model) { placeRings(t, m, memBase+first+8) }, rings.ErrRingSetup},
		{"overlapping", func(t *testing.T, m *Model) {
			placeRings(t, m, memBase+first)
			mustW(t, m, rings.Bar0Ring(3, rings.RingRegBaseLo), uint32(memBase+first))
		}, rings.ErrRingSetup},
		{"counter area over a ring", func(t *testing.T, m *Model) {
			mustW(t, m, rings.RegDrvFeatures, uint32(rings.FeatCounters))
			placeRings(t, m, memBase+first)
			mustW(t, m, rings.RegCounterLo, uint32(memBase+first))
			mustW(t, m, rings.RegCounterLen, 0x4000)
		}, rings.ErrRingSetup},
		{"counter area outside", func(t *testing.T, m *Model) {
			mustW(t, m, rings.RegDrvFeatures, uint32(rings.FeatCounters))
			placeRings(t, m, memBase+first)
			mustW(t, m, rings.RegCounterLo, uint32(memBase+memSize-8))
			mustW(t, m, rings.RegCounterLen, 0x4000)
		}, rings.ErrRingOutside},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			m, f, _ := attached(t, first)
			c.set(t, m)
			wantRefused(t, m, rings.RegCtrl, uint32(rings.CtrlEnable), c.want)
			if f.running || m.Enabled() || mustR(t, m, rings.RegStatus)&uint32(rings.StatusFailed) == 0 || mustR(t, m, rings.RegCtrl) != 0 {
				t.Fatal("a refused enable left the device running or not failed")
			}
			// The driver corrects it and the device starts.
			mustW(t, m, rings.RegCtrl, uint32(rings.CtrlReset))
			placeRings(t, m, memBase+first)
			mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
			if !f.running || mustR(t, m, rings.RegStatus)&uint32(rings.StatusFailed) != 0 {
				t.Fatal("no enable after the correction")
			}
		})
	}
}

func TestEnableWithoutTransport(t *testing.T) {
	f := &fakeDev{}
	m := New(f)
	placeRings(t, m, memBase)
	wantRefused(t, m, rings.RegCtrl, uint32(rings.CtrlEnable), rings.ErrEnableFailed)
	m.AttachMemory(Memory{Base: memBase, Size: memSize})
	wantRefused(t, m, rings.RegCtrl, uint32(rings.CtrlEnable), rings.ErrEnableFailed)
	m.AttachVectors([3]rings.Doorbell{}) // polling
	f.fail = errors.New("no port")
	wantRefused(t, m, rings.RegCtrl, uint32(rings.CtrlEnable), rings.ErrEnableFailed)
	if m.StartErr() == nil {
		t.Error("StartErr")
	}
	f.fail = nil
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	if f.last.Vectors.Notify != nil {
		t.Error("polling mode got vectors")
	}
}

func TestVectorMaskAndPending(t *testing.T) {
	m, f, vs := attached(t, 0)
	placeRings(t, m, memBase)
	mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
	notify := f.last.Vectors.Notify
	notify.Kick()
	if vs[0].n.Load() != 1 || mustR(t, m, rings.Bar0Vec(0, rings.VecRegCause)) != 1 {
		t.Fatal("raise")
	}
	mustW(t, m, rings.Bar0Vec(0, rings.VecRegCause), 1)
	if mustR(t, m, rings.Bar0Vec(0, rings.VecRegCause)) != 0 {
		t.Fatal("cause not cleared")
	}
	// Masked through the MSI-X entry: pending, delivered on unmask
	// through the vector's register (one bit).
	mustW(t, m, rings.Bar0Msix(0, rings.MsixOffCtrl), rings.MsixCtrlMasked)
	if mustR(t, m, rings.Bar0Vec(0, rings.VecRegMask)) != 1 {
		t.Fatal("the MSI-X mask is not the vector's mask")
	}
	notify.Kick()
	notify.Kick()
	if vs[0].n.Load() != 1 || mustR(t, m, rings.Bar0MsixPBA) != 1 || m.Counter(rings.RegCtrMaskedRaises) != 2 {
		t.Fatal("a masked raise was delivered or not pending")
	}
	mustW(t, m, rings.Bar0Vec(0, rings.VecRegMask), 0)
	if vs[0].n.Load() != 2 || mustR(t, m, rings.Bar0MsixPBA) != 0 {
		t.Fatal("unmask did not deliver the pending raise once")
	}
	f.last.Vectors.Command.Kick()
	if vs[2].n.Load() != 1 || vs[1].n.Load() != 0 || m.Counter(rings.RegCtrInterrupts) != 3 {
		t.Fatal("vectors crossed")
	}
	mustW(t, m, rings.Bar0Msix(1, rings.MsixOffAddrLo), 0xFEE00000)
	mustW(t, m, rings.Bar0Msix(1, rings.MsixOffData), 0x4021)
	if mustR(t, m, rings.Bar0Msix(1, rings.MsixOffAddrLo)) != 0xFEE00000 || mustR(t, m, rings.Bar0Msix(1, rings.MsixOffData)) != 0x4021 {
		t.Fatal("MSI-X entry")
	}
}

// TestDetachMidTransfer: a host that vanishes while the device runs is
// counted, the device is stopped and reset, and the next host attaches
// and enables as if first.
func TestDetachMidTransfer(t *testing.T) {
	m, f, _ := attached(t, 0)
	for host := 0; host < 3; host++ {
		if host > 0 {
			m.AttachMemory(Memory{Base: memBase, Size: memSize})
			m.AttachVectors([3]rings.Doorbell{&counter{}, &counter{}, &counter{}})
		}
		if mustR(t, m, rings.RegCtrl) != 0 || mustR(t, m, rings.Bar0Ring(1, rings.RingRegCount)) != 0 {
			t.Fatalf("host %d found registers of the last", host)
		}
		placeRings(t, m, memBase)
		mustW(t, m, rings.RegCtrl, uint32(rings.CtrlEnable))
		mustW(t, m, rings.Bar0Ring(0, rings.RingRegDoorbell), 1)
		m.Detach(true)
		if f.running || m.Enabled() || mustR(t, m, rings.RegStatus) != 0 {
			t.Fatalf("host %d: device still running after detach", host)
		}
		wantRefused(t, m, rings.Bar0Ring(0, rings.RingRegDoorbell), 1, rings.ErrNoDoorbell)
	}
	if m.Counter(rings.RegCtrHostGone) != 3 || m.Counter(rings.RegCtrEnables) != 3 {
		t.Fatalf("host gone %d, enables %d", m.Counter(rings.RegCtrHostGone), m.Counter(rings.RegCtrEnables))
	}
}
