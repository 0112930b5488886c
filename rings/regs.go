package rings

import "fmt"

// The device's register-level interface as both sides see it: what the
// driver programs into the ring registers, the interrupt lines it hands
// the device, and the rings' mechanics counters. The host driver is
// written against these and the device implements them; neither side
// needs the other's Go types.

// RingConfig is what the host driver programs into the device's ring
// registers: where each ring lives in host memory.
type RingConfig struct {
	Command Layout // host → device, 64-byte entries
	Notify  Layout // device → host, 32-byte entries
	Tx      Layout // host → device, 32-byte descriptors
	Rx      Layout // host → device, 32-byte descriptors (legacy buffers)
}

// Validate checks entry sizes and geometry.
func (rc RingConfig) Validate() error {
	for _, r := range []struct {
		name string
		l    Layout
		size uint32
	}{
		{"command", rc.Command, CommandEntrySize},
		{"notification", rc.Notify, NotificationEntrySize},
		{"transmit", rc.Tx, TxDescSize},
		{"receive", rc.Rx, RxDescSize},
	} {
		if err := r.l.Validate(); err != nil {
			return fmt.Errorf("%s ring: %w", r.name, err)
		}
		if r.l.EntrySize != r.size {
			return fmt.Errorf("%s ring: entry size %d, want %d", r.name, r.l.EntrySize, r.size)
		}
	}
	return nil
}

// Vectors are the device's interrupt lines (MSI-X vectors): one per kind of
// event, so each host waiter has its own and no wake-up is stolen. A nil
// vector is never raised.
type Vectors struct {
	Notify  Doorbell // notifications published while the host sleeps
	TxSpace Doorbell // transmit slots released while the host waits for space
	Command Doorbell // command completions while the host waits for them
}

// RingCounters are the mechanics counters of the four rings as seen by the
// device.
type RingCounters struct {
	Command, Notify, Tx, Rx RingStats
}

// Ring is the counters of the ring at place r of the counter area.
func (c *RingCounters) Ring(r AreaRing) *RingStats {
	switch r {
	case AreaRingCommand:
		return &c.Command
	case AreaRingNotify:
		return &c.Notify
	case AreaRingTx:
		return &c.Tx
	default:
		return &c.Rx
	}
}

// counters is the table from ring counter IDs to RingStats' fields.
func (s *RingStats) counters() [RingCounterCount]*uint64 {
	return [...]*uint64{
		RingCtrEntries:    &s.Entries,
		RingCtrPublishes:  &s.Publishes,
		RingCtrKicks:      &s.Kicks,
		RingCtrSuppressed: &s.Suppressed,
		RingCtrFull:       &s.Full,
		RingCtrParks:      &s.Parks,
		RingCtrPhaseErrs:  &s.PhaseErrs,
	}
}

// Get is the counter id (0 for an ID this version does not know).
func (s *RingStats) Get(id RingCounterID) uint64 {
	if id >= RingCounterCount {
		return 0
	}
	return *s.counters()[id]
}

// Set sets the counter id (an ID this version does not know, a newer
// device's, is ignored).
func (s *RingStats) Set(id RingCounterID, v uint64) {
	if id < RingCounterCount {
		*s.counters()[id] = v
	}
}

// DefaultConnTable is the size of the device's delegation table when its
// configuration does not say (the engine's default): the connection
// indices a host may use, 0 to DefaultConnTable-1.
const DefaultConnTable = 10000
