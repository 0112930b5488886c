package tcpstack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// DelegatedConn is a TCP connection run by the NIC's offload unit. The host
// talks to it only through the rings: writes become transmit descriptors
// that point at the connection's send area in host memory (released when
// notifications report them acknowledged), reads take data the unit placed
// into posted user buffers or uploaded into legacy buffers.
//
// Copies: Write copies once into host memory and Read copies once out of it;
// the unit places and fetches payload by DMA, so the host never touches a
// segment. ReadRegistered copies nothing: the unit places the payload in
// the reader's own buffers (regread.go).
type DelegatedConn struct {
	o     *offloader
	idx   uint32
	key   hdr.Tuple
	flow  *flowInfo // the driver's entry for the flow (removed only if still this one)
	local net.Addr
	peer  net.Addr

	query     connQuery // QUERY_CONN, one at a time (connquery.go)
	mu        sync.Mutex
	cond      *sync.Cond          // signalled on data, space, state change and deadlines
	keepalive net.KeepAliveConfig // as last set (dconn_opts.go)
	// wakeCh, when not nil, is closed with every cond broadcast (signal):
	// a Write waiting for transmit ring space selects on it too.
	wakeCh chan struct{}

	// receive side
	chunks   []rxChunk // data in stream order
	chunkArr []rxChunk // the array chunks is a window of (pushChunk)
	// rxBufs are the connection's user receive buffers, by ID, taken from
	// the host's pool as the connection streams (growRecv) and given back
	// when it goes quiet; an empty slot (addr 0) is one given back.
	rxBufs []rxBuf
	// ubCap is the user buffers the device takes at once, learned from a
	// POST_BUFFERS it accepted only part of (0: no limit seen).
	ubCap      int
	legacyRun  int  // legacy bytes received since receive buffers were last added
	legacyOut  int  // bytes uploaded to legacy buffers not yet read
	creditDue  int  // bytes read from legacy uploads not yet credited back
	creditBusy bool // an UPDATE with credit is in the command ring (offloader.credit)
	peerFin    bool
	rxErr      error
	// cmdErr is the first failure of a command of this connection
	// (POST_BUFFERS, UPDATE: a status other than OK, a lost command):
	// the next Read and Write return it.
	cmdErr error

	// send side: the unacknowledged bytes, in chunks of host memory from
	// the pool taken as Write needs them and given back as they are
	// acknowledged (at most SendBufSize bytes at once)
	snd      []sndChunk
	sndHead  uint64   // stream offset of the oldest unacknowledged byte
	sndTail  uint64   // stream offset of the next byte to queue
	sndISS   uint32   // sequence number of stream offset 0
	txEnds   []uint64 // stream end offset of each queued transmit descriptor
	wrClosed bool
	closed   bool
	released bool
	stateErr error
	lastNtf  rings.NotifyFlags
	// nv is the host's view the notifications are checked against
	// (ntfview.go); rxAvail is the bytes queued in chunks, unread.
	nv      ntfView
	rxAvail int
	rdWant  int // bytes the blocked reader waits for (0: none waits)
	// rcvLowat and sndLowat are the receive and send low-water marks
	// (lowat.go): a blocked reader wakes once rcvLowat bytes are in (the
	// sequence threshold), a blocked writer once sndLowat bytes of send
	// buffer are free (the ACK threshold). seqArmed is the sequence
	// threshold armed in the device (valid when seqArmedOn),
	// ackArmed the ACK threshold.
	rcvLowat, sndLowat  int
	seqArmed            uint32
	seqArmedOn, ackBusy bool
	ackArmed, ackWant   uint32
	txTimes             []int64 // when each of txEnds was queued (driver clock)
	// txQueued is the stream offset up to which transmit descriptors are
	// queued and not refused: sndTail, but while bytes the device refused
	// for want of room wait to go again (txstall.go).
	txQueued uint64
	tx       txStall
	// reg is the registered-buffer reader's state (regread.go).
	reg       regRead
	readDL    deadline
	writeDL   deadline
	closeOnce sync.Once
	aborted   atomic.Bool // the unit freed the index (ABORT, DESTROY_QP): no RELEASE
	abandoned bool        // its delegation was abandoned: offloadLate frees it, not release
}

