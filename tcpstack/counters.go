package tcpstack

import (
	"math/bits"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
)

// countedVector is an interrupt vector as the host sees it: every interrupt
// the device raises on it is counted as it arrives, as an OS counts them
// per vector, then wakes the vector's waiter. The device counts the
// interrupts it raises; this is the other side's count of the same event.
type countedVector struct {
	bell *rings.Bell
	n    atomic.Uint64
}

// on makes v deliver to bell and returns it, for rings.Vectors.
func (v *countedVector) on(bell *rings.Bell) *countedVector {
	v.bell = bell
	return v
}

// Kick implements rings.Doorbell.
func (v *countedVector) Kick() {
	v.n.Add(1)
	v.bell.Kick()
}

// countedRDMABells is the device's RDMA doorbell registers as the verbs
// write them: every write the device took counted in n. It keeps the
// transport's late refusals (rings.RDMADoorbellLate) reachable.
type countedRDMABells struct {
	db rings.RDMADoorbell
	n  *atomic.Uint64
}

// QPDoorbell implements rings.RDMADoorbell.
func (c countedRDMABells) QPDoorbell(qpn uint32) bool {
	ok := c.db.QPDoorbell(qpn)
	if ok {
		c.n.Add(1)
	}
	return ok
}

// ArmCQ implements rings.RDMADoorbell.
func (c countedRDMABells) ArmCQ(cq, flags uint32) bool {
	ok := c.db.ArmCQ(cq, flags)
	if ok {
		c.n.Add(1)
	}
	return ok
}

// countedRDMABellsLate is countedRDMABells over a transport with late
// refusals.
type countedRDMABellsLate struct {
	countedRDMABells
	late rings.RDMADoorbellLate
}

// OnRefused implements rings.RDMADoorbellLate.
func (c countedRDMABellsLate) OnRefused(f func(off, v uint32)) { c.late.OnRefused(f) }

// countRDMABells wraps db (nil: none) to count its writes in n.
func countRDMABells(db rings.RDMADoorbell, n *atomic.Uint64) rings.RDMADoorbell {
	if db == nil {
		return nil
	}
	c := countedRDMABells{db: db, n: n}
	if late, ok := db.(rings.RDMADoorbellLate); ok {
		return countedRDMABellsLate{c, late}
	}
	return c
}

// countedDoorbell is the device's doorbell register as the driver writes
// it: every write counted.
type countedDoorbell struct {
	db rings.Doorbell
	n  atomic.Uint64
}

// on makes c write to db and returns it.
func (c *countedDoorbell) on(db rings.Doorbell) *countedDoorbell {
	c.db = db
	return c
}

// Kick implements rings.Doorbell.
func (c *countedDoorbell) Kick() {
	c.n.Add(1)
	c.db.Kick()
}

// numNtfFlags is the notification flag bits counted one by one.
const numNtfFlags = 16

// ntfCounters counts the notifications the interrupt handler consumed, by
// flag and by what they name.
type ntfCounters struct {
	legacy    [numNtfFlags]atomic.Uint64 // Conn == NoConn
	delegated [numNtfFlags]atomic.Uint64 // Conn names a connection (or a CQ)
	entries   [2]atomic.Uint64           // legacy, delegated
}

// count adds one notification: one count per flag it carries (usually one),
// so the cost is an atomic add or two, nothing allocated.
func (c *ntfCounters) count(n *rings.Notification) {
	by, kind := &c.legacy, 0
	if n.Conn != rings.NoConn {
		by, kind = &c.delegated, 1
	}
	c.entries[kind].Add(1)
	for f := uint32(n.Flags); f != 0; f &= f - 1 {
		if b := bits.TrailingZeros32(f); b < numNtfFlags {
			by[b].Add(1)
		}
	}
}

