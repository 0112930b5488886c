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

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"
)

// OffloadConfig sizes delegation. Host memory follows data, not
// connections: a delegated connection's send bytes and receive buffers come
// from one pool shared by all of them (bufpool.go), taken while data is in
// flight and given back after, so ten thousand mostly idle connections
// cost next to nothing. The pool grows from the host's arena
// (HostConfig.ArenaSize) up to PoolBytes.
type OffloadConfig struct {
	// MaxConns is delegated connections at once; default the device's
	// connection table (delegation.DefaultMaxConns, 10,000).
	MaxConns    int
	RecvBuffers int // user buffers a streaming connection may have posted; default 8
	RecvBufSize int // bytes per user buffer; default 64 KiB (at most 64 KiB, the pool's largest class)
	SendBufSize int // unacknowledged send bytes per connection before Write waits; default 1 MiB
	// PoolBytes bounds the host memory the pool takes from the arena;
	// default 0: as much as the arena has. When the pool is exhausted a
	// Write waits for memory another connection frees, and a connection
	// receives through the shared legacy buffers instead of its own.
	PoolBytes      int64
	MaxTxDescBytes int // largest transmit descriptor; default 64 KiB
	MaxTxBuffers   int // transmit descriptors queued per connection; default 256
	// CommandTimeout bounds each command round trip; default 2 s.
	CommandTimeout time.Duration
	// QuiesceTimeout bounds the wait for a connection to have nothing in
	// flight before it is delegated; default 2 s.
	QuiesceTimeout time.Duration
	// Congestion is the congestion control delegated connections start
	// with; the zero value is CUBIC (rings.CCCubic), as in Linux.
	// DelegatedConn.SetCongestionControl changes one connection's.
	Congestion rings.CongestionControl
}

