package tcpstack

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
)

// OffloadConfig sizes delegation. Host memory follows data, not
// connections: a delegated connection's send bytes and receive buffers come
// from one pool shared by all of them (bufpool.go), taken while data is in
// flight and given back after, so ten thousand mostly idle connections
// cost next to nothing. The pool grows from the host's arena
// (HostConfig.ArenaSize) up to PoolBytes.
type OffloadConfig struct {
	// MaxConns is delegated connections at once; default the device's
	// connection table (rings.DefaultConnTable, 10,000).
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
		c.MaxConns = rings.DefaultConnTable
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
	inject := o.injectFragment
	drv.frags.inject.Store(&inject)
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
	free := n.Conn >= uint32(len(o.isFree)) || o.isFree[n.Conn]
	o.mu.Unlock()
	if c != nil {
		c.notify(n)
		return
	}
	// A notification for a connection the host does not have: late for
	// one being released (its RELEASE not yet answered, or the index
	// quarantined), or, for an index the host has free, a device error.
	// Either way nothing of any connection is touched, and a legacy
	// buffer in it still goes back to the device.
	if free {
		o.drv.stats.ntfUnknown.Add(1)
	} else {
		o.drv.stats.ntfLate.Add(1)
	}
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

// postIDs posts pool user buffers ids (marked posted) without waiting.
// Called with c.mu held.
func (o *offloader) postIDs(c *DelegatedConn, ids []int) {
	if room := c.ubRoomLocked(); len(ids) > room {
		// The device holds no more than it took before: the rest
		// wait for a buffer to come back.
		for _, id := range ids[room:] {
			c.rxBufs[id].refused = true
		}
		ids = ids[:room]
	}
	if len(ids) == 0 {
		return
	}
	ubs := make([]rings.UserBuf, len(ids))
	for i, id := range ids {
		b := &c.rxBufs[id]
		b.posted, b.refused = true, false
		ubs[i] = rings.UserBuf{Addr: b.addr, Len: uint32(len(b.mem)), ID: uint32(id)}
	}
	o.postBufs(c, ubs)
}

// postBufs submits a POST_BUFFERS of ubs without waiting and honours its
// result, the count of buffers the device accepted (a prefix):
//
//   - NO_RESOURCES with a prefix accepted: the device's queue is full;
//     the rest are the host's again and are posted again when the device
//     gives a buffer back or asks for one (USER_BUF_REQ). Counted
//     (PostBuffersPartial); the connection carries on.
//   - OK with fewer accepted: the peer's FIN is in, no buffer will be
//     needed; the rest are the host's again, and not posted again.
//   - A result above the count posted is a device error
//     (PostBuffersOverclaim): the host cannot tell what the device holds,
//     so it takes every buffer as accepted (never reusing one the device
//     may write).
//   - Any other status fails the connection, as for any command.
//
// Called with c.mu held.
func (o *offloader) postBufs(c *DelegatedConn, ubs []rings.UserBuf) {
	p := make([]byte, len(ubs)*rings.UserBufDescSize)
	for i := range ubs {
		ubs[i].Encode(rings.UserBufDesc(p[i*rings.UserBufDescSize:]))
	}
	req := cmdReq{c: rings.Command{Opcode: rings.OpPostBuffers, Conn: c.idx, Arg0: uint32(len(ubs))}, param: p}
	err := o.drv.submitAsync([]cmdReq{req}, func(res []rings.Command, err error) {
		c.mu.Lock()
		defer c.mu.Unlock()
		o.postedLocked(c, ubs, res[0], err)
	})
	if err != nil {
		c.cmdFailLocked(fmt.Errorf("%v: %w", req.c.Opcode, err))
	}
}

// postedLocked takes a POST_BUFFERS' write-back (postBufs). c.mu held.
func (o *offloader) postedLocked(c *DelegatedConn, ubs []rings.UserBuf, r rings.Command, err error) {
	if err != nil || (r.Status != rings.StatusOK && r.Status != rings.StatusNoResources) {
		c.cmdFailLocked(o.checkResult(r, err))
		return
	}
	accepted := r.Result
	if accepted > uint64(len(ubs)) {
		o.drv.stats.postOverclaim.Add(1)
		c.deviceErrorLocked(&o.drv.stats.ntfImpossible, fmt.Sprintf("POST_BUFFERS accepted %d of %d", accepted, len(ubs)))
		return
	}
	if accepted == uint64(len(ubs)) {
		return
	}
	again := r.Status == rings.StatusNoResources
	if again {
		o.drv.stats.postPartial.Add(1)
		defer func() {
			// What the device holds now is its limit: post no more
			// than that from here on (ubRoomLocked).
			c.ubCap = max(c.ubPostedLocked(), 1)
		}()
	}
	for _, ub := range ubs[accepted:] {
		if c.reg.isRegID(ub.ID) {
			if again {
				c.regReturnedLocked(ub.ID) // posted again at the next chance
			} else if b := c.reg.find(ub.ID); b != nil {
				c.reg.drop(b) // no more data: the application's again
			}
			continue
		}
		b := &c.rxBufs[ub.ID]
		b.posted = false
		if again {
			b.refused = true
		} else {
			c.dropRxBuf(int(ub.ID))
		}
	}
	c.signal()
}

// ubPostedLocked counts the user buffers the device has (or that are in a
// POST_BUFFERS in flight). c.mu held.
func (c *DelegatedConn) ubPostedLocked() int {
	n := 0
	for i := range c.rxBufs {
		if c.rxBufs[i].posted {
			n++
		}
	}
	for _, b := range c.reg.bufs {
		if b.state == regPosted {
			n++
		}
	}
	return n
}

// ubRoomLocked is how many more user buffers the device will take: its
// limit, learned from a partial acceptance, less what it has. c.mu held.
func (c *DelegatedConn) ubRoomLocked() int {
	if c.ubCap == 0 {
		return 1 << 30 // no limit seen
	}
	return max(c.ubCap-c.ubPostedLocked(), 0)
}

// repostRefused posts again the pool buffers the device refused, now that
// it gave one back or asked for one. Called with c.mu held.
func (o *offloader) repostRefused(c *DelegatedConn) {
	var ids []int
	for id := range c.rxBufs {
		if c.rxBufs[id].refused && c.rxBufs[id].addr != 0 {
			ids = append(ids, id)
		}
	}
	if len(ids) == 0 {
		return
	}
	if c.released || c.peerFin || c.rxErr != nil || c.cmdErr != nil || c.reg.on {
		for _, id := range ids {
			c.dropRxBuf(id)
		}
		return
	}
	o.postIDs(c, ids)
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
		o.postIDs(c, ids)
	}
}

// repost gives user buffer id back to the unit, without waiting (it runs
// on the interrupt goroutine and under the connection's lock); a refusal
// surfaces on the connection. Called with c.mu held.
func (o *offloader) repost(c *DelegatedConn, id int) {
	if id >= len(c.rxBufs) || c.rxBufs[id].addr == 0 {
		return
	}
	if c.released || c.peerFin || c.rxErr != nil || c.cmdErr != nil || c.reg.on {
		// The unit takes no more receive buffers once the peer
		// closed; a registered reader brings its own.
		c.dropRxBuf(id)
		return
	}
	o.postIDs(c, []int{id})
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
	if n := h.connTable; n > 0 {
		// Never more indices than the device's table: an OFFLOAD past
		// it would only be refused.
		if cfg.MaxConns == 0 || cfg.MaxConns > n {
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
