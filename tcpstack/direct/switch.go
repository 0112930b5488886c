package direct

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// DefaultSwitchPort is the TCP port a host's sockets-direct switch accepts
// RDMA connections on. The connection request names the listener's own
// port in its hello, so one switch port serves every listener of the host.
const DefaultSwitchPort = 7471

// Config tunes sockets direct. The zero value is usable: every zero field
// takes its default.
type Config struct {
	// NoRDMA makes this side behave as a host without RDMA: Dial and
	// Listen use plain TCP only.
	NoRDMA bool
	// Transfer is the preferred mode of this side's large sends.
	Transfer Transfer
	// NoRDMARead and NoRDMAWrite take back what this side does as a
	// sink: without Read, a peer that prefers RDMA Read writes instead.
	NoRDMARead, NoRDMAWrite bool
	// Threshold is the copy/zero-copy threshold: a Write of at least this
	// many bytes goes by RDMA, shorter ones inline unless a source chunk
	// being filled takes them (default 64 KiB, as SDP's zero-copy
	// threshold).
	Threshold int
	// MaxInline is the most stream bytes one DATA message carries to us
	// (default 8 KiB); the control buffers are this plus the header.
	MaxInline int
	// Pool is the receive buffers credits cover (default 32), Slots the
	// credit-only buffers beyond them (default Pool+1; the peer's pool is
	// at most Slots-1), Reserve the credits data may not take (default 2).
	Pool, Slots, Reserve int
	// ChunkSize is the most bytes one RDMA transfer carries (default 256
	// KiB), Chunks the staging chunks per direction (default 8).
	ChunkSize, Chunks int
	// SwitchPort is the peer's (and, listening, our) switch port
	// (default DefaultSwitchPort).
	SwitchPort uint16
	// NegotiateTimeout bounds the RDMA attempt of Dial before it falls
	// back to TCP (default 5 s).
	NegotiateTimeout time.Duration
	// Linger bounds a closed conn's drain of the data in flight, in the
	// background after Close returned (default 5 s).
	Linger time.Duration
	// CRC asks MPA for a CRC-32C trailer on every FPDU of the
	// connection's RDMA stream (RFC 5044; it is used both ways when
	// either end asks). Off by default: the application asked for a TCP
	// stream, and TCP's checksum over every segment is all the integrity
	// a plain TCP socket gives it, while the devices compute the CRC over
	// every byte twice (framing and placing), a cost the A/B run in
	// docs/benchmarks-history.md measures. A listener's choice is its host
	// switch's, set by the first Listen with RDMA on the host (as the pool
	// geometry is).
	CRC bool
}

func (c Config) withDefaults() Config {
	def := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	def(&c.Threshold, 64<<10)
	def(&c.MaxInline, 8<<10)
	def(&c.Pool, 32)
	def(&c.Reserve, 2)
	def(&c.ChunkSize, 256<<10)
	c.ChunkSize = min(c.ChunkSize, maxTransfer)
	def(&c.Chunks, 8)
	c.Pool = max(2, min(c.Pool, maxPool))
	def(&c.Slots, c.Pool+1)
	c.Slots = max(2, min(c.Slots, maxSlots))
	c.MaxInline = min(c.MaxInline, maxInlineCap)
	if c.SwitchPort == 0 {
		c.SwitchPort = DefaultSwitchPort
	}
	if c.NegotiateTimeout <= 0 {
		c.NegotiateTimeout = 5 * time.Second
	}
	if c.Linger <= 0 {
		c.Linger = 5 * time.Second
	}
	return c
}

func (c *Config) hello(reply bool, port uint16, caps uint8) Hello {
	return Hello{Reply: reply, Caps: caps, Pref: c.Transfer, Port: port, Slots: uint16(c.Slots),
		Pool: uint32(c.Pool), MaxInline: uint32(c.MaxInline), MaxTransfer: uint32(c.ChunkSize)}
}

