package delegation

import (
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/seqnum"
)

// ULP is an upper-layer protocol (iWARP's MPA/DDP/RDMAP, for one) running
// on a delegated connection inside the device: once attached it owns the
// connection's byte stream in both directions, and the host no longer sends
// or receives bytes on it through transmit, user or legacy buffers.
//
// Every method is called by the engine, on the offload unit goroutine, from
// inside an engine method; none may call back into the engine (the device
// calls ULPKick afterwards instead). Slices passed in are only valid during
// the call.
type ULP interface {
	// Receive is handed the next in-order bytes of the peer's stream, as
	// they are accepted, split anywhere. It returns how many leading bytes
	// it consumed. Fewer than len(p) means it is full: the engine holds the
	// rest (acknowledged, in a device buffer that the advertised window
	// accounts for), offers it again first with the next bytes and on
	// ULPKick, and the window closes as the hold fills.
	Receive(p []byte) int
	// Transmit writes the ULP's next output into dst and returns the count
	// (at most len(dst); 0: nothing that fits). The engine calls it with
	// room for one segment's payload (the MSS less options) or the rest of
	// a segment being filled, and never splits what one call returned
	// across segments unless the peer's window forces it, so a ULP that
	// writes whole frames (FPDUs) no larger than len(dst) gets frames
	// aligned with TCP segments (RFC 5044 §8). Writing the bytes hands them
	// over: the engine keeps them for retransmission in its own buffer.
	Transmit(dst []byte) int
	// HasOutput reports whether Transmit would write something given a
	// segment's room.
	HasOutput() bool
	// LLPClosed tells the ULP the TCP connection is over: both FINs
	// exchanged (TIME_WAIT or LAST_ACK done), an RST, a timeout or an
	// error, or ABORT. It is called once; nothing is called after it.
	LLPClosed()
}

// ULPCloser is implemented by a ULP that decides when the connection must
// end (iWARP after an orderly close, a Terminate or an MPA reject): after
// every pull the engine asks WantClose, and once it says yes and the ULP has
// no more output, the engine sends a FIN after the ULP's last bytes, as
// Close does.
type ULPCloser interface {
	WantClose() bool
}

// DefaultULPSendBuf is the retransmission buffer AttachULP allocates when
// asked for 0 bytes.
const DefaultULPSendBuf = 256 << 10

// maxULPBuf bounds a ULP connection's device buffers.
const maxULPBuf = 64 << 20

// ulpConn is a connection's ULP state. The buffers are allocated by
// AttachULP and kept across the slot's lives.
type ulpConn struct {
	u      ULP
	closer ULPCloser
	down   bool // LLPClosed was called
	close  bool // Close was asked: FIN once the ULP's output has been pulled

	// Send: the retransmission buffer, a byte ring holding [una, SND.END)
	// from offset head, and the records (what each Transmit call wrote,
	// merged while unsent and under one segment) as a ring of end
	// sequence numbers; segments end on record ends.
	buf       []byte
	head      int
	una       seq
	rec       []seq
	recHead   int
	recN      int
	lastStart seq // where the newest record starts

	// Receive: in-order bytes the ULP did not take yet (acknowledged to
	// the peer and counted against the advertised window).
	hold     []byte
	holdHead int
	held     int
}

