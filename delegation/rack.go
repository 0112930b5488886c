package delegation

import (
	"slices"

	"github.com/emunic/emunic/seqnum"
)

// RACK (RFC 8985): loss detection by time. The sender keeps, for the
// sequence space it has sent and not had acknowledged, when each range was
// last sent (txLog). An ACK or SACK that delivers a range tells the sender
// that everything sent before that range's last transmission, by more than
// the reordering window, is lost: a hole below SACKed data the first time,
// and just as well a retransmission lost again, which the counting rules of
// RFC 6675 cannot see until the timeout. The reordering window is zero
// until the path shows reordering (a never-resent range delivered below one
// delivered before it), then a quarter of the minimum RTT, widened by
// D-SACKs (RACK.reo_wnd_mult) and narrowed again after 16 recoveries
// without one. A range not yet old enough arms the reordering timer
// (rackAt). The tail loss probe (armTLP, probeTail) is RFC 8985 §7.

// maxTxRanges bounds a connection's log: past it, a new range merges into
// the last one (the later time kept, so a loss is marked later, never
// earlier: the timers cover the rest). A merged range's time is not when
// most of its bytes went, so its delivery dates nothing (txRange.merged):
// taken as a sample, it measured an RTT of 75 µs on a 100 µs path in a
// recovery of 44 segments from a 1 MB flight, and RACK then marked lost
// whole flights that had arrived.
const maxTxRanges = 1024

// keepTxRanges is the most a log keeps allocated for a connection slot's
// next life (reset): a log grows past a handful of ranges only under loss,
// and 10,000 slots that each once reached maxTxRanges would hold 320 MB.
const keepTxRanges = 64

// txRange is a range of sequence space with its last transmission.
type txRange struct {
	start, end seq
	at         int64  // when it was last sent
	ord        uint64 // in what order: RACK's "sent after" (a clock can read the same twice)
	rtx        bool   // that was a retransmission
	lost       bool   // RACK marked it lost since (not resent yet)
	merged     bool   // several transmissions at different times, dated by the last (maxTxRanges)
}

// txLog is [SND.UNA, SND.MAX) as ranges in sequence order. Ranges sent in
// one pass (one output call: one time) merge, so a log holds about one
// range per burst plus one per hole.
type txLog struct {
	r    []txRange
	head int
	ord  uint64 // transmissions so far
}

func (l *txLog) live() []txRange { return l.r[l.head:] }

func (l *txLog) reset() {
	if cap(l.r) > keepTxRanges {
		l.r = nil
	}
	l.r, l.head, l.ord = l.r[:0], 0, 0
}

// sent records [s, e) sent at now (rtx: a retransmission).
func (l *txLog) sent(s, e seq, now int64, rtx bool) {
	if !s.LessThan(e) {
		return
	}
	live := l.live()
	n := len(live)
	if n == 0 || !s.LessThan(live[n-1].end) {
		if n > 0 {
			last := &live[n-1]
			if last.end == s && last.at == now && last.ord == l.ord && last.rtx == rtx && !last.lost {
				// Sent right after it, in one pass: one range (its
				// bytes in sequence order are in sending order).
				last.end = e
				return
			}
			if n >= maxTxRanges {
				l.ord++
				last.end, last.at, last.ord, last.rtx, last.lost, last.merged = e, now, l.ord, rtx, false, true
				return
			}
		}
		l.ord++
		l.push(txRange{start: s, end: e, at: now, ord: l.ord, rtx: rtx})
		return
	}
	l.ord++
	// Inside what was sent: [s, e) replaces what it covers.
	i := 0
	for i < n && !live[i].end.GreaterThan(s) {
		i++
	}
	j := i
	for j < n && live[j].start.LessThan(e) {
		j++
	}
	var parts [3]txRange
	k := 0
	if live[i].start.LessThan(s) {
		parts[k] = live[i]
		parts[k].end = s
		k++
	}
	parts[k] = txRange{start: s, end: e, at: now, ord: l.ord, rtx: rtx}
	k++
	if j > i && e.LessThan(live[j-1].end) {
		parts[k] = live[j-1]
		parts[k].start = e
		k++
	}
	l.replace(i, j, parts[:k]...)
}

// push appends r, compacting the slice when its dead head is large.
func (l *txLog) push(r txRange) {
	if l.head > 0 && l.head >= len(l.r)/2 {
		m := copy(l.r, l.r[l.head:])
		l.r, l.head = l.r[:m], 0
	}
	l.r = append(l.r, r)
}

