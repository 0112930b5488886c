package tcpstack

import (
	"encoding/binary"
	"fmt"
	"time"

	"github.com/emunic/emunic/rings"
)

// DeviceCounters is everything the device counts, as it published it in
// the host's counter area (rings/statarea.go) at its last idle point,
// decoded by counter ID (rings/counterid.go) into the host's own types:
// the host reads the device's counters as a driver reads a NIC's, through
// the ABI, and never through the device's Go types.
type DeviceCounters struct {
	// Gen is the publication's number; it grows with every publication.
	Gen uint64
	// Parked: the unit published it as it went to sleep, so it covers
	// everything the unit did before.
	Parked bool
	Stats  [rings.NumStats]uint64 // the stat block, by StatID
	Rings  rings.RingCounters
	Engine EngineCounters
	// Occupancy is the engine's: indices taken, TIME_WAIT records, timers.
	Occupancy EngineOccupancy
	// QPs are the QPs' counters by QP index (the area holds up to
	// QPCap of them; QPsTruncated says when there were more).
	QPs          map[uint32]QPCounters
	QPsTruncated bool
}

// EngineCounters are the delegated TCP engine's counters as the host reads
// them (rings.EngineCounterID documents each).
type EngineCounters struct {
	RxSegments         uint64 // segments that passed the header and checksum checks (a super-frame: the segments it stands for)
	RxLRO              uint64 // super-frames taken whole (InputSegmentLRO)
	RxBytes            uint64 // payload bytes accepted in order (placed in host memory)
	TxSegments         uint64 // frames transmitted
	TxBytes            uint64 // payload bytes transmitted, retransmissions included
	TxRetransSegs      uint64 // data/FIN segments sent again
	TxRetransByte      uint64 // payload bytes sent again
	TxErrors           uint64 // Env.Transmit failed (counted as lost)
	AcksSent           uint64 // pure ACKs (no data), window updates and challenge ACKs included
	DropNoConn         uint64 // Input for an index that is not delegated
	DropBadIP          uint64 // IPv4 header not version 4 / bad IHL / not TCP / bad length
	DropFragment       uint64 // IPv4 fragment (the engine never reassembles)
	DropShort          uint64 // segment shorter than a TCP header or than the IP length says
	DropBadOffset      uint64 // TCP data offset < 5 or past the segment
	DropBadOptions     uint64 // malformed TCP option lengths
	DropBadChecksum    uint64 // TCP checksum wrong
	DropTupleMismatch  uint64 // addresses/ports are not the connection's
	DropClosed         uint64 // segment for a connection already CLOSED (awaiting release)
	DropOutOfWindow    uint64 // RFC 9293 acceptability test failed (ACKed, never accepted)
	DropPAWS           uint64 // RFC 7323 PAWS: TSval older than TS.Recent
	DropNoTimestamp    uint64 // timestamps negotiated but the segment has none
	DropNoAck          uint64 // ACK flag off on a synchronized connection
	DropAckUnsent      uint64 // ACK for data never sent (answered with an ACK)
	DropAckTooOld      uint64 // ACK below SND.UNA - MAX.SND.WND (RFC 5961 §5)
	DropDataAfterFin   uint64 // payload past the peer's FIN
	DropNoBuffer       uint64 // in-order payload with no user buffer and no legacy buffer
	DropBackpressure   uint64 // payload refused because notifications are backed up
	DropTimeWait       uint64 // segments absorbed in TIME_WAIT
	OOOSegments        uint64 // out-of-order segments queued
	OOOBytesDropped    uint64 // out-of-order bytes refused: over OOOLimit or slab exhausted
	OOODropRanges      uint64 // out-of-order segments refused: too many holes
	OOOBytesRestored   uint64 // bytes delivered from the out-of-order queue after a hole filled
	RstAccepted        uint64 // RST with SEG.SEQ == RCV.NXT
	RstOutOfWindow     uint64 // RST outside the window (ignored)
	ChallengeAcks      uint64 // RFC 5961 challenge ACKs sent (in-window RST, SYN, old ACK)
	ChallengeLimited   uint64 // challenge ACKs suppressed by the rate limit
	SynReceived        uint64 // SYN on a synchronized connection
	DupAcksRx          uint64 // duplicate ACKs received
	FastRetransmits    uint64 // fast retransmit / recovery entered
	PartialAcks        uint64 // NewReno partial ACKs
	RTOExpired         uint64 // retransmission timer expirations
	Timeouts           uint64 // connections given up after MaxRetries or keepalive
	PersistProbes      uint64 // zero-window probes
	KeepaliveProbes    uint64 // keepalive probes
	DelayedAcks        uint64 // ACKs sent by the delayed-ACK timer
	ZeroWindowsSent    uint64 // ACKs advertising a zero window
	RTTSamples         uint64 // RTT samples taken
	LegacyUploads      uint64 // legacy buffers filled
	UserBufsDone       uint64 // user buffers completed
	NotifyFull         uint64 // Env.Notify returned false (notification queued for retry)
	NotifyPosted       uint64 // notifications accepted by Env.Notify
	NotifyCoalesced    uint64 // notifications merged into a pending one
	DMAErrors          uint64 // host memory accesses that faulted
	TimeWaitEntered    uint64 // connections that entered TIME_WAIT (moved to a record, index released)
	TimeWaitExpired    uint64 // TIME_WAIT records that ran out
	TimeWaitOverflow   uint64 // TIME_WAIT records dropped early because MaxTimeWait were in use
	TimeWaitReopened   uint64 // TIME_WAIT records ended by a newer SYN (RFC 6191), which went to the host
	ULPPulled          uint64 // bytes ULPs wrote into their retransmission buffers (Transmit)
	ULPHeld            uint64 // in-order bytes a ULP did not take at once, held and offered again
	ULPHoldFull        uint64 // in-order bytes refused because a ULP's hold was full (never expected: the window covers it)
	TSOFrames          uint64 // super-frames handed to a port that segments TCP (TSOEnv); each counts once in TxSegments
	TailLossProbes     uint64 // tail loss probes sent (RFC 8985 §7)
	SpuriousTimeouts   uint64 // RTOs a D-SACK showed needless (RFC 2883 §5): the congestion state was restored
	LostRetransmits    uint64 // heads resent again in recovery: their retransmission brought no ACK in a probe timeout (RFC 8985 §6.2's lost retransmission)
	SpuriousRecoveries uint64 // fast recoveries undone: D-SACKs showed every retransmission needless (RFC 2883 §5)
	RACKLost           uint64 // ranges RACK marked lost (RFC 8985: sent before a delivered one, the reordering window passed)
	RACKTimeouts       uint64 // reordering timer expiries that found a loss
	SACKRecoveries     uint64 // recoveries entered on SACK evidence before three duplicate ACKs (RACK, rack.go)
}