// AttachULP hands delegated connection idx's byte stream to u, from SND.NXT
// and RCV.NXT on, with a device-owned retransmission buffer of sendBuf
// bytes (0: DefaultULPSendBuf) and a receive hold the size of the receive
// buffer, both allocated here. The engine then pulls u's output at once
// if it has any.
//
//	StatusBadConn   idx not delegated
//	StatusBadParam  u nil, sendBuf < one segment's payload or > 64 MiB
//	StatusBadState  not ESTABLISHED, a ULP already attached, host data
//	                queued or unacknowledged, FIN queued, or user buffers posted
func (e *Engine) AttachULP(idx uint32, u ULP, sendBuf int) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if sendBuf == 0 {
		sendBuf = DefaultULPSendBuf
	}
	if u == nil || sendBuf < int(c.maxPayload()) || sendBuf > maxULPBuf {
		return rings.StatusBadParam
	}
	if c.ulp.u != nil || c.state != rings.StateEstablished || c.finQueued ||
		c.txCount > 0 || c.sndEnd != c.sndUna || c.uqCount > 0 {
		return rings.StatusBadState
	}
	p := &c.ulp
	if len(p.buf) != sendBuf {
		p.buf = make([]byte, sendBuf)
	}
	if n := sendBuf/128 + 64; len(p.rec) != n {
		p.rec = make([]seq, n)
	}
	hold := c.rcvBuf
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		hold = max(hold, c.rcvAdvEdge.Sub(c.rcvNxt))
	}
	// The advertised window is rounded up to the window scale, so the
	// peer may send up to 2^scale-1 bytes beyond the free space: the hold
	// has room for them (rcvSpace leaves them out).
	hold = min(hold, maxULPBuf) + 1<<c.rcvScale
	if len(p.hold) != int(hold) {
		p.hold = make([]byte, hold)
	}
	if e.ulpScratch == nil {
		e.ulpScratch = make([]byte, maxMSS)
	}
	*p = ulpConn{u: u, buf: p.buf, una: c.sndUna, rec: p.rec, lastStart: c.sndEnd, hold: p.hold}
	p.closer, _ = u.(ULPCloser)
	now := e.env.NowNanos()
	c.output(now)
	e.schedule(c)
	return rings.StatusOK
}

// ULPKick tells the engine that connection idx's ULP has news: new output
// (the host posted work), or room for bytes it refused. The engine offers
// the held bytes again, sends a window update if that reopened the window,
// pulls the ULP's output into the retransmission buffer and sends what the
// windows allow. StatusBadState: no ULP attached, or the connection is over
// (LLPClosed was called).
func (e *Engine) ULPKick(idx uint32) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if c.ulp.u == nil || c.ulp.down || c.state == rings.StateClosed || c.state == rings.StateTimeWait {
		return rings.StatusBadState
	}
	if len(e.pendList) > 0 {
		e.flushNotify(e.env.NowNanos())
	}
	now := e.env.NowNanos()
	if c.ulp.held > 0 {
		c.ulpFlushHeld()
		if !c.finRcvd && c.windowUpdateDue() {
			c.sendAck(now)
		}
	}
	c.output(now)
	e.schedule(c)
	return rings.StatusOK
}

// --- send side ------------------------------------------------------------

func (p *ulpConn) recAt(i int) seq { return p.rec[(p.recHead+i)%len(p.rec)] }

// ulpPull moves the ULP's output into the retransmission buffer while it has
// room, one segment's worth per record, and queues the FIN when the ULP
// wants the connection closed and has nothing more.
func (c *conn) ulpPull() {
	p := &c.ulp
	if p.down || c.finQueued || (c.state != rings.StateEstablished && c.state != rings.StateCloseWait) {
		return
	}
	mss := c.maxPayload()
	size := uint32(len(p.buf))
	for {
		free := size - c.sndEnd.Sub(p.una)
		if free == 0 || !p.u.HasOutput() {
			break
		}
		// Fill up the newest record while none of it has been sent.
		if p.recN > 0 && !p.lastStart.LessThan(c.sndMax) {
			if l := c.sndEnd.Sub(p.lastStart); l < mss {
				if c.ulpFill(min(mss-l, free)) > 0 {
					p.rec[(p.recHead+p.recN-1)%len(p.rec)] = c.sndEnd
					continue
				}
			}
		}
		if p.recN == len(p.rec) {
			break
		}
		start := c.sndEnd
		if c.ulpFill(min(mss, free)) == 0 {
			break
		}
		p.rec[(p.recHead+p.recN)%len(p.rec)] = c.sndEnd
		p.recN++
		p.lastStart = start
	}
	if (p.close || (p.closer != nil && p.closer.WantClose())) && !p.u.HasOutput() {
		c.queueFin()
	}
}

