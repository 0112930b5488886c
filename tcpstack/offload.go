package tcpstack

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// OffloadConfig sizes the host memory of each delegated connection.
type OffloadConfig struct {
	MaxConns       int // delegated connections at once; default 256
	RecvBuffers    int // user buffers posted per connection; default 8
	RecvBufSize    int // bytes per user buffer; default 64 KiB
	SendBufSize    int // send area per connection; default 1 MiB
	MaxTxDescBytes int // largest transmit descriptor; default 64 KiB
	MaxTxBuffers   int // transmit descriptors queued per connection; default 256
	// CommandTimeout bounds each command round trip; default 2 s.
	CommandTimeout time.Duration
	// QuiesceTimeout bounds the wait for a connection to have nothing in
	// flight before it is delegated; default 2 s.
	QuiesceTimeout time.Duration
}

func (c *OffloadConfig) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = 256
	}
	if c.RecvBuffers == 0 {
		c.RecvBuffers = 8
	}
	if c.RecvBufSize == 0 {
		c.RecvBufSize = 64 << 10
	}
	if c.SendBufSize == 0 {
		c.SendBufSize = 1 << 20
	}
	if c.MaxTxBuffers == 0 {
		c.MaxTxBuffers = 256
	}
	if c.MaxTxDescBytes == 0 {
		c.MaxTxDescBytes = 64 << 10
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = 2 * time.Second
	}
	if c.QuiesceTimeout == 0 {
		c.QuiesceTimeout = 2 * time.Second
	}
}

// offloader is the host side of connection delegation for one NIC.
type offloader struct {
	drv *Driver
	cfg OffloadConfig

	mu      sync.Mutex
	conns   map[uint32]*DelegatedConn
	freeIdx []uint32
	scratch rings.Addr // state block / buffer descriptor scratch, under mu

	rdma verbsState // RDMA verbs on delegated connections (verbs.go)
}

func newOffloader(drv *Driver, cfg OffloadConfig) (*offloader, error) {
	cfg.setDefaults()
	o := &offloader{drv: drv, cfg: cfg, conns: make(map[uint32]*DelegatedConn)}
	for i := cfg.MaxConns - 1; i >= 0; i-- {
		o.freeIdx = append(o.freeIdx, uint32(i))
	}
	size := max(rings.ConnStateSize, cfg.RecvBuffers*rings.UserBufDescSize)
	var err error
	if o.scratch, err = drv.mem.Alloc(size, rings.CacheLine); err != nil {
		return nil, fmt.Errorf("offload: %w", err)
	}
	drv.SetDelegatedHandler(o.dispatch)
	return o, nil
}

func (o *offloader) dispatch(n *rings.Notification) {
	// RDMA events first: an NtfCQEvent's Conn is a CQ number, not a
	// connection index, so it must never reach the connection lookup.
	if o.rdma.route(n) {
		return
	}
	o.mu.Lock()
	c := o.conns[n.Conn]
	o.mu.Unlock()
	if c != nil {
		c.notify(n)
		return
	}
	// A notification for a connection the host no longer has: a legacy
	// buffer in it still goes back to the device.
	if n.Flags&rings.NtfLegacyUpload != 0 {
		o.drv.repostLegacy(n.Aux)
	}
}

// ErrNotDelegated is wrapped by delegation failures; the connection then
// stays on netstack.
var ErrNotDelegated = errors.New("connection not delegated")

