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
	// wrUserRead marks an RDMA Read into a blocked Read's buffer; the low
	// 31 bits are then the transfer's ID.
	wrUserRead = 1 << 31
)

// chunk is one staging region of a transfer: a slice of the conn's source
// or sink area.
type chunk struct {
	idx   int
	off   int        // offset in the area
	addr  rings.Addr // source: the transfer's first byte
	id    uint32     // the transfer
	n     int        // bytes of the transfer (source: all; sink: the RDMA part)
	first int        // source: bytes sent inline in the SRC_AVAIL
	// lmr is the local registration the source's RDMA Write gathers from;
	// rmr the STag of the transfer's own remote registration (source:
	// remote read, RDMA Read rendezvous), mapped with the SRC_AVAIL and
	// invalidated by the RD_DONE (fastreg.go).
	lmr   *verbs.MR
	rmr   *verbs.FastMR
	write bool // source: RDMA Write rendezvous
	ext   bool // source: an application buffer's slot (no staging memory)
	dst   Msg  // source: the SINK_AVAIL it writes into
	state chunkState
	busy  bool
}

// chunkState is where a chunk's transfer stands.
type chunkState uint8

const (
	srcWantRdDone chunkState = iota + 1 // SRC_AVAIL sent, the sink reads
	srcWantSink                         // SRC_AVAIL with FlagSinkReq sent
	srcWriting                          // RDMA Write and WR_DONE queued or posted
	sinkBusy                            // an RDMA Read or Write lands in it, or its bytes are not all read
)

// area is a conn's registered staging memory for one direction: chunks of
// chunkSize bytes, registered for local access for the conn's life
// (WSPRegisterMemory, through the registration cache).
type area struct {
	buf    *verbs.Buffer
	mem    []byte
	mr     *verbs.MR
	chunks []chunk
	free   []int
	zfree  []int // source: free slots for application buffers
}

// rseg is one item of the receive stream, in order.
type rseg struct {
	n      int    // bytes
	off    int    // bytes read so far
	data   []byte // RDMA: the bytes where they landed, once ready
	ready  bool   // inline bytes are always ready
	credit bool   // the last item of its message: reading it gives the buffer back
	rdma   bool   // the RDMA part of a SRC_AVAIL (else inline bytes in the ring)
	sink   int    // the sink chunk it lands in, or -1 (inline, or a user sink)
	srcID  uint32 // RDMA: the source's transfer ID
	write  bool   // RDMA Write rendezvous (else Read from srcTO/stag)
	srcTO  uint64
	stag   uint32
	// Write rendezvous: sinking says the sink is being registered or is
	// advertised; rmr is the STag its registration is mapped under with
	// the SINK_AVAIL (invalidated by the WR_DONE). user says the sink is
	// the buffer of the Read blocked on the conn (zero copy).
	sinking, user bool
	rmr           *verbs.FastMR
	sunk          bool // it has its sink (a chunk or the Read's buffer)
	doneSent      bool // RDMA Read rendezvous: the RD_DONE went fenced behind the Read
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
	free    []int     // free send slots
	ctlQ    []ctlItem // control messages waiting for a credit
	rq      []rseg
	ibuf    []byte // inline bytes received, a ring
	ihead   int
	ilen    int
	finRecv bool
	finSent bool
	finQ    bool // FIN queued
	err     error
	closed  bool
	closing bool // Close has begun: reads and writes fail, FIN goes when the last Write returned
	// abort ends a closed conn's drain now: its host is closing.
	abort   bool
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
	sink                 *area  // the peer's large sends
	txID, rxID           uint32 // the last transfer ID sent / received in a SRC_AVAIL
	myCaps, peerCaps     uint8  // what each side offered as a sink
	// usink is the registered buffer of a Read blocked on the conn (nil:
	// none); peerWait the length of the peer's (its SINK_WAIT), until
	// this side sends it stream bytes.
	usink    *userSink
	peerWait int
	// dataSent and dataRecv count data messages (DATA, SRC_AVAIL) each
	// way, mod 2^32: a SINK_WAIT names the count it saw.
	dataSent, dataRecv uint32
	// The per-transfer choices, for PathInfo.
	nInline, nRead, nWrite, zcSends, zcRecvs, nUrgent uint64
	// Urgent data received: the last byte (oobValid until ReadOOB), the
	// mark (stream bytes before it), the marks of the urgent messages
	// whose credit is held; readBytes and recvBytes count the stream bytes
	// read and received.
	oob                  byte
	oobValid, markSet    bool
	mark                 uint64
	urgHeld              []uint64
	readBytes, recvBytes uint64
	zcBusy               int // application-buffer transfers not done
	reposts              []rings.RecvWR
	readsOut             int
	flushed              bool // a flushed completion was seen
	flushSeen            bool // failFlushed runs
	bareSeen             bool // the peer's one CREDIT without credits was seen
	// deregs counts per-transfer registrations and deregistrations still
	// running on their goroutines; freeMem waits for them.
	deregs sync.WaitGroup
	// zcDeregs counts the deregistrations of application buffers' remote
	// registrations still running.
	zcDeregs sync.WaitGroup
	gen      uint64 // the conn's generation, in place in its WRIDs
}

