package tcpstack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	mrand "math/rand"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/network/arp"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/icmp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
)

const nicID tcpip.NICID = 1

// StackConfig configures the host stack.
type StackConfig struct {
	// Addr is the interface address and prefix, e.g. 10.0.0.1/24: the
	// host's primary IPv4 address, the one its offload paths use.
	Addr netip.Prefix
	// Addrs are further interface addresses, IPv4 or IPv6 (a dual-stack
	// host: 10.0.0.1/24 in Addr, fd00::1/64 here). An IPv6 one brings up
	// IPv6 with neighbour discovery and ICMPv6; a host with none runs no
	// IPv6 at all, so an IPv4 host's wire traffic is what it always was.
	Addrs []netip.Prefix
	// Gateway, if valid, is the default route's next hop: an IPv4 address,
	// or an IPv6 one (a default route for IPv6 beside the IPv4 one).
	Gateway netip.Addr
	// Gateway6 is the IPv6 default route's next hop, if valid.
	Gateway6 netip.Addr
	// SendBuffer and ReceiveBuffer are the default TCP buffer sizes in
	// bytes (0: 1 MiB send, 1 MiB receive with auto-tuning up to 4 MiB).
	SendBuffer, ReceiveBuffer int
	// Seed, when not zero, seeds every random choice netstack makes (ISNs,
	// ports, its "secure" random numbers): for repeatable runs only, never
	// for a stack that talks to a network it should not trust.
	Seed uint64
	// Clock, when set, is netstack's clock (its timers, timestamps and
	// RTTs): a lockstep run's virtual clock.
	Clock tcpip.Clock
	// TCPProbe, when set, is called with a TCP endpoint's whole state
	// (sequence numbers, the sender's counts and timers' inputs, SACK,
	// RACK) after each segment the endpoint processes: netstack's TCP
	// probe, for diagnosing a connection that stalls. It copies that state
	// per segment, so it is for tests and debugging, not for production.
	TCPProbe tcp.TCPProbeFunc
}

// lockedSource is a rand.Source safe for concurrent use (netstack's
// RandSource must be).
type lockedSource struct {
	mu sync.Mutex
	r  *mrand.Rand
}

func (s *lockedSource) Int63() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.r.Int63()
}

func (s *lockedSource) Seed(int64) {}

// seededReader is an io.Reader of seeded pseudo-random bytes (ChaCha8),
// safe for concurrent use.
type seededReader struct {
	mu sync.Mutex
	c  *rand.ChaCha8
}

// NewSeededReader returns an io.Reader of pseudo-random bytes seeded by
// seed (ChaCha8), safe for concurrent use: what StackConfig.Seed gives
// netstack for its "secure" random numbers, for the layers above it that
// seed theirs the same way (repeatable runs only, never where a peer may
// guess to its advantage).
func NewSeededReader(seed uint64) io.Reader {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	return &seededReader{c: rand.NewChaCha8(key)}
}

func (r *seededReader) Read(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.c.Read(p)
}

// Stack is a gVisor netstack on one link endpoint.
type Stack struct {
	S     *stack.Stack
	addr  netip.Prefix
	addrs []netip.Prefix // addr first, then StackConfig.Addrs
	has6  bool
}