// replace puts parts in place of live ranges [i, j).
func (l *txLog) replace(i, j int, parts ...txRange) {
	l.r = slices.Replace(l.r, l.head+i, l.head+j, parts...)
}

// split cuts the live range holding s in two at s (if s is inside one).
func (l *txLog) split(s seq) {
	live := l.live()
	for i := range live {
		if live[i].start.LessThan(s) && s.LessThan(live[i].end) {
			a, b := live[i], live[i]
			a.end, b.start = s, s
			l.replace(i, i+1, a, b)
			return
		}
	}
}

// trim forgets everything below una.
func (l *txLog) trim(una seq) {
	for l.head < len(l.r) && !l.r[l.head].end.GreaterThan(una) {
		l.head++
	}
	if l.head == len(l.r) {
		l.r, l.head = l.r[:0], 0 // the order goes on: RACK holds one
		return
	}
	if l.r[l.head].start.LessThan(una) {
		l.r[l.head].start = una
	}
}

// setLost marks every range lost (a retransmission timeout, RFC 8985
// §6.3) or none (a recovery or timeout shown spurious).
func (c *conn) setLost(lost bool) {
	live := c.tx.live()
	for i := range live {
		live[i].lost = lost
	}
	c.rack.anyLost = lost
}

// rackState is the sender's RACK state (RFC 8985 §6.1).
type rackState struct {
	valid      bool   // something was delivered: xmit, ord, end and rtt hold
	ord        uint64 // the order of that transmission
	xmit       int64  // RACK.xmit_ts: the latest transmission time delivered
	end        seq    // RACK.end_seq: that range's end
	rtt        int64  // RACK.rtt
	minRTT     int64  // the least RTT seen (RACK.min_RTT)
	srtt       int64  // RACK's own smoothed RTT: its samples have the clock's precision, the timestamp option's only milliseconds
	fack       seq    // RACK.fack: the highest sequence delivered
	reoSeen    bool   // RACK.reordering_seen
	reoMult    int    // RACK.reo_wnd_mult
	reoPersist int    // recoveries left before reoMult resets
	dsackRound seq    // a D-SACK widened the window this round (until SND.UNA passes it)
	dsackArmed bool
	anyLost    bool // some range is marked lost and not resent
	tlpRtx     bool // a tail loss probe's resend awaits its verdict (tlpAck)
}

// tlpAck is RFC 8985 §7.4's loss detection for tail loss probes, on an ACK
// before SND.UNA moves (dsack: it carries a D-SACK; pure: no data, no
// SACK blocks). A probe resends the last segment; if the peer reports the
// resend with a D-SACK, or answers it with a pure duplicate ACK, both
// copies arrived and nothing was lost. If instead the cumulative ACK
// passes where SND.MAX stood at the probe (conn.tlpHigh) with no D-SACK,
// the probe repaired a loss the ACK clock never saw: a congestion event
// like any other, one window cut, with no recovery to go through (Linux's
// tcp_process_tlp_ack). A recovery or a timeout since the probe made the
// cut already and closed the verdict (enterRecovery, rtoExpired).
//
// The cut is no recovery: nothing is resent, and RFC 6582's recover stays
// where it was. A loss found later in the same flight (a super-frame sent
// on the probe's ACK and lost whole) starts a recovery to resend it, which
// cuts no further (cwrCovers; Linux enters Recovery from CWR the same way).
// Setting recover here, as this did, barred that recovery: the hole was
// left to the RTO while new data went out and was SACKed (14-40 ms stalls
// on a TAP with a 50 µs round trip).
func (c *conn) tlpAck(ack seq, dsack, pure bool) {
	r := &c.rack
	if !r.tlpRtx || ack.LessThan(c.tlpHigh) {
		return
	}
	switch {
	case dsack:
		r.tlpRtx = false
	case ack.GreaterThan(c.tlpHigh):
		r.tlpRtx = false
		if !c.inRecovery && c.sndUna.GreaterThan(c.recover) && !c.cwrCovers() {
			c.ccLoss(c.sndMax.Sub(c.sndUna))
			c.cwnd = min(c.cwnd, c.ssthresh)
			c.caAcked = 0
			c.cwr, c.cwrEnd = true, c.sndMax // one cut for this flight
		}
	case pure && ack == c.sndUna:
		r.tlpRtx = false
	}
}

