package verbs

// Connection management (librdmacm): DialRDMA (rdma_connect), ListenRDMA
// (rdma_listen), connect requests answered with Accept or Reject, MPA
// private data.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// DialRDMA connects to an RDMA listener (rdma_connect): a TCP connection
// opened by netstack and delegated without user buffers, CREATE_QP as the
// MPA initiator with attr, attr.Setup, MODIFY_QP CONNECT (the MPA request
// with attr.PrivateData), and the wait for the reply (QPEvEstablished). A
// rejection is ErrRejected.
func (v *Provider) DialRDMA(ctx context.Context, dst netip.AddrPort, attr QPAttr) (*QP, error) {
	if err := attr.check(v); err != nil {
		return nil, err
	}
	nc, err := v.h.DialTracked(ctx, dst)
	if err != nil {
		return nil, fmt.Errorf("verbs: dial %v: %w", dst, err)
	}
	v.markFlow(nc.Key(), &attr)
	c, err := v.h.Delegate(nc) // OFFLOAD and CREATE_QP (PrepareDelegation)
	v.markFlow(nc.Key(), nil)
	if err != nil {
		nc.Close()
		return nil, fmt.Errorf("verbs: dial %v: %w", dst, err)
	}
	fail := func(qp *QP, err error) (*QP, error) {
		if qp != nil {
			_ = qp.Destroy()
		} else {
			_ = c.Abort()
		}
		return nil, fmt.Errorf("verbs: dial %v: %w", dst, err)
	}
	qp, err := v.adoptQP(c)
	if err != nil {
		return fail(qp, err)
	}
	if attr.Setup != nil {
		if err := attr.Setup(qp); err != nil {
			return fail(qp, err)
		}
	}
	// No grace for the responder: an MPA request that reaches it before
	// its delegation is held there and injected behind its CREATE_QP.
	if err := qp.modify(rings.QPConnect, nil); err != nil {
		return fail(qp, err)
	}
	if err := qp.WaitEstablished(ctx); err != nil {
		return fail(qp, err)
	}
	if attr.PeerToPeer {
		// The engine sends the RTR at the first doorbell after the reply.
		if attr.RTRDelay > 0 {
			t := v.h.NewTimer(attr.RTRDelay)
			select {
			case <-t.C:
			case <-ctx.Done():
				t.Stop()
				return fail(qp, ctx.Err())
			}
		}
		if err := qp.doorbell(); err != nil {
			return fail(qp, err)
		}
	}
	return qp, nil
}

// RDMAListener accepts RDMA connections (rdma_listen). Every connection
// netstack accepts is delegated without user buffers and given a responder
// QP at once, in the background (a peer's MPA request that arrives before
// is held and injected behind the QP's CREATE_QP); once the request is
// there the connection is offered to GetRequest
// (RDMA_CM_EVENT_CONNECT_REQUEST).
type RDMAListener struct {
	v    *Provider
	ol   *tcpstack.OffloadListener
	keys []listenKey // one per interface address
	attr QPAttr
	reqs chan *ConnRequest
	done chan struct{}
	once sync.Once
	wg   sync.WaitGroup

	failed  atomic.Uint64
	errMu   sync.Mutex
	lastErr error
}

// ConnRequest is a peer's valid MPA request on a responder QP, waiting for
// Accept or Reject. The QP exists: post receives on it before accepting.
type ConnRequest struct {
	qp   *QP
	once sync.Once
}

// PrivateData is the private data of the peer's MPA request: what the
// upper protocol (LWIO, sockets direct) negotiates with.
func (r *ConnRequest) PrivateData() []byte { return r.qp.PeerPrivateData() }

// PeerPrivateData is the private data of the peer's MPA request (on a
// responder) or reply (on an initiator), nil if it sent none.
func (qp *QP) PeerPrivateData() []byte {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.v.copied(len(qp.peerPriv))
	return append([]byte(nil), qp.peerPriv...)
}

// ListenRDMA listens on port; attr is used for every accepted connection's
// QP (its Setup runs for each, and its PrivateData is the default reply).
func (v *Provider) ListenRDMA(port uint16, attr QPAttr) (*RDMAListener, error) {
	if err := attr.check(v); err != nil {
		return nil, err
	}
	if attr.ConnectTimeout == 0 {
		attr.ConnectTimeout = DefaultConnectTimeout
	}
	// Every address of the host, IPv4 and IPv6 alike: a peer reaches
	// the listener on whichever it dialled.
	var keys []listenKey
	for _, p := range v.h.Addrs() {
		keys = append(keys, listenKey{p.Addr().Unmap(), port})
	}
	l := &RDMAListener{v: v, keys: keys, attr: attr, reqs: make(chan *ConnRequest, 64), done: make(chan struct{})}
	// Before netstack listens: no early byte may slip through, and every
	// accepted connection is delegated with its QP.
	if err := v.listenOn(keys, &l.attr); err != nil {
		return nil, err
	}
	ol, err := v.h.ListenOffload(port)
	if err != nil {
		_ = v.listenOn(keys, nil)
		return nil, fmt.Errorf("verbs: %w", err)
	}
	l.ol = ol
	l.wg.Add(1)
	go l.acceptLoop()
	return l, nil
}

func (l *RDMAListener) fail(err error) {
	l.failed.Add(1)
	l.errMu.Lock()
	l.lastErr = err
	l.errMu.Unlock()
}

