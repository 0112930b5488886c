package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/seqnum"
)

// RxFlags is what the device's receive parser already established about a
// segment it hands to InputFlags, as the status bits of a NIC's receive
// descriptor carry it.
type RxFlags uint8

const (
	// RxTCPChecksumOK: the device verified the TCP checksum over the
	// pseudo-header and the whole segment (tcpSeg up to the network
	// header's length), the bytes the engine parses. The engine does not
	// sum the segment a second time.
	RxTCPChecksumOK RxFlags = 1 << iota
)

// InputSegment processes one received TCP segment of delegated connection
// idx. t is the tuple the network layer read from the packet, as its
// receiver sees it (local: the destination); tcpSeg is the network
// payload, the TCP header and data, cut to the length the network header
// gives. The segment is parsed in place and never retained; its checksum
// is verified here against t's pseudo-header unless fl has
// RxTCPChecksumOK. Every rejection is counted.
func (e *Engine) InputSegment(idx uint32, t *hdr.Tuple, tcpSeg []byte, fl RxFlags) {
	e.input(idx, t, tcpSeg, fl, 1)
}

// InputSegmentLRO is InputSegment for a super-frame the device took whole
// (large receive offload): a TCP segment standing for segs wire segments
// (a TAP hands the kernel's 64 KiB TSO output over as one). Its payload is
// placed in one pass; the ACK rules count it as segs segments (RFC 5681's
// ACK for every second one, maxStretch), as a Linux receiver counts a GRO
// packet. RxSegments counts segs, RxLRO the super-frames.
func (e *Engine) InputSegmentLRO(idx uint32, t *hdr.Tuple, tcpSeg []byte, fl RxFlags, segs int) {
	e.ctr.RxLRO++
	e.input(idx, t, tcpSeg, fl, max(segs, 1))
}

// inputConn starts every input: pending notifications go first, then the
// connection at idx (nil: none).
func (e *Engine) inputConn(idx uint32) *conn {
	if len(e.pendList) > 0 {
		e.flushNotify(e.env.NowNanos())
	}
	return e.get(idx)
}

func (e *Engine) input(idx uint32, t *hdr.Tuple, tcpSeg []byte, fl RxFlags, segs int) {
	c := e.inputConn(idx)
	if c == nil || c.state == rings.StateClosed {
		// The index's connection is gone or closing; a segment of a
		// 4-tuple in TIME_WAIT is the record's (timewait.go).
		if e.InputUnmatchedSegment(t, tcpSeg, fl) {
			return
		}
		if c == nil {
			e.ctr.DropNoConn++
			return
		}
	}
	e.inputSegment(c, t, tcpSeg, fl, segs)
}

// inputSegment is input from the tuple check on, for a connection found.
func (e *Engine) inputSegment(c *conn, t *hdr.Tuple, tcpSeg []byte, fl RxFlags, segs int) {
	if len(tcpSeg) < hdr.TCPMinSize {
		e.ctr.DropShort++
		return
	}
	if *t != c.tuple {
		e.ctr.DropTupleMismatch++
		return
	}
	if fl&RxTCPChecksumOK == 0 && !hdr.TCP(tcpSeg).ChecksumOKAddr(t.RemoteIP, t.LocalIP) {
		e.ctr.DropBadChecksum++
		return
	}
	var s segment
	switch parseTCP(tcpSeg, &s) {
	case parseShort:
		e.ctr.DropShort++
		return
	case parseBadOffset:
		e.ctr.DropBadOffset++
		return
	case parseBadOptions:
		e.ctr.DropBadOptions++
		return
	}
	e.ctr.RxSegments += uint64(segs)
	c.st.segsIn += uint64(segs)
	s.segs = uint32(segs)
	now := e.env.NowNanos()
	c.input(now, &s)
	e.schedule(c)
}