// delegate moves an established netstack connection to the offload unit:
// freeze the flow in the driver (netstack neither receives nor sends from
// here on), wait until nothing is in flight, read the state the driver
// tracked, give it to the unit with OFFLOAD, post receive buffers, and
// abort the netstack endpoint (its RST is dropped by the frozen flow).
func (o *offloader) delegate(ep tcpip.Endpoint, key FlowKey, alreadyRead uint64) (*DelegatedConn, error) {
	t := &o.drv.flows
	deadline := time.Now().Add(o.cfg.QuiesceTimeout)
	var fi flowInfo
	for {
		var ok bool
		fi, ok = t.freeze(key, true)
		if !ok {
			return nil, fmt.Errorf("%w: flow %v not tracked", ErrNotDelegated, key)
		}
		if !fi.sawOurSyn || !fi.sawPeerSyn {
			t.freeze(key, false)
			return nil, fmt.Errorf("%w: handshake not seen by the NIC", ErrNotDelegated)
		}
		if fi.sndUna == fi.sndNxt {
			break
		}
		t.freeze(key, false)
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%w: %d bytes still unacknowledged", ErrNotDelegated, fi.sndNxt-fi.sndUna)
		}
		time.Sleep(time.Millisecond)
	}
	unfreeze := func() { t.freeze(key, false) }

	// Whatever netstack already received becomes the first bytes the
	// application reads. The driver counted every in-order byte it handed
	// netstack (RCV.NXT); netstack may still be processing some of them, so
	// read until all have arrived: a byte the NIC acknowledged on netstack's
	// behalf must never be lost.
	want := uint64(fi.rcvNxt-fi.irs-1) - alreadyRead
	if fi.peerFin {
		want--
	}
	// Peek first: if the bytes never all arrive, nothing was consumed and
	// the connection falls back to netstack intact.
	var pre bytes.Buffer
	for {
		pre.Reset()
		_, _ = ep.Read(&pre, tcpip.ReadOptions{Peek: true})
		if uint64(pre.Len()) >= want {
			break
		}
		if time.Now().After(deadline) {
			unfreeze()
			return nil, fmt.Errorf("%w: netstack holds %d of the %d bytes it received", ErrNotDelegated, pre.Len(), want)
		}
		time.Sleep(50 * time.Microsecond)
	}
	pre.Reset()
	for uint64(pre.Len()) < want {
		if _, err := ep.Read(&pre, tcpip.ReadOptions{}); err != nil {
			break
		}
	}

	o.mu.Lock()
	if len(o.freeIdx) == 0 {
		o.mu.Unlock()
		unfreeze()
		return nil, fmt.Errorf("%w: all %d connection slots in use", ErrNotDelegated, o.cfg.MaxConns)
	}
	idx := o.freeIdx[len(o.freeIdx)-1]
	o.freeIdx = o.freeIdx[:len(o.freeIdx)-1]
	o.mu.Unlock()

	c, err := o.newConn(idx, key, &fi)
	if err != nil {
		o.putIdx(idx)
		unfreeze()
		return nil, err
	}
	c.peerFin = fi.peerFin // delegated in CLOSE_WAIT: EOF after the data netstack had
	st := o.stateBlock(key, &fi)
	o.mu.Lock()
	o.conns[idx] = c
	blk, _ := o.drv.mem.Map(o.scratch, rings.ConnStateSize)
	st.Encode(rings.ConnStateBlock(blk))
	res, err := o.drv.Command(rings.Command{Opcode: rings.OpOffload, Conn: idx, Addr: o.scratch, Len: rings.ConnStateSize}, o.cfg.CommandTimeout)
	o.mu.Unlock()
	if err == nil && res.Status != rings.StatusOK {
		err = fmt.Errorf("OFFLOAD: %v", res.Status)
	}
	if err != nil {
		o.mu.Lock()
		delete(o.conns, idx)
		o.mu.Unlock()
		o.freeConn(c)
		o.putIdx(idx)
		unfreeze()
		return nil, fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	// From here the unit owns the flow; netstack's endpoint goes away and
	// the frozen flow swallows its RST.
	ep.Abort()
	ep.Close()
	if pre.Len() > 0 {
		c.chunks = append(c.chunks, rxChunk{data: pre.Bytes(), userID: -1})
	}
	// An RDMA connection gets no user buffers: its QP takes the byte
	// stream over inside the device (CREATE_QP refuses posted buffers).
	if !o.rdma.rawStream(key) {
		c.mu.Lock()
		for i := range c.rxBufs {
			o.repost(c, i)
		}
		c.mu.Unlock()
	}
	return c, nil
}

