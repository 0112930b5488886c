package lwio

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// ClientConfig shapes a client. Zero fields take the defaults.
type ClientConfig struct {
	Name     string // ClientName ("EMUNIC-CLIENT")
	PipePort uint16 // the server's pipe port (DefaultPipePort)
	// Credits is the credits asked for at authentication (16).
	Credits int
	// MaxOutstanding bounds the requests in flight whatever the server
	// grants (64, at most 254).
	MaxOutstanding int
	// Polling completes requests by status blocks the server RDMA-writes
	// (the client polls them, and asks for an interrupt before it sleeps)
	// instead of status responses.
	Polling bool
	// SpinPolls is how many empty polls the completion loop makes before
	// it sleeps (polling mode: before it sends an INTERRUPT) (64).
	SpinPolls int
	// MaxRdmaWindow is the most bytes the client accepts in one read (1 MiB).
	MaxRdmaWindow int
	// PageSize is the client's page size (4096).
	PageSize int
	// RegisterMin is the smallest transfer from host memory not from
	// Alloc that is registered for the transfer (through the client's
	// registration cache) rather than copied through a staging buffer
	// (1024: the source copies reads under one kilobyte, since a copy of
	// a few bytes costs less than a registration).
	RegisterMin int
	// CRC asks MPA for a CRC-32C on every FPDU (ServerConfig.CRC).
	CRC bool
	// Timeout bounds discovery and authentication (10 s).
	Timeout time.Duration
	// Seed, when not zero, seeds the client's key in NEGOTIATE: for
	// repeatable runs only (a deterministic demo).
	Seed uint64
	// Secret is the secret shared with the server (ServerConfig.Secret):
	// proved at logon, and the key of the AUTH_PARAMS signatures.
	Secret []byte
	// Connections is the provider instances the client offers, so the
	// most RDMA connections it makes (1).
	Connections int
}

func (c ClientConfig) withDefaults() ClientConfig {
	if c.Name == "" {
		c.Name = "EMUNIC-CLIENT"
	}
	if c.PipePort == 0 {
		c.PipePort = DefaultPipePort
	}
	if c.Credits <= 0 {
		c.Credits = 16
	}
	if c.MaxOutstanding <= 0 {
		c.MaxOutstanding = 64
	}
	c.MaxOutstanding = min(c.MaxOutstanding, MaxCredits-1)
	if c.SpinPolls <= 0 {
		c.SpinPolls = 64
	}
	if c.MaxRdmaWindow <= 0 {
		c.MaxRdmaWindow = 1 << 20
	}
	if c.PageSize <= 0 {
		c.PageSize = 4096
	}
	if c.RegisterMin <= 0 {
		c.RegisterMin = 1024
	}
	if c.Timeout <= 0 {
		c.Timeout = 10 * time.Second
	}
	c.Connections = min(max(c.Connections, 1), MaxInstances)
	return c
}

// StatusError is a request the server completed with a status other than
// success.
type StatusError struct {
	Op     Opcode
	What   string // names a request that has no opcode (OPEN on the pipe); else ""
	Status uint32
}

func (e *StatusError) Error() string {
	what := e.What
	if what == "" {
		what = e.Op.String()
	}
	return fmt.Sprintf("lwio: %s: status %#08x (%s)", what, e.Status, statusName(e.Status))
}

func statusName(s uint32) string {
	switch s {
	case StatusInvalidHandle:
		return "invalid handle"
	case StatusInvalidParameter:
		return "invalid parameter"
	case StatusInvalidDeviceReq:
		return "invalid device request"
	case StatusEndOfFile:
		return "end of file"
	case StatusAccessDenied:
		return "access denied"
	case StatusObjectNameNotFound:
		return "no such file"
	case StatusInsufficientRes:
		return "insufficient resources"
	case StatusCancelled:
		return "cancelled"
	case StatusFileClosed:
		return "file closed"
	case StatusIOError:
		return "I/O error"
	}
	return dirStatusName(s)
}

// Errors of the client.
var (
	ErrClosed     = errors.New("lwio: client closed")
	ErrNoProvider = errors.New("lwio: the server offers no provider this client has")
	ErrTooLarge   = errors.New("lwio: request larger than the negotiated limit")
	ErrVecShape   = errors.New("lwio: vectored request: every page but the last must be PageSize bytes, the last a multiple of the sector size")
)

