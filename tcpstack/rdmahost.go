package tcpstack

// The host's RDMA provider seam. RDMA verbs live in their own package
// (tcpstack/verbs), above this one; a QP still runs on a delegated
// connection, so delegation and the verbs layer must meet. They meet here,
// in two small interfaces, and nowhere else:
//
//   - RDMAHooks is what delegation asks of the provider: it is offered
//     every delegated-path notification first (CQ and QP events are not
//     connection notifications), it adds an RDMA connection's CREATE_QP
//     (and the peer's early bytes) to the OFFLOAD's publish, and it is told
//     when the host forgets a flow.
//   - RDMAHost is what the provider may ask of the host: host memory,
//     commands, the legacy receive filter, the copy and quarantine
//     counters, and the two operations on a delegated connection an RDMA
//     connection needs (give up its byte-stream memory; release its index).
//
// Everything else about delegation (the offloader, the flow tracker, the
// command path's tickets) stays unexported: a program that wants RDMA
// imports tcpstack/verbs and the host, not the delegation internals.

import (
	"errors"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// HostCommand is a command and its parameter block (nil if none), which
// the command path copies into host memory for the device.
type HostCommand struct {
	Cmd   rings.Command
	Param []byte
}

// RDMAHooks is the RDMA provider as delegation sees it (tcpstack/verbs
// implements it; Host.AttachRDMA installs it).
type RDMAHooks interface {
	// Route is offered every notification of the delegated path before
	// the connection lookup, on the interrupt goroutine (it must not
	// block). It returns true when it consumed the notification.
	Route(n *rings.Notification) bool
	// PrepareDelegation is called by every delegation once the connection
	// index is chosen, before the OFFLOAD. For an RDMA connection it
	// returns the connection's RDMA side; for any other nil, nil. An error
	// fails the delegation (the connection stays on netstack).
	PrepareDelegation(idx uint32, key hdr.Tuple) (RDMADelegation, error)
	// ForgetFlow says the host is done with flow key: its delegation
	// failed, or its connection was released.
	ForgetFlow(key hdr.Tuple)
}

// RDMADelegation is the RDMA side of one delegation (an RDMA connection
// gets no user buffers: its QP takes the byte stream over in the device).
type RDMADelegation interface {
	// Publish publishes the OFFLOAD: it calls publish once with the
	// commands that go behind the OFFLOAD in the same publish (the
	// CREATE_QP first), and returns publish's error. Holding its own lock
	// around publish is what orders the early bytes it injects.
	Publish(publish func(follow []HostCommand) error) error
	// Done gets the CREATE_QP's write-back of an OFFLOAD the unit took.
	Done(res rings.Command)
	// Discard says the unit does not have the connection (the OFFLOAD was
	// refused or never ran, or an ABORT took it down). Idempotent.
	Discard()
}

// RDMAHost is the host as its RDMA provider sees it.
type RDMAHost interface {
	// Mem is host memory: what the device can reach.
	Mem() *rings.Arena
	// Command runs one command within the delegation's command timeout;
	// late (may be nil) gets the outcome of one it gave up on
	// (ErrCommandTimeout). Errors that wrap ErrNotSubmitted mean the
	// device never saw it.
	Command(c rings.Command, late func(rings.Command, error)) (rings.Command, error)
	// SubmitAsync submits cmds as one publish without waiting; done (may
	// be nil) gets the outcome. It never blocks (interrupt goroutine).
	SubmitAsync(cmds []HostCommand, done func([]rings.Command, error)) error
	// SetRxHold installs (nil: removes) the legacy receive filter: frames
	// it returns true for are the provider's, and netstack never sees
	// them (counted in DriverStats.RxHeld).
	SetRxHold(hold func(frame []byte) bool)
	// CountCopy counts n bytes the provider copied on the CPU
	// (DriverStats.RDMACopyBytes, and HostCopyBytes).
	CountCopy(n int)
	// Quarantine counts resources held back for an unanswered command
	// (DriverStats' quarantine count), up or down.
	Quarantine(delta int64)
	// TakeStream readies a just delegated connection for its QP: the host
	// memory of the byte-stream path is freed (an RDMA connection never
	// uses it). It reports whether the host already holds bytes of the
	// peer's, which then did not go to the QP.
	TakeStream(c *DelegatedConn) (early bool)
	// Release frees a connection's index and host state once the device
	// no longer has it (DESTROY_QP aborted it, or it had closed): no
	// RELEASE command is sent.
	Release(c *DelegatedConn)
}

// rdmaSlot is where the offloader keeps its RDMA provider.
type rdmaSlot struct {
	mu    sync.Mutex // AttachRDMA
	hooks atomic.Pointer[RDMAHooks]
}

func (s *rdmaSlot) get() RDMAHooks {
	if p := s.hooks.Load(); p != nil {
		return *p
	}
	return nil
}

// AttachRDMA turns delegation on and gives the host its RDMA provider: the
// first call runs attach and installs the hooks it returns; every call
// returns the installed hooks (one provider per host: it owns the device's
// CQ numbers and the host's RDMA listeners).
func (h *Host) AttachRDMA(attach func(RDMAHost) RDMAHooks) (RDMAHooks, error) {
	o, err := h.offloader()
	if err != nil {
		return nil, err
	}
	o.rdma.mu.Lock()
	defer o.rdma.mu.Unlock()
	if hk := o.rdma.get(); hk != nil {
		return hk, nil
	}
	hk := attach(rdmaHost{o: o, mem: h.Mem})
	if hk == nil {
		return nil, errors.New("tcpstack: AttachRDMA: no hooks")
	}
	o.rdma.hooks.Store(&hk)
	return hk, nil
}

// rdmaHost implements RDMAHost on an offloader.
type rdmaHost struct {
	o   *offloader
	mem *rings.Arena
}

func (r rdmaHost) Mem() *rings.Arena { return r.mem }

func (r rdmaHost) Command(c rings.Command, late func(rings.Command, error)) (rings.Command, error) {
	return r.o.drv.command(c, r.o.cfg.CommandTimeout, late)
}

func (r rdmaHost) SubmitAsync(cmds []HostCommand, done func([]rings.Command, error)) error {
	// A doorbell per post (sockets direct) comes here: the requests are
	// copied into the ticket, so a short batch needs no heap slice.
	var small [4]cmdReq
	return r.o.drv.submitAsync(appendCmdReqs(small[:0], cmds), done)
}

// SubmitPosted is SubmitAsync for posted commands (doorbells): the host's
// command vector neither wakes for them nor watches for their completion;
// they are reaped lazily (within a millisecond), and done runs only if one
// failed or was lost. The provider finds it by interface assertion
// (RDMAPostedSubmitter).
func (r rdmaHost) SubmitPosted(cmds []HostCommand, done func([]rings.Command, error)) error {
	var small [4]cmdReq
	return r.o.drv.submitPosted(appendCmdReqs(small[:0], cmds), done)
}

// RDMAPostedSubmitter is an RDMAHost that takes posted commands.
type RDMAPostedSubmitter interface {
	SubmitPosted(cmds []HostCommand, done func([]rings.Command, error)) error
}

// RDMADoorbellDevice is a Device with the RDMA doorbell registers
// (rings.FeatQPDoorbell, docs/bar0.md): RDMADoorbell returns them, or nil
// when the device does not offer them (then QP_DOORBELL and ARM_CQ are
// the doorbells).
type RDMADoorbellDevice interface {
	RDMADoorbell() rings.RDMADoorbell
}

// RDMADoorbellHost is an RDMAHost that reaches its device's RDMA doorbell
// registers; the provider finds it by interface assertion.
type RDMADoorbellHost interface {
	RDMADoorbell() rings.RDMADoorbell
}

// RDMADoorbell is the device's RDMA doorbell registers, or nil.
func (r rdmaHost) RDMADoorbell() rings.RDMADoorbell {
	if dd, ok := r.o.drv.dev.(RDMADoorbellDevice); ok {
		return countRDMABells(dd.RDMADoorbell(), &r.o.drv.stats.rdmaBells)
	}
	return nil
}

func (r rdmaHost) SetRxHold(hold func(frame []byte) bool) { r.o.drv.setRxHold(hold) }

func (r rdmaHost) CountCopy(n int) { r.o.drv.rdmaCopied(n) }

func (r rdmaHost) Quarantine(delta int64) { r.o.drv.quarantine(delta) }

func (r rdmaHost) TakeStream(c *DelegatedConn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.freeStreamLocked()
	c.nv.ulp = true // the device's ULP has the byte stream now
	return len(c.chunks) > 0 || c.legacyOut > 0
}

func (r rdmaHost) Release(c *DelegatedConn) {
	c.aborted.Store(true)
	c.mu.Lock()
	c.closed = true
	c.cond.Broadcast()
	c.mu.Unlock()
	c.o.release(c)
}

// cmdReqs converts a provider's commands to the command path's requests.
func cmdReqs(cmds []HostCommand) []cmdReq {
	return appendCmdReqs(make([]cmdReq, 0, len(cmds)), cmds)
}

// appendCmdReqs appends cmds to reqs as the command path's requests.
func appendCmdReqs(reqs []cmdReq, cmds []HostCommand) []cmdReq {
	for _, c := range cmds {
		reqs = append(reqs, cmdReq{c: c.Cmd, param: c.Param})
	}
	return reqs
}

// forgetRDMA tells the provider, if any, the host is done with flow key.
func (o *offloader) forgetRDMA(key hdr.Tuple) {
	if hk := o.rdma.get(); hk != nil {
		hk.ForgetFlow(key)
	}
}
