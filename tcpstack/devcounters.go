package tcpstack

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/rings"
)

// DeviceCounters is everything the device counts, as it published it in
// the host's counter area (rings/statarea.go) at its last idle point.
type DeviceCounters struct {
	// Gen is the publication's number; it grows with every publication.
	Gen uint64
	// Parked: the unit published it as it went to sleep, so it covers
	// everything the unit did before.
	Parked bool
	Stats  [rings.NumStats]uint64 // the stat block, by StatID
	Rings  nic.RingCounters
	Engine delegation.Counters
	// Occupancy is the engine's: indices taken, TIME_WAIT records, timers.
	Occupancy delegation.Occupancy
	// QPs are the QPs' counters by QP index (the area holds up to
	// QPCap of them; QPsTruncated says when there were more).
	QPs          map[uint32]iwarp.QPStats
	QPsTruncated bool
}

// Stat is one counter of the stat block.
func (c *DeviceCounters) Stat(id rings.StatID) uint64 { return c.Stats[id] }

// statAreaQPs is room for this many QPs' counters in the area.
const statAreaQPs = 256

// registerStatArea allocates the counter area in host memory and has the
// device publish there (STATS with StatsFlagPublish).
func (h *Host) registerStatArea() error {
	lay := nic.StatAreaLayout()
	n := lay.QPOff(statAreaQPs)
	addr, err := h.Mem.Alloc(n, rings.CacheLine)
	if err != nil {
		return fmt.Errorf("counter area: %w", err)
	}
	area, err := h.Mem.Map(addr, n)
	if err != nil {
		return err
	}
	clear(area)
	r, err := h.Driver.Command(rings.Command{Opcode: rings.OpStats, Flags: rings.StatsFlagPublish, Conn: rings.NoConn,
		Addr: addr, Len: uint32(n)}, 5*time.Second)
	if err != nil {
		return fmt.Errorf("counter area: STATS: %w", err)
	}
	if r.Status != rings.StatusOK {
		return fmt.Errorf("counter area: STATS: %v", r.Status)
	}
	h.area, h.areaCopy = area, make([]byte, n)
	return nil
}

// Counters reads the device's counters from the host's counter area: a
// consistent copy of the device's last publication (made at its last idle
// point). CountersSettled says whether that covers everything so far.
func (h *Host) Counters() (DeviceCounters, error) {
	var c DeviceCounters
	h.areaMu.Lock()
	defer h.areaMu.Unlock()
	if h.area == nil {
		return c, fmt.Errorf("tcpstack: the host has no counter area")
	}
	hdr, err := rings.ReadStatArea(h.area, h.areaCopy)
	if err != nil {
		return c, err
	}
	lay := nic.StatAreaLayout()
	if int(hdr.EngineN) != lay.EngineN || int(hdr.QPN) != lay.QPN || hdr.RingN != rings.RingCounterCount || int(hdr.OccN) != lay.OccN {
		return c, fmt.Errorf("tcpstack: the device publishes %d engine, %d occupancy, %d QP and %d ring counters; this host knows %d, %d, %d and %d",
			hdr.EngineN, hdr.OccN, hdr.QPN, hdr.RingN, lay.EngineN, lay.OccN, lay.QPN, rings.RingCounterCount)
	}
	b := h.areaCopy
	c.Gen, c.Parked = hdr.Gen, hdr.Flags&rings.StatAreaParked != 0
	get := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	for i := range c.Stats {
		c.Stats[i] = get(rings.StatAreaStatsOff + 8*i)
	}
	off := lay.RingsOff()
	for _, r := range []*rings.RingStats{&c.Rings.Command, &c.Rings.Notify, &c.Rings.Tx, &c.Rings.Rx} {
		for i := range rings.U64s(r) {
			rings.U64s(r)[i] = get(off)
			off += 8
		}
	}
	for i := range rings.U64s(&c.Engine) {
		rings.U64s(&c.Engine)[i] = get(off)
		off += 8
	}
	var occ [nic.OccupancyWords]uint64
	for i := range occ {
		occ[i] = get(off)
		off += 8
	}
	c.Occupancy = nic.GetOccupancy(occ)
	nqp := min(int(hdr.NumQPs), lay.QPCap(len(b)))
	c.QPsTruncated = nqp >= statAreaQPs
	if nqp > 0 {
		c.QPs = make(map[uint32]iwarp.QPStats, nqp)
	}
	for i := range nqp {
		off = lay.QPOff(i)
		idx := uint32(get(off))
		var st iwarp.QPStats
		off += rings.QPRecordHeader
		for j := range rings.U64s(&st) {
			rings.U64s(&st)[j] = get(off)
			off += 8
		}
		c.QPs[idx] = st
	}
	return c, nil
}

// CountersSettled tells whether the device's published counters cover
// everything it did before the call: it published as it parked, or has
// published since gen (a value from an earlier call). It returns the
// current publication number for the next call.
func (h *Host) CountersSettled(gen uint64) (settled bool, now uint64) {
	c, err := h.Counters()
	if err != nil {
		return false, gen
	}
	return c.Parked || c.Gen > gen, c.Gen
}