// ulpFill calls Transmit with room bytes at the end of the buffer (through
// the engine's scratch buffer when the ring wraps there) and appends what it
// wrote.
func (c *conn) ulpFill(room uint32) uint32 {
	e := c.e
	p := &c.ulp
	off := (p.head + int(c.sndEnd.Sub(p.una))) % len(p.buf)
	var k int
	if len(p.buf)-off >= int(room) {
		k = min(max(p.u.Transmit(p.buf[off:off+int(room)]), 0), int(room))
	} else {
		s := e.ulpScratch[:room]
		k = min(max(p.u.Transmit(s), 0), int(room))
		n := copy(p.buf[off:], s[:k])
		copy(p.buf, s[n:k])
	}
	c.sndEnd = c.sndEnd.Add(uint32(k))
	e.ctr.ULPPulled += uint64(k)
	return uint32(k)
}

// ulpTrim frees what SND.UNA passed (called as soon as SND.UNA moves).
func (c *conn) ulpTrim() {
	p := &c.ulp
	end := seqnum.Min(c.sndUna, c.sndEnd)
	if end.GreaterThan(p.una) {
		p.head = (p.head + int(end.Sub(p.una))) % len(p.buf)
		p.una = end
	}
	for p.recN > 0 && !p.rec[p.recHead].GreaterThan(c.sndUna) {
		p.recHead = (p.recHead + 1) % len(p.rec)
		p.recN--
	}
}

// ulpRead copies the buffered bytes [sq, sq+len(dst)) into dst.
func (c *conn) ulpRead(dst []byte, sq seq) {
	p := &c.ulp
	off := (p.head + int(sq.Sub(p.una))) % len(p.buf)
	n := copy(dst, p.buf[off:])
	copy(dst[n:], p.buf)
}

// ulpCut returns the length of the longest run from sq of at most n bytes
// that ends on a record end, or 0 if no record ends in (sq, sq+n].
func (c *conn) ulpCut(sq seq, n uint32) uint32 {
	p := &c.ulp
	lim := sq.Add(n)
	lo, hi := 0, p.recN // the records ending at or before lim are [0, lo)
	for lo < hi {
		mid := (lo + hi) / 2
		if p.recAt(mid).LessThanEq(lim) {
			lo = mid + 1
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return 0
	}
	if end := p.recAt(lo - 1); end.GreaterThan(sq) {
		return end.Sub(sq)
	}
	return 0
}

// --- receive side ---------------------------------------------------------

// deliverULP hands in-order payload to the ULP (after what it still holds)
// and holds what the ULP does not take. It returns the bytes accepted.
func (c *conn) deliverULP(data []byte) int {
	e := c.e
	p := &c.ulp
	placed := 0
	if p.held > 0 {
		c.ulpFlushHeld()
	}
	if p.held == 0 {
		placed = min(max(p.u.Receive(data), 0), len(data))
	}
	if rest := data[placed:]; len(rest) > 0 {
		k := min(len(rest), len(p.hold)-p.held)
		at := (p.holdHead + p.held) % len(p.hold)
		n := copy(p.hold[at:], rest[:k])
		copy(p.hold, rest[n:k])
		p.held += k
		placed += k
		e.ctr.ULPHeld += uint64(k)
		if k < len(rest) {
			e.ctr.ULPHoldFull += uint64(len(rest) - k)
		}
	}
	return placed
}

// ulpFlushHeld offers the held bytes to the ULP again.
func (c *conn) ulpFlushHeld() {
	p := &c.ulp
	for p.held > 0 {
		n := min(p.held, len(p.hold)-p.holdHead)
		k := min(max(p.u.Receive(p.hold[p.holdHead:p.holdHead+n]), 0), n)
		p.held -= k
		p.holdHead = (p.holdHead + k) % len(p.hold)
		if k < n {
			break
		}
	}
	if p.held == 0 {
		p.holdHead = 0
	}
}

// ulpHoldRoom is how many more bytes the hold can take: the most the
// window beyond RCV.NXT may promise (out-of-order bytes held are inside it).
func (c *conn) ulpHoldRoom() uint32 {
	return uint32(len(c.ulp.hold) - c.ulp.held)
}

// ulpDown tells the ULP the connection is over (once), after offering it
// what it still holds: those bytes were received in order and acknowledged.
func (c *conn) ulpDown() {
	p := &c.ulp
	if p.u == nil || p.down {
		return
	}
	if p.held > 0 {
		c.ulpFlushHeld()
	}
	p.down = true
	p.u.LLPClosed()
}
