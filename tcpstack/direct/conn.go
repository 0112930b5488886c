package direct

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// Errors of a sockets-direct connection.
var (
	// ErrNoBuffers: memory for a transfer could not be allocated or
	// registered (the session protocol's WSAENOBUFS). The connection
	// stays usable.
	ErrNoBuffers = errors.New("direct: no buffers: memory could not be allocated or registered")
	// ErrProtocol: the peer broke the session protocol (a malformed
	// message, a credit violation, an unknown transfer). The connection
	// is torn down.
	ErrProtocol = errors.New("direct: protocol violation by the peer")
	// ErrPeerFailed: the RDMA connection failed (the peer disappeared,
	// reset it, or an RDMA operation on its memory failed).
	ErrPeerFailed = errors.New("direct: connection lost")
)

// Work request IDs: the kind in the top byte, the conn's generation in the
// next three, an index in the low four. QP numbers are connection indexes,
// reused as soon as a QP is destroyed, and the completions of a destroyed
// QP (its flushed work) may still be in the shared CQ when a new conn has
// its number: the generation tells them apart.
const (
	wrRecv   = 1 << 56
	wrSend   = 2 << 56
	wrRead   = 3 << 56
	wrWrite  = 4 << 56
	wrKind   = 0xFF << 56
	wrGenSh  = 32
	wrGenMsk = 0xFFFFFF << wrGenSh
	wrIdxMsk = 0xFFFFFFFF
)

// chunk is one staging region of a transfer: a slice of the conn's source
// or sink area.
type chunk struct {
	idx  int
	off  int // offset in the area
	id   uint32
	n    int       // bytes of the transfer
	mr   *verbs.MR // the cache registration while in use (source)
	busy bool
}

// area is a conn's registered staging memory for one direction: chunks of
// chunkSize bytes.
type area struct {
	buf    *verbs.Buffer
	mem    []byte
	chunks []chunk
	free   []int
}

// rseg is one item of the receive stream, in order.
type rseg struct {
	n     int    // bytes
	off   int    // bytes read so far
	data  []byte // RDMA: the bytes in the sink area, once ready
	ready bool   // inline bytes are always ready
	sink  int    // sink chunk index, or -1 for inline bytes
	srcID uint32 // RDMA Read: the source's transfer ID
	srcTO uint64
	stag  uint32
}

// sendSlot is one send buffer of the control pool.
type sendSlot struct {
	src int // source chunk released when this send completes (-1: none)
}

// Conn is a sockets-direct connection on the RDMA path.
type Conn struct {
	sw   *hostSwitch
	qp   *verbs.QP
	info PathInfo
	cfg  Config

	local, remote net.Addr

	ctrl     *verbs.Buffer
	ctrlMR   *verbs.MR
	ctrlMem  []byte
	bufSize  int // control buffer size: header + our MaxInline
	nRecv    int // receive buffers: pool + slots
	nSend    int
	maxIn    int // our MaxInline
	peerIn   int // the peer's MaxInline
	peerXfer int // the most bytes one transfer to the peer may carry

	mu      sync.Mutex
	cond    *sync.Cond
	cs      creditState
	sends   []sendSlot
	free    []int // free send slots
	ctlQ    []Msg // control messages waiting for a credit
	rq      []rseg
	ibuf    []byte // inline bytes received, a ring
	ihead   int
	ilen    int
	finRecv bool
	finSent bool
	finQ    bool // FIN queued
	err     error
	closed  bool
	closing bool // Close has begun: writes fail, FIN goes when the last Write returned
	rdl     deadline
	wdl     deadline
	writing bool // a Write holds the send side (Writes are serialized)

	txMode, rxMode Transfer
	src            *area // our large sends
	// open is the source chunk being filled and not yet announced (-1:
	// none), openN its bytes, openCap the most it takes; inFlight counts
	// the announced transfers not yet done (corkLocked).
	open, openN, openCap int
	inFlight             int
	sink                 *area // the peer's large sends
	nextID               uint32
	sinkAdv              []Msg // the peer's advertised regions (Write mode), in order
	reposts              []rings.RecvWR
	readsOut             int
	flushed              bool   // a flushed completion was seen
	bareSeen             bool   // the peer's one CREDIT without credits was seen
	gen                  uint64 // the conn's generation, in place in its WRIDs
}

// PathInfo says which path a connection took and why.
type PathInfo struct {
	Path Path
	// Reason is why the connection fell back to TCP (nil on the RDMA
	// path).
	Reason error
	// Send and Recv are the transfer modes of large sends each way on
	// the RDMA path.
	Send, Recv Transfer
}

// Path is a connection's data path.
type Path uint8

// Paths.
const (
	PathRDMA Path = 1 // the session protocol over an RDMA QP
	PathTCP  Path = 2 // plain TCP on netstack (fallback)
)

