package delegation

import (
	"math"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Env is what the device provides to the engine. Every method is called from
// the offload unit goroutine, inside an engine method; none may call back
// into the engine.
type Env interface {
	// DMA is host memory. It is called once, by NewEngine.
	DMA() rings.DMA
	// Notify posts a notification to the host. It returns false if the
	// notification ring is full; the engine then keeps the notification
	// (in order, per connection) and retries on the next engine call,
	// Tick or RetryNotifications. The pointer is only valid during the call.
	Notify(n *rings.Notification) bool
	// Transmit puts a complete Ethernet + IPv4 + TCP frame, checksums
	// filled in, on the wire (an Env that is also a TSOEnv may be given
	// super-frames by TransmitTSO instead). The frame is the engine's reusable buffer:
	// the device must copy it before returning. An error counts as a loss
	// (retransmission recovers).
	Transmit(frame []byte) error
	// TakeLegacyBuffer takes the next legacy receive buffer the host posted
	// on the receive descriptor ring, for payload that has no user buffer.
	// The engine fills it and returns it with NtfLegacyUpload (Aux = id).
	TakeLegacyBuffer() (id uint32, addr rings.Addr, capacity uint32, ok bool)
	// NowNanos is the device clock, monotonic, in nanoseconds.
	NowNanos() int64
}

// Config sizes the engine. Zero fields take the defaults in parentheses.
type Config struct {
	MaxConns       int    // connection table size; indices are 0..MaxConns-1 (10,000; 64k and more work: an unused index costs a pointer)
	MaxTxBuffers   int    // upper bound of transmit buffers queued per connection (256)
	MaxUserBufs    int    // user buffers posted per connection (64)
	RcvBufSize     uint32 // receive buffer when the state block says 0 (256 KiB)
	OOOLimit       uint32 // out-of-order bytes held per connection beyond RCV.NXT (1 MiB: a host's whole window, so a hole costs its own bytes, not everything sent behind it)
	OOOPoolBytes   int    // out-of-order slab shared by all connections (4 MiB, at least OOOLimit)
	PendingNotify  int    // notifications queued per connection while the ring is full (64, at least 16)
	MinRTO         int64  // ns (200 ms)
	MaxRTO         int64  // ns (60 s)
	InitialRTO     int64  // ns, before the first RTT sample (1 s)
	MaxRetries     int    // consecutive RTO expirations before NtfTimeout (12)
	DelayedAck     int64  // ns (40 ms)
	TimeWait       int64  // ns spent in TIME_WAIT (1 s; the engine is a NIC, not a 2MSL purist)
	MaxTimeWait    int    // TIME_WAIT records (timewait.go), the oldest going early when full (2 × MaxConns)
	OOWAckInterval int64  // ns between ACKs for zero-length out-of-window segments (200 ms)
	ChallengeAcks  int    // challenge ACKs per second, engine-wide (RFC 5961 §7) (1000)
	NotifyRetry    int64  // ns between notification retries while the ring is full (1 ms)
}

func (c *Config) setDefaults() {
	def := func(v *int64, d int64) {
		if *v <= 0 {
			*v = d
		}
	}
	defi := func(v *int, d int) {
		if *v <= 0 {
			*v = d
		}
	}
	defi(&c.MaxConns, DefaultMaxConns)
	defi(&c.MaxTxBuffers, 256)
	defi(&c.MaxUserBufs, 64)
	if c.RcvBufSize == 0 {
		c.RcvBufSize = 256 << 10
	}
	if c.RcvBufSize > maxWindowBytes {
		c.RcvBufSize = maxWindowBytes
	}
	if c.OOOLimit == 0 {
		c.OOOLimit = 1 << 20
	}
	if c.OOOLimit > maxWindowBytes {
		c.OOOLimit = maxWindowBytes
	}
	defi(&c.OOOPoolBytes, 4<<20)
	if c.OOOPoolBytes < int(c.OOOLimit) {
		c.OOOPoolBytes = int(c.OOOLimit)
	}
	defi(&c.PendingNotify, 64)
	if c.PendingNotify < 16 {
		c.PendingNotify = 16
	}
	def(&c.MinRTO, 200e6)
	def(&c.MaxRTO, 60e9)
	if c.MaxRTO < c.MinRTO {
		c.MaxRTO = c.MinRTO
	}
	def(&c.InitialRTO, 1e9)
	defi(&c.MaxRetries, 12)
	def(&c.DelayedAck, 40e6)
	def(&c.TimeWait, 1e9)
	defi(&c.MaxTimeWait, 2*c.MaxConns)
	def(&c.OOWAckInterval, 200e6)
	defi(&c.ChallengeAcks, 1000)
	def(&c.NotifyRetry, 1e6)
}

// maxWindowBytes is the largest window the engine deals in (65535 << 14 is
// just under 2^30); keeping every window below 2^30 keeps sequence
// comparisons unambiguous.
const maxWindowBytes = 1 << 30

// NoDeadline is what NextDeadline returns when no timer is armed.
const NoDeadline = math.MaxInt64

// Counters count every segment, drop and rejection. Fields are
// free-running; read them with Engine.Counters.
type Counters struct {
	RxSegments    uint64 // segments that passed the header and checksum checks (a super-frame: the segments it stands for)
	RxLRO         uint64 // super-frames taken whole (InputSegmentLRO)
	RxBytes       uint64 // payload bytes accepted in order (placed in host memory)
	TxSegments    uint64 // frames transmitted
	TxBytes       uint64 // payload bytes transmitted, retransmissions included
	TxRetransSegs uint64 // data/FIN segments sent again
	TxRetransByte uint64 // payload bytes sent again
	TxErrors      uint64 // Env.Transmit failed (counted as lost)
	AcksSent      uint64 // pure ACKs (no data), window updates and challenge ACKs included

	DropNoConn        uint64 // Input for an index that is not delegated
	DropBadIP         uint64 // IPv4 header not version 4 / bad IHL / not TCP / bad length
	DropFragment      uint64 // IPv4 fragment (the engine never reassembles)
	DropShort         uint64 // segment shorter than a TCP header or than the IP length says
	DropBadOffset     uint64 // TCP data offset < 5 or past the segment
	DropBadOptions    uint64 // malformed TCP option lengths
	DropBadChecksum   uint64 // TCP checksum wrong
	DropTupleMismatch uint64 // addresses/ports are not the connection's
	DropClosed        uint64 // segment for a connection already CLOSED (awaiting release)
	DropOutOfWindow   uint64 // RFC 9293 acceptability test failed (ACKed, never accepted)
	DropPAWS          uint64 // RFC 7323 PAWS: TSval older than TS.Recent
	DropNoTimestamp   uint64 // timestamps negotiated but the segment has none
	DropNoAck         uint64 // ACK flag off on a synchronized connection
	DropAckUnsent     uint64 // ACK for data never sent (answered with an ACK)
	DropAckTooOld     uint64 // ACK below SND.UNA - MAX.SND.WND (RFC 5961 §5)
	DropDataAfterFin  uint64 // payload past the peer's FIN
	DropNoBuffer      uint64 // in-order payload with no user buffer and no legacy buffer
	DropBackpressure  uint64 // payload refused because notifications are backed up
	DropTimeWait      uint64 // segments absorbed in TIME_WAIT

	OOOSegments      uint64 // out-of-order segments queued
	OOOBytesDropped  uint64 // out-of-order bytes refused: over OOOLimit or slab exhausted
	OOODropRanges    uint64 // out-of-order segments refused: too many holes
	OOOBytesRestored uint64 // bytes delivered from the out-of-order queue after a hole filled

	RstAccepted      uint64 // RST with SEG.SEQ == RCV.NXT
	RstOutOfWindow   uint64 // RST outside the window (ignored)
	ChallengeAcks    uint64 // RFC 5961 challenge ACKs sent (in-window RST, SYN, old ACK)
	ChallengeLimited uint64 // challenge ACKs suppressed by the rate limit
	SynReceived      uint64 // SYN on a synchronized connection

	DupAcksRx       uint64 // duplicate ACKs received
	FastRetransmits uint64 // fast retransmit / recovery entered
	PartialAcks     uint64 // NewReno partial ACKs
	RTOExpired      uint64 // retransmission timer expirations
	Timeouts        uint64 // connections given up after MaxRetries or keepalive
	PersistProbes   uint64 // zero-window probes
	KeepaliveProbes uint64 // keepalive probes
	DelayedAcks     uint64 // ACKs sent by the delayed-ACK timer
	ZeroWindowsSent uint64 // ACKs advertising a zero window
	RTTSamples      uint64 // RTT samples taken

	LegacyUploads    uint64 // legacy buffers filled
	UserBufsDone     uint64 // user buffers completed
	NotifyFull       uint64 // Env.Notify returned false (notification queued for retry)
	NotifyPosted     uint64 // notifications accepted by Env.Notify
	NotifyCoalesced  uint64 // notifications merged into a pending one
	DMAErrors        uint64 // host memory accesses that faulted
	TimeWaitEntered  uint64 // connections that entered TIME_WAIT (moved to a record, index released)
	TimeWaitExpired  uint64 // TIME_WAIT records that ran out
	TimeWaitOverflow uint64 // TIME_WAIT records dropped early because MaxTimeWait were in use
	TimeWaitReopened uint64 // TIME_WAIT records ended by a newer SYN (RFC 6191), which went to the host

	ULPPulled   uint64 // bytes ULPs wrote into their retransmission buffers (Transmit)
	ULPHeld     uint64 // in-order bytes a ULP did not take at once, held and offered again
	ULPHoldFull uint64 // in-order bytes refused because a ULP's hold was full (never expected: the window covers it)

	TSOFrames          uint64 // super-frames handed to a port that segments TCP (TSOEnv); each counts once in TxSegments
	TailLossProbes     uint64 // tail loss probes sent (RFC 8985 §7)
	SpuriousTimeouts   uint64 // RTOs a D-SACK showed needless (RFC 2883 §5): the congestion state was restored
	LostRetransmits    uint64 // heads resent again in recovery: their retransmission brought no ACK in a probe timeout (RFC 8985 §6.2's lost retransmission)
	SpuriousRecoveries uint64 // fast recoveries undone: D-SACKs showed every retransmission needless (RFC 2883 §5)
	RACKLost           uint64 // ranges RACK marked lost (RFC 8985: sent before a delivered one, the reordering window passed)
	RACKTimeouts       uint64 // reordering timer expiries that found a loss
	SACKRecoveries     uint64 // recoveries entered on SACK evidence before three duplicate ACKs (RACK, rack.go)
}

// Engine is the device-side delegated TCP engine. It is not safe for
// concurrent use: the offload unit goroutine owns it.
type Engine struct {
	cfg   Config
	env   Env
	dma   rings.DMA
	conns []*conn // nil until the index is first offloaded
	table tupleTable
	heap  []*conn // timer heap, ordered by conn.deadline
	pool  oooPool
	tw    twTable
	frame []byte
	ntf   rings.Notification
	ctr   Counters

	tso        TSOEnv   // nil: the port takes wire-size frames only
	tsoMax     int      // with tso: the most payload of a super-frame
	inBurst    bool     // between BeginBurst and EndBurst
	burstConns []uint32 // connections with an ACK deferred to EndBurst

	nConns    int      // connections delegated (index taken)
	nBlocks   int      // control blocks allocated
	pendList  []uint32 // connections with queued notifications
	ntfRetry  int64    // when to retry them (0: not waiting)
	chalStart int64    // challenge ACK rate-limit window start
	chalCount int
	zero      [1]byte // probe payload

	ulpScratch []byte // Transmit's target when a ULP's buffer wraps (allocated by the first AttachULP)
}

// TSOEnv is an Env whose port segments TCP itself (TCP segmentation
// offload, a TAP with offloads): the engine then sends new data in
// super-frames of up to TSOMax bytes of payload, which TransmitTSO puts on
// the wire as segments of mss payload bytes each (the last may be shorter).
// The frame carries whole checksums, as every frame the engine sends. TSOMax
// 0 means no offload (the engine asks once, when it is made).
type TSOEnv interface {
	TSOMax() int
	TransmitTSO(frame []byte, mss int) error
}

// NewEngine makes an engine. It allocates everything the fast path needs:
// the connection table, the tuple hash, the out-of-order slab and the frame
// buffer; a connection's control block and queues are allocated on its
// index's first OFFLOAD (the queues small, growing with use) and reused
// after, so an engine sized for tens of thousands of connections costs a
// pointer per index until they are used.
func NewEngine(cfg Config, env Env) *Engine {
	cfg.setDefaults()
	e := &Engine{
		cfg:   cfg,
		env:   env,
		dma:   env.DMA(),
		conns: make([]*conn, cfg.MaxConns),
		table: newTupleTable(cfg.MaxConns),
		heap:  make([]*conn, 0, min(cfg.MaxConns, 1024)),
		pool:  newOOOPool(cfg.OOOPoolBytes),
		tw:    newTWTable(cfg.MaxTimeWait),
		frame: make([]byte, maxFrame),

		pendList: make([]uint32, 0, min(cfg.MaxConns, 1024)),
	}
	if t, ok := env.(TSOEnv); ok {
		e.setTSO(t)
	}
	return e
}

// setTSO takes the port's segmentation offload, if any: t, and the most
// payload a super-frame may carry (at most what an IPv4 datagram holds
// after the longest TCP header), fixed for the engine's life.
func (e *Engine) setTSO(t TSOEnv) {
	e.tso, e.tsoMax = nil, 0
	if t == nil {
		return
	}
	if m := min(t.TSOMax(), hdr.IPv4MaxTotalLen-netHdrLen-hdr.TCPMinSize-40); m > 0 {
		e.tso, e.tsoMax = t, m
	}
}

// Occupancy is what the engine holds now: how much of its tables is in use
// and how much memory it has grown to, for tests and diagnostics that
// check resources are returned.
type Occupancy struct {
	Conns        int // indices taken (delegated, closed but not yet released)
	ControlSlabs int // indices that have a control block allocated (grown to, reused)
	TimeWait     int // 4-tuples in TIME_WAIT
	TimeWaitSlab int // TIME_WAIT records allocated (grown to, reused)
	Timers       int // connections with a timer armed
	Pending      int // connections with notifications waiting for ring space
	OOOPagesUsed int // out-of-order slab pages held
}

// Occupancy returns the engine's occupancy (O(1)).
func (e *Engine) Occupancy() Occupancy {
	return Occupancy{Conns: e.nConns, ControlSlabs: e.nBlocks, TimeWait: e.tw.n, TimeWaitSlab: len(e.tw.recs),
		Timers: len(e.heap), Pending: len(e.pendList), OOOPagesUsed: len(e.pool.mem)/oooPageSize - e.pool.freePages()}
}

// Config returns the engine's configuration with defaults filled in.
func (e *Engine) Config() Config { return e.cfg }

// Counters returns a copy of the counters.
func (e *Engine) Counters() Counters { return e.ctr }

// Lookup finds the delegated connection a received segment belongs to: t
// is the segment's tuple as its receiver sees it (local: the destination).
// It never allocates.
func (e *Engine) Lookup(t *hdr.Tuple) (uint32, bool) {
	return e.table.get(t)
}

// get returns the delegated connection at idx, or nil.
func (e *Engine) get(idx uint32) *conn {
	if idx >= uint32(len(e.conns)) || e.conns[idx] == nil || !e.conns[idx].inUse {
		return nil
	}
	return e.conns[idx]
}

// --- timers ---------------------------------------------------------------

// Tick runs every timer due at now: delayed ACKs, retransmission and persist
// timers, keepalive, TIME_WAIT, and notification retries.
func (e *Engine) Tick(now int64) {
	if len(e.pendList) > 0 {
		e.flushNotify(now)
	}
	if e.tw.head >= 0 {
		e.expireTimeWait(now)
	}
	for len(e.heap) > 0 && e.heap[0].deadline <= now {
		c := e.heap[0]
		c.runTimers(now)
		e.schedule(c)
	}
}

// NextDeadline is the device clock time at which Tick next has work, or
// NoDeadline.
func (e *Engine) NextDeadline() int64 {
	d := int64(NoDeadline)
	if len(e.heap) > 0 {
		d = e.heap[0].deadline
	}
	if e.tw.head >= 0 && e.tw.recs[e.tw.head].expire < d {
		d = e.tw.recs[e.tw.head].expire
	}
	if e.ntfRetry != 0 && e.ntfRetry < d {
		d = e.ntfRetry
	}
	return d
}

// schedule recomputes c's earliest deadline and fixes its heap position.
func (e *Engine) schedule(c *conn) {
	d := c.nextTimer()
	if d == 0 {
		if c.heapIdx >= 0 {
			e.heapRemove(c.heapIdx)
		}
		c.deadline = 0
		return
	}
	if c.heapIdx >= 0 {
		if d == c.deadline {
			return
		}
		old := c.deadline
		c.deadline = d
		if d < old {
			e.heapUp(c.heapIdx)
		} else {
			e.heapDown(c.heapIdx)
		}
		return
	}
	c.deadline = d
	c.heapIdx = len(e.heap)
	e.heap = append(e.heap, c)
	e.heapUp(c.heapIdx)
}

func (e *Engine) heapSwap(i, j int) {
	h := e.heap
	h[i], h[j] = h[j], h[i]
	h[i].heapIdx = i
	h[j].heapIdx = j
}

func (e *Engine) heapUp(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if e.heap[p].deadline <= e.heap[i].deadline {
			break
		}
		e.heapSwap(i, p)
		i = p
	}
}

