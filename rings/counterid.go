package rings

import "strconv"

// Counter IDs: every counter the device publishes in the counter area
// (statarea.go) has a documented ID, as the stat block's StatID, and sits
// at the offset its ID gives (StatAreaLayout's Ring, Engine, Occupancy and
// QP). The IDs are the ABI: a reader in any language (the C header has
// them) finds a counter by ID, never by the order of some Go struct, so a
// counter added to the device gets the next ID and moves no other. Each
// group's count in the area's header says how many IDs this device
// publishes; a reader takes an ID past it as zero.
//
// The IDs are frozen: a counter that goes keeps its ID (reading zero),
// and a new one is added at the end of its group.

// RingCounterID is a ring's mechanics counter (RingStats).
type RingCounterID uint32

// EngineCounterID is a counter of the delegated TCP engine.
type EngineCounterID uint32

// OccupancyID is a word of the engine's occupancy (how much of its tables
// is in use).
type OccupancyID uint32

// QPCounterID is a counter of a QP record.
type QPCounterID uint32

// AreaRing is a ring's place in the area's ring counters.
type AreaRing uint32

const (
	AreaRingCommand AreaRing = 0 // the command ring
	AreaRingNotify  AreaRing = 1 // the notification ring
	AreaRingTx      AreaRing = 2 // the transmit ring
	AreaRingRx      AreaRing = 3 // the receive ring
)

// The number of IDs of each group this device publishes (the area's
// EngineN, OccN and QPN; RingCounterCount is RingN).
const (
	EngineCounterCount = 68 // engine counters
	OccupancyWords     = 7  // occupancy words
	QPCounterCount     = 20 // counters per QP record
)

// The ring counters (RingStats), per ring.
const (
	RingCtrEntries    RingCounterID = 0 // entries produced or consumed
	RingCtrPublishes  RingCounterID = 1 // index stores made visible to the peer
	RingCtrKicks      RingCounterID = 2 // doorbells rung because the peer was parked
	RingCtrSuppressed RingCounterID = 3 // publishes that needed no doorbell
	RingCtrFull       RingCounterID = 4 // producer found no space
	RingCtrParks      RingCounterID = 5 // this side went to sleep
	RingCtrPhaseErrs  RingCounterID = 6 // entries with the wrong phase tag (protocol violation)
)

var ringCounterIDNames = [...]string{
	RingCtrEntries:    "entries",
	RingCtrPublishes:  "publishes",
	RingCtrKicks:      "kicks",
	RingCtrSuppressed: "suppressed",
	RingCtrFull:       "full",
	RingCtrParks:      "parks",
	RingCtrPhaseErrs:  "phase_errs",
}