// NewStack builds a netstack with IPv4, ARP, ICMP, UDP and TCP (SACK on) on
// ep, and IPv6 with NDP and ICMPv6 when cfg.Addrs has an IPv6 address. It
// is used both on the NIC driver and, for comparisons, on gVisor's own link
// endpoints.
func NewStack(ep stack.LinkEndpoint, cfg StackConfig) (*Stack, error) {
	if !cfg.Addr.IsValid() || !cfg.Addr.Addr().Is4() {
		return nil, fmt.Errorf("tcpstack: address %v: need an IPv4 prefix such as 10.0.0.1/24", cfg.Addr)
	}
	all := append([]netip.Prefix{cfg.Addr}, cfg.Addrs...)
	has6 := false
	for _, p := range all {
		if !p.IsValid() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return nil, fmt.Errorf("tcpstack: address %v: need an IPv4 or IPv6 prefix", p)
		}
		has6 = has6 || p.Addr().Is6()
	}
	if cfg.Gateway6.IsValid() && !cfg.Gateway6.Is6() {
		return nil, fmt.Errorf("tcpstack: IPv6 gateway %v is not an IPv6 address", cfg.Gateway6)
	}
	if cfg.Gateway6.IsValid() && !has6 {
		return nil, fmt.Errorf("tcpstack: IPv6 gateway %v on a host with no IPv6 address", cfg.Gateway6)
	}
	opts := stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, arp.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol, icmp.NewProtocol4},
		Clock:              cfg.Clock,
	}
	if cfg.TCPProbe != nil {
		opts.TransportProtocols[0] = tcp.NewProtocolProbe(cfg.TCPProbe)
	}
	if has6 {
		// Static addresses only: no router solicitations, no SLAAC, no
		// duplicate address detection (the address is the operator's
		// to choose, and usable at once). Neighbour discovery answers
		// and resolves; a link-local address is made from the MAC
		// (RFC 4291 appendix A) for peers that solicit from theirs.
		opts.NetworkProtocols = append(opts.NetworkProtocols, ipv6.NewProtocolWithOptions(ipv6.Options{
			AutoGenLinkLocal: true,
			NDPConfigs:       ipv6.NDPConfigurations{HandleRAs: ipv6.HandlingRAsDisabled},
		}))
		opts.TransportProtocols = append(opts.TransportProtocols, icmp.NewProtocol6)
	}
	if cfg.Seed != 0 {
		opts.RandSource = &lockedSource{r: mrand.New(mrand.NewSource(int64(cfg.Seed)))}
		opts.SecureRNG = NewSeededReader(cfg.Seed)
	}
	s := stack.New(opts)
	if err := s.CreateNIC(nicID, ep); err != nil {
		s.Destroy()
		return nil, fmt.Errorf("tcpstack: create NIC: %s", err)
	}
	var routes []tcpip.Route
	for _, p := range all {
		pa := protocolAddress(p)
		if err := s.AddProtocolAddress(nicID, pa, stack.AddressProperties{}); err != nil {
			s.Destroy()
			return nil, fmt.Errorf("tcpstack: add address %v: %s", p, err)
		}
		routes = append(routes, tcpip.Route{Destination: pa.AddressWithPrefix.Subnet(), NIC: nicID})
	}
	if has6 {
		// Link-local destinations (neighbour discovery's own, and peers
		// that talk from theirs) are on this link.
		ll := protocolAddress(netip.MustParsePrefix("fe80::/64"))
		routes = append(routes, tcpip.Route{Destination: ll.AddressWithPrefix.Subnet(), NIC: nicID})
	}
	if cfg.Gateway.IsValid() {
		if cfg.Gateway.Is4() {
			routes = append(routes, tcpip.Route{Destination: header.IPv4EmptySubnet, Gateway: tcpip.AddrFrom4(cfg.Gateway.As4()), NIC: nicID})
		} else {
			cfg.Gateway6 = cfg.Gateway
		}
	}
	if cfg.Gateway6.IsValid() {
		routes = append(routes, tcpip.Route{Destination: header.IPv6EmptySubnet, Gateway: tcpip.AddrFrom16(cfg.Gateway6.As16()), NIC: nicID})
	}
	s.SetRouteTable(routes)
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	snd, rcv := cfg.SendBuffer, cfg.ReceiveBuffer
	if snd == 0 {
		snd = 1 << 20
	}
	if rcv == 0 {
		rcv = 1 << 20
	}
	sbo := tcpip.TCPSendBufferSizeRangeOption{Min: 4096, Default: snd, Max: 4 * snd}
	rbo := tcpip.TCPReceiveBufferSizeRangeOption{Min: 4096, Default: rcv, Max: 4 * rcv}
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sbo)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &rbo)
	return &Stack{S: s, addr: cfg.Addr, addrs: all, has6: has6}, nil
}

// protocolAddress is p as netstack's address of its family.
func protocolAddress(p netip.Prefix) tcpip.ProtocolAddress {
	if p.Addr().Is4() {
		return tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
			AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom4(p.Addr().As4()), PrefixLen: p.Bits()}}
	}
	return tcpip.ProtocolAddress{Protocol: ipv6.ProtocolNumber,
		AddressWithPrefix: tcpip.AddressWithPrefix{Address: tcpip.AddrFrom16(p.Addr().As16()), PrefixLen: p.Bits()}}
}

// Addrs returns every interface address the stack was given, the primary
// IPv4 one first.
func (s *Stack) Addrs() []netip.Prefix { return append([]netip.Prefix(nil), s.addrs...) }

// HasIPv6 says whether the stack runs IPv6 (it has an IPv6 address).
func (s *Stack) HasIPv6() bool { return s.has6 }

// Addr returns the interface address.
func (s *Stack) Addr() netip.Addr { return s.addr.Addr() }

