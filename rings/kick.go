package rings

import "sync/atomic"

// PublishNoKick makes committed entries visible without ringing the
// doorbell, and reports whether the consumer is parked. A device that
// moderates interrupts publishes eagerly (cheap) and kicks on its own
// schedule (expensive), telling the ring with Kicked when it does.
//
// It counts what Publish counts: the entries made visible and the publish,
// which is suppressed until Kicked says otherwise. Counting only the
// publish would leave Entries at the few entries that went out through
// Publish, and the consumer's count of entries taken would have nothing to
// agree with.
func (p *Producer) PublishNoKick() (peerSleeping bool) {
	if p.tail != p.published {
		p.store(OffProducerIndex, p.tail)
		p.stats.Entries += uint64(p.tail - p.published)
		p.stats.Publishes++
		p.stats.Suppressed++
		p.published = p.tail
	}
	return p.PeerSleeping()
}

// Kicked records that the caller rang the consumer's doorbell itself (a
// moderated interrupt) for entries it published: the last publish counted
// as suppressed is counted as kicked instead, so that Kicks + Suppressed ==
// Publishes holds for a moderated ring as it does for one that kicks in
// Publish, and Kicks equals the interrupts raised. A kick with no
// suppressed publish to convert (there is always one: an interrupt follows
// a publish) is still counted.
func (p *Producer) Kicked() {
	p.stats.Kicks++
	if p.stats.Suppressed > 0 {
		p.stats.Suppressed--
	}
}

// PeerSleeping reports whether the consumer has announced it is parked.
func (p *Producer) PeerSleeping() bool {
	return atomic.LoadUint32(p.cf)&FlagNeedWakeup != 0
}

// SetNeedWakeup announces (or withdraws) that the producer is parked waiting
// for the consumer: for space, or on a command ring for a completion. The
// consumer rings the producer's doorbell on its next release.
func (p *Producer) SetNeedWakeup(on bool) {
	v := uint32(0)
	if on {
		v = FlagNeedWakeup
	}
	p.store(OffProducerFlags, v)
}