// ClientStats count a client's work.
type ClientStats struct {
	Requests, Completions  uint64
	BytesRead, BytesWrote  uint64
	ZeroCopy, Bounced      uint64 // transfers straight to or from the caller's memory, or through a staging buffer
	Registered             uint64 // of the zero-copy ones, those registered for the transfer (RegisterMin)
	RegCache               verbs.RegCacheStats
	Cancels                uint64 // CANCELs sent for requests whose context ended
	Interrupts             uint64 // INTERRUPT requests sent (polling mode)
	PollBackoffs           uint64 // timed sleeps between status block scans: no credit for INTERRUPT (polling mode)
	PolledCompletions      uint64 // completions found in status blocks
	ImmediateCompletions   uint64 // reads completed by RDMA Write with Immediate Data
	CreditGrants           uint64 // positive delta credit messages
	CreditRetires          uint64 // credits given back
	Credits                int    // credits now
	MaxOutstandingObserved int    // the most requests in flight at once
}

// Client is one connection to an LWIO server: the pipe (discovery, file
// access) and one authenticated RDMA connection that carries every file's
// I/O.
type Client struct {
	cfg  ClientConfig
	h    *tcpstack.Host
	v    *verbs.Provider
	pd   verbs.PD
	pipe net.Conn // the file-access channel: the logon, OPEN, RELEASE
	pmu  sync.Mutex
	pbuf []byte

	npipe     net.Conn  // the pipe the share's resume key named: NEGOTIATE
	links     []*Client // further connections (links.go); a link's primary is its Client
	primary   *Client
	resent    atomic.Uint64  // pieces sent again on another link (links.go)
	pipeAt    netip.AddrPort // where it goes
	key       uuid.UUID      // the client's key (LOGON, NEGOTIATE)
	skey      uuid.UUID      // the server's key (NEGOTIATE response, AUTH)
	srvName   string
	sessionID int64
	srv       AuthParams
	window    int

	cq *verbs.CQ
	qp *verbs.QP

	slots *verbs.Buffer
	smem  []byte // slots' bytes
	smr   *verbs.MR
	rbuf  *verbs.Buffer
	rmem  []byte // rbuf's bytes
	rmr   *verbs.MR
	rwrs  []rings.RecvWR // postRecv's work requests

	mu          sync.Mutex
	cond        *sync.Cond
	credits     int
	outstanding int
	waiting     int
	posted      int
	rnext       int
	retireNext  int  // the next returned credit's value (-N … -1); 0: none to return
	ackGrant    bool // a grant waits for its CREDIT
	freeSlots   []int
	byCookie    map[uint64]*Call
	polling     []*Call
	intrOut     bool
	asleep      bool // the completion loop waits for a completion (PollWait)
	quietRecv   bool // connected: receive buffers are posted without a doorbell
	callerPolls int  // callers polling their own status blocks (spin)
	cookie      uint64
	seq         uint16 // the next request's Sequence (AUTH's is BaseSequence, 0)
	bounceFree  []*bounce
	bounceAll   []*bounce
	listFree    []*bounce // region lists of long vectored reads
	cancelQ     []*Call   // requests whose context ended, waiting for a credit to send CANCEL
	watches     map[<-chan struct{}]*ctxWatch
	wr          rings.SendWR                // postLocked's work request
	hdr         Header                      // postLocked's header (on the stack it would escape to fill)
	sgeScratch  [rings.MaxSendSGE]rings.SGE // fill's gather list (sgl)
	cache       *verbs.RegCache

	regMu    sync.RWMutex
	regions  []*Memory // from Alloc
	err      error
	maxSeen  int
	done     chan struct{}
	loopDone chan struct{}

	st clientCounters
}

type clientCounters struct {
	requests, completions, bytesRead, bytesWrote, zeroCopy, bounced atomic.Uint64
	interrupts, polled, imm, grants, retires, pollBackoffs          atomic.Uint64
	registered, cancels                                             atomic.Uint64
}

// Memory is client memory registered with the NIC (Client.Alloc): reads
// into it and writes from it move no byte through the host CPU.
type Memory struct {
	buf *verbs.Buffer
	mem []byte
	mr  *verbs.MR
}

type bounce struct {
	buf *verbs.Buffer
	mr  *verbs.MR
}