func (p Path) String() string {
	switch p {
	case PathRDMA:
		return "rdma"
	case PathTCP:
		return "tcp"
	}
	return "none"
}

func (i PathInfo) String() string {
	if i.Path == PathRDMA {
		return fmt.Sprintf("rdma (send %v, receive %v)", i.Send, i.Recv)
	}
	return fmt.Sprintf("tcp fallback: %v", i.Reason)
}

// PathInfo says which path the connection is on.
func (c *Conn) PathInfo() PathInfo { return c.info }

// newConn allocates a conn's control pool and posts its receives (from
// the QP's Setup, before the connection is established).
func newConn(sw *hostSwitch, cfg Config, qp *verbs.QP) (*Conn, error) {
	c := &Conn{sw: sw, qp: qp, cfg: cfg, maxIn: cfg.MaxInline, gen: uint64(sw.connGen.Add(1)&0xFFFFFF) << wrGenSh, open: -1}
	c.cond = sync.NewCond(&c.mu)
	c.bufSize = HeaderSize + cfg.MaxInline
	c.nRecv = cfg.Pool + cfg.Slots
	c.nSend = cfg.Pool + cfg.Slots + 4
	buf, err := sw.v.AllocBuffer((c.nRecv + c.nSend) * c.bufSize)
	if err != nil {
		return nil, fmt.Errorf("%w: control pool: %v", ErrNoBuffers, err)
	}
	mr, err := sw.v.RegMR(sw.pd, buf, verbs.AccessLocalWrite)
	if err != nil {
		_ = buf.Free()
		return nil, fmt.Errorf("%w: control pool: %v", ErrNoBuffers, err)
	}
	c.ctrl, c.ctrlMR, c.ctrlMem = buf, mr, buf.Bytes()
	c.sends = make([]sendSlot, c.nSend)
	for i := range c.nSend {
		c.free = append(c.free, i)
		c.sends[i].src = -1
	}
	c.ibuf = make([]byte, cfg.Pool*cfg.MaxInline)
	wrs := make([]rings.RecvWR, c.nRecv)
	for i := range wrs {
		wrs[i] = c.recvWR(i)
	}
	if _, err := qp.PostRecvList(wrs); err != nil {
		c.freeMem()
		return nil, err
	}
	c.reposts = make([]rings.RecvWR, 0, c.nRecv)
	// Every post would otherwise wait for a command round trip to the
	// device, under the conn's lock.
	qp.SetAsyncDoorbell(true)
	go c.watchDoorbell()
	return c, nil
}