// input is RFC 9293 §3.10.7.4 (segment arrives, synchronized states) with
// RFC 5961 and RFC 7323 checks: one function per step, in the RFC's order,
// each returning false when the segment stops there.
func (c *conn) input(now int64, s *segment) {
	if c.state == rings.StateClosed {
		c.e.ctr.DropClosed++
		return
	}
	if c.ulp.held > 0 {
		c.ulpFlushHeld()
	}
	if c.ooo.n > 0 {
		c.retryOOO(now)
	}
	if !c.inputTimestamps(now, s) || !c.inputSequence(now, s) || !c.inputControl(now, s) {
		return
	}
	c.inputEstablished(now, s)
}

// inputTimestamps is RFC 7323: a connection with timestamps drops a
// segment without one, and PAWS drops an old one (with an ACK).
func (c *conn) inputTimestamps(now int64, s *segment) bool {
	if !c.tsOK || s.flags&hdr.TCPFlagRST != 0 {
		return true
	}
	if !s.hasTS {
		c.e.ctr.DropNoTimestamp++
		return false
	}
	if seq(s.tsVal).LessThan(seq(c.tsRecent)) && now-c.tsRecentAt < 24*86400e9 {
		c.e.ctr.DropPAWS++
		c.sendOOWAck(now, len(s.payload) > 0 || s.flags&hdr.TCPFlagFIN != 0)
		return false
	}
	return true
}

// acceptable is RFC 9293's acceptability table, against the window we
// advertised.
func (c *conn) acceptable(s *segment) bool {
	segLen := s.seqLen()
	wnd := uint32(0)
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		wnd = c.rcvAdvEdge.Sub(c.rcvNxt)
	}
	switch {
	case segLen == 0 && wnd == 0:
		return s.seq == c.rcvNxt
	case segLen == 0:
		return s.seq.InRange(c.rcvNxt, c.rcvAdvEdge)
	case wnd == 0:
		return false
	default:
		return s.seq.InRange(c.rcvNxt, c.rcvAdvEdge) ||
			s.seq.Add(segLen-1).InRange(c.rcvNxt, c.rcvAdvEdge)
	}
}

// inputSequence is the first check, the sequence number: an unacceptable
// segment is dropped, though a valid ACK in it still counts.
func (c *conn) inputSequence(now int64, s *segment) bool {
	e := c.e
	ok := c.acceptable(s)
	if ok || s.seq == c.rcvNxt {
		// The peer is alive (keepalive, zero-window probing); an
		// out-of-window segment proves less, so it does not count.
		c.lastRecv = now
		c.kaSent = 0
		c.probes = 0
	}
	if ok {
		return true
	}
	if s.flags&hdr.TCPFlagRST != 0 {
		e.ctr.RstOutOfWindow++
		return false
	}
	e.ctr.DropOutOfWindow++
	if n := uint32(len(s.payload)); n > 0 && c.sackOK && !s.seq.Add(n).GreaterThan(c.rcvNxt) {
		// Data we already have: its ACK tells the sender so with a
		// D-SACK (RFC 2883), which lets it undo a needless
		// retransmission's window cut.
		c.dsackStart, c.dsackEnd = s.seq, s.seq.Add(n)
	}
	// An unacceptable segment's data is dropped, but a valid ACK in it
	// still counts (RFC 9293 §3.10.7.4: "special allowance should be
	// made to accept valid ACKs"), whatever its SEG.SEQ. A peer whose
	// bytes this end refused (no buffer posted, a window that closed)
	// sends every later ACK at its SND.NXT, past RCV.NXT: ignoring
	// those deadlocks an application that writes before it reads
	// (its send side never hears the ACKs, so it never reads, so the
	// window never opens). Seen with four full-duplex echoes between
	// two engines; netstack has the same flaw (tcpstack's ackRepair).
	// The ACK must still be in the RFC 5961 §5 range, and SND.WL1/WL2
	// keep an old segment's window out; only the classic zero-window
	// case (SEQ = RCV.NXT, no data) can count as a duplicate ACK.
	if s.flags&hdr.TCPFlagACK != 0 && s.flags&hdr.TCPFlagSYN == 0 &&
		s.ack.LessThanEq(c.sndMax) && !s.ack.LessThan(c.sndUna-seq(c.maxSndWnd)) {
		c.processAck(now, s, s.seq == c.rcvNxt && len(s.payload) == 0 && s.flags&hdr.TCPFlagFIN == 0)
		if c.state == rings.StateClosed || c.state == rings.StateTimeWait {
			return false
		}
		c.output(now)
	}
	c.sendOOWAck(now, len(s.payload) > 0 || s.flags&hdr.TCPFlagFIN != 0)
	return false
}

