package verbs

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// Limits of the host side. maxCQNum is the device's CQ table size
// (CREATE_CQ's Conn must be below it).
const (
	maxCQNum = 256
	// MaxPrivateData is the most MPA private data a connect, accept or
	// reject carries (RFC 5044).
	MaxPrivateData = 512
	// MaxIRDORD is the largest IRD or ORD a QP takes (MPA revision 2's
	// 14-bit fields).
	MaxIRDORD = 16383
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
	// ErrDoorbell: an asynchronous doorbell was refused or lost (wrapped
	// with ErrQPError). The work posted behind it never reached the
	// device, so no completion will ever come for it: QP.Failed is how an
	// upper layer learns.
	ErrDoorbell = errors.New("verbs: doorbell refused")
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

// Provider is one host's RDMA verbs (ibv_context): the host's protection
// domains, memory regions, CQs, QPs and RDMA listeners. A host has one;
// Open returns it. It is the host's tcpstack.RDMAHooks: delegation gives
// it the RDMA notifications and every OFFLOAD of an RDMA connection.
type Provider struct {
	h    *tcpstack.Host    // nil on the tests' fake device
	host tcpstack.RDMAHost // what the provider may ask of the host
	mem  *rings.Arena
	// db is the device's RDMA doorbell registers, nil where it has none
	// (doorbell.go): QP doorbells and PollWait's arms are then commands.
	db rings.RDMADoorbell

	pdNext atomic.Uint32 // the last protection domain number handed out
	// dropped is the optional extensions taken away (DropExtension), a
	// bit per Extension.
	dropped atomic.Uint32

	mu     sync.Mutex
	cqs    [maxCQNum]*CQ
	qps    map[uint32]*QP
	mrs    map[uint32]*MR       // live registrations by STag
	fmrs   map[*FastMR]struct{} // STags allocated for fast registration
	caches map[*RegCache]struct{}
	// RDMA connections being delegated, with their QP's attributes:
	// dialled flows (initiator) and listeners (responder).
	flows  map[hdr.Tuple]*QPAttr
	listen map[listenKey]*QPAttr
	// prepErr says why the QP of a connection index could not be made
	// with its OFFLOAD (read by adoptQP).
	prepErr map[uint32]error
	// listenSnap is listen's keys as an immutable map for the receive
	// filter.
	listenSnap atomic.Pointer[map[listenKey]bool]
	// early holds the bytes peers sent to RDMA listeners before their
	// connection was delegated (holdEarlyData), by flow.
	early map[hdr.Tuple]*earlyFlow
	// earlyHeld counts frames held, earlyInjected frames handed to the
	// unit, earlyDropped frames dropped (table full); onEarlyHold (tests)
	// runs after a frame is held, beforePrepare (tests) at the start of
	// every delegation's RDMA side.
	earlyHeld, earlyInjected, earlyDropped atomic.Uint64
	onEarlyHold                            func(hdr.Tuple)
	beforePrepare                          func(hdr.Tuple)
}

// Open returns host h's RDMA provider (ibv_open_device), attaching it the
// first time: delegation is turned on if it was not, since every QP runs
// on a delegated connection.
func Open(h *tcpstack.Host) (*Provider, error) {
	hk, err := h.AttachRDMA(func(rh tcpstack.RDMAHost) tcpstack.RDMAHooks { return newProvider(h, rh) })
	if err != nil {
		return nil, fmt.Errorf("verbs: %w", err)
	}
	v, ok := hk.(*Provider)
	if !ok {
		return nil, fmt.Errorf("verbs: the host has another RDMA provider (%T)", hk)
	}
	return v, nil
}

// newProvider makes the provider of host h (nil in tests) on rh.
func newProvider(h *tcpstack.Host, rh tcpstack.RDMAHost) *Provider {
	v := &Provider{
		h: h, host: rh, mem: rh.Mem(), db: rdmaDoorbell(rh),
		qps:     make(map[uint32]*QP),
		mrs:     make(map[uint32]*MR),
		fmrs:    make(map[*FastMR]struct{}),
		caches:  make(map[*RegCache]struct{}),
		flows:   make(map[hdr.Tuple]*QPAttr),
		listen:  make(map[listenKey]*QPAttr),
		prepErr: make(map[uint32]error),
		early:   make(map[hdr.Tuple]*earlyFlow),
	}
	if late, ok := v.db.(rings.RDMADoorbellLate); ok {
		late.OnRefused(v.bellRefused)
	}
	return v
}

// do runs one command; a status other than OK is a *CommandError.
func (v *Provider) do(c rings.Command) (rings.Command, error) { return v.doLate(c, nil) }

// doLate is do for a command that names host resources: if it times out,
// late gets its outcome when the device answers (until then the caller
// keeps the resources reserved). late runs on the driver's command vector
// goroutine and must not block.
func (v *Provider) doLate(c rings.Command, late func(rings.Command, error)) (rings.Command, error) {
	res, err := v.host.Command(c, late)
	if err != nil {
		return res, fmt.Errorf("verbs: %v: %w", c.Opcode, err)
	}
	if res.Status != rings.StatusOK {
		return res, &CommandError{Op: c.Opcode, Status: res.Status}
	}
	return res, nil
}

// Route takes the RDMA notifications out of the delegated-connection path
// (tcpstack.RDMAHooks: delegation calls it first, on the interrupt
// goroutine). It
// returns true when the notification is consumed: every NtfCQEvent (its
// Conn is a CQ number) and every NtfQPEvent (its Aux is the event, not a
// buffer id). Other notifications of a QP's connection are looked at (FIN,
// RST, data that should have gone to the QP) and passed on.
func (v *Provider) Route(n *rings.Notification) bool {
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

// quarantined counts resources held back for an unanswered command.
func (v *Provider) quarantined(delta int64) { v.host.Quarantine(delta) }

// copied counts n bytes the provider copied on the CPU (see
// tcpstack.DriverStats.RDMACopyBytes).
func (v *Provider) copied(n int) {
	if n > 0 {
		v.host.CountCopy(n)
	}
}

// submitLate submits a clean-up command from a late function (it must not
// wait); done (may be nil) gets the outcome.
func (v *Provider) submitLate(c rings.Command, done func(rings.Command, error)) {
	_ = v.host.SubmitAsync([]tcpstack.HostCommand{{Cmd: c}}, func(res []rings.Command, err error) {
		if done != nil {
			done(res[0], err)
		}
	})
}

// CountCopy counts n payload bytes a layer above the verbs (sockets
// direct's staging) copied on the CPU for an RDMA connection, in the
// host's tcpstack.DriverStats (RDMACopyBytes and HostCopyBytes), so that
// the host's copy counters tell every byte the CPU moved.
func (v *Provider) CountCopy(n int) { v.copied(n) }
