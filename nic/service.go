package nic

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

const (
	ringCmd = iota
	ringTx
	ringRx
)

// serviceTx puts legacy frames from the transmit ring on the wire. The
// descriptor is released once the frame has left (the port copies), so the
// host may reuse the buffer as soon as the consumer index passes it.
func (d *Device) serviceTx() int {
	n, err := d.tx.Burst(d.cfg.Burst)
	if err != nil {
		// A wrong phase tag, or a producer index more than a ring
		// ahead: counted, never trusted.
		d.phaseError(ringTx, d.tx.Head())
		return 0
	}
	head := d.tx.Head()
	for i := range n {
		d.transmit(rings.TxDesc(d.tx.Entry(head + uint32(i))))
	}
	d.tx.PopN(n)
	return n
}

func (d *Device) transmit(desc rings.TxDesc) {
	if d.txGated(desc) {
		d.count(rings.StatTxDropBadDesc)
		return
	}
	if desc.Conn() != rings.NoConn {
		// Delegated transmit buffers belong to the offload engine.
		d.sendDelegated(desc)
		return
	}
	l := int(desc.Len())
	fl := desc.Flags()
	if l < EthHeaderLen || l > d.maxFrame || fl&^rings.TxLegacyFlags != 0 {
		// A flag a legacy frame cannot carry is refused, never sent as
		// if it were not there.
		d.count(rings.StatTxDropBadDesc)
		return
	}
	frame, err := d.mem.Map(desc.Addr(), l)
	if err != nil {
		d.count(rings.StatDMAErrors)
		d.count(rings.StatTxDropBadDesc)
		return
	}
	wire, ok := d.tag(frame, desc.VLAN())
	if !ok {
		d.count(rings.StatTxDropBadDesc)
		return
	}
	if fl&rings.TxCsum != 0 {
		if wire = d.txChecksum(wire); wire == nil {
			d.count(rings.StatTxDropCsum)
			return
		}
		d.count(rings.StatTxCsum)
	}
	if d.eng.TimeWaitConns() > 0 {
		// The host opening a connection on a 4-tuple the unit holds in
		// TIME_WAIT ends the record (timewait.go).
		d.eng.OutboundSYN(frame)
	}
	if err := d.port.WriteFrame(wire); err != nil {
		d.count(rings.StatTxDropPortError)
		return
	}
	d.count(rings.StatTxFrames)
	d.stats[rings.StatTxBytes].Add(uint64(len(wire)))
}

// serviceRx classifies received frames and uploads legacy ones into the
// buffers the host posted on the receive ring, one notification each. When
// the notification ring is full the frame waits in the FIFO (back-pressure),
// so a buffer is never filled without the host being told.
func (d *Device) serviceRx() int {
	n := 0
	var pf parsedFrame
	// One ACK per connection for the segments of this pass (the
	// engine's GRO-like coalescing, Engine.BeginBurst).
	d.eng.BeginBurst()
	defer d.eng.EndBurst(d.now)
	for ; n < d.cfg.Burst; n++ {
		// The next frame: a wire segment of a super-frame being cut, or
		// the FIFO's head.
		var f []byte
		var verified bool
		cut := d.lroSplit.Pending()
		if cut {
			f, verified = d.lroSplit.Peek(), true
		} else {
			if f = d.fifo.peek(); f == nil {
				break
			}
			verified = d.fifo.headVerified()
			if gso, segs := d.fifo.headLRO(); gso > 0 {
				if d.inputLRO(f, segs, &pf) {
					d.popFIFO()
					continue
				}
				// Not a delegated flow's: it goes on as the wire
				// segments it stands for.
				err := d.lroSplit.Split(gso, f)
				d.popFIFO()
				if err != nil { // the port checked it: only a port bug gets here
					d.stats[rings.StatRxDropShort].Add(uint64(segs))
					continue
				}
				f, cut = d.lroSplit.Peek(), true
			}
		}
		f, tci, v := d.untag(f)
		if v == rxLegacy {
			v = classify(f, d.cfg.MAC, d.maxFrame, &pf, verified)
		}
		switch v {
		case rxLegacy:
			var t hdr.Tuple
			if seg, isTCP := pf.tcpSegment(f, &t); isTCP {
				if idx, ok := d.eng.Lookup(&t); ok {
					// A delegated flow: the engine owns it.
					d.eng.InputSegment(idx, &t, seg, pf.engineFlags())
					break
				}
				if d.eng.InputUnmatchedSegment(&t, seg, pf.engineFlags()) {
					// A 4-tuple in TIME_WAIT: its record absorbed it.
					break
				}
			}
			if !d.upload(f, tci) {
				// It waits (a cut super-frame keeps its place).
				d.rx.Release()
				return n
			}
		default:
			d.countDrop(v)
		}
		if cut {
			d.lroSplit.Pop()
		} else {
			d.popFIFO()
		}
	}
	// Release consumed receive descriptors before the notifications that
	// report them are published (moderate runs after this), so a host that
	// reposts a buffer as soon as it is told always finds its slot free.
	d.rx.Release()
	return n
}