// Stats count a host's sockets-direct connections and what went wrong.
type Stats struct {
	Dialed, Accepted, Closed uint64 // RDMA-path connections
	Fallbacks                uint64 // connections that took the TCP path (Dial), or listener requests refused
	BadMessages              uint64 // malformed or unexpected control messages (the conn was torn down)
	CreditViolations         uint64 // messages beyond the credits granted
	RemoteAccessErrors       uint64 // RDMA operations on a peer region that was not there (deregistered)
	PeerFailures             uint64 // QPs that failed or lost the connection mid-stream
	NoBuffers                uint64 // ErrNoBuffers: staging memory not allocated or registered
	InlineBytes, RDMABytes   uint64 // stream bytes sent inline / by RDMA
	RDMATransfers            uint64 // SRC_AVAIL transfers sent (chunks)
	// ReadRendezvous and WriteRendezvous split RDMATransfers by how the
	// rest of the send went.
	ReadRendezvous, WriteRendezvous uint64
	// Registrations and Deregistrations count per-transfer remote
	// registrations (WSPRegisterRdmaMemory / WSPDeregisterRdmaMemory).
	Registrations, Deregistrations uint64
	// CopyBytes counts stream bytes the switch copied on the CPU (into
	// and out of control buffers and staging); also in the host's
	// DriverStats.HostCopyBytes.
	CopyBytes uint64
	// StaleHints counts SINK_WAIT hints ignored because data crossed
	// them.
	StaleHints uint64
	// PollSpins counts the poller's polls that found completions while it
	// spun (busy polling), PollSleeps the times it armed the CQ and slept.
	PollSpins, PollSleeps uint64
	// PollSpinTime is the time the poller spent spinning on an empty CQ
	// (yielding between polls): at most the CPU busy polling cost.
	PollSpinTime time.Duration
	// LingerExpired counts closed conns whose drain gave up
	// (Config.Linger) with sends or transfers outstanding: the peer may
	// have lost bytes written before the Close.
	LingerExpired uint64
	// Lingering is the closed conns draining now: Close returned, and
	// their sends or transfers are still outstanding (up to
	// Config.Linger).
	Lingering uint64
}

type counter = atomic.Uint64

type switchStats struct {
	dialed, accepted, closed, fallbacks                       counter
	badMessages, creditViolations, remoteAccess, peerFailures counter
	noBuffers, inlineBytes, rdmaBytes, rdmaTransfers          counter
	readRendezvous, writeRendezvous                           counter
	registrations, deregistrations, copyBytes, staleHints     counter
	pollSpins, pollSleeps, pollSpinNanos                      counter
	lingerExpired, lingering                                  counter
}

// hostSwitch is one host's sockets-direct switch: the verbs objects every
// connection of the host shares (protection domain, one completion queue
// and the goroutine that polls it, the registration cache) and the RDMA
// listener on the switch port that serves every Listener.
type hostSwitch struct {
	h     *tcpstack.Host
	v     *verbs.Provider
	pd    verbs.PD
	cq    *verbs.CQ
	cache *verbs.RegCache
	stats switchStats
	// connGen numbers the switch's conns, for their WRIDs: a completion
	// on its CQ of an earlier conn with the same QP number is told by
	// it. Per switch (per host), not per process, so that a run's WRIDs
	// do not depend on what ran before it in the process.
	connGen atomic.Uint32

	mu        sync.Mutex
	conns     map[uint32]*Conn
	listeners map[uint16]*Listener
	rl        *verbs.RDMAListener
	rlPort    uint16
	acceptCfg Config
	pending   map[uint32]*Conn // accepted QPs waiting for their request
	done      chan struct{}
	stopOnce  sync.Once
	// stopping: the switch is stopping, and lingers waits for the closed
	// conns still draining, which stop ends (Conn.abort).
	stopping bool
	lingers  sync.WaitGroup

	bufMu sync.Mutex
	bufs  []*Buffer // Alloc's live buffers, by address

	// canRead: the provider has RDMA Read (WSPRdmaRead); cacheCB: its
	// registration caches hear of freed memory
	// (WSPMemoryRegistrationCacheCallback), so application buffers'
	// registrations may be kept between transfers.
	canRead, cacheCB bool

	// fast is the STags per-transfer registrations are mapped under.
	fast fastPool
}

