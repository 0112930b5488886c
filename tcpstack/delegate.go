package tcpstack

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"sync"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Delegating an established netstack connection to the offload unit takes
// three steps, each a function below:
//
//  1. freeze (quiescer.freeze): the driver freezes the flow (netstack
//     neither receives nor sends from here on) once nothing netstack sent
//     is unacknowledged and nothing the application wrote is unsent;
//  2. drain (quiescer.drain): every byte the driver handed netstack has
//     reached the endpoint, and is peeked to become the first bytes the
//     application reads;
//  3. install (offloader.install): a connection index and the state the
//     driver tracked go to the unit with OFFLOAD (plus, in the same
//     publish, an RDMA connection's CREATE_QP), and netstack's endpoint is
//     handed off: torn down without the RST an abort would send
//     (handoff; the frozen flow would drop one anyway).
//
// A step that cannot finish thaws the flow and the connection stays on
// netstack (ErrNotDelegated); only an OFFLOAD the device never answers
// loses it (ErrDelegationAbandoned).

// delegate moves an established netstack connection to the offload unit.
// wq is the endpoint's waiter queue: the drain waits on its readable
// events.
func (o *offloader) delegate(ep tcpip.Endpoint, wq *waiter.Queue, key hdr.Tuple, alreadyRead, written uint64) (*DelegatedConn, error) {
	q := quiescer{o: o, key: key, deadline: o.drv.newTimer(o.cfg.QuiesceTimeout)}
	defer q.stop()
	// The endpoint's readable event says when netstack has taken more of
	// what the driver handed it (drain).
	we, readable := waiter.NewChannelEntry(waiter.ReadableEvents)
	wq.EventRegister(&we)
	defer wq.EventUnregister(&we)
	q.readable = readable
	for {
		fi, err := q.freeze(written)
		if errors.Is(err, errNotTracked) {
			// The tracker missed the flow: learn it from netstack.
			fi, pre, err := q.learn(ep, written)
			if err != nil {
				return nil, err
			}
			return o.install(ep, key, &fi, pre)
		}
		if err != nil {
			return nil, err
		}
		pre, drained, err := q.drain(ep, &fi, alreadyRead)
		if err != nil {
			return nil, err
		}
		if drained {
			return o.install(ep, key, &fi, pre)
		}
	}
}

// quiescer carries one delegation's freeze and drain: both share one
// deadline (QuiesceTimeout) and the endpoint's readable events.
type quiescer struct {
	o        *offloader
	key      hdr.Tuple
	deadline *Timer
	stall    *Timer // made on the drain's first wait, reset after
	readable <-chan struct{}
}

func (q *quiescer) stop() {
	q.deadline.Stop()
	if q.stall != nil {
		q.stall.Stop()
	}
}

// thaw unfreezes the flow: netstack has it again, and gets the peer's
// frames the driver held meanwhile.
func (o *offloader) thaw(key hdr.Tuple) {
	if fi, ok := o.drv.flows.freeze(key, false); ok {
		o.drv.redeliver(fi.held)
	}
}

// freeze freezes the flow once nothing is in flight: nothing
// unacknowledged, and nothing the application wrote still unsent in
// netstack (a zero window holds it there), since aborting the endpoint
// would lose it. It returns the flow's tracked state, frozen.
func (q *quiescer) freeze(written uint64) (flowInfo, error) {
	t := &q.o.drv.flows
	for {
		fi, ok := t.freeze(q.key, true)
		if !ok {
			return fi, fmt.Errorf("%w: flow %v %w", ErrNotDelegated, q.key, errNotTracked)
		}
		if !fi.sawOurSyn || !fi.sawPeerSyn {
			q.o.thaw(q.key)
			return fi, fmt.Errorf("%w: handshake not seen by the NIC", ErrNotDelegated)
		}
		sent := uint64(fi.sndNxt - fi.iss - 1)
		if fi.ourFin {
			sent--
		}
		if fi.sndUna == fi.sndNxt && sent >= written {
			return fi, nil
		}
		// Data in flight: let netstack finish it and try again at the
		// next ACK that moves SND.UNA.
		q.o.thaw(q.key)
		acked, ok := t.ackedChan(q.key)
		if !ok {
			return fi, fmt.Errorf("%w: flow %v %w", ErrNotDelegated, q.key, errNotTracked)
		}
		select {
		case <-acked:
		case <-q.deadline.C:
			return fi, fmt.Errorf("%w: %d bytes still unacknowledged, %d unsent (the NIC saw %d segments out, %d in)", ErrNotDelegated, fi.sndNxt-fi.sndUna, written-min(sent, written), fi.outSegments, fi.inSegments)
		}
	}
}

