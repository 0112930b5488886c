package tcpstack

// RDMA verbs on delegated connections: the host side of the iWARP RNIC.
//
// The API mirrors rdma-core's libibverbs and librdmacm: protection domains
// (ibv_alloc_pd), memory regions (ibv_reg_mr / ibv_dereg_mr), completion
// queues (ibv_create_cq, ibv_poll_cq, ibv_req_notify_cq, ibv_get_cq_event),
// queue pairs (ibv_post_send / ibv_post_recv) and connection management
// (rdma_connect, rdma_listen, connect requests answered with rdma_accept or
// rdma_reject). Work requests and completions are rings.SendWR, RecvWR and
// Completion, which carry rdma-core's opcode, flag and status values.
//
// Everything crosses the rings: memory registration, CQ and QP set-up and
// the QP doorbell are commands; the send, receive and completion queues are
// rings in host memory the host produces into (SQ, RQ) or consumes (CQ);
// QP and CQ events arrive as notifications. The device places and fetches
// payload by DMA: the verbs layer never copies data.
//
// A QP runs on a delegated TCP connection that has no user buffers posted:
// from CREATE_QP on, the device's iWARP engine owns the byte stream in both
// directions. The QP number is the connection's delegated-connection index.
// netstack makes the TCP connection; delegation then issues OFFLOAD and
// CREATE_QP in one publish (prepareQP, submitOffload), so the unit attaches
// the QP before it handles another received frame. Bytes the peer sends to
// an RDMA listener before its end is delegated (its MPA request, when the
// initiator is quicker than our accept) are held by the driver
// (holdEarlyData) and handed to the unit after the CREATE_QP, in the same
// publish (RX_INJECT): the unit steers them to the new connection as if
// they had just arrived, so the MPA request reaches the QP, never netstack,
// and nothing waits for the peer to retransmit it.
//
// MPA revision 1 has the initiator speak first: a responder's QP is ready
// (ACCEPTED) once it accepted, may post at once, but its sends go out when
// the initiator's first message arrived (then it is in RTS).

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
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// Limits of the host side. maxCQNum is the device's CQ table size
// (CREATE_CQ's Conn must be below it).
const (
	maxCQNum = 256
	// MaxPrivateData is the most MPA private data a connect, accept or
	// reject carries (RFC 5044).
	MaxPrivateData = 512
	// MaxQueueDepth bounds SQ, RQ and CQ sizes (a ring's limit).
	MaxQueueDepth = 1 << 20
	// DefaultQueueDepth is the SQ and RQ depth when QPAttr leaves it 0.
	DefaultQueueDepth = 64
	// DefaultConnectTimeout bounds a listener's wait for the MPA request of
	// an accepted connection, and Close's orderly disconnect.
	DefaultConnectTimeout = 10 * time.Second
	closeTimeout          = 2 * time.Second
	// maxEarlyFrames and maxEarlyBytes bound what the driver holds for
	// one RDMA connection not yet delegated (an MPA request is one frame),
	// maxEarlyFlows the connections it holds for; past them a frame is
	// dropped (counted) and left to the peer's retransmission.
	maxEarlyFrames = 8
	maxEarlyBytes  = 16 << 10
	maxEarlyFlows  = 1024
)

// Errors of the verbs layer. Command failures are *CommandError, which
// matches ErrRDMANotSupported when the device does not know the opcode.
var (
	// ErrRDMANotSupported: the device answered an RDMA command with
	// BAD_OPCODE (no RDMA support in the device).
	ErrRDMANotSupported = errors.New("verbs: the device does not support RDMA commands")
	// ErrQueueFull: the send or receive queue has no free entry
	// (ibv_post_send's ENOMEM).
	ErrQueueFull = errors.New("verbs: work queue full")
	// ErrQPDestroyed: the QP was destroyed.
	ErrQPDestroyed = errors.New("verbs: QP destroyed")
	// ErrCQDestroyed: the CQ was destroyed.
	ErrCQDestroyed = errors.New("verbs: CQ destroyed")
	// ErrRejected: the peer rejected the connection (MPA reply with R).
	ErrRejected = errors.New("verbs: connection rejected by the peer")
	// ErrQPError: the QP went to ERROR (a Terminate was sent or received,
	// the connection was lost, or a CQ overflowed).
	ErrQPError = errors.New("verbs: QP in error")
	// ErrEarlyData: bytes of the RDMA connection reached the host instead
	// of the QP. A safety net: OFFLOAD and CREATE_QP share a publish, and
	// early bytes to a listener are held and injected after them.
	ErrEarlyData = errors.New("verbs: peer data reached the host before the QP took the stream")
	// ErrBufferRegistered: Buffer.Free found a live registration on the
	// buffer (deregister it, or Put it back to its cache, first).
	ErrBufferRegistered = errors.New("verbs: buffer still registered")
	// ErrListenerClosed: the RDMA listener was closed.
	ErrListenerClosed = errors.New("verbs: listener closed")
)

// CommandError is an RDMA command the device refused.
type CommandError struct {
	Op     rings.Opcode
	Status rings.Status
}

func (e *CommandError) Error() string { return fmt.Sprintf("verbs: %v: %v", e.Op, e.Status) }

// Is makes errors.Is(err, ErrRDMANotSupported) true for BAD_OPCODE.
func (e *CommandError) Is(target error) bool {
	return target == ErrRDMANotSupported && e.Status == rings.StatusBadOpcode
}

// MR access flags (ibv_access_flags), for RegMR.
const (
	AccessLocalWrite   = rings.MRAccessLocalWrite
	AccessRemoteWrite  = rings.MRAccessRemoteWrite
	AccessRemoteRead   = rings.MRAccessRemoteRead
	AccessRemoteAtomic = rings.MRAccessRemoteAtomic
	AccessZeroBased    = rings.MRAccessZeroBased
	accessAll          = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased
)

// ---- per-host state ------------------------------------------------------

// verbsState is a host's verbs objects. It lives in the offloader (every QP
// needs a delegated connection); exec and mem are what it needs of the
// driver, so the host logic can be tested against a fake device.
type verbsState struct {
	initOnce sync.Once
	active   atomic.Bool // objects exist: route looks at notifications
	o        *offloader
	mem      *rings.Arena
	// exec runs one command; late (may be nil) gets the outcome of a
	// command exec gave up on (ErrCommandTimeout), when it comes.
	exec func(c rings.Command, late func(rings.Command, error)) (rings.Command, error)

	mu     sync.Mutex
	cqs    [maxCQNum]*CQ
	qps    map[uint32]*QP
	mrs    map[uint32]*MR // live registrations by STag
	caches map[*RegCache]struct{}
	// RDMA connections being delegated, with their QP's attributes:
	// dialled flows (initiator) and listeners (responder).
	flows  map[FlowKey]*QPAttr
	listen map[listenKey]*QPAttr
	// prepErr says why the QP of a connection index could not be made
	// with its OFFLOAD (read by adoptQP).
	prepErr map[uint32]error
	// listenSnap is listen's keys as an immutable map for the receive
	// filter.
	listenSnap atomic.Pointer[map[listenKey]bool]
	// early holds the bytes peers sent to RDMA listeners before their
	// connection was delegated (holdEarlyData), by flow.
	early map[FlowKey]*earlyFlow
	// earlyHeld counts frames held, earlyInjected frames handed to the
	// unit, earlyDropped frames dropped (table full); onEarlyHold (tests)
	// runs after a frame is held.
	earlyHeld, earlyInjected, earlyDropped atomic.Uint64
	onEarlyHold                            func(FlowKey)
}

// earlyFlow is what the driver holds for one RDMA connection to a
// listener until its delegation; forward means the OFFLOAD that took the
// held frames was submitted, and later ones are injected at once.
type earlyFlow struct {
	frames  [][]byte
	bytes   int
	forward bool
	idx     uint32 // the connection index, once forward
}

func (v *verbsState) init(o *offloader, mem *rings.Arena, exec func(rings.Command, func(rings.Command, error)) (rings.Command, error)) {
	v.initOnce.Do(func() {
		v.o, v.mem, v.exec = o, mem, exec
		v.qps = make(map[uint32]*QP)
		v.mrs = make(map[uint32]*MR)
		v.caches = make(map[*RegCache]struct{})
		v.flows = make(map[FlowKey]*QPAttr)
		v.listen = make(map[listenKey]*QPAttr)
		v.prepErr = make(map[uint32]error)
		v.early = make(map[FlowKey]*earlyFlow)
		v.active.Store(true)
	})
}