func (c *OffloadConfig) setDefaults() {
	if c.MaxConns == 0 {
		c.MaxConns = delegation.DefaultMaxConns
	}
	if c.RecvBuffers == 0 {
		c.RecvBuffers = 8
	}
	if c.RecvBufSize == 0 || c.RecvBufSize > bufMaxClass {
		c.RecvBufSize = bufMaxClass
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

	pool *bufPool

	mu      sync.Mutex
	conns   map[uint32]*DelegatedConn
	freeIdx []uint32
	isFree  []bool // isFree[i]: i is on freeIdx (putIdx never adds one twice)
	// quarantined are connection indices held back because the device has
	// not answered a command that names them (an OFFLOAD, ABORT or RELEASE
	// timed out or was lost): the index, the connection's host memory and
	// its frozen flow wait for the answer, never reused before.
	quarantined map[uint32]error

	rdma rdmaSlot // the RDMA provider, once attached (rdmahost.go)

	// quiesceRetries counts delegations that let a frozen flow through
	// again because netstack had not taken what the driver handed it
	// (OffloadUsage.QuiesceRetries).
	quiesceRetries atomic.Uint64
}

// quiesceStall is how long a delegation waits, its flow frozen, for
// netstack to take bytes the driver handed it before it concludes netstack
// dropped them and lets the peer's resend through. netstack's own
// processing lag is microseconds; a resend takes the peer's RTO.
const quiesceStall = 20 * time.Millisecond

func newOffloader(drv *Driver, cfg OffloadConfig) (*offloader, error) {
	cfg.setDefaults()
	o := &offloader{drv: drv, cfg: cfg, conns: make(map[uint32]*DelegatedConn), quarantined: make(map[uint32]error),
		pool: newBufPool(drv.mem, cfg.PoolBytes), isFree: make([]bool, cfg.MaxConns)}
	for i := cfg.MaxConns - 1; i >= 0; i-- {
		o.freeIdx = append(o.freeIdx, uint32(i))
		o.isFree[i] = true
	}
	drv.SetDelegatedHandler(o.dispatch)
	return o, nil
}

func (o *offloader) dispatch(n *rings.Notification) {
	// RDMA events first: an NtfCQEvent's Conn is a CQ number, not a
	// connection index, so it must never reach the connection lookup.
	if hk := o.rdma.get(); hk != nil && hk.Route(n) {
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

// errRefused: the unit refused the OFFLOAD (a status other than OK).
var errRefused = errors.New("refused by the unit")

// ErrDelegationAbandoned is wrapped when the device did not answer a
// connection's OFFLOAD: the connection is neither netstack's nor usable
// delegated, and is lost to the caller. The host keeps its flow frozen and
// its index and memory quarantined until the device answers, then resets
// it (an ABORT if the device took it, netstack's RST otherwise).
var ErrDelegationAbandoned = errors.New("delegation abandoned: the device did not answer OFFLOAD")

// delegate moves an established netstack connection to the offload unit:
// freeze the flow in the driver (netstack neither receives nor sends from
// here on), wait until nothing is in flight, read the state the driver
// tracked, give it to the unit with OFFLOAD (plus, in the same publish, its
// receive buffers, or an RDMA connection's CREATE_QP), and abort the
// netstack endpoint (its RST is dropped by the frozen flow). wq is the
// endpoint's waiter queue: the drain waits on its readable events.
func (o *offloader) delegate(ep tcpip.Endpoint, wq *waiter.Queue, key FlowKey, alreadyRead, written uint64) (*DelegatedConn, error) {
	t := &o.drv.flows
	// thaw unfreezes the flow: netstack has it again, and gets the
	// peer's frames the driver held meanwhile.
	thaw := func() {
		if fi, ok := t.freeze(key, false); ok {
			o.drv.redeliver(fi.held)
		}
	}
	timer := o.drv.newTimer(o.cfg.QuiesceTimeout)
	defer timer.Stop()
	// The endpoint's readable event says when netstack has taken more of
	// what the driver handed it (below).
	we, readable := waiter.NewChannelEntry(waiter.ReadableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	var stall *Timer
	var fi flowInfo
	var pre bytes.Buffer
	var want uint64
quiesce:
	for {
		var ok bool
		fi, ok = t.freeze(key, true)
		if !ok {
			return nil, fmt.Errorf("%w: flow %v not tracked", ErrNotDelegated, key)
		}
		if !fi.sawOurSyn || !fi.sawPeerSyn {
			thaw()
			return nil, fmt.Errorf("%w: handshake not seen by the NIC", ErrNotDelegated)
		}
		// Nothing unacknowledged, and nothing the application wrote
		// still unsent in netstack (a zero window holds it there):
		// aborting the endpoint would lose it.
		sent := uint64(fi.sndNxt - fi.iss - 1)
		if fi.ourFin {
			sent--
		}
		if fi.sndUna != fi.sndNxt || sent < written {
			// Data in flight: let netstack finish it and try again at
			// the next ACK that moves SND.UNA.
			thaw()
			acked, ok := t.ackedChan(key)
			if !ok {
				return nil, fmt.Errorf("%w: flow %v not tracked", ErrNotDelegated, key)
			}
			select {
			case <-acked:
			case <-timer.C:
				return nil, fmt.Errorf("%w: %d bytes still unacknowledged, %d unsent (the NIC saw %d segments out, %d in)", ErrNotDelegated, fi.sndNxt-fi.sndUna, written-min(sent, written), fi.outSegments, fi.inSegments)
			}
			continue
		}

		// Whatever netstack already received becomes the first bytes the
		// application reads. The driver counted every in-order byte it
		// handed netstack (RCV.NXT); netstack may still be processing some
		// of them, so read until all have arrived: a byte the NIC
		// acknowledged on netstack's behalf must never be lost. Peek
		// only: the bytes stay netstack's until the unit has taken the
		// connection (then netstack's endpoint goes), so a connection the
		// unit refuses falls back to netstack intact.
		want = uint64(fi.rcvNxt-fi.irs-1) - alreadyRead
		if fi.peerFin {
			want--
		}
		for {
			pre.Reset()
			_, _ = ep.Read(&pre, tcpip.ReadOptions{Peek: true})
			if uint64(pre.Len()) >= want {
				break quiesce
			}
			if stall == nil {
				stall = o.drv.newTimer(quiesceStall)
				defer stall.Stop()
			} else {
				stall.Reset(quiesceStall)
			}
			select {
			case <-readable:
				continue // more arrived: look again, the flow still frozen
			case <-stall.C:
			case <-timer.C:
				thaw()
				return nil, fmt.Errorf("%w: netstack holds %d of the %d bytes it received", ErrNotDelegated, pre.Len(), want)
			}
			// Nothing for quiesceStall: netstack dropped what the driver
			// handed it (its listener drops data that races a handshake
			// it completes from a SYN cookie) and has not acknowledged
			// it. The peer resends it, and a frozen flow would hold the
			// resend: let the flow through until netstack takes more,
			// then freeze it and look again.
			o.quiesceRetries.Add(1)
			thaw()
			select {
			case <-readable:
			case <-timer.C:
				return nil, fmt.Errorf("%w: netstack holds %d of the %d bytes it received", ErrNotDelegated, pre.Len(), want)
			}
			continue quiesce
		}
	}
	unfreeze := thaw
	flow := t.entry(key)

	o.mu.Lock()
	if len(o.freeIdx) == 0 {
		o.mu.Unlock()
		unfreeze()
		return nil, fmt.Errorf("%w: all %d connection slots in use (%d quarantined)", ErrNotDelegated, o.cfg.MaxConns, o.quarantinedConns())
	}
	idx := o.freeIdx[len(o.freeIdx)-1]
	o.freeIdx = o.freeIdx[:len(o.freeIdx)-1]
	o.isFree[idx] = false
	o.mu.Unlock()

	c, err := o.newConn(idx, key, &fi)
	if err != nil {
		o.putIdx(idx)
		unfreeze()
		return nil, err
	}
	c.flow = flow
	c.peerFin = fi.peerFin // delegated in CLOSE_WAIT: EOF after the data netstack had
	if pre.Len() > 0 {
		// Ahead of anything the unit delivers: its buffers are posted
		// in the OFFLOAD's publish, and data may come at once.
		c.pushChunk(rxChunk{data: pre.Bytes(), userID: -1})
	}
	// An RDMA connection gets no user buffers: its QP takes the byte
	// stream over inside the device (CREATE_QP refuses posted buffers),
	// and its CREATE_QP goes in the OFFLOAD's publish.
	var prep RDMADelegation
	if hk := o.rdma.get(); hk != nil {
		prep, err = hk.PrepareDelegation(idx, key)
	}
	if err != nil {
		o.freeConn(c)
		o.putIdx(idx)
		unfreeze()
		return nil, fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	var blk [rings.ConnStateSize]byte
	st := o.stateBlock(key, &fi)
	st.Encode(rings.ConnStateBlock(blk[:]))
	reqs := []cmdReq{{c: rings.Command{Opcode: rings.OpOffload, Conn: idx}, param: blk[:]}}
	// No receive buffers yet: the connection's first bytes come through
	// the shared legacy buffers, and it gets buffers of its own only if
	// it keeps receiving (growRecv).
	o.mu.Lock()
	o.conns[idx] = c // its notifications may come as soon as the unit has it
	o.mu.Unlock()
	var tk *cmdTicket
	if prep == nil {
		tk, err = o.drv.submit(reqs, true, nil)
	} else {
		err = prep.Publish(func(follow []HostCommand) error {
			var serr error
			tk, serr = o.drv.submit(append(reqs, cmdReqs(follow)...), true, nil)
			return serr
		})
	}
	if err == nil {
		res := make([]rings.Command, len(tk.reqs))
		late := func(res []rings.Command, err error) { o.offloadLate(c, ep, prep, res, err) }
		err = o.drv.wait(tk, o.cfg.CommandTimeout, late, res)
		if err == nil && res[0].Status != rings.StatusOK {
			err = fmt.Errorf("OFFLOAD: %v (%w)", res[0].Status, errRefused)
		}
		if err == nil {
			c = o.delegated(c, ep, prep, res)
			// The peer's frames that arrived while the flow was frozen
			// go to the unit now, as if just received (RX_INJECT; TCP
			// sorts out their order with anything newer).
			if held := t.takeHeld(key); len(held) > 0 {
				reqs := make([]cmdReq, len(held))
				for i, f := range held {
					reqs[i] = cmdReq{c: rings.Command{Opcode: rings.OpRxInject, Conn: idx}, param: f}
				}
				_ = o.drv.submitAsync(reqs, func([]rings.Command, error) {}) // a refused one is a loss TCP repairs
			}
			return c, nil
		}
	}
	if errors.Is(err, ErrNotSubmitted) || errors.Is(err, errRefused) {
		// The unit does not have the connection: it stays on netstack.
		o.dropConn(c, prep)
		unfreeze()
		return nil, fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	// Timed out (still in flight), lost or closed: the outcome is unknown,
	// so the index, the memory and the frozen flow stay as they are until
	// the late answer (offloadLate); the caller has lost the connection.
	c.mu.Lock()
	c.closed, c.abandoned = true, true
	c.cmdFailLocked(err) // and no command for it meanwhile
	c.mu.Unlock()
	o.quarantine(idx, err)
	if !errors.Is(err, ErrCommandTimeout) {
		// No late answer will come: netstack's endpoint goes now (its
		// RST dropped by the frozen flow); the rest stays quarantined.
		ep.Abort()
		ep.Close()
	}
	return nil, fmt.Errorf("%w: %w", ErrDelegationAbandoned, err)
}

// delegated finishes a delegation the unit took.
func (o *offloader) delegated(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, res []rings.Command) *DelegatedConn {
	// From here the unit owns the flow; netstack's endpoint goes away
	// (with the bytes it held: the connection's first chunk has them) and
	// the frozen flow swallows its RST.
	ep.Abort()
	ep.Close()
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case prep != nil:
		prep.Done(res[1])
	}
	return c
}

// offloadLate is the late answer to an OFFLOAD whose waiter gave up (on a
// reaper goroutine: it must not block).
func (o *offloader) offloadLate(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, res []rings.Command, err error) {
	switch {
	case err != nil:
		// Lost, or the driver closed: the outcome stays unknown, and so
		// the index and memory stay quarantined.
		o.quarantine(c.idx, err)
		go func() { ep.Abort(); ep.Close() }()
	case res[0].Status == rings.StatusOK:
		// The unit installed the connection after we gave up on it:
		// take it down (ABORT resets the peer and frees the index in
		// the unit; an RDMA connection's QP goes with it).
		abort := []cmdReq{{c: rings.Command{Opcode: rings.OpAbort, Conn: c.idx}}}
		if serr := o.drv.submitAsync(abort, func(r []rings.Command, err error) {
			if err == nil && (r[0].Status == rings.StatusOK || r[0].Status == rings.StatusBadConn) {
				go o.dropAbandoned(c, ep, prep, false)
				return
			}
			if err == nil {
				err = fmt.Errorf("ABORT: %v", r[0].Status)
			}
			o.quarantine(c.idx, fmt.Errorf("abandoned connection not taken down: %w", err))
			go func() { ep.Abort(); ep.Close() }()
		}); serr != nil {
			o.quarantine(c.idx, serr)
		}
	default:
		// Refused: the unit never had it.
		go o.dropAbandoned(c, ep, prep, true)
	}
}

// dropAbandoned frees a connection whose delegation was abandoned once the
// unit no longer has it. With reset, netstack's endpoint resets the peer
// (the flow is unfrozen first); without, the unit already did.
func (o *offloader) dropAbandoned(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, reset bool) {
	if reset {
		o.drv.flows.removeEntry(c.key, c.flow)
	}
	ep.Abort()
	ep.Close()
	o.drv.flows.removeEntry(c.key, c.flow)
	o.dropConn(c, prep)
	o.unquarantine(c.idx)
}

// dropConn forgets a connection the unit does not have and frees its index
// and memory.
func (o *offloader) dropConn(c *DelegatedConn, prep RDMADelegation) {
	if prep != nil {
		prep.Discard()
	}
	o.mu.Lock()
	if o.conns[c.idx] == c {
		delete(o.conns, c.idx)
	}
	o.mu.Unlock()
	o.forgetRDMA(c.key)
	o.freeConn(c)
	o.putIdx(c.idx)
}

// quarantine records why connection index idx is held back.
func (o *offloader) quarantine(idx uint32, why error) {
	o.mu.Lock()
	_, again := o.quarantined[idx]
	o.quarantined[idx] = why
	o.mu.Unlock()
	if !again {
		o.drv.quarantine(1)
	}
}

func (o *offloader) unquarantine(idx uint32) {
	o.mu.Lock()
	_, ok := o.quarantined[idx]
	delete(o.quarantined, idx)
	o.mu.Unlock()
	if ok {
		o.drv.quarantine(-1)
	}
}

// quarantinedConns counts the indices held back (o.mu held).
func (o *offloader) quarantinedConns() int { return len(o.quarantined) }

func (o *offloader) putIdx(idx uint32) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.isFree[idx] {
		return // never twice: two connections would share it
	}
	o.isFree[idx] = true
	o.freeIdx = append(o.freeIdx, idx)
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
		Congestion:   o.cfg.Congestion,
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
	return c, nil
}

// freeConn gives a connection's host memory back: only once the unit no
// longer has the connection (it places into the receive buffers and reads
// the send chunks).
func (o *offloader) freeConn(c *DelegatedConn) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.freeStreamLocked()
}

// release frees a closed connection's index and host memory, once the unit
// has let go of it (RELEASE; ABORT and DESTROY_QP already freed the index
// in the unit). It never waits: the answer comes on a reaper goroutine.
func (o *offloader) release(c *DelegatedConn) {
	o.mu.Lock()
	if o.conns[c.idx] != c {
		o.mu.Unlock()
		return
	}
	delete(o.conns, c.idx)
	o.mu.Unlock()
	if c.aborted.Load() {
		o.released(c)
		return
	}
	rel := []cmdReq{{c: rings.Command{Opcode: rings.OpRelease, Conn: c.idx}}}
	if err := o.drv.submitAsync(rel, func(r []rings.Command, err error) { o.releaseLate(c, r[0], err) }); err != nil {
		o.quarantine(c.idx, err)
	}
}

func (o *offloader) releaseLate(c *DelegatedConn, r rings.Command, err error) {
	switch {
	case err != nil:
		o.quarantine(c.idx, fmt.Errorf("RELEASE: %w", err))
	case r.Status == rings.StatusOK || r.Status == rings.StatusBadConn:
		o.released(c)
	case r.Opcode == rings.OpRelease && r.Status == rings.StatusBadState:
		// Not closed in the unit (the host gave up on it first): reset
		// it, which frees the index too.
		abort := []cmdReq{{c: rings.Command{Opcode: rings.OpAbort, Conn: c.idx}}}
		if serr := o.drv.submitAsync(abort, func(r []rings.Command, err error) { o.releaseLate(c, r[0], err) }); serr != nil {
			o.quarantine(c.idx, serr)
		}
	default:
		o.quarantine(c.idx, fmt.Errorf("%v: %v", r.Opcode, r.Status))
	}
}

// released frees what the host kept for a connection the unit no longer
// has.
func (o *offloader) released(c *DelegatedConn) {
	o.drv.flows.removeEntry(c.key, c.flow)
	o.forgetRDMA(c.key)
	o.freeConn(c)
	o.putIdx(c.idx)
	o.unquarantine(c.idx)
}

// postReq is the POST_BUFFERS of user buffers ids.
func (o *offloader) postReq(c *DelegatedConn, ids ...int) cmdReq {
	p := make([]byte, len(ids)*rings.UserBufDescSize)
	for i, id := range ids {
		b := &c.rxBufs[id]
		ub := rings.UserBuf{Addr: b.addr, Len: uint32(len(b.mem)), ID: uint32(id)}
		ub.Encode(rings.UserBufDesc(p[i*rings.UserBufDescSize:]))
	}
	return cmdReq{c: rings.Command{Opcode: rings.OpPostBuffers, Conn: c.idx, Arg0: uint32(len(ids))}, param: p}
}

// growRecv gives a connection that keeps receiving user buffers of its
// own from the pool, up to RecvBuffers, posted without waiting. With the
// pool exhausted it posts fewer or none: the connection goes on receiving
// through the legacy buffers. Called with c.mu held.
func (o *offloader) growRecv(c *DelegatedConn) {
	if c.released || c.peerFin || c.closed || c.rxErr != nil || c.cmdErr != nil {
		return
	}
	var ids []int
	for id := 0; id < o.cfg.RecvBuffers; id++ {
		if id < len(c.rxBufs) && c.rxBufs[id].addr != 0 {
			continue
		}
		a, mem, ok := o.pool.get(o.cfg.RecvBufSize)
		if !ok {
			break
		}
		if id == len(c.rxBufs) {
			c.rxBufs = append(c.rxBufs, rxBuf{})
		}
		c.rxBufs[id] = rxBuf{addr: a, mem: mem}
		ids = append(ids, id)
	}
	if len(ids) > 0 {
		o.asyncLocked(c, o.postReq(c, ids...))
	}
}

// repost gives user buffer id back to the unit, without waiting (it runs
// on the interrupt goroutine and under the connection's lock); a refusal
// surfaces on the connection. Called with c.mu held.
func (o *offloader) repost(c *DelegatedConn, id int) {
	if id >= len(c.rxBufs) || c.rxBufs[id].addr == 0 {
		return
	}
	if c.released || c.peerFin || c.rxErr != nil || c.cmdErr != nil {
		c.dropRxBuf(id) // the unit takes no more receive buffers once the peer closed
		return
	}
	o.asyncLocked(c, o.postReq(c, id))
}

// credit returns receive window for legacy-uploaded bytes the application
// consumed (UPDATE with Arg0 = bytes, like a TOE's RX_DATA_ACK), without
// waiting. A connection has at most one credit in the command ring: what
// the reader frees meanwhile adds up in creditDue and goes in one UPDATE
// when the one in flight completes. Otherwise a reader taking small reads
// puts an UPDATE in the ring per read, and a device slow to answer one
// command of the connection (a held repost) sees the ring fill with
// credits behind it, the rest queue, and the window never reopens.
// Called with c.mu held.
func (o *offloader) credit(c *DelegatedConn) {
	if c.released || c.cmdErr != nil || c.creditBusy || c.creditDue == 0 {
		return
	}
	n := uint32(c.creditDue)
	c.creditDue, c.creditBusy = 0, true
	o.asyncThen(c, cmdReq{c: rings.Command{Opcode: rings.OpUpdate, Conn: c.idx, Arg0: n}}, func() {
		c.mu.Lock()
		c.creditBusy = false
		o.credit(c)
		c.mu.Unlock()
	})
}

// asyncLocked submits a command of connection c without waiting; a
// failure (status, lost, not submitted) becomes the connection's error,
// which its next Read or Write returns. Called with c.mu held.
func (o *offloader) asyncLocked(c *DelegatedConn, r cmdReq) { o.asyncThen(c, r, nil) }

// asyncThen is asyncLocked with then, if set, called (without c.mu) once
// the command completed or failed, after the failure is recorded; a
// command that was not submitted at all calls nothing.
func (o *offloader) asyncThen(c *DelegatedConn, r cmdReq, then func()) {
	err := o.drv.submitAsync([]cmdReq{r}, func(res []rings.Command, err error) {
		if err = o.checkResult(res[0], err); err != nil {
			c.mu.Lock()
			c.cmdFailLocked(err)
			c.mu.Unlock()
		}
		if then != nil {
			then()
		}
	})
	if err != nil {
		c.cmdFailLocked(fmt.Errorf("%v: %w", r.c.Opcode, err))
	}
}

// checkResult turns a write-back (or its absence) into an error.
func (o *offloader) checkResult(r rings.Command, err error) error {
	if err != nil {
		return fmt.Errorf("%v: %w", r.Opcode, err)
	}
	if r.Status != rings.StatusOK {
		return fmt.Errorf("%v: %v", r.Opcode, r.Status)
	}
	return nil
}

// send queues one transmit descriptor for the connection if the ring has a
// slot; otherwise it returns a channel closed when slots free.
func (o *offloader) send(c *DelegatedConn, a rings.Addr, n uint32, flags rings.TxFlags) (bool, <-chan struct{}) {
	return o.drv.trySendDelegated(rings.Tx{Conn: c.idx, Addr: a, Len: n, Flags: flags})
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
	if h.Device != nil {
		// Never more indices than the device's table: an OFFLOAD past
		// it would only be refused.
		if n := h.Device.Engine().Config().MaxConns; cfg.MaxConns == 0 || cfg.MaxConns > n {
			cfg.MaxConns = n
		}
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
	key     FlowKey
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
// from its first SYN, so it can be delegated at any later quiet point.
func (h *Host) DialTracked(ctx context.Context, dst netip.AddrPort) (*TrackedConn, error) {
	if !dst.Addr().Is4() {
		return nil, ErrNotIPv4
	}
	var wq waiter.Queue
	local := h.Addr().As4()
	var ep tcpip.Endpoint
	var key FlowKey
	// netstack's end of a delegated connection is gone, so netstack may
	// hand out its local port again while the NIC still runs (or is
	// releasing) the connection: a port whose 4-tuple the driver still
	// tracks is kept bound, so the next pick differs, and let go after.
	var busy []tcpip.Endpoint
	defer func() {
		for _, b := range busy {
			b.Close()
		}
	}()
	for {
		var terr tcpip.Error
		ep, terr = h.S.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
		if terr != nil {
			return nil, fmt.Errorf("tcpstack: endpoint: %s", terr)
		}
		if terr := ep.Bind(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(local)}); terr != nil {
			ep.Close()
			return nil, fmt.Errorf("tcpstack: bind: %s", terr)
		}
		la, _ := ep.GetLocalAddress()
		key = FlowKey{LocalIP: local, RemoteIP: dst.Addr().As4(), LocalPort: la.Port, RemotePort: dst.Port()}
		if h.Driver.flows.addNew(key) {
			break
		}
		if len(busy) >= 64 {
			ep.Close()
			return nil, fmt.Errorf("tcpstack: dial %v: no local port whose 4-tuple is free (%d tried)", dst, len(busy)+1)
		}
		busy = append(busy, ep)
	}
	we, ch := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	terr := ep.Connect(tcpip.FullAddress{NIC: nicID, Addr: tcpip.AddrFrom4(dst.Addr().As4()), Port: dst.Port()})
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
	return &TrackedConn{TCPConn: gonet.NewTCPConn(&wq, ep), ep: ep, wq: &wq, key: key, drv: h.Driver}, nil
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

// OffloadUsage is what the host holds for delegation now: for tests and
// diagnostics that check every way of ending gives everything back.
type OffloadUsage struct {
	Conns       int // delegated connections the host has (not yet released)
	FreeIdx     int // connection indices free
	Quarantined int // indices held back for a command the device has not answered
	Flows       int // flows (and listeners) the driver tracks
	Pool        PoolStats
	// QuiesceRetries counts delegations that found netstack short of
	// bytes the driver had handed it (it had dropped them) and let the
	// flow through again for the peer's resend.
	QuiesceRetries uint64
}

// OffloadUsage returns the host's delegation usage (zero before delegation
// is turned on, but for Flows).
func (h *Host) OffloadUsage() OffloadUsage {
	u := OffloadUsage{Flows: int(h.Driver.flows.n.Load())}
	h.offMu.Lock()
	o := h.off
	h.offMu.Unlock()
	if o == nil {
		return u
	}
	o.mu.Lock()
	u.Conns, u.FreeIdx, u.Quarantined = len(o.conns), len(o.freeIdx), len(o.quarantined)
	o.mu.Unlock()
	u.Pool = o.pool.stats()
	u.QuiesceRetries = o.quiesceRetries.Load()
	return u
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
		l.h.Driver.flows.listenOn(l.ip, l.port, false)
	})
	return nil
}

// Addr returns the listening address.
func (l *OffloadListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IP(l.ip[:]), Port: int(l.port)}
}

// Key is the connection's flow, as the host names it.
func (t *TrackedConn) Key() FlowKey { return t.key }
