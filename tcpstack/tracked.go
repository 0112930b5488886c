package tcpstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/emunic/emunic/nic/hdr"
)

// DialOffload opens a connection with netstack (the handshake is netstack's)
// and delegates it to the offload unit before returning it.
func (h *Host) DialOffload(ctx context.Context, dst netip.AddrPort) (*DelegatedConn, error) {
	nc, err := h.DialTracked(ctx, dst)
	if err != nil {
		return nil, err
	}
	c, err := h.Delegate(nc)
	if err != nil {
		nc.Close() // nothing if the delegation was abandoned: the host owns it
		return nil, err
	}
	return c, nil
}

// TrackedConn is a netstack connection whose frames the driver tracks, so it
// can be delegated later with Delegate.
type TrackedConn struct {
	*gonet.TCPConn
	ep      tcpip.Endpoint
	wq      *waiter.Queue
	key     hdr.Tuple
	drv     *Driver
	read    atomic.Uint64 // bytes the application read before delegation
	written atomic.Uint64 // bytes the application wrote before delegation
	taken   atomic.Bool   // an abandoned delegation owns the endpoint and the flow
}

// Read implements net.Conn, counting what the application consumed so a
// later delegation knows which received bytes are still in netstack.
func (t *TrackedConn) Read(p []byte) (int, error) {
	n, err := t.TCPConn.Read(p)
	t.read.Add(uint64(n))
	return n, err
}

// Write implements net.Conn, counting what the application gives netstack,
// so a delegation waits until netstack has sent all of it. A Write under
// way counts whole from its start: a delegation racing it waits for it
// rather than abort an endpoint holding part of it.
func (t *TrackedConn) Write(p []byte) (int, error) {
	t.written.Add(uint64(len(p)))
	n, err := t.TCPConn.Write(p)
	t.written.Add(-uint64(len(p) - n))
	return n, err
}

// Close closes the netstack connection and stops tracking it. After a
// delegation that was abandoned (ErrDelegationAbandoned) it does nothing:
// the host resets the connection once the device has answered.
func (t *TrackedConn) Close() error {
	if t.taken.Load() {
		return nil
	}
	err := t.TCPConn.Close()
	t.drv.flows.remove(t.key)
	return err
}

// DialTracked opens a netstack connection whose state the NIC driver tracks
// from its first SYN, so it can be delegated at any later quiet point. dst
// may be IPv4 or IPv6; the connection leaves from the host's address of
// that family (sourceFor).
func (h *Host) DialTracked(ctx context.Context, dst netip.AddrPort) (*TrackedConn, error) {
	var wq waiter.Queue
	ep, key, err := h.dialFree(ctx, dst, &wq, true)
	if err != nil {
		return nil, err
	}
	return &TrackedConn{TCPConn: gonet.NewTCPConn(&wq, ep), ep: ep, wq: &wq, key: key, drv: h.Driver}, nil
}

// Dial opens a netstack connection to dst, as Stack.Dial does, from a local
// port whose 4-tuple no delegated connection holds (dialFree). Stack.Dial
// on a host that delegates could pick such a port (netstack has forgotten
// it), and its SYN would then be dropped as the delegated flow's.
func (h *Host) Dial(ctx context.Context, dst netip.AddrPort) (net.Conn, error) {
	var wq waiter.Queue
	ep, _, err := h.dialFree(ctx, dst, &wq, false)
	if err != nil {
		return nil, err
	}
	return gonet.NewTCPConn(&wq, ep), nil
}

// dialFree connects a new netstack endpoint on wq to dst, from the host's
// address of dst's family (sourceFor) and a local port whose 4-tuple the
// driver does not track. With track, the 4-tuple is tracked from the first
// SYN on (DialTracked) and stops being on failure.
//
// netstack's end of a delegated connection is gone, so netstack may hand
// out its local port again while the NIC still runs (or is releasing) the
// connection: a port whose 4-tuple the driver still tracks is kept bound,
// so the next pick differs, and let go after.
func (h *Host) dialFree(ctx context.Context, dst netip.AddrPort, wq *waiter.Queue, track bool) (tcpip.Endpoint, hdr.Tuple, error) {
	local, ok := h.sourceFor(dst.Addr())
	if !ok || dst.Addr().Is4In6() || dst.Addr().Zone() != "" {
		return nil, hdr.Tuple{}, fmt.Errorf("tcpstack: dial %v: the host has no address of its family", dst)
	}
	var ep tcpip.Endpoint
	var key hdr.Tuple
	var busy []tcpip.Endpoint
	defer func() {
		for _, b := range busy {
			b.Close()
		}
	}()
	for {
		var terr tcpip.Error
		ep, terr = h.S.NewEndpoint(tcp.ProtocolNumber, netProto(local), wq)
		if terr != nil {
			return nil, key, fmt.Errorf("tcpstack: endpoint: %s", terr)
		}
		if local.Is6() {
			ep.SocketOptions().SetV6Only(true)
		}
		if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpipAddr(local)}); terr != nil {
			ep.Close()
			if _, none := terr.(*tcpip.ErrNoPortAvailable); none && len(busy) > 0 {
				// The ports held here were all there were.
				return nil, key, fmt.Errorf("tcpstack: dial %v: no local port whose 4-tuple is free (%d tried, the rest of the port range in use)", dst, len(busy))
			}
			return nil, key, fmt.Errorf("tcpstack: bind: %s", terr)
		}
		la, _ := ep.GetLocalAddress()
		key = hdr.Tuple{LocalIP: local, RemoteIP: dst.Addr(), LocalPort: la.Port, RemotePort: dst.Port()}
		// The bound port is this endpoint's alone in netstack, so no
		// other dial can take the tuple between this check and the SYN.
		if (track && h.Driver.flows.addNew(key)) || (!track && h.Driver.flows.entry(key) == nil) {
			break
		}
		if len(busy) >= 64 {
			ep.Close()
			return nil, key, fmt.Errorf("tcpstack: dial %v: no local port whose 4-tuple is free (%d tried)", dst, len(busy)+1)
		}
		busy = append(busy, ep)
	}
	fail := func(err error) (tcpip.Endpoint, hdr.Tuple, error) {
		ep.Close()
		if track {
			h.Driver.flows.remove(key)
		}
		return nil, key, fmt.Errorf("tcpstack: dial %v: %w", dst, err)
	}
	we, ch := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	terr := ep.Connect(tcpip.FullAddress{NIC: nicID, Addr: tcpipAddr(dst.Addr()), Port: dst.Port()})
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ch:
			terr = ep.LastError()
		case <-ctx.Done():
			return fail(ctx.Err())
		}
	}
	if terr != nil {
		return fail(errors.New(terr.String()))
	}
	return ep, key, nil
}

// Delegate hands a tracked netstack connection to the offload unit. On
// failure wrapping ErrNotDelegated the connection stays usable on netstack;
// on ErrDelegationAbandoned (the device did not answer) it is lost, and
// Close on it does nothing.
func (h *Host) Delegate(t *TrackedConn) (*DelegatedConn, error) {
	o, err := h.offloader()
	if err != nil {
		return nil, err
	}
	if t.taken.Load() {
		return nil, fmt.Errorf("%w (earlier)", ErrDelegationAbandoned)
	}
	c, err := o.delegate(t.ep, t.wq, t.key, t.read.Load(), t.written.Load())
	if errors.Is(err, ErrDelegationAbandoned) {
		t.taken.Store(true)
	}
	return c, err
}

// Key is the connection's flow, as the host names it.
func (t *TrackedConn) Key() hdr.Tuple { return t.key }
