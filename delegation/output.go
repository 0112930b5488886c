package delegation

import (
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/seqnum"
)

// Aux codes of NtfTimeout and NtfError notifications.
const (
	AuxTimeoutRetransmit = 1 // MaxRetries retransmission timeouts in a row
	AuxTimeoutKeepalive  = 2 // KeepaliveCount probes unanswered
	AuxTimeoutPersist    = 3 // MaxRetries zero-window probes unanswered
	AuxErrorDMA          = 1 // a transmit buffer could not be read (the connection is reset)
)

// maxPayload is the most payload a segment carries: the send MSS less the
// options every segment has (RFC 6691).
func (c *conn) maxPayload() uint32 {
	if c.tsOK {
		return c.mss - tsOptLen
	}
	return c.mss
}

// canSend reports whether the state still has data or a FIN to (re)send.
func (c *conn) canSend() bool {
	switch c.state {
	case rings.StateEstablished, rings.StateCloseWait, rings.StateFinWait1,
		rings.StateClosing, rings.StateLastAck:
		return true
	}
	return false
}

// output sends what the peer's window and the congestion window allow, in
// MSS segments read by DMA from the send queue, then the FIN; it arms the
// retransmission or persist timer.
func (c *conn) output(now int64) {
	if !c.canSend() {
		return
	}
	if c.ulp.u != nil {
		c.ulpPull()
	}
	mss := c.maxPayload()
	for {
		if c.sndNxt.LessThan(c.sndUna) {
			c.sndNxt = c.sndUna
		}
		inflight := c.sndNxt.Sub(c.sndUna)
		if c.sacked.n > 0 {
			inflight -= c.sacked.below(c.sndNxt) // the peer has those
		}
		cw := c.cwnd
		if !c.inRecovery && c.dupAcks > 0 && c.dupAcks < 3 && c.sacked.n == 0 {
			// Limited transmit (RFC 3042). With SACK, the SACKed bytes
			// are already out of inflight (RFC 6675's pipe), which is
			// the same allowance: both would send two segments per
			// duplicate ACK.
			cw += uint32(c.dupAcks) * mss
		}
		room := uint32(0)
		if c.inRecovery {
			// What Proportional Rate Reduction allows for the ACKs so
			// far (cc.go).
			room = c.cc.sndcnt
		} else if cw > inflight+c.rtxOut {
			room = cw - inflight - c.rtxOut
		}
		// What RACK marked lost goes first (rack.go): holes below SACKed
		// data, and retransmissions lost again.
		if c.inRecovery && c.sackOK && room > 0 {
			// With TSO a hole goes in super-frames, as much of it as the
			// room allows (one segment at least, as without).
			if h, n := c.nextLost(min(c.sendLimit(mss), max(room, mss))); n > 0 && h.LessThan(c.sndEnd) {
				n = min(n, c.sndEnd.Sub(h))
				if c.ulp.u != nil {
					if cut := c.ulpCut(h, n); cut > 0 {
						n = cut
					}
				}
				if !c.emit(now, h, n, hdr.TCPFlagACK, false) {
					c.fail(now, rings.NtfError, AuxErrorDMA)
					return
				}
				c.highRxt = seqnum.Max(c.highRxt, h.Add(n))
				c.rtxOut += n
				if h == c.sndUna {
					c.rtxAt = now
					c.armTLP(now)
				}
				continue
			}
		}
		if edge := c.sndUna.Add(c.sndWnd); !edge.GreaterThan(c.sndNxt) {
			room = 0
		} else if r := edge.Sub(c.sndNxt); r < room {
			room = r
		}
		avail := uint32(0)
		if c.sndEnd.GreaterThan(c.sndNxt) {
			avail = c.sndEnd.Sub(c.sndNxt)
		}
		if avail == 0 {
			if c.finQueued && c.sndNxt == c.finSeq {
				c.emit(now, c.sndNxt, 0, hdr.TCPFlagACK|hdr.TCPFlagFIN, false)
				c.sndNxt = c.sndNxt.Add(1)
				c.sndMax = seqnum.Max(c.sndMax, c.sndNxt)
			}
			break
		}
		// Resending after a timeout: skip what the peer holds.
		if c.sndNxt.LessThan(c.sndMax) && c.sacked.n > 0 {
			if end, ok := c.sacked.covering(c.sndNxt); ok {
				c.sndNxt = end
				continue
			}
		}
		n := min(avail, room, c.sendLimit(mss))
		if n == 0 {
			break
		}
		if c.sndNxt.LessThan(c.sndMax) && c.sacked.n > 0 {
			if nx, ok := c.sacked.next(c.sndNxt); ok && nx.Sub(c.sndNxt) < n {
				n = nx.Sub(c.sndNxt)
			}
		}
		if c.ulp.u != nil {
			// ULP output goes out in whole records (FPDUs aligned with
			// segments); a record that does not fit waits for the
			// window, unless nothing is in flight to open it.
			if cut := c.ulpCut(c.sndNxt, n); cut > 0 {
				n = cut
			} else if inflight > 0 && !c.sndNxt.LessThan(c.sndMax) {
				break
			}
		} else if n < mss && n < avail && inflight > 0 && n < c.maxSndWnd/2 && !c.sndNxt.LessThan(c.sndMax) {
			// Sender silly-window avoidance (RFC 9293 §3.8.6.2.1), for
			// new data only: a short resend (a hole between SACKed
			// ranges) goes.
			break
		} else if c.cc.nagle && n < mss && n == avail && c.sndMax != c.sndUna && !c.sndNxt.LessThan(c.sndMax) &&
			!(c.finQueued && c.sndNxt.Add(n) == c.finSeq) {
			// Nagle (RFC 9293 §3.7.4): the last short piece of new
			// data waits while anything is unacknowledged; the ACK, or
			// more data making a full segment, sends it. Not a FIN's.
			break
		}
		if !c.sendNext(now, n) {
			return
		}
	}
	if c.sndMax.GreaterThan(c.sndUna) {
		if c.rtoAt == 0 || c.persist {
			c.persist = false
			c.rtoAt = now + c.curRTO()
		}
		c.armTLP(now)
	} else if c.sndEnd.GreaterThan(c.sndNxt) && c.rtoAt == 0 {
		// Nothing in flight, data waiting: the window is closed.
		c.persist = true
		c.rtoAt = now + c.curRTO()
	}
}

