package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// txBuf is a host transmit buffer on a connection's send queue. It stays
// host-owned: the engine reads it by DMA for every (re)transmission until
// SND.UNA passes its end.
type txBuf struct {
	addr  rings.Addr
	len   uint32
	start seq // sequence number of its first byte
	push  bool
}

// userBuf is a posted user receive buffer.
type userBuf struct {
	addr   rings.Addr
	len    uint32
	id     uint32
	filled uint32
	first  seq // sequence number of its first byte (valid when filled > 0)
}

// ntfReserve is how many pending-notification slots only control events
// (FIN, RST, close, timeout) may use: data is refused before those run out,
// so a close is never lost behind a full ring.
const ntfReserve = 6

// conn is a delegated connection's control block.
type conn struct {
	e       *Engine
	idx     uint32
	inUse   bool
	state   rings.TCPState
	heapIdx int
	// deadline is the earliest armed timer (0: none), the heap key.
	deadline int64

	// Constant state.
	tuple              hdr.Tuple     // the connection from our end: local is us
	tmpl               [tmplLen]byte // Ethernet + network + TCP header template (netlayer.go)
	sackOK, tsOK       bool
	sndScale, rcvScale uint8
	mss                uint32 // send MSS
	ttl, tos           uint8
	ipID               uint16

	// Send sequence space: SND.UNA <= SND.NXT <= SND.MAX <= sndEnd (+FIN).
	sndUna, sndNxt, sndMax seq
	sndEnd                 seq // just past the last queued byte
	finQueued              bool
	txStalled              bool // a transmit buffer was refused for want of room: refuse the rest until a resume (Send)
	finSeq                 seq  // the FIN's sequence number (== sndEnd)
	sndWnd                 uint32
	maxSndWnd              uint32
	sndWl1, sndWl2         seq

	// Send queue (ring of host buffers).
	txq     []txBuf
	txHead  int
	txCount int
	maxTx   int

	// Congestion control (cc.go).
	cwnd, ssthresh uint32
	caAcked        uint32 // NewReno's byte counting
	cc             ccState
	dupAcks        int
	inRecovery     bool
	recover        seq
	partialSeen    bool
	sacked         scoreboard // what the peer reported holding above SND.UNA
	highRxt        seq        // highest byte retransmitted in this recovery, plus one
	rtxOut         uint32     // bytes retransmitted in this recovery not yet acknowledged
	// A window cut outside recovery (a tail probe's repaired loss,
	// tlpAck) covers the flight up to cwrEnd: a loss found in it starts
	// a recovery to resend, but no second cut (cwrCovers).
	cwr    bool
	cwrEnd seq

	// RTT and retransmission timer (RFC 6298).
	srtt, rttvar int64 // ns
	hasRTT       bool
	rto          int64
	backoff      uint
	retries      int
	probes       int  // zero-window probes unanswered
	timing       bool // Karn: timing rtSeq (no timestamps)
	rtSeq        seq
	rtStart      int64

	// Receive side.
	rcvNxt           seq
	rcvAdvEdge       seq // right edge of the window we advertised; never moves left
	rcvBuf           uint32
	legacyUncredited uint32
	lastAckSent      seq
	finRcvd          bool
	oooFin           bool
	oooFinSeq        seq
	segsUnacked      int
	ackNow           bool
	dsackStart       seq  // a duplicate segment to report in the next ACK's
	dsackEnd         seq  // first SACK block (RFC 2883), if start != end
	burstAck         bool // an ACK deferred to the end of the receive burst (Engine.EndBurst)
	userq            []userBuf
	uqHead, uqCount  int
	userBufReqSent   bool
	ooo              oooQueue

	// Timestamps (RFC 7323).
	tsRecent   uint32
	tsRecentAt int64
	tsBase     uint32
	tsBaseNow  int64
	lastTSval  uint32
	lastWnd    uint16 // window field of the last segment sent (a TIME_WAIT record repeats it)

	// Thresholds and notification state.
	ackThresh    uint32
	ackedSince   uint32
	seqThresh    seq
	seqArmed     bool
	ackCount     uint32
	pend         []rings.Notification
	pendHead     int
	pendCount    int
	deferred     rings.NotifyFlags
	onPendList   bool
	dupAckNtfSeq seq

	// Keepalive.
	kaIdle, kaIntvl int64
	kaCount         int
	kaSent          int
	lastRecv        int64

	// Timers (absolute ns; 0: off).
	rtoAt   int64
	persist bool  // rtoAt is the persist timer
	tlpAt   int64 // tail loss probe (RFC 8985 §7.2)
	tlpOut  int   // probes out since SND.UNA last advanced (at most 2)
	tlpHigh seq   // SND.MAX when the first probe went
	rtxAt   int64 // in recovery: when the head was last resent (0: not yet)
	rackAt  int64 // RACK's reordering timer (rack.go)
	tx      txLog // what was sent when, for RACK
	rack    rackState

	// Undoing a spurious RTO (RFC 2883 §5): the congestion state before
	// it, and the segment it resent.
	undoOK                 bool
	undoCwnd, undoSsthresh uint32
	undoSeq                seq
	delackAt               int64
	kaAt                   int64
	oowAckAt               int64

	// An upper-layer protocol owning the byte stream (ulp.go).
	ulp ulpConn

	// st is the connection's own counts, for QUERY_CONN (query.go).
	st connStats
}