// popFIFO frees the FIFO's head slot, waking the MAC if it waits for one.
func (d *Device) popFIFO() {
	d.fifo.pop()
	if d.macWaiting.Load() {
		d.macBell.Kick()
	}
}

// inputLRO gives a super-frame (Config.NoLRO) of a delegated flow to the
// engine whole, as the segs segments it stands for. False: it is not a
// delegated flow's (nor a well-formed TCP/IPv4 frame for us), and goes on
// as its wire segments.
func (d *Device) inputLRO(f []byte, segs int, pf *parsedFrame) bool {
	if classify(f, d.cfg.MAC, lroFrameSize, pf, true) != rxLegacy {
		return false
	}
	var t hdr.Tuple
	seg, isTCP := pf.tcpSegment(f, &t)
	if !isTCP {
		return false
	}
	idx, ok := d.eng.Lookup(&t)
	if !ok {
		return false
	}
	d.eng.InputSegmentLRO(idx, &t, seg, pf.engineFlags(), segs)
	return true
}

// upload DMAs a frame into the next legacy buffer. It returns false when the
// frame must wait at the head of the FIFO (no notification space, or no
// buffer posted yet); after RxBufferWait without a buffer the frame is
// dropped and counted (true).
// tci is the 802.1Q tag the tag layer stripped from it (0: none), for the
// notification.
func (d *Device) upload(f []byte, tci uint16) bool {
	if d.notify.Free() == 0 {
		return d.stallRx(false)
	}
	desc, ringErr := d.peekRxBuffer()
	if ringErr {
		d.rxStallSince = 0
		d.count(rings.StatRxDropNoBuffer)
		return true
	}
	if desc == nil {
		return d.stallRx(d.notify.Free() > 0)
	}
	if d.notify.Free() == 0 {
		// peekRxBuffer's error reports took the last notification
		// slot: the buffer below must not be used without one.
		return d.stallRx(false)
	}
	d.rxStallSince = 0
	id, addr := desc.BufID(), desc.Addr()
	if int(desc.Len()) < len(f) {
		// The host posted a buffer too small for this frame: the frame
		// is dropped (rx_drop_oversize) and the buffer comes back
		// unwritten with FRAME_TOO_LARGE, Aux = its BufID, Len = the
		// frame's length, as a receive completion with a length error
		// does on a hardware NIC. Keeping the buffer for the next frame
		// instead would leave the host blind: it could not tell its
		// buffers are too small, nor by how much.
		d.count(rings.StatRxDropOversize)
		d.rx.Pop()
		d.post(&rings.Notification{Flags: rings.NtfFrameTooLarge, Conn: rings.NoConn, Len: uint32(len(f)), Aux: id})
		return true
	}
	_ = d.mem.WriteAt(f, addr) // inside host memory: peekRxBuffer checked
	d.rx.Pop()
	d.post(&rings.Notification{Flags: rings.NtfLegacyUpload, VLAN: tci, Conn: rings.NoConn, Len: uint32(len(f)), Aux: id})
	return true
}

// peekRxBuffer returns the receive descriptor at the head of the ring when
// it names a buffer wholly inside host memory; legacy frames and the
// engine's uploads both take buffers through it. A descriptor that does not
// is consumed and its buffer returned to the host with NtfError (Aux = the
// buffer id). desc is nil when no usable buffer is posted, or when a bad one
// cannot be reported because the notification ring is full; ringErr says
// the ring itself is bad (wrong phase tag or index, counted).
func (d *Device) peekRxBuffer() (desc rings.RxDesc, ringErr bool) {
	for {
		e, err := d.rx.Peek()
		if err != nil {
			d.phaseError(ringRx, d.rx.Head())
			return nil, true
		}
		if e == nil {
			return nil, false
		}
		desc = rings.RxDesc(e)
		if d.memContains(desc.Addr(), int(desc.Len())) {
			return desc, false
		}
		if d.notify.Free() == 0 {
			return nil, false
		}
		d.count(rings.StatDMAErrors)
		id := desc.BufID()
		d.rx.Pop()
		d.post(&rings.Notification{Flags: rings.NtfError, Conn: rings.NoConn, Aux: id})
	}
}

// stallRx starts or continues a receive stall. It reports true when the
// stall has lasted RxBufferWait and the frame must go (dropped, counted if
// it waited for a buffer; a frame waiting for notification space is only
// dropped the same way, so the host cannot stall the FIFO forever).
func (d *Device) stallRx(noBuffer bool) bool {
	now := d.now
	if d.rxStallSince == 0 {
		d.rxStallSince = now
		return false
	}
	if now-d.rxStallSince < int64(d.cfg.RxBufferWait) {
		return false
	}
	d.rxStallSince = 0
	if noBuffer {
		d.count(rings.StatRxDropNoBuffer)
	} else {
		d.count(rings.StatNotifyDropRingFull)
	}
	return true
}