// sinkCaps is what this side offers as a sink: RDMA Read if the provider
// has it and the config allows, RDMA Write unless the config says no.
func (sw *hostSwitch) sinkCaps(cfg Config) uint8 {
	caps := uint8(0)
	if !cfg.NoRDMARead && sw.canRead {
		caps |= CapRead
	}
	if !cfg.NoRDMAWrite {
		caps |= CapWrite
	}
	return caps
}

var (
	switchesMu sync.Mutex
	switches   = map[*tcpstack.Host]*hostSwitch{}
)

// cqEntries sizes the shared CQ: every work request of every connection
// can be outstanding at once (a full CQ is an overrun that kills QPs).
const (
	cqEntries = 1 << 16
	sqDepth   = 256
)

// switchFor returns host h's switch, making it the first time.
func switchFor(h *tcpstack.Host) (*hostSwitch, error) {
	switchesMu.Lock()
	defer switchesMu.Unlock()
	if sw := switches[h]; sw != nil {
		return sw, nil
	}
	v, err := verbs.Open(h)
	if err != nil {
		return nil, err
	}
	cq, err := v.CreateCQ(cqEntries)
	if err != nil {
		return nil, err
	}
	cache, err := v.NewRegCache(verbs.RegCacheConfig{MaxUnused: 256})
	if err != nil {
		_ = cq.Destroy()
		return nil, err
	}
	sw := &hostSwitch{h: h, v: v, pd: v.AllocPD(), cq: cq, cache: cache, conns: map[uint32]*Conn{},
		listeners: map[uint16]*Listener{}, pending: map[uint32]*Conn{}, done: make(chan struct{})}
	// The optional extensions, by query (WSPIoctl's
	// SIO_GET_EXTENSION_FUNCTION_POINTER): a provider without them says
	// WSAEOPNOTSUPP, and the switch does without.
	sw.canRead = v.GetExtension(verbs.ExtRdmaRead) == nil
	sw.cacheCB = v.GetExtension(verbs.ExtMemoryRegistrationCacheCallback) == nil
	switches[h] = sw
	go sw.poll()
	// A host closed without Shutdown stops its switch all the same.
	h.AtClose(func() { shutdown(h, sw) })
	return sw, nil
}

// HostStats returns the counters of host h's switch (zero if it has none).
func HostStats(h *tcpstack.Host) Stats {
	switchesMu.Lock()
	sw := switches[h]
	switchesMu.Unlock()
	if sw == nil {
		return Stats{}
	}
	s := &sw.stats
	return Stats{Dialed: s.dialed.Load(), Accepted: s.accepted.Load(), Closed: s.closed.Load(),
		Fallbacks: s.fallbacks.Load(), BadMessages: s.badMessages.Load(), CreditViolations: s.creditViolations.Load(),
		RemoteAccessErrors: s.remoteAccess.Load(), PeerFailures: s.peerFailures.Load(), NoBuffers: s.noBuffers.Load(),
		InlineBytes: s.inlineBytes.Load(), RDMABytes: s.rdmaBytes.Load(), RDMATransfers: s.rdmaTransfers.Load(),
		ReadRendezvous: s.readRendezvous.Load(), WriteRendezvous: s.writeRendezvous.Load(),
		Registrations: s.registrations.Load(), Deregistrations: s.deregistrations.Load(), CopyBytes: s.copyBytes.Load(), StaleHints: s.staleHints.Load(),
		PollSpins: s.pollSpins.Load(), PollSleeps: s.pollSleeps.Load(), PollSpinTime: time.Duration(s.pollSpinNanos.Load()), LingerExpired: s.lingerExpired.Load(), Lingering: s.lingering.Load()}
}