// Request slot layout: the header, the payload that follows it in the
// send (regions, AUTH_PARAMS, FID_PARAMS), the status block, and the area
// the server RDMA-writes its AUTH_PARAMS into.
const (
	slotPayload  = HeaderSize
	slotRegions  = 64 // a vectored read's regions that fit its slot; more go in a region list
	slotIOSB     = HeaderSize + slotRegions*RegionSize
	slotAuthArea = slotIOSB + IOSBSize
	slotSize     = (slotAuthArea + ctlAreaSize + 63) &^ 63
	recvSlots    = MaxCredits + 1
)

// Call is one request in flight, from File's Start methods; Done receives
// it when it completes (N and Err are set).
type Call struct {
	Op   Opcode
	Off  int64
	N    int   // bytes transferred
	Err  error // nil, io.EOF (a read at or past the end), *StatusError or a connection error
	Done chan *Call

	c          *Client
	slot       int
	cookie     uint64
	fid        uint16
	length     int
	user       []byte   // a read's destination when bounced
	pages      [][]byte // a vectored read's bounced pages
	bounce     *bounce
	regionList *bounce     // a long vectored read's regions
	regs       []*verbs.MR // cached registrations held for the transfer
	ctx        context.Context
	watch      *ctxWatch // the context's watch while in flight
	watchIdx   int
	cancelOut  bool        // a CANCEL naming this request is in flight: its slot waits for the answer
	slotDone   bool        // answered while cancelOut: the CANCEL's answer frees the slot
	target     *Call       // a CANCEL's request
	finished   atomic.Bool // completed: Done has it (a caller polling stops: spin)
	answered   bool
	status     uint32
	info       uint32
	internal   bool // CREDIT or INTERRUPT: no caller waits
	// watched: a caller watches the request's status block (spin), and
	// is counted in callerPolls from the post (a synchronous request,
	// startTo with syncCtx) or from when it started watching.
	watched bool
	retire  bool
}

// deadlinePast is a deadline already gone: it interrupts a blocked pipe
// read or write when a context ends.
var deadlinePast = time.Unix(1, 0)