// NotificationCounts is what the host consumed from the notification ring:
// the device-side counters (notify_posted, the engine's user_bufs_done,
// legacy_uploads, ...) count the same events from the other side.
type NotificationCounts struct {
	// Legacy and Delegated count the entries naming no connection
	// (NoConn: legacy traffic) and naming a connection or, for CQ_EVENT,
	// a completion queue.
	Legacy, Delegated uint64
	// LegacyByFlag and DelegatedByFlag count those carrying each flag,
	// indexed by the flag's bit number (rings.NtfLegacyUpload is bit
	// 3); an entry with several flags counts under each.
	LegacyByFlag, DelegatedByFlag [numNtfFlags]uint64
}

// Flag returns the count of notifications that carried f (a single flag),
// legacy and delegated together.
func (c NotificationCounts) Flag(f rings.NotifyFlags) uint64 {
	b := bits.TrailingZeros32(uint32(f))
	if b >= numNtfFlags {
		return 0
	}
	return c.LegacyByFlag[b] + c.DelegatedByFlag[b]
}

// DelegatedFlag returns the count of notifications naming a connection
// that carried f (a single flag).
func (c NotificationCounts) DelegatedFlag(f rings.NotifyFlags) uint64 {
	b := bits.TrailingZeros32(uint32(f))
	if b >= numNtfFlags {
		return 0
	}
	return c.DelegatedByFlag[b]
}

// NotificationCounts returns the counts of the notifications consumed.
func (d *Driver) NotificationCounts() NotificationCounts {
	k := &d.stats.ntfKinds
	out := NotificationCounts{Legacy: k.entries[0].Load(), Delegated: k.entries[1].Load()}
	for i := range numNtfFlags {
		out.LegacyByFlag[i] = k.legacy[i].Load()
		out.DelegatedByFlag[i] = k.delegated[i].Load()
	}
	return out
}

// rdmaCopied counts n bytes the RDMA provider copied on the CPU for an RDMA
// connection: in RDMACopyBytes and in the HostCopyBytes total.
func (d *Driver) rdmaCopied(n int) {
	if d == nil || n <= 0 {
		return
	}
	d.stats.rdmaCopyBytes.Add(uint64(n))
	d.stats.copyBytes.Add(uint64(n))
}

