package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
)

// TIME_WAIT without the connection.
//
// A connection that closes first ends in TIME_WAIT (RFC 9293 §3.6): for a
// while it must still ACK a retransmitted FIN and absorb the old
// connection's stray segments. Keeping the whole connection for that ties
// up its index, its queues and (on the host) its buffers for the whole
// TIME_WAIT, so a server that closes first (HTTP/1.0, qotd) runs out of
// indices after a burst of short connections. Like Linux's
// inet_timewait_sock (the "tw bucket"), the engine instead moves a
// connection entering TIME_WAIT into a small record that holds only what
// TIME_WAIT needs: the header template, SND.NXT, RCV.NXT, the window it last
// advertised, and the timestamps. The connection itself goes to CLOSED at
// once (NtfClosed), so the host releases its index and memory.
//
// Records live in a slab that grows with use up to Config.MaxTimeWait, are
// found by a tuple hash of their own (the device's classifier consults it
// when a TCP segment matches no delegated connection), and expire in FIFO
// order: every record lives Config.TimeWait from its last FIN, so a
// doubly-linked list ordered by expiry gives O(1) insertion, restart (move
// to the tail) and expiry (pop the head). When the table is full the oldest
// record goes early (counted, TimeWaitOverflow), as Linux does when
// tcp_max_tw_buckets is reached (there the new one is not created; here the
// one closest to its end gives way, so the newest flows keep protection).
//
// A SYN for a 4-tuple in TIME_WAIT opens a new connection when it is
// unambiguously newer (RFC 6191: a higher timestamp when timestamps were in
// use, or the same timestamp and a sequence number above RCV.NXT; without
// timestamps a sequence number above RCV.NXT): the record goes and the
// SYN goes to the host stack. Any other SYN is answered with an ACK, as in
// any synchronized state.

// twRecord is one connection in TIME_WAIT.
type twRecord struct {
	key   hdr.Tuple
	tmpl  [tmplLen]byte // the connection's Ethernet + network + TCP template
	ipID  uint16
	wnd   uint16 // window field last advertised
	tsOK  bool
	inUse bool

	sndNxt, rcvNxt uint32
	tsRecent       uint32
	tsBase         uint32 // TSval at tsBaseNow (the connection's clock, continued)
	tsBaseNow      int64
	lastTSval      uint32

	expire     int64
	prev, next int32 // expiry list (-1: none); next is the free list when !inUse
}

// twTable holds the TIME_WAIT records.
type twTable struct {
	recs       []twRecord
	table      tupleTable
	max        int
	free       int32 // free list head (-1: none)
	head, tail int32 // expiry list: head expires first
	n          int
}

func newTWTable(max int) twTable {
	return twTable{table: newTupleTable(max), max: max, free: -1, head: -1, tail: -1}
}

func (t *twTable) unlink(i int32) {
	r := &t.recs[i]
	if r.prev >= 0 {
		t.recs[r.prev].next = r.next
	} else {
		t.head = r.next
	}
	if r.next >= 0 {
		t.recs[r.next].prev = r.prev
	} else {
		t.tail = r.prev
	}
	r.prev, r.next = -1, -1
}

func (t *twTable) pushTail(i int32) {
	r := &t.recs[i]
	r.prev, r.next = t.tail, -1
	if t.tail >= 0 {
		t.recs[t.tail].next = i
	} else {
		t.head = i
	}
	t.tail = i
}

// remove frees record i.
func (t *twTable) remove(i int32) {
	r := &t.recs[i]
	t.table.del(&r.key)
	t.unlink(i)
	*r = twRecord{prev: -1, next: t.free}
	t.free = i
	t.n--
}

// alloc returns a free record, growing the slab up to max; with the table
// full it reports false.
func (t *twTable) alloc() (int32, bool) {
	if t.free >= 0 {
		i := t.free
		t.free = t.recs[i].next
		return i, true
	}
	if len(t.recs) >= t.max {
		return -1, false
	}
	t.recs = append(t.recs, twRecord{})
	return int32(len(t.recs) - 1), true
}