func (e *Engine) heapDown(i int) {
	n := len(e.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && e.heap[r].deadline < e.heap[l].deadline {
			m = r
		}
		if e.heap[i].deadline <= e.heap[m].deadline {
			return
		}
		e.heapSwap(i, m)
		i = m
	}
}

func (e *Engine) heapRemove(i int) {
	last := len(e.heap) - 1
	c := e.heap[i]
	if i != last {
		e.heapSwap(i, last)
	}
	e.heap = e.heap[:last]
	c.heapIdx = -1
	if i < last {
		e.heapDown(i)
		e.heapUp(i)
	}
}

// --- notifications --------------------------------------------------------

// RetryNotifications posts notifications queued while the ring was full.
// The device calls it when the host has consumed notifications; Tick also
// retries.
func (e *Engine) RetryNotifications() {
	if len(e.pendList) > 0 {
		e.flushNotify(e.env.NowNanos())
	}
}

// PendingNotifications is the number of notifications waiting for room in
// the notification ring.
func (e *Engine) PendingNotifications() int {
	n := 0
	for _, idx := range e.pendList {
		c := e.conns[idx]
		n += c.pendCount
		if c.deferred != 0 {
			n++
		}
	}
	return n
}

func (e *Engine) flushNotify(now int64) {
	i := 0
	for ; i < len(e.pendList); i++ {
		c := e.conns[e.pendList[i]]
		if !c.drainPending() {
			break
		}
	}
	// Drop the drained connections from the front of the list.
	n := copy(e.pendList, e.pendList[i:])
	e.pendList = e.pendList[:n]
	if n == 0 {
		e.ntfRetry = 0
	} else {
		e.ntfRetry = now + e.cfg.NotifyRetry
	}
}

// challengeAllowed applies the engine-wide challenge ACK rate limit.
func (e *Engine) challengeAllowed(now int64) bool {
	if now-e.chalStart >= 1e9 || now < e.chalStart {
		e.chalStart = now
		e.chalCount = 0
	}
	if e.chalCount >= e.cfg.ChallengeAcks {
		e.ctr.ChallengeLimited++
		return false
	}
	e.chalCount++
	return true
}

// DefaultMaxConns is the connection table size when Config.MaxConns is 0:
// offload NICs in production hold tens of thousands of connections.
const DefaultMaxConns = 10000