// sendLimit is the most payload one frame of new data may carry: a
// segment, or with TCP segmentation offload (TSOEnv) as many whole segments
// as fit the port's limit and 64 KiB (IPv4 and IPv6 alike). A ULP's records keep to
// segments (their FPDUs are aligned with them).
func (c *conn) sendLimit(mss uint32) uint32 {
	e := c.e
	if e.tso == nil || c.ulp.u != nil || c.state != rings.StateEstablished && c.state != rings.StateCloseWait {
		return mss
	}
	limit := e.tsoMax
	if !c.tuple.LocalIP.Is4() {
		// TSO6: the IPv6 header is 20 bytes longer, and the frame
		// must still fit the port's 64 KiB.
		limit -= hdr.IPv6Size - hdr.IPv4MinSize
	}
	if limit <= int(mss) {
		return mss
	}
	return uint32(limit) / mss * mss
}

// sendNext sends n bytes from SND.NXT (with the FIN when they end where it
// goes) and advances SND.NXT and SND.MAX. False: the connection failed.
func (c *conn) sendNext(now int64, n uint32) bool {
	flags := uint8(hdr.TCPFlagACK)
	fin := c.finQueued && c.sndNxt.Add(n) == c.finSeq
	if fin {
		flags |= hdr.TCPFlagFIN
	}
	if !c.emit(now, c.sndNxt, n, flags, false) {
		c.fail(now, rings.NtfError, AuxErrorDMA)
		return false
	}
	c.sndNxt = c.sndNxt.Add(n)
	if fin {
		c.sndNxt = c.sndNxt.Add(1)
	}
	c.sndMax = seqnum.Max(c.sndMax, c.sndNxt)
	return true
}

// retransmitHead sends the first unacknowledged segment again (fast
// retransmit, partial ACK, RTO), whatever the windows say.
func (c *conn) retransmitHead(now int64) bool {
	sq := c.sndUna
	n := uint32(0)
	if sent := seqnum.Min(c.sndMax, c.sndEnd); sent.GreaterThan(sq) {
		n = min(sent.Sub(sq), c.maxPayload()) // only what was sent before
		if c.ulp.u != nil {
			if cut := c.ulpCut(sq, n); cut > 0 {
				n = cut
			}
		}
	}
	flags := uint8(hdr.TCPFlagACK)
	end := sq.Add(n)
	if c.finQueued && end == c.finSeq && c.sndMax.GreaterThan(c.finSeq) {
		flags |= hdr.TCPFlagFIN
		end = end.Add(1)
	}
	if n == 0 && flags&hdr.TCPFlagFIN == 0 {
		return true
	}
	if !c.emit(now, sq, n, flags, false) {
		c.fail(now, rings.NtfError, AuxErrorDMA)
		return false
	}
	if c.sndNxt.LessThan(end) {
		c.sndNxt = end
	}
	if c.highRxt.LessThan(end) {
		c.highRxt = end
	}
	if c.inRecovery && c.sackOK {
		c.rtxOut += n
	}
	if c.inRecovery {
		c.rtxAt = now
		c.armTLP(now)
	}
	return true
}