// Dial logs on to the server at server (its file-access channel on the
// pipe port, with the secret), opens the pipe the share's resume key
// names, negotiates, connects an RDMA connection to the provider instance
// the server offers, and authenticates it (discover.go).
func Dial(ctx context.Context, h *tcpstack.Host, server netip.Addr, cfg ClientConfig) (*Client, error) {
	cfg = cfg.withDefaults()
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	c, err := newClient(h, nil, 0, cfg)
	if err != nil {
		return nil, err
	}
	if c.pipe, err = h.Dial(ctx, netip.AddrPortFrom(server, cfg.PipePort)); err != nil {
		return nil, fmt.Errorf("lwio: pipe: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { c.pipe.SetDeadline(deadlinePast) })
	dsts, err := c.discover(ctx)
	stop()
	c.pipe.SetDeadline(time.Time{})
	if err == nil {
		err = c.connect(ctx, dsts[0])
	}
	if err == nil {
		// More instances offered: a link to each (links.go).
		if err = c.dialLinks(ctx, dsts[1:]); err != nil {
			c.Close()
			return nil, err
		}
	}
	if err != nil {
		c.pipe.Close()
		if c.npipe != nil {
			c.npipe.Close()
		}
		return nil, err
	}
	return c, nil
}

// ServerName is the server's name from the negotiate response.
func (c *Client) ServerName() string { return c.srvName }

// Credits is the credits the client holds now.
func (c *Client) Credits() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.credits
}

// connect makes the RDMA connection and authenticates it.
func (c *Client) connect(ctx context.Context, dst netip.AddrPort) error {
	var err error
	if c.primary != nil {
		c.cache = c.primary.cache // a link registers in its primary's cache (the same PD)
	} else if c.cache, err = c.v.NewRegCache(verbs.RegCacheConfig{}); err != nil {
		return fmt.Errorf("lwio: %w", err)
	}
	if c.cq, err = c.v.CreateCQ(4 * (c.cfg.MaxOutstanding + recvSlots)); err != nil {
		if c.primary == nil {
			_ = c.cache.Close()
		}
		return fmt.Errorf("lwio: %w", err)
	}
	nslots := c.cfg.MaxOutstanding + 1
	if c.slots, err = c.v.AllocBuffer(nslots * slotSize); err == nil {
		c.smr, err = c.v.RegMR(c.pd, c.slots, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	}
	if err == nil {
		if c.rbuf, err = c.v.AllocBuffer(recvSlots * StatusResponseSize); err == nil {
			c.rmr, err = c.v.RegMR(c.pd, c.rbuf, verbs.AccessLocalWrite)
		}
	}
	if err != nil {
		c.freeMem()
		return fmt.Errorf("lwio: %w", err)
	}
	c.smem, c.rmem, c.rwrs = c.slots.Bytes(), c.rbuf.Bytes(), make([]rings.RecvWR, recvSlots)
	for i := nslots - 1; i >= 0; i-- {
		c.freeSlots = append(c.freeSlots, i)
	}
	attr := verbs.QPAttr{PD: c.pd, SendCQ: c.cq, RecvCQ: c.cq, SQDepth: 2 * nslots, RQDepth: recvSlots, NoCRC: !c.cfg.CRC,
		Setup: func(qp *verbs.QP) error {
			c.qp = qp
			return c.postRecv(2)
		}}
	if c.qp, err = c.v.DialRDMA(ctx, dst, attr); err != nil {
		c.freeMem()
		return fmt.Errorf("lwio: connect %v: %w", dst, err)
	}
	c.qp.SetAsyncDoorbell(true)
	c.quietRecv = true
	go c.watchDoorbell()
	go c.run()
	if err := c.authenticate(ctx); err != nil {
		c.Close()
		return err
	}
	return nil
}

// postRecv posts n more 16-byte receive buffers (status responses).
func (c *Client) postRecv(n int) error {
	wrs := c.rwrs
	for i := range n {
		s := (c.rnext + i) % recvSlots
		wrs[i] = rings.RecvWR{WRID: uint64(s), NumSGE: 1}
		wrs[i].SGL[0] = c.rmr.SGE(s*StatusResponseSize, StatusResponseSize)
	}
	// Once connected, a receive buffer goes back without a doorbell: the
	// NIC finds it in the queue when a message arrives, and the server
	// sends into it only after a request of ours, whose doorbell follows.
	// (Two calls, not a function value: through one, wrs would escape to
	// the heap on every post.)
	var err error
	if c.quietRecv {
		_, err = c.qp.PostRecvListQuiet(wrs[:n])
	} else {
		_, err = c.qp.PostRecvList(wrs[:n])
	}
	if err != nil {
		return err
	}
	c.posted += n
	c.rnext = (c.rnext + n) % recvSlots
	return nil
}

// testHookAuth, when set (tests only), may alter the encoded AUTH_PARAMS.
var testHookAuth func([]byte)

// authenticate sends AUTH and takes the server's parameters.
func (c *Client) authenticate(ctx context.Context) error {
	mine := AuthParams{RevID: RevID, Endian: EndianPtr64, PageSize: uint16(c.cfg.PageSize),
		MaxRdmaWindowSize: uint32(c.cfg.MaxRdmaWindow), MaxSendBufferSize: HeaderSize + clientMaxWrite,
		MaxRecvBufferSize: StatusResponseSize, HeaderSize: HeaderSize, Credits: uint16(c.cfg.Credits),
		RdmaReadSupported: 0}
	putGUID(mine.Key[:], c.skey)
	c.mu.Lock()
	c.credits = 1 // AUTH is the one request before the server grants any
	c.mu.Unlock()
	call, err := c.start(ctx, OpAuth, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		p := mine.AppendSigned(slot[slotPayload:slotPayload], c.cfg.Secret)
		if testHookAuth != nil {
			testHookAuth(p)
		}
		h.DataVa = c.smr.TO(cl.slot*slotSize + slotAuthArea)
		h.DataMh = c.smr.RKey
		h.Length = uint32(HeaderSize + len(p))
		return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize+len(p))), nil
	})
	if err != nil {
		return err
	}
	if err := c.wait(ctx, call); err != nil {
		return fmt.Errorf("lwio: authentication: %w", err)
	}
	area := c.smem[call.slot*slotSize+slotAuthArea : call.slot*slotSize+slotAuthArea+ctlAreaSize]
	var srv AuthParams
	if int(call.info) < 8 || int(call.info)-8 > ctlAreaSize {
		return fmt.Errorf("lwio: authentication: server's parameters of %d bytes", int(call.info)-8)
	}
	if err := srv.DecodeSigned(area[:call.info-8], c.cfg.Secret); err != nil {
		return fmt.Errorf("lwio: authentication: server's parameters: %w", err)
	}
	if err := srv.checkServer(&mine); err != nil {
		return fmt.Errorf("lwio: authentication: %w", err)
	}
	c.freeSlot(call)
	c.mu.Lock()
	// A write carries at most what the server takes and what we said we
	// would send.
	srv.MaxRecvBufferSize = min(srv.MaxRecvBufferSize, mine.MaxSendBufferSize-HeaderSize)
	c.srv, c.sessionID = srv, srv.SessionID
	c.window = min(int(srv.MaxRdmaWindowSize), c.cfg.MaxRdmaWindow)
	c.credits = int(srv.Credits)
	err = c.postRecv(c.credits + 1 - c.posted) // one beyond the credits: for a delta credit message
	c.cond.Broadcast()
	c.mu.Unlock()
	return err
}