func (o *offloader) putIdx(idx uint32) {
	o.mu.Lock()
	o.freeIdx = append(o.freeIdx, idx)
	o.mu.Unlock()
}

func (o *offloader) stateBlock(key FlowKey, fi *flowInfo) rings.ConnState {
	st := rings.ConnState{
		Version: rings.ConnStateVersion, State: rings.StateEstablished,
		LocalIP: key.LocalIP, RemoteIP: key.RemoteIP, LocalPort: key.LocalPort, RemotePort: key.RemotePort,
		LocalMAC: fi.localMAC, NextHopMAC: fi.nextHopMAC,
		SndUna: fi.sndUna, SndNxt: fi.sndNxt, RcvNxt: fi.rcvNxt,
		SndWnd:       fi.peerWnd,
		RcvBufSize:   uint32(o.cfg.RecvBuffers * o.cfg.RecvBufSize),
		AckThreshold: uint32(o.cfg.SendBufSize / 4),
		MaxTxBuffers: uint16(o.cfg.MaxTxBuffers),
	}
	if fi.peerFin {
		st.State = rings.StateCloseWait
	}
	if fi.rtt > 0 {
		us := uint32(min(fi.rtt/1000, 60_000_000))
		st.SRTTus, st.RTTVarUs = max(us, 1), max(us/2, 1)
	}
	if fi.ourWS >= 0 && fi.peerWS >= 0 {
		st.SndWndScale, st.RcvWndScale = uint8(fi.peerWS), uint8(fi.ourWS)
	}
	st.RcvAdvertised = uint32(fi.ourWnd) << st.RcvWndScale
	mss := uint16(536)
	if fi.peerMSS != 0 {
		mss = fi.peerMSS
	}
	if m := uint16(o.drv.mtu - 40); mss > m {
		mss = m
	}
	st.MSS = mss
	if fi.ourSACK && fi.peerSACK {
		st.Flags |= rings.ConnSACKPermitted
	}
	if fi.ourTS && fi.peerTS {
		st.Flags |= rings.ConnTimestamps
		st.TSRecent, st.TSVal = fi.peerLastTS, fi.ourLastTS
	}
	return st
}

func (o *offloader) newConn(idx uint32, key FlowKey, fi *flowInfo) (*DelegatedConn, error) {
	c := &DelegatedConn{o: o, idx: idx, key: key, sndISS: fi.sndNxt}
	c.cond = sync.NewCond(&c.mu)
	c.local = &net.TCPAddr{IP: net.IP(key.LocalIP[:]), Port: int(key.LocalPort)}
	c.peer = &net.TCPAddr{IP: net.IP(key.RemoteIP[:]), Port: int(key.RemotePort)}
	mem := o.drv.mem
	var err error
	if c.sndBase, err = mem.Alloc(o.cfg.SendBufSize, rings.CacheLine); err != nil {
		return nil, fmt.Errorf("%w: send area: %v", ErrNotDelegated, err)
	}
	c.sndMem, _ = mem.Map(c.sndBase, o.cfg.SendBufSize)
	for i := 0; i < o.cfg.RecvBuffers; i++ {
		a, err := mem.Alloc(o.cfg.RecvBufSize, rings.CacheLine)
		if err != nil {
			o.freeConn(c)
			return nil, fmt.Errorf("%w: receive buffers: %v", ErrNotDelegated, err)
		}
		m, _ := mem.Map(a, o.cfg.RecvBufSize)
		c.rxBufs = append(c.rxBufs, a)
		c.rxBufMem = append(c.rxBufMem, m)
	}
	return c, nil
}