// poll takes the completions of every connection of the host and hands
// each run of one connection's completions to it under its lock, then
// lets it re-post its receives and send what waits.
func (sw *hostSwitch) poll() {
	wc := make([]rings.Completion, 64)
	ctx, cancel := context.WithCancel(context.Background())
	go func() { <-sw.done; cancel() }()
	for {
		n, err := sw.pollCQ(ctx, wc)
		if err != nil {
			return
		}
		for i := 0; i < n; {
			j := i + 1
			for j < n && wc[j].QPN == wc[i].QPN {
				j++
			}
			sw.mu.Lock()
			c := sw.conns[wc[i].QPN]
			sw.mu.Unlock()
			if c != nil {
				c.mu.Lock()
				for k := i; k < j; k++ {
					c.handleLocked(&wc[k])
				}
				c.afterBatchLocked()
				c.mu.Unlock()
			}
			i = j
		}
	}
}

// pollSpin is how long the poller keeps polling an empty CQ before it
// arms it and sleeps (busy polling, as RDMA applications do): arming is a
// device command and the CQ event a notification and a wake-up, a round
// trip's worth of latency on a request/response exchange. The time spent
// spinning is the poller's CPU (HostStats.PollSpins counts the spins that
// found work, PollSleeps the times it slept).
var pollSpin = 50 * time.Microsecond

// pollCQ returns at least one completion: it polls, spinning up to
// pollSpin with the processor yielded between polls, then waits as
// PollWait does.
func (sw *hostSwitch) pollCQ(ctx context.Context, wc []rings.Completion) (int, error) {
	if n := sw.cq.Poll(wc); n > 0 {
		return n, nil
	}
	start := time.Now()
	for time.Since(start) < pollSpin {
		runtime.Gosched()
		if n := sw.cq.Poll(wc); n > 0 {
			sw.stats.pollSpins.Add(1)
			sw.stats.pollSpinNanos.Add(uint64(time.Since(start)))
			return n, nil
		}
	}
	sw.stats.pollSpinNanos.Add(uint64(time.Since(start)))
	sw.stats.pollSleeps.Add(1)
	return sw.cq.PollWait(ctx, wc, false)
}

// lingerStart counts a closed conn's drain starting, unless the switch is
// stopping (then there is no drain).
func (sw *hostSwitch) lingerStart() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.stopping {
		return false
	}
	sw.lingers.Add(1)
	sw.stats.lingering.Add(1)
	return true
}

func (sw *hostSwitch) lingerDone() {
	sw.stats.lingering.Add(^uint64(0))
	sw.lingers.Done()
}

func (sw *hostSwitch) forget(c *Conn) {
	sw.mu.Lock()
	if sw.conns[c.qp.QPN()] == c {
		delete(sw.conns, c.qp.QPN())
	}
	sw.mu.Unlock()
}

func (sw *hostSwitch) qpAttr(cfg Config, hello []byte, made func(*Conn)) verbs.QPAttr {
	return verbs.QPAttr{PD: sw.pd, SendCQ: sw.cq, RecvCQ: sw.cq, SQDepth: sqDepth, RQDepth: cfg.Pool + cfg.Slots,
		ORD: 16, IRD: 16, PrivateData: hello, NoCRC: !cfg.CRC,
		Setup: func(qp *verbs.QP) error {
			c, err := newConn(sw, cfg, qp)
			if err != nil {
				return err
			}
			sw.mu.Lock()
			sw.conns[qp.QPN()] = c
			sw.mu.Unlock()
			made(c)
			return nil
		}}
}

// ---- Dial ---------------------------------------------------------------------------

