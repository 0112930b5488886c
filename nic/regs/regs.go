// Package regs is the device's register block (BAR0, docs/bar0.md) as a
// state machine that any transport drives: the split socket transport
// turns REG_READ and REG_WRITE messages into Read32 and Write32, and the
// ivshmem transport turns the register window's changes into the same
// calls. The model holds every register, checks each access, counts every
// refusal, and starts and stops the device behind it (a Backend) as the
// driver enables, disables and resets it.
package regs

import (
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
)

// Backend is the device behind the registers.
type Backend interface {
	// Start builds the device on s and starts it; the doorbell it returns
	// is what a ring's doorbell register rings from then on.
	Start(s Setup) (rings.Doorbell, error)
	// Stop stops the device Start started; it returns once the device
	// neither reads shared memory nor raises a vector any more.
	Stop()
}

// Setup is what an enable hands the backend, checked.
type Setup struct {
	Rings       rings.RingConfig
	Vectors     rings.Vectors // the model's vector gates (cause, mask, pending), nil in polling mode
	Features    rings.Bar0Feature
	ModUsecs    uint32 // notification vector moderation, 0: the device's default
	ModCount    uint32
	CounterBase rings.Addr // the counter area, CounterLen 0: none
	CounterLen  uint32
}

// Withheld is the device's features the driver did not write to
// RegDrvFeatures: the device refuses their use (nic.Config.Withheld).
func (s Setup) Withheld() rings.Bar0Feature { return rings.Bar0Features &^ s.Features }

// Ident is what the identification registers report of the device.
type Ident struct {
	MAC [6]byte
	MTU int
}

// Memory is the shared memory a transport attached.
type Memory struct {
	Base  rings.Addr // DMA address of its first byte
	Size  uint64     // bytes
	First uint32     // bytes at the start that are not for rings (the ivshmem register window)
}

// Model is the register block of one device.
type Model struct {
	be Backend

	mu      sync.Mutex
	devFeat uint32 // RegDevFeatures: Bar0Features less what the transport withholds
	id      Ident
	mem     Memory
	memOK   bool
	vecOK   bool
	drvFeat uint32
	enabled bool
	failed  bool
	errCode rings.Bar0ErrCode
	errOff  uint32
	ctrArea [3]uint32 // RegCounterLo, Hi, Len
	ring    [rings.Bar0Rings][3]uint32
	mod     [rings.Bar0Vectors][2]uint32
	msix    [rings.Bar0Vectors][3]uint32
	// startErr is the backend's reason when the last enable failed in
	// Start, for the transport's log and reply.
	startErr error

	gates [rings.Bar0Vectors]gate
	door  atomic.Pointer[bell] // the running device's doorbell, nil while disabled
	ctr   [rings.Bar0RegCounters]atomic.Uint32
}

type bell struct {
	d rings.Doorbell
	// rdma is the running device's RDMA doorbells when the driver
	// negotiated FeatQPDoorbell and the device has them, else nil.
	rdma RDMADoorbells
}

// RDMADoorbells is what a device behind RegQPDoorbell and RegCQArm does
// with them. The doorbell Backend.Start returns implements it when the
// device has them; each call is posted (it queues the doorbell for the
// device's loop and returns) and reports false for a QP or CQ that does
// not exist, which the model refuses with ErrNoDoorbell.
type RDMADoorbells = rings.RDMADoorbell

// New makes a model, disabled with every register at its reset value,
// with no memory and no vectors attached.
func New(be Backend) *Model {
	m := &Model{be: be, devFeat: uint32(rings.Bar0Features)}
	for i := range m.gates {
		m.gates[i].m = m
	}
	return m
}

// Withhold takes features from RegDevFeatures: those the transport cannot
// carry (the ivshmem window withholds FeatQPDoorbell). A driver's write
// of one is then refused as a feature the device lacks.
func (m *Model) Withhold(f rings.Bar0Feature) {
	m.mu.Lock()
	m.devFeat &^= uint32(f)
	m.mu.Unlock()
}

// SetIdent sets what the identification registers report.
func (m *Model) SetIdent(id Ident) {
	m.mu.Lock()
	m.id = id
	m.mu.Unlock()
}

// AttachMemory gives the device its shared memory.
func (m *Model) AttachMemory(mem Memory) {
	m.mu.Lock()
	m.mem, m.memOK = mem, true
	m.mu.Unlock()
}

// AttachVectors gives the device its interrupt delivery: out[v] is raised
// for vector v when the model lets it through (nil: never, as in polling
// mode, where both sides poll).
func (m *Model) AttachVectors(out [rings.Bar0Vectors]rings.Doorbell) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for i := range m.gates {
		var b *bell
		if out[i] != nil {
			b = &bell{d: out[i]}
		}
		m.gates[i].out.Store(b)
	}
	m.vecOK = true
}