type rxChunk struct {
	data   []byte         // unread bytes
	userID int            // posted user buffer to repost when drained, or -1
	full   bool           // the user buffer came back full (the peer is streaming)
	legacy int            // legacy bytes to credit when drained
	copied *[]byte        // the legacyCopies buffer data lives in, returned when drained
	reg    *RegisteredBuf // data is in this registered buffer, filled by the device (regread.go)
}

// legacyCopies holds the copies of legacy uploads (a frame's payload each)
// until the application has read them: a copy per segment must not be an
// allocation per segment.
var legacyCopies = sync.Pool{New: func() any { b := make([]byte, 0, 2048); return &b }}

// pushChunk queues ch behind the unread data. The queue's array is reused
// once drained (Read slices chunks from the front), so a connection that
// keeps receiving appends without growing a new array every time.
func (c *DelegatedConn) pushChunk(ch rxChunk) {
	if len(c.chunks) == 0 && cap(c.chunkArr) > 0 {
		c.chunks = c.chunkArr[:0]
	}
	if len(c.chunks) == cap(c.chunks) && len(c.chunks) < cap(c.chunkArr)/2 {
		// Room at the front of the array: move the unread chunks there.
		n := copy(c.chunkArr[:cap(c.chunkArr)], c.chunks)
		clear(c.chunkArr[n:cap(c.chunkArr)])
		c.chunks = c.chunkArr[:n]
	}
	c.chunks = append(c.chunks, ch)
	c.rxAvail += len(ch.data)
	if cap(c.chunks) > cap(c.chunkArr) {
		c.chunkArr = c.chunks[:0]
	}
}

// legacyChunk copies a legacy upload's payload into a pooled buffer.
func legacyChunk(data []byte) rxChunk {
	bp := legacyCopies.Get().(*[]byte)
	*bp = append((*bp)[:0], data...)
	return rxChunk{data: *bp, userID: -1, legacy: len(data), copied: bp}
}

// rxBuf is a user receive buffer from the pool. posted: the device has
// it (or a POST_BUFFERS of it is in flight); refused: the device did not
// take it (POST_BUFFERS accepted fewer), the host posts it again later.
type rxBuf struct {
	addr    rings.Addr
	mem     []byte
	posted  bool
	refused bool
}

// sndChunk is a piece of host memory holding send stream bytes from
// stream offset start.
type sndChunk struct {
	addr  rings.Addr
	mem   []byte
	start uint64
}

// deadline is a settable deadline that wakes waiters on cond when it passes.
type deadline struct {
	t     time.Time
	timer *time.Timer
	gen   int
}

func (d *deadline) set(c *DelegatedConn, t time.Time) {
	d.t = t
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if t.IsZero() {
		return
	}
	if dur := time.Until(t); dur > 0 {
		gen := d.gen
		d.timer = time.AfterFunc(dur, func() {
			c.mu.Lock()
			if d.gen == gen {
				c.signal()
			}
			c.mu.Unlock()
		})
	}
	c.signal()
}

func (d *deadline) passed() bool { return !d.t.IsZero() && !time.Now().Before(d.t) }

// ErrConnReset is returned after the peer reset the connection.
var ErrConnReset = errors.New("connection reset by peer")

// ErrConnTimeout is returned after the offload unit gave up on the peer
// (retransmission or keepalive timeout).
var ErrConnTimeout = errors.New("connection timed out: peer stopped acknowledging")

func opErr(op string, c *DelegatedConn, err error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.local, Addr: c.peer, Err: err}
}

// signal wakes every waiter of the connection (mu held).
func (c *DelegatedConn) signal() {
	c.cond.Broadcast()
	if c.wakeCh != nil {
		close(c.wakeCh)
		c.wakeCh = nil
	}
}