// The engine counters.
const (
	EngRxSegments         EngineCounterID = 0  // segments that passed the header and checksum checks (a super-frame: the segments it stands for)
	EngRxLRO              EngineCounterID = 1  // super-frames taken whole (InputSegmentLRO)
	EngRxBytes            EngineCounterID = 2  // payload bytes accepted in order (placed in host memory)
	EngTxSegments         EngineCounterID = 3  // frames transmitted
	EngTxBytes            EngineCounterID = 4  // payload bytes transmitted, retransmissions included
	EngTxRetransSegs      EngineCounterID = 5  // data/FIN segments sent again
	EngTxRetransByte      EngineCounterID = 6  // payload bytes sent again
	EngTxErrors           EngineCounterID = 7  // Env.Transmit failed (counted as lost)
	EngAcksSent           EngineCounterID = 8  // pure ACKs (no data), window updates and challenge ACKs included
	EngDropNoConn         EngineCounterID = 9  // Input for an index that is not delegated
	EngDropBadIP          EngineCounterID = 10 // IPv4 header not version 4 / bad IHL / not TCP / bad length
	EngDropFragment       EngineCounterID = 11 // IPv4 fragment (the engine never reassembles)
	EngDropShort          EngineCounterID = 12 // segment shorter than a TCP header or than the IP length says
	EngDropBadOffset      EngineCounterID = 13 // TCP data offset < 5 or past the segment
	EngDropBadOptions     EngineCounterID = 14 // malformed TCP option lengths
	EngDropBadChecksum    EngineCounterID = 15 // TCP checksum wrong
	EngDropTupleMismatch  EngineCounterID = 16 // addresses/ports are not the connection's
	EngDropClosed         EngineCounterID = 17 // segment for a connection already CLOSED (awaiting release)
	EngDropOutOfWindow    EngineCounterID = 18 // RFC 9293 acceptability test failed (ACKed, never accepted)
	EngDropPAWS           EngineCounterID = 19 // RFC 7323 PAWS: TSval older than TS.Recent
	EngDropNoTimestamp    EngineCounterID = 20 // timestamps negotiated but the segment has none
	EngDropNoAck          EngineCounterID = 21 // ACK flag off on a synchronized connection
	EngDropAckUnsent      EngineCounterID = 22 // ACK for data never sent (answered with an ACK)
	EngDropAckTooOld      EngineCounterID = 23 // ACK below SND.UNA - MAX.SND.WND (RFC 5961 §5)
	EngDropDataAfterFin   EngineCounterID = 24 // payload past the peer's FIN
	EngDropNoBuffer       EngineCounterID = 25 // in-order payload with no user buffer and no legacy buffer
	EngDropBackpressure   EngineCounterID = 26 // payload refused because notifications are backed up
	EngDropTimeWait       EngineCounterID = 27 // segments absorbed in TIME_WAIT
	EngOOOSegments        EngineCounterID = 28 // out-of-order segments queued
	EngOOOBytesDropped    EngineCounterID = 29 // out-of-order bytes refused: over OOOLimit or slab exhausted
	EngOOODropRanges      EngineCounterID = 30 // out-of-order segments refused: too many holes
	EngOOOBytesRestored   EngineCounterID = 31 // bytes delivered from the out-of-order queue after a hole filled
	EngRstAccepted        EngineCounterID = 32 // RST with SEG.SEQ == RCV.NXT
	EngRstOutOfWindow     EngineCounterID = 33 // RST outside the window (ignored)
	EngChallengeAcks      EngineCounterID = 34 // RFC 5961 challenge ACKs sent (in-window RST, SYN, old ACK)
	EngChallengeLimited   EngineCounterID = 35 // challenge ACKs suppressed by the rate limit
	EngSynReceived        EngineCounterID = 36 // SYN on a synchronized connection
	EngDupAcksRx          EngineCounterID = 37 // duplicate ACKs received
	EngFastRetransmits    EngineCounterID = 38 // fast retransmit / recovery entered
	EngPartialAcks        EngineCounterID = 39 // NewReno partial ACKs
	EngRTOExpired         EngineCounterID = 40 // retransmission timer expirations
	EngTimeouts           EngineCounterID = 41 // connections given up after MaxRetries or keepalive
	EngPersistProbes      EngineCounterID = 42 // zero-window probes
	EngKeepaliveProbes    EngineCounterID = 43 // keepalive probes
	EngDelayedAcks        EngineCounterID = 44 // ACKs sent by the delayed-ACK timer
	EngZeroWindowsSent    EngineCounterID = 45 // ACKs advertising a zero window
	EngRTTSamples         EngineCounterID = 46 // RTT samples taken
	EngLegacyUploads      EngineCounterID = 47 // legacy buffers filled
	EngUserBufsDone       EngineCounterID = 48 // user buffers completed
	EngNotifyFull         EngineCounterID = 49 // Env.Notify returned false (notification queued for retry)
	EngNotifyPosted       EngineCounterID = 50 // notifications accepted by Env.Notify
	EngNotifyCoalesced    EngineCounterID = 51 // notifications merged into a pending one
	EngDMAErrors          EngineCounterID = 52 // host memory accesses that faulted
	EngTimeWaitEntered    EngineCounterID = 53 // connections that entered TIME_WAIT (moved to a record, index released)
	EngTimeWaitExpired    EngineCounterID = 54 // TIME_WAIT records that ran out
	EngTimeWaitOverflow   EngineCounterID = 55 // TIME_WAIT records dropped early because MaxTimeWait were in use
	EngTimeWaitReopened   EngineCounterID = 56 // TIME_WAIT records ended by a newer SYN (RFC 6191), which went to the host
	EngULPPulled          EngineCounterID = 57 // bytes ULPs wrote into their retransmission buffers (Transmit)
	EngULPHeld            EngineCounterID = 58 // in-order bytes a ULP did not take at once, held and offered again
	EngULPHoldFull        EngineCounterID = 59 // in-order bytes refused because a ULP's hold was full (never expected: the window covers it)
	EngTSOFrames          EngineCounterID = 60 // super-frames handed to a port that segments TCP (TSOEnv); each counts once in TxSegments
	EngTailLossProbes     EngineCounterID = 61 // tail loss probes sent (RFC 8985 §7)
	EngSpuriousTimeouts   EngineCounterID = 62 // RTOs a D-SACK showed needless (RFC 2883 §5): the congestion state was restored
	EngLostRetransmits    EngineCounterID = 63 // heads resent again in recovery: their retransmission brought no ACK in a probe timeout (RFC 8985 §6.2's lost retransmission)
	EngSpuriousRecoveries EngineCounterID = 64 // fast recoveries undone: D-SACKs showed every retransmission needless (RFC 2883 §5)
	EngRACKLost           EngineCounterID = 65 // ranges RACK marked lost (RFC 8985: sent before a delivered one, the reordering window passed)
	EngRACKTimeouts       EngineCounterID = 66 // reordering timer expiries that found a loss
	EngSACKRecoveries     EngineCounterID = 67 // recoveries entered on SACK evidence before three duplicate ACKs (RACK, rack.go)
)