// watchDoorbell fails the conn when its QP fails because an asynchronous
// doorbell was refused: the work behind it never reached the device, so
// no completion would ever wake the conn's waiters. Every other QP failure
// reaches the conn through its flushed completions, with its own reason.
// It returns when the QP fails or is destroyed (Close destroys it).
func (c *Conn) watchDoorbell() {
	<-c.qp.Failed()
	if err := c.qp.DoorbellErr(); err != nil {
		c.mu.Lock()
		c.failLocked(fmt.Errorf("%w: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
		c.mu.Unlock()
	}
}

func (c *Conn) recvWR(i int) rings.RecvWR {
	w := rings.RecvWR{WRID: wrRecv | c.gen | uint64(i), NumSGE: 1}
	w.SGL[0] = c.ctrlMR.SGE(i*c.bufSize, c.bufSize)
	return w
}

func (c *Conn) sendBuf(slot int) []byte {
	o := (c.nRecv + slot) * c.bufSize
	return c.ctrlMem[o : o+c.bufSize]
}

// start applies the peer's hello: credits, limits and transfer modes;
// sink memory was set up by prepareSink.
func (c *Conn) start(mine, peer *Hello) {
	// A side's pool is at most the peer's credit-only slots minus one
	// (credit.go): both sides compute both.
	myPool := min(int(mine.Pool), int(peer.Slots)-1)
	peerPool := min(int(peer.Pool), int(mine.Slots)-1)
	c.cs = newCreditState(myPool, max(1, min(c.cfg.Reserve, peerPool-1)), max(1, myPool/2))
	c.cs.cred, c.cs.peerPool = peerPool, peerPool
	// Our send buffers are as large as our receive buffers.
	c.peerIn = min(int(peer.MaxInline), c.maxIn)
	c.txMode = transferMode(c.cfg.Transfer, peer.Caps)
	c.rxMode = transferMode(peer.Pref, mine.Caps)
	c.peerXfer = int(peer.MaxTransfer)
	c.info = PathInfo{Path: PathRDMA, Send: c.txMode, Recv: c.rxMode}
	if c.rxMode == TransferWrite && c.sink != nil {
		for i := range c.sink.chunks {
			c.advertiseLocked(i)
		}
		c.sink.free = nil
	}
}

// prepareSink allocates and registers the area the peer's large sends
// land in; it returns the caps this side can offer (none without memory).
func (c *Conn) prepareSink() uint8 {
	caps := uint8(0)
	if !c.cfg.NoRDMARead {
		caps |= CapRead
	}
	if !c.cfg.NoRDMAWrite {
		caps |= CapWrite
	}
	if caps == 0 {
		return 0
	}
	a, err := c.newArea(verbs.AccessLocalWrite | verbs.AccessRemoteWrite)
	if err != nil {
		c.sw.stats.noBuffers.Add(1)
		return 0
	}
	c.sink = a
	return caps
}

func (c *Conn) newArea(access int) (*area, error) {
	n := c.cfg.Chunks * c.cfg.ChunkSize
	buf, err := c.sw.v.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	a := &area{buf: buf, mem: buf.Bytes(), chunks: make([]chunk, c.cfg.Chunks)}
	for i := range a.chunks {
		a.chunks[i] = chunk{idx: i, off: i * c.cfg.ChunkSize}
		a.free = append(a.free, i)
	}
	if access != 0 {
		// The sink area is registered once for the connection's life.
		mr, err := c.sw.cache.Get(c.sw.pd, buf.Addr, n, access)
		if err != nil {
			_ = buf.Free()
			return nil, err
		}
		for i := range a.chunks {
			a.chunks[i].mr = mr
		}
	}
	return a, nil
}

// ---- the send side ----------------------------------------------------------

// postLocked sends one control message (the caller checked the credit and
// took a free slot); payload follows the header of a DATA message. extra
// work requests (an RDMA Write) go before it in the same doorbell.
func (c *Conn) postLocked(m Msg, payload []byte, src int, extra *rings.SendWR) error {
	slot := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	m.Credits = c.cs.send(m.Type.class())
	b := c.sendBuf(slot)
	m.Encode(b)
	copy(b[HeaderSize:], payload)
	c.sends[slot].src = src
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: wrSend | c.gen | uint64(slot), NumSGE: 1}
	w.SGL[0] = c.ctrlMR.SGE((c.nRecv+slot)*c.bufSize, HeaderSize+len(payload))
	var err error
	if extra != nil {
		var wrs [2]rings.SendWR
		wrs[0], wrs[1] = *extra, w
		_, err = c.qp.PostSendList(wrs[:])
	} else {
		err = c.qp.PostSend(&w)
	}
	if err != nil {
		c.failLocked(fmt.Errorf("%w: post send: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
	}
	if m.Type == TypeFin {
		c.finSent = true
	}
	return err
}

// flushLocked sends what waits for a credit: queued control messages in
// order, then a credit-only message if one is due.
func (c *Conn) flushLocked() {
	if c.err != nil || c.cs.peerPool == 0 {
		return
	}
	for len(c.ctlQ) > 0 && len(c.free) > 0 && c.cs.canSend(classCtl) {
		m := c.ctlQ[0]
		c.ctlQ = popFront(c.ctlQ)
		if c.postLocked(m, nil, -1, nil) != nil {
			return
		}
	}
	if c.open >= 0 && !c.corkLocked() && c.announceLocked() != nil {
		return
	}
	if len(c.ctlQ) == 0 && c.open < 0 && c.finQ && !c.finSent && !c.writing && len(c.free) > 0 && c.cs.canSend(classCtl) {
		if c.postLocked(Msg{Type: TypeFin}, nil, -1, nil) != nil {
			return
		}
	}
	if len(c.free) > 0 && c.cs.canSend(classCredit) {
		_ = c.postLocked(Msg{Type: TypeCredit}, nil, -1, nil)
	}
}

// Write implements net.Conn. Bytes below the copy threshold travel inline;
// runs of at least Threshold bytes go by RDMA Read or Write in chunks.
// Write returns once its bytes are sent or copied into a source chunk: the
// last chunk of a Write may be held for the next Writes to fill while
// transfers are in flight (corkLocked), and goes when they are done.
func (c *Conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.writing {
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return 0, c.opErr("write", err)
		}
	}
	c.writing = true
	defer func() {
		c.writing = false
		c.flushLocked() // a FIN queued behind this Write
		c.cond.Broadcast()
	}()
	total := 0
	large := len(b) >= c.cfg.Threshold
	for len(b) > 0 {
		n, err := c.writeOnceLocked(b, large)
		total += n
		b = b[n:]
		if err != nil {
			return total, c.opErr("write", err)
		}
	}
	return total, nil
}

// writeOnceLocked sends or stages a first part of b; large says b's Write
// was at least Threshold bytes long, so even its tail goes by RDMA.
func (c *Conn) writeOnceLocked(b []byte, large bool) (int, error) {
	for {
		if err := c.sendErrLocked(); err != nil {
			return 0, err
		}
		if c.wdl.passed() {
			return 0, os.ErrDeadlineExceeded
		}
		if c.txMode != TransferInline && (large || len(b) >= c.cfg.Threshold || c.open >= 0) {
			// A chunk being filled takes short writes too: they may not
			// overtake its bytes, and joining it costs no message.
			n, done, err := c.writeRDMALocked(b)
			if done || err != nil {
				return n, err
			}
		} else if len(c.free) > 0 && c.cs.canSend(classData) {
			n := min(len(b), c.peerIn)
			err := c.postLocked(Msg{Type: TypeData, Len: uint32(n)}, b[:n], -1, nil)
			c.sw.stats.inlineBytes.Add(uint64(n))
			return n, err
		}
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return 0, err
		}
	}
}

// corkAt is how many transfers may be in flight before a chunk that is not
// full is held for later Writes to fill: a stream of writes shorter than a
// chunk then moves in fuller chunks, with fewer control messages and RDMA
// operations per byte, while enough transfers stay queued to keep the
// connection busy; a chunk held goes as soon as fewer are in flight (the
// poller's flushLocked after RD_DONE or the WR_DONE send completed).
const corkAt = 2

// corkLocked says whether the open chunk waits for more bytes: it is not
// full, transfers are in flight, and no FIN waits behind it.
func (c *Conn) corkLocked() bool {
	return c.openN < c.openCap && c.inFlight >= corkAt && !c.finQ && !c.closing && !c.cfg.noCork
}

// writeRDMALocked copies a first part of b into the open source chunk,
// opening one if a chunk (and, in Write mode, an advertised sink region)
// is available, and announces the chunk when it is full; done false means
// wait and try again.
func (c *Conn) writeRDMALocked(b []byte) (int, bool, error) {
	if c.open >= 0 && c.openN == c.openCap {
		// Full, waiting for a credit or a send slot.
		if c.announceLocked() != nil || c.open >= 0 {
			return 0, false, nil
		}
	}
	if c.open < 0 {
		if err := c.openLocked(); err != nil || c.open < 0 {
			return 0, err != nil, err
		}
	}
	ch := &c.src.chunks[c.open]
	n := copy(c.src.mem[ch.off+c.openN:ch.off+c.openCap], b)
	c.openN += n
	var err error
	if c.openN == c.openCap {
		err = c.announceLocked()
	}
	return n, true, err
}

// openLocked makes a free source chunk the open one, registered through
// the registration cache (WSPRegisterRdmaMemory; a hit after the first
// transfer of the chunk). It leaves c.open -1 when there is no chunk (or,
// in Write mode, no advertised region) yet.
func (c *Conn) openLocked() error {
	if c.src == nil {
		a, err := c.newArea(0)
		if err != nil {
			c.sw.stats.noBuffers.Add(1)
			return ErrNoBuffers
		}
		c.src = a
	}
	if len(c.src.free) == 0 || c.txMode == TransferWrite && len(c.sinkAdv) == 0 {
		return nil
	}
	ci := c.src.free[len(c.src.free)-1]
	ch := &c.src.chunks[ci]
	access := verbs.AccessLocalWrite
	if c.txMode == TransferRead {
		access |= verbs.AccessRemoteRead
	}
	mr, err := c.sw.cache.Get(c.sw.pd, c.src.buf.Addr+rings.Addr(ch.off), c.cfg.ChunkSize, access)
	if err != nil {
		c.sw.stats.noBuffers.Add(1)
		return fmt.Errorf("%w: %v", ErrNoBuffers, err)
	}
	c.src.free = c.src.free[:len(c.src.free)-1]
	*ch = chunk{idx: ci, off: ch.off, mr: mr, busy: true}
	c.open, c.openN = ci, 0
	// The region the chunk will go to is the oldest advertised one (Write
	// mode): only announcements take regions, in order.
	c.openCap = min(c.cfg.ChunkSize, c.peerXfer)
	if c.txMode == TransferWrite {
		c.openCap = min(c.cfg.ChunkSize, int(c.sinkAdv[0].Len))
	}
	return nil
}

// announceLocked sends the open chunk if a credit and a send slot allow:
// SRC_AVAIL (Read mode), or the RDMA Write and WR_DONE behind it.
func (c *Conn) announceLocked() error {
	if c.open < 0 || c.openN == 0 || len(c.free) == 0 || !c.cs.canSend(classData) {
		return nil
	}
	ci, n := c.open, c.openN
	ch := &c.src.chunks[ci]
	c.open, c.openN = -1, 0
	c.inFlight++
	c.nextID++
	ch.id, ch.n = c.nextID, n
	mr := ch.mr
	to := mr.TO(int(c.src.buf.Addr) + ch.off - int(mr.Addr))
	c.sw.stats.rdmaBytes.Add(uint64(n))
	c.sw.stats.rdmaTransfers.Add(1)
	if c.txMode == TransferRead {
		return c.postLocked(Msg{Type: TypeSrcAvail, Len: uint32(n), ID: ch.id, STag: mr.RKey, TO: to}, nil, -1, nil)
	}
	adv := c.sinkAdv[0]
	c.sinkAdv = popFront(c.sinkAdv)
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, WRID: wrWrite | c.gen | uint64(ci), RemoteAddr: adv.TO, RKey: adv.STag, NumSGE: 1}
	w.SGL[0] = rings.SGE{Addr: to, Length: uint32(n), LKey: mr.LKey}
	return c.postLocked(Msg{Type: TypeWrDone, Len: uint32(n), ID: adv.ID}, nil, ci, &w)
}