// verbs returns the host's verbs state, turning delegation on if needed.
func (h *Host) verbs() (*verbsState, error) {
	o, err := h.offloader()
	if err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	v := &o.rdma
	v.init(o, h.Mem, func(c rings.Command, late func(rings.Command, error)) (rings.Command, error) {
		return o.drv.command(c, o.cfg.CommandTimeout, late)
	})
	return v, nil
}

// do runs one command; a status other than OK is a *CommandError.
func (v *verbsState) do(c rings.Command) (rings.Command, error) { return v.doLate(c, nil) }

// doLate is do for a command that names host resources: if it times out,
// late gets its outcome when the device answers (until then the caller
// keeps the resources reserved). late runs on the driver's command vector
// goroutine and must not block.
func (v *verbsState) doLate(c rings.Command, late func(rings.Command, error)) (rings.Command, error) {
	res, err := v.exec(c, late)
	if err != nil {
		return res, fmt.Errorf("verbs: %v: %w", c.Opcode, err)
	}
	if res.Status != rings.StatusOK {
		return res, &CommandError{Op: c.Opcode, Status: res.Status}
	}
	return res, nil
}

// rawStream reports whether a flow being delegated is an RDMA connection:
// it gets no user buffers (called by offloader.delegate).
func (v *verbsState) rawStream(key FlowKey) bool {
	if !v.active.Load() {
		return false
	}
	a, _ := v.rdmaFlow(key)
	return a != nil
}

// rdmaFlow returns the QP attributes of an RDMA connection being
// delegated, and whether we are its initiator; nil if the flow is not one.
func (v *verbsState) rdmaFlow(key FlowKey) (*QPAttr, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if a := v.flows[key]; a != nil {
		return a, true
	}
	return v.listen[listenKey{key.LocalIP, key.LocalPort}], false
}

// markFlow declares (attr) or forgets (nil) a dialled RDMA connection.
func (v *verbsState) markFlow(key FlowKey, attr *QPAttr) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attr != nil {
		v.flows[key] = attr
	} else {
		delete(v.flows, key)
	}
}

// qpPrep is the QP made for an RDMA connection being delegated, and its
// CREATE_QP, which goes in the OFFLOAD's publish.
type qpPrep struct {
	v       *verbsState
	qp      *QP
	key     FlowKey
	create  cmdReq
	discard func() // idempotent: see forget
}

// prepareQP makes the QP of connection idx if key is an RDMA connection
// being delegated (nil, nil if not): its rings and control block in host
// memory, registered under the connection index so its events find it.
// The CREATE_QP goes in the OFFLOAD's publish (submitOffload): the unit then
// attaches the QP in the same pass, before it handles another received
// frame, so no byte of the peer's (its MPA request) can reach the
// connection first.
func (v *verbsState) prepareQP(idx uint32, key FlowKey) (*qpPrep, error) {
	if !v.active.Load() {
		return nil, nil
	}
	attr, initiator := v.rdmaFlow(key)
	if attr == nil {
		return nil, nil
	}
	v.mu.Lock()
	delete(v.prepErr, idx)
	v.mu.Unlock()
	qp, err := v.newQP(attr, idx, initiator)
	if err != nil {
		return nil, err
	}
	qp.adoptable = true
	if err := qp.register(); err != nil {
		qp.freeMem()
		return nil, err
	}
	p := &qpPrep{v: v, qp: qp, key: key,
		create: cmdReq{c: rings.Command{Opcode: rings.OpCreateQP, Conn: idx, Addr: qp.cfgBase, Len: rings.QPConfigSize}}}
	p.discard = sync.OnceFunc(p.forget)
	return p, nil
}

// submitOffload submits an OFFLOAD batch (reqs) with submit. For an RDMA
// connection (p not nil) it adds the CREATE_QP and, behind it, the bytes
// the peer sent before the delegation (RX_INJECT, one frame each): the unit
// steers them to the connection, now with its QP, as if they had just
// arrived. From this publish on, frames that still come the legacy way
// (the unit uploaded them before it ran the OFFLOAD) are injected as they
// come, behind it.
func (v *verbsState) submitOffload(p *qpPrep, reqs []cmdReq, submit func([]cmdReq) (*cmdTicket, error)) (*cmdTicket, error) {
	if p == nil {
		return submit(reqs)
	}
	reqs = append(reqs, p.create)
	v.mu.Lock()
	defer v.mu.Unlock()
	ef := v.early[p.key]
	if ef == nil && !p.qp.initiator {
		ef = &earlyFlow{}
		v.early[p.key] = ef
	}
	if ef != nil {
		for _, f := range ef.frames {
			reqs = append(reqs, cmdReq{c: rings.Command{Opcode: rings.OpRxInject, Conn: p.create.c.Conn}, param: f})
		}
	}
	t, err := submit(reqs)
	if err != nil {
		return nil, err
	}
	if ef != nil {
		v.earlyInjected.Add(uint64(len(ef.frames)))
		v.copied(ef.bytes) // the command path copies each into host memory
		ef.frames, ef.bytes, ef.forward, ef.idx = nil, 0, true, p.create.c.Conn
	}
	return t, nil
}

// done takes the CREATE_QP write-back of an OFFLOAD the unit took: a
// refusal is kept for adoptQP.
func (p *qpPrep) done(res rings.Command) {
	if res.Status == rings.StatusOK {
		return
	}
	err := &CommandError{Op: rings.OpCreateQP, Status: res.Status}
	p.discard()
	v := p.v
	v.mu.Lock()
	v.prepErr[p.qp.qpn] = err
	v.mu.Unlock()
}

// forget (through discard, once) forgets the QP and frees its memory: the
// unit has none (its CREATE_QP was refused or never ran, or ABORT took it
// down).
func (p *qpPrep) forget() {
	p.qp.unregister()
	p.qp.freeMem()
}

// adoptQP takes the QP made with connection c's OFFLOAD and readies the
// connection for it.
func (v *verbsState) adoptQP(c *DelegatedConn) (*QP, error) {
	v.mu.Lock()
	qp := v.qps[c.idx]
	err := v.prepErr[c.idx]
	delete(v.prepErr, c.idx)
	if qp != nil && !qp.adoptable {
		qp = nil
	}
	if qp != nil {
		qp.adoptable = false
	}
	v.mu.Unlock()
	if qp == nil {
		if err == nil {
			err = errors.New("verbs: CREATE_QP: no QP was made with the connection")
		}
		return nil, err
	}
	qp.conn, qp.local, qp.remote = c, c.local, c.peer
	if err := takeStream(v.mem, c); err != nil {
		return qp, err
	}
	return qp, nil
}

// route takes the RDMA notifications out of the delegated-connection path
// (called first by offloader.dispatch, on the interrupt goroutine). It
// returns true when the notification is consumed: every NtfCQEvent (its
// Conn is a CQ number) and every NtfQPEvent (its Aux is the event, not a
// buffer id). Other notifications of a QP's connection are looked at (FIN,
// RST, data that should have gone to the QP) and passed on.
func (v *verbsState) route(n *rings.Notification) bool {
	if !v.active.Load() {
		return false
	}
	if n.Flags&rings.NtfCQEvent != 0 {
		var cq *CQ
		v.mu.Lock()
		if n.Conn < maxCQNum {
			cq = v.cqs[n.Conn]
		}
		v.mu.Unlock()
		if cq != nil {
			cq.signal()
		}
		return true
	}
	v.mu.Lock()
	qp := v.qps[n.Conn]
	v.mu.Unlock()
	if n.Flags&rings.NtfQPEvent != 0 {
		if qp != nil {
			qp.onEvent(rings.QPEvent(n.Aux), n.Len)
		}
		return true
	}
	if qp != nil {
		qp.onConnNotify(n)
	}
	return false
}