// wakeChanLocked returns a channel closed at the next signal (mu held).
func (c *DelegatedConn) wakeChanLocked() <-chan struct{} {
	if c.wakeCh == nil {
		c.wakeCh = make(chan struct{})
	}
	return c.wakeCh
}

// cmdFailLocked records a failed command of the connection (mu held).
func (c *DelegatedConn) cmdFailLocked(err error) {
	if c.cmdErr == nil {
		c.cmdErr = err
	}
	c.signal()
}

// Read implements net.Conn.
func (c *DelegatedConn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return 0, opErr("read", c, net.ErrClosed)
		}
		if c.cmdErr != nil {
			return 0, opErr("read", c, c.cmdErr)
		}
		// The receive low-water mark: a reader waits for
		// min(lowat, len(p)) bytes, unless the stream ends first.
		if len(c.chunks) > 0 && (c.rxAvail >= min(c.rcvLowat, len(p)) || c.peerFin || c.rxErr != nil) {
			break
		}
		if c.rxErr != nil {
			return 0, opErr("read", c, c.rxErr)
		}
		if c.peerFin {
			return 0, io.EOF
		}
		if c.readDL.passed() {
			if len(c.chunks) > 0 {
				break // less than the low-water mark, but the deadline passed
			}
			return 0, opErr("read", c, os.ErrDeadlineExceeded)
		}
		if len(p) == 0 {
			return 0, nil
		}
		c.rdWant = min(c.rcvLowat, len(p))
		c.armSeqLocked(c.rdWant)
		c.cond.Wait()
		c.rdWant = 0
	}
	n := 0
	for n < len(p) && len(c.chunks) > 0 {
		ch := &c.chunks[0]
		k := copy(p[n:], ch.data)
		c.o.drv.stats.copyBytes.Add(uint64(k))
		ch.data = ch.data[k:]
		c.rxAvail -= k
		n += k
		if len(ch.data) == 0 {
			c.retire(ch)
			*ch = rxChunk{}
			c.chunks = c.chunks[1:]
		}
	}
	return n, nil
}

// retire gives a drained chunk's buffer back: a user buffer is reposted, a
// legacy upload is credited to the receive window, both without waiting
// for the device (a refusal comes back as the connection's error). Called
// with mu held.
func (c *DelegatedConn) retire(ch *rxChunk) {
	if ch.reg != nil {
		c.retireRegLocked(ch.reg)
		ch.reg = nil
	}
	if ch.userID >= 0 {
		// A buffer that came back full, or with more data queued
		// behind it, goes straight back to the unit (the peer is
		// streaming); one the peer did not fill goes back to the pool,
		// so a connection that falls quiet holds no more than it posted
		// and did not get back.
		if ch.full || len(c.chunks) > 1 {
			c.o.repost(c, ch.userID)
		} else {
			c.dropRxBuf(ch.userID)
		}
	}
	if ch.legacy > 0 {
		c.legacyOut -= ch.legacy
		c.creditDue += ch.legacy
	}
	if ch.copied != nil {
		legacyCopies.Put(ch.copied)
		ch.copied = nil
	}
	// Return window in batches of a quarter of the receive buffer. The
	// window never closes for want of a credit: with less than a quarter
	// uncredited, a closed window means more than three quarters are
	// waiting to be read, and reading them crosses the mark. (Crediting
	// whenever the reader drained everything, as this did, put one
	// UPDATE in the command ring per small read.)
	if c.creditDue >= c.o.cfg.RecvBuffers*c.o.cfg.RecvBufSize/4 {
		c.o.credit(c)
	}
}

