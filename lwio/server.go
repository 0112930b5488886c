package lwio

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// Defaults of a server (and what a client assumes of one).
const (
	DefaultPipePort = 4445
	DefaultRDMAPort = 4446
	// ProviderName is the provider this project's NIC offers in the
	// negotiate lists.
	ProviderName = "emunic-iwarp"
	// MaxVecRegions is the most regions NumPages (a u16) can name; a
	// vectored read may carry as many as the server's MaxRecvBufferSize
	// holds after the header (÷ RegionSize: 4,096 at 64 KiB) up to this.
	MaxVecRegions = 0xFFFF
	// SectorSize is the backend sector the final region of a vectored read
	// must be a multiple of.
	SectorSize = 512
	// StatusPending is what a client puts in a status block before it
	// submits a polling request; the server never writes it
	// (STATUS_PENDING, 0x103).
	StatusPending = 0x00000103
)

// ServerConfig shapes a server. Zero fields take the defaults.
type ServerConfig struct {
	Name     string // SrvName (default "EMUNIC")
	PipePort uint16 // DefaultPipePort
	RDMAPort uint16 // DefaultRDMAPort
	// MaxRdmaWindow is the most bytes one read moves (256 KiB); each
	// outstanding read holds a staging buffer of this size.
	MaxRdmaWindow int
	// MaxRecvBuffer is the most write data one message carries (64 KiB);
	// the server's receive buffers are this plus the header.
	MaxRecvBuffer int
	// InitialCredits caps the credits granted at authentication (8);
	// MaxCredits caps a connection's credits (32); CreditPool caps the sum
	// over every connection (256).
	InitialCredits, MaxCredits, CreditPool int
	// Workers is the file I/O goroutines of a connection (4).
	Workers int
	// AuthTimeout drops a connection that has not authenticated (5 s).
	AuthTimeout time.Duration
	// ImmediateReads completes a successful interrupt-mode read whose
	// ImmCookie is not 0 with an RDMA Write with Immediate Data instead of
	// an RDMA Write and a status response.
	ImmediateReads bool
	// CreditPolicy, if set, is the credits the server wants a connection
	// to have given its current credits and the client's hint (its
	// pending requests). The default doubles a saturated connection's
	// credits and halves one whose hint stayed under a quarter of them.
	CreditPolicy func(credits, hint int) int
	// PageSize is the server's page size in AUTH_PARAMS (4096).
	PageSize int
	// Instances is the provider instances the server offers: RDMA
	// listeners on RDMAPort, RDMAPort+1, … (1, at most MaxInstances). A
	// client with several instances gets up to as many connections.
	Instances int
	// Secret is what every client must prove it holds at logon, and what
	// signs AUTH_PARAMS (docs/lwio.md, "Access control"); nil: none, and
	// a client with one is refused.
	Secret []byte
	// Allow, when not empty, is the client addresses served: a pipe or an
	// RDMA connection from any other is closed at once (counted).
	Allow []netip.Prefix
	// MaxFiles caps the files one client holds: resume keys on its
	// file-access channel and Fids on each connection (4096).
	MaxFiles int
	// Logger, when set, logs each client: its logon (ClientName, key,
	// address), refusals, its connections and its end.
	Logger *slog.Logger
	// CRC asks MPA for a CRC-32C on every FPDU (used both ways when either
	// end asks). Off by default, as for sockets direct: TCP's checksum
	// covers every segment, as it does for a file protocol on TCP, and
	// the devices would compute the CRC over every byte twice.
	CRC bool
	// Seed, when not zero, seeds the server's random choices (session
	// keys, resume keys, session IDs) and stands for the process ID and
	// session start time in resume keys: for repeatable runs only (a
	// deterministic demo), never for a server others can reach.
	Seed uint64
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.Name == "" {
		c.Name = "EMUNIC"
	}
	if c.PipePort == 0 {
		c.PipePort = DefaultPipePort
	}
	if c.RDMAPort == 0 {
		c.RDMAPort = DefaultRDMAPort
	}
	if c.MaxRdmaWindow <= 0 {
		c.MaxRdmaWindow = 256 << 10
	}
	if c.MaxRecvBuffer <= 0 {
		c.MaxRecvBuffer = 64 << 10
	}
	if c.MaxCredits <= 0 {
		c.MaxCredits = 32
	}
	c.MaxCredits = min(c.MaxCredits, MaxCredits-1)
	if c.InitialCredits <= 0 {
		c.InitialCredits = 8
	}
	c.InitialCredits = min(c.InitialCredits, c.MaxCredits)
	if c.CreditPool <= 0 {
		c.CreditPool = 256
	}
	if c.Workers <= 0 {
		c.Workers = 4
	}
	if c.AuthTimeout <= 0 {
		c.AuthTimeout = 5 * time.Second
	}
	if c.CreditPolicy == nil {
		c.CreditPolicy = defaultCreditPolicy
	}
	if c.PageSize <= 0 {
		c.PageSize = 4096
	}
	c.Instances = min(max(c.Instances, 1), MaxInstances)
	if c.MaxFiles <= 0 || c.MaxFiles > maxFids {
		c.MaxFiles = maxFids
	}
	return c
}