// Tail loss probe (RFC 8985 §7). A loss at the tail of a flight leaves
// too few segments behind it to produce duplicate ACKs, and a receiver
// that delays its ACK for what did arrive (Linux: up to 40 ms) lets the
// RTO fire first; so two round trips after the last transmission with no
// ACK, the sender sends one segment: the last one again. The receiver
// answers at once: the probe is out of order (the tail was lost), and the
// SACK it carries starts ordinary recovery (dupAck: a probe SACKed while
// the head is not means the head is lost); or it is a duplicate (the ACK
// was lost or held), which any receiver acknowledges at once with a D-SACK.
//
// RFC 8985 §7.3 prefers new data when there is some. A Linux receiver
// whose application is slow to read (its window not opening) holds its ACK
// for in-order data: in a capture of a TAP at 2% loss, a super-frame that
// arrived whole and the new-data probe after it drew no ACK for another
// probe timeout, while the duplicate probe drew one in 20 µs. A duplicate
// costs one segment when nothing was lost, and the D-SACK says so.

// minPTO is the floor of the probe timeout. On a path of tens of
// microseconds (a TAP to the local kernel) two round trips are well under
// it, and it is what a tail lost whole costs: a TSO super-frame is up to 44
// segments, often all of a small window's tail, so nothing behind it can be
// SACKed and only the probe finds it. A millisecond floor made those stalls
// a third of the time a 2%-loss transfer took (docs/benchmarks.md,
// BenchmarkTAPLossPair); a probe sent early costs one segment.
const minPTO = int64(200 * time.Microsecond)

// ptoRTT is the round-trip time probe timeouts are measured in: RACK's,
// with the device clock's precision, or the host's estimate before RACK
// has one (the timestamp option's is only as fine as its millisecond
// clock).
func (c *conn) ptoRTT() int64 {
	if c.rack.srtt > 0 {
		return c.rack.srtt
	}
	return c.srtt
}

// maxProbes is how many probes go out before the RTO is left to act: a
// second in case the first or its answer was lost.
const maxProbes = 2

// armTLP (re)arms the probe timer while data is out, the connection is not
// in recovery and probes are left (RFC 8985 §7.2).
func (c *conn) armTLP(now int64) {
	if c.inRecovery {
		// A resent head that brings no ACK in a probe timeout was lost
		// again; without this only the RTO would find it.
		c.tlpAt = 0
		if c.rtxAt != 0 && c.hasRTT && c.sackOK {
			if at := c.rtxAt + max(2*c.ptoRTT(), minPTO); c.rtoAt == 0 || at < c.rtoAt {
				c.tlpAt = at
			}
		}
		return
	}
	// Not under a ULP: its records go whole, so a probe could only resend
	// the head, which on a path that merely delays its ACK is a needless
	// retransmission (tshark calls it out of order); the RTO covers it.
	if c.tlpOut >= maxProbes || c.persist || !c.sackOK || !c.hasRTT || c.sndMax == c.sndUna || c.ulp.u != nil {
		c.tlpAt = 0
		return
	}
	pto := max(2*c.ptoRTT(), minPTO)
	if c.sndMax.Sub(c.sndUna) <= c.maxPayload() {
		pto += c.e.cfg.DelayedAck // one segment out: its ACK may be delayed
	}
	if c.rtoAt != 0 && now+pto >= c.rtoAt {
		c.tlpAt = 0 // the RTO comes first anyway
		return
	}
	c.tlpAt = now + pto
}