// inputControl is the second to fifth checks of an acceptable segment:
// RST (RFC 5961 §3: only at exactly RCV.NXT), SYN (RFC 5961 §4: always a
// challenge), the ACK bit, and the acceptable ACK range (RFC 5961 §5).
func (c *conn) inputControl(now int64, s *segment) bool {
	e := c.e
	if s.flags&hdr.TCPFlagRST != 0 {
		if s.seq == c.rcvNxt {
			e.ctr.RstAccepted++
			c.toClosed(rings.NtfRst)
			return false
		}
		c.challengeAck(now)
		return false
	}
	if s.flags&hdr.TCPFlagSYN != 0 {
		e.ctr.SynReceived++
		c.challengeAck(now)
		return false
	}
	if s.flags&hdr.TCPFlagACK == 0 {
		e.ctr.DropNoAck++
		return false
	}
	if s.ack.GreaterThan(c.sndMax) {
		e.ctr.DropAckUnsent++
		c.sendOOWAck(now, len(s.payload) > 0 || s.flags&hdr.TCPFlagFIN != 0)
		return false
	}
	if s.ack.LessThan(c.sndUna - seq(c.maxSndWnd)) {
		e.ctr.DropAckTooOld++
		c.challengeAck(now)
		return false
	}
	return true
}

// inputEstablished is a segment that passed every check: its timestamp
// (RFC 7323 §4.3), its ACK, then, by the state the ACK left, its data and
// FIN, and what the connection sends in answer.
func (c *conn) inputEstablished(now int64, s *segment) {
	if c.tsOK && s.hasTS && seq(s.tsVal).GreaterThanEq(seq(c.tsRecent)) && s.seq.LessThanEq(c.lastAckSent) {
		c.tsRecent = s.tsVal
		c.tsRecentAt = now
	}
	segLen := s.seqLen()
	c.processAck(now, s, len(s.payload) == 0 && s.flags&hdr.TCPFlagFIN == 0)
	switch c.state {
	case rings.StateClosed:
		return
	case rings.StateTimeWait:
		// Our FIN was just acknowledged in CLOSING: the peer's FIN is
		// already in; anything else it carries is a retransmission.
		if segLen > 0 {
			c.sendAck(now)
		}
		return
	}
	if segLen > 0 {
		c.processData(now, s)
	}
	c.output(now)
	if c.ackNow {
		c.sendAck(now)
	} else if c.segsUnacked > 0 && c.delackAt == 0 {
		c.delackAt = now + c.e.cfg.DelayedAck
	}
}

// challengeAck sends an RFC 5961 challenge ACK, rate limited engine-wide.
func (c *conn) challengeAck(now int64) {
	if !c.e.challengeAllowed(now) {
		return
	}
	c.e.ctr.ChallengeAcks++
	c.sendAck(now)
}

// sendOOWAck answers a segment that could not be accepted. Segments with
// data or a FIN are always answered (a sender probing a zero window, or
// retransmitting a FIN whose ACK was lost, needs it);
// zero-length ones at most once per OOWAckInterval, so two confused peers
// cannot ACK each other forever.
func (c *conn) sendOOWAck(now int64, hasData bool) {
	if !hasData {
		if c.oowAckAt != 0 && now < c.oowAckAt {
			return
		}
		c.oowAckAt = now + c.e.cfg.OOWAckInterval
	}
	c.sendAck(now)
}