// defaultCreditPolicy doubles the credits of a client whose pending
// requests reach them, and halves those of one that uses under a quarter
// (never below 2).
func defaultCreditPolicy(credits, hint int) int {
	switch {
	case hint >= credits:
		return 2 * credits
	case credits > 4 && 4*hint < credits:
		return max(2, credits/2)
	}
	return credits
}

// ServerStats count a server's work and every refusal.
type ServerStats struct {
	Pipes, Negotiates, Opens    uint64
	Logons                      uint64 // file-access channels that proved the secret
	LogonFailures               uint64 // refused at logon: no secret, another one, a bad proof
	KeyRefusals                 uint64 // a key used twice, or a NEGOTIATE or AUTH whose key is not good
	AddrRefused                 uint64 // pipes and connections from an address Allow does not cover
	ReadOnlyRefusals            uint64 // creates, truncates and writes a read-only export refused
	FileLimit                   uint64 // OPENs and REGISTERs beyond MaxFiles
	Conns, Authenticated        uint64
	AuthFailures, AuthTimeouts  uint64
	Registers, Reads, Writes    uint64
	VecReads, VecWrites         uint64
	Closes, Cancels, Cancelled  uint64
	Abandoned                   uint64 // reads cancelled while a worker held them: no byte placed
	Interrupts                  uint64
	CreditGrants, CreditRetires uint64
	BytesRead, BytesWritten     uint64
	CreditViolations            uint64 // requests beyond the connection's credits
	BadRequests                 uint64 // malformed or out-of-range requests (answered with an error status)
	ProtocolErrors              uint64 // connections closed for a protocol violation
	SequenceErrors              uint64 // of which: a request's Sequence out of order
	TidReuses                   uint64 // of which: a Tid reused while its request was outstanding
	PipeErrors                  uint64 // pipes closed for a malformed message
	PipeTimeouts                uint64 // pipes closed for not negotiating within AuthTimeout
	ConnErrors                  uint64 // connections lost (peer gone, Terminate, overflow)
	ConnsClosed                 uint64 // connections the client closed in order
	DirectIO                    uint64 // transfers done with O_DIRECT
	ImmediateCompletions        uint64 // reads completed by RDMA Write with Immediate Data
	PollingCompletions          uint64 // status blocks RDMA-written
	InterruptCompletions        uint64 // status responses sent
	FilesOpen                   int64
	ConnsOpen                   int64
	CreditsInUse                int64
}

// Server serves an Export to LWIO clients on one host.
type Server struct {
	cfg  ServerConfig
	h    *tcpstack.Host
	v    *verbs.Provider
	pd   verbs.PD
	cq   *verbs.CQ
	exp  *Export
	pipe net.Listener
	rls  []*verbs.RDMAListener // one per provider instance
	pid  uint64
	rnd  io.Reader // crypto/rand's, or seeded (ServerConfig.Seed)

	mu       sync.Mutex
	sessions map[uuid.UUID]*session // negotiated pipes, by the server's key
	logons   map[uuid.UUID]*logon   // file-access channels, by the client's key
	usedKeys keyHistory             // every client key the server has taken
	conns    map[uint32]*sconn
	pipes    map[net.Conn]struct{}
	pool     int // credits granted over every connection
	closed   bool

	st   serverCounters
	dir  dirCounters
	done chan struct{}
	wg   sync.WaitGroup
}

type serverCounters struct {
	pipes, negotiates, opens, conns, authed, authFail, authTimeout  atomic.Uint64
	registers, reads, writes, vecReads, vecWrites, closes, cancels  atomic.Uint64
	cancelled, interrupts, grants, retires, bytesRead, bytesWritten atomic.Uint64
	creditViol, badReq, protoErr, pipeErr, connErr, direct, imm     atomic.Uint64
	polled, intrDone, pipeTimeouts, connClosed, abandoned           atomic.Uint64
	seqErr, tidReuse, logons, logonFail, keyRefused, addrRefused    atomic.Uint64
	readOnly, fileLimit                                             atomic.Uint64
	filesOpen, connsOpen                                            atomic.Int64
}