var engineCounterIDNames = [...]string{
	EngRxSegments:         "rx_segments",
	EngRxLRO:              "rx_lro",
	EngRxBytes:            "rx_bytes",
	EngTxSegments:         "tx_segments",
	EngTxBytes:            "tx_bytes",
	EngTxRetransSegs:      "tx_retrans_segs",
	EngTxRetransByte:      "tx_retrans_byte",
	EngTxErrors:           "tx_errors",
	EngAcksSent:           "acks_sent",
	EngDropNoConn:         "drop_no_conn",
	EngDropBadIP:          "drop_bad_ip",
	EngDropFragment:       "drop_fragment",
	EngDropShort:          "drop_short",
	EngDropBadOffset:      "drop_bad_offset",
	EngDropBadOptions:     "drop_bad_options",
	EngDropBadChecksum:    "drop_bad_checksum",
	EngDropTupleMismatch:  "drop_tuple_mismatch",
	EngDropClosed:         "drop_closed",
	EngDropOutOfWindow:    "drop_out_of_window",
	EngDropPAWS:           "drop_paws",
	EngDropNoTimestamp:    "drop_no_timestamp",
	EngDropNoAck:          "drop_no_ack",
	EngDropAckUnsent:      "drop_ack_unsent",
	EngDropAckTooOld:      "drop_ack_too_old",
	EngDropDataAfterFin:   "drop_data_after_fin",
	EngDropNoBuffer:       "drop_no_buffer",
	EngDropBackpressure:   "drop_backpressure",
	EngDropTimeWait:       "drop_time_wait",
	EngOOOSegments:        "ooo_segments",
	EngOOOBytesDropped:    "ooo_bytes_dropped",
	EngOOODropRanges:      "ooo_drop_ranges",
	EngOOOBytesRestored:   "ooo_bytes_restored",
	EngRstAccepted:        "rst_accepted",
	EngRstOutOfWindow:     "rst_out_of_window",
	EngChallengeAcks:      "challenge_acks",
	EngChallengeLimited:   "challenge_limited",
	EngSynReceived:        "syn_received",
	EngDupAcksRx:          "dup_acks_rx",
	EngFastRetransmits:    "fast_retransmits",
	EngPartialAcks:        "partial_acks",
	EngRTOExpired:         "rto_expired",
	EngTimeouts:           "timeouts",
	EngPersistProbes:      "persist_probes",
	EngKeepaliveProbes:    "keepalive_probes",
	EngDelayedAcks:        "delayed_acks",
	EngZeroWindowsSent:    "zero_windows_sent",
	EngRTTSamples:         "rtt_samples",
	EngLegacyUploads:      "legacy_uploads",
	EngUserBufsDone:       "user_bufs_done",
	EngNotifyFull:         "notify_full",
	EngNotifyPosted:       "notify_posted",
	EngNotifyCoalesced:    "notify_coalesced",
	EngDMAErrors:          "dma_errors",
	EngTimeWaitEntered:    "time_wait_entered",
	EngTimeWaitExpired:    "time_wait_expired",
	EngTimeWaitOverflow:   "time_wait_overflow",
	EngTimeWaitReopened:   "time_wait_reopened",
	EngULPPulled:          "ulp_pulled",
	EngULPHeld:            "ulp_held",
	EngULPHoldFull:        "ulp_hold_full",
	EngTSOFrames:          "tso_frames",
	EngTailLossProbes:     "tail_loss_probes",
	EngSpuriousTimeouts:   "spurious_timeouts",
	EngLostRetransmits:    "lost_retransmits",
	EngSpuriousRecoveries: "spurious_recoveries",
	EngRACKLost:           "rack_lost",
	EngRACKTimeouts:       "rack_timeouts",
	EngSACKRecoveries:     "sack_recoveries",
}

// The engine's occupancy words.
const (
	OccConns        OccupancyID = 0 // indices taken (delegated, closed but not yet released)
	OccControlSlabs OccupancyID = 1 // indices that have a control block allocated (grown to, reused)
	OccTimeWait     OccupancyID = 2 // 4-tuples in TIME_WAIT
	OccTimeWaitSlab OccupancyID = 3 // TIME_WAIT records allocated (grown to, reused)
	OccTimers       OccupancyID = 4 // connections with a timer armed
	OccPending      OccupancyID = 5 // connections with notifications waiting for ring space
	OccOOOPagesUsed OccupancyID = 6 // out-of-order slab pages held
)