func (o *offloader) freeConn(c *DelegatedConn) {
	mem := o.drv.mem
	if c.sndBase != 0 {
		_ = mem.Free(c.sndBase)
		c.sndBase = 0
	}
	for _, a := range c.rxBufs {
		_ = mem.Free(a)
	}
	c.rxBufs, c.rxBufMem = nil, nil
}

// release frees a closed connection's index and host memory.
func (o *offloader) release(c *DelegatedConn) {
	o.mu.Lock()
	if o.conns[c.idx] != c {
		o.mu.Unlock()
		return
	}
	delete(o.conns, c.idx)
	o.mu.Unlock()
	if !c.aborted.Load() {
		// ABORT and DESTROY_QP already freed the index in the unit.
		_, _ = o.drv.Command(rings.Command{Opcode: rings.OpRelease, Conn: c.idx}, o.cfg.CommandTimeout)
	}
	o.drv.flows.remove(c.key)
	o.freeConn(c)
	o.putIdx(c.idx)
}

// repost gives user buffer id back to the unit. Called with c.mu held.
func (o *offloader) repost(c *DelegatedConn, id int) {
	if id >= len(c.rxBufs) || c.released || c.peerFin || c.rxErr != nil {
		return // the unit takes no more receive buffers once the peer closed
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	d, _ := o.drv.mem.Map(o.scratch, rings.UserBufDescSize)
	ub := rings.UserBuf{Addr: c.rxBufs[id], Len: uint32(len(c.rxBufMem[id])), ID: uint32(id)}
	ub.Encode(rings.UserBufDesc(d))
	_, _ = o.drv.Command(rings.Command{Opcode: rings.OpPostBuffers, Conn: c.idx, Addr: o.scratch,
		Len: rings.UserBufDescSize, Arg0: 1}, o.cfg.CommandTimeout)
}

// credit returns receive window for legacy-uploaded bytes the application
// consumed (UPDATE with Arg0 = bytes, like a TOE's RX_DATA_ACK).
func (o *offloader) credit(c *DelegatedConn, n uint32) {
	if c.released {
		return
	}
	_, _ = o.drv.Command(rings.Command{Opcode: rings.OpUpdate, Conn: c.idx, Arg0: n}, o.cfg.CommandTimeout)
}

func (o *offloader) command(c *DelegatedConn, op rings.Opcode, arg uint32) error {
	res, err := o.drv.Command(rings.Command{Opcode: op, Conn: c.idx, Arg0: arg}, o.cfg.CommandTimeout)
	if err != nil {
		return err
	}
	if res.Status != rings.StatusOK {
		return fmt.Errorf("%v: %v", op, res.Status)
	}
	return nil
}

// send queues one transmit descriptor for the connection.
func (o *offloader) send(c *DelegatedConn, a rings.Addr, n uint32, flags rings.TxFlags) error {
	return o.drv.sendDelegated(rings.Tx{Conn: c.idx, Addr: a, Len: n, Flags: flags})
}

// Offload turns on connection delegation for this host.
// Calling it again (or after the first delegation made one with the
// defaults) keeps the existing configuration. Safe for concurrent use.
func (h *Host) Offload(cfg OffloadConfig) error {
	h.offMu.Lock()
	defer h.offMu.Unlock()
	if h.off != nil {
		return nil
	}
	o, err := newOffloader(h.Driver, cfg)
	if err != nil {
		return err
	}
	h.off = o
	return nil
}

func (h *Host) offloader() (*offloader, error) {
	if err := h.Offload(OffloadConfig{}); err != nil {
		return nil, err
	}
	return h.off, nil
}

// DialOffload opens a connection with netstack (the handshake is netstack's)
// and delegates it to the offload unit before returning it.
func (h *Host) DialOffload(ctx context.Context, dst netip.AddrPort) (*DelegatedConn, error) {
	nc, err := h.DialTracked(ctx, dst)
	if err != nil {
		return nil, err
	}
	c, err := h.Delegate(nc)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return c, nil
}

// TrackedConn is a netstack connection whose frames the driver tracks, so it
// can be delegated later with Delegate.
type TrackedConn struct {
	*gonet.TCPConn
	ep   tcpip.Endpoint
	key  FlowKey
	drv  *Driver
	read atomic.Uint64 // bytes the application read before delegation
}

// Read implements net.Conn, counting what the application consumed so a
// later delegation knows which received bytes are still in netstack.
func (t *TrackedConn) Read(p []byte) (int, error) {
	n, err := t.TCPConn.Read(p)
	t.read.Add(uint64(n))
	return n, err
}

// Close closes the netstack connection and stops tracking it.
func (t *TrackedConn) Close() error {
	err := t.TCPConn.Close()
	t.drv.flows.remove(t.key)
	return err
}

// DialTracked opens a netstack connection whose state the NIC driver tracks
// from its first SYN, so it can be delegated at any later quiet point.
func (h *Host) DialTracked(ctx context.Context, dst netip.AddrPort) (*TrackedConn, error) {
	if !dst.Addr().Is4() {
		return nil, ErrNotIPv4
	}
	var wq waiter.Queue
	ep, terr := h.S.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if terr != nil {
		return nil, fmt.Errorf("tcpstack: endpoint: %s", terr)
	}
	local := h.Addr().As4()
	if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(local)}); terr != nil {
		ep.Close()
		return nil, fmt.Errorf("tcpstack: bind: %s", terr)
	}
	la, _ := ep.GetLocalAddress()
	key := FlowKey{LocalIP: local, RemoteIP: dst.Addr().As4(), LocalPort: la.Port, RemotePort: dst.Port()}
	h.Driver.flows.add(key)
	we, ch := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	terr = ep.Connect(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(dst.Addr().As4()), Port: dst.Port()})
	if _, ok := terr.(*tcpip.ErrConnectStarted); ok {
		select {
		case <-ch:
			terr = ep.LastError()
		case <-ctx.Done():
			ep.Close()
			h.Driver.flows.remove(key)
			return nil, fmt.Errorf("tcpstack: dial %v: %w", dst, ctx.Err())
		}
	}
	if terr != nil {
		ep.Close()
		h.Driver.flows.remove(key)
		return nil, fmt.Errorf("tcpstack: dial %v: %s", dst, terr)
	}
	return &TrackedConn{TCPConn: gonet.NewTCPConn(&wq, ep), ep: ep, key: key, drv: h.Driver}, nil
}