// holdEarlyData is the driver's legacy receive filter while RDMA listeners
// exist: it takes the TCP segments with payload addressed to an RDMA
// listener. Such bytes can only belong to a connection netstack accepted
// and the host has not delegated yet (afterwards the device steers the flow
// to its engine), and they are the peer's MPA request, which must reach the
// QP, not netstack: netstack never sees them (so RCV.NXT, and the state
// block, stop before them), and the frames are held (hold) until the
// connection's OFFLOAD and CREATE_QP, behind which they are injected.
// Interrupt goroutine: it never blocks.
func (v *verbsState) holdEarlyData(frame []byte) bool {
	m := v.listenSnap.Load()
	if m == nil || len(*m) == 0 || len(frame) < header.EthernetMinimumSize+header.IPv4MinimumSize+header.TCPMinimumSize {
		return false
	}
	if header.Ethernet(frame).Type() != header.IPv4ProtocolNumber {
		return false
	}
	ip := header.IPv4(frame[header.EthernetMinimumSize:])
	if !ip.IsValid(len(ip)) || ip.TransportProtocol() != header.TCPProtocolNumber || ip.FragmentOffset() != 0 {
		return false
	}
	hl, tl := int(ip.HeaderLength()), int(ip.TotalLength())
	if tl > len(ip) || hl+header.TCPMinimumSize > tl {
		return false
	}
	tcp := header.TCP(ip[hl:tl])
	if int(tcp.DataOffset()) >= len(tcp) {
		return false // no payload
	}
	local := ip.DestinationAddress().As4()
	if _, ok := (*m)[listenKey{local, tcp.DestinationPort()}]; !ok {
		return false
	}
	v.hold(FlowKey{LocalIP: local, RemoteIP: ip.SourceAddress().As4(), LocalPort: tcp.DestinationPort(), RemotePort: tcp.SourcePort()},
		frame[:header.EthernetMinimumSize+tl])
	return true
}

// hold keeps a copy of an early frame of flow key for its delegation, or,
// once that was submitted, injects it at once (RX_INJECT, without waiting).
func (v *verbsState) hold(key FlowKey, frame []byte) {
	f := bytes.Clone(frame) // the legacy buffer goes back to the device
	v.copied(len(f))
	v.mu.Lock()
	ef := v.early[key]
	if ef == nil {
		if len(v.early) >= maxEarlyFlows {
			v.mu.Unlock()
			v.earlyDropped.Add(1)
			return
		}
		ef = &earlyFlow{}
		v.early[key] = ef
	}
	if ef.forward {
		inject := []cmdReq{{c: rings.Command{Opcode: rings.OpRxInject, Conn: ef.idx}, param: f}}
		if v.o != nil && v.o.drv.submitAsync(inject, nil) == nil {
			v.earlyInjected.Add(1)
			v.copied(len(f)) // into host memory, by the command path
		} else {
			v.earlyDropped.Add(1)
		}
		v.mu.Unlock()
		return
	}
	if len(ef.frames) >= maxEarlyFrames || ef.bytes+len(f) > maxEarlyBytes {
		v.mu.Unlock()
		v.earlyDropped.Add(1)
		return
	}
	ef.frames = append(ef.frames, f)
	ef.bytes += len(f)
	hook := v.onEarlyHold
	v.mu.Unlock()
	v.earlyHeld.Add(1)
	if hook != nil {
		hook(key)
	}
}

// forgetEarly drops what is held for flow key.
func (v *verbsState) forgetEarly(key FlowKey) {
	if !v.active.Load() {
		return
	}
	v.mu.Lock()
	delete(v.early, key)
	v.mu.Unlock()
}

// listenOn declares (attr) or forgets (nil) an RDMA listener.
func (v *verbsState) listenOn(k listenKey, attr *QPAttr) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attr != nil {
		if v.listen[k] != nil {
			return fmt.Errorf("verbs: port %d already has an RDMA listener", k.port)
		}
		v.listen[k] = attr
	} else {
		delete(v.listen, k)
		for f := range v.early {
			if f.LocalIP == k.ip && f.LocalPort == k.port {
				delete(v.early, f)
			}
		}
	}
	snap := make(map[listenKey]bool, len(v.listen))
	for k := range v.listen {
		snap[k] = true
	}
	v.listenSnap.Store(&snap)
	if v.o != nil {
		if len(snap) > 0 {
			v.o.drv.setRxHold(v.holdEarlyData)
		} else {
			v.o.drv.setRxHold(nil)
		}
	}
	return nil
}

// ---- protection domains and host memory ----------------------------------

// PD is a protection domain (ibv_pd): a region is reachable only through a
// QP of its own PD. The number is what REG_MR and CREATE_QP carry.
type PD uint32

// AllocPD returns a new protection domain (ibv_alloc_pd). PD numbers are
// unique on the host (its device is what checks them); there is nothing to
// free.
func (h *Host) AllocPD() PD { return PD(h.pdNext.Add(1)) }

// Buffer is host memory from the arena: the only memory the device can
// reach, so the only memory that can be registered.
type Buffer struct {
	// Addr is the bus address of the first byte.
	Addr rings.Addr

	mu    sync.Mutex
	b     []byte
	mem   *rings.Arena
	v     *verbsState
	freed bool
}

// AllocBuffer allocates n bytes of zeroed host memory, 64-byte aligned.
func (h *Host) AllocBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: buffer of %d bytes", n)
	}
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	return v.allocBuffer(n)
}

func (v *verbsState) allocBuffer(n int) (*Buffer, error) {
	a, err := v.mem.Alloc(n, rings.CacheLine)
	if err != nil {
		return nil, fmt.Errorf("verbs: buffer: %w", err)
	}
	b, err := v.mem.Map(a, n)
	if err != nil {
		_ = v.mem.Free(a)
		return nil, fmt.Errorf("verbs: buffer: %w", err)
	}
	return &Buffer{Addr: a, b: b, mem: v.mem, v: v}, nil
}