// cwrCovers reports whether a tail probe's window cut (tlpAck) covers what
// is outstanding: the flight it was made for is not yet acknowledged whole.
func (c *conn) cwrCovers() bool {
	return c.cwr && c.sndUna.LessThan(c.cwrEnd)
}

// txSent is every transmission's record (emit).
func (c *conn) txSent(now int64, sq seq, n uint32, fin bool) {
	if !c.sackOK {
		return
	}
	end := sq.Add(n)
	if fin {
		end = end.Add(1)
	}
	c.tx.sent(sq, end, now, sq.LessThan(c.sndMax))
}

// rackDelivered updates RACK from an ACK (RFC 8985 §6.2 steps 1-3): the
// ranges it delivered, cumulatively (below ack) or newly SACKed (not in
// before), give the latest transmission time delivered and RACK.rtt, and
// show reordering when one never resent is delivered below what had been.
// Called before SND.UNA moves.
func (c *conn) rackDelivered(now int64, ack seq, before *scoreboard) {
	r := &c.rack
	live := c.tx.live()
	for i := range live {
		t := &live[i]
		// The newly delivered part of the range: lo its lowest byte,
		// end its highest + 1.
		var lo, end seq
		delivered := false
		if t.start.LessThan(ack) { // cumulatively acknowledged, some of it
			if l, _, ok := newlyCovered(nil, before, t.start, seqnum.Min(t.end, ack)); ok {
				delivered, lo, end = true, l, seqnum.Min(t.end, ack)
			}
		}
		if t.end.GreaterThan(ack) {
			if l, e, ok := newlyCovered(&c.sacked, before, seqnum.Max(t.start, ack), t.end); ok {
				if !delivered {
					lo = l
				}
				delivered, end = true, e
			}
		}
		if !delivered {
			continue
		}
		if t.merged {
			// When its bytes went is not known: no RTT, no order.
			if end.GreaterThan(r.fack) {
				r.fack = end
			}
			continue
		}
		if t.rtx && now-t.at < r.minRTT {
			// The ACK may be for the original (RFC 8985 §6.2 step 2):
			// no timing from it.
			continue
		}
		if !t.rtx {
			// A sample with the device clock's precision (the timestamp
			// option's RTT has a millisecond's, which on a LAN is 0).
			if rtt := now - t.at; rtt > 0 {
				if r.minRTT == 0 || rtt < r.minRTT {
					r.minRTT = rtt
				}
				if r.srtt == 0 {
					r.srtt = rtt
				} else {
					r.srtt += (rtt - r.srtt) / 8
				}
			}
		}
		if !t.rtx && lo.LessThan(r.fack) {
			// Delivered below what was delivered before, never resent:
			// the path reorders (RFC 8985 §6.2 step 3).
			r.reoSeen = true
		}
		if !r.valid || t.ord > r.ord || t.ord == r.ord && end.GreaterThan(r.end) {
			r.valid, r.ord, r.xmit, r.end, r.rtt = true, t.ord, t.at, end, now-t.at
		}
		if end.GreaterThan(r.fack) {
			r.fack = end
		}
	}
}

// newlyCovered returns the lowest and the highest+1 byte of [s, e) that
// now covers (nil: all of it) and before did not.
func newlyCovered(now, before *scoreboard, s, e seq) (lo, hi seq, found bool) {
	visit := func(a, b seq) {
		// Each run of [a, b) before did not cover.
		for {
			g0, g1, ok := before.gap(a, b)
			if !ok {
				return
			}
			if !found {
				lo, found = g0, true
			}
			hi, a = g1, g1
		}
	}
	if now == nil {
		visit(s, e)
		return
	}
	for i := 0; i < now.n; i++ {
		b := now.r[i]
		if a, z := seqnum.Max(b.start, s), seqnum.Min(b.end, e); a.LessThan(z) {
			visit(a, z)
		}
	}
	return
}

// rackDSACK takes a D-SACK into the reordering window (RFC 8985 §6.2
// step 4): at most one widening per round trip.
func (c *conn) rackDSACK() {
	r := &c.rack
	if r.dsackArmed && !c.sndUna.LessThan(r.dsackRound) {
		r.dsackArmed = false
	}
	if !r.dsackArmed {
		r.dsackArmed, r.dsackRound = true, c.sndMax
		r.reoMult = min(max(r.reoMult, 1)+1, 16)
		r.reoPersist = 16
	}
}

