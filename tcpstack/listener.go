package tcpstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/emunic/emunic/nic/hdr"
)

// OffloadListener accepts connections with netstack and delegates each one
// before returning it. A connection that cannot be delegated is returned as a
// plain netstack connection (so Accept returns net.Conn). It listens on the
// host's primary IPv4 address and, on a dual-stack host, on its IPv6 ones:
// connections of both families are delegated alike.
//
// The flow: a pump goroutine takes each established connection off
// netstack's accept queue as soon as it is there, and starts its
// delegation on a goroutine of its own (at most maxDelegating at once);
// each delegated (or fallen-back) connection waits in a queue of
// acceptQueue for Accept. Delegating in Accept itself, one at a time,
// left netstack's queue to fill behind a slow delegation: a burst of
// hundreds of SYNs then met SYN cookies and dropped handshakes, and the
// peers' retransmissions backed off for many seconds. An application that
// does not call Accept still pushes back: the queue fills, the
// delegations block, the pump stops, and netstack's backlog fills as it
// would.
type OffloadListener struct {
	h    *Host
	eps  []listenEP // IPv4 first
	port uint16
	// ready is signalled when either family's endpoint may have a
	// connection to accept.
	ready chan struct{}
	done  chan struct{}
	once  sync.Once

	// accepted holds connections delegated (or fallen back) and not yet
	// returned by Accept; slots bounds the delegations in flight.
	accepted  chan net.Conn
	slots     chan struct{}
	acceptErr chan error     // the pump's last error, for Accept
	wg        sync.WaitGroup // the pump and the delegations

	mu          sync.Mutex
	fallbacks   int
	lost        int
	fallbackErr error
}

// listenEP is one family's listening endpoint and the addresses whose
// SYNs the flow tracker follows for it.
type listenEP struct {
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	we      *waiter.Entry
	tracked []netip.Addr
}

// Fallbacks counts the accepted connections that stayed on netstack.
func (l *OffloadListener) Fallbacks() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fallbacks
}

// Lost counts the accepted connections lost because the device did not
// answer their OFFLOAD (ErrDelegationAbandoned); Accept skips them.
func (l *OffloadListener) Lost() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.lost
}

// FallbackErr says why the last connection that was not delegated stayed
// on netstack (or was lost); nil if none.
func (l *OffloadListener) FallbackErr() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.fallbackErr
}

// ListenOffload listens on port; every accepted connection is delegated.
// On a dual-stack host it listens on the IPv6 addresses too (port 0: the
// same port on both).
func (h *Host) ListenOffload(port uint16) (*OffloadListener, error) {
	if _, err := h.offloader(); err != nil {
		return nil, err
	}
	l := &OffloadListener{h: h, ready: make(chan struct{}, 1), done: make(chan struct{}),
		accepted: make(chan net.Conn, acceptQueue), slots: make(chan struct{}, maxDelegating), acceptErr: make(chan error, 1)}
	v4 := h.Addr()
	if err := l.listen(v4, port, []netip.Addr{v4}); err != nil {
		return nil, err
	}
	if h.HasIPv6() {
		var v6 []netip.Addr
		for _, p := range h.Addrs() {
			if p.Addr().Is6() {
				v6 = append(v6, p.Addr())
			}
		}
		if err := l.listen(netip.IPv6Unspecified(), l.port, v6); err != nil {
			l.Close()
			return nil, err
		}
	}
	l.wg.Add(1)
	go l.pump()
	return l, nil
}

const (
	// listenBacklog is netstack's accept queue on each family's
	// endpoint: Linux's default somaxconn, so a burst of handshakes
	// waits there rather than meeting SYN cookies.
	listenBacklog = 4096
	// maxDelegating bounds the delegations in flight per listener; each
	// is mostly waiting (for netstack to quiesce, for the device's
	// completion), so many overlap.
	maxDelegating = 64
	// acceptQueue bounds the delegated connections waiting for Accept.
	acceptQueue = 256
)