// Write implements net.Conn: the bytes are copied into the send area and
// queued to the unit as transmit descriptors; Write returns when all are
// queued (not acknowledged), like a socket send. While the send area or the
// transmit ring is full it waits, until the write deadline or Close.
func (c *DelegatedConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for n < len(p) {
		if c.closed {
			return n, opErr("write", c, net.ErrClosed)
		}
		if c.wrClosed {
			return n, opErr("write", c, errors.New("write after CloseWrite"))
		}
		if c.cmdErr != nil {
			return n, opErr("write", c, c.cmdErr)
		}
		if c.stateErr != nil {
			return n, opErr("write", c, c.stateErr)
		}
		if c.writeDL.passed() {
			return n, opErr("write", c, os.ErrDeadlineExceeded)
		}
		limit := uint64(c.o.cfg.SendBufSize)
		if c.sndTail-c.sndHead >= limit || len(c.txEnds) >= c.txLimit() || c.txQueued != c.sndTail {
			// Full: wait until the send low-water mark is free,
			// which the ACK threshold, armed for it, reports.
			c.armAckLocked()
			c.cond.Wait()
			continue
		}
		ch := c.sndRoom()
		if ch == nil {
			// A new chunk from the pool, sized for what is left to
			// write; with the pool empty, wait for any connection to
			// give one back (back-pressure, like a socket whose
			// memory is under pressure), or a deadline, Close, an error.
			a, mem, ok := c.o.pool.get(min(len(p)-n, int(limit)))
			if !ok {
				pw := c.o.pool.waitChan()
				if a, mem, ok = c.o.pool.get(min(len(p)-n, int(limit))); !ok {
					if err := c.waitLocked(pw); err != nil {
						return n, err
					}
					continue
				}
			}
			c.snd = append(c.snd, sndChunk{addr: a, mem: mem, start: c.sndTail})
			ch = &c.snd[len(c.snd)-1]
		}
		// One descriptor per piece of a chunk.
		off := c.sndTail - ch.start
		k := min(uint64(len(p)-n), uint64(len(ch.mem))-off, limit-(c.sndTail-c.sndHead), uint64(c.o.cfg.MaxTxDescBytes))
		copy(ch.mem[off:off+k], p[n:n+int(k)])
		if ok, space := c.o.send(c, ch.addr+rings.Addr(off), uint32(k), 0); !ok {
			// The transmit ring is full: wait for the device to free a
			// slot (or a deadline, Close, an error).
			if err := c.waitLocked(space); err != nil {
				return n, err
			}
			continue
		}
		c.o.drv.stats.copyBytes.Add(k)
		c.sndTail += k
		c.txQueued = c.sndTail
		c.txEnds = append(c.txEnds, c.sndTail)
		c.txTimes = append(c.txTimes, c.o.drv.nanos())
		n += int(k)
	}
	return n, nil
}

// waitLocked waits, not holding mu, for ch, the connection's next signal
// (a deadline, Close, an error) or the driver's end; it returns an error
// only for the last. Called with mu held.
func (c *DelegatedConn) waitLocked(ch <-chan struct{}) error {
	wake := c.wakeChanLocked()
	c.mu.Unlock()
	select {
	case <-ch:
	case <-wake:
	case <-c.o.drv.done:
	}
	c.mu.Lock()
	if c.o.drv.closing.Load() {
		return opErr("write", c, ErrDriverClosed)
	}
	return nil
}

// CloseWrite sends FIN after the queued data (half-close); reads go on.
func (c *DelegatedConn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return opErr("close", c, net.ErrClosed)
	}
	if c.wrClosed {
		return nil
	}
	c.wrClosed = true
	return c.queueFin()
}

// queueFin puts the FIN on the transmit ring behind the data, so the unit
// sees it in stream order (a CLOSE command on the command ring could
// overtake descriptors still in the transmit ring). It never waits: with
// the ring full the FIN waits in the driver's backlog, still behind the
// data. Called with mu held.
func (c *DelegatedConn) queueFin() error {
	if c.txQueued != c.sndTail {
		// Bytes the device refused are still to go again (txstall.go):
		// the FIN follows them.
		c.tx.finPending = true
		return nil
	}
	c.tx.finIssued = true
	c.o.drv.sendDelegatedAsync(rings.Tx{Conn: c.idx, Flags: rings.TxFin})
	return nil
}