// Dial connects to a sockets-direct (or plain TCP) listener at addr on host
// h. It tries the RDMA path first: an RDMA connection to the peer host's
// switch port whose hello names addr's port. A host without RDMA, a peer
// without a switch (its TCP answers the switch port with RST), a switch
// without a listener on the port (it rejects) or an RDMA attempt that does
// not finish within NegotiateTimeout all lead to a plain TCP connection to
// addr; its PathInfo says why. The connection's type is *Conn on the RDMA
// path and *FallbackConn on TCP.
func Dial(ctx context.Context, h *tcpstack.Host, addr netip.AddrPort, cfg Config) (net.Conn, error) {
	cfg = cfg.withDefaults()
	reason := errors.New("RDMA disabled on this host (Config.NoRDMA)")
	if !cfg.NoRDMA {
		c, err := dialRDMA(ctx, h, addr, cfg)
		if err == nil {
			return c, nil
		}
		if ctx.Err() != nil {
			return nil, err
		}
		reason = err
	}
	nc, err := h.Dial(ctx, addr)
	if err != nil {
		return nil, fmt.Errorf("direct: dial %v (RDMA path: %v): %w", addr, reason, err)
	}
	switchesMu.Lock()
	if sw := switches[h]; sw != nil {
		sw.stats.fallbacks.Add(1)
	}
	switchesMu.Unlock()
	return &FallbackConn{Conn: nc, reason: reason}, nil
}

func dialRDMA(ctx context.Context, h *tcpstack.Host, addr netip.AddrPort, cfg Config) (*Conn, error) {
	sw, err := switchFor(h)
	if err != nil {
		return nil, fmt.Errorf("no RDMA on this host: %w", err)
	}
	// The hello's caps depend on the sink memory, which exists only once
	// the QP does: the request is sent with the caps this side would
	// offer, and a sink that could not be allocated fails the dial (it
	// then falls back to TCP).
	caps := sw.sinkCaps(cfg)
	mine := cfg.hello(false, addr.Port(), caps)
	hb := make([]byte, HelloSize)
	mine.Encode(hb)
	var c *Conn
	var sinkCaps uint8
	attr := sw.qpAttr(cfg, hb, func(nc *Conn) {
		c = nc
		sinkCaps = c.prepareSink()
	})
	dctx, cancel := context.WithTimeout(ctx, cfg.NegotiateTimeout)
	defer cancel()
	qp, err := sw.v.DialRDMA(dctx, netip.AddrPortFrom(addr.Addr(), cfg.SwitchPort), attr)
	if err != nil {
		if c != nil {
			sw.forget(c)
			c.freeMem()
		}
		if errors.Is(err, verbs.ErrRejected) {
			return nil, fmt.Errorf("the peer's switch has no sockets-direct listener on port %d", addr.Port())
		}
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			return nil, fmt.Errorf("the RDMA negotiation with %v did not finish within NegotiateTimeout (%v): %w",
				netip.AddrPortFrom(addr.Addr(), cfg.SwitchPort), cfg.NegotiateTimeout, err)
		}
		return nil, fmt.Errorf("no sockets-direct switch at %v: %w", netip.AddrPortFrom(addr.Addr(), cfg.SwitchPort), err)
	}
	fail := func(err error) (*Conn, error) {
		_ = qp.Destroy()
		sw.forget(c)
		c.freeMem()
		return nil, err
	}
	if sinkCaps != caps {
		return fail(fmt.Errorf("%w: the sink area", ErrNoBuffers))
	}
	var peer Hello
	if err := peer.Decode(qp.PeerPrivateData()); err != nil || !peer.Reply {
		sw.stats.badMessages.Add(1)
		if err == nil {
			err = fmt.Errorf("%w: a request where the reply belongs", ErrBadHello)
		}
		return fail(fmt.Errorf("the listener's reply: %w", err))
	}
	c.local, c.remote = qp.LocalAddr(), qp.RemoteAddr()
	c.mu.Lock()
	c.start(&mine, &peer)
	// MPA: the initiator speaks first, and the responder's sends wait for
	// it; a credit-only message opens the way.
	if len(c.free) > 0 {
		_ = c.postLocked(ctlItem{m: Msg{Type: TypeCredit}, src: -1}, nil)
	}
	c.flushLocked()
	c.mu.Unlock()
	sw.stats.dialed.Add(1)
	return c, nil
}

// FallbackConn is a connection on the TCP path.
type FallbackConn struct {
	net.Conn
	reason error
}