// releaseSrcLocked gives a source chunk back (its RDMA Read is done, or
// its RDMA Write and WR_DONE completed): WSPDeregisterRdmaMemory.
func (c *Conn) releaseSrcLocked(ci int) {
	ch := &c.src.chunks[ci]
	if !ch.busy {
		return
	}
	if ch.mr != nil {
		_ = c.sw.cache.Put(ch.mr)
		ch.mr = nil
	}
	ch.busy = false
	c.src.free = append(c.src.free, ci)
	c.inFlight--
}

func (c *Conn) sendErrLocked() error {
	switch {
	case c.closed || c.closing:
		return net.ErrClosed
	case c.err != nil:
		return c.err
	case c.finQ:
		return errors.New("direct: write after CloseWrite")
	}
	return nil
}

// CloseWrite half-closes the connection: FIN goes after every byte
// written; the peer reads EOF after them. The peer may go on sending.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	if !c.finQ {
		c.finQ = true
		c.flushLocked()
	}
	return nil
}

// ---- the receive side --------------------------------------------------------

// Read implements net.Conn.
func (c *Conn) Read(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for {
		if c.closed {
			return 0, c.opErr("read", net.ErrClosed)
		}
		if c.rdl.passed() {
			return 0, c.opErr("read", os.ErrDeadlineExceeded)
		}
		if len(c.rq) > 0 && c.rq[0].ready {
			if len(p) == 0 {
				return 0, nil
			}
			return c.readLocked(p), nil
		}
		if c.finRecv && len(c.rq) == 0 {
			return 0, io.EOF
		}
		if c.err != nil {
			return 0, c.opErr("read", c.err)
		}
		if err := c.waitLocked(&c.rdl, false); err != nil {
			return 0, c.opErr("read", err)
		}
	}
}