// DriverStats counts what the host side of the rings did.
type DriverStats struct {
	TxFrames, TxBytes uint64
	TxRingFull        uint64 // times the transmit ring was full and the driver waited
	TxDropped         uint64 // frames dropped: ring stayed full, or frame too large
	TxCsumOffload     uint64 // frames sent with TxCsum: their TCP or UDP checksum left to the device
	// TxCsumFragmented counts the UDP datagrams netstack fragmented
	// after leaving their checksum to the device, whose checksum the
	// driver filled in over the fragments it held back (txcsum.go);
	// TxFragsAbandoned those it gave up on, incomplete.
	TxCsumFragmented, TxFragsAbandoned uint64
	RxFrames, RxBytes                  uint64
	RxErrors                           uint64 // notifications reporting a bad buffer
	// RxFrameTooLarge counts FRAME_TOO_LARGE notifications: legacy
	// frames longer than the buffer posted for them (the device dropped
	// the frame and returned the buffer, which the driver reposts).
	RxFrameTooLarge uint64
	// Interrupts counts the interrupts the device raised on the
	// notification vector, as they arrive (an OS's per-vector count);
	// TxSpaceInterrupts and CommandInterrupts count the transmit-space
	// and command-completion vectors the same way. Kicks that arrive
	// while the handler is awake coalesce into one wake-up, and the
	// handler also finds work by polling, so wake-ups would count
	// neither the device's interrupts nor anything else.
	Interrupts                           uint64
	TxSpaceInterrupts, CommandInterrupts uint64
	Notifications                        uint64 // notification entries consumed
	// DoorbellKicks counts the driver's writes of the device's doorbell
	// (each made because the device said it sleeps on a ring).
	DoorbellKicks uint64
	// RDMADoorbells counts the writes of the device's RDMA doorbell
	// registers (RegQPDoorbell, RegCQArm) the device took: the verbs'
	// QP doorbells and CQ arms. Unlike a ring's, each is written
	// whether the device sleeps or not (it wakes itself if it does).
	RDMADoorbells uint64
	// NtfRingErrors counts notification entries the device published
	// with a wrong phase tag (or a producer index more than a ring
	// ahead): a device bug. The entry is skipped, not interpreted.
	NtfRingErrors uint64
	Commands      uint64
	// HostCopyBytes counts every payload byte the host CPU copied on the
	// data path (legacy frames into and out of ring buffers, delegated
	// Read/Write through the send area and receive buffers, and
	// RDMACopyBytes). RDMA work requests on registered memory add
	// nothing: the device places and fetches their data.
	HostCopyBytes uint64
	// RDMACopyBytes counts the bytes the verbs layer copies on the CPU for
	// RDMA connections: inline sends into the send queue, MPA private
	// data in and out of host memory, and bytes a peer sent to an RDMA
	// listener before its QP existed (held, then handed to the device).
	RDMACopyBytes uint64
	// FrozenDropsOut counts frames netstack sent on a flow being or
	// already delegated, which the driver kept off the wire;
	// FrozenDropsIn, received frames of such flows kept from netstack.
	FrozenDropsOut, FrozenDropsIn uint64
	// FlowsReopened counts peer SYNs that ended a delegated connection's
	// flow entry before its release: the unit had let the tuple go (its
	// TIME_WAIT record reopened, RFC 6191) and passed the SYN up, and the
	// SYN went to netstack as a new connection's instead of being
	// dropped as the old flow's.
	FlowsReopened uint64
	// RxHeld and RxHeldBytes count the legacy frames (in RxFrames) held
	// back from netstack for an RDMA listener: a peer's first bytes that
	// came before its connection was delegated, handed to the device
	// again (RX_INJECT) once the QP exists, where the engine counts them
	// as received a second time.
	RxHeld, RxHeldBytes uint64
	// RxGROMerged counts legacy frames netstack got merged into the
	// packet before them (generic receive offload, DriverConfig.NoGRO),
	// and RxGROHeaderBytes the IP and TCP header bytes they shed: netstack
	// counts RxGROMerged packets and RxGROHeaderBytes bytes fewer than
	// the frames the driver handed it.
	RxGROMerged, RxGROHeaderBytes uint64
	// ZeroWindowAckRepairs counts header-only copies of received segments
	// handed to netstack so that it takes their ACK while its receive
	// window is zero (see ackRepair); ZeroWindowUntracked counts flows at
	// a zero window the repair table had no room for.
	ZeroWindowAckRepairs, ZeroWindowUntracked uint64
	// The command path (cmdpath.go). CmdTimeouts counts waiters that gave
	// up on a command (it stays in flight); CmdLate, timed-out commands the
	// device completed later; CmdLost, commands whose slot the device
	// released without a status; CmdFailed, statuses other than OK;
	// CmdBadWriteBacks, DONEs with the phase of another lap and
	// CmdStrayDone, DONEs in slots the host had not issued (both ignored).
	// CmdInFlight is the commands in the ring or waiting for it now, and
	// CmdQuarantined the resources (connection indices, QPs, CQs, MRs)
	// held back because the device has not answered a command naming them.
	CmdTimeouts, CmdLate, CmdLost, CmdFailed, CmdBadWriteBacks, CmdStrayDone uint64
	CmdInFlight, CmdQuarantined                                              uint64
	// Delegated notifications the host rejected (ntfview.go), device
	// errors all: NtfOutOfSequence, numbers that went back or data not at
	// the next expected byte; NtfImpossibleSeq, numbers past what the host
	// queued; NtfUnknownConn, a connection index the host has free (or
	// past its table). NtfLateConn counts notifications for a connection
	// being released (legitimate, dropped).
	NtfOutOfSequence, NtfImpossibleSeq, NtfUnknownConn, NtfLateConn uint64
	// PostBuffersPartial counts POST_BUFFERS the device accepted only a
	// prefix of (the rest is posted again later); PostBuffersOverclaim,
	// results claiming more buffers than were posted (a device error).
	PostBuffersPartial, PostBuffersOverclaim uint64
	// TxRefusedNoResources counts delegated transmit descriptors the
	// device refused for want of room: queued again, the writer waits.
	TxRefusedNoResources uint64
	// UserBufRequests counts USER_BUF_REQ notifications; UserBufPosted,
	// the registered reader buffers posted (ReadRegistered), and
	// ZeroCopyBytes the payload the device placed straight into them.
	UserBufRequests, UserBufPosted, ZeroCopyBytes uint64
	// FastRecoveries counts DUP_ACK notifications (fast recovery entered).
	FastRecoveries uint64
	// ConnQueries counts QUERY_CONNs issued (DelegatedConn.Info);
	// ConnQueryBad, answers the host rejected (a block outside the
	// connection's sequence space or the ABI's rules: device errors).
	ConnQueries, ConnQueryBad uint64
}

