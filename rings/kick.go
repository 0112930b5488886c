package rings

// PublishNoKick makes committed entries visible without ringing the
// doorbell, and reports whether the consumer is parked. A device that
// moderates interrupts publishes eagerly (cheap) and kicks on its own
// schedule (expensive).
func (p *Producer) PublishNoKick() (peerSleeping bool) {
	if p.tail != p.published {
		store32(p.hdr(OffProducerIndex), p.tail)
		p.published = p.tail
		p.stats.Publishes++
	}
	return p.PeerSleeping()
}

// PeerSleeping reports whether the consumer has announced it is parked.
func (p *Producer) PeerSleeping() bool {
	return load32(p.hdr(OffConsumerFlags))&FlagNeedWakeup != 0
}

// SetNeedWakeup announces (or withdraws) that the producer is parked waiting
// for the consumer: for space, or on a command ring for a completion. The
// consumer rings the producer's doorbell on its next release.
func (p *Producer) SetNeedWakeup(on bool) {
	v := uint32(0)
	if on {
		v = FlagNeedWakeup
	}
	store32(p.hdr(OffProducerFlags), v)
}