// processAck handles SEG.ACK and SEG.WND. pure says the segment carries no
// data and no FIN (a candidate duplicate ACK).
func (c *conn) processAck(now int64, s *segment, pure bool) {
	c.ackCount++
	// What the ACK tells was delivered (RFC 6937's DeliveredData): the
	// cumulative advance plus the change in what is SACKed.
	una := c.sndUna
	sackedBefore := c.sacked.below(c.sndMax)

	// Window update (RFC 9293 §3.10.7.4, SND.WL1/SND.WL2).
	oldWnd := c.sndWnd
	wndUpdated := false
	if c.sndWl1.LessThan(s.seq) || (c.sndWl1 == s.seq && c.sndWl2.LessThanEq(s.ack)) {
		w := uint32(s.wnd) << c.sndScale
		c.sndWnd = w
		c.sndWl1, c.sndWl2 = s.seq, s.ack
		if w > c.maxSndWnd {
			c.maxSndWnd = w
		}
		wndUpdated = w != oldWnd
		if w > 0 && c.persist {
			// The window opened: stop probing.
			c.persist = false
			c.rtoAt = 0
			c.backoff = 0
		}
	}

	if c.undoOK {
		c.undoSpuriousRTO(s)
	}
	dsack := false
	if c.sackOK && s.nSACK > 0 {
		// A D-SACK (RFC 2883 §4): the first block below the cumulative
		// ACK, or inside the second. It widens RACK's reordering window
		// and may show the last recovery spurious.
		b := s.sack[0]
		if b.start.LessThan(b.end) && (b.end.LessThanEq(s.ack) || s.nSACK > 1 && s.sack[1].start.LessThanEq(b.start) && b.end.LessThanEq(s.sack[1].end)) {
			dsack = true
			c.rackDSACK()
			c.dsack(b.start, b.end)
		}
	}
	c.tlpAck(s.ack, dsack, pure && s.nSACK == 0)
	var before scoreboard
	if c.sackOK {
		before = c.sacked
	}
	if c.sackOK && s.nSACK > 0 {
		span := c.sndMax.Sub(c.sndUna)
		for i := 0; i < s.nSACK; i++ {
			b := s.sack[i]
			// Only blocks inside what we sent and above SND.UNA (D-SACKs
			// and nonsense are ignored). Offsets from SND.UNA, not
			// sequence comparisons: a block 2^31 away compares "inside".
			if b.start.LessThan(b.end) && b.start.Sub(c.sndUna) <= span && b.end.Sub(c.sndUna) <= span {
				c.sacked.add(b.start, b.end)
			}
		}
	}
	if c.sackOK && c.sndMax.GreaterThan(c.sndUna) {
		// RACK (rack.go): what this ACK delivered dates what is lost.
		c.rackDelivered(now, s.ack, &before)
		c.rackDetect(now, seqnum.Max(s.ack, c.sndUna))
	}
	switch {
	case s.ack.GreaterThan(c.sndUna):
		c.newAck(now, s)
	case s.ack == c.sndUna && pure && (!wndUpdated || s.nSACK > 0) && c.sndMax.GreaterThan(c.sndUna):
		// A window change normally disqualifies a duplicate ACK (RFC
		// 5681), but an ACK carrying SACK blocks is a loss signal whatever
		// its window (RFC 6675 §2): Linux grows its window in the very
		// duplicate ACKs that report the hole.
		c.dupAck(now)
	}
	if c.sackOK && c.rack.anyLost && !c.inRecovery && c.sndUna.GreaterThan(c.recover) && c.sndMax.GreaterThan(c.sndUna) {
		// RACK found a loss, on a duplicate ACK or one that moved SND.UNA.
		c.enterRecovery(now)
	}
	if c.inRecovery {
		delivered := int64(c.sndUna.Sub(una)) + int64(c.sacked.below(c.sndMax)) - int64(sackedBefore)
		c.prrAck(uint32(max(delivered, 0)), c.pipe())
	}
}

