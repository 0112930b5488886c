package ivshmem

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/regs"
	"github.com/emunic/emunic/rings"
)

// The ivshmem vectors each way (docs/bar0.md, "Over ivshmem"). The guest
// rings the device's vector VecRegisters when the register window changed
// and VecRing(r) for ring r's doorbell; the device raises the guest's
// vector v for its interrupt vector v.
const (
	VecRegisters = 0
	// DeviceVectors is the ivshmem vectors the device uses each way: 1 +
	// its rings one way, its interrupt vectors the other. QEMU's vectors=
	// and the server's Vectors must be at least this.
	DeviceVectors = 1 + rings.Bar0Rings
)

// VecRing is the device's ivshmem vector that is ring r's doorbell.
func VecRing(r int) int { return 1 + r }

// DefaultIdleYield is how long an idle device polls, with sched_yield
// between passes, before it parks (nic.Config.IdleYield, when the
// configuration leaves it 0). The device process shares the machine's
// CPUs with QEMU, as a split device does with its host: see docs/split.md,
// "When the device is idle".
const DefaultIdleYield = 50 * time.Microsecond

// DeviceConfig configures the emunic device behind an ivshmem server.
type DeviceConfig struct {
	// NIC is the device's configuration (MAC, MTU, moderation, a tracer);
	// an enable's moderation registers override its interrupt moderation.
	NIC nic.Config
	// OpenPort opens the device's port at each enable; the device closes
	// it when it stops.
	OpenPort func() (port.Port, error)
	// NewTracer, when set, gives each enable's NIC its tracer (a ring
	// trace recorder, docs/trace.md): every enable is a device of its own.
	NewTracer func() nic.Tracer
	// Logf, when set, gets one line per event.
	Logf func(format string, args ...any)
}

// Device is the emunic device served to a QEMU guest: the register model
// (nic/regs) on BAR2's first page, and the NIC (nic.Device) that an
// enable builds on the rest of BAR2. It implements Handler.
type Device struct {
	cfg   DeviceConfig
	model *regs.Model

	mu    sync.Mutex
	win   *regs.Window // the guest's register window, nil without a guest
	arena *rings.Arena
	dev   *nic.Device // running while the model is enabled

	scans, refused, badVectors atomic.Uint64
}

// NewDevice makes the device, with no guest attached.
func NewDevice(cfg DeviceConfig) *Device {
	if cfg.NIC.IdleYield == 0 {
		cfg.NIC.IdleYield = DefaultIdleYield
	}
	d := &Device{cfg: cfg}
	d.model = regs.New(backend{d})
	d.model.Withhold(rings.FeatQPDoorbell) // the window cannot carry it (docs/bar0.md)
	mtu := cfg.NIC.MTU
	if mtu == 0 {
		mtu = 1500
	}
	d.model.SetIdent(regs.Ident{MAC: cfg.NIC.MAC, MTU: mtu})
	return d
}

// Registers is the device's register model, for its counters.
func (d *Device) Registers() *regs.Model { return d.model }

// NIC is the running device, or nil.
func (d *Device) NIC() *nic.Device {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.dev
}

// DeviceStats counts what the transport saw, over all guests.
type DeviceStats struct {
	// Scans counts the guest's "register window changed" doorbells
	// (vector 0); those that came together are one scan of the window.
	Scans uint64
	// Refused counts the register writes found in the window, and the
	// ring doorbells, that the register model refused (the model counts
	// them by kind: rings.RegCounterID).
	Refused uint64
	// BadVectors counts doorbells on vectors that mean nothing: QEMU
	// delivers a guest's doorbell for any vector the server connected.
	BadVectors uint64
}

// Stats returns the transport's counters.
func (d *Device) Stats() DeviceStats {
	return DeviceStats{Scans: d.scans.Load(), Refused: d.refused.Load(), BadVectors: d.badVectors.Load()}
}

func (d *Device) logf(format string, args ...any) {
	if d.cfg.Logf != nil {
		d.cfg.Logf(format, args...)
	}
}