// EngineOccupancy is how much of its tables the engine uses
// (rings.OccupancyID).
type EngineOccupancy struct {
	Conns        int // indices taken (delegated, closed but not yet released)
	ControlSlabs int // indices that have a control block allocated (grown to, reused)
	TimeWait     int // 4-tuples in TIME_WAIT
	TimeWaitSlab int // TIME_WAIT records allocated (grown to, reused)
	Timers       int // connections with a timer armed
	Pending      int // connections with notifications waiting for ring space
	OOOPagesUsed int // out-of-order slab pages held
}

// QPCounters are one QP's counters (rings.QPCounterID).
type QPCounters struct {
	RxFPDUs           uint64 // FPDUs received
	TxFPDUs           uint64 // FPDUs sent
	RxBytes           uint64 // stream bytes, MPA frames included
	TxBytes           uint64 // stream bytes, MPA frames included
	Placed            uint64 // payload bytes written to host memory
	Sourced           uint64 // payload bytes read from host memory
	RxMessages        uint64 // completed inbound messages of every opcode
	CRCErrors         uint64 // FPDUs with a wrong MPA CRC
	TerminatesSent    uint64 // Terminate messages sent
	TerminatesRecv    uint64 // Terminate messages received
	DiscardedBytes    uint64 // received after the QP stopped processing
	BadHostEntries    uint64 // ring entries with a wrong phase or an impossible index
	CompletionsLost   uint64 // CQ overruns
	FlushedWRs        uint64 // work requests completed in flush
	ReadRequestsRecv  uint64 // RDMA Read Requests received
	ReadResponsesSent uint64 // RDMA Read Responses sent
	MPAFailures       uint64 // MPA negotiations that failed here: bad frame, reject sent or received
	IRDORDAdjusted    uint64 // a peer's IRD/ORD we answered with other values (0, or more than we hold)
	RTRsSent          uint64 // peer-to-peer ready-to-receive messages sent (initiator)
	RTRsRecv          uint64 // and received (responder)
}