// newAck: SEG.ACK advanced SND.UNA.
func (c *conn) newAck(now int64, s *segment) {
	e := c.e
	acked := s.ack.Sub(c.sndUna)
	c.sndUna = s.ack
	c.st.bytesAcked += uint64(acked)
	if c.ulp.u != nil {
		c.ulpTrim()
	}
	if c.sndNxt.LessThan(c.sndUna) {
		c.sndNxt = c.sndUna // the peer had data we were about to resend
	}
	c.sacked.trim(c.sndUna)
	c.tx.trim(c.sndUna)
	if !c.highRxt.GreaterThan(c.sndUna) {
		c.highRxt = c.sndUna
		c.rtxOut = 0
	} else if r := c.highRxt.Sub(c.sndUna); r < c.rtxOut {
		c.rtxOut = r
	}
	finAcked := c.finQueued && c.sndUna == c.finSeq.Add(1)

	// RTT (RFC 7323 §4 with timestamps, Karn otherwise).
	if c.tsOK && s.hasTS && s.tsEcr != 0 {
		if d := c.tsNow(now) - s.tsEcr; d < 1<<20 {
			c.rttSample(int64(d) * 1e6)
		}
	} else if c.timing && c.sndUna.GreaterThanEq(c.rtSeq) {
		c.timing = false
		c.rttSample(now - c.rtStart)
	}
	c.retries = 0
	c.backoff = 0
	c.tlpOut = 0
	c.rtxAt = 0 // a new head
	if c.cwr && !c.cwrCovers() {
		c.cwr = false // the flight the probe's cut was for is acknowledged
	}
	if c.inRecovery {
		if c.sndUna.GreaterThan(c.recover) {
			// Full ACK (RFC 6582 §3.2 step 3): the window is where PRR
			// brought it, ssthresh (RFC 6937 §3).
			c.cwnd = c.ssthresh
			c.inRecovery = false
			c.dupAcks = 0
			c.rackRecoveryDone()
		} else {
			// Partial ACK: retransmit the next hole (RFC 6582), unless it
			// was resent, or SACK blocks tell what is missing (what RACK
			// marks lost goes out in output); PRR paces the rest
			// (processAck).
			e.ctr.PartialAcks++
			if !c.highRxt.GreaterThan(c.sndUna) && (!c.sackOK || c.sacked.n == 0) {
				c.retransmitHead(now)
			} else {
				// The new head was resent before the ACK that
				// uncovered it left the peer: its own ACK is due
				// within a round trip. Without one in two, it was lost
				// again (armTLP); without this only the RTO would
				// find it (RFC 8985's rule, with the resend times of
				// the holes approximated by now).
				c.rtxAt = now
			}
			if !c.partialSeen {
				c.partialSeen = true
				c.rtoAt = now + c.curRTO()
			}
		}
	} else {
		c.dupAcks = 0
		c.ccAck(now, acked)
	}

	// Buffers the host may free, and the ACK threshold.
	freed := c.popAcked()
	c.ackedSince += acked
	if (c.ackThresh > 0 && c.ackedSince >= c.ackThresh) ||
		(c.ackThresh == 0 && freed > 0) ||
		(c.txCount == 0 && (freed > 0 || finAcked)) {
		c.ackedSince = 0
		c.notify(rings.NtfAckThreshold, c.sndNxt, 0, 0)
	}

	// RFC 6298 §5.2/5.3: stop or restart the retransmission timer.
	if c.sndUna == c.sndMax {
		if !c.persist {
			c.rtoAt = 0
		}
	} else if !c.inRecovery || !c.partialSeen || c.rtoAt == 0 {
		c.rtoAt = now + c.curRTO()
		c.persist = false
	}
	c.armTLP(now)

	if finAcked {
		switch c.state {
		case rings.StateFinWait1:
			c.state = rings.StateFinWait2
		case rings.StateClosing:
			c.enterTimeWait(now)
		case rings.StateLastAck:
			c.toClosed(0)
		}
	}
}

