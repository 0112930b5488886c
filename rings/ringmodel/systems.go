package ringmodel

import "fmt"

// Config is the size of a standard system: one ring, one producer, one
// consumer.
type Config struct {
	Count   uint32 // ring entries
	Entries uint32 // entries produced in all: more than Count exercises the phase wrap
	Base    uint32 // initial PI and CI (near 1<<32 crosses the u32 wrap)
	PBatch  uint32 // producer: publish every PBatch entries
	PBurst  uint32 // producer: entries reserved at once; command ring: commands per batch
	CBatch  uint32 // consumer: release every CBatch entries
	CBurst  uint32 // consumer: most entries taken at once
	Spin    int    // polls before parking, both sides
	// IdleFlush explores the transmit producer publishing (or not) after
	// every burst.
	IdleFlush bool
	// Faults of the producing and consuming agents.
	ProducerFaults, ConsumerFaults Fault
	// LossyBells makes every doorbell drop kicks nobody waits for.
	LossyBells bool
}

func (c Config) String() string {
	s := fmt.Sprintf("count=%d entries=%d pbatch=%d pburst=%d cbatch=%d cburst=%d spin=%d",
		c.Count, c.Entries, c.PBatch, c.PBurst, c.CBatch, c.CBurst, c.Spin)
	if c.Base != 0 {
		s += fmt.Sprintf(" base=%#x", c.Base)
	}
	if c.IdleFlush {
		s += " idleflush"
	}
	if c.ProducerFaults != 0 {
		s += " producer:" + c.ProducerFaults.String()
	}
	if c.ConsumerFaults != 0 {
		s += " consumer:" + c.ConsumerFaults.String()
	}
	if c.LossyBells {
		s += " lossy"
	}
	return s
}

func (c Config) ring(name string, command bool) []RingSpec {
	return []RingSpec{{Name: name, Count: c.Count, Entries: c.Entries, Base: c.Base, Command: command}}
}

func (c Config) bells(names ...string) []BellSpec {
	b := make([]BellSpec, len(names))
	for i, n := range names {
		b[i] = BellSpec{Name: n, Lossy: c.LossyBells}
	}
	return b
}

// Doorbells of the standard systems.
const (
	bellDevice = 0 // the device's doorbell register (host → device)
	bellHost   = 1 // the host's interrupt vector for this ring (device → host)
)

// TxRing is the transmit ring: the host producing descriptors
// (Driver.WritePackets; on a full ring waitTxSpace and Producer.WaitSpace,
// woken by the TxSpace vector) and the device consuming them (serviceTx:
// Burst, PopN releasing every CBatch; idle: release, poll, NEED_WAKEUP,
// re-check, sleep on its doorbell).
func TxRing(c Config) *System {
	return &System{
		Name:  "tx " + c.String(),
		Rings: c.ring("tx", false),
		Bells: c.bells("doorbell", "txspace"),
		Agents: []*Program{
			Producer("host", ProducerOpts{Ring: 0, Kick: bellDevice, Wake: bellHost, Batch: c.PBatch, Burst: c.PBurst,
				Spin: c.Spin, IdleFlush: c.IdleFlush, Faults: c.ProducerFaults}),
			Consumer("device", ConsumerOpts{Ring: 0, Wake: bellDevice, Kick: bellHost, Batch: c.CBatch, Burst: c.CBurst,
				Spin: c.Spin, Faults: c.ConsumerFaults}),
		},
	}
}

// NotifyRing is the notification ring: the device producing with interrupt
// moderation (NotifyProducer; it publishes every PBatch by itself) and the
// host's interrupt handler consuming (Burst, PopN, Release after every
// burst, Park on the interrupt vector). The host kicks the device's
// doorbell when it releases space the device waits for.
func NotifyRing(c Config) *System {
	return &System{
		Name:  "notify " + c.String(),
		Rings: c.ring("ntf", false),
		Bells: c.bells("doorbell", "irq"),
		Agents: []*Program{
			NotifyProducer("device", NotifyOpts{Ring: 0, Interrupt: bellHost, Wake: bellDevice, Batch: c.PBatch,
				Spin: c.Spin, Faults: c.ProducerFaults}),
			Consumer("host", ConsumerOpts{Ring: 0, Wake: bellHost, Kick: bellDevice, Batch: c.CBatch, Burst: c.CBurst,
				Spin: c.Spin, ReleaseEachBurst: true, Faults: c.ConsumerFaults}),
		},
	}
}

// CommandRing is the command ring: the host submitting batches of PBurst
// commands (the driver's command path: commit, publish, wait for each DONE
// with NEED_WAKEUP in the producer flags and the Command vector, read the
// status back; on a full ring it waits for space the same way) and the
// device executing them (Peek, Complete in place, Pop releasing every
// CBatch; idle: release, poll, NEED_WAKEUP, re-check, sleep).
func CommandRing(c Config) *System {
	return &System{
		Name:  "command " + c.String(),
		Rings: c.ring("cmd", true),
		Bells: c.bells("doorbell", "cmddone"),
		Agents: []*Program{
			Producer("host", ProducerOpts{Ring: 0, Kick: bellDevice, Wake: bellHost, Batch: c.PBatch, Burst: c.PBurst,
				Spin: c.Spin, Completions: true, Faults: c.ProducerFaults}),
			Consumer("device", ConsumerOpts{Ring: 0, Wake: bellDevice, Kick: bellHost, Batch: c.CBatch, Burst: 1,
				Spin: c.Spin, Complete: true, Faults: c.ConsumerFaults}),
		},
	}
}

// DeviceRings is the device's park across rings: the host transmitting on
// one ring (as TxRing's host) and submitting commands on another (as
// CommandRing's host, Entries/2 commands), both kicking the device's one
// doorbell, and the device servicing both (Device): after idle passes it
// releases both, sets NEED_WAKEUP on both, re-checks both and sleeps.
func DeviceRings(c Config) *System {
	cmd := c.Entries/2 + 1
	return &System{
		Name: "device " + c.String(),
		Rings: []RingSpec{
			{Name: "tx", Count: c.Count, Entries: c.Entries, Base: c.Base},
			{Name: "cmd", Count: c.Count, Entries: cmd, Base: c.Base, Command: true},
		},
		Bells: c.bells("doorbell", "txspace", "cmddone"),
		Agents: []*Program{
			Producer("tx", ProducerOpts{Ring: 0, Kick: bellDevice, Wake: 1, Batch: c.PBatch, Burst: c.PBurst,
				Spin: c.Spin, IdleFlush: c.IdleFlush, Faults: c.ProducerFaults}),
			Producer("cmd", ProducerOpts{Ring: 1, Kick: bellDevice, Wake: 2, Batch: c.PBatch, Burst: c.PBurst,
				Spin: c.Spin, Completions: true, Faults: c.ProducerFaults}),
			Device("device", DeviceOpts{Rings: []DeviceRing{
				{Ring: 1, Kick: 2, Batch: 1, Complete: true},
				{Ring: 0, Kick: 1, Batch: c.CBatch},
			}, Wake: bellDevice, Spin: c.Spin, Faults: c.ConsumerFaults}),
		},
	}
}
