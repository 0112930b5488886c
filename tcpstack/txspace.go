package tcpstack

// The driver's transmit space: delegated connections put their transmit
// descriptors on the same ring as netstack's frames, and wait for slots
// (or leave descriptors in a backlog) when the device has not freed any.

import "github.com/emunic/emunic/rings"

// txWait is the transmit ring's waiting state, under Driver.txMu.
type txWait struct {
	ch      chan struct{} // closed when the device frees slots; nil: nobody waits
	backlog []rings.Tx    // delegated descriptors waiting for a slot, in order
}

var closedCh = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// txSpaceChLocked publishes what is queued and returns a channel closed
// when the device frees transmit slots (txMu held). It announces the wait
// (NEED_WAKEUP) and then looks again, so a release in between is not lost.
func (d *Driver) txSpaceChLocked() <-chan struct{} {
	d.tx.Publish()
	d.tx.SetNeedWakeup(true)
	if d.tx.Free() > 0 {
		return closedCh
	}
	if d.txw.ch == nil {
		d.txw.ch = make(chan struct{})
	}
	return d.txw.ch
}

// txSpaceFreed runs on the transmit-space vector.
func (d *Driver) txSpaceFreed() {
	d.txMu.Lock()
	d.tx.SetNeedWakeup(false)
	d.flushTxBacklogLocked()
	if d.txw.ch != nil {
		close(d.txw.ch)
		d.txw.ch = nil
	}
	d.txMu.Unlock()
}

// flushTxBacklogLocked moves backlogged descriptors into free slots; what
// does not fit waits for the next release.
func (d *Driver) flushTxBacklogLocked() {
	b := d.txw.backlog
	if len(b) == 0 {
		return
	}
	for len(b) > 0 {
		e := d.tx.Next()
		if e == nil {
			break
		}
		b[0].Encode(rings.TxDesc(e))
		d.tx.Commit()
		b = b[1:]
	}
	d.tx.Publish()
	if len(b) == 0 {
		d.txw.backlog = nil
		return
	}
	d.txw.backlog = b
	d.tx.SetNeedWakeup(true)
	if d.tx.Free() > 0 {
		d.txSpace.Kick() // freed meanwhile: flush again on the vector
	}
}

// trySendDelegated queues a transmit descriptor of a delegated connection
// if the ring has a slot for it; otherwise it returns a channel closed when
// the device frees slots.
func (d *Driver) trySendDelegated(t rings.Tx) (bool, <-chan struct{}) {
	d.txMu.Lock()
	defer d.txMu.Unlock()
	if d.putTxLocked(t) {
		return true, nil
	}
	d.stats.txRingFull.Add(1)
	return false, d.txSpaceChLocked()
}

// putTxLocked publishes t in a free slot unless the ring is full or
// descriptors wait in the backlog ahead of it (txMu held): a connection's
// descriptors go out in order.
func (d *Driver) putTxLocked(t rings.Tx) bool {
	d.flushTxBacklogLocked()
	if len(d.txw.backlog) > 0 {
		return false
	}
	e := d.tx.Next()
	if e == nil {
		return false
	}
	t.Encode(rings.TxDesc(e))
	d.tx.Commit()
	d.tx.Publish()
	return true
}

// sendDelegatedAsync queues a transmit descriptor without waiting: one
// that finds the ring full waits in a backlog, in order, for the next slot
// (a FIN on Close: its connection queues nothing after it).
func (d *Driver) sendDelegatedAsync(t rings.Tx) {
	d.txMu.Lock()
	defer d.txMu.Unlock()
	if d.putTxLocked(t) {
		return
	}
	d.stats.txRingFull.Add(1)
	d.txw.backlog = append(d.txw.backlog, t)
	if ch := d.txSpaceChLocked(); ch == closedCh {
		d.txSpace.Kick()
	}
}