// PathInfo says which path a connection took and why.
type PathInfo struct {
	Path Path
	// Reason is why the connection fell back to TCP (nil on the RDMA
	// path).
	Reason error
	// Send and Recv are the transfer modes of large sends each way
	// negotiated at connection time (the default of each transfer).
	Send, Recv Transfer
	// The choices made per transfer on the RDMA path, sending: DATA
	// messages (small sends, inline), RDMA Read and RDMA Write rendezvous,
	// and of those the ones that went from a registered application
	// buffer (zero copy); receiving: transfers written into the buffer
	// of a blocked Read (zero copy).
	InlineSends, ReadRendezvous, WriteRendezvous, ZeroCopySends, ZeroCopyRecvs uint64
	// UrgentSends counts urgent bytes sent (WriteOOB).
	UrgentSends uint64
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
		return fmt.Sprintf("rdma (send %v, receive %v; sent %d inline, %d by RDMA Read, %d by RDMA Write, %d zero copy; received %d zero copy)",
			i.Send, i.Recv, i.InlineSends, i.ReadRendezvous, i.WriteRendezvous, i.ZeroCopySends, i.ZeroCopyRecvs)
	}
	return fmt.Sprintf("tcp fallback: %v", i.Reason)
}

// PathInfo says which path the connection is on, and how its transfers
// went so far.
func (c *Conn) PathInfo() PathInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := c.info
	i.InlineSends, i.ReadRendezvous, i.WriteRendezvous, i.ZeroCopySends, i.ZeroCopyRecvs = c.nInline, c.nRead, c.nWrite, c.zcSends, c.zcRecvs
	i.UrgentSends = c.nUrgent
	return i
}

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
	c.myCaps, c.peerCaps = mine.Caps, peer.Caps
	c.info = PathInfo{Path: PathRDMA, Send: c.txMode, Recv: c.rxMode}
}

// prepareSink allocates and registers the area the peer's large sends
// land in; it returns the caps this side can offer (none without memory).
func (c *Conn) prepareSink() uint8 {
	caps := c.sw.sinkCaps(c.cfg)
	if caps == 0 {
		return 0
	}
	// Local access only: an RDMA Read places into it, and RDMA Write
	// rendezvous registers one chunk for remote write per transfer.
	a, err := c.newArea(verbs.AccessLocalWrite)
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
	// Registered for the connection's life (WSPRegisterMemory).
	mr, err := c.sw.cache.Get(c.sw.pd, buf.Addr, n, access)
	if err != nil {
		_ = buf.Free()
		return nil, err
	}
	a.mr = mr
	return a, nil
}