// Close sends FIN (if not sent) and releases the connection's host memory
// once the unit reports it closed. Unread data is discarded.
func (c *DelegatedConn) Close() error {
	var err error
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		if !c.wrClosed && c.stateErr == nil {
			c.wrClosed = true
			err = c.queueFin()
		}
		c.readDL.set(c, time.Time{})
		c.writeDL.set(c, time.Time{})
		c.signal()
		done := c.released || c.stateErr != nil
		c.mu.Unlock()
		if done {
			c.o.release(c)
		}
	})
	return err
}

// Abort resets the connection (RST) and releases it. If the device does
// not answer the ABORT in time, the connection's index and memory stay
// reserved until it does.
func (c *DelegatedConn) Abort() error {
	// A Close after the Abort must not queue a FIN: by then the index
	// may be another connection's.
	c.closeOnce.Do(func() {})
	c.mu.Lock()
	c.closed, c.wrClosed = true, true
	c.readDL.set(c, time.Time{})
	c.writeDL.set(c, time.Time{})
	c.signal()
	c.mu.Unlock()
	o := c.o
	res, err := o.drv.command(rings.Command{Opcode: rings.OpAbort, Conn: c.idx}, o.cfg.CommandTimeout,
		func(r rings.Command, err error) { c.aborted2(r, err) })
	if err != nil {
		o.quarantine(c.idx, fmt.Errorf("ABORT: %w", err))
		return err
	}
	return c.aborted2(res, nil)
}

// aborted2 takes an ABORT's answer: the unit freed the index (or never had
// it), so the host frees its side; anything else keeps it reserved.
func (c *DelegatedConn) aborted2(r rings.Command, err error) error {
	o := c.o
	if err == nil && r.Status != rings.StatusOK && r.Status != rings.StatusBadConn {
		err = fmt.Errorf("ABORT: %v", r.Status)
	}
	if err != nil {
		o.quarantine(c.idx, err)
		return err
	}
	c.aborted.Store(true)
	o.release(c)
	o.unquarantine(c.idx)
	return nil
}