// PathInfo says why the connection is on TCP.
func (c *FallbackConn) PathInfo() PathInfo { return PathInfo{Path: PathTCP, Reason: c.reason} }

// CloseWrite half-closes the TCP connection.
func (c *FallbackConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.New("direct: the TCP connection has no half-close")
}

// PathOf returns the path of a connection Dial or a Listener returned.
func PathOf(c net.Conn) PathInfo {
	if p, ok := c.(interface{ PathInfo() PathInfo }); ok {
		return p.PathInfo()
	}
	return PathInfo{}
}

// ---- Listen -------------------------------------------------------------------------

// Listener accepts sockets-direct connections on a port: RDMA connections
// through the host's switch, and plain TCP connections (peers without
// sockets direct, or whose RDMA attempt failed) on the port itself.
type Listener struct {
	sw   *hostSwitch // nil without RDMA
	port uint16
	tcp  net.Listener
	cfg  Config
	conn chan net.Conn
	done chan struct{}
	once sync.Once
	why  error // why this listener has no RDMA side (nil if it has)
}

// Listen listens on port of host h for both paths. The RDMA side shares
// the host's switch port; the first Listen with RDMA on a host starts it,
// and its Config sizes every accepted connection's pool (the hello tells
// each peer what it got).
func Listen(h *tcpstack.Host, port uint16, cfg Config) (*Listener, error) {
	cfg = cfg.withDefaults()
	tl, err := h.Listen(port)
	if err != nil {
		return nil, err
	}
	l := &Listener{port: port, tcp: tl, cfg: cfg, conn: make(chan net.Conn, 64), done: make(chan struct{})}
	if cfg.NoRDMA {
		l.why = errors.New("RDMA disabled (Config.NoRDMA)")
	} else if sw, err := switchFor(h); err != nil {
		l.why = err
	} else if err := sw.listen(l); err != nil {
		l.why = err
	} else {
		l.sw = sw
	}
	go l.acceptTCP()
	return l, nil
}

// RDMA says whether the listener takes RDMA connections, and if not why.
func (l *Listener) RDMA() (bool, error) { return l.sw != nil, l.why }

func (l *Listener) acceptTCP() {
	for {
		c, err := l.tcp.Accept()
		if err != nil {
			return
		}
		select {
		case l.conn <- &FallbackConn{Conn: c, reason: errors.New("the peer connected over plain TCP")}:
		case <-l.done:
			c.Close()
			return
		}
	}
}