// NewServer starts serving exp on host h: the pipe on cfg.PipePort (host
// stack TCP) and RDMA connections on cfg.RDMAPort.
func NewServer(h *tcpstack.Host, exp *Export, cfg ServerConfig) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := putName(make([]byte, 2*MaxHostName), cfg.Name); err != nil {
		return nil, err
	}
	v, err := verbs.Open(h)
	if err != nil {
		return nil, fmt.Errorf("lwio: server: %w", err)
	}
	s := &Server{cfg: cfg, h: h, v: v, pd: v.AllocPD(), exp: exp, pid: uint64(os.Getpid()), rnd: rand.Reader,
		sessions: map[uuid.UUID]*session{}, logons: map[uuid.UUID]*logon{}, conns: map[uint32]*sconn{}, pipes: map[net.Conn]struct{}{}, done: make(chan struct{})}
	if cfg.Seed != 0 {
		s.pid, s.rnd = cfg.Seed, tcpstack.NewSeededReader(cfg.Seed)
	}
	// Every outstanding request of every connection can have its whole
	// data transfer and completion in the CQ at once.
	if s.cq, err = v.CreateCQ(serverCQEntries); err != nil {
		return nil, fmt.Errorf("lwio: server: %w", err)
	}
	if s.pipe, err = h.Listen(cfg.PipePort); err != nil {
		_ = s.cq.Destroy()
		return nil, fmt.Errorf("lwio: server: pipe: %w", err)
	}
	if int(cfg.RDMAPort)+cfg.Instances-1 > 0xFFFF {
		return nil, fmt.Errorf("lwio: server: %d instances from port %d", cfg.Instances, cfg.RDMAPort)
	}
	for i := range cfg.Instances {
		inst := i
		attr := verbs.QPAttr{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, SQDepth: sqDepthFor(cfg.MaxCredits),
			RQDepth: cfg.MaxCredits + creditSlack, IRD: 16, ORD: 16, NoCRC: !cfg.CRC,
			Setup: func(qp *verbs.QP) error { return s.setupConn(qp, inst) }}
		rl, err := v.ListenRDMA(cfg.RDMAPort+uint16(i), attr)
		if err != nil {
			for _, l := range s.rls {
				_ = l.Close()
			}
			_ = s.pipe.Close()
			_ = s.cq.Destroy()
			return nil, fmt.Errorf("lwio: server: rdma: %w", err)
		}
		s.rls = append(s.rls, rl)
	}
	s.wg.Add(2 + len(s.rls))
	go s.servePipes()
	for _, rl := range s.rls {
		go s.serveRDMA(rl)
	}
	go s.poll()
	return s, nil
}

// serverCQEntries sizes the server's completion queue: every connection's
// posted receives and signaled sends can be in it at once, which bounds
// the connections (MaxConns) by the credits.
const serverCQEntries = 1 << 15

// creditSlack is the receive buffers a connection has posted beyond its
// credits: a request that breaks the credit limit by up to this many is
// answered with StatusInsufficientRes rather than ending the connection
// (beyond it the send finds no buffer, which the RDMA layer terminates).
const creditSlack = 2

// Addr is the server's host address.
func (s *Server) Addr() netip.Addr { return s.h.Addr() }

// Stats returns the server's counters.
func (s *Server) Stats() ServerStats {
	c := &s.st
	s.mu.Lock()
	pool := s.pool
	s.mu.Unlock()
	return ServerStats{Pipes: c.pipes.Load(), Negotiates: c.negotiates.Load(), Opens: c.opens.Load(),
		Logons: c.logons.Load(), LogonFailures: c.logonFail.Load(), KeyRefusals: c.keyRefused.Load(),
		AddrRefused: c.addrRefused.Load(), ReadOnlyRefusals: c.readOnly.Load(), FileLimit: c.fileLimit.Load(),
		Conns: c.conns.Load(), Authenticated: c.authed.Load(), AuthFailures: c.authFail.Load(),
		AuthTimeouts: c.authTimeout.Load(), Registers: c.registers.Load(), Reads: c.reads.Load(),
		Writes: c.writes.Load(), VecReads: c.vecReads.Load(), VecWrites: c.vecWrites.Load(),
		Closes: c.closes.Load(), Cancels: c.cancels.Load(), Cancelled: c.cancelled.Load(), Abandoned: c.abandoned.Load(),
		Interrupts: c.interrupts.Load(), CreditGrants: c.grants.Load(), CreditRetires: c.retires.Load(),
		BytesRead: c.bytesRead.Load(), BytesWritten: c.bytesWritten.Load(),
		CreditViolations: c.creditViol.Load(), BadRequests: c.badReq.Load(),
		ProtocolErrors: c.protoErr.Load(), SequenceErrors: c.seqErr.Load(), TidReuses: c.tidReuse.Load(), PipeErrors: c.pipeErr.Load(), PipeTimeouts: c.pipeTimeouts.Load(), ConnErrors: c.connErr.Load(), ConnsClosed: c.connClosed.Load(),
		DirectIO: c.direct.Load(), ImmediateCompletions: c.imm.Load(), PollingCompletions: c.polled.Load(),
		InterruptCompletions: c.intrDone.Load(), FilesOpen: c.filesOpen.Load(), ConnsOpen: c.connsOpen.Load(),
		CreditsInUse: int64(pool)}
}