// drain reads what netstack already received on the frozen flow: those
// bytes become the first the application reads. The driver counted every
// in-order byte it handed netstack (RCV.NXT); netstack may still be
// processing some of them, so drain waits until all have arrived: a byte
// the NIC acknowledged on netstack's behalf must never be lost. It peeks
// only: the bytes stay netstack's until the unit has taken the connection
// (then netstack's endpoint goes), so a connection the unit refuses falls
// back to netstack intact.
//
// drained false (and no error) means the flow was let through again and
// the delegation starts over from freeze.
func (q *quiescer) drain(ep tcpip.Endpoint, fi *flowInfo, alreadyRead uint64) (pre []byte, drained bool, err error) {
	want := uint64(fi.rcvNxt-fi.irs-1) - alreadyRead
	if fi.peerFin {
		want--
	}
	var buf bytes.Buffer
	for {
		buf.Reset()
		_, _ = ep.Read(&buf, tcpip.ReadOptions{Peek: true})
		if uint64(buf.Len()) >= want {
			// More than the tracker counted: segments that reached
			// netstack out of order, which the tracker does not
			// keep (it advances RCV.NXT over in-order arrivals
			// only), became in order when the hole filled. netstack
			// has them, and has acknowledged them, so the peer will
			// not send them again: RCV.NXT is past them. (Left
			// behind, the engine waited for bytes no one resends: a
			// connection both ends delegated under loss and
			// reordering stalled for good.)
			fi.rcvNxt += uint32(uint64(buf.Len()) - want)
			return buf.Bytes(), true, nil
		}
		if q.stall == nil {
			q.stall = q.o.drv.newTimer(quiesceStall)
		} else {
			q.stall.Reset(quiesceStall)
		}
		select {
		case <-q.readable:
			continue // more arrived: look again, the flow still frozen
		case <-q.stall.C:
		case <-q.deadline.C:
			q.o.thaw(q.key)
			return nil, false, fmt.Errorf("%w: netstack holds %d of the %d bytes it received", ErrNotDelegated, buf.Len(), want)
		}
		// Nothing for quiesceStall: netstack dropped what the driver
		// handed it (its listener drops data that races a handshake it
		// completes from a SYN cookie) and has not acknowledged it. The
		// peer resends it, and a frozen flow would hold the resend: let
		// the flow through until netstack takes more, then freeze it and
		// look again.
		q.o.quiesceRetries.Add(1)
		q.o.thaw(q.key)
		select {
		case <-q.readable:
		case <-q.deadline.C:
			return nil, false, fmt.Errorf("%w: netstack holds %d of the %d bytes it received", ErrNotDelegated, buf.Len(), want)
		}
		return nil, false, nil
	}
}

// install gives the frozen, drained connection to the unit: a connection
// index, the connection (with pre, the bytes netstack had, as its first
// chunk), and OFFLOAD with the state block built from fi.
func (o *offloader) install(ep tcpip.Endpoint, key hdr.Tuple, fi *flowInfo, pre []byte) (*DelegatedConn, error) {
	idx, err := o.takeIdx()
	if err != nil {
		o.thaw(key)
		return nil, err
	}
	c, prep, err := o.prepareConn(idx, key, fi, pre)
	if err != nil {
		o.thaw(key)
		return nil, err
	}
	res, err := o.submitOffload(c, ep, prep, key, fi)
	if err != nil {
		return nil, o.offloadFailed(c, ep, prep, err)
	}
	c = o.delegated(c, ep, prep, res)
	o.drv.flows.bind(key, c)
	o.injectHeld(key, idx)
	return c, nil
}

