// Package nic is the device side of emunic: the offload unit that drains
// the command and transmit rings, receives from its port, runs timers,
// posts notifications and raises moderated interrupts. It touches host
// memory only through rings.DMA and never imports the host side.
package nic

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// Config is the device's fixed configuration (what the EEPROM and straps
// would give a real card).
type Config struct {
	MAC [6]byte
	// MTU is the largest IP packet; frames are MTU plus the 14-byte
	// Ethernet header. Default 1500.
	MTU int
	// RxFIFODepth is the number of frames the receive FIFO between the port
	// and the unit holds. Default 1024.
	RxFIFODepth int
	// IntrCount and IntrDelay moderate interrupts: while the unit is busy it
	// raises an interrupt once IntrCount notifications are pending or the
	// oldest has waited IntrDelay, and always before it parks. Defaults 32
	// and 50µs.
	IntrCount int
	IntrDelay time.Duration
	// SpinPolls is how many idle passes the unit makes before it parks.
	// Default 64.
	SpinPolls int
	// IdleYield, when positive, is how long the unit goes on polling after
	// its SpinPolls passes, handing the CPU to the operating system between
	// passes (sched_yield), before it parks. It is for a device in a
	// process of its own on CPUs it shares with its host (split mode): a
	// park costs both sides a system call and a thread wake-up when the
	// host next rings, while a yield costs little and runs whichever other
	// thread wants the CPU first. Zero or negative: no yielding (the default;
	// a split device's server sets split.DefaultIdleYieldMicros).
	IdleYield time.Duration
	// Burst is the most entries taken from one source per pass, so no ring
	// starves another. Default 64.
	Burst int
	// DropWhenFull makes the MAC drop frames when the receive FIFO is full
	// (a NIC without flow control). By default it pauses instead, as an
	// 802.3x PAUSE would: frames queue on the wire, which drops (and
	// counts) only when its own queue overflows.
	DropWhenFull bool
	// RxBufferWait is how long a received frame waits at the head of the
	// FIFO for the host to post a legacy buffer before it is dropped
	// (counted as rx_drop_no_buffer). Default 1 ms; bounded so a host that
	// stops posting cannot stall delegated flows behind it for longer.
	RxBufferWait time.Duration
	// Engine configures the delegated TCP engine (connection table size,
	// timers, buffer limits).
	Engine delegation.Config
	// NoLRO turns off large receive offload. By default a port that hands
	// over TCP super-frames whole (port.LROReader: a TAP with offloads)
	// gets a receive FIFO of a few super-frame slots (lroFIFODepth),
	// and a super-frame of a delegated flow goes to the engine as one
	// segment: its payload placed in one pass, its segments counted for
	// the ACKs. A super-frame of any other flow is cut into its wire
	// segments in the unit and goes on as they would have.
	NoLRO bool

	// Tracer, when set, sees everything that crosses the device's
	// boundary (package trace records and replays with it): it wraps host
	// memory, the port and the interrupt vectors, and the unit runs in
	// steps it is told of. The unit then keeps NEED_WAKEUP set on every
	// ring it consumes (each publish rings the doorbell), so that what a
	// step does depends only on what the host published, never on when
	// the unit happened to be spinning. The port must be a PollPort.
	Tracer Tracer `json:"-"`
	// VLAN puts the device on an 802.1Q VLAN, 1-4094 (0: none, the
	// default): it takes only frames tagged with this VLAN ID, strips the
	// tag on receive and inserts it on transmit (vlan.go; docs/rings.md
	// "VLANs").
	VLAN uint16 `json:",omitempty"`
	// CounterArea and CounterAreaLen register the counter publication
	// area from the start, as STATS with StatsFlagPublish does once the
	// device runs: for a driver that programs it through the register
	// block (rings.RegCounterLo/Hi/Len, nic/regs) rather than by command.
	// It is configuration, not a later call, so that a trace's device
	// record carries it and a replay publishes to the same place.
	// CounterAreaLen 0: none.
	CounterArea    rings.Addr `json:",omitempty"`
	CounterAreaLen int        `json:",omitempty"`
	// Withheld are the BAR0 features the driver did not negotiate
	// (rings.Bar0Features not in its RegDrvFeatures, nic/regs): the
	// device refuses their use, as a chip gates what the driver did not
	// ask for (features.go). 0, the default, withholds nothing: a host
	// that sets the device up without the register block uses it all.
	// Configuration, so that a trace's device record carries it.
	Withheld rings.Bar0Feature `json:",omitempty"`

	// Manual starts no goroutine: the unit runs only when Step is called
	// (a replayer, or a harness with a virtual clock, drives it).
	Manual bool
	// STagSeed seeds the memory table's STag keys (0: a random seed), so
	// that a recorded run's keys come back in its replay.
	STagSeed uint64
}