// LocalAddr implements net.Conn.
func (c *DelegatedConn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn.
func (c *DelegatedConn) RemoteAddr() net.Addr { return c.peer }

// SetDeadline implements net.Conn.
func (c *DelegatedConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL.set(c, t)
	c.writeDL.set(c, t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *DelegatedConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.readDL.set(c, t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (c *DelegatedConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writeDL.set(c, t)
	return nil
}

// Index is the connection's delegated-connection index on the NIC.
func (c *DelegatedConn) Index() uint32 { return c.idx }

// notify handles one notification for this connection; it runs on the
// driver's interrupt goroutine and never blocks: not on the application,
// not on the device (reposts and credits are submitted, not waited for).
func (c *DelegatedConn) notify(n *rings.Notification) {
	if c.notifyLocked(n) {
		c.o.release(c)
	}
}

// notifyLocked applies a notification; it reports whether the connection
// is now to be released. Its numbers are checked against the host's view
// first (checkNtfLocked): a notification that fails is counted and none
// of its numbers or data is taken; the buffers it returns are still the
// host's, and a connection whose data it concerned fails (its stream can
// no longer be trusted). Its state flags (RST, TIMEOUT, ERROR, CLOSED)
// still apply: the device is done with the connection either way.
func (c *DelegatedConn) notifyLocked(n *rings.Notification) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.lastNtf = n.Flags
	bad, why := c.checkNtfLocked(n)
	if bad != nil {
		c.deviceErrorLocked(bad, why)
		c.badNotifyLocked(n, why)
	} else {
		c.takeNumbersLocked(n)
	}
	wake := n.Flags&(rings.NtfFin|rings.NtfRst|rings.NtfTimeout|rings.NtfError|rings.NtfClosed|rings.NtfSeqThreshold) != 0 || bad != nil
	if bad == nil && n.Flags&rings.NtfUserBufDone != 0 {
		wake = c.userBufDoneLocked(n) || wake
		// The device's queue has room again: what it refused before
		// goes now.
		c.o.repostRefused(c)
		c.postRegLocked()
	}
	if bad == nil && n.Flags&rings.NtfLegacyUpload != 0 {
		// Payload in a shared legacy buffer: copy it out now so the
		// buffer goes straight back to the device; credit the window
		// when the application has read it.
		if data, ok := c.o.drv.legacyData(n.Aux, n.Len); ok {
			if c.closed {
				c.creditDue += int(n.Len)
				c.o.credit(c)
			} else if n.Len > 0 {
				c.legacyOut += int(n.Len)
				c.pushChunk(legacyChunk(data))
				c.o.drv.stats.copyBytes.Add(uint64(n.Len))
				wake = wake || c.rxAvail >= max(c.rdWant, 1)
				// A connection that keeps receiving gets receive
				// buffers of its own from the pool (autotuning): the
				// unit then places its data with one notification
				// per buffer instead of one per segment. A
				// registered reader brings its own (regread.go).
				if c.legacyRun += int(n.Len); c.legacyRun >= c.o.cfg.RecvBufSize && !c.reg.on {
					c.legacyRun = 0
					c.o.growRecv(c)
				}
			}
			c.o.drv.repostLegacy(n.Aux)
		} else if n.Len > 0 {
			// Bytes the host cannot find (no such legacy buffer, or
			// longer than it): the stream has a hole.
			c.deviceErrorLocked(&c.o.drv.stats.ntfImpossible, fmt.Sprintf("legacy upload of %d bytes in buffer %d", n.Len, n.Aux))
			c.fail(fmt.Errorf("offload unit uploaded %d bytes outside legacy buffer %d", n.Len, n.Aux))
			wake = true
		}
	}
	if bad == nil && n.Flags&rings.NtfSeqThreshold != 0 {
		c.seqThresholdLocked()
	}
	if n.Flags&rings.NtfUserBufReq != 0 {
		c.o.drv.stats.userBufReqs.Add(1)
		c.userBufReqLocked()
	}
	if bad == nil && !isTxRefusal(n) {
		wake = c.acked(n.Ack) || wake
		if c.txQueued != c.sndTail || c.tx.finPending {
			wake = c.resendLocked() || wake
		}
	}
	if bad == nil && n.Flags&rings.NtfFin != 0 {
		c.peerFin = true
	}
	if n.Flags&rings.NtfRst != 0 {
		c.fail(ErrConnReset)
	}
	if n.Flags&rings.NtfTimeout != 0 {
		c.fail(ErrConnTimeout)
	}
	if isTxRefusal(n) {
		c.txRefusedLocked(n)
		wake = true
	} else if n.Flags&rings.NtfError != 0 && n.Flags&(rings.NtfLegacyUpload|rings.NtfUserBufDone) == 0 {
		c.fail(errors.New("offload unit reported an error on the connection"))
	}
	release := false
	if n.Flags&rings.NtfClosed != 0 {
		c.released = true
		release = c.closed && !c.abandoned
	}
	if wake {
		c.signal()
	}
	return release
}

// userBufDoneLocked takes a filled user buffer (a pool buffer or the
// registered reader's); it reports whether a reader should wake. mu held.
func (c *DelegatedConn) userBufDoneLocked(n *rings.Notification) bool {
	if c.reg.isRegID(n.Aux) {
		return c.regDoneLocked(n)
	}
	id := int(n.Aux)
	if id >= len(c.rxBufs) || c.rxBufs[id].addr == 0 || int(n.Len) > len(c.rxBufs[id].mem) {
		return false
	}
	c.rxBufs[id].posted = false
	if n.Len == 0 || c.closed {
		c.dropRxBuf(id) // the unit gave it back unused
		return false
	}
	b := c.rxBufs[id].mem
	c.pushChunk(rxChunk{data: b[:n.Len], userID: id, full: int(n.Len) == len(b)})
	return c.rxAvail >= max(c.rdWant, 1)
}

// badNotifyLocked gives back what a rejected notification returned and
// fails the connection if its data was concerned. mu held.
func (c *DelegatedConn) badNotifyLocked(n *rings.Notification, why string) {
	if n.Flags&rings.NtfLegacyUpload != 0 {
		if _, ok := c.o.drv.legacyData(n.Aux, 0); ok {
			c.o.drv.repostLegacy(n.Aux)
		}
	}
	if n.Flags&rings.NtfUserBufDone != 0 {
		c.bufReturnedLocked(n.Aux)
	}
	if n.Flags&(rings.NtfLegacyUpload|rings.NtfUserBufDone|rings.NtfFin) != 0 {
		c.fail(fmt.Errorf("offload unit placed data out of sequence: %s", why))
	}
}

func (c *DelegatedConn) fail(err error) {
	if c.rxErr == nil {
		c.rxErr = err
	}
	if c.stateErr == nil {
		c.stateErr = err
	}
}

// acked frees the send area below the acknowledged sequence number; it
// reports whether a blocked writer should wake: the free send buffer
// reached the send low-water mark, or descriptors freed below the cap.
func (c *DelegatedConn) acked(ack uint32) bool {
	off := uint64(ack - c.sndISS) // bytes acknowledged since offload, mod 2^32
	// Lift the 32-bit offset to the 64-bit stream offset nearest sndHead.
	base := c.sndHead &^ 0xffffffff
	full := base | off
	if full < c.sndHead {
		full += 1 << 32
	}
	if full > c.sndTail {
		// The FIN consumes a sequence number past the data.
		if full == c.sndTail+1 && c.wrClosed {
			full = c.sndTail
		} else {
			return false
		}
	}
	if full == c.sndHead {
		return false
	}
	c.sndHead = full
	k := 0
	for k < len(c.txEnds) && c.txEnds[k] <= full {
		k++
	}
	atCap := len(c.txEnds) >= c.txLimit()
	if k > 0 {
		// The newest descriptor wholly acknowledged gives a round-trip
		// sample: queued to acknowledged.
		c.nv.rttSampleLocked(time.Duration(c.o.drv.nanos() - c.txTimes[k-1]))
	}
	c.txEnds = c.txEnds[k:]
	c.txTimes = c.txTimes[k:]
	// Chunks wholly acknowledged go back to the pool: a full one, or
	// the last one once everything is acknowledged.
	k = 0
	for k < len(c.snd) {
		ch := &c.snd[k]
		if ch.start+uint64(len(ch.mem)) > full && !(k == len(c.snd)-1 && full == c.sndTail) {
			break
		}
		c.o.pool.put(ch.addr, len(ch.mem))
		k++
	}
	if k > 0 {
		c.snd = append(c.snd[:0], c.snd[k:]...)
	}
	free := uint64(c.o.cfg.SendBufSize) - (c.sndTail - c.sndHead)
	return free >= uint64(c.sndLowat) || (atCap && len(c.txEnds) < c.txLimit())
}

// sndRoom returns the chunk the next byte of the send stream goes to, or
// nil if a new one is needed (mu held).
func (c *DelegatedConn) sndRoom() *sndChunk {
	if len(c.snd) == 0 {
		return nil
	}
	ch := &c.snd[len(c.snd)-1]
	if c.sndTail-ch.start >= uint64(len(ch.mem)) {
		return nil
	}
	return ch
}

// dropRxBuf gives user buffer id back to the pool; the unit must not have
// it (mu held).
func (c *DelegatedConn) dropRxBuf(id int) {
	if b := &c.rxBufs[id]; b.addr != 0 {
		c.o.pool.put(b.addr, len(b.mem))
		*b = rxBuf{}
	}
}

// freeStreamLocked gives all of the connection's byte-stream memory back
// to the pool; the unit must no longer use any of it (mu held).
func (c *DelegatedConn) freeStreamLocked() {
	c.releaseRegLocked()
	for id := range c.rxBufs {
		c.dropRxBuf(id)
	}
	c.rxBufs = nil
	for _, ch := range c.snd {
		c.o.pool.put(ch.addr, len(ch.mem))
	}
	c.snd = nil
}