// takeIdx takes a free connection index.
func (o *offloader) takeIdx() (uint32, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if len(o.freeIdx) == 0 {
		return 0, fmt.Errorf("%w: all %d connection slots in use (%d quarantined)", ErrNotDelegated, o.cfg.MaxConns, o.quarantinedConns())
	}
	idx := o.freeIdx[len(o.freeIdx)-1]
	o.freeIdx = o.freeIdx[:len(o.freeIdx)-1]
	o.isFree[idx] = false
	return idx, nil
}

// prepareConn makes the host's side of connection idx and, for an RDMA
// connection, prepares its QP. On error idx is free again.
func (o *offloader) prepareConn(idx uint32, key hdr.Tuple, fi *flowInfo, pre []byte) (*DelegatedConn, RDMADelegation, error) {
	c, err := o.newConn(idx, key, fi)
	if err != nil {
		o.putIdx(idx)
		return nil, nil, err
	}
	c.flow = o.drv.flows.entry(key)
	c.peerFin = fi.peerFin // delegated in CLOSE_WAIT: EOF after the data netstack had
	if len(pre) > 0 {
		// Ahead of anything the unit delivers: its buffers are posted
		// in the OFFLOAD's publish, and data may come at once.
		c.pushChunk(rxChunk{data: pre, userID: -1})
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
		return nil, nil, fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	return c, prep, nil
}

// submitOffload publishes the connection's OFFLOAD (and an RDMA
// connection's CREATE_QP behind it) and waits for the unit's answer. An
// answer that comes after the wait gave up goes to offloadLate.
func (o *offloader) submitOffload(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, key hdr.Tuple, fi *flowInfo) ([]rings.Command, error) {
	var blk [rings.ConnStateSizeV2]byte
	reqs := []cmdReq{{c: rings.Command{Opcode: rings.OpOffload, Conn: c.idx}, param: o.encodeState(blk[:], key, fi)}}
	// No receive buffers yet: the connection's first bytes come through
	// the shared legacy buffers, and it gets buffers of its own only if
	// it keeps receiving (growRecv).
	o.mu.Lock()
	o.conns[c.idx] = c // its notifications may come as soon as the unit has it
	o.mu.Unlock()
	var tk *cmdTicket
	var err error
	if prep == nil {
		tk, err = o.drv.submit(reqs, true, nil)
	} else {
		err = prep.Publish(func(follow []HostCommand) error {
			var serr error
			tk, serr = o.drv.submit(append(reqs, cmdReqs(follow)...), true, nil)
			return serr
		})
	}
	if err != nil {
		return nil, err
	}
	res := make([]rings.Command, len(tk.reqs))
	late := func(res []rings.Command, err error) { o.offloadLate(c, ep, prep, res, err) }
	if err := o.drv.wait(tk, o.cfg.CommandTimeout, late, res); err != nil {
		return nil, err
	}
	if res[0].Status != rings.StatusOK {
		return nil, fmt.Errorf("OFFLOAD: %v (%w)", res[0].Status, errRefused)
	}
	return res, nil
}

// injectHeld gives the unit the peer's frames that arrived while the flow
// was frozen, as if just received (RX_INJECT; TCP sorts out their order
// with anything newer).
func (o *offloader) injectHeld(key hdr.Tuple, idx uint32) {
	held := o.drv.flows.takeHeld(key)
	if len(held) == 0 {
		return
	}
	reqs := make([]cmdReq, len(held))
	for i, f := range held {
		reqs[i] = cmdReq{c: rings.Command{Opcode: rings.OpRxInject, Conn: idx}, param: f}
	}
	_ = o.drv.submitAsync(reqs, func([]rings.Command, error) {}) // a refused one is a loss TCP repairs
}

// offloadFailed settles an OFFLOAD that did not install the connection and
// returns the caller's error. Not submitted or refused, the unit does not
// have the connection: it stays on netstack. Timed out (still in flight),
// lost or closed, the outcome is unknown, so the index, the memory and the
// frozen flow stay as they are until the late answer (offloadLate); the
// caller has lost the connection.
func (o *offloader) offloadFailed(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, err error) error {
	if errors.Is(err, ErrNotSubmitted) || errors.Is(err, errRefused) {
		o.dropConn(c, prep)
		o.thaw(c.key)
		return fmt.Errorf("%w: %v", ErrNotDelegated, err)
	}
	c.mu.Lock()
	c.closed, c.abandoned = true, true
	c.cmdFailLocked(err) // and no command for it meanwhile
	c.mu.Unlock()
	o.quarantine(c.idx, err)
	if !errors.Is(err, ErrCommandTimeout) {
		// No late answer will come: netstack's endpoint goes now (its
		// RST dropped by the frozen flow); the rest stays quarantined.
		ep.Abort()
		ep.Close()
	}
	return fmt.Errorf("%w: %w", ErrDelegationAbandoned, err)
}

// delegated finishes a delegation the unit took.
func (o *offloader) delegated(c *DelegatedConn, ep tcpip.Endpoint, prep RDMADelegation, res []rings.Command) *DelegatedConn {
	// From here the unit owns the flow; netstack's endpoint goes away
	// (with the bytes it held: the connection's first chunk has them).
	handoff(ep)
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case prep != nil:
		prep.Done(res[1])
	}
	return c
}