// enterTimeWait: both FINs are done and we closed first. The connection's
// TIME_WAIT duties move to a record; the connection goes to CLOSED (the
// host releases its index and memory at NtfClosed).
func (c *conn) enterTimeWait(now int64) {
	e := c.e
	t := &e.tw
	e.ctr.TimeWaitEntered++
	if old, ok := t.table.get(&c.tuple); ok {
		t.remove(int32(old)) // never two records for one tuple
	}
	i, ok := t.alloc()
	if !ok {
		e.ctr.TimeWaitOverflow++
		t.remove(t.head)
		i, _ = t.alloc()
	}
	r := &t.recs[i]
	*r = twRecord{key: c.tuple, tmpl: c.tmpl, ipID: c.ipID, wnd: c.lastWnd, tsOK: c.tsOK, inUse: true,
		sndNxt: uint32(c.sndMax), rcvNxt: uint32(c.rcvNxt), tsRecent: c.tsRecent,
		tsBase: c.tsBase, tsBaseNow: c.tsBaseNow, lastTSval: c.lastTSval,
		expire: now + e.cfg.TimeWait, prev: -1, next: -1}
	t.table.put(&c.tuple, uint32(i))
	t.pushTail(i)
	t.n++
	// The connection stops receiving: its segments now find the record.
	e.table.del(&c.tuple)
	c.closeWith(0, 0)
}

// expireTimeWait drops the records whose time is up (O(1) each).
func (e *Engine) expireTimeWait(now int64) {
	t := &e.tw
	for t.head >= 0 && t.recs[t.head].expire <= now {
		e.ctr.TimeWaitExpired++
		t.remove(t.head)
	}
}

// TimeWaitConns is the number of 4-tuples in TIME_WAIT.
func (e *Engine) TimeWaitConns() int { return e.tw.n }

// TimeWaitCapacity is the number of TIME_WAIT records allocated (the slab
// grows with use up to Config.MaxTimeWait and is reused after).
func (e *Engine) TimeWaitCapacity() int { return len(e.tw.recs) }

// InputUnmatchedSegment takes a TCP segment that matched no delegated
// connection. If its 4-tuple is in TIME_WAIT the engine absorbs it
// (answering with an ACK where RFC 9293 asks for one) and returns true. It
// returns false when the segment is not the engine's: no record, or a SYN
// that may open a new connection on the tuple (RFC 6191; the record is then
// gone): the device passes it to the host stack. The arguments are as for
// InputSegment.
func (e *Engine) InputUnmatchedSegment(t *hdr.Tuple, tcpSeg []byte, fl RxFlags) bool {
	if e.tw.n == 0 || len(tcpSeg) < hdr.TCPMinSize {
		return false
	}
	i, now, ok := e.twFind(t)
	if !ok {
		return false
	}
	return e.twInput(i, now, t, tcpSeg, fl)
}

// twFind returns the live TIME_WAIT record of t and the time it was
// found live at, expiring records that are due when t's is.
func (e *Engine) twFind(t *hdr.Tuple) (int32, int64, bool) {
	ri, ok := e.tw.table.get(t)
	if !ok {
		return 0, 0, false
	}
	now := e.env.NowNanos()
	if e.tw.recs[ri].expire <= now {
		e.expireTimeWait(now)
		return 0, 0, false
	}
	return int32(ri), now, true
}

// twInput is a segment for TIME_WAIT record i: tcpSeg is cut to the
// network header's length.
func (e *Engine) twInput(i int32, now int64, t *hdr.Tuple, tcpSeg []byte, fl RxFlags) bool {
	if len(tcpSeg) < hdr.TCPMinSize {
		e.ctr.DropShort++
		return true
	}
	if fl&RxTCPChecksumOK == 0 && !hdr.TCP(tcpSeg).ChecksumOKAddr(t.RemoteIP, t.LocalIP) {
		e.ctr.DropBadChecksum++
		return true
	}
	var s segment
	if parseTCP(tcpSeg, &s) != parseOK {
		e.ctr.DropBadOptions++
		return true
	}
	e.ctr.RxSegments++
	e.ctr.DropTimeWait++
	r := &e.tw.recs[i]
	switch {
	case s.flags&hdr.TCPFlagRST != 0:
		return true // RFC 1337: an RST does not end TIME_WAIT
	case s.flags&hdr.TCPFlagSYN != 0 && s.flags&hdr.TCPFlagACK == 0:
		// RFC 6191 §2: with timestamps on both incarnations, a later
		// timestamp, or the same one and a later sequence number; else
		// a later sequence number. The same timestamp is the common
		// case, not a corner: a peer whose clock ticks in milliseconds
		// (Linux) reuses a port within the millisecond of the old
		// connection's last segment when it churns, and answering such
		// a SYN with an ACK made Linux reset and send it again (a 1 s
		// stall when the resend fell in the same millisecond too).
		later := seq(s.seq).GreaterThan(seq(r.rcvNxt))
		newer := later
		if r.tsOK && s.hasTS {
			newer = seq(s.tsVal).GreaterThan(seq(r.tsRecent)) || (s.tsVal == r.tsRecent && later)
		}
		if newer {
			e.ctr.TimeWaitReopened++
			e.tw.remove(i)
			return false
		}
		e.twAck(r, now)
	case r.tsOK && s.hasTS && seq(s.tsVal).LessThan(seq(r.tsRecent)):
		e.ctr.DropPAWS++
	case s.flags&hdr.TCPFlagFIN != 0:
		// The peer did not hear our ACK of its FIN: ACK again, and
		// TIME_WAIT starts over (RFC 9293 §3.10.7.4).
		r.expire = now + e.cfg.TimeWait
		e.tw.unlink(i)
		e.tw.pushTail(i)
		e.twAck(r, now)
	case len(s.payload) > 0:
		e.twAck(r, now)
	}
	return true
}