// Stats returns the driver's counters.
func (d *Driver) Stats() DriverStats {
	s := &d.stats
	return DriverStats{
		TxFrames: s.txFrames.Load(), TxBytes: s.txBytes.Load(), TxRingFull: s.txRingFull.Load(),
		TxDropped: s.txDropped.Load(), TxCsumOffload: s.txCsum.Load(),
		TxCsumFragmented: d.txFrags.completed.Load(), TxFragsAbandoned: d.txFrags.abandoned.Load(), RxFrames: s.rxFrames.Load(), RxBytes: s.rxBytes.Load(),
		RxErrors: s.rxErrors.Load(), RxFrameTooLarge: s.rxTooLarge.Load(),
		Interrupts: s.irqNotify.n.Load(), TxSpaceInterrupts: s.irqTxSpace.n.Load(), CommandInterrupts: s.irqCommand.n.Load(),
		DoorbellKicks: s.doorbell.n.Load(), RDMADoorbells: s.rdmaBells.Load(),
		Notifications: s.ntfs.Load(), NtfRingErrors: s.ntfRingErrs.Load(),
		Commands: s.commands.Load(), HostCopyBytes: s.copyBytes.Load(), RDMACopyBytes: s.rdmaCopyBytes.Load(),
		FrozenDropsOut: d.flows.droppedOut.Load(), FrozenDropsIn: d.flows.droppedIn.Load(),
		FlowsReopened: d.flows.reopened.Load(),
		RxHeld:        s.rxHeld.Load(), RxHeldBytes: s.rxHeldBytes.Load(),
		RxGROMerged: s.groIn.Load() - s.groOut.Load(), RxGROHeaderBytes: s.groInBytes.Load() - s.groOutBytes.Load(),
		ZeroWindowAckRepairs: d.ackFix.repairs.Load(), ZeroWindowUntracked: d.ackFix.full.Load(),
		CmdTimeouts: d.cp.timeouts.Load(), CmdLate: d.cp.late.Load(), CmdLost: d.cp.lost.Load(),
		CmdFailed: d.cp.failed.Load(), CmdBadWriteBacks: d.cp.badDone2.Load(), CmdStrayDone: d.cp.strayDone.Load(),
		CmdInFlight: d.cmdInFlight(), CmdQuarantined: uint64(max(d.cp.quarantined.Load(), 0)),
		NtfOutOfSequence: s.ntfOutOfSeq.Load(), NtfImpossibleSeq: s.ntfImpossible.Load(),
		NtfUnknownConn: s.ntfUnknown.Load(), NtfLateConn: s.ntfLate.Load(),
		PostBuffersPartial: s.postPartial.Load(), PostBuffersOverclaim: s.postOverclaim.Load(),
		TxRefusedNoResources: s.txRefused.Load(), UserBufRequests: s.userBufReqs.Load(),
		UserBufPosted: s.userBufPosted.Load(), ZeroCopyBytes: s.zeroCopyBytes.Load(),
		FastRecoveries: s.fastRecoveries.Load(),
		ConnQueries:    s.connQueries.Load(), ConnQueryBad: s.connQueryBad.Load(),
	}
}
