package nic

import (
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/rings"
)

// The device's counters: the stat block (registers the unit and the MAC
// count into), and the copies of the unit's private counters (rings,
// engine, QPs) it publishes at its idle points for other goroutines.

// Stat reads one counter of the stat block (a register read).
func (d *Device) Stat(id rings.StatID) uint64 { return d.stats[id].Load() }

// Stats returns a copy of the stat block.
func (d *Device) Stats() rings.StatBlock {
	b := make(rings.StatBlock, rings.StatBlockSize)
	d.fillStats(b)
	return b
}

func (d *Device) fillStats(b rings.StatBlock) {
	for i := range d.stats {
		b.Set(rings.StatID(i), d.stats[i].Load())
	}
}

// RingCounters returns the ring mechanics counters as of the unit's last
// idle point (they are the unit's private state; it publishes a copy).
func (d *Device) RingCounters() RingCounters {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	return d.ringSnap
}

func (d *Device) count(id rings.StatID) { d.stats[id].Add(1) }

func (d *Device) snapshot() {
	d.snapMu.Lock()
	d.ringSnap = RingCounters{Command: d.cmd.Stats(), Notify: d.notify.Stats(), Tx: d.tx.Stats(), Rx: d.rx.Stats()}
	d.engSnap = d.eng.Counters()
	d.engOcc = d.eng.Occupancy()
	if len(d.rdma.qps) > 0 || len(d.qpSnap) > 0 {
		d.qpSnap = make(map[uint32]iwarp.QPStats, len(d.rdma.qps))
		for idx, q := range d.rdma.qps {
			d.qpSnap[idx] = q.qp.Stats()
		}
	}
	d.snapGen++
	d.snapMu.Unlock()
}

// CountersSettled tells a reader of the published counters (RingCounters,
// EngineCounters, QPStats) whether they cover everything the unit did
// before the call: it is parked (it snapshots before it parks), or it has
// published a snapshot since gen, a value this method returned earlier.
// It returns the current snapshot generation for the next call. The unit
// publishes at idle points only, so a reader that sees the copies stop
// changing may be reading ones the unit has not refreshed yet (it can be
// busy, or not scheduled, for milliseconds).
func (d *Device) CountersSettled(gen uint64) (settled bool, now uint64) {
	d.snapMu.Lock()
	now = d.snapGen
	d.snapMu.Unlock()
	return d.parked.Load() || now > gen, now
}
