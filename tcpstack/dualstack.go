package tcpstack

import (
	"errors"
	"net"
	"net/netip"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// listenTCP6 opens an IPv6-only TCP listener on port: IPv6-only so that
// the IPv4 listener beside it keeps IPv4 peers, whose addresses would
// otherwise come up IPv4-mapped (::ffff:10.0.0.2) to code that expects
// IPv4 ones.
func listenTCP6(s *stack.Stack, port uint16) (net.Listener, error) {
	var wq waiter.Queue
	ep, terr := s.NewEndpoint(tcp.ProtocolNumber, ipv6.ProtocolNumber, &wq)
	if terr != nil {
		return nil, errors.New(terr.String())
	}
	ep.SocketOptions().SetV6Only(true)
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Port: port}); terr != nil {
		ep.Close()
		return nil, errors.New(terr.String())
	}
	if terr := ep.Listen(128); terr != nil {
		ep.Close()
		return nil, errors.New(terr.String())
	}
	return gonet.NewTCPListener(s, &wq, ep), nil
}

// dualListener is one net.Listener over an IPv4 and an IPv6 one: a
// goroutine per family accepts and hands connections over one channel.
type dualListener struct {
	v4, v6 net.Listener
	conns  chan net.Conn
	errs   chan error
	done   chan struct{}
	once   sync.Once
	wg     sync.WaitGroup
}

// newDualListener merges l4 and l6; its Addr is l4's.
func newDualListener(l4, l6 net.Listener) *dualListener {
	d := &dualListener{v4: l4, v6: l6, conns: make(chan net.Conn), errs: make(chan error, 2), done: make(chan struct{})}
	d.wg.Add(2)
	go d.accept(l4)
	go d.accept(l6)
	return d
}

func (d *dualListener) accept(l net.Listener) {
	defer d.wg.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			d.errs <- err // buffered: one per family
			return
		}
		select {
		case d.conns <- c:
		case <-d.done:
			c.Close()
			return
		}
	}
}

// Accept returns the next connection of either family. After Close, or
// once either family's listener fails, it returns an error.
func (d *dualListener) Accept() (net.Conn, error) {
	select {
	case c := <-d.conns:
		return c, nil
	case err := <-d.errs:
		d.errs <- err // every later Accept sees it too
		return nil, err
	case <-d.done:
		return nil, net.ErrClosed
	}
}

// Close closes both listeners and waits for their accept goroutines.
func (d *dualListener) Close() error {
	d.once.Do(func() {
		close(d.done)
		d.v4.Close()
		d.v6.Close()
		d.wg.Wait()
	})
	return nil
}

// Addr is the IPv4 listener's address.
func (d *dualListener) Addr() net.Addr { return d.v4.Addr() }

// isLocal reports whether a is one of the host's interface addresses.
func (s *Stack) isLocal(a netip.Addr) bool {
	for _, p := range s.addrs {
		if p.Addr() == a {
			return true
		}
	}
	return false
}

// sourceFor is the host's address that connections to dst leave from: of
// dst's family, the first whose prefix holds dst, else the first of the
// family (a routed peer). ok is false if the host has no address of the
// family.
func (s *Stack) sourceFor(dst netip.Addr) (netip.Addr, bool) {
	var first netip.Addr
	for _, p := range s.addrs {
		if p.Addr().Is4() != dst.Is4() {
			continue
		}
		if p.Contains(dst) {
			return p.Addr(), true
		}
		if !first.IsValid() {
			first = p.Addr()
		}
	}
	return first, first.IsValid()
}

// netProto is netstack's network protocol number of a's family.
func netProto(a netip.Addr) tcpip.NetworkProtocolNumber {
	if a.Is4() {
		return ipv4.ProtocolNumber
	}
	return ipv6.ProtocolNumber
}

// tcpipAddr is a as netstack's address of its family.
func tcpipAddr(a netip.Addr) tcpip.Address { return tcpip.AddrFromSlice(a.AsSlice()) }