// Attach gives the register model BAR2 and the guest's vectors, and puts
// the registers into the window.
func (d *Device) Attach(g *Guest) error {
	if g.Vectors() < DeviceVectors {
		return fmt.Errorf("ivshmem: %d vectors; the device needs %d (QEMU's ivshmem-doorbell vectors=%d)", g.Vectors(), DeviceVectors, DeviceVectors)
	}
	a, err := rings.NewArenaOn(g.Mem)
	if err != nil {
		return err
	}
	var out [rings.Bar0Vectors]rings.Doorbell
	for v := range out {
		out[v] = g.Vector(v)
	}
	d.mu.Lock()
	d.arena = a
	d.mu.Unlock()
	d.model.AttachMemory(regs.Memory{Base: a.Base(), Size: uint64(a.Size()), First: rings.Bar0Bytes})
	w := regs.NewWindow(d.model, g.Mem)
	// Each interrupt first puts the vector's cause and the pending bits
	// into the window, for the handler to read.
	d.model.AttachVectors(w.Interrupts(out))
	w.Publish()
	d.mu.Lock()
	d.win = w
	d.mu.Unlock()
	return nil
}

// Doorbell serves the guest's doorbells: the window's scan on vector 0,
// a ring's doorbell on 1 + ring. Any number of rings since the last call
// is one scan or one kick: both are idempotent.
func (d *Device) Doorbell(g *Guest, v int, n uint64) {
	d.mu.Lock()
	w := d.win
	d.mu.Unlock()
	switch {
	case w == nil:
	case v == VecRegisters:
		d.scans.Add(n)
		d.refused.Add(uint64(len(w.Changed())))
	case v >= VecRing(0) && v < VecRing(rings.Bar0Rings):
		if w.Doorbell(v-VecRing(0)) != rings.ErrNone {
			d.refused.Add(1)
		}
	default:
		d.badVectors.Add(n)
	}
}

// Detach resets the device (stopping the NIC if it ran) and forgets the
// guest's memory and vectors, ready for the next guest.
func (d *Device) Detach(g *Guest) {
	// QEMU closing the socket is the guest's end, orderly or not: a
	// device still enabled then is counted as a host gone.
	d.model.Detach(true)
	d.mu.Lock()
	d.win, d.arena = nil, nil
	d.mu.Unlock()
}

// backend builds and stops the NIC for the register model.
type backend struct{ d *Device }

func (b backend) Start(s regs.Setup) (rings.Doorbell, error) {
	door, err := b.start(s)
	if err != nil {
		b.d.logf("ivshmem: enable refused: %v", err)
	}
	return door, err
}

func (b backend) start(s regs.Setup) (rings.Doorbell, error) {
	d := b.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.arena == nil {
		return nil, fmt.Errorf("ivshmem: no guest attached")
	}
	if d.cfg.OpenPort == nil {
		return nil, fmt.Errorf("ivshmem: the device has no port")
	}
	p, err := d.cfg.OpenPort()
	if err != nil {
		return nil, fmt.Errorf("port: %w", err)
	}
	cfg := d.cfg.NIC
	if s.ModUsecs != 0 {
		cfg.IntrDelay = time.Duration(s.ModUsecs) * time.Microsecond
	}
	if s.ModCount != 0 {
		cfg.IntrCount = int(s.ModCount)
	}
	if d.cfg.NewTracer != nil {
		cfg.Tracer = d.cfg.NewTracer()
	}
	cfg.CounterArea, cfg.CounterAreaLen = s.CounterBase, int(s.CounterLen)
	cfg.Withheld = s.Withheld() // what the driver did not ask for is refused
	dev, err := nic.New(cfg, d.arena, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	if err := dev.Start(s.Rings, s.Vectors); err != nil {
		dev.Stop()
		return nil, err
	}
	d.dev = dev
	d.logf("ivshmem: device enabled: MAC %x, MTU %d, rings %+v", cfg.MAC, dev.MTU(), s.Rings)
	return dev.Doorbell(), nil
}

func (b backend) Stop() {
	d := b.d
	d.mu.Lock()
	dev := d.dev
	d.dev = nil
	d.mu.Unlock()
	if dev != nil {
		dev.Stop() // closes the port too
		d.logf("ivshmem: device stopped")
	}
}