// Tracer is the device's side of a trace recorder or replayer.
type Tracer interface {
	// Attach is told the device's configuration (defaults applied) and
	// interposes on host memory and the port; WrapVectors on the
	// interrupt lines. The memory should be a rings.TracedDMA, the port a
	// PollPort.
	Attach(cfg Config, mem rings.DMA, p port.Port) (rings.DMA, port.Port)
	WrapVectors(Vectors) Vectors
	// Step is called at the start of every step of the unit.
	Step(s StepInfo)
}

// StepInfo describes one step of a traced unit.
type StepInfo struct {
	N        uint64 // steps so far, this one included
	Now      int64  // the device clock for the whole step, ns
	Doorbell bool   // the host rang the doorbell since the last step
	Parked   bool   // the unit slept before this step
	Stop     bool   // the final step: the device is stopping
	// Bells is the RDMA doorbells (RegQPDoorbell, RegCQArm) the step
	// takes, taken before Step is called: a recorder records them, and a
	// replayer sets them to the recorded step's (the host's stores are
	// inputs, as its ring indices are).
	Bells *[]RegBell
}

func (c *Config) setDefaults() {
	if c.MTU == 0 {
		c.MTU = 1500
	}
	if c.RxFIFODepth == 0 {
		c.RxFIFODepth = 1024
	}
	if c.IntrCount == 0 {
		c.IntrCount = 32
	}
	if c.IntrDelay == 0 {
		c.IntrDelay = 50 * time.Microsecond
	}
	if c.SpinPolls == 0 {
		c.SpinPolls = 64
	}
	if c.Burst == 0 {
		c.Burst = 64
	}
	if c.RxBufferWait == 0 {
		c.RxBufferWait = time.Millisecond
	}
}

// RingConfig, Vectors and RingCounters are the register-level types the
// host driver and the device share; they live in rings, beside the ring
// ABI, so the host never imports this package.
type (
	RingConfig   = rings.RingConfig
	Vectors      = rings.Vectors
	RingCounters = rings.RingCounters
)

// Device is one emulated NIC.
type Device struct {
	cfg       Config
	mem       rings.DMA
	port      port.Port
	maxFrame  int
	injectBuf []byte // RX_INJECT's copy of the host's frame (unit goroutine)
	// gatedOps are the opcodes of the command families whose feature the
	// driver withheld (features.go), indexed by opcode: they complete
	// BAD_OPCODE. nil when the driver withheld none.
	gatedOps []bool

	rxUntagBuf []byte // the tag layer's untagged copy of a received frame (unit goroutine)
	txTagBuf   []byte // the tag layer's tagged copy of a frame to send (unit goroutine)

	bell *rings.Bell // the device's doorbell: host kicks and MAC wake-ups
	vec  Vectors

	cmd    *rings.Consumer
	notify *rings.Producer
	tx     *rings.Consumer
	rx     *rings.Consumer
	fifo   *rxFIFO
	eng    *delegation.Engine
	rdma   rdmaState
	bells  regBells  // the RDMA doorbell registers' pending sets (rdmabell.go)
	area   *statArea // the host's counter publication area, or nil
	timer  *time.Timer
	// fine is the timer for deadlines under fineTimerBelow (nil where
	// the platform has none): see hwtimer_linux.go.
	fine *fineTimer

	stats  [rings.NumStats]atomic.Uint64
	parked atomic.Bool

	poll       PollPort       // non-nil: the unit polls the port (no MAC goroutine)
	lro        port.LROReader // non-nil: the MAC takes super-frames whole (Config.NoLRO)
	lroSplit   port.Splitter  // the unit's cut of a super-frame of a flow the engine does not own
	macWaiting atomic.Bool    // the MAC waits for FIFO space (flow control)
	macBell    *rings.Bell
	// burst is the port when it wakes its far end once per burst
	// (port.BurstWriter): the unit flushes its wake-ups after every pass.
	burst port.BurstWriter
	// pollWake is the polled port when its writer wakes only a reader
	// that announced it parks (WakeupPort): the unit announces its parks.
	pollWake WakeupPort
	spill    []byte // drainBlocked's frame when the FIFO is full

	// rxStallSince is when the frame at the FIFO head started waiting for
	// a legacy buffer or notification space (0: not stalled).
	rxStallSince int64

	now int64 // device clock at the start of the current pass

	traced   bool        // cfg.Tracer set: the unit runs in steps
	steps    uint64      // steps run (traced)
	hostRang atomic.Bool // the host rang the doorbell (traced)

	// interrupt moderation
	intrPending int
	intrSince   int64

	phaseErrAt [4]uint32 // last index a phase error was counted at, per ring

	snapMu   sync.Mutex
	ringSnap RingCounters
	engSnap  delegation.Counters
	engOcc   delegation.Occupancy
	qpSnap   map[uint32]iwarp.QPStats
	snapGen  uint64 // snapshots taken

	started  bool
	stop     atomic.Bool
	wg       sync.WaitGroup
	stopOnce sync.Once
	runErr   error
}