// dupAck: RFC 5681 §3.2 / RFC 6582.
func (c *conn) dupAck(now int64) {
	e := c.e
	e.ctr.DupAcksRx++
	c.dupAcks++
	switch {
	case c.inRecovery:
		// PRR lets what left the network be replaced (processAck).
	case c.dupAcks >= 3 && c.sndUna.GreaterThan(c.recover):
		// (RACK's evidence before three starts it in processAck.)
		c.enterRecovery(now)
	}
}

// enterRecovery starts a fast recovery (RFC 6675 §5 with RFC 6937's rate
// reduction): on three duplicate ACKs, or on RACK's evidence before them.
func (c *conn) enterRecovery(now int64) {
	e := c.e
	if c.dupAcks < 3 {
		e.ctr.SACKRecoveries++
	}
	e.ctr.FastRetransmits++
	c.st.fastRecoveries++
	c.tlpAt = 0
	flight := c.sndMax.Sub(c.sndUna)
	if c.cwrCovers() {
		// A tail probe's verdict cut the window for this flight
		// already (tlpAck): the recovery resends, PRR paces it toward
		// that ssthresh, and there is nothing of its own to undo.
		c.cc.recUndo = false
	} else {
		c.recoveryUndoStart()
		c.ccLoss(flight)
	}
	c.cwr = false
	// This recovery's cut is the probe's episode's too: a verdict on a
	// probe sent before it (tlpAck, on the ACK that passes the probe's
	// SND.MAX) would cut the window a second time for the same loss. On
	// a TAP at 2% loss, one recovery in four was followed by that second
	// cut (Linux clears tlp_high_seq when a reduction starts).
	c.rack.tlpRtx = false
	c.prrStart(flight)
	c.recover = c.sndMax - 1
	c.inRecovery = true
	c.partialSeen = false
	c.timing = false
	c.highRxt, c.rtxOut = c.sndUna, 0
	c.retransmitHead(now)
	c.notify(rings.NtfDupAck, c.sndNxt, 0, 0)
}

// undoSpuriousRTO looks at the first ACK after an RTO: if its first SACK
// block is a D-SACK (below the cumulative ACK, RFC 2883 §4) for the segment
// the RTO resent, the original had arrived, and the timeout cost nothing but
// time: the congestion state goes back to what it was, and the go-back
// stops (the ACK covers what was in flight, so there is nothing to resend).
func (c *conn) undoSpuriousRTO(s *segment) {
	c.undoOK = false
	if s.nSACK == 0 {
		return
	}
	b := s.sack[0]
	if !b.end.LessThanEq(s.ack) || !b.start.LessThanEq(c.undoSeq) || !c.undoSeq.LessThan(b.end) {
		return
	}
	c.e.ctr.SpuriousTimeouts++
	c.setLost(false)
	c.cwnd = max(c.cwnd, c.undoCwnd)
	c.ssthresh = max(c.ssthresh, c.undoSsthresh)
	c.cc.wMax, c.cc.epoch = max(c.cc.wMax, c.cc.undoWMax), 0
	c.backoff = 0
	if c.sndNxt.LessThan(c.sndMax) && s.ack.GreaterThanEq(c.sndNxt) {
		c.sndNxt = seqnum.Min(s.ack, c.sndMax)
	}
}

