package board

import (
	"errors"
	"net/netip"

	"github.com/emunic/emunic/board/lockstep"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// DefaultMinRTO is the minimum retransmission timeout NewHost gives the
// offload engine when HostConfig.Device.Engine.MinRTO is zero (ns).
const DefaultMinRTO = 20e6

// HostConfig describes one emulated machine: a NIC, its host memory and
// driver, and the netstack on top.
type HostConfig struct {
	MAC   [6]byte
	Addr  netip.Prefix
	MTU   int // default 1500
	Stack tcpstack.StackConfig
	// ArenaSize is host memory in bytes; 0 sizes it for the rings and
	// buffers plus 64 MiB for applications (tcpstack.MemorySize).
	ArenaSize int
	Device    nic.Config
	Driver    tcpstack.DriverConfig
	// Lockstep, when set, runs the device in manual mode under that
	// harness (package lockstep): stepped on its clock, in turn with the
	// other devices, while this host's goroutines are all blocked. For
	// deterministic runs; the device runs in this process.
	Lockstep *lockstep.Sched
	// Split, when set, runs the NIC in its own process (docs/split.md): host
	// memory is a memfd both map and the doorbell and vectors are eventfds.
	// Setting EMUNIC_SPLIT=1 in the environment does the same for every host
	// without one. Host.Device is then nil: the device's counters reach the
	// host by DMA (Host.Counters).
	Split *SplitConfig
}

// Host is one emulated machine: the host (memory, driver, netstack) and,
// when it is in this process, its NIC.
type Host struct {
	*tcpstack.Host
	// Device is the NIC when it runs in this process; nil when split.
	Device *nic.Device
	split  *splitDevice
}

// NewHost builds a machine on port p. Close stops everything, including p.
func NewHost(cfg HostConfig, p port.Port) (*Host, error) {
	if cfg.MTU == 0 {
		cfg.MTU = 1500
	}
	if cfg.ArenaSize == 0 {
		cfg.ArenaSize = tcpstack.MemorySize(cfg.MTU, cfg.Driver)
	}
	dc := cfg.Device
	dc.MAC, dc.MTU = cfg.MAC, cfg.MTU
	if dc.Engine.MinRTO == 0 {
		// The engine's own default is Linux's 200 ms. Emulated hosts talk
		// over sub-millisecond paths (the in-memory wire, a local TAP),
		// where a loss the duplicate ACKs cannot repair would otherwise
		// cost 200 ms each: 20 ms, as datacenter TCP stacks do, made a
		// 2%-loss transfer to the Linux kernel 7.5x faster.
		dc.Engine.MinRTO = DefaultMinRTO
	}
	if cfg.Lockstep != nil {
		dc.Manual = true
	}
	if cfg.Split == nil && cfg.Device.Tracer == nil && !dc.Manual && splitFromEnv() {
		// (A traced or manually stepped device runs in this process.)
		cfg.Split = &SplitConfig{}
	}
	hc := tcpstack.HostConfig{Addr: cfg.Addr, Stack: cfg.Stack, Driver: cfg.Driver}
	if cfg.Split != nil {
		if cfg.Device.Tracer != nil || dc.Manual {
			closePort(p)
			return nil, errors.New("board: a traced or manually stepped device runs in the host's process, not split")
		}
		sd, mem, err := newSplit(*cfg.Split, dc, cfg.ArenaSize, p)
		if err != nil {
			return nil, err
		}
		th, err := tcpstack.NewHost(hc, mem, sd)
		if err != nil {
			return nil, err
		}
		return &Host{Host: th, split: sd}, nil
	}
	mem, err := rings.NewArena(cfg.ArenaSize)
	if err != nil {
		closePort(p)
		return nil, err
	}
	dev, err := nic.New(dc, mem, p)
	if err != nil {
		closePort(p)
		return nil, err
	}
	// Never more connection indices than the device's table (what its
	// engine will be configured with when it starts).
	hc.ConnTable = connTable(dc)
	var d tcpstack.Device = dev
	if cfg.Lockstep != nil {
		ld := cfg.Lockstep.Device(dev)
		d = ld
		hc.Stepper = ld
		hc.Driver.Yield = func() { ld.Yield(0) }
		hc.Driver.Clock = cfg.Lockstep.Clock()
		hc.Stack.Clock = cfg.Lockstep.Clock()
	}
	th, err := tcpstack.NewHost(hc, mem, d)
	if err != nil {
		return nil, err
	}
	return &Host{Host: th, Device: dev}, nil
}

func closePort(p port.Port) {
	if p != nil {
		_ = p.Close()
	}
}

// connTable is the size of the delegation table of a device configured
// with dc: the engine's default when dc leaves it zero.
func connTable(dc nic.Config) int {
	if dc.Engine.MaxConns > 0 {
		return dc.Engine.MaxConns
	}
	return rings.DefaultConnTable
}