// Detach is the end of a host's attachment: the device is reset and
// forgets the memory and the vectors, ready for the next attach. gone says
// the host vanished (its socket closed, its process died) rather than
// detaching in order; it is counted when the device was running.
func (m *Model) Detach(gone bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if gone && m.enabled {
		m.count(rings.RegCtrHostGone)
	}
	m.reset()
	m.memOK, m.vecOK = false, false
	for i := range m.gates {
		m.gates[i].out.Store(nil)
	}
}

// Enabled reports whether the device runs.
func (m *Model) Enabled() bool { return m.door.Load() != nil }

// StartErr is the backend's error when the last enable failed to start
// the device (ErrEnableFailed with memory and vectors attached), else nil.
func (m *Model) StartErr() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.startErr
}

// Counter is register access counter id.
func (m *Model) Counter(id rings.RegCounterID) uint32 {
	if id >= rings.Bar0RegCounters {
		return 0
	}
	return m.ctr[id].Load()
}

func (m *Model) count(id rings.RegCounterID) { m.ctr[id].Add(1) }

// refuse records a refused access (mu held).
func (m *Model) refuse(off uint32, e rings.Bar0ErrCode) rings.Bar0ErrCode {
	m.errCode, m.errOff = e, off
	m.count(rings.Bar0ErrCounter(e))
	return e
}

// Error is a refused access as an error.
type Error struct {
	Off  uint32
	Code rings.Bar0ErrCode
}

func (e *Error) Error() string { return fmt.Sprintf("register %#x: %v", e.Off, e.Code) }

// Doorbell is ring r's doorbell register as a rings.Doorbell, for a
// transport that binds a cheaper signal to it (an eventfd): a Kick is a
// write of the register, without the lock on the accepted path.
func (m *Model) Doorbell(r int) rings.Doorbell { return ringBell{m, r} }

type ringBell struct {
	m *Model
	r int
}

func (b ringBell) Kick() { b.m.ringDoorbell(b.r) }

// ringDoorbell rings ring r: every ring is set up while the device is
// enabled, so a running device's doorbell is the whole check.
func (m *Model) ringDoorbell(r int) rings.Bar0ErrCode {
	if d := m.door.Load(); d != nil {
		d.d.Kick()
		return rings.ErrNone
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refuse(rings.Bar0Ring(r, rings.RingRegDoorbell), rings.ErrNoDoorbell)
}

// gate is one vector between the device and the transport: it records the
// cause, and holds a raise while the vector is masked.
type gate struct {
	m   *Model
	st  atomic.Uint32 // gateCause | gateMasked | gatePending
	out atomic.Pointer[bell]
}

const (
	gateCause   = 1 << 0
	gateMasked  = 1 << 1
	gatePending = 1 << 2
)

// Kick implements rings.Doorbell: the device raises the vector.
func (g *gate) Kick() {
	for {
		s := g.st.Load()
		if s&gateMasked == 0 {
			if s&gateCause == 0 && !g.st.CompareAndSwap(s, s|gateCause) {
				continue
			}
			g.deliver()
			return
		}
		if g.st.CompareAndSwap(s, s|gateCause|gatePending) {
			g.m.count(rings.RegCtrMaskedRaises)
			return
		}
	}
}

func (g *gate) deliver() {
	if b := g.out.Load(); b != nil {
		b.d.Kick()
		g.m.count(rings.RegCtrInterrupts)
	}
}

// setMask masks or unmasks; an unmask delivers a pending raise.
func (g *gate) setMask(on bool) {
	for {
		s := g.st.Load()
		ns := s &^ (gateMasked | gatePending)
		if on {
			ns = s | gateMasked
		}
		if g.st.CompareAndSwap(s, ns) {
			if !on && s&gatePending != 0 {
				g.deliver()
			}
			return
		}
	}
}

func (g *gate) clearCause() {
	for {
		s := g.st.Load()
		if g.st.CompareAndSwap(s, s&^gateCause) {
			return
		}
	}
}

// rdmaDoorbell writes RegQPDoorbell or RegCQArm (off): without the lock
// on the accepted path, as a ring's doorbell. It is refused with
// ErrBadValue for a reserved bit, and with ErrNoDoorbell while the device
// is disabled, without FeatQPDoorbell negotiated, or for a QP or CQ the
// device does not have.
func (m *Model) rdmaDoorbell(off, v uint32) rings.Bar0ErrCode {
	e := rings.ErrNoDoorbell
	if d := m.door.Load(); d != nil && d.rdma != nil {
		ok := false
		switch {
		case off == rings.RegQPDoorbell && v&^rings.Bar0QPNMask != 0,
			off == rings.RegCQArm && v&^(rings.Bar0CQNumMask|rings.Bar0CQArmFlags) != 0:
			e = rings.ErrBadValue
		case off == rings.RegQPDoorbell:
			ok = d.rdma.QPDoorbell(v)
		default:
			ok = d.rdma.ArmCQ(v&rings.Bar0CQNumMask, (v&rings.Bar0CQArmFlags)>>rings.Bar0CQArmShift)
		}
		if ok {
			return rings.ErrNone
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.refuse(off, e)
}
