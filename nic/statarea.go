package nic

import (
	"fmt"
	"sort"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/rings"
)

// The counter publication area (rings/statarea.go): the host registers it
// with STATS + StatsFlagPublish, and the unit rewrites it at every idle
// point with everything it counts, so a host reads the device's counters
// from its own memory (in process or not) as a driver reads a NIC's
// statistics DMA, and never calls into the device.

var (
	engineCounterN = mustCounterFields[delegation.Counters]()
	qpCounterN     = mustCounterFields[iwarp.QPStats]()
	ringCounterN   = mustCounterFields[rings.RingStats]()
)

func mustCounterFields[T any]() int {
	n, err := rings.CounterFields[T]()
	if err != nil {
		panic(err)
	}
	return n
}

func init() {
	if ringCounterN != rings.RingCounterCount {
		panic(fmt.Sprintf("nic: rings.RingStats has %d counters, the area holds %d", ringCounterN, rings.RingCounterCount))
	}
}

// StatAreaLayout is this device's area layout.
func StatAreaLayout() rings.StatAreaLayout {
	return rings.StatAreaLayout{EngineN: engineCounterN, OccN: OccupancyWords, QPN: qpCounterN}
}

// OccupancyWords is how many words the engine's occupancy takes in the
// area: delegation.Occupancy's fields, in order.
const OccupancyWords = 7

// PutOccupancy and GetOccupancy are the occupancy's words.
func PutOccupancy(o delegation.Occupancy) [OccupancyWords]uint64 {
	return [OccupancyWords]uint64{uint64(o.Conns), uint64(o.ControlSlabs), uint64(o.TimeWait), uint64(o.TimeWaitSlab),
		uint64(o.Timers), uint64(o.Pending), uint64(o.OOOPagesUsed)}
}

func GetOccupancy(w [OccupancyWords]uint64) delegation.Occupancy {
	return delegation.Occupancy{Conns: int(w[0]), ControlSlabs: int(w[1]), TimeWait: int(w[2]), TimeWaitSlab: int(w[3]),
		Timers: int(w[4]), Pending: int(w[5]), OOOPagesUsed: int(w[6])}
}

type statArea struct {
	addr  rings.Addr
	n     int
	qpCap int
	gen   uint64
	qpIdx []uint32 // scratch: QP indices in order
	// flags is the header's flags word as last published (Flags and
	// NumQPs), for unparkStats.
	flags uint64
}

// setStatArea executes STATS with StatsFlagPublish: Addr/Len is the area
// (Len 0 stops publishing). The area is written at once, so the host can
// read it as soon as the command completes.
func (d *Device) setStatArea(ce rings.CommandEntry) (rings.Status, uint64) {
	n := int(ce.Len())
	if n == 0 {
		d.area = nil
		return rings.StatusOK, 0
	}
	lay := StatAreaLayout()
	if n < lay.MinSize() || ce.Addr()%8 != 0 {
		return rings.StatusBadParam, 0
	}
	if err := rings.Check(d.mem, ce.Addr(), n); err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress, 0
	}
	d.area = &statArea{addr: ce.Addr(), n: n, qpCap: lay.QPCap(n)}
	d.publishStats(d.parked.Load())
	return rings.StatusOK, uint64(n)
}

// areaMem maps the counter area (d.area, not nil); a mapping that fails
// stops the publishing, counted as a DMA error.
func (d *Device) areaMem() []byte {
	b, err := rings.MapOut(d.mem, d.area.addr, d.area.n)
	if err != nil {
		d.count(rings.StatDMAErrors)
		d.area = nil
		return nil
	}
	return b
}

// unparkStats withdraws the area's StatAreaParked as the unit wakes, before
// it does anything: a reader that finds the flag takes the copy for
// everything the unit has done, and the unit publishes again only at its
// next idle point, which with Config.IdleYield can be that much later.
// The flags word alone is rewritten, outside the sequence lock: a reader
// whose copy holds the flag read it before the unit woke.
func (d *Device) unparkStats() {
	a := d.area
	if a == nil || a.flags&rings.StatAreaParked == 0 {
		return
	}
	b := d.areaMem()
	if b == nil {
		return
	}
	a.flags &^= rings.StatAreaParked
	rings.AtomicStore64(b, rings.SaOffFlags, a.flags)
	rings.Wrote(d.mem, a.addr+rings.SaOffFlags, b[rings.SaOffFlags:rings.SaOffFlags+8])
}

// publishStats rewrites the area (unit goroutine only). Nothing here
// allocates: it runs at every idle point.
func (d *Device) publishStats(parking bool) {
	a := d.area
	if a == nil {
		return
	}
	b := d.areaMem()
	if b == nil {
		return
	}
	lay := StatAreaLayout()
	a.gen++ // odd: writing
	rings.AtomicStore64(b, rings.SaOffGen, 2*a.gen-1)
	var flags uint64
	if parking {
		flags = rings.StatAreaParked
	}
	a.qpIdx = a.qpIdx[:0]
	for idx := range d.rdma.qps {
		a.qpIdx = append(a.qpIdx, idx)
	}
	sort.Slice(a.qpIdx, func(i, j int) bool { return a.qpIdx[i] < a.qpIdx[j] })
	nqp := min(len(a.qpIdx), a.qpCap)
	a.flags = flags | uint64(nqp)<<32
	rings.AtomicStore64(b, rings.SaOffFlags, a.flags)
	rings.AtomicStore64(b, rings.SaOffEngineN, uint64(lay.EngineN)|uint64(a.qpCap)<<32)
	rings.AtomicStore64(b, rings.SaOffRingN, uint64(rings.RingCounterCount)|uint64(lay.QPN)<<32)
	rings.AtomicStore64(b, rings.SaOffOccN, uint64(lay.OccN)) // with the first reserved word
	for off := rings.SaOffOccN + 8; off < rings.StatAreaHeaderSize; off += 8 {
		rings.AtomicStore64(b, off, 0)
	}
	for i := range d.stats {
		rings.AtomicStore64(b, rings.StatAreaStatsOff+8*i, d.stats[i].Load())
	}
	off := lay.RingsOff()
	rs := [rings.StatAreaRings]rings.RingStats{d.cmd.Stats(), d.notify.Stats(), d.tx.Stats(), d.rx.Stats()}
	for i := range rs {
		for _, v := range rings.U64s(&rs[i]) {
			rings.AtomicStore64(b, off, v)
			off += 8
		}
	}
	ec := d.eng.Counters()
	for _, v := range rings.U64s(&ec) {
		rings.AtomicStore64(b, off, v)
		off += 8
	}
	for _, v := range PutOccupancy(d.eng.Occupancy()) {
		rings.AtomicStore64(b, off, v)
		off += 8
	}
	for i, idx := range a.qpIdx[:nqp] {
		off = lay.QPOff(i)
		rings.AtomicStore64(b, off, uint64(idx))
		st := d.rdma.qps[idx].qp.Stats()
		off += rings.QPRecordHeader
		for _, v := range rings.U64s(&st) {
			rings.AtomicStore64(b, off, v)
			off += 8
		}
	}
	rings.AtomicStore64(b, rings.SaOffGen, 2*a.gen) // even: stable
	rings.Wrote(d.mem, a.addr, b)
}
