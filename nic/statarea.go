package nic

import (
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

// The device's side of the counter IDs (rings/counterid.go): an explicit
// table from each Go counter struct to the IDs, so the area's layout is
// the IDs' and never these structs' field order. A counter added to the
// engine or a QP gets the next ID in rings and a row here;
// TestCounterTablesCoverEveryField fails on a field without one.

// engineCounterWords is the engine's counters by EngineCounterID.
func engineCounterWords(c *delegation.Counters) [rings.EngineCounterCount]uint64 {
	return [...]uint64{
		rings.EngRxSegments:         c.RxSegments,
		rings.EngRxLRO:              c.RxLRO,
		rings.EngRxBytes:            c.RxBytes,
		rings.EngTxSegments:         c.TxSegments,
		rings.EngTxBytes:            c.TxBytes,
		rings.EngTxRetransSegs:      c.TxRetransSegs,
		rings.EngTxRetransByte:      c.TxRetransByte,
		rings.EngTxErrors:           c.TxErrors,
		rings.EngAcksSent:           c.AcksSent,
		rings.EngDropNoConn:         c.DropNoConn,
		rings.EngDropBadIP:          c.DropBadIP,
		rings.EngDropFragment:       c.DropFragment,
		rings.EngDropShort:          c.DropShort,
		rings.EngDropBadOffset:      c.DropBadOffset,
		rings.EngDropBadOptions:     c.DropBadOptions,
		rings.EngDropBadChecksum:    c.DropBadChecksum,
		rings.EngDropTupleMismatch:  c.DropTupleMismatch,
		rings.EngDropClosed:         c.DropClosed,
		rings.EngDropOutOfWindow:    c.DropOutOfWindow,
		rings.EngDropPAWS:           c.DropPAWS,
		rings.EngDropNoTimestamp:    c.DropNoTimestamp,
		rings.EngDropNoAck:          c.DropNoAck,
		rings.EngDropAckUnsent:      c.DropAckUnsent,
		rings.EngDropAckTooOld:      c.DropAckTooOld,
		rings.EngDropDataAfterFin:   c.DropDataAfterFin,
		rings.EngDropNoBuffer:       c.DropNoBuffer,
		rings.EngDropBackpressure:   c.DropBackpressure,
		rings.EngDropTimeWait:       c.DropTimeWait,
		rings.EngOOOSegments:        c.OOOSegments,
		rings.EngOOOBytesDropped:    c.OOOBytesDropped,
		rings.EngOOODropRanges:      c.OOODropRanges,
		rings.EngOOOBytesRestored:   c.OOOBytesRestored,
		rings.EngRstAccepted:        c.RstAccepted,
		rings.EngRstOutOfWindow:     c.RstOutOfWindow,
		rings.EngChallengeAcks:      c.ChallengeAcks,
		rings.EngChallengeLimited:   c.ChallengeLimited,
		rings.EngSynReceived:        c.SynReceived,
		rings.EngDupAcksRx:          c.DupAcksRx,
		rings.EngFastRetransmits:    c.FastRetransmits,
		rings.EngPartialAcks:        c.PartialAcks,
		rings.EngRTOExpired:         c.RTOExpired,
		rings.EngTimeouts:           c.Timeouts,
		rings.EngPersistProbes:      c.PersistProbes,
		rings.EngKeepaliveProbes:    c.KeepaliveProbes,
		rings.EngDelayedAcks:        c.DelayedAcks,
		rings.EngZeroWindowsSent:    c.ZeroWindowsSent,
		rings.EngRTTSamples:         c.RTTSamples,
		rings.EngLegacyUploads:      c.LegacyUploads,
		rings.EngUserBufsDone:       c.UserBufsDone,
		rings.EngNotifyFull:         c.NotifyFull,
		rings.EngNotifyPosted:       c.NotifyPosted,
		rings.EngNotifyCoalesced:    c.NotifyCoalesced,
		rings.EngDMAErrors:          c.DMAErrors,
		rings.EngTimeWaitEntered:    c.TimeWaitEntered,
		rings.EngTimeWaitExpired:    c.TimeWaitExpired,
		rings.EngTimeWaitOverflow:   c.TimeWaitOverflow,
		rings.EngTimeWaitReopened:   c.TimeWaitReopened,
		rings.EngULPPulled:          c.ULPPulled,
		rings.EngULPHeld:            c.ULPHeld,
		rings.EngULPHoldFull:        c.ULPHoldFull,
		rings.EngTSOFrames:          c.TSOFrames,
		rings.EngTailLossProbes:     c.TailLossProbes,
		rings.EngSpuriousTimeouts:   c.SpuriousTimeouts,
		rings.EngLostRetransmits:    c.LostRetransmits,
		rings.EngSpuriousRecoveries: c.SpuriousRecoveries,
		rings.EngRACKLost:           c.RACKLost,
		rings.EngRACKTimeouts:       c.RACKTimeouts,
		rings.EngSACKRecoveries:     c.SACKRecoveries,
	}
}

// occupancyWords is the engine's occupancy by OccupancyID.
func occupancyWords(c *delegation.Occupancy) [rings.OccupancyWords]uint64 {
	return [...]uint64{
		rings.OccConns:        uint64(c.Conns),
		rings.OccControlSlabs: uint64(c.ControlSlabs),
		rings.OccTimeWait:     uint64(c.TimeWait),
		rings.OccTimeWaitSlab: uint64(c.TimeWaitSlab),
		rings.OccTimers:       uint64(c.Timers),
		rings.OccPending:      uint64(c.Pending),
		rings.OccOOOPagesUsed: uint64(c.OOOPagesUsed),
	}
}

// qpCounterWords is a QP's counters by QPCounterID.
func qpCounterWords(c *iwarp.QPStats) [rings.QPCounterCount]uint64 {
	return [...]uint64{
		rings.QPCtrRxFPDUs:           c.RxFPDUs,
		rings.QPCtrTxFPDUs:           c.TxFPDUs,
		rings.QPCtrRxBytes:           c.RxBytes,
		rings.QPCtrTxBytes:           c.TxBytes,
		rings.QPCtrPlaced:            c.Placed,
		rings.QPCtrSourced:           c.Sourced,
		rings.QPCtrRxMessages:        c.RxMessages,
		rings.QPCtrCRCErrors:         c.CRCErrors,
		rings.QPCtrTerminatesSent:    c.TerminatesSent,
		rings.QPCtrTerminatesRecv:    c.TerminatesRecv,
		rings.QPCtrDiscardedBytes:    c.DiscardedBytes,
		rings.QPCtrBadHostEntries:    c.BadHostEntries,
		rings.QPCtrCompletionsLost:   c.CompletionsLost,
		rings.QPCtrFlushedWRs:        c.FlushedWRs,
		rings.QPCtrReadRequestsRecv:  c.ReadRequestsRecv,
		rings.QPCtrReadResponsesSent: c.ReadResponsesSent,
		rings.QPCtrMPAFailures:       c.MPAFailures,
		rings.QPCtrIRDORDAdjusted:    c.IRDORDAdjusted,
		rings.QPCtrRTRsSent:          c.RTRsSent,
		rings.QPCtrRTRsRecv:          c.RTRsRecv,
	}
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
	lay := rings.CounterAreaLayout
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
	lay := rings.CounterAreaLayout
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
	rs := rings.RingCounters{Command: d.cmd.Stats(), Notify: d.notify.Stats(), Tx: d.tx.Stats(), Rx: d.rx.Stats()}
	for r := range rings.AreaRing(rings.StatAreaRings) {
		st := rs.Ring(r)
		for id := range rings.RingCounterID(rings.RingCounterCount) {
			rings.AtomicStore64(b, lay.Ring(r, id), st.Get(id))
		}
	}
	ec := d.eng.Counters()
	for id, v := range engineCounterWords(&ec) {
		rings.AtomicStore64(b, lay.Engine(rings.EngineCounterID(id)), v)
	}
	occ := d.eng.Occupancy()
	for id, v := range occupancyWords(&occ) {
		rings.AtomicStore64(b, lay.Occupancy(rings.OccupancyID(id)), v)
	}
	for i, idx := range a.qpIdx[:nqp] {
		rings.AtomicStore64(b, lay.QPOff(i), uint64(idx))
		st := d.rdma.qps[idx].qp.Stats()
		for id, v := range qpCounterWords(&st) {
			rings.AtomicStore64(b, lay.QP(i, rings.QPCounterID(id)), v)
		}
	}
	rings.AtomicStore64(b, rings.SaOffGen, 2*a.gen) // even: stable
	rings.Wrote(d.mem, a.addr, b)
}