// handedOff is netstack's endpoint with the Handoff of third_party's patch
// 0002: Abort without the RST.
type handedOff interface{ Handoff() }

// handoff drops netstack's endpoint of a connection the unit has taken
// over. Abort would build an RST for the frozen flow to drop, about 6% of
// a short connection's CPU on the offload path (docs/benchmarks.md);
// Handoff tears the endpoint down the same way without it.
func handoff(ep tcpip.Endpoint) {
	if h, ok := ep.(handedOff); ok {
		h.Handoff()
	} else {
		ep.Abort() // not netstack's TCP: its RST is the frozen flow's
	}
	ep.Close()
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

// encodeState writes the OFFLOAD state block of flow key into blk (which
// holds ConnStateSizeV2 bytes) and returns the block: version 1 for an
// IPv4 connection (its OFFLOAD unchanged from before IPv6), version 2 with
// the address extension behind it for an IPv6 one. Both families take this
// one path: only the addresses and the header room differ.
func (o *offloader) encodeState(blk []byte, key hdr.Tuple, fi *flowInfo) []byte {
	st := o.stateBlock(key, fi)
	var x rings.ConnAddrExt
	st.SetAddrs(&x, key.LocalIP, key.RemoteIP)
	st.Encode(rings.ConnStateBlock(blk))
	if st.Version == rings.ConnStateVersion {
		return blk[:rings.ConnStateSize]
	}
	x.Encode(rings.ConnAddrExtBlock(blk[rings.ConnStateSize:]))
	return blk[:rings.ConnStateSizeV2]
}

// netHeaderLen is the network header a connection on key sends behind its
// Ethernet header (no options, no extension headers): what the path MTU
// leaves the MSS less of.
func netHeaderLen(key hdr.Tuple) uint32 {
	if key.LocalIP.Is4() {
		return hdr.IPv4MinSize
	}
	return hdr.IPv6Size
}

// stateBlock is flow key's state as the tracker learned it; the addresses
// (and with them the block's version) are encodeState's.
func (o *offloader) stateBlock(key hdr.Tuple, fi *flowInfo) rings.ConnState {
	st := rings.ConnState{
		State:     rings.StateEstablished,
		LocalPort: key.LocalPort, RemotePort: key.RemotePort,
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
	if m := uint16(o.drv.mtu - netHeaderLen(key) - hdr.TCPMinSize); mss > m {
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

func (o *offloader) newConn(idx uint32, key hdr.Tuple, fi *flowInfo) (*DelegatedConn, error) {
	c := &DelegatedConn{o: o, idx: idx, key: key, sndISS: fi.sndNxt, rcvLowat: 1,
		sndLowat: o.cfg.SendBufSize / 4, ackArmed: uint32(o.cfg.SendBufSize / 4)}
	c.nv.rcvNxt = fi.rcvNxt
	c.cond = sync.NewCond(&c.mu)
	c.local = &net.TCPAddr{IP: net.IP(key.LocalIP.AsSlice()), Port: int(key.LocalPort)}
	c.peer = &net.TCPAddr{IP: net.IP(key.RemoteIP.AsSlice()), Port: int(key.RemotePort)}
	return c, nil
}