func (c *conn) nextTimer() int64 {
	d := int64(0)
	for _, t := range [...]int64{c.rtoAt, c.delackAt, c.kaAt, c.tlpAt, c.rackAt} {
		if t != 0 && (d == 0 || t < d) {
			d = t
		}
	}
	return d
}

// runTimers runs the timers due at now. Each one it runs is either
// cleared or re-armed in the future, so Tick terminates.
func (c *conn) runTimers(now int64) {
	if c.delackAt != 0 && c.delackAt <= now {
		c.delackAt = 0
		if c.state != rings.StateClosed {
			c.e.ctr.DelayedAcks++
			c.sendAck(now)
		}
	}
	if c.rackAt != 0 && c.rackAt <= now {
		c.rackAt = 0
		c.rackTimer(now)
	}
	if c.tlpAt != 0 && c.tlpAt <= now {
		c.tlpAt = 0
		c.probeTail(now)
	}
	if c.rtoAt != 0 && c.rtoAt <= now {
		c.rtoAt = 0
		if c.persist {
			c.persistExpired(now)
		} else {
			c.rtoExpired(now)
		}
	}
	if c.kaAt != 0 && c.kaAt <= now {
		c.kaAt = 0
		c.keepaliveExpired(now)
	}
}

// --- notifications --------------------------------------------------------

// notify posts a notification for c. Seq is per kind (see doc.go); Ack is
// always SND.UNA and AckCount the ACKs received so far.
func (c *conn) notify(flags rings.NotifyFlags, sq seq, length, aux uint32) {
	e := c.e
	n := &e.ntf
	*n = rings.Notification{Flags: flags, Conn: c.idx, Seq: uint32(sq), Ack: uint32(c.sndUna),
		AckCount: c.ackCount, Len: length, Aux: aux}
	if c.pendCount == 0 && c.deferred == 0 {
		if e.env.Notify(n) {
			e.ctr.NotifyPosted++
			return
		}
		e.ctr.NotifyFull++
	}
	const cumulative = rings.NtfAckThreshold | rings.NtfDupAck | rings.NtfSeqThreshold | rings.NtfUserBufReq
	if flags&^cumulative == 0 && c.pendCount > 0 {
		// Cumulative information: fold it into the last pending entry if
		// that one carries only cumulative flags too.
		last := &c.pend[(c.pendHead+c.pendCount-1)%len(c.pend)]
		if last.Flags&^cumulative == 0 {
			last.Flags |= flags
			last.Seq, last.Ack, last.AckCount = n.Seq, n.Ack, n.AckCount
			e.ctr.NotifyCoalesced++
			return
		}
	}
	if c.pend == nil {
		c.pend = make([]rings.Notification, e.cfg.PendingNotify)
	}
	if c.deferred != 0 || c.pendCount == len(c.pend) {
		// No slot (only possible for control flags past the reserve):
		// remember the flags; they go out, with fresh numbers, after
		// the queue drains. Nothing is lost, only merged.
		c.deferred |= flags
		e.ctr.NotifyCoalesced++
	} else {
		c.pend[(c.pendHead+c.pendCount)%len(c.pend)] = *n
		c.pendCount++
	}
	if !c.onPendList {
		c.onPendList = true
		e.pendList = append(e.pendList, c.idx)
		if e.ntfRetry == 0 {
			e.ntfRetry = e.env.NowNanos() + e.cfg.NotifyRetry
		}
	}
}