var occupancyIDNames = [...]string{
	OccConns:        "conns",
	OccControlSlabs: "control_slabs",
	OccTimeWait:     "time_wait",
	OccTimeWaitSlab: "time_wait_slab",
	OccTimers:       "timers",
	OccPending:      "pending",
	OccOOOPagesUsed: "ooo_pages_used",
}

// A QP record's counters.
const (
	QPCtrRxFPDUs           QPCounterID = 0  // FPDUs received
	QPCtrTxFPDUs           QPCounterID = 1  // FPDUs sent
	QPCtrRxBytes           QPCounterID = 2  // stream bytes received, MPA frames included
	QPCtrTxBytes           QPCounterID = 3  // stream bytes sent, MPA frames included
	QPCtrPlaced            QPCounterID = 4  // payload bytes written to host memory
	QPCtrSourced           QPCounterID = 5  // payload bytes read from host memory
	QPCtrRxMessages        QPCounterID = 6  // completed inbound messages of every opcode
	QPCtrCRCErrors         QPCounterID = 7  // FPDUs with a wrong MPA CRC
	QPCtrTerminatesSent    QPCounterID = 8  // Terminate messages sent
	QPCtrTerminatesRecv    QPCounterID = 9  // Terminate messages received
	QPCtrDiscardedBytes    QPCounterID = 10 // received after the QP stopped processing
	QPCtrBadHostEntries    QPCounterID = 11 // ring entries with a wrong phase or an impossible index
	QPCtrCompletionsLost   QPCounterID = 12 // CQ overruns
	QPCtrFlushedWRs        QPCounterID = 13 // work requests completed in flush
	QPCtrReadRequestsRecv  QPCounterID = 14 // RDMA Read Requests received
	QPCtrReadResponsesSent QPCounterID = 15 // RDMA Read Responses sent
	QPCtrMPAFailures       QPCounterID = 16 // MPA negotiations that failed here: bad frame, reject sent or received
	QPCtrIRDORDAdjusted    QPCounterID = 17 // a peer's IRD/ORD we answered with other values (0, or more than we hold)
	QPCtrRTRsSent          QPCounterID = 18 // peer-to-peer ready-to-receive messages sent (initiator)
	QPCtrRTRsRecv          QPCounterID = 19 // and received (responder)
)

var qpCounterIDNames = [...]string{
	QPCtrRxFPDUs:           "rx_fpd_us",
	QPCtrTxFPDUs:           "tx_fpd_us",
	QPCtrRxBytes:           "rx_bytes",
	QPCtrTxBytes:           "tx_bytes",
	QPCtrPlaced:            "placed",
	QPCtrSourced:           "sourced",
	QPCtrRxMessages:        "rx_messages",
	QPCtrCRCErrors:         "crc_errors",
	QPCtrTerminatesSent:    "terminates_sent",
	QPCtrTerminatesRecv:    "terminates_recv",
	QPCtrDiscardedBytes:    "discarded_bytes",
	QPCtrBadHostEntries:    "bad_host_entries",
	QPCtrCompletionsLost:   "completions_lost",
	QPCtrFlushedWRs:        "flushed_wrs",
	QPCtrReadRequestsRecv:  "read_requests_recv",
	QPCtrReadResponsesSent: "read_responses_sent",
	QPCtrMPAFailures:       "mpa_failures",
	QPCtrIRDORDAdjusted:    "ird_ord_adjusted",
	QPCtrRTRsSent:          "rtrs_sent",
	QPCtrRTRsRecv:          "rtrs_recv",
}

// String is the counter's name (snake case, as the reports print it).
func (id RingCounterID) String() string {
	return idName(ringCounterIDNames[:], uint32(id), "ring_counter_")
}

// String is the counter's name.
func (id EngineCounterID) String() string {
	return idName(engineCounterIDNames[:], uint32(id), "engine_counter_")
}

// String is the word's name.
func (id OccupancyID) String() string { return idName(occupancyIDNames[:], uint32(id), "occupancy_") }

// String is the counter's name.
func (id QPCounterID) String() string { return idName(qpCounterIDNames[:], uint32(id), "qp_counter_") }

func idName(names []string, id uint32, unknown string) string {
	if int(id) < len(names) {
		return names[id]
	}
	return unknown + strconv.FormatUint(uint64(id), 10)
}

// The name tables cover every ID: a counter added without a name fails to
// compile here.
var (
	_ = [1]struct{}{}[len(ringCounterIDNames)-RingCounterCount]
	_ = [1]struct{}{}[len(engineCounterIDNames)-EngineCounterCount]
	_ = [1]struct{}{}[len(occupancyIDNames)-OccupancyWords]
	_ = [1]struct{}{}[len(qpCounterIDNames)-QPCounterCount]
)