// Bytes is the buffer's memory (nil after Free). The device writes into it
// by DMA: read it after the completion that says the data is there.
func (b *Buffer) Bytes() []byte {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Free gives the memory back. Registration caches are told first (their
// invalidation callback, as the SPI's registration-cache callback): unused
// cached registrations of the range are deregistered, and ones in use are
// deregistered at their last Put. If any registration on the range is
// still live afterwards (a MR not deregistered, or a cached one in use) the
// memory is not freed and the error wraps ErrBufferRegistered: the device
// could still write into it.
func (b *Buffer) Free() error {
	if b == nil {
		return errors.New("verbs: free of a nil buffer")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed {
		return nil
	}
	n := len(b.b)
	if b.v != nil {
		b.v.invalidate(b.Addr, n)
		if k := b.v.liveMRs(b.Addr, n); k > 0 {
			return fmt.Errorf("%w: %d registration(s) on [%#x, +%d)", ErrBufferRegistered, k, uint64(b.Addr), n)
		}
	}
	if err := b.mem.Free(b.Addr); err != nil {
		return fmt.Errorf("verbs: free buffer at %#x: %w", uint64(b.Addr), err)
	}
	b.freed, b.b = true, nil
	return nil
}

// invalidate runs every registration cache's invalidation callback.
func (v *verbsState) invalidate(a rings.Addr, n int) {
	v.mu.Lock()
	cs := make([]*RegCache, 0, len(v.caches))
	for c := range v.caches {
		cs = append(cs, c)
	}
	v.mu.Unlock()
	for _, c := range cs {
		c.Invalidate(a, n)
	}
}

// liveMRs counts live registrations overlapping [a, a+n).
func (v *verbsState) liveMRs(a rings.Addr, n int) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := 0
	for _, mr := range v.mrs {
		if overlaps(uint64(mr.Addr), uint64(mr.Len), uint64(a), uint64(n)) {
			k++
		}
	}
	return k
}

func overlaps(a, an, b, bn uint64) bool { return a < b+bn && b < a+an }

// ---- memory regions ------------------------------------------------------

// MR is a registered memory region (ibv_mr). iWARP names a region by one
// STag, so LKey and RKey are equal.
type MR struct {
	PD     PD
	LKey   uint32     // the STag, for local SGEs
	RKey   uint32     // the same STag, for the peer's RDMA Write/Read
	Addr   rings.Addr // host address of the first byte
	VA     uint64     // tagged offset of the first byte (0 with AccessZeroBased)
	Len    int
	Access int

	v     *verbsState
	cache *RegCache // set when a RegCache owns it
}

// SGE is the scatter/gather element for length bytes at offset off of the
// region (no bounds check here: the device checks every access).
func (mr *MR) SGE(off, length int) rings.SGE {
	return rings.SGE{Addr: mr.VA + uint64(off), Length: uint32(length), LKey: mr.LKey}
}

// TO is the tagged offset of byte off of the region: what the peer puts in
// an RDMA Write's or Read's RemoteAddr, with RKey.
func (mr *MR) TO(off int) uint64 { return mr.VA + uint64(off) }

// RegMR registers a whole buffer (ibv_reg_mr) with access flags
// (Access*). Its VA is its bus address, so a tagged offset is an address.
func (h *Host) RegMR(pd PD, b *Buffer, access int) (*MR, error) {
	if b == nil {
		return nil, errors.New("verbs: REG_MR: nil buffer")
	}
	mem := b.Bytes()
	if mem == nil {
		return nil, errors.New("verbs: REG_MR: buffer was freed")
	}
	return h.RegMRAddr(pd, b.Addr, len(mem), access)
}

// RegMRAddr registers length bytes of host memory at addr.
func (h *Host) RegMRAddr(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	return v.regMR(pd, addr, length, access)
}

// regMRCommand is the REG_MR command for a region whose VA is its address.
func regMRCommand(pd PD, addr rings.Addr, length int, access int) rings.Command {
	va := uint64(addr)
	if access&AccessZeroBased != 0 {
		va = 0
	}
	return rings.Command{Opcode: rings.OpRegMR, Addr: addr, Len: uint32(length), Arg0: uint32(pd),
		Arg1: uint32(access), Arg3: va}
}

func checkAccess(access int) error {
	switch {
	case access&^accessAll != 0:
		return fmt.Errorf("verbs: REG_MR: unknown access bits %#x", access&^accessAll)
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		// ibv_reg_mr's rule: a region the peer may write, we may write.
		return errors.New("verbs: REG_MR: remote write or atomic access needs local write")
	}
	return nil
}

func (v *verbsState) regMR(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	switch {
	case length <= 0:
		return nil, fmt.Errorf("verbs: REG_MR: length %d", length)
	case uint64(length) > 1<<32-1:
		return nil, fmt.Errorf("verbs: REG_MR: length %d exceeds 4 GiB", length)
	case !v.mem.Contains(addr, length):
		return nil, fmt.Errorf("verbs: REG_MR: [%#x, +%d) is not host memory", uint64(addr), length)
	}
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	c := regMRCommand(pd, addr, length, access)
	res, err := v.doLate(c, func(r rings.Command, err error) {
		// Registered after we gave up: nobody knows the STag, so
		// deregister it (the device must not keep a window on memory
		// the host may reuse).
		if err == nil && r.Status == rings.StatusOK {
			v.submitLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: uint32(r.Result)}, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	stag := uint32(res.Result)
	mr := &MR{PD: pd, LKey: stag, RKey: stag, Addr: addr, VA: c.Arg3, Len: length, Access: access, v: v}
	v.mu.Lock()
	v.mrs[stag] = mr
	v.mu.Unlock()
	return mr, nil
}

// Dereg deregisters the region (ibv_dereg_mr). A region owned by a
// RegCache is given back with the cache's Put instead.
func (mr *MR) Dereg() error {
	switch {
	case mr == nil:
		return errors.New("verbs: DEREG_MR: nil MR")
	case mr.cache != nil:
		return errors.New("verbs: DEREG_MR: the region belongs to a registration cache (Put it)")
	case mr.v == nil:
		return errors.New("verbs: DEREG_MR: the region was not registered with a host")
	}
	return mr.v.deregMR(mr)
}

func (v *verbsState) deregMR(mr *MR) error {
	v.mu.Lock()
	live := v.mrs[mr.LKey] == mr
	v.mu.Unlock()
	if !live {
		return fmt.Errorf("verbs: DEREG_MR: STag %#x is not registered", mr.LKey)
	}
	forget := func() {
		v.mu.Lock()
		if v.mrs[mr.LKey] == mr {
			delete(v.mrs, mr.LKey)
		}
		v.mu.Unlock()
	}
	_, err := v.doLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: mr.LKey}, func(_ rings.Command, err error) {
		if err == nil {
			forget() // answered at last: the device has no such region now
		}
	})
	var ce *CommandError
	if err == nil || errors.As(err, &ce) {
		// Refused or done, the device has no such region now. (Not
		// answered: the region stays live, and its memory is not
		// freed, until the device does.)
		forget()
	}
	return err
}

// submitLate submits a clean-up command from a late function (it must not
// wait); done (may be nil) gets the outcome.
func (v *verbsState) submitLate(c rings.Command, done func(rings.Command, error)) {
	if v.o == nil {
		return
	}
	_ = v.o.drv.submitAsync([]cmdReq{{c: c}}, func(res []rings.Command, err error) {
		if done != nil {
			done(res[0], err)
		}
	})
}

// hostRegistrar registers through the device for a RegCache.
type hostRegistrar struct{ v *verbsState }

func (r hostRegistrar) RegMR(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	return r.v.regMR(pd, addr, length, access)
}

func (r hostRegistrar) DeregMR(mr *MR) error { return r.v.deregMR(mr) }

// NewRegCache returns a registration cache that registers through this
// host's device and is invalidated by Buffer.Free.
func (h *Host) NewRegCache(cfg RegCacheConfig) (*RegCache, error) {
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	c := NewRegCache(hostRegistrar{v}, cfg)
	v.mu.Lock()
	v.caches[c] = struct{}{}
	v.mu.Unlock()
	c.onClose = func() {
		v.mu.Lock()
		delete(v.caches, c)
		v.mu.Unlock()
	}
	return c, nil
}

// ---- completion queues ---------------------------------------------------

// CQ is a completion queue (ibv_cq): a ring in host memory the device
// produces completions into and Poll consumes, with no command per
// completion.
type CQ struct {
	v      *verbsState
	num    uint32
	layout rings.Layout

	mu     sync.Mutex // the consumer
	cons   *rings.Consumer
	ringEr uint64
	lastEr error

	ev     chan struct{} // one-deep latch of CQ events
	done   chan struct{} // closed by Destroy
	events atomic.Uint64
	qpRefs atomic.Int32
	dead   atomic.Bool
}

// CQStats count a CQ's host side.
type CQStats struct {
	Events     uint64 // NtfCQEvent notifications received
	RingErrors uint64 // entries with a wrong phase tag or a bad index (skipped, never trusted)
}

// CreateCQ allocates a completion queue of at least entries entries
// (rounded up to a power of two) and announces it with CREATE_CQ. Size it
// for every completion that can be outstanding: a full CQ is an overrun
// that moves its QPs to ERROR.
func (h *Host) CreateCQ(entries int) (*CQ, error) {
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	return v.createCQ(entries)
}

func queueCount(n int, what string) (uint32, error) {
	if n <= 0 || n > MaxQueueDepth {
		return 0, fmt.Errorf("verbs: %s of %d entries (1..%d)", what, n, MaxQueueDepth)
	}
	return nextPow2(uint32(n)), nil
}

func (v *verbsState) createCQ(entries int) (*CQ, error) {
	count, err := queueCount(entries, "CQ")
	if err != nil {
		return nil, err
	}
	l, err := rings.AllocCQ(v.mem, count)
	if err != nil {
		return nil, fmt.Errorf("verbs: CQ ring: %w", err)
	}
	cq, err := newCQOn(v, l)
	if err != nil {
		_ = v.mem.Free(l.Base)
		return nil, err
	}
	v.mu.Lock()
	num := -1
	for i, c := range v.cqs {
		if c == nil {
			num = i
			break
		}
	}
	if num < 0 {
		v.mu.Unlock()
		_ = v.mem.Free(l.Base)
		return nil, fmt.Errorf("verbs: all %d CQ numbers in use", maxCQNum)
	}
	cq.num = uint32(num)
	v.cqs[num] = cq
	v.mu.Unlock()
	drop := func() {
		v.mu.Lock()
		v.cqs[num] = nil
		v.mu.Unlock()
		_ = v.mem.Free(l.Base)
	}
	late := func(r rings.Command, err error) {
		switch {
		case err != nil:
			// Lost: the device may have the ring; it stays.
		case r.Status == rings.StatusOK:
			// Created after we gave up: destroy it, then free.
			v.submitLate(rings.Command{Opcode: rings.OpDestroyCQ, Conn: cq.num}, func(r rings.Command, err error) {
				if err == nil && (r.Status == rings.StatusOK || r.Status == rings.StatusBadParam) {
					drop()
					v.quarantined(-1)
				}
			})
		default:
			drop()
			v.quarantined(-1)
		}
	}
	if _, err := v.doLate(rings.Command{Opcode: rings.OpCreateCQ, Conn: cq.num, Addr: l.Base, Arg0: l.Count}, late); err != nil {
		var ce *CommandError
		if errors.As(err, &ce) || errors.Is(err, errNotSubmitted) {
			drop()
		} else {
			// Not answered: the device may write completions into the
			// ring, so its memory and number stay reserved until it does.
			v.quarantined(1)
		}
		return nil, err
	}
	return cq, nil
}

// quarantined counts resources held back for an unanswered command.
func (v *verbsState) quarantined(delta int64) {
	if v.o != nil {
		v.o.drv.quarantine(delta)
	}
}

// newCQOn opens the host side of a CQ ring (no command).
func newCQOn(v *verbsState, l rings.Layout) (*CQ, error) {
	cons, err := rings.NewConsumer(v.mem, l, l.Count, nil)
	if err != nil {
		return nil, fmt.Errorf("verbs: CQ ring: %w", err)
	}
	return &CQ{v: v, layout: l, cons: cons, ev: make(chan struct{}, 1), done: make(chan struct{})}, nil
}

// Num is the CQ number the device knows it by.
func (cq *CQ) Num() uint32 { return cq.num }

// Entries is the ring's size.
func (cq *CQ) Entries() int { return int(cq.layout.Count) }

// Poll moves up to len(wc) completions into wc and returns how many
// (ibv_poll_cq). It is a ring read: no command, no lock shared with the
// device. Safe for concurrent use.
func (cq *CQ) Poll(wc []rings.Completion) int {
	if cq == nil || len(wc) == 0 {
		return 0
	}
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.cons == nil {
		return 0
	}
	n := 0
	for n < len(wc) {
		e, err := cq.cons.Peek()
		if err != nil {
			cq.ringEr++
			cq.lastEr = err
			if e == nil {
				break // a bad producer index: forgotten, re-read next time
			}
			cq.cons.Pop() // a wrong phase tag: counted and skipped
			continue
		}
		if e == nil {
			break
		}
		_ = wc[n].Decode(rings.CQEntry(e))
		cq.cons.Pop()
		n++
	}
	cq.cons.Release()
	return n
}

// ReqNotify arms the CQ (ibv_req_notify_cq, ARM_CQ): the next completion,
// or with solicitedOnly the next solicited or unsuccessful one, posts one
// CQ event, which Wait returns. Poll again after arming: a completion that
// arrived before the arm does not fire it.
func (cq *CQ) ReqNotify(solicitedOnly bool) error {
	if cq == nil {
		return errors.New("verbs: ARM_CQ: nil CQ")
	}
	if cq.dead.Load() {
		return ErrCQDestroyed
	}
	arg := uint32(0)
	if solicitedOnly {
		arg = 1
	}
	_, err := cq.v.do(rings.Command{Opcode: rings.OpArmCQ, Conn: cq.num, Arg0: arg})
	return err
}

// Wait blocks until a CQ event (ibv_get_cq_event) or ctx ends. Events
// are latched one deep: one that came before Wait is returned at once.
func (cq *CQ) Wait(ctx context.Context) error {
	if cq == nil {
		return errors.New("verbs: wait on a nil CQ")
	}
	select {
	case <-cq.ev:
		return nil
	default:
	}
	select {
	case <-cq.ev:
		return nil
	case <-cq.done:
		return ErrCQDestroyed
	case <-ctx.Done():
		return ctx.Err()
	}
}

// C is the CQ's event channel, for select: it yields once per latched
// event (the same events Wait consumes).
func (cq *CQ) C() <-chan struct{} { return cq.ev }

// PollWait returns at least one completion: it polls, and when the CQ is
// empty arms it, polls again (a completion that came before the arm fires
// nothing), and waits for the event.
func (cq *CQ) PollWait(ctx context.Context, wc []rings.Completion, solicitedOnly bool) (int, error) {
	if len(wc) == 0 {
		return 0, errors.New("verbs: PollWait with no room for completions")
	}
	for {
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if err := cq.ReqNotify(solicitedOnly); err != nil {
			return 0, err
		}
		if n := cq.Poll(wc); n > 0 {
			return n, nil
		}
		if err := cq.Wait(ctx); err != nil {
			return 0, err
		}
	}
}

func (cq *CQ) signal() {
	cq.events.Add(1)
	select {
	case cq.ev <- struct{}{}:
	default:
	}
}

// Stats returns the CQ's host-side counters.
func (cq *CQ) Stats() CQStats {
	cq.mu.Lock()
	defer cq.mu.Unlock()
	return CQStats{Events: cq.events.Load(), RingErrors: cq.ringEr}
}

// Destroy removes the CQ (ibv_destroy_cq, DESTROY_CQ) and frees its ring.
// A CQ some QP still uses is not destroyed.
func (cq *CQ) Destroy() error {
	if cq == nil {
		return errors.New("verbs: DESTROY_CQ: nil CQ")
	}
	if n := cq.qpRefs.Load(); n > 0 {
		return fmt.Errorf("verbs: DESTROY_CQ: in use by %d QP(s)", n)
	}
	if !cq.dead.CompareAndSwap(false, true) {
		return nil
	}
	v := cq.v
	finish := func() error {
		v.mu.Lock()
		if v.cqs[cq.num] == cq {
			v.cqs[cq.num] = nil
		}
		v.mu.Unlock()
		cq.mu.Lock()
		cq.cons = nil
		cq.mu.Unlock()
		close(cq.done)
		return v.mem.Free(cq.layout.Base)
	}
	_, err := v.doLate(rings.Command{Opcode: rings.OpDestroyCQ, Conn: cq.num}, func(r rings.Command, err error) {
		// The answer to a DESTROY_CQ we gave up on: the ring was kept
		// (the device may still write it) until now.
		switch {
		case err == nil && r.Status == rings.StatusOK:
			_ = finish()
			v.quarantined(-1)
		case err == nil:
			cq.dead.Store(false) // refused: the CQ lives on
			v.quarantined(-1)
		}
	})
	if err != nil {
		var ce *CommandError
		if !errors.As(err, &ce) && !errors.Is(err, errNotSubmitted) {
			v.quarantined(1) // dead stays set: the late answer finishes it
			return err
		}
		cq.dead.Store(false)
		return err
	}
	return finish()
}

// ---- queue pairs ---------------------------------------------------------

// QPAttr describes a QP (ibv_qp_init_attr plus the connection parameters
// of rdma_conn_param).
type QPAttr struct {
	PD             PD
	SendCQ, RecvCQ *CQ // may be the same CQ
	// SQDepth and RQDepth are the work queue sizes, rounded up to a power
	// of two (0: DefaultQueueDepth).
	SQDepth, RQDepth int
	// IRD bounds the peer's RDMA Reads waiting for our response, ORD our
	// RDMA Reads outstanding (0: the device default, 16).
	IRD, ORD int
	// PrivateData goes in the MPA request (DialRDMA) or is the default
	// of the MPA reply (listener); at most MaxPrivateData bytes.
	PrivateData []byte
	// Setup, if set, runs right after CREATE_QP, before the connection is
	// established: post receives here. A responder must have receives
	// posted before it accepts (the initiator may send at once).
	Setup func(*QP) error
	// ConnectTimeout bounds a listener's wait for the peer's MPA request
	// (0: DefaultConnectTimeout). DialRDMA uses its context instead.
	ConnectTimeout time.Duration
}

func (a *QPAttr) check(v *verbsState) error {
	switch {
	case a.SendCQ == nil || a.RecvCQ == nil:
		return errors.New("verbs: QPAttr: SendCQ and RecvCQ are required")
	case a.SendCQ.v != v || a.RecvCQ.v != v:
		return errors.New("verbs: QPAttr: a CQ of another host")
	case a.SendCQ.dead.Load() || a.RecvCQ.dead.Load():
		return fmt.Errorf("verbs: QPAttr: %w", ErrCQDestroyed)
	case a.SQDepth < 0 || a.SQDepth > MaxQueueDepth || a.RQDepth < 0 || a.RQDepth > MaxQueueDepth:
		return fmt.Errorf("verbs: QPAttr: SQ depth %d / RQ depth %d (0..%d)", a.SQDepth, a.RQDepth, MaxQueueDepth)
	case a.IRD < 0 || a.IRD > 0xFFFF || a.ORD < 0 || a.ORD > 0xFFFF:
		return fmt.Errorf("verbs: QPAttr: IRD %d / ORD %d (0..65535)", a.IRD, a.ORD)
	case len(a.PrivateData) > MaxPrivateData:
		return fmt.Errorf("verbs: QPAttr: %d bytes of private data (at most %d)", len(a.PrivateData), MaxPrivateData)
	case a.ConnectTimeout < 0:
		return errors.New("verbs: QPAttr: negative ConnectTimeout")
	}
	return nil
}

// QPState is the host's view of a QP, from the device's events.
type QPState int

// QP states.
const (
	QPStateIdle           QPState = iota // created, not connected
	QPStateConnecting                    // initiator: MPA request sent
	QPStateConnectRequest                // responder: the peer's MPA request arrived
	QPStateAccepted                      // responder: MPA reply sent, waiting for the first FPDU (may post; sends wait)
	QPStateRTS                           // established
	QPStateClosing                       // orderly close requested: work flushed, connection closing
	QPStateError                         // Terminate, reject, lost connection or CQ overrun
	QPStateClosed                        // the connection is over
	QPStateDestroyed
)

var qpStateNames = [...]string{"IDLE", "CONNECTING", "CONNECT_REQUEST", "ACCEPTED", "RTS", "CLOSING", "ERROR", "CLOSED", "DESTROYED"}

func (s QPState) String() string {
	if s >= 0 && int(s) < len(qpStateNames) {
		return qpStateNames[s]
	}
	return fmt.Sprintf("QPState(%d)", int(s))
}

// QP is a queue pair (ibv_qp) on a delegated connection.
type QP struct {
	v         *verbsState
	conn      *DelegatedConn // nil in unit tests
	qpn       uint32
	pd        PD
	sendCQ    *CQ
	recvCQ    *CQ
	initiator bool
	adoptable bool // made by afterOffload, not yet taken by adoptQP (under v.mu)

	cfgBase       rings.Addr // config block at +0, private data at +qpPrivOff
	sqL, rqL      rings.Layout
	sqMu, rqMu    sync.Mutex
	sq, rq        *rings.Producer
	sqDead        bool // under sqMu
	rqDead        bool // under rqMu
	ctlMu         sync.Mutex
	ctlBusy       atomic.Bool // a MODIFY_QP with private data is unanswered
	destroyOnce   sync.Once
	destroyErr    error
	local, remote net.Addr

	mu        sync.Mutex
	state     QPState
	err       error // why the QP is in ERROR
	lastEv    rings.QPEvent
	peerPriv  []byte // the peer's MPA private data (request or reply)
	closeReq  bool
	llpClosed bool
	changed   chan struct{} // closed and replaced on every change
}

const (
	qpPrivOff     = 128                        // private data, after the config block
	qpPeerPrivOff = qpPrivOff + MaxPrivateData // the peer's private data, written by the device
	qpCtlSize     = qpPeerPrivOff + MaxPrivateData
)

// newQP allocates a QP's rings and control block (no command).
func (v *verbsState) newQP(attr *QPAttr, qpn uint32, initiator bool) (*QP, error) {
	sqd, rqd := attr.SQDepth, attr.RQDepth
	if sqd == 0 {
		sqd = DefaultQueueDepth
	}
	if rqd == 0 {
		rqd = DefaultQueueDepth
	}
	sqc, err := queueCount(sqd, "SQ")
	if err != nil {
		return nil, err
	}
	rqc, err := queueCount(rqd, "RQ")
	if err != nil {
		return nil, err
	}
	qp := &QP{v: v, qpn: qpn, pd: attr.PD, sendCQ: attr.SendCQ, recvCQ: attr.RecvCQ, initiator: initiator,
		changed: make(chan struct{})}
	fail := func(err error) (*QP, error) {
		qp.freeMem()
		return nil, fmt.Errorf("verbs: QP memory: %w", err)
	}
	if qp.sqL, err = rings.AllocSQ(v.mem, sqc); err != nil {
		return fail(err)
	}
	if qp.rqL, err = rings.AllocRQ(v.mem, rqc); err != nil {
		return fail(err)
	}
	if qp.cfgBase, err = v.mem.Alloc(qpCtlSize, rings.CacheLine); err != nil {
		return fail(err)
	}
	// The doorbell is the QP_DOORBELL command, so the producers publish
	// only when told (batch = whole ring) and kick nobody.
	if qp.sq, err = rings.NewProducer(v.mem, qp.sqL, qp.sqL.Count, nil); err != nil {
		return fail(err)
	}
	if qp.rq, err = rings.NewProducer(v.mem, qp.rqL, qp.rqL.Count, nil); err != nil {
		return fail(err)
	}
	blk, _ := v.mem.Map(qp.cfgBase, qpCtlSize)
	cfg := qp.config(len(attr.PrivateData), attr.IRD, attr.ORD)
	cfg.Encode(blk)
	copy(blk[qpPrivOff:], attr.PrivateData)
	v.copied(len(attr.PrivateData))
	return qp, nil
}

// config is the QP's CREATE_QP block.
func (qp *QP) config(privLen, ird, ord int) rings.QPConfig {
	c := rings.QPConfig{
		PD: uint32(qp.pd), IRD: uint16(ird), ORD: uint16(ord),
		SendCQ: qp.sendCQ.num, RecvCQ: qp.recvCQ.num,
		SQBase: qp.sqL.Base, SQCount: qp.sqL.Count,
		RQBase: qp.rqL.Base, RQCount: qp.rqL.Count,
		PeerPrivAddr: qp.cfgBase + qpPeerPrivOff,
	}
	if qp.initiator {
		c.Flags |= rings.QPFlagInitiator
	}
	if privLen > 0 {
		c.PrivAddr, c.PrivLen = qp.cfgBase+qpPrivOff, uint32(privLen)
	}
	return c
}

func (qp *QP) freeMem() {
	mem := qp.v.mem
	for _, a := range []*rings.Addr{&qp.sqL.Base, &qp.rqL.Base, &qp.cfgBase} {
		if *a != 0 {
			_ = mem.Free(*a)
			*a = 0
		}
	}
}

// register enters the QP under its number (before CREATE_QP: events may
// follow at once) and counts it on its CQs.
func (qp *QP) register() error {
	v := qp.v
	v.mu.Lock()
	if v.qps[qp.qpn] != nil {
		v.mu.Unlock()
		return fmt.Errorf("verbs: CREATE_QP: connection %d already has a QP", qp.qpn)
	}
	v.qps[qp.qpn] = qp
	v.mu.Unlock()
	qp.sendCQ.qpRefs.Add(1)
	qp.recvCQ.qpRefs.Add(1)
	return nil
}

// takeStream readies a just delegated connection for its QP: the host
// memory of the byte-stream path goes back (an RDMA connection never uses
// it), and bytes the host already holds mean the peer's first bytes did
// not go to the QP.
func takeStream(mem *rings.Arena, c *DelegatedConn) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, a := range c.rxBufs {
		_ = mem.Free(a)
	}
	c.rxBufs, c.rxBufMem = nil, nil
	if c.sndBase != 0 {
		_ = mem.Free(c.sndBase)
		c.sndBase, c.sndMem = 0, nil
	}
	if len(c.chunks) > 0 || c.legacyOut > 0 {
		return ErrEarlyData
	}
	return nil
}

func (qp *QP) unregister() {
	v := qp.v
	v.mu.Lock()
	if v.qps[qp.qpn] == qp {
		delete(v.qps, qp.qpn)
	}
	v.mu.Unlock()
	qp.sendCQ.qpRefs.Add(-1)
	qp.recvCQ.qpRefs.Add(-1)
}

// QPN is the QP number (the delegated connection's index).
func (qp *QP) QPN() uint32 { return qp.qpn }

// PD is the QP's protection domain.
func (qp *QP) PD() PD { return qp.pd }

// SendCQ and RecvCQ are the QP's completion queues.
func (qp *QP) SendCQ() *CQ { return qp.sendCQ }

// RecvCQ is the CQ of the QP's receive completions.
func (qp *QP) RecvCQ() *CQ { return qp.recvCQ }

// LocalAddr and RemoteAddr are the connection's TCP endpoints.
func (qp *QP) LocalAddr() net.Addr { return qp.local }

// RemoteAddr is the peer's TCP endpoint.
func (qp *QP) RemoteAddr() net.Addr { return qp.remote }

// State is the QP's state as the host knows it.
func (qp *QP) State() QPState {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.state
}

// Err says why the QP is in ERROR (nil otherwise).
func (qp *QP) Err() error {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.err
}

// LastEvent is the last QP event the device reported.
func (qp *QP) LastEvent() rings.QPEvent {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	return qp.lastEv
}

func (qp *QP) changedLocked() {
	close(qp.changed)
	qp.changed = make(chan struct{})
}

func (qp *QP) failLocked(err error) {
	if qp.err == nil {
		qp.err = err
	}
	if qp.state < QPStateError {
		qp.state = QPStateError
	}
}

// onEvent applies a QP event (interrupt goroutine; never blocks).
func (qp *QP) onEvent(ev rings.QPEvent, privLen uint32) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	qp.lastEv = ev
	if privLen > 0 && privLen <= MaxPrivateData {
		if b, err := qp.v.mem.Map(qp.cfgBase+qpPeerPrivOff, int(privLen)); err == nil {
			qp.peerPriv = append(qp.peerPriv[:0], b...)
			qp.v.copied(len(b))
		}
	}
	switch ev {
	case rings.QPEvConnectRequest:
		if qp.state == QPStateIdle {
			qp.state = QPStateConnectRequest
		}
	case rings.QPEvEstablished:
		if qp.state < QPStateRTS {
			qp.state = QPStateRTS
		}
	case rings.QPEvRejected:
		qp.failLocked(ErrRejected)
	case rings.QPEvTerminate:
		qp.failLocked(fmt.Errorf("%w: Terminate", ErrQPError))
	case rings.QPEvError:
		qp.failLocked(fmt.Errorf("%w: connection lost or CQ overrun", ErrQPError))
	case rings.QPEvClosed:
		qp.llpClosed = true
		if qp.state < QPStateClosed {
			qp.state = QPStateClosed
		}
	}
	qp.changedLocked()
}