// Listen opens a TCP listener on port of every interface address: IPv4,
// and IPv6 too on a dual-stack host (one listener per family, merged, so
// an IPv4 peer's address never shows up IPv4-mapped).
func (s *Stack) Listen(port uint16) (net.Listener, error) {
	l, err := gonet.ListenTCP(s.S, tcpip.FullAddress{NIC: nicID, Port: port}, ipv4.ProtocolNumber)
	if err != nil {
		return nil, fmt.Errorf("tcpstack: listen on port %d: %w", port, err)
	}
	if !s.has6 {
		return l, nil
	}
	if port == 0 { // the same port on both families
		port = uint16(l.Addr().(*net.TCPAddr).Port)
	}
	l6, err := listenTCP6(s.S, port)
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("tcpstack: listen on IPv6 port %d: %w", port, err)
	}
	return newDualListener(l, l6), nil
}

// ListenIPv6 opens a TCP listener on port of the IPv6 addresses only: for
// a dual-stack host whose IPv4 side of the port is another listener's.
func (s *Stack) ListenIPv6(port uint16) (net.Listener, error) {
	if !s.has6 {
		return nil, fmt.Errorf("tcpstack: listen on IPv6 port %d: the host has no IPv6 address", port)
	}
	l, err := listenTCP6(s.S, port)
	if err != nil {
		return nil, fmt.Errorf("tcpstack: listen on IPv6 port %d: %w", port, err)
	}
	return l, nil
}

// Dial opens a TCP connection to dst, over IPv4 or (on a host with an IPv6
// address) IPv6.
func (s *Stack) Dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	a := dst.Addr()
	proto, fa := ipv4.ProtocolNumber, tcpip.FullAddress{NIC: nicID, Port: dst.Port()}
	switch {
	case a.Is4():
		fa.Addr = tcpip.AddrFrom4(a.As4())
	case a.Is6() && !a.Is4In6() && s.has6:
		proto, fa.Addr = ipv6.ProtocolNumber, tcpip.AddrFrom16(a.As16())
	default:
		return nil, fmt.Errorf("tcpstack: dial %v: no address of its family", dst)
	}
	c, err := gonet.DialContextTCP(ctx, s.S, fa, proto)
	if err != nil {
		return nil, fmt.Errorf("tcpstack: dial %v: %w", dst, err)
	}
	return c, nil
}

// Close tears the stack (and its link endpoint) down.
func (s *Stack) Close() {
	s.S.Close()
	s.S.Wait()
}

// HostConfig describes one emulated host as the host sees it: its
// memory, its driver and the netstack on top. The device it drives is
// built elsewhere (package board assembles an in-process or split one)
// and reaches the host only as a Device: rings, registers and host memory.
type HostConfig struct {
	Addr  netip.Prefix
	Stack StackConfig
	// Driver sizes the driver's rings and buffers.
	Driver DriverConfig
	// Stepper, when set, is a lockstep harness's handle on the device
	// (Host.Yield hands it the host's yields); the harness also sets
	// Driver.Yield, Driver.Clock and Stack.Clock.
	Stepper Stepper
	// ConnTable, when not zero, is how many connections the device's
	// delegation table holds: Offload never uses more indices (an
	// OFFLOAD past it would only be refused).
	ConnTable int
}

// Stepper is what the host needs of a lockstep harness (board/lockstep):
// a way to wait, in turn with every other goroutine of the run, until
// they are all blocked.
type Stepper interface {
	Yield(key uint32)
}

// GoneNotifier is implemented by a Device that can go away under the host
// (one in another process): f is called, once, with why, and at once if
// it has already gone. The host then fails everything waiting on it.
type GoneNotifier interface {
	OnGone(f func(error))
}

// ErrDeviceGone is the error of a host whose device (process) has gone.
var ErrDeviceGone = errors.New("the NIC's device process has gone")

// MemorySize is the host memory NewHost's callers give a host of this
// MTU and driver configuration when they have no size of their own: the
// rings and their buffers, 1 MiB for the driver's other structures and
// 64 MiB for applications.
func MemorySize(mtu int, dc DriverConfig) int {
	dc.setDefaults()
	buf := mtu + header.EthernetMinimumSize + rings.CacheLine
	return int(dc.TxEntries+dc.RxEntries)*buf + 1<<20 + 64<<20
}