// probeTail sends the probe (RFC 8985 §7.3), or in recovery resends a
// head whose retransmission was lost.
func (c *conn) probeTail(now int64) {
	if c.inRecovery {
		if c.canSend() && c.rtxAt != 0 && c.sndMax != c.sndUna {
			c.e.ctr.LostRetransmits++
			c.retransmitHead(now)
		}
		return
	}
	if !c.canSend() || c.tlpOut >= maxProbes || c.sndMax == c.sndUna {
		return
	}
	e := c.e
	mss := c.maxPayload()
	sent := false
	if end := seqnum.Min(c.sndMax, c.sndEnd); end.GreaterThan(c.sndUna) {
		// The last segment again.
		n := min(end.Sub(c.sndUna), mss)
		sq := seq(uint32(end) - n)
		if !c.emit(now, sq, n, hdr.TCPFlagACK, false) { // counted as a retransmission there
			c.fail(now, rings.NtfError, AuxErrorDMA)
			return
		}
		sent = true
	}
	if !sent {
		return
	}
	e.ctr.TailLossProbes++
	c.st.tlps++
	if c.tlpOut == 0 {
		c.tlpHigh = c.sndMax
	}
	c.rack.tlpRtx = true // its verdict: tlpAck
	c.tlpOut++
	c.persist = false
	c.armTLP(now)
}

// rtoExpired: RFC 6298 §5.4-5.7 and RFC 5681 §3.1 (loss window).
func (c *conn) rtoExpired(now int64) {
	e := c.e
	if !c.canSend() || c.sndMax == c.sndUna {
		return
	}
	e.ctr.RTOExpired++
	c.st.rtos++
	// A peer that keeps answering with a zero window is alive: the timer
	// then acts as a persist timer and does not count toward giving up.
	if c.sndWnd == 0 && now-c.lastRecv < c.curRTO() {
		c.retries = 0
	}
	c.retries++
	if c.retries > e.cfg.MaxRetries {
		e.ctr.Timeouts++
		c.fail(now, rings.NtfTimeout, AuxTimeoutRetransmit)
		return
	}
	mss := c.maxPayload()
	if c.backoff == 0 {
		// Kept to undo, should the peer show the timeout needless.
		c.undoOK, c.undoCwnd, c.undoSsthresh, c.undoSeq = c.sackOK, c.cwnd, c.ssthresh, c.sndUna
		c.cc.undoWMax = c.cc.wMax
		c.cc.recUndo = false // a timeout: the last recovery's undo no longer applies
		c.ccLoss(c.sndMax.Sub(c.sndUna))
	}
	c.cwnd = mss
	c.caAcked = 0
	c.inRecovery = false
	c.dupAcks = 0
	c.recover = c.sndMax - 1
	c.timing = false
	if c.backoff > 0 {
		// A second timeout in a row: the peer may have reneged on what
		// it SACKed (RFC 2018 §8); resend everything.
		c.sacked.reset()
	}
	c.backoff++
	c.highRxt, c.rtxOut = c.sndUna, 0
	c.setLost(true)     // RFC 8985 §6.3
	c.sndNxt = c.sndUna // go back: resend from the hole, in slow start
	if !c.retransmitHead(now) {
		return
	}
	c.rtoAt = now + c.curRTO()
	c.persist = false
}

// persistExpired sends a zero-window probe (RFC 9293 §3.8.6.1): one
// already-acknowledged byte at SND.UNA-1, which any receiver must answer
// with an ACK carrying its current window (gVisor and Linux always answer
// out-of-window segments that carry data).
func (c *conn) persistExpired(now int64) {
	e := c.e
	c.persist = false
	if !c.canSend() {
		return
	}
	if c.sndMax != c.sndUna || c.sndWnd > 0 {
		c.output(now)
		return
	}
	if c.sndEnd == c.sndNxt {
		return
	}
	if c.probes >= e.cfg.MaxRetries {
		e.ctr.Timeouts++
		c.fail(now, rings.NtfTimeout, AuxTimeoutPersist)
		return
	}
	c.probes++
	e.ctr.PersistProbes++
	c.emit(now, c.sndUna-1, 1, hdr.TCPFlagACK, true)
	c.backoff++
	c.persist = true
	c.rtoAt = now + c.curRTO()
}