// OutboundSYN looks at a frame the host transmits on the legacy path: a SYN
// (without ACK) opening a connection on a 4-tuple in TIME_WAIT ends the
// record, so the peer's SYN-ACK reaches the host stack. The host's stack
// does not know the device holds the tuple (its own end was delegated and
// is gone) and may pick the same local port again; Linux allows the same
// reuse of its own TIME_WAIT tuples (tcp_tw_reuse) when timestamps make it
// safe, and the engine's records protect only against the old peer's stray
// segments, which the new connection's sequence numbers also reject. Cheap
// when nothing is in TIME_WAIT (the caller checks TimeWaitConns first).
func (e *Engine) OutboundSYN(frame []byte) {
	if e.tw.n == 0 || len(frame) < hdr.EthernetSize+hdr.IPv4MinSize+hdr.TCPMinSize ||
		hdr.Ethernet(frame).Type() != hdr.EtherTypeIPv4 {
		return
	}
	ip := hdr.IPv4(frame[hdr.EthernetSize:])
	if ip.Proto() != hdr.ProtoTCP || ip.HeaderLen() < hdr.IPv4MinSize || len(ip) < ip.HeaderLen()+hdr.TCPMinSize {
		return
	}
	tcp := hdr.TCP(ip[ip.HeaderLen():])
	if tcp.Flags()&(hdr.TCPFlagSYN|hdr.TCPFlagACK) != hdr.TCPFlagSYN {
		return
	}
	// Our SYN: we are the source, the record's key is (remote, local).
	key := ip.TxTuple(tcp)
	if i, ok := e.tw.table.get(&key); ok {
		e.ctr.TimeWaitReopened++
		e.tw.remove(int32(i))
	}
}

// twAck sends the ACK of a TIME_WAIT record: SEQ = our FIN + 1, ACK = the
// peer's FIN + 1, the window last advertised.
func (e *Engine) twAck(r *twRecord, now int64) {
	f := e.frame
	copy(f, r.tmpl[:])
	nhl := netHdrLenOf(&r.key)
	tcp := hdr.TCP(f[hdr.EthernetSize+nhl:])
	hl := hdr.TCPMinSize
	if r.tsOK {
		v := r.tsBase + uint32((now-r.tsBaseNow)/1e6)
		if seq(v).LessThan(seq(r.lastTSval)) {
			v = r.lastTSval
		}
		r.lastTSval = v
		opt := tcp[hdr.TCPMinSize:]
		opt[0], opt[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
		hl += 2 + hdr.PutTCPOptTimestamp(opt[2:], v, r.tsRecent)
	}
	tcp.SetSeq(r.sndNxt)
	tcp.SetAck(r.rcvNxt)
	tcp.SetHeaderLen(hl)
	tcp.SetFlags(hdr.TCPFlagACK)
	tcp.SetWindow(r.wnd)
	tcp.SetUrgent(0)
	r.ipID++
	finishNetHeader(f, &r.key, r.ipID, tcp[:hl])
	fl := hdr.EthernetSize + nhl + hl
	if fl < hdr.EthernetMinFrame {
		clear(f[fl:hdr.EthernetMinFrame])
		fl = hdr.EthernetMinFrame
	}
	e.ctr.AcksSent++
	if err := e.env.Transmit(f[:fl]); err != nil {
		e.ctr.TxErrors++
		return
	}
	e.ctr.TxSegments++
}