// onConnNotify looks at a notification of the QP's connection.
func (qp *QP) onConnNotify(n *rings.Notification) {
	qp.mu.Lock()
	defer qp.mu.Unlock()
	if n.Flags&(rings.NtfLegacyUpload|rings.NtfUserBufDone) != 0 && n.Len > 0 && qp.state < QPStateRTS {
		// The peer's bytes went to the host, not to the QP: the MPA
		// exchange can never complete.
		qp.failLocked(ErrEarlyData)
	}
	if n.Flags&(rings.NtfRst|rings.NtfTimeout) != 0 {
		qp.failLocked(fmt.Errorf("%w: connection %v", ErrQPError, n.Flags&(rings.NtfRst|rings.NtfTimeout)))
	}
	if n.Flags&rings.NtfClosed != 0 {
		qp.llpClosed = true
	}
	if n.Flags&rings.NtfFin != 0 && !qp.closeReq && qp.state < QPStateClosing {
		// The peer closed: iWARP has no half-close, so close our side
		// too (its work is flushed and the connection ends), off the
		// interrupt goroutine.
		qp.closeReq = true
		go func() { _ = qp.modify(rings.QPClose, nil) }()
	}
	qp.changedLocked()
}

// wait blocks until done says so, ctx ends, or the QP is destroyed.
func (qp *QP) wait(ctx context.Context, done func() (bool, error)) error {
	for {
		qp.mu.Lock()
		ok, err := done()
		ch := qp.changed
		st := qp.state
		qp.mu.Unlock()
		if ok || err != nil {
			return err
		}
		if st == QPStateDestroyed {
			return ErrQPDestroyed
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return fmt.Errorf("verbs: QP %d in %v: %w", qp.qpn, st, ctx.Err())
		}
	}
}