// ntfRoom reports whether a data notification may be queued now.
func (c *conn) ntfRoom() bool {
	return c.deferred == 0 && c.pendCount < c.e.cfg.PendingNotify-ntfReserve
}

// drainPending posts c's queued notifications; false if the ring filled.
func (c *conn) drainPending() bool {
	e := c.e
	for c.pendCount > 0 {
		if !e.env.Notify(&c.pend[c.pendHead]) {
			e.ctr.NotifyFull++
			return false
		}
		e.ctr.NotifyPosted++
		c.pendHead = (c.pendHead + 1) % len(c.pend)
		c.pendCount--
	}
	if c.deferred != 0 {
		n := &e.ntf
		sq := c.sndNxt
		if c.deferred&(rings.NtfFin|rings.NtfSeqThreshold) != 0 {
			sq = c.rcvNxt
		}
		*n = rings.Notification{Flags: c.deferred, Conn: c.idx, Seq: uint32(sq), Ack: uint32(c.sndUna),
			AckCount: c.ackCount}
		if !e.env.Notify(n) {
			e.ctr.NotifyFull++
			return false
		}
		e.ctr.NotifyPosted++
		c.deferred = 0
	}
	c.onPendList = false
	return true
}

// --- state changes --------------------------------------------------------

// toClosed moves c to CLOSED and tells the host with flags (which include
// NtfClosed). Queues are emptied: every buffer the host gave is the host's
// again. The index stays taken until RELEASE.
func (c *conn) toClosed(flags rings.NotifyFlags) { c.closeWith(flags, 0) }

// fail gives the connection up: RST to the peer, then CLOSED with flags.
func (c *conn) fail(now int64, flags rings.NotifyFlags, aux uint32) {
	c.sendRst(now)
	c.closeWith(flags, aux)
}

// closeWith is toClosed with aux in the notification.
func (c *conn) closeWith(flags rings.NotifyFlags, aux uint32) {
	c.state = rings.StateClosed
	c.rtoAt, c.delackAt, c.kaAt, c.tlpAt, c.rackAt = 0, 0, 0, 0, 0
	c.persist = false
	c.txHead, c.txCount = 0, 0
	c.uqHead, c.uqCount = 0, 0
	c.ooo.reset(&c.e.pool)
	c.ulpDown()
	c.notify(flags|rings.NtfClosed, c.sndNxt, 0, aux)
}

// free returns c's slot to the table (after RELEASE or ABORT).
func (c *conn) free() {
	e := c.e
	e.nConns--
	if got, ok := e.table.get(&c.tuple); ok && got == c.idx {
		// Only its own entry: a connection that went through TIME_WAIT
		// gave its tuple up already, and a new connection may have it.
		e.table.del(&c.tuple)
	}
	if c.heapIdx >= 0 {
		e.heapRemove(c.heapIdx)
	}
	if c.onPendList {
		for i, idx := range e.pendList {
			if idx == c.idx {
				e.pendList = append(e.pendList[:i], e.pendList[i+1:]...)
				break
			}
		}
		if len(e.pendList) == 0 {
			e.ntfRetry = 0
		}
	}
	c.ooo.reset(&e.pool)
	// Keep the allocated queues for the slot's next life.
	c.tx.reset()
	*c = conn{e: e, idx: c.idx, heapIdx: -1, txq: c.txq, userq: c.userq, pend: c.pend, tx: c.tx,
		ooo: oooQueue{slots: c.ooo.slots}, ulp: ulpConn{buf: c.ulp.buf, rec: c.ulp.rec, hold: c.ulp.hold}}
}