// readLocked copies ready bytes into p (partial reads take what fits).
func (c *Conn) readLocked(p []byte) int {
	n := 0
	for n < len(p) && len(c.rq) > 0 && c.rq[0].ready {
		s := &c.rq[0]
		k := min(len(p)-n, s.n-s.off)
		if s.sink < 0 {
			// Inline bytes, from the ring.
			for k > 0 {
				i := c.ihead
				m := copy(p[n:n+min(k, len(c.ibuf)-i)], c.ibuf[i:])
				c.ihead = (c.ihead + m) % len(c.ibuf)
				c.ilen -= m
				n += m
				k -= m
				s.off += m
			}
		} else {
			copy(p[n:n+k], s.data[s.off:])
			n += k
			s.off += k
		}
		if s.off < s.n {
			break
		}
		// The message's bytes are all read: its buffer's credit goes
		// back, and its sink chunk is free again.
		sink := s.sink
		c.rq = popFront(c.rq)
		c.cs.consumed()
		if sink >= 0 {
			c.sinkFreeLocked(sink)
		}
	}
	c.flushLocked()
	c.cond.Broadcast()
	return n
}

func (c *Conn) sinkFreeLocked(i int) {
	if c.rxMode == TransferWrite {
		c.advertiseLocked(i)
		return
	}
	c.sink.chunks[i].busy = false
	c.sink.free = append(c.sink.free, i)
	c.startReadsLocked()
}

// advertiseLocked queues SINK_AVAIL for sink chunk i.
func (c *Conn) advertiseLocked(i int) {
	ch := &c.sink.chunks[i]
	c.nextID++
	ch.id, ch.busy, ch.n = c.nextID, true, 0
	to := ch.mr.TO(int(c.sink.buf.Addr) + ch.off - int(ch.mr.Addr))
	c.ctlQ = append(c.ctlQ, Msg{Type: TypeSinkAvail, Len: uint32(c.cfg.ChunkSize), ID: ch.id, STag: ch.mr.RKey, TO: to})
}