// rackRecoveryDone counts a recovery ended without D-SACKs toward
// narrowing the reordering window again.
func (c *conn) rackRecoveryDone() {
	r := &c.rack
	if r.reoPersist > 0 {
		r.reoPersist--
		if r.reoPersist == 0 {
			r.reoMult = 1
		}
	}
}

// reoWnd is RACK.reo_wnd (RFC 8985 §6.2 step 4).
func (c *conn) reoWnd() int64 {
	r := &c.rack
	if !r.reoSeen && (c.inRecovery || c.sacked.below(c.sndMax) >= 3*c.maxPayload()) {
		return 0
	}
	m, cap := r.minRTT, r.srtt
	if m == 0 {
		m = c.srtt // no sample yet: the host's estimate
	}
	if cap == 0 {
		cap = c.srtt
	}
	if m == 0 || cap == 0 {
		// No round-trip time at all: nothing to measure a window by,
		// so DupThresh decides (three segments SACKed, above).
		return noReoWnd
	}
	return min(m/4*int64(max(r.reoMult, 1)), cap)
}

// noReoWnd is a reordering window no loss outlasts: the timers and
// DupThresh decide instead.
const noReoWnd = int64(1) << 50

// rackDetect marks lost every range above floor (what is acknowledged)
// sent before the latest one delivered whose reordering window has passed,
// and arms the reordering timer for the rest (RFC 8985 §6.2 step 5). It
// reports whether any range is lost and not resent.
func (c *conn) rackDetect(now int64, floor seq) bool {
	r := &c.rack
	c.rackAt = 0
	if !r.valid {
		return r.anyLost
	}
	reo := c.reoWnd()
	// A range sent in the same pass as RACK.end_seq is "before" only up
	// to it: cut it there.
	c.tx.split(r.end)
	timeout := int64(0)
	lost := false
	live := c.tx.live()
	for i := range live {
		t := &live[i]
		if t.lost {
			lost = true
			continue
		}
		if !t.end.GreaterThan(floor) || c.sacked.covers(seqnum.Max(t.start, floor), t.end) {
			continue
		}
		if !(r.ord > t.ord || r.ord == t.ord && t.end.LessThanEq(r.end)) {
			continue // sent after: no evidence yet
		}
		if rem := t.at + r.rtt + reo - now; rem <= 0 {
			t.lost = true
			lost = true
			c.e.ctr.RACKLost++
		} else if rem > timeout && reo != noReoWnd {
			timeout = rem
		}
	}
	if timeout > 0 {
		c.rackAt = now + timeout
	}
	r.anyLost = lost
	return lost
}

// nextLost returns the first run of lost, un-SACKed sequence space at or
// after SND.UNA, at most limit bytes (n 0: none).
func (c *conn) nextLost(limit uint32) (seq, uint32) {
	live := c.tx.live()
	for i := range live {
		t := &live[i]
		if !t.lost {
			continue
		}
		if s, e, ok := c.sacked.gap(seqnum.Max(t.start, c.sndUna), t.end); ok {
			return s, min(e.Sub(s), limit)
		}
		t.lost = false // all of it SACKed since
	}
	c.rack.anyLost = false
	return 0, 0
}

// rackPipe is RFC 6675's pipe with RACK's losses: the un-SACKed bytes not
// marked lost (a resent range counts once: its original is presumed lost).
func (c *conn) rackPipe() uint32 {
	p := uint32(0)
	live := c.tx.live()
	for i := range live {
		t := &live[i]
		if t.lost {
			continue
		}
		s, e := seqnum.Max(t.start, c.sndUna), t.end
		if !s.LessThan(e) {
			continue
		}
		p += e.Sub(s) - c.sacked.within(s, e)
	}
	return p
}

// rackTimer is the reordering timer's expiry: ranges that have waited out
// the reordering window are lost; recovery starts or goes on.
func (c *conn) rackTimer(now int64) {
	if !c.canSend() || c.sndMax == c.sndUna {
		return
	}
	if c.rackDetect(now, c.sndUna) {
		c.e.ctr.RACKTimeouts++
		if !c.inRecovery && c.sndUna.GreaterThan(c.recover) {
			c.enterRecovery(now)
		}
		c.output(now)
	}
}