// decodeEngine is the host's table from engine counter IDs to its fields.
func decodeEngine(w *[rings.EngineCounterCount]uint64) EngineCounters {
	return EngineCounters{
		RxSegments:         w[rings.EngRxSegments],
		RxLRO:              w[rings.EngRxLRO],
		RxBytes:            w[rings.EngRxBytes],
		TxSegments:         w[rings.EngTxSegments],
		TxBytes:            w[rings.EngTxBytes],
		TxRetransSegs:      w[rings.EngTxRetransSegs],
		TxRetransByte:      w[rings.EngTxRetransByte],
		TxErrors:           w[rings.EngTxErrors],
		AcksSent:           w[rings.EngAcksSent],
		DropNoConn:         w[rings.EngDropNoConn],
		DropBadIP:          w[rings.EngDropBadIP],
		DropFragment:       w[rings.EngDropFragment],
		DropShort:          w[rings.EngDropShort],
		DropBadOffset:      w[rings.EngDropBadOffset],
		DropBadOptions:     w[rings.EngDropBadOptions],
		DropBadChecksum:    w[rings.EngDropBadChecksum],
		DropTupleMismatch:  w[rings.EngDropTupleMismatch],
		DropClosed:         w[rings.EngDropClosed],
		DropOutOfWindow:    w[rings.EngDropOutOfWindow],
		DropPAWS:           w[rings.EngDropPAWS],
		DropNoTimestamp:    w[rings.EngDropNoTimestamp],
		DropNoAck:          w[rings.EngDropNoAck],
		DropAckUnsent:      w[rings.EngDropAckUnsent],
		DropAckTooOld:      w[rings.EngDropAckTooOld],
		DropDataAfterFin:   w[rings.EngDropDataAfterFin],
		DropNoBuffer:       w[rings.EngDropNoBuffer],
		DropBackpressure:   w[rings.EngDropBackpressure],
		DropTimeWait:       w[rings.EngDropTimeWait],
		OOOSegments:        w[rings.EngOOOSegments],
		OOOBytesDropped:    w[rings.EngOOOBytesDropped],
		OOODropRanges:      w[rings.EngOOODropRanges],
		OOOBytesRestored:   w[rings.EngOOOBytesRestored],
		RstAccepted:        w[rings.EngRstAccepted],
		RstOutOfWindow:     w[rings.EngRstOutOfWindow],
		ChallengeAcks:      w[rings.EngChallengeAcks],
		ChallengeLimited:   w[rings.EngChallengeLimited],
		SynReceived:        w[rings.EngSynReceived],
		DupAcksRx:          w[rings.EngDupAcksRx],
		FastRetransmits:    w[rings.EngFastRetransmits],
		PartialAcks:        w[rings.EngPartialAcks],
		RTOExpired:         w[rings.EngRTOExpired],
		Timeouts:           w[rings.EngTimeouts],
		PersistProbes:      w[rings.EngPersistProbes],
		KeepaliveProbes:    w[rings.EngKeepaliveProbes],
		DelayedAcks:        w[rings.EngDelayedAcks],
		ZeroWindowsSent:    w[rings.EngZeroWindowsSent],
		RTTSamples:         w[rings.EngRTTSamples],
		LegacyUploads:      w[rings.EngLegacyUploads],
		UserBufsDone:       w[rings.EngUserBufsDone],
		NotifyFull:         w[rings.EngNotifyFull],
		NotifyPosted:       w[rings.EngNotifyPosted],
		NotifyCoalesced:    w[rings.EngNotifyCoalesced],
		DMAErrors:          w[rings.EngDMAErrors],
		TimeWaitEntered:    w[rings.EngTimeWaitEntered],
		TimeWaitExpired:    w[rings.EngTimeWaitExpired],
		TimeWaitOverflow:   w[rings.EngTimeWaitOverflow],
		TimeWaitReopened:   w[rings.EngTimeWaitReopened],
		ULPPulled:          w[rings.EngULPPulled],
		ULPHeld:            w[rings.EngULPHeld],
		ULPHoldFull:        w[rings.EngULPHoldFull],
		TSOFrames:          w[rings.EngTSOFrames],
		TailLossProbes:     w[rings.EngTailLossProbes],
		SpuriousTimeouts:   w[rings.EngSpuriousTimeouts],
		LostRetransmits:    w[rings.EngLostRetransmits],
		SpuriousRecoveries: w[rings.EngSpuriousRecoveries],
		RACKLost:           w[rings.EngRACKLost],
		RACKTimeouts:       w[rings.EngRACKTimeouts],
		SACKRecoveries:     w[rings.EngSACKRecoveries],
	}
}

// decodeOccupancy is the host's table from occupancy IDs to its fields.
func decodeOccupancy(w *[rings.OccupancyWords]uint64) EngineOccupancy {
	return EngineOccupancy{
		Conns:        int(w[rings.OccConns]),
		ControlSlabs: int(w[rings.OccControlSlabs]),
		TimeWait:     int(w[rings.OccTimeWait]),
		TimeWaitSlab: int(w[rings.OccTimeWaitSlab]),
		Timers:       int(w[rings.OccTimers]),
		Pending:      int(w[rings.OccPending]),
		OOOPagesUsed: int(w[rings.OccOOOPagesUsed]),
	}
}