// Failure and close.

func (c *Client) failLocked(err error) {
	if c.err != nil {
		return
	}
	c.err = err
	for k, cl := range c.byCookie {
		delete(c.byCookie, k)
		c.releaseLocked(cl)
		c.unwatchLocked(cl)
		if !cl.internal {
			cl.Err = err
			cl.finished.Store(true)
			cl.Done <- cl
		}
	}
	c.polling = nil
	c.cond.Broadcast()
}

// watchDoorbell fails the client when its QP fails because an
// asynchronous doorbell was refused: no completion would come for the
// work behind it. It returns when the QP fails or is destroyed.
func (c *Client) watchDoorbell() {
	<-c.qp.Failed()
	if err := c.qp.DoorbellErr(); err != nil {
		c.mu.Lock()
		c.failLocked(err)
		c.mu.Unlock()
	}
}

// Err is why the client stopped working (nil while it works).
func (c *Client) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// Close disconnects and releases the client's memory. Requests in flight
// fail with ErrClosed.
func (c *Client) Close() error {
	c.mu.Lock()
	if c.err == ErrClosed {
		c.mu.Unlock()
		<-c.loopDone
		return nil
	}
	c.failLocked(ErrClosed)
	c.err = ErrClosed
	c.mu.Unlock()
	if c.primary == nil { // a link shares the primary's pipes
		for _, p := range []net.Conn{c.pipe, c.npipe} {
			if p != nil {
				p.Close()
			}
		}
	}
	c.closeLinks()
	if c.qp != nil {
		_ = c.qp.Close()
	}
	select {
	case <-c.done:
	default:
		close(c.done)
	}
	<-c.loopDone
	c.freeMem()
	return nil
}

func (c *Client) freeMem() {
	for _, b := range c.bounceAll {
		_ = b.mr.Dereg()
		_ = b.buf.Free()
	}
	c.bounceAll, c.bounceFree, c.listFree = nil, nil, nil
	if c.cache != nil && c.primary == nil {
		_ = c.cache.Close()
	}
	for _, r := range c.regions {
		_ = r.mr.Dereg()
		_ = r.buf.Free()
	}
	c.regions = nil
	if c.smr != nil {
		_ = c.smr.Dereg()
	}
	if c.slots != nil {
		_ = c.slots.Free()
	}
	if c.rmr != nil {
		_ = c.rmr.Dereg()
	}
	if c.rbuf != nil {
		_ = c.rbuf.Free()
	}
	if c.cq != nil {
		_ = c.cq.Destroy()
	}
}

// Stats returns the client's counters.
func (c *Client) Stats() ClientStats {
	c.mu.Lock()
	credits, maxSeen := c.credits, c.maxSeen
	c.mu.Unlock()
	var cacheStats verbs.RegCacheStats
	if c.cache != nil {
		cacheStats = c.cache.Stats()
	}
	s := &c.st
	return ClientStats{Requests: s.requests.Load(), Completions: s.completions.Load(), BytesRead: s.bytesRead.Load(),
		BytesWrote: s.bytesWrote.Load(), ZeroCopy: s.zeroCopy.Load(), Bounced: s.bounced.Load(),
		Registered: s.registered.Load(), RegCache: cacheStats, Cancels: s.cancels.Load(),
		Interrupts: s.interrupts.Load(), PollBackoffs: s.pollBackoffs.Load(), PolledCompletions: s.polled.Load(), ImmediateCompletions: s.imm.Load(),
		CreditGrants: s.grants.Load(), CreditRetires: s.retires.Load(), Credits: credits, MaxOutstandingObserved: maxSeen}
}
