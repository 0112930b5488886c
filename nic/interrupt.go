package nic

import "github.com/emunic/emunic/rings"

// Notifications and interrupt moderation: post writes a notification, and
// moderate publishes them and raises the Notify vector (Vectors) once
// enough are pending, the oldest is old enough, or the unit goes idle.

// post writes one notification. It reports false when the ring is full
// (counted); callers that must not lose the event retry later.
func (d *Device) post(n *rings.Notification) bool {
	e := d.notify.Next()
	if e == nil {
		d.count(rings.StatNotifyDropRingFull)
		return false
	}
	n.Encode(rings.NotificationEntry(e))
	d.notify.Commit()
	d.count(rings.StatNotifyPosted)
	if d.intrPending == 0 {
		d.intrSince = d.now
	}
	d.intrPending++
	return true
}

// moderate publishes notifications and decides whether to interrupt: always
// when going idle, otherwise when enough are pending or the oldest is old
// enough. Interrupts go only to a host that said it sleeps.
func (d *Device) moderate(idle bool) {
	if d.intrPending == 0 {
		return
	}
	d.notify.PublishNoKick()
	if idle || d.intrPending >= d.cfg.IntrCount || d.now-d.intrSince >= int64(d.cfg.IntrDelay) {
		d.raiseInterrupt()
	}
}

func (d *Device) raiseInterrupt() {
	if d.intrPending == 0 {
		return
	}
	if d.notify.PeerSleeping() && d.vec.Notify != nil {
		d.count(rings.StatInterrupts)
		d.stats[rings.StatInterruptsCoalesced].Add(uint64(d.intrPending - 1))
		// The interrupt is the notification ring's doorbell: counted
		// there too, so its kicks are the interrupts raised.
		d.notify.Kicked()
		d.vec.Notify.Kick()
	}
	d.intrPending = 0
}