// keepaliveExpired: RFC 1122 §4.2.3.6.
func (c *conn) keepaliveExpired(now int64) {
	e := c.e
	if c.kaIdle == 0 || c.state == rings.StateClosed || c.state == rings.StateTimeWait {
		return
	}
	if c.kaSent == 0 && now-c.lastRecv < c.kaIdle {
		c.kaAt = c.lastRecv + c.kaIdle
		return
	}
	if c.sndMax != c.sndUna || c.persist {
		// The retransmission or persist timer watches the peer.
		c.kaSent = 0
		c.kaAt = now + c.kaIdle
		return
	}
	if c.kaSent >= c.kaCount {
		e.ctr.Timeouts++
		c.fail(now, rings.NtfTimeout, AuxTimeoutKeepalive)
		return
	}
	c.kaSent++
	e.ctr.KeepaliveProbes++
	c.emit(now, c.sndUna-1, 1, hdr.TCPFlagACK, true)
	c.kaAt = now + c.kaIntvl
}

// sendAck sends a pure ACK (with the current window, timestamps and SACK
// blocks). Its sequence number is SND.MAX, the RFC's SND.NXT: after a
// timeout the engine resends from SND.UNA by moving its own send pointer
// back, but an ACK numbered below what the peer already has would be
// unacceptable to it, and two such peers would each drop the ACK the other
// needs.
func (c *conn) sendAck(now int64) {
	c.e.ctr.AcksSent++
	c.emit(now, c.sndMax, 0, hdr.TCPFlagACK, false)
}

// sendRst resets the connection at the peer (ABORT, timeouts).
func (c *conn) sendRst(now int64) {
	c.emit(now, c.sndMax, 0, hdr.TCPFlagRST|hdr.TCPFlagACK, false)
}

// windowField computes the window to advertise and moves the advertised
// right edge: receive buffer less uncredited legacy bytes and held
// out-of-order bytes, grown only by at least min(buffer/2, MSS) (receiver
// silly-window avoidance), never moved left (RFC 9293 §3.8.6.2.2).
func (c *conn) windowField() uint16 {
	buf, free := c.rcvSpace()
	edge := c.rcvAdvEdge
	if edge.LessThan(c.rcvNxt) {
		edge = c.rcvNxt
	}
	if desired := c.rcvNxt.Add(free); desired.GreaterThan(edge) {
		if desired.Sub(edge) >= min(buf/2, c.mss) {
			edge = desired
		}
	}
	wnd := edge.Sub(c.rcvNxt)
	f := (wnd + (1 << c.rcvScale) - 1) >> c.rcvScale // round up: never shrink
	if c.ulp.u != nil && f<<c.rcvScale > c.ulpHoldRoom() {
		// A ULP's hold is a hard limit: rounding up, repeated as
		// RCV.NXT moves, would creep the edge past it. Round down
		// instead (the advertised edge falls short of the one already
		// promised by less than one scale unit; segments up to that
		// one are still accepted).
		f = wnd >> c.rcvScale
	}
	if f > 0xFFFF {
		f = 0xFFFF
	}
	if adv := c.rcvNxt.Add(f << c.rcvScale); adv.GreaterThan(c.rcvAdvEdge) {
		c.rcvAdvEdge = adv
	}
	if f == 0 {
		c.e.ctr.ZeroWindowsSent++
	}
	return uint16(f)
}

// windowUpdateDue reports whether crediting freed enough window that the
// peer should hear about it now rather than with the next ACK.
func (c *conn) windowUpdateDue() bool {
	cur := uint32(0)
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		cur = c.rcvAdvEdge.Sub(c.rcvNxt)
	}
	buf, free := c.rcvSpace()
	if free <= cur {
		return false
	}
	grow := free - cur
	return grow >= min(buf/2, c.mss) && (cur < buf/2 || grow >= 2*c.mss)
}

// rcvSpace returns the receive buffer and the part of it free: not taken by
// uncredited legacy bytes, held out-of-order bytes or in-order bytes a ULP
// has not taken (whose hold bounds the buffer).
func (c *conn) rcvSpace() (buf, free uint32) {
	buf = c.rcvBuf
	if c.ulp.u != nil {
		buf = min(buf, uint32(len(c.ulp.hold))-1<<c.rcvScale)
	}
	used := c.legacyUncredited + c.ooo.bytes + uint32(c.ulp.held)
	if buf > used {
		free = buf - used
	}
	return buf, free
}