// Delegate hands a tracked netstack connection to the offload unit. On
// failure (wrapping ErrNotDelegated) the connection stays usable on netstack.
func (h *Host) Delegate(t *TrackedConn) (*DelegatedConn, error) {
	o, err := h.offloader()
	if err != nil {
		return nil, err
	}
	return o.delegate(t.ep, t.key, t.read.Load())
}

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
	// Fallbacks counts connections that stayed on netstack.
	Fallbacks int
	// FallbackErr says why the last connection stayed on netstack.
	FallbackErr error
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
	h.Driver.flows.listenOn(l.ip, port, true)
	if terr := ep.Listen(128); terr != nil {
		ep.Close()
		h.Driver.flows.listenOn(l.ip, port, false)
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
		key := FlowKey{LocalIP: l.ip, RemoteIP: peer.Addr.As4(), LocalPort: l.port, RemotePort: peer.Port}
		c, err := l.h.off.delegate(n, key, 0)
		if err != nil {
			l.Fallbacks, l.FallbackErr = l.Fallbacks+1, err
			l.h.Driver.flows.remove(key)
			return gonet.NewTCPConn(wq, n), nil
		}
		return c, nil
	}
}

// Close stops listening.
func (l *OffloadListener) Close() error {
	l.once.Do(func() {
		l.ep.Close()
		l.h.Driver.flows.listenOn(l.ip, l.port, false)
	})
	return nil
}

// Addr returns the listening address.
func (l *OffloadListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(l.ip[:]), Port: int(l.port)}
}