// Close stops the server: the listeners close, every connection is torn
// down and every file closed.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	conns := make([]*sconn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	for p := range s.pipes {
		p.Close()
	}
	s.mu.Unlock()
	_ = s.pipe.Close()
	for _, rl := range s.rls {
		_ = rl.Close()
	}
	for _, c := range conns {
		c.fail(errServerClosed)
	}
	for _, c := range conns {
		c.wait()
	}
	close(s.done)
	s.wg.Wait()
	_ = s.cq.Destroy()
	s.mu.Lock()
	for _, l := range s.logons {
		l.release(s)
	}
	s.mu.Unlock()
	return nil
}

var errServerClosed = errors.New("lwio: server closed")

// ---- RDMA connections ------------------------------------------------------

func (s *Server) serveRDMA(rl *verbs.RDMAListener) {
	defer s.wg.Done()
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.done; cancel() }()
	for {
		r, err := rl.GetRequest(ctx)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if err := r.Accept(nil); err != nil {
			s.st.connErr.Add(1)
		}
	}
}

// setupConn runs at CREATE_QP of every accepted connection: it posts the
// receive buffers before the MPA reply goes out.
func (s *Server) setupConn(qp *verbs.QP, inst int) error {
	// An address Allow does not cover gets no buffers: the QP is
	// destroyed before the MPA exchange.
	if a := addrOf(qp.RemoteAddr()); !s.allowed(a.Addr()) {
		s.refuseAddr("an RDMA connection", a)
		return errors.New("lwio: server: address not allowed")
	}
	s.mu.Lock()
	full := (len(s.conns)+1)*2*(s.cfg.MaxCredits+creditSlack+2) > serverCQEntries
	s.mu.Unlock()
	if full {
		s.st.connErr.Add(1)
		return errors.New("lwio: server: connection table full")
	}
	c, err := newSconn(s, qp, inst)
	if err != nil {
		return err
	}
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		c.freeMem()
		return errServerClosed
	}
	s.conns[qp.QPN()] = c
	s.mu.Unlock()
	s.st.conns.Add(1)
	s.st.connsOpen.Add(1)
	return nil
}

// poll takes the completions of every connection and hands each to its
// connection.
func (s *Server) poll() {
	defer s.wg.Done()
	wc := make([]rings.Completion, 64)
	var touched []*sconn
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-s.done; cancel() }()
	for {
		n, err := s.cq.PollSpin(ctx, wc, 32)
		if err != nil {
			return
		}
		touched = touched[:0]
		for i := range n {
			s.mu.Lock()
			c := s.conns[wc[i].QPN]
			s.mu.Unlock()
			if c == nil {
				continue
			}
			c.completion(&wc[i])
			if !slices.Contains(touched, c) {
				touched = append(touched, c)
			}
		}
		// Each connection's answers of the batch go with one doorbell.
		for i, c := range touched {
			c.flush()
			touched[i] = nil
		}
	}
}

func (s *Server) forget(c *sconn) {
	s.mu.Lock()
	if s.conns[c.qp.QPN()] == c {
		delete(s.conns, c.qp.QPN())
		s.pool -= c.credits
	}
	s.mu.Unlock()
	s.st.connsOpen.Add(-1)
}

// session returns the live session with key k.
func (s *Server) session(k uuid.UUID) *session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sessions[k]
}

// takeCredits reserves up to n credits from the pool and returns how many.
func (s *Server) takeCredits(n int) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n = max(0, min(n, s.cfg.CreditPool-s.pool))
	s.pool += n
	return n
}

func (s *Server) giveCredits(n int) {
	s.mu.Lock()
	s.pool -= n
	s.mu.Unlock()
}

// now is a session's start time for its resume keys.
func (s *Server) now() uint64 {
	if s.cfg.Seed != 0 {
		return s.cfg.Seed
	}
	return uint64(time.Now().UnixNano())
}