// Accept implements net.Listener.
func (l *Listener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conn:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close implements net.Listener. Connections already accepted stay open.
func (l *Listener) Close() error {
	l.once.Do(func() {
		close(l.done)
		_ = l.tcp.Close()
		if l.sw != nil {
			l.sw.unlisten(l)
		}
		for {
			select {
			case c := <-l.conn:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr implements net.Listener.
func (l *Listener) Addr() net.Addr { return l.tcp.Addr() }

// listen registers l, starting the switch's RDMA listener if needed.
func (sw *hostSwitch) listen(l *Listener) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	if sw.listeners[l.port] != nil {
		return fmt.Errorf("direct: port %d already has a listener", l.port)
	}
	if sw.rl == nil {
		sw.acceptCfg = l.cfg
		cfg := l.cfg
		attr := sw.qpAttr(cfg, nil, func(c *Conn) {
			c.prepareSink()
			sw.mu.Lock()
			sw.pending[c.qp.QPN()] = c
			sw.mu.Unlock()
		})
		rl, err := sw.v.ListenRDMA(cfg.SwitchPort, attr)
		if err != nil {
			return fmt.Errorf("direct: switch port %d: %w", cfg.SwitchPort, err)
		}
		sw.rl, sw.rlPort = rl, cfg.SwitchPort
		go sw.serve(rl)
	}
	sw.listeners[l.port] = l
	return nil
}

func (sw *hostSwitch) unlisten(l *Listener) {
	sw.mu.Lock()
	if sw.listeners[l.port] == l {
		delete(sw.listeners, l.port)
	}
	var rl *verbs.RDMAListener
	if len(sw.listeners) == 0 && sw.rl != nil {
		rl, sw.rl = sw.rl, nil
	}
	sw.mu.Unlock()
	if rl != nil {
		_ = rl.Close()
	}
}

// serve answers connection requests on the switch port: a valid hello for
// a port with a listener is accepted, anything else rejected (the dialler
// then falls back to TCP).
func (sw *hostSwitch) serve(rl *verbs.RDMAListener) {
	for {
		r, err := rl.GetRequest(context.Background())
		if err != nil {
			return
		}
		qp := r.QP()
		sw.mu.Lock()
		c := sw.pending[qp.QPN()]
		delete(sw.pending, qp.QPN())
		var peer Hello
		herr := peer.Decode(r.PrivateData())
		var l *Listener
		if herr == nil && !peer.Reply {
			l = sw.listeners[peer.Port]
		}
		var cfg Config
		if l != nil {
			// The listener's choices, on the pool geometry the QP was
			// set up with.
			a := sw.acceptCfg
			cfg = l.cfg
			cfg.Pool, cfg.Slots, cfg.MaxInline, cfg.ChunkSize, cfg.Chunks, cfg.CRC = a.Pool, a.Slots, a.MaxInline, a.ChunkSize, a.Chunks, a.CRC
		}
		sw.mu.Unlock()
		if c == nil || herr != nil || peer.Reply || l == nil {
			if herr != nil || (c != nil && peer.Reply) {
				sw.stats.badMessages.Add(1)
			} else {
				sw.stats.fallbacks.Add(1)
			}
			_ = r.Reject(nil)
			if c != nil {
				sw.forget(c)
				c.freeMem()
			}
			continue
		}
		caps := uint8(0)
		if c.sink != nil {
			caps = sw.sinkCaps(cfg)
		}
		mine := cfg.hello(true, 0, caps)
		hb := make([]byte, HelloSize)
		mine.Encode(hb)
		c.mu.Lock()
		c.cfg = cfg
		c.start(&mine, &peer)
		c.local, c.remote = qp.LocalAddr(), qp.RemoteAddr()
		c.mu.Unlock()
		if err := r.Accept(hb); err != nil {
			sw.forget(c)
			c.freeMem()
			continue
		}
		c.mu.Lock()
		c.flushLocked()
		c.mu.Unlock()
		sw.stats.accepted.Add(1)
		select {
		case l.conn <- c:
		case <-l.done:
			_ = c.Close()
		}
	}
}

// Shutdown stops host h's switch: its poller and RDMA listener. Call it
// before closing the host (connections should be closed first); a later
// Dial or Listen starts a new switch.
//
// Closing the host does the same; Shutdown is for a host that lives on.
func Shutdown(h *tcpstack.Host) {
	switchesMu.Lock()
	sw := switches[h]
	switchesMu.Unlock()
	if sw != nil {
		shutdown(h, sw)
	}
}

// shutdown stops sw, host h's switch, once.
func shutdown(h *tcpstack.Host, sw *hostSwitch) {
	switchesMu.Lock()
	if switches[h] == sw {
		delete(switches, h)
	}
	switchesMu.Unlock()
	sw.stopOnce.Do(func() { sw.stop() })
}

func (sw *hostSwitch) stop() {
	sw.mu.Lock()
	rl := sw.rl
	sw.rl = nil
	sw.stopping = true
	conns := make([]*Conn, 0, len(sw.conns))
	for _, c := range sw.conns {
		conns = append(conns, c)
	}
	sw.mu.Unlock()
	if rl != nil {
		_ = rl.Close()
	}
	// The closed conns still draining end now, while the poller and the
	// host still run for their QPs' teardown: what they had in flight
	// is counted LingerExpired.
	for _, c := range conns {
		c.mu.Lock()
		c.abort = true
		c.cond.Broadcast()
		c.mu.Unlock()
	}
	sw.lingers.Wait()
	close(sw.done)
	sw.stopFast()
}
