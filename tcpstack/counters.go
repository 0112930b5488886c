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