// Host is one emulated machine as its software sees it: host memory, the
// driver of its NIC and a netstack.
type Host struct {
	*Stack
	Mem    *rings.Arena
	Driver *Driver
	offMu  sync.Mutex
	off    *offloader
	gone   atomic.Pointer[error]

	connTable int // HostConfig.ConnTable

	areaMu   sync.Mutex
	area     []byte // the device's counter publication area, in host memory
	areaCopy []byte

	closeMu    sync.Mutex
	closeHooks []func()
	closed     bool

	stepper Stepper // HostConfig.Stepper

	pmtu pmtuCounters // ICMP "fragmentation needed" verdicts (pmtu.go)
}

// Yield, in a lockstep run (HostConfig.Stepper), returns once every other
// goroutine of the run is blocked; elsewhere at once. A host goroutine
// about to tell the device it sleeps (a completion loop arming its CQ)
// calls it, so that the command does not race whatever the goroutines it
// woke are doing. key orders the host's yielders that wait at the same
// time (lowest first; 0 is the interrupt handler's). It says whether it
// waited.
func (h *Host) Yield(key uint32) bool {
	if h == nil || h.stepper == nil {
		return false
	}
	h.stepper.Yield(key)
	return true
}

// AtClose registers f to run when the host closes, before its
// connections fail and its stack and driver stop: the layers above
// (sockets direct's switch, for one) stop their own goroutines there, so
// a program that only closes its hosts leaks none. Hooks run once, last
// registered first. On a closed host f runs at once.
func (h *Host) AtClose(f func()) {
	h.closeMu.Lock()
	if h.closed {
		h.closeMu.Unlock()
		f()
		return
	}
	h.closeHooks = append(h.closeHooks, f)
	h.closeMu.Unlock()
}

// DeviceErr is why the host's device is gone (a split device whose process
// died), or nil while it works.
func (h *Host) DeviceErr() error {
	if e := h.gone.Load(); e != nil {
		return *e
	}
	return nil
}

// deviceGone fails the host when its device process dies: everything
// waiting on the rings is woken and fails, and new I/O fails at once.
func (h *Host) deviceGone(err error) {
	if !h.gone.CompareAndSwap(nil, &err) {
		return
	}
	go h.Close()
}

// NewHost builds a host on dev, whose host memory is mem: it starts the
// driver (which programs the device's rings and starts it), registers the
// counter area and puts a netstack on top. Close stops everything,
// including dev. On an error dev is stopped.
func NewHost(cfg HostConfig, mem *rings.Arena, dev Device) (*Host, error) {
	return newHost(cfg, mem, dev, true)
}

// newHost is NewHost; a test's device that must see exactly the commands
// it expects gets no counter area (area false).
func newHost(cfg HostConfig, mem *rings.Arena, dev Device, area bool) (*Host, error) {
	drv, err := NewDriver(mem, dev, cfg.Driver)
	if err != nil {
		_ = dev.Stop()
		return nil, err
	}
	sc := cfg.Stack
	sc.Addr = cfg.Addr
	st, err := NewStack(drv, sc)
	if err != nil {
		drv.Close()
		return nil, err
	}
	h := &Host{Stack: st, Mem: mem, Driver: drv, stepper: cfg.Stepper, connTable: cfg.ConnTable}
	drv.flows.nextHop, drv.flows.stackNow = h.nextHopMAC, st.S.Clock().NowMonotonic
	icmp := h.icmpFrame
	drv.flows.icmpErr.Store(&icmp)
	if area {
		if err := h.registerStatArea(); err != nil {
			h.Close()
			return nil, err
		}
	}
	if g, ok := dev.(GoneNotifier); ok {
		g.OnGone(h.deviceGone)
	}
	return h, nil
}

// Close stops the stack, the driver and the device.
func (h *Host) Close() error {
	h.closeMu.Lock()
	hooks := h.closeHooks
	h.closeHooks, h.closed = nil, true
	h.closeMu.Unlock()
	for i := len(hooks) - 1; i >= 0; i-- {
		hooks[i]()
	}
	err := h.DeviceErr()
	if err == nil {
		err = errHostClosed
	}
	h.failDelegated(err)
	h.Stack.Close()
	h.Driver.Close()
	return nil
}

var errHostClosed = errors.New("the host was closed")

// failDelegated fails every delegated connection with err, waking its
// blocked readers and writers: once the host stops (or its device is
// gone) nothing will ever complete them.
func (h *Host) failDelegated(err error) {
	h.offMu.Lock()
	o := h.off
	h.offMu.Unlock()
	if o == nil {
		return
	}
	o.mu.Lock()
	conns := make([]*DelegatedConn, 0, len(o.conns))
	for _, c := range o.conns {
		conns = append(conns, c)
	}
	o.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		c.fail(err)
		c.signal()
		c.mu.Unlock()
	}
}