// decodeQP is the host's table from QP counter IDs to its fields.
func decodeQP(w *[rings.QPCounterCount]uint64) QPCounters {
	return QPCounters{
		RxFPDUs:           w[rings.QPCtrRxFPDUs],
		TxFPDUs:           w[rings.QPCtrTxFPDUs],
		RxBytes:           w[rings.QPCtrRxBytes],
		TxBytes:           w[rings.QPCtrTxBytes],
		Placed:            w[rings.QPCtrPlaced],
		Sourced:           w[rings.QPCtrSourced],
		RxMessages:        w[rings.QPCtrRxMessages],
		CRCErrors:         w[rings.QPCtrCRCErrors],
		TerminatesSent:    w[rings.QPCtrTerminatesSent],
		TerminatesRecv:    w[rings.QPCtrTerminatesRecv],
		DiscardedBytes:    w[rings.QPCtrDiscardedBytes],
		BadHostEntries:    w[rings.QPCtrBadHostEntries],
		CompletionsLost:   w[rings.QPCtrCompletionsLost],
		FlushedWRs:        w[rings.QPCtrFlushedWRs],
		ReadRequestsRecv:  w[rings.QPCtrReadRequestsRecv],
		ReadResponsesSent: w[rings.QPCtrReadResponsesSent],
		MPAFailures:       w[rings.QPCtrMPAFailures],
		IRDORDAdjusted:    w[rings.QPCtrIRDORDAdjusted],
		RTRsSent:          w[rings.QPCtrRTRsSent],
		RTRsRecv:          w[rings.QPCtrRTRsRecv],
	}
}

// Stat is one counter of the stat block.
func (c *DeviceCounters) Stat(id rings.StatID) uint64 { return c.Stats[id] }

// statAreaQPs is room for this many QPs' counters in the area.
const statAreaQPs = 256

// registerStatArea allocates the counter area in host memory and has the
// device publish there (STATS with StatsFlagPublish).
func (h *Host) registerStatArea() error {
	n := rings.CounterAreaLayout.QPOff(statAreaQPs)
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
	if hdr.RingN != rings.RingCounterCount {
		return c, fmt.Errorf("tcpstack: the device publishes %d counters per ring; this host knows %d", hdr.RingN, rings.RingCounterCount)
	}
	// Every counter is found by its ID in the layout the header gives: an
	// ID this device does not publish (an older one) reads zero, and
	// counters it adds past the IDs this host knows are skipped.
	lay := rings.LayoutOf(hdr)
	b := h.areaCopy
	if lay.MinSize() > len(b) {
		return c, fmt.Errorf("tcpstack: the device publishes %d bytes of counters; the area has %d", lay.MinSize(), len(b))
	}
	c.Gen, c.Parked = hdr.Gen, hdr.Flags&rings.StatAreaParked != 0
	get := func(off int) uint64 { return binary.LittleEndian.Uint64(b[off:]) }
	for id := range c.Stats {
		c.Stats[id] = get(rings.StatID(id).Offset() + rings.StatAreaStatsOff)
	}
	for r := range rings.AreaRing(rings.StatAreaRings) {
		st := c.Rings.Ring(r)
		for id := range rings.RingCounterID(rings.RingCounterCount) {
			st.Set(id, get(lay.Ring(r, id)))
		}
	}
	var eng [rings.EngineCounterCount]uint64
	for id := range min(len(eng), lay.EngineN) {
		eng[id] = get(lay.Engine(rings.EngineCounterID(id)))
	}
	c.Engine = decodeEngine(&eng)
	var occ [rings.OccupancyWords]uint64
	for id := range min(len(occ), lay.OccN) {
		occ[id] = get(lay.Occupancy(rings.OccupancyID(id)))
	}
	c.Occupancy = decodeOccupancy(&occ)
	nqp := min(int(hdr.NumQPs), lay.QPCap(len(b)))
	c.QPsTruncated = nqp >= statAreaQPs
	if nqp > 0 {
		c.QPs = make(map[uint32]QPCounters, nqp)
	}
	for i := range nqp {
		var st [rings.QPCounterCount]uint64
		for id := range min(len(st), lay.QPN) {
			st[id] = get(lay.QP(i, rings.QPCounterID(id)))
		}
		c.QPs[uint32(get(lay.QPOff(i)))] = decodeQP(&st)
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