// Waiting, deadlines, close.

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
	if c.closed || c.closing {
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
// FIN goes after them. Close returns at once, as TCP's close() without
// SO_LINGER (and Windows Sockets Direct's graceful close) does: Read and
// Write fail with net.ErrClosed from here on, and the conn drains in the
// background, up to Config.Linger, until every send completed and the
// peer pulled every RDMA Read transfer; then it disconnects the QP and
// frees the memory (Stats.Lingering counts the conns doing so).
func (c *Conn) Close() error {
	c.mu.Lock()
	if c.closed || c.closing {
		c.mu.Unlock()
		return c.opErr("close", net.ErrClosed)
	}
	// A Write blocked in another goroutine gives up (net.ErrClosed), so
	// the FIN can go behind what was written; a blocked Read returns
	// net.ErrClosed.
	c.closing = true
	c.cond.Broadcast()
	for c.writing {
		c.cond.Wait()
	}
	c.finQ = true
	c.flushLocked()
	if c.err != nil || c.drainedLocked() {
		c.mu.Unlock()
		c.teardown()
		return nil
	}
	c.mu.Unlock()
	if !c.sw.lingerStart() {
		c.teardown() // the host is closing: no drain
		return nil
	}
	go func() {
		defer c.sw.lingerDone()
		c.linger()
		c.teardown()
	}()
	return nil
}

// linger waits, up to Config.Linger, until the conn drained or failed,
// and counts a drain that ran out of time.
func (c *Conn) linger() {
	c.mu.Lock()
	defer c.mu.Unlock()
	expired := false
	stop := c.sw.h.AfterFunc(c.cfg.Linger, func() {
		c.mu.Lock()
		expired = true
		c.cond.Broadcast()
		c.mu.Unlock()
	})
	for c.err == nil && !expired && !c.abort && !c.drainedLocked() {
		c.cond.Wait()
	}
	stop()
	if c.err == nil && !c.drainedLocked() {
		c.sw.stats.lingerExpired.Add(1)
	}
}

// teardown ends a closing conn: the QP disconnected, the memory freed.
func (c *Conn) teardown() {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.sw.stats.closed.Add(1)
	_ = c.qp.Close()
	c.sw.forget(c)
	c.freeMem()
}

// drainedLocked: FIN sent, every send completed, no transfer of ours
// outstanding.
func (c *Conn) drainedLocked() bool {
	if !c.finSent || len(c.free) != c.nSend {
		return false
	}
	return c.src == nil || len(c.src.free)+len(c.src.zfree) == len(c.src.chunks)
}

func (c *Conn) freeMem() {
	c.mu.Lock()
	defer c.mu.Unlock()
	// Per-transfer registrations: those still registered go now, and
	// the memory waits for every deregistration.
	for i := range c.rq {
		c.dropFast(c.rq[i].rmr, nil)
		c.rq[i].rmr = nil
	}
	for _, a := range []*area{c.src, c.sink} {
		if a == nil {
			continue
		}
		for i := range a.chunks {
			c.dropFast(a.chunks[i].rmr, nil)
			a.chunks[i].rmr = nil
		}
	}
	c.mu.Unlock()
	c.deregs.Wait()
	c.mu.Lock()
	for _, a := range []*area{c.src, c.sink} {
		if a == nil {
			continue
		}
		_ = c.sw.cache.Put(a.mr)
		c.sw.cache.Invalidate(a.buf.Addr, len(a.mem))
		_ = a.buf.Free()
	}
	c.src, c.sink = nil, nil
	if c.ctrlMR != nil {
		_ = c.ctrlMR.Dereg()
		c.ctrlMR = nil
	}
	if c.ctrl != nil {
		_ = c.ctrl.Free()
		c.ctrl = nil
	}
}

// countCopy counts n stream bytes the switch copied on the CPU, in its
// stats and in the host's (tcpstack.DriverStats.HostCopyBytes).
func (c *Conn) countCopy(n int) {
	if n > 0 {
		c.sw.stats.copyBytes.Add(uint64(n))
		c.sw.v.CountCopy(n)
	}
}