// New makes a device on host memory mem attached to port p. It does nothing
// until Start.
func New(cfg Config, mem rings.DMA, p port.Port) (*Device, error) {
	cfg.setDefaults()
	if cfg.MTU < 68 || cfg.MTU > 65535 {
		return nil, fmt.Errorf("nic: MTU %d out of range [68, 65535]", cfg.MTU)
	}
	if cfg.VLAN >= hdr.VLANIDReserved {
		return nil, fmt.Errorf("nic: VLAN %d out of range [1, 4094] (0: none)", cfg.VLAN)
	}
	if mem == nil || p == nil {
		return nil, errors.New("nic: host memory and port are required")
	}
	d := &Device{cfg: cfg, mem: mem, port: p, maxFrame: cfg.MTU + EthHeaderLen, bell: rings.NewBell(), macBell: rings.NewBell()}
	if t := cfg.Tracer; t != nil {
		d.traced = true
		d.mem, d.port = t.Attach(cfg, mem, p)
		if _, ok := d.port.(PollPort); !ok {
			return nil, errors.New("nic: a traced device needs a port the unit can poll (the in-memory wire)")
		}
	} else if cfg.Manual {
		if _, ok := p.(PollPort); !ok {
			return nil, errors.New("nic: a manual device needs a port the unit can poll (the in-memory wire)")
		}
	}
	if cfg.CounterAreaLen != 0 {
		if err := d.setCounterArea(cfg.CounterArea, cfg.CounterAreaLen); err != nil {
			return nil, err
		}
	}
	if cfg.Withheld&^rings.Bar0Features != 0 {
		return nil, fmt.Errorf("nic: withheld features %#x: the device has no such feature", uint32(cfg.Withheld&^rings.Bar0Features))
	}
	d.gateFeatures(cfg.Withheld)
	return d, nil
}

// MTU returns the device's MTU.
func (d *Device) MTU() int { return d.cfg.MTU }

// TxChecksum reports whether the device fills in the checksums of legacy
// frames sent with rings.TxCsum (txcsum.go): false when the driver
// withheld FeatTxCsum.
func (d *Device) TxChecksum() bool { return d.cfg.Withheld&rings.FeatTxCsum == 0 }

// MAC returns the device's station address.
func (d *Device) MAC() [6]byte { return d.cfg.MAC }

// Doorbell is the register the host writes after publishing to a ring the
// device has said it sleeps on.
func (d *Device) Doorbell() rings.Doorbell { return hostDoorbell{d} }

// hostDoorbell is the doorbell register as the host sees it. The unit's
// bell also wakes it for frames from the port (the MAC kicks the bell
// directly); only the host's writes count as doorbells, each one that
// finds the unit parked.
type hostDoorbell struct{ d *Device }