// WaitEstablished waits until the QP is in RTS (for a responder: the
// initiator's first FPDU arrived).
func (qp *QP) WaitEstablished(ctx context.Context) error {
	return qp.wait(ctx, func() (bool, error) {
		if qp.state == QPStateRTS {
			return true, nil
		}
		if qp.state >= QPStateClosing {
			return false, qp.stateErr()
		}
		return false, nil
	})
}

func (qp *QP) stateErr() error {
	if qp.err != nil {
		return qp.err
	}
	if qp.state == QPStateDestroyed {
		return ErrQPDestroyed
	}
	return fmt.Errorf("verbs: QP %d is %v", qp.qpn, qp.state)
}

// modify runs MODIFY_QP with private data (ACCEPT/REJECT).
func (qp *QP) modify(a rings.QPAction, priv []byte) error {
	if len(priv) > MaxPrivateData {
		return fmt.Errorf("verbs: MODIFY_QP: %d bytes of private data (at most %d)", len(priv), MaxPrivateData)
	}
	qp.ctlMu.Lock()
	defer qp.ctlMu.Unlock()
	if qp.State() == QPStateDestroyed {
		return ErrQPDestroyed
	}
	if qp.ctlBusy.Load() {
		// A MODIFY_QP the device has not answered may still read the
		// private data area: it is not rewritten before the answer.
		return fmt.Errorf("verbs: MODIFY_QP: QP %d: an earlier MODIFY_QP is still unanswered", qp.qpn)
	}
	c := rings.Command{Opcode: rings.OpModifyQP, Conn: qp.qpn, Arg0: uint32(a)}
	if len(priv) > 0 {
		m, err := qp.v.mem.Map(qp.cfgBase+qpPrivOff, len(priv))
		if err != nil {
			return fmt.Errorf("verbs: MODIFY_QP: %w", err)
		}
		copy(m, priv)
		qp.v.copied(len(priv))
		c.Addr, c.Len = qp.cfgBase+qpPrivOff, uint32(len(priv))
	}
	if _, err := qp.v.doLate(c, func(rings.Command, error) { qp.ctlBusy.Store(false) }); err != nil {
		var ce *CommandError
		if c.Len > 0 && !errors.As(err, &ce) && !errors.Is(err, errNotSubmitted) {
			qp.ctlBusy.Store(true)
		}
		return err
	}
	qp.mu.Lock()
	switch a {
	case rings.QPConnect:
		if qp.state == QPStateIdle {
			qp.state = QPStateConnecting
		}
	case rings.QPAccept:
		if qp.state < QPStateAccepted {
			qp.state = QPStateAccepted
		}
	case rings.QPReject:
		qp.failLocked(errors.New("verbs: connection rejected"))
	case rings.QPClose:
		qp.closeReq = true
		if qp.state < QPStateClosing {
			qp.state = QPStateClosing
		}
	}
	qp.changedLocked()
	qp.mu.Unlock()
	return nil
}