// processData places the segment's payload and FIN (the segment is
// acceptable: it overlaps the window).
func (c *conn) processData(now int64, s *segment) {
	e := c.e
	data := s.payload
	start := s.seq
	fin := s.flags&hdr.TCPFlagFIN != 0
	push := s.flags&hdr.TCPFlagPSH != 0
	if c.finRcvd {
		if len(data) > 0 {
			e.ctr.DropDataAfterFin++
		}
		c.ackNow = true
		return
	}
	// Trim what we already have.
	if start.LessThan(c.rcvNxt) {
		d := c.rcvNxt.Sub(start)
		if d >= uint32(len(data)) {
			d = uint32(len(data))
		}
		data = data[d:]
		start = start.Add(d)
		if start.LessThan(c.rcvNxt) { // the FIN itself is old
			c.ackNow = true
			return
		}
	}
	// Trim what lies beyond the window we advertised.
	if end := start.Add(uint32(len(data))); end.GreaterThan(c.rcvAdvEdge) {
		keep := uint32(0)
		if c.rcvAdvEdge.GreaterThan(start) {
			keep = c.rcvAdvEdge.Sub(start)
		}
		data = data[:keep]
		fin = false
		push = false
		c.ackNow = true
	}
	if c.oooFin && start.Add(uint32(len(data))).GreaterThan(c.oooFinSeq) {
		// Data past a FIN we already hold: the peer is confused.
		e.ctr.DropDataAfterFin++
		keep := uint32(0)
		if c.oooFinSeq.GreaterThan(start) {
			keep = c.oooFinSeq.Sub(start)
		}
		data = data[:keep]
		fin = false
	}

	if start != c.rcvNxt {
		c.queueOOO(start, data, fin, push)
		c.ackNow = true // duplicate ACK (with SACK) at once
		return
	}

	hadOOO := c.ooo.n > 0
	placed := c.deliver(data, push)
	if placed < len(data) {
		// No room for the rest: it is dropped as a NIC drops a frame
		// with no receive buffer; the peer retransmits it.
		fin = false
		if placed == 0 && !hadOOO {
			return
		}
		c.ackNow = true
	}
	if hadOOO {
		c.drainOOO()
		c.ackNow = true // a hole filled: tell the sender now
	}
	if fin || (c.oooFin && c.rcvNxt == c.oooFinSeq) {
		c.rcvFin(now)
		return
	}
	if len(data) > 0 {
		c.segsUnacked += int(max(s.segs, 1))
		switch {
		case c.segsUnacked >= maxStretch || c.segsUnacked >= 2 && !e.inBurst:
			c.ackNow = true
		case c.segsUnacked >= 2 && !c.burstAck:
			// In a receive burst: one ACK when the burst ends covers
			// every segment of it (see BeginBurst).
			c.burstAck = true
			e.burstConns = append(e.burstConns, c.idx)
		}
	}
}

// maxStretch is the most in-order data segments one ACK covers in a
// receive burst. A Linux receiver's GRO acknowledges a 64 KiB GRO packet
// at once; a 64 KiB super-frame is 46 segments of 1,448 bytes, so 64 lets
// one ACK cover a whole super-frame (32 took two: 3.5% of a bulk
// receiver's throughput on a TAP, docs/benchmarks-history.md).
const maxStretch = 64

// BeginBurst and EndBurst bracket a batch of Input calls the device makes
// back to back (the frames its port delivered together: a TAP with
// offloads hands over a 64 KiB super-frame as ~44 segments in one go).
// Inside a burst, the ACK RFC 5681 sends for every second full segment waits
// for EndBurst, which sends one ACK per connection for all of it, like a
// receiver's GRO: on a path where each frame is a system call, that halves
// the calls a bulk receiver makes. Anything that must be acknowledged at
// once (out of order, a hole filled, a window edge) still is; at most
// maxStretch segments wait.
func (e *Engine) BeginBurst() { e.inBurst = true }

// EndBurst sends the ACKs BeginBurst deferred.
func (e *Engine) EndBurst(now int64) {
	e.inBurst = false
	for _, idx := range e.burstConns {
		c := e.get(idx)
		if c == nil || !c.burstAck {
			continue
		}
		c.burstAck = false
		if c.segsUnacked > 0 && c.canSend() {
			c.sendAck(now)
		}
	}
	e.burstConns = e.burstConns[:0]
}
