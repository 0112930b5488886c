package tcpstack

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/emunic/emunic/nic/hdr"
)

// OffloadListener accepts connections with netstack and delegates each one
// before returning it. A connection that cannot be delegated is returned as a
// plain netstack connection (so Accept returns net.Conn).
type OffloadListener struct {
	h    *Host
	ep   tcpip.Endpoint
	wq   waiter.Queue
	ip   [4]byte
	port uint16
	once sync.Once

	mu          sync.Mutex
	fallbacks   int
	lost        int
	fallbackErr error
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
func (h *Host) ListenOffload(port uint16) (*OffloadListener, error) {
	if _, err := h.offloader(); err != nil {
		return nil, err
	}
	l := &OffloadListener{h: h, ip: h.Addr().As4(), port: port}
	ep, terr := h.S.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &l.wq)
	if terr != nil {
		return nil, fmt.Errorf("tcpstack: endpoint: %s", terr)
	}
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(l.ip), Port: port}); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("tcpstack: listen on port %d: %s", port, terr)
	}
	h.Driver.flows.listenOn(netip.AddrFrom4(l.ip), port, true)
	if terr := ep.Listen(128); terr != nil {
		ep.Close()
		h.Driver.flows.listenOn(netip.AddrFrom4(l.ip), port, false)
		return nil, fmt.Errorf("tcpstack: listen on port %d: %s", port, terr)
	}
	l.ep = ep
	return l, nil
}

// Accept waits for a connection and delegates it.
func (l *OffloadListener) Accept() (net.Conn, error) {
	we, ch := waiter.NewChannelEntry(waiter.ReadableEvents)
	l.wq.EventRegister(&we)
	defer l.wq.EventUnregister(&we)
	for {
		var peer tcpip.FullAddress
		n, wq, terr := l.ep.Accept(&peer)
		if _, ok := terr.(*tcpip.ErrWouldBlock); ok {
			<-ch
			continue
		}
		if terr != nil {
			return nil, &net.OpError{Op: "accept", Net: "tcp", Err: fmt.Errorf("%s", terr)}
		}
		key := hdr.Tuple{LocalIP: netip.AddrFrom4(l.ip), RemoteIP: netip.AddrFrom4(peer.Addr.As4()), LocalPort: l.port, RemotePort: peer.Port}
		c, err := l.h.off.delegate(n, wq, key, 0, 0)
		if errors.Is(err, ErrDelegationAbandoned) {
			// The host owns it until the device answers: not ours.
			l.mu.Lock()
			l.lost, l.fallbackErr = l.lost+1, err
			l.mu.Unlock()
			continue
		}
		if err != nil {
			l.mu.Lock()
			l.fallbacks, l.fallbackErr = l.fallbacks+1, err
			l.mu.Unlock()
			l.h.Driver.flows.remove(key)
			l.h.off.forgetRDMA(key)
			return gonet.NewTCPConn(wq, n), nil
		}
		return c, nil
	}
}

// Close stops listening.
func (l *OffloadListener) Close() error {
	l.once.Do(func() {
		l.ep.Close()
		l.h.Driver.flows.listenOn(netip.AddrFrom4(l.ip), l.port, false)
	})
	return nil
}

// Addr returns the listening address.
func (l *OffloadListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(l.ip[:]), Port: int(l.port)}
}