// Kick implements rings.Doorbell.
func (h hostDoorbell) Kick() {
	if h.d.traced || h.d.cfg.Manual {
		// Counted by the step that sees it, so that a replay counts it
		// in the same step.
		h.d.hostRang.Store(true)
	} else if h.d.parked.Load() {
		h.d.count(rings.StatDoorbells)
	}
	h.d.bell.Kick()
}

// Start programs the ring registers and interrupt vectors and brings the
// offload unit up.
func (d *Device) Start(rc RingConfig, vec Vectors) error {
	if d.started {
		return errors.New("nic: already started")
	}
	if err := rc.Validate(); err != nil {
		return fmt.Errorf("nic: %w", err)
	}
	if d.cfg.Tracer != nil {
		vec = d.cfg.Tracer.WrapVectors(vec)
	}
	var err error
	// Consumers release in small batches: the host reuses slots only after
	// release, so a large batch would starve it; the device kicks the host
	// only when it said it is waiting for space.
	if d.cmd, err = rings.NewConsumer(d.mem, rc.Command, 1, vec.Command); err != nil {
		return fmt.Errorf("nic: command ring: %w", err)
	}
	if d.notify, err = rings.NewProducer(d.mem, rc.Notify, rc.Notify.Count, nil); err != nil {
		return fmt.Errorf("nic: notification ring: %w", err)
	}
	if d.tx, err = rings.NewConsumer(d.mem, rc.Tx, 16, vec.TxSpace); err != nil {
		return fmt.Errorf("nic: transmit ring: %w", err)
	}
	if d.rx, err = rings.NewConsumer(d.mem, rc.Rx, 16, nil); err != nil {
		return fmt.Errorf("nic: receive ring: %w", err)
	}
	d.vec = vec
	if lr, ok := d.port.(port.LROReader); ok && !d.cfg.NoLRO && !d.traced && !d.cfg.Manual && d.cfg.VLAN == 0 {
		if _, polled := d.port.(PollPort); !polled {
			d.lro = lr
		}
	}
	if d.lro != nil {
		depth := lroFIFODepth
		if d.cfg.DropWhenFull {
			depth = lroDropFIFODepth
		}
		d.fifo = newRxFIFO(min(d.cfg.RxFIFODepth, depth), port.LROBufferSize)
	} else {
		d.fifo = newRxFIFO(d.cfg.RxFIFODepth, d.vlanFrameSize())
	}
	d.eng = delegation.NewEngine(d.cfg.Engine, engineEnv{d})
	d.rdmaInit()
	d.timer = time.NewTimer(time.Hour)
	d.timer.Stop()
	d.started = true
	if d.traced || d.cfg.Manual {
		d.startStepped()
		return nil
	}
	if bw, ok := d.port.(port.BurstWriter); ok {
		// Every frame the unit writes in a pass goes out with one
		// wake-up of the far end at the pass's end, not one per frame
		// that finds it parked.
		bw.DeferWakeups()
		d.burst = bw
	}
	if pp, ok := d.port.(PollPort); ok {
		// The unit polls the port itself: no MAC goroutine in between.
		d.poll = pp
		d.pollWake, _ = pp.(WakeupPort)
		if bp, ok := pp.(BlockingPort); ok {
			bp.SetBlockedFunc(d.drainBlocked)
		}
		pp.SetReadableFunc(func() {
			if d.parked.Load() {
				d.bell.Kick()
			}
		})
		d.wg.Add(1)
	} else {
		d.wg.Add(2)
		go labelled("mac", d.mac)
	}
	d.fine = newFineTimer(d.bell.Kick)
	go labelled("unit", d.unit)
	return nil
}

// Stop halts the unit and the MAC and closes the port. Safe to call twice.
func (d *Device) Stop() error {
	if d.cfg.Manual {
		return d.StopAt(d.now)
	}
	d.stopOnce.Do(func() {
		d.stop.Store(true)
		d.bell.Kick()
		d.macBell.Kick()
		d.runErr = d.port.Close()
		d.wg.Wait()
		if d.fine != nil {
			d.fine.close()
		}
		if d.cfg.Tracer == nil {
			// The unit published its counters as it stopped, maybe
			// before the MAC counted the last frame the port handed
			// it: publish them again, now that both have stopped, so
			// the host's last read of the area agrees with the port.
			d.publishStats(true)
		}
	})
	return d.runErr
}