// PostSend posts one send work request (ibv_post_send) and rings the
// doorbell. The device judges the opcode (iWARP has no SEND_WITH_IMM,
// atomics or memory windows: those complete with LOC_QP_OP_ERR); the host
// refuses only what cannot be encoded.
func (qp *QP) PostSend(wr *rings.SendWR) error {
	if wr == nil {
		return errors.New("verbs: post send: nil work request")
	}
	_, err := qp.PostSendList([]rings.SendWR{*wr})
	return err
}

// PostSendList posts the work requests in order with one doorbell and
// returns how many were posted; with fewer than len(wrs) the error says
// why (ErrQueueFull, or the first bad request).
func (qp *QP) PostSendList(wrs []rings.SendWR) (int, error) {
	if qp == nil {
		return 0, errors.New("verbs: post send: nil QP")
	}
	qp.sqMu.Lock()
	if qp.sqDead {
		qp.sqMu.Unlock()
		return 0, ErrQPDestroyed
	}
	n, inline := 0, 0
	var err error
	for i := range wrs {
		if err = checkSendWR(&wrs[i]); err != nil {
			break
		}
		e := qp.sq.Next()
		if e == nil {
			err = ErrQueueFull
			break
		}
		wrs[i].Encode(rings.SQEntry(e))
		if wrs[i].Flags&rings.WRInline != 0 {
			inline += wrs[i].InlineLen // the CPU copied them into the SQ
		}
		qp.sq.Commit()
		n++
	}
	if n > 0 {
		qp.sq.Publish()
	}
	qp.sqMu.Unlock()
	qp.v.copied(inline)
	if n > 0 {
		if derr := qp.doorbell(); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

func checkSendWR(w *rings.SendWR) error {
	switch {
	case w.Flags&^rings.WRFlagsAll != 0:
		return fmt.Errorf("verbs: post send: unknown flags %#x", uint8(w.Flags&^rings.WRFlagsAll))
	case w.Flags&rings.WRInline != 0 && (w.InlineLen < 0 || w.InlineLen > rings.MaxInline):
		return fmt.Errorf("verbs: post send: %d bytes inline (at most %d)", w.InlineLen, rings.MaxInline)
	case w.Flags&rings.WRInline == 0 && (w.NumSGE < 0 || w.NumSGE > rings.MaxSendSGE):
		return fmt.Errorf("verbs: post send: %d SGEs (at most %d)", w.NumSGE, rings.MaxSendSGE)
	}
	return nil
}

// PostRecv posts one receive work request (ibv_post_recv).
func (qp *QP) PostRecv(wr *rings.RecvWR) error {
	if wr == nil {
		return errors.New("verbs: post recv: nil work request")
	}
	_, err := qp.PostRecvList([]rings.RecvWR{*wr})
	return err
}

// PostRecvList posts receive work requests with one doorbell; as
// PostSendList.
func (qp *QP) PostRecvList(wrs []rings.RecvWR) (int, error) {
	if qp == nil {
		return 0, errors.New("verbs: post recv: nil QP")
	}
	qp.rqMu.Lock()
	if qp.rqDead {
		qp.rqMu.Unlock()
		return 0, ErrQPDestroyed
	}
	n := 0
	var err error
	for i := range wrs {
		if wrs[i].NumSGE < 0 || wrs[i].NumSGE > rings.MaxRecvSGE {
			err = fmt.Errorf("verbs: post recv: %d SGEs (at most %d)", wrs[i].NumSGE, rings.MaxRecvSGE)
			break
		}
		e := qp.rq.Next()
		if e == nil {
			err = ErrQueueFull
			break
		}
		wrs[i].Encode(rings.RQEntry(e))
		qp.rq.Commit()
		n++
	}
	if n > 0 {
		qp.rq.Publish()
	}
	qp.rqMu.Unlock()
	if n > 0 {
		if derr := qp.doorbell(); derr != nil && err == nil {
			err = derr
		}
	}
	return n, err
}

// doorbell tells the device the QP's queues have new entries. Posting to a
// QP in ERROR is allowed (the work completes flushed, as in verbs).
func (qp *QP) doorbell() error {
	_, err := qp.v.do(rings.Command{Opcode: rings.OpQPDoorbell, Conn: qp.qpn})
	if err != nil {
		return fmt.Errorf("verbs: QP %d doorbell (work request queued): %w", qp.qpn, err)
	}
	return nil
}

// SendQueueFree is how many send work requests can be posted now.
func (qp *QP) SendQueueFree() int {
	qp.sqMu.Lock()
	defer qp.sqMu.Unlock()
	if qp.sqDead {
		return 0
	}
	return qp.sq.Free()
}

// RecvQueueFree is how many receive work requests can be posted now.
func (qp *QP) RecvQueueFree() int {
	qp.rqMu.Lock()
	defer qp.rqMu.Unlock()
	if qp.rqDead {
		return 0
	}
	return qp.rq.Free()
}

// Disconnect closes the connection in order (rdma_disconnect, MODIFY_QP
// CLOSE): nothing more is sent, outstanding work completes flushed, and the
// TCP connection closes; it waits until it has, or ctx ends.
func (qp *QP) Disconnect(ctx context.Context) error {
	if qp == nil {
		return errors.New("verbs: disconnect: nil QP")
	}
	qp.mu.Lock()
	st, req := qp.state, qp.closeReq
	qp.mu.Unlock()
	if st == QPStateDestroyed {
		return ErrQPDestroyed
	}
	if !req && st < QPStateClosing {
		if err := qp.modify(rings.QPClose, nil); err != nil {
			return err
		}
	}
	return qp.wait(ctx, func() (bool, error) {
		return qp.llpClosed || qp.state >= QPStateError, nil
	})
}

// Close disconnects (bounded by a short timeout) and destroys the QP.
func (qp *QP) Close() error {
	if qp == nil {
		return errors.New("verbs: close: nil QP")
	}
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	_ = qp.Disconnect(ctx)
	cancel()
	return qp.Destroy()
}

// Destroy removes the QP (ibv_destroy_qp, DESTROY_QP): outstanding work
// completes flushed into its CQs, the connection is aborted if still open
// (an RST, unless Disconnect finished), and the host memory of the queues
// and the connection is released. Later posts fail with ErrQPDestroyed.
func (qp *QP) Destroy() error {
	if qp == nil {
		return errors.New("verbs: destroy: nil QP")
	}
	qp.destroyOnce.Do(func() { qp.destroyErr = qp.destroy() })
	return qp.destroyErr
}

func (qp *QP) destroy() error {
	qp.sqMu.Lock()
	qp.sqDead = true
	qp.sqMu.Unlock()
	qp.rqMu.Lock()
	qp.rqDead = true
	qp.rqMu.Unlock()
	qp.ctlMu.Lock()
	// gone frees what the device no longer uses: DESTROY_QP (or, as
	// BAD_CONN says, an earlier ABORT) freed the connection in the unit
	// and flushed the QP's work.
	gone := func() {
		if qp.conn != nil {
			qp.conn.aborted.Store(true)
			releaseConn(qp.conn)
		}
		qp.freeMem()
	}
	_, err := qp.v.doLate(rings.Command{Opcode: rings.OpDestroyQP, Conn: qp.qpn}, func(r rings.Command, err error) {
		if err == nil && (r.Status == rings.StatusOK || r.Status == rings.StatusBadConn) {
			gone()
			qp.v.quarantined(-1)
		}
	})
	qp.mu.Lock()
	qp.state = QPStateDestroyed
	qp.changedLocked()
	qp.mu.Unlock()
	qp.ctlMu.Unlock()
	qp.unregister()
	var ce *CommandError
	if err != nil && !(errors.As(err, &ce) && ce.Status == rings.StatusBadConn) {
		// The device may still use the rings and the connection: keep
		// their memory and index rather than let it write into reused
		// ones (until a late answer says it no longer does).
		if !errors.As(err, &ce) && !errors.Is(err, errNotSubmitted) {
			qp.v.quarantined(1)
		}
		return err
	}
	gone()
	return nil
}

// releaseConn lets the offloader free an RDMA connection's index (the
// device aborted it with DESTROY_QP, or it had closed).
func releaseConn(c *DelegatedConn) {
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.o.release(c)
}

// ---- connection management -----------------------------------------------

// DialRDMA connects to an RDMA listener (rdma_connect): a TCP connection
// opened by netstack and delegated without user buffers, CREATE_QP as the
// MPA initiator with attr, attr.Setup, MODIFY_QP CONNECT (the MPA request
// with attr.PrivateData), and the wait for the reply (QPEvEstablished). A
// rejection is ErrRejected.
func (h *Host) DialRDMA(ctx context.Context, dst netip.AddrPort, attr QPAttr) (*QP, error) {
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	if err := attr.check(v); err != nil {
		return nil, err
	}
	nc, err := h.DialTracked(ctx, dst)
	if err != nil {
		return nil, fmt.Errorf("verbs: dial %v: %w", dst, err)
	}
	v.markFlow(nc.key, &attr)
	c, err := h.Delegate(nc) // OFFLOAD and CREATE_QP (afterOffload)
	v.markFlow(nc.key, nil)
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
	return qp, nil
}

// RDMAListener accepts RDMA connections (rdma_listen). Every connection
// netstack accepts is delegated without user buffers and given a responder
// QP at once, in the background (a peer's MPA request that arrives before
// is held and injected behind the QP's CREATE_QP); once the request is
// there the connection is offered to GetRequest
// (RDMA_CM_EVENT_CONNECT_REQUEST).
type RDMAListener struct {
	h    *Host
	v    *verbsState
	ol   *OffloadListener
	key  listenKey
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
func (h *Host) ListenRDMA(port uint16, attr QPAttr) (*RDMAListener, error) {
	v, err := h.verbs()
	if err != nil {
		return nil, err
	}
	if err := attr.check(v); err != nil {
		return nil, err
	}
	if attr.ConnectTimeout == 0 {
		attr.ConnectTimeout = DefaultConnectTimeout
	}
	k := listenKey{h.Addr().As4(), port}
	l := &RDMAListener{h: h, v: v, key: k, attr: attr, reqs: make(chan *ConnRequest, 64), done: make(chan struct{})}
	// Before netstack listens: no early byte may slip through, and every
	// accepted connection is delegated with its QP.
	if err := v.listenOn(k, &l.attr); err != nil {
		return nil, err
	}
	ol, err := h.ListenOffload(port)
	if err != nil {
		_ = v.listenOn(k, nil)
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
			if c, ok := nc.(*DelegatedConn); ok {
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
		c, ok := nc.(*DelegatedConn)
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
func (l *RDMAListener) discard(c *DelegatedConn) {
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
func (l *RDMAListener) setup(c *DelegatedConn) {
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
		_ = l.v.listenOn(l.key, nil)
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