// listen opens one family's endpoint on addr:port (IPv6: unspecified, every
// address of the family, IPv6 only) and tracks the flows to tracked.
func (l *OffloadListener) listen(addr netip.Addr, port uint16, tracked []netip.Addr) error {
	h := l.h
	le := listenEP{wq: new(waiter.Queue), tracked: tracked}
	ep, terr := h.S.NewEndpoint(tcp.ProtocolNumber, netProto(addr), le.wq)
	if terr != nil {
		return fmt.Errorf("tcpstack: endpoint: %s", terr)
	}
	fa := tcpip.FullAddress{NIC: nicID, Port: port}
	if addr.Is6() {
		ep.SocketOptions().SetV6Only(true)
	} else {
		fa.Addr = tcpipAddr(addr)
	}
	if terr := ep.Bind(fa); terr != nil {
		ep.Close()
		return fmt.Errorf("tcpstack: listen on %v port %d: %s", addr, port, terr)
	}
	if port == 0 {
		la, _ := ep.GetLocalAddress()
		port = la.Port
	}
	l.port = port
	for _, a := range tracked {
		h.Driver.flows.listenOn(a, port, true)
	}
	if terr := ep.Listen(listenBacklog); terr != nil {
		ep.Close()
		for _, a := range tracked {
			h.Driver.flows.listenOn(a, port, false)
		}
		return fmt.Errorf("tcpstack: listen on %v port %d: %s", addr, port, terr)
	}
	le.ep = ep
	we := waiter.NewFunctionEntry(waiter.ReadableEvents, func(waiter.EventMask) { l.signal() })
	le.we = &we
	le.wq.EventRegister(le.we)
	l.eps = append(l.eps, le)
	return nil
}

// signal wakes an Accept waiting for either family's endpoint.
func (l *OffloadListener) signal() {
	select {
	case l.ready <- struct{}{}:
	default:
	}
}

// Accept returns the next connection of either family, delegated, or on
// netstack if its delegation failed (Fallbacks, FallbackErr).
func (l *OffloadListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.accepted:
		return c, nil
	case err := <-l.acceptErr:
		l.acceptErr <- err // for every later Accept too
		return nil, err
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: net.ErrClosed}
	}
}

// pump takes connections off netstack's endpoints as they are
// established and starts each one's delegation.
func (l *OffloadListener) pump() {
	defer l.wg.Done()
	for {
		var peer tcpip.FullAddress
		var n tcpip.Endpoint
		var wq *waiter.Queue
		var terr tcpip.Error = &tcpip.ErrWouldBlock{}
		// A free slot first: with none, netstack keeps the
		// connection in its backlog (and paces the peer) rather
		// than this goroutine holding it.
		select {
		case l.slots <- struct{}{}:
		case <-l.done:
			return
		}
		for _, le := range l.eps {
			n, wq, terr = le.ep.Accept(&peer)
			if _, ok := terr.(*tcpip.ErrWouldBlock); !ok {
				break
			}
		}
		if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
			<-l.slots
			select {
			case <-l.ready:
			case <-l.done:
				return
			}
			continue
		}
		if terr != nil {
			<-l.slots
			select {
			case l.acceptErr <- &net.OpError{Op: "accept", Net: "tcp", Err: fmt.Errorf("%s", terr)}:
			default:
			}
			return
		}
		la, terr := n.GetLocalAddress()
		if terr != nil {
			<-l.slots
			n.Close()
			continue // reset before we got to it
		}
		key := hdr.Tuple{LocalIP: addrOf(la.Addr), RemoteIP: addrOf(peer.Addr), LocalPort: l.port, RemotePort: peer.Port}
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			c := l.delegate(n, wq, key)
			<-l.slots
			if c == nil {
				return
			}
			select {
			case l.accepted <- c:
			case <-l.done:
				c.Close()
			}
		}()
	}
}

// delegate delegates one accepted connection: the connection delegated,
// or on netstack if the delegation failed, or nil if it was lost.
func (l *OffloadListener) delegate(n tcpip.Endpoint, wq *waiter.Queue, key hdr.Tuple) net.Conn {
	c, err := l.h.off.delegate(n, wq, key, 0, 0)
	if errors.Is(err, ErrDelegationAbandoned) {
		// The host owns it until the device answers: not ours.
		l.mu.Lock()
		l.lost, l.fallbackErr = l.lost+1, err
		l.mu.Unlock()
		return nil
	}
	if err != nil {
		l.mu.Lock()
		l.fallbacks, l.fallbackErr = l.fallbacks+1, err
		l.mu.Unlock()
		l.h.Driver.flows.remove(key)
		l.h.off.forgetRDMA(key)
		return gonet.NewTCPConn(wq, n)
	}
	return c
}

// addrOf is netstack's address as a netip.Addr of its family.
func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip
}

// Close stops listening. It waits for the delegations in flight (each is
// bounded by the offloader's QuiesceTimeout and command timeout) and
// closes the connections no Accept took.
func (l *OffloadListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		for _, le := range l.eps {
			le.wq.EventUnregister(le.we)
			le.ep.Close()
			for _, a := range le.tracked {
				l.h.Driver.flows.listenOn(a, l.port, false)
			}
		}
		l.wg.Wait()
		for {
			select {
			case c := <-l.accepted:
				c.Close()
			default:
				return
			}
		}
	})
	return nil
}

// Addr returns the listening address (the IPv4 one on a dual-stack host).
func (l *OffloadListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(l.h.Addr().AsSlice()), Port: int(l.port)}
}