func (l *RDMAListener) acceptLoop() {
	defer l.wg.Done()
	for {
		nc, err := l.ol.Accept()
		select {
		case <-l.done:
			if c, ok := nc.(*tcpstack.DelegatedConn); ok {
				l.discard(c)
			} else if nc != nil {
				nc.Close()
			}
			return
		default:
		}
		if err != nil {
			l.fail(err)
			time.Sleep(time.Millisecond)
			continue
		}
		c, ok := nc.(*tcpstack.DelegatedConn)
		if !ok {
			// Delegation failed: the connection stayed on netstack.
			l.fail(fmt.Errorf("verbs: accept: %v", l.ol.FallbackErr()))
			nc.Close()
			continue
		}
		l.wg.Add(1)
		go l.setup(c)
	}
}

// discard drops an accepted connection and the QP made with it.
func (l *RDMAListener) discard(c *tcpstack.DelegatedConn) {
	if qp, err := l.v.adoptQP(c); qp != nil {
		_ = qp.Destroy()
	} else {
		_ = c.Abort()
		if err != nil {
			l.fail(err)
		}
	}
}

// setup takes the responder QP made with an accepted connection's OFFLOAD
// and waits for the peer's MPA request.
func (l *RDMAListener) setup(c *tcpstack.DelegatedConn) {
	defer l.wg.Done()
	qp, err := l.v.adoptQP(c)
	if err != nil {
		if qp != nil {
			_ = qp.Destroy()
		} else {
			_ = c.Abort()
		}
		l.fail(err)
		return
	}
	if l.attr.Setup != nil {
		if err := l.attr.Setup(qp); err != nil {
			_ = qp.Destroy()
			l.fail(err)
			return
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.attr.ConnectTimeout)
	go func() {
		select {
		case <-l.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	err = qp.wait(ctx, func() (bool, error) {
		if qp.state == QPStateConnectRequest {
			return true, nil
		}
		if qp.state >= QPStateClosing {
			return false, qp.stateErr()
		}
		return false, nil
	})
	cancel()
	if err != nil {
		_ = qp.Destroy()
		l.fail(err)
		return
	}
	req := &ConnRequest{qp: qp}
	select {
	case l.reqs <- req:
	default:
		// Backlog full: refuse rather than keep the peer waiting.
		_ = req.Reject(nil)
		l.fail(errors.New("verbs: listener backlog full: connection rejected"))
	}
}

// GetRequest waits for the next connection request.
func (l *RDMAListener) GetRequest(ctx context.Context) (*ConnRequest, error) {
	select {
	case r := <-l.reqs:
		return r, nil
	case <-l.done:
		return nil, ErrListenerClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Accept waits for a connection request and accepts it with the
// listener's private data: the QP is returned in ACCEPTED (it may post;
// its sends go out once the initiator's first message arrived, as MPA
// requires).
func (l *RDMAListener) Accept(ctx context.Context) (*QP, error) {
	r, err := l.GetRequest(ctx)
	if err != nil {
		return nil, err
	}
	if err := r.Accept(l.attr.PrivateData); err != nil {
		return nil, err
	}
	return r.QP(), nil
}

// Failed counts connections that did not become requests; LastError says
// why the last one failed.
func (l *RDMAListener) Failed() uint64 { return l.failed.Load() }

// LastError is why the last failed connection failed.
func (l *RDMAListener) LastError() error {
	l.errMu.Lock()
	defer l.errMu.Unlock()
	return l.lastErr
}

// Addr returns the listening address.
func (l *RDMAListener) Addr() net.Addr { return l.ol.Addr() }

// Close stops listening; requests not yet taken are rejected.
func (l *RDMAListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		_ = l.ol.Close()
		l.wg.Wait()
		_ = l.v.listenOn(l.keys, nil)
		for {
			select {
			case r := <-l.reqs:
				_ = r.Reject(nil)
			default:
				return
			}
		}
	})
	return nil
}

// QP is the request's responder QP.
func (r *ConnRequest) QP() *QP { return r.qp }

// RemoteAddr is the requesting peer.
func (r *ConnRequest) RemoteAddr() net.Addr { return r.qp.remote }

// Accept sends the MPA reply with privateData (rdma_accept; nil: the
// listener's). The QP may post at once; it reaches RTS when the
// initiator's first message arrives (WaitEstablished).
func (r *ConnRequest) Accept(privateData []byte) error {
	err := errors.New("verbs: connection request already answered")
	r.once.Do(func() {
		err = r.qp.modify(rings.QPAccept, privateData)
		if err != nil {
			_ = r.qp.Destroy()
		}
	})
	return err
}

// Reject refuses the request (rdma_reject): the MPA reply with the reject
// bit and privateData goes out, the connection closes and the QP is
// destroyed.
func (r *ConnRequest) Reject(privateData []byte) error {
	err := errors.New("verbs: connection request already answered")
	r.once.Do(func() {
		qp := r.qp
		err = qp.modify(rings.QPReject, privateData)
		if err != nil {
			_ = qp.Destroy()
			return
		}
		// Let the reply and the FIN go out before DESTROY_QP aborts
		// the connection.
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
			_ = qp.wait(ctx, func() (bool, error) { return qp.llpClosed, nil })
			cancel()
			_ = qp.Destroy()
		}()
	})
	return err
}