// emit builds one segment in the engine's frame buffer and transmits it.
// n payload bytes come from the send queue at sq by DMA, or for a probe one
// zero byte. It returns false only if the send queue could not be read.
func (c *conn) emit(now int64, sq seq, n uint32, flags uint8, probe bool) bool {
	e := c.e
	f := e.frame
	copy(f, c.tmpl[:])
	nhl := netHdrLenOf(&c.tuple)
	tcp := hdr.TCP(f[hdr.EthernetSize+nhl:])
	opt := tcp[hdr.TCPMinSize:]
	ol := 0
	if c.tsOK {
		opt[0], opt[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
		ol = 2 + hdr.PutTCPOptTimestamp(opt[2:], c.tsNow(now), c.tsRecent)
	}
	if c.sackOK && (c.ooo.n > 0 || c.dsackEnd != c.dsackStart) && flags&hdr.TCPFlagRST == 0 {
		maxB := hdr.TCPMaxSACKBlocks
		if c.tsOK {
			maxB = maxSACKWithTS
		}
		if n > 0 || probe {
			space := int(c.mss) - ol - int(n)
			if fit := (space - sackOptHdrLen) / hdr.TCPSACKBlockLen; fit < maxB {
				maxB = fit
			}
		}
		if maxB > 0 {
			var blocks [hdr.TCPMaxSACKBlocks]sackBlock
			k := 0
			if c.dsackEnd != c.dsackStart {
				// A D-SACK first (RFC 2883 §4), reported once.
				blocks[0] = sackBlock{c.dsackStart, c.dsackEnd}
				c.dsackStart = c.dsackEnd
				k = 1
			}
			var rest [hdr.TCPMaxSACKBlocks]sackBlock
			m := c.ooo.sackBlocks(&rest, maxB-k)
			k += copy(blocks[k:], rest[:m])
			o := opt[ol:]
			o[0], o[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
			ol += 2 + hdr.PutTCPOptSACK(o[2:], k)
			for i := 0; i < k; i++ {
				hdr.PutTCPSACKBlock(o[2:], i, uint32(blocks[i].start), uint32(blocks[i].end))
			}
		}
	}
	hl := hdr.TCPMinSize + ol
	payload := tcp[hl : hl+int(n)]
	if probe {
		payload[0] = e.zero[0]
	} else if n > 0 && c.ulp.u != nil {
		c.ulpRead(payload, sq)
		if sq.Add(n) == c.sndEnd {
			flags |= hdr.TCPFlagPSH
		}
	} else if n > 0 {
		push, ok := c.readTx(payload, sq)
		if !ok {
			return false
		}
		if push || sq.Add(n) == c.sndEnd {
			flags |= hdr.TCPFlagPSH
		}
	}
	tcp.SetSeq(uint32(sq))
	if flags&hdr.TCPFlagACK != 0 {
		tcp.SetAck(uint32(c.rcvNxt))
	}
	tcp.SetHeaderLen(hl)
	tcp.SetFlags(flags)
	c.lastWnd = c.windowField()
	tcp.SetWindow(c.lastWnd)
	tcp.SetUrgent(0)
	segLen := hl + int(n)
	c.ipID++
	finishNetHeader(f, &c.tuple, c.ipID, tcp[:segLen])

	if (n > 0 || flags&hdr.TCPFlagFIN != 0) && !probe {
		c.txSent(now, sq, n, flags&hdr.TCPFlagFIN != 0)
		if c.inRecovery {
			c.prrSent(n)
		}
		if sq.LessThan(c.sndMax) {
			if c.inRecovery {
				c.recoveryResent(n)
			}
			e.ctr.TxRetransSegs++
			c.st.retrans++
			e.ctr.TxRetransByte += uint64(n)
			c.timing = false // Karn
		} else if n > 0 && !c.timing && !c.tsOK {
			c.timing = true
			c.rtSeq = sq.Add(n)
			c.rtStart = now
		}
	}
	fl := hdr.EthernetSize + nhl + segLen
	if fl < hdr.EthernetMinFrame {
		clear(f[fl:hdr.EthernetMinFrame]) // the MAC pads short frames
		fl = hdr.EthernetMinFrame
	}
	var err error
	if mss := c.maxPayload(); n > mss && e.tso != nil {
		err = e.tso.TransmitTSO(f[:fl], int(mss))
		if err == nil {
			e.ctr.TSOFrames++
		}
	} else {
		err = e.env.Transmit(f[:fl])
	}
	if err != nil {
		e.ctr.TxErrors++
	} else {
		e.ctr.TxSegments++
		e.ctr.TxBytes += uint64(n)
		c.st.segsOut++
	}
	if flags&hdr.TCPFlagACK != 0 && flags&hdr.TCPFlagRST == 0 {
		c.lastAckSent = c.rcvNxt
		c.segsUnacked = 0
		c.delackAt = 0
		c.ackNow = false
	}
	return true
}