// --- clocks ---------------------------------------------------------------

// tsNow is the TSval to send at now: the host's TSval continued at 1 ms per
// tick, never going backwards.
func (c *conn) tsNow(now int64) uint32 {
	v := c.tsBase + uint32((now-c.tsBaseNow)/1e6)
	if seq(v).LessThan(seq(c.lastTSval)) {
		v = c.lastTSval
	}
	c.lastTSval = v
	return v
}

// curRTO is the retransmission timeout with backoff.
func (c *conn) curRTO() int64 {
	r := c.rto << c.backoff
	if r > c.e.cfg.MaxRTO || r <= 0 || c.backoff > 30 {
		r = c.e.cfg.MaxRTO
	}
	return r
}

// rttSample feeds the RFC 6298 estimator.
func (c *conn) rttSample(r int64) {
	if r < 0 {
		return
	}
	c.e.ctr.RTTSamples++
	if c.st.rttSamples == 0 || r < c.st.minRTT {
		c.st.minRTT = r
	}
	c.st.rttSamples++
	if !c.hasRTT {
		c.srtt = r
		c.rttvar = r / 2
		c.hasRTT = true
	} else {
		d := c.srtt - r
		if d < 0 {
			d = -d
		}
		c.rttvar = (3*c.rttvar + d) / 4
		c.srtt = (7*c.srtt + r) / 8
	}
	c.setRTO()
}

func (c *conn) setRTO() {
	v := 4 * c.rttvar
	if v < 1e6 { // clock granularity G = 1 ms
		v = 1e6
	}
	r := c.srtt + v
	if r < c.e.cfg.MinRTO {
		r = c.e.cfg.MinRTO
	}
	if r > c.e.cfg.MaxRTO {
		r = c.e.cfg.MaxRTO
	}
	c.rto = r
}

// --- the header template --------------------------------------------------

func (c *conn) buildTemplate(localMAC, nextHop [6]byte) {
	// Fixed per connection; emit fills in lengths, IDs, sequence numbers,
	// flags, window and checksums.
	t := c.tmpl[:]
	n := encodeNetHeader(t, &c.tuple, localMAC, nextHop, c.ttl, c.tos)
	(&hdr.TCPFields{SrcPort: c.tuple.LocalPort, DstPort: c.tuple.RemotePort}).Encode(t[n:])
}

// --- send queue -----------------------------------------------------------

func (c *conn) txAt(i int) *txBuf { return &c.txq[(c.txHead+i)%len(c.txq)] }

// txFind returns the position in the send queue of the buffer holding sq
// (which must be in [SND.UNA, sndEnd)).
func (c *conn) txFind(sq seq) int {
	lo, hi := 0, c.txCount-1
	for lo < hi {
		mid := (lo + hi + 1) / 2
		if c.txAt(mid).start.LessThanEq(sq) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	return lo
}

// readTx copies the queued bytes [sq, sq+len(dst)) into dst by DMA and
// reports whether a pushed buffer ends inside them.
func (c *conn) readTx(dst []byte, sq seq) (push bool, ok bool) {
	i := c.txFind(sq)
	for len(dst) > 0 && i < c.txCount {
		b := c.txAt(i)
		off := sq.Sub(b.start)
		n := b.len - off
		if n > uint32(len(dst)) {
			n = uint32(len(dst))
		}
		if err := c.e.dma.ReadAt(dst[:n], b.addr+rings.Addr(off)); err != nil {
			c.e.ctr.DMAErrors++
			return false, false
		}
		if b.push && off+n == b.len {
			push = true
		}
		dst = dst[n:]
		sq = sq.Add(n)
		i++
	}
	return push, len(dst) == 0
}

// popAcked drops the buffers SND.UNA has passed and returns how many.
func (c *conn) popAcked() int {
	n := 0
	for c.txCount > 0 {
		b := c.txAt(0)
		if b.start.Add(b.len).GreaterThan(c.sndUna) {
			break
		}
		c.txHead = (c.txHead + 1) % len(c.txq)
		c.txCount--
		n++
	}
	return n
}