// startReadsLocked posts RDMA Reads for SRC_AVAIL items in order while
// sink chunks are free: data is pulled as soon as it is announced, not when
// the application reads, so the source gets its memory back early.
func (c *Conn) startReadsLocked() {
	for i := range c.rq {
		s := &c.rq[i]
		if s.ready || s.sink >= 0 || s.stag == 0 {
			continue
		}
		if len(c.sink.free) == 0 || c.err != nil {
			return
		}
		ci := c.sink.free[len(c.sink.free)-1]
		c.sink.free = c.sink.free[:len(c.sink.free)-1]
		ch := &c.sink.chunks[ci]
		ch.busy, ch.n, ch.id = true, s.n, s.srcID
		s.sink = ci
		w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: wrRead | c.gen | uint64(ci),
			RemoteAddr: s.srcTO, RKey: s.stag, NumSGE: 1}
		w.SGL[0] = rings.SGE{Addr: ch.mr.TO(int(c.sink.buf.Addr) + ch.off - int(ch.mr.Addr)), Length: uint32(s.n), LKey: ch.mr.LKey}
		c.readsOut++
		if err := c.qp.PostSend(&w); err != nil {
			c.failLocked(fmt.Errorf("%w: post RDMA Read: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
			return
		}
	}
}

// ---- completions (the host switch's poller) --------------------------------------

// handleLocked takes one completion of the conn's QP.
func (c *Conn) handleLocked(wc *rings.Completion) {
	if wc.WRID&wrGenMsk != c.gen {
		return // a completion of an earlier QP with this number
	}
	idx := int(wc.WRID & wrIdxMsk)
	if wc.Status != rings.WCSuccess {
		if c.closed {
			return
		}
		if wc.WRID&wrKind == wrRead {
			c.readsOut--
		}
		if wc.Status == rings.WCWRFlushErr {
			// The QP is in ERROR. The device may flush the receives
			// before it completes the work that failed, so the reason
			// waits for every outstanding RDMA Read (afterBatchLocked).
			c.flushed = true
			return
		}
		if wc.Status == rings.WCRemAccessErr || wc.Status == rings.WCLocProtErr || wc.Status == rings.WCRemInvRdReqErr || wc.Status == rings.WCLocAccessErr {
			c.failLocked(fmt.Errorf("%w: %v on %v (an advertised region is not there)", ErrPeerFailed, wc.Status, wc.Opcode), &c.sw.stats.remoteAccess)
			return
		}
		c.failLocked(fmt.Errorf("%w: %v", ErrPeerFailed, wc.Status), &c.sw.stats.peerFailures)
		return
	}
	switch wc.WRID & wrKind {
	case wrRecv:
		if idx >= c.nRecv {
			return
		}
		c.recvLocked(idx, int(wc.ByteLen))
	case wrSend:
		if idx >= c.nSend {
			return
		}
		if s := c.sends[idx].src; s >= 0 {
			c.sends[idx].src = -1
			c.releaseSrcLocked(s)
		}
		c.free = append(c.free, idx)
	case wrRead:
		if c.sink == nil || idx >= len(c.sink.chunks) {
			return
		}
		c.readsOut--
		for i := range c.rq {
			s := &c.rq[i]
			if s.sink == idx && !s.ready {
				ch := &c.sink.chunks[idx]
				s.ready, s.data = true, c.sink.mem[ch.off:ch.off+s.n]
				c.ctlQ = append(c.ctlQ, Msg{Type: TypeRdDone, ID: s.srcID, Len: uint32(s.n)})
				break
			}
		}
	}
	c.cond.Broadcast()
}

// recvLocked takes the message in receive buffer i and re-posts the buffer.
func (c *Conn) recvLocked(i, n int) {
	o := i * c.bufSize
	var m Msg
	payload, err := m.Decode(c.ctrlMem[o:o+min(n, c.bufSize)], c.maxIn)
	if err == nil && n > c.bufSize {
		err = fmt.Errorf("%w: %d bytes into a %d-byte buffer", ErrBadMessage, n, c.bufSize)
	}
	if err != nil {
		c.failLocked(fmt.Errorf("%w: %v", ErrProtocol, err), &c.sw.stats.badMessages)
		return
	}
	if m.Type == TypeCredit && m.Credits == 0 {
		// Only the dialler's first message may grant nothing: the
		// credit-only slots are sized for messages that grant.
		if c.bareSeen {
			c.failLocked(fmt.Errorf("%w: a second CREDIT with no credits", ErrProtocol), &c.sw.stats.creditViolations)
			return
		}
		c.bareSeen = true
	}
	if !c.cs.granted(m.Credits) || !c.cs.received(m.Type.class()) {
		c.failLocked(fmt.Errorf("%w: %v beyond its credits (grant %d)", ErrProtocol, m.Type, m.Credits), &c.sw.stats.creditViolations)
		return
	}
	if c.finRecv && m.Type.class() == classData {
		c.failLocked(fmt.Errorf("%w: %v after FIN", ErrProtocol, m.Type), &c.sw.stats.badMessages)
		return
	}
	switch m.Type {
	case TypeData:
		if c.ilen+len(payload) > len(c.ibuf) {
			c.failLocked(fmt.Errorf("%w: inline data beyond the pool", ErrProtocol), &c.sw.stats.creditViolations)
			return
		}
		t := (c.ihead + c.ilen) % len(c.ibuf)
		k := copy(c.ibuf[t:], payload)
		copy(c.ibuf, payload[k:])
		c.ilen += len(payload)
		c.rq = append(c.rq, rseg{n: len(payload), ready: true, sink: -1})
	case TypeSrcAvail:
		if c.rxMode != TransferRead || c.sink == nil || int(m.Len) > c.cfg.ChunkSize || m.STag == 0 {
			c.failLocked(fmt.Errorf("%w: SRC_AVAIL of %d bytes in %v mode", ErrProtocol, m.Len, c.rxMode), &c.sw.stats.badMessages)
			return
		}
		c.rq = append(c.rq, rseg{n: int(m.Len), sink: -1, srcID: m.ID, srcTO: m.TO, stag: m.STag})
		c.startReadsLocked()
	case TypeRdDone:
		if c.txMode != TransferRead || c.src == nil || !c.releaseByIDLocked(m.ID, int(m.Len)) {
			c.failLocked(fmt.Errorf("%w: RD_DONE of unknown transfer %d", ErrProtocol, m.ID), &c.sw.stats.badMessages)
			return
		}
	case TypeSinkAvail:
		if c.txMode != TransferWrite || m.STag == 0 || len(c.sinkAdv) >= maxPool {
			c.failLocked(fmt.Errorf("%w: SINK_AVAIL in %v mode", ErrProtocol, c.txMode), &c.sw.stats.badMessages)
			return
		}
		c.sinkAdv = append(c.sinkAdv, m)
	case TypeWrDone:
		ci := c.sinkByIDLocked(m.ID)
		if c.rxMode != TransferWrite || ci < 0 || int(m.Len) > c.cfg.ChunkSize {
			c.failLocked(fmt.Errorf("%w: WR_DONE of unknown region %d", ErrProtocol, m.ID), &c.sw.stats.badMessages)
			return
		}
		ch := &c.sink.chunks[ci]
		ch.n = int(m.Len)
		ch.id = 0 // used: a second WR_DONE for it is refused
		c.rq = append(c.rq, rseg{n: ch.n, ready: true, sink: ci, data: c.sink.mem[ch.off : ch.off+ch.n]})
	case TypeFin:
		c.finRecv = true
	}
	c.reposts = append(c.reposts, c.recvWR(i))
}

func (c *Conn) releaseByIDLocked(id uint32, n int) bool {
	for i := range c.src.chunks {
		ch := &c.src.chunks[i]
		if ch.busy && ch.id == id && ch.n == n && i != c.open {
			c.releaseSrcLocked(i)
			return true
		}
	}
	return false
}

func (c *Conn) sinkByIDLocked(id uint32) int {
	if c.sink == nil || id == 0 {
		return -1
	}
	for i := range c.sink.chunks {
		if ch := &c.sink.chunks[i]; ch.busy && ch.id == id {
			return i
		}
	}
	return -1
}

// afterBatchLocked re-posts the receive buffers a batch consumed, then
// sends what waits: credits are granted only for buffers posted again.
func (c *Conn) afterBatchLocked() {
	if c.flushed && c.err == nil && c.readsOut <= 0 {
		c.failLocked(fmt.Errorf("%w: the QP was flushed (the peer closed or reset the connection)", ErrPeerFailed), &c.sw.stats.peerFailures)
	}
	if len(c.reposts) > 0 && c.err == nil && !c.closed {
		_, err := c.qp.PostRecvList(c.reposts)
		c.reposts = c.reposts[:0]
		if err != nil {
			c.failLocked(fmt.Errorf("%w: re-post receives: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
			return
		}
	}
	c.flushLocked()
}

// failLocked makes err the conn's error (the first one counts) and tears
// the QP down so the peer sees it.
func (c *Conn) failLocked(err error, counter interface{ Add(uint64) uint64 }) {
	if c.err != nil || c.closed {
		return
	}
	if c.finRecv && c.finSent && errors.Is(err, ErrPeerFailed) && c.readsOut == 0 {
		// Both FINs went: the peer closing its QP is the end, not a
		// failure.
		c.err = net.ErrClosed
		c.cond.Broadcast()
		return
	}
	c.err = err
	if counter != nil {
		counter.Add(1)
	}
	c.cond.Broadcast()
	qp := c.qp
	go func() { _ = qp.Destroy() }()
}

// popFront removes q's first item and moves the rest to the front of its
// array, so that appends reuse the array: the conn's queues (received
// segments, control messages, advertised regions) are short, and popping
// by reslicing would make every append past the end allocate anew.
func popFront[T any](q []T) []T {
	n := copy(q, q[1:])
	var zero T
	q[n] = zero // no stale reference past the end
	return q[:n]
}

// ---- waiting, deadlines, close ------------------------------------------------

// deadline wakes the conn's waiters when it passes.
type deadline struct {
	t     time.Time
	timer *time.Timer
	gen   int
}

func (d *deadline) set(c *Conn, t time.Time) {
	d.t = t
	d.gen++
	if d.timer != nil {
		d.timer.Stop()
		d.timer = nil
	}
	if !t.IsZero() {
		if dur := time.Until(t); dur > 0 {
			gen := d.gen
			d.timer = time.AfterFunc(dur, func() {
				c.mu.Lock()
				if d.gen == gen {
					c.cond.Broadcast()
				}
				c.mu.Unlock()
			})
		}
	}
	c.cond.Broadcast()
}

func (d *deadline) passed() bool { return !d.t.IsZero() && !time.Now().Before(d.t) }

// waitLocked waits for a change; it fails when the deadline passed, the
// conn was closed or (writers) failed.
func (c *Conn) waitLocked(d *deadline, write bool) error {
	if d.passed() {
		return os.ErrDeadlineExceeded
	}
	if c.closed || write && c.closing {
		return net.ErrClosed
	}
	if write && c.err != nil {
		return c.err
	}
	c.cond.Wait()
	if d.passed() {
		return os.ErrDeadlineExceeded
	}
	return nil
}

func (c *Conn) opErr(op string, err error) error {
	if err == io.EOF {
		return err
	}
	return &net.OpError{Op: op, Net: "rdma", Source: c.local, Addr: c.remote, Err: err}
}

// SetDeadline implements net.Conn.
func (c *Conn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl.set(c, t)
	c.wdl.set(c, t)
	return nil
}

// SetReadDeadline implements net.Conn.
func (c *Conn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.rdl.set(c, t)
	return nil
}

// SetWriteDeadline implements net.Conn.
func (c *Conn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wdl.set(c, t)
	return nil
}

// LocalAddr implements net.Conn.
func (c *Conn) LocalAddr() net.Addr { return c.local }

// RemoteAddr implements net.Conn.
func (c *Conn) RemoteAddr() net.Addr { return c.remote }

// Close implements net.Conn. Bytes written before it still reach the peer:
// FIN goes after them, and Close waits (up to Config.Linger) until the peer
// has pulled every RDMA Read transfer and every send completed, then
// disconnects the QP and frees the memory.
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed || c.closing {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	// A Write blocked in another goroutine gives up (net.ErrClosed), so
	// the FIN can go behind what was written.
	c.closing = true
	c.cond.Broadcast()
	for c.writing {
		c.cond.Wait()
	}
	c.finQ = true
	c.flushLocked()
	expired := false
	stop := c.sw.h.AfterFunc(c.cfg.Linger, func() {
		c.mu.Lock()
		expired = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	for c.err == nil && !expired && !c.drainedLocked() {
		c.cond.Wait()
	}
	stop()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.sw.stats.closed.Add(1)
	_ = c.qp.Close()
	c.sw.forget(c)
	c.mu.Lock()
	c.freeMem()
	c.mu.Unlock()
	return nil
}

// drainedLocked: FIN sent, every send completed, no transfer of ours
// outstanding.
func (c *Conn) drainedLocked() bool {
	if !c.finSent || len(c.free) != c.nSend {
		return false
	}
	return c.src == nil || len(c.src.free) == len(c.src.chunks)
}

func (c *Conn) freeMem() {
	if c.src != nil {
		for i := range c.src.chunks {
			if ch := &c.src.chunks[i]; ch.mr != nil {
				_ = c.sw.cache.Put(ch.mr)
				ch.mr = nil
			}
		}
		c.sw.cache.Invalidate(c.src.buf.Addr, len(c.src.mem))
		_ = c.src.buf.Free()
		c.src = nil
	}
	if c.sink != nil {
		if mr := c.sink.chunks[0].mr; mr != nil {
			_ = c.sw.cache.Put(mr)
		}
		c.sw.cache.Invalidate(c.sink.buf.Addr, len(c.sink.mem))
		_ = c.sink.buf.Free()
		c.sink = nil
	}
	if c.ctrlMR != nil {
		_ = c.ctrlMR.Dereg()
		c.ctrlMR = nil
	}
	if c.ctrl != nil {
		_ = c.ctrl.Free()
		c.ctrl = nil
	}
}
