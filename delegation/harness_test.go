package delegation

import (
	"crypto/sha256"
	"fmt"
	"hash"
	"math/rand/v2"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// This file is the test device and host around an Engine: a fake Env backed
// by a rings.Arena (host memory), a host application that streams data
// through transmit buffers and receives it through user or legacy buffers
// (hashing both sides), and helpers to build and parse frames.

// ---- the device side ----------------------------------------------------

type testEnv struct {
	arena *rings.Arena
	now   *int64
	clock func() int64 // real time (overrides now)
	dma   rings.DMA    // overrides the arena (fault injection)

	// Notification ring: bounded, so tests can make it full.
	ntf      []rings.Notification
	ntfHead  int
	ntfCount int
	ntfCap   int
	ntfFull  int // Notify calls refused

	// Legacy receive buffers (the receive descriptor ring).
	legacy     []legacyBuf
	legacyFree []uint32

	transmit func(frame []byte) error
}

type legacyBuf struct {
	addr rings.Addr
	cap  uint32
}

func newTestEnv(t testing.TB, arenaSize int, now *int64) *testEnv {
	a, err := rings.NewArena(arenaSize)
	if err != nil {
		t.Fatal(err)
	}
	return &testEnv{arena: a, now: now, ntfCap: 4096, ntf: make([]rings.Notification, 4096)}
}

func (v *testEnv) DMA() rings.DMA {
	if v.dma != nil {
		return v.dma
	}
	return v.arena
}
func (v *testEnv) NowNanos() int64 {
	if v.clock != nil {
		return v.clock()
	}
	return *v.now
}
func (v *testEnv) Transmit(f []byte) error {
	if v.transmit == nil {
		return nil
	}
	return v.transmit(f)
}

func (v *testEnv) Notify(n *rings.Notification) bool {
	if v.ntfCount >= v.ntfCap {
		v.ntfFull++
		return false
	}
	v.ntf[(v.ntfHead+v.ntfCount)%len(v.ntf)] = *n
	v.ntfCount++
	return true
}

// popNotify takes the oldest notification.
func (v *testEnv) popNotify() (rings.Notification, bool) {
	if v.ntfCount == 0 {
		return rings.Notification{}, false
	}
	n := v.ntf[v.ntfHead]
	v.ntfHead = (v.ntfHead + 1) % len(v.ntf)
	v.ntfCount--
	return n, true
}

func (v *testEnv) TakeLegacyBuffer() (uint32, rings.Addr, uint32, bool) {
	if len(v.legacyFree) == 0 {
		return 0, 0, 0, false
	}
	id := v.legacyFree[len(v.legacyFree)-1]
	v.legacyFree = v.legacyFree[:len(v.legacyFree)-1]
	return id, v.legacy[id].addr, v.legacy[id].cap, true
}

func (v *testEnv) addLegacy(t testing.TB, n int, size uint32) {
	for i := 0; i < n; i++ {
		a, err := v.arena.Alloc(int(size), 64)
		if err != nil {
			t.Fatal(err)
		}
		v.legacy = append(v.legacy, legacyBuf{a, size})
		v.legacyFree = append(v.legacyFree, uint32(len(v.legacy)-1))
	}
}

// inputFrame is the device's receive classifier for the tests: Ethernet →
// IPv4 (header checksum verified) → Lookup → Input, or IPv6 (its chain
// walked) → the tuple → InputSegment (the engine checks the TCP checksum).
// It returns false if the frame is not for a delegated connection.
func inputFrame(e *Engine, f []byte) bool {
	if len(f) >= hdr.EthernetSize+hdr.IPv6Size && be.Uint16(f[12:]) == hdr.EtherTypeIPv6 {
		return inputIPv6(e, f[hdr.EthernetSize:])
	}
	if len(f) < hdr.EthernetSize+netHdrLen || be.Uint16(f[12:]) != hdr.EtherTypeIPv4 {
		return false
	}
	return inputIP(e, f[hdr.EthernetSize:])
}

func inputIPv6(e *Engine, p []byte) bool {
	ip, err := hdr.ParseIPv6(p)
	if err != nil {
		return false
	}
	var ch hdr.IPv6Chain
	if hdr.WalkIPv6(ip, &ch) != nil {
		return false
	}
	seg, ok := hdr.IPv6TCPSegment(ip, &ch)
	if !ok {
		return false
	}
	var t hdr.Tuple
	ip.ReadRxTuple(&t, seg)
	idx, ok := e.Lookup(&t)
	if !ok {
		return e.InputUnmatchedSegment(&t, seg, 0)
	}
	e.InputSegment(idx, &t, seg, 0)
	return true
}

func inputIP(e *Engine, p []byte) bool {
	if len(p) < netHdrLen {
		return false
	}
	ihl := int(p[0]&0xF) * 4
	if ihl < netHdrLen || len(p) < ihl || hdr.Checksum(p[:ihl], 0) != 0xFFFF {
		return false
	}
	idx, ok := e.LookupSegment(p[:ihl], p[ihl:])
	if !ok {
		// As the device does: a segment of a 4-tuple in TIME_WAIT is
		// the engine's (a FIN or data whose ACK was lost is answered).
		return e.InputUnmatched(p[:ihl], p[ihl:], 0)
	}
	e.Input(idx, p[:ihl], p[ihl:])
	return true
}

// ---- the host side -------------------------------------------------------

// hostApp is one side's application and driver: it sends a byte stream
// through transmit buffers and receives the peer's stream through user
// buffers (or legacy buffers), hashing both.
type hostApp struct {
	t    testing.TB
	name string
	e    *Engine
	env  *testEnv
	idx  uint32

	// Sending.
	sendTotal  int64
	sent       int64 // bytes handed to the engine
	gen        *rand.ChaCha8
	sendHash   hash.Hash
	txBufs     []rings.Addr
	txSize     uint32
	txFree     []int
	txFIFO     txRing // in flight, in sequence order
	sndNxt     uint32 // sequence number of the next byte handed over
	closeAfter bool   // FIN after the stream
	finSent    bool
	ackSeen    uint32

	// Receiving.
	legacyOnly bool
	postOnReq  bool
	posted     bool
	userBufs   []rings.Addr
	userSize   uint32
	descAddr   rings.Addr
	expect     uint32 // next sequence number expected
	recvd      int64
	recvHash   hash.Hash
	gotFin     bool
	closed     bool
	rst        bool
	timeout    bool
	noCredit   bool // stop returning legacy credit (zero-window tests)
	heldCredit uint32
	flags      rings.NotifyFlags // every flag seen
	ntfs       []rings.Notification
	keepNtfs   bool
	noData     bool // benchmarks: neither generate nor hash the bytes
	softFail   bool // not on the test goroutine: Errorf, not Fatalf
	ulp        bool // a ULP owns the stream: the host sees no payload
	scratch    []byte
}

type txRec struct {
	end uint32 // sequence number just past the buffer
	buf int
}

// txRing is a FIFO that does not allocate once grown.
type txRing struct {
	r    []txRec
	head int
	n    int
}

func (q *txRing) len() int     { return q.n }
func (q *txRing) front() txRec { return q.r[q.head] }
func (q *txRing) push(x txRec) {
	if q.n == len(q.r) {
		nr := make([]txRec, max(16, 2*len(q.r)))
		for i := 0; i < q.n; i++ {
			nr[i] = q.r[(q.head+i)%len(q.r)]
		}
		q.r, q.head = nr, 0
	}
	q.r[(q.head+q.n)%len(q.r)] = x
	q.n++
}
func (q *txRing) pop() txRec {
	x := q.r[q.head]
	q.head = (q.head + 1) % len(q.r)
	q.n--
	return x
}

type hostOpts struct {
	sendBytes  int64
	txBufs     int
	txSize     uint32
	userBufs   int
	userSize   uint32
	legacyOnly bool
	legacyBufs int
	legacySize uint32
	closeAfter bool
	seed       uint64
	// postOnRequest: post the user buffers only when the engine asks
	// (NtfUserBufReq); until then payload arrives in legacy buffers.
	postOnRequest bool
}

func newHostApp(t testing.TB, name string, e *Engine, env *testEnv, idx uint32, st *rings.ConnState, o hostOpts) *hostApp {
	h := &hostApp{t: t, name: name, e: e, env: env, idx: idx,
		sendTotal: o.sendBytes, sendHash: sha256.New(), recvHash: sha256.New(),
		txSize: o.txSize, userSize: o.userSize, legacyOnly: o.legacyOnly, closeAfter: o.closeAfter,
		postOnReq: o.postOnRequest,
		sndNxt:    st.SndNxt, ackSeen: st.SndUna, expect: st.RcvNxt, scratch: make([]byte, 64<<10)}
	var seed [32]byte
	seed[0], seed[1] = byte(o.seed), byte(o.seed>>8)
	copy(seed[2:], name)
	h.gen = rand.NewChaCha8(seed)
	for i := 0; i < o.txBufs; i++ {
		a, err := env.arena.Alloc(int(o.txSize), 64)
		if err != nil {
			t.Fatal(err)
		}
		h.txBufs = append(h.txBufs, a)
		h.txFree = append(h.txFree, i)
	}
	if !o.legacyOnly {
		for i := 0; i < o.userBufs; i++ {
			a, err := env.arena.Alloc(int(o.userSize), 64)
			if err != nil {
				t.Fatal(err)
			}
			h.userBufs = append(h.userBufs, a)
		}
		a, err := env.arena.Alloc(rings.UserBufDescSize*max(o.userBufs, 1), 64)
		if err != nil {
			t.Fatal(err)
		}
		h.descAddr = a
	}
	if o.legacyBufs > 0 {
		env.addLegacy(t, o.legacyBufs, o.legacySize)
	}
	return h
}

// start posts the user buffers and queues the first transmit buffers.
func (h *hostApp) start() {
	if !h.legacyOnly && !h.postOnReq {
		h.postAll()
	}
	h.pump()
}

func (h *hostApp) postAll() {
	h.posted = true
	for i := range h.userBufs {
		h.post(i)
	}
}

func (h *hostApp) post(i int) {
	d, _ := h.env.arena.Map(h.descAddr, rings.UserBufDescSize)
	u := rings.UserBuf{Addr: h.userBufs[i], Len: h.userSize, ID: uint32(i)}
	u.Encode(d)
	n, st := h.e.PostBuffers(h.idx, h.descAddr, 1)
	if n != 1 && st != rings.StatusOK { // 0 accepted, OK: the peer's FIN is in
		h.t.Errorf("%s: PostBuffers: %d %v", h.name, n, st)
	}
}

// pump hands stream bytes to the engine while transmit buffers are free.
func (h *hostApp) pump() {
	for h.sent < h.sendTotal && len(h.txFree) > 0 {
		i := h.txFree[len(h.txFree)-1]
		n := int64(h.txSize)
		if r := h.sendTotal - h.sent; r < n {
			n = r
		}
		b, _ := h.env.arena.Map(h.txBufs[i], int(n))
		if !h.noData {
			h.gen.Read(b)
		}
		tx := rings.Tx{Conn: h.idx, Addr: h.txBufs[i], Len: uint32(n), Flags: rings.TxPush}
		last := h.sent+n == h.sendTotal
		if last && h.closeAfter {
			tx.Flags |= rings.TxFin
		}
		st := h.e.Send(h.idx, &tx)
		if st == rings.StatusNoResources {
			return
		}
		if st != rings.StatusOK {
			h.t.Errorf("%s: Send: %v", h.name, st)
			return
		}
		if !h.noData {
			h.sendHash.Write(b)
		}
		h.txFree = h.txFree[:len(h.txFree)-1]
		h.sent += n
		h.sndNxt += uint32(n)
		end := h.sndNxt
		if tx.Flags&rings.TxFin != 0 {
			end++
			h.finSent = true
		}
		h.txFIFO.push(txRec{end: end, buf: i})
	}
	if h.sent == h.sendTotal && h.closeAfter && !h.finSent {
		h.finSent = true
		if st := h.e.Close(h.idx); st != rings.StatusOK {
			h.t.Errorf("%s: Close: %v", h.name, st)
		}
	}
}

// drain processes the host's notifications.
func (h *hostApp) drain() {
	for {
		n, ok := h.env.popNotify()
		if !ok {
			break
		}
		h.handle(n)
	}
	// The ring has room again: let the engine post what it held back.
	h.e.RetryNotifications()
	for {
		n, ok := h.env.popNotify()
		if !ok {
			return
		}
		h.handle(n)
	}
}

func (h *hostApp) fatalf(format string, args ...any) {
	if h.softFail {
		h.t.Errorf(format, args...)
		return
	}
	h.t.Fatalf(format, args...)
}

func (h *hostApp) handle(n rings.Notification) {
	if n.Conn != h.idx {
		h.t.Errorf("%s: notification for conn %d", h.name, n.Conn)
		return
	}
	h.flags |= n.Flags
	if h.keepNtfs {
		h.ntfs = append(h.ntfs, n)
	}
	if int32(n.Ack-h.ackSeen) > 0 {
		h.ackSeen = n.Ack
	}
	if n.Flags&rings.NtfAckThreshold != 0 || n.Flags&rings.NtfClosed != 0 {
		for h.txFIFO.len() > 0 && int32(n.Ack-h.txFIFO.front().end) >= 0 {
			h.txFree = append(h.txFree, h.txFIFO.pop().buf)
		}
	}
	if n.Flags&rings.NtfUserBufDone != 0 {
		if n.Seq != h.expect {
			h.fatalf("%s: user buffer %d at seq %d, expected %d", h.name, n.Aux, n.Seq, h.expect)
		}
		b, err := h.env.arena.Map(h.userBufs[n.Aux], int(n.Len))
		if err != nil {
			h.fatalf("%v", err)
		}
		if !h.noData {
			h.recvHash.Write(b)
		}
		h.expect += n.Len
		h.recvd += int64(n.Len)
		h.post(int(n.Aux))
	}
	if n.Flags&rings.NtfLegacyUpload != 0 {
		if n.Seq != h.expect {
			h.fatalf("%s: legacy upload at seq %d, expected %d", h.name, n.Seq, h.expect)
		}
		lb := h.env.legacy[n.Aux]
		b, err := h.env.arena.Map(lb.addr, int(n.Len))
		if err != nil {
			h.fatalf("%v", err)
		}
		if !h.noData {
			h.recvHash.Write(b)
		}
		h.expect += n.Len
		h.recvd += int64(n.Len)
		h.env.legacyFree = append(h.env.legacyFree, n.Aux)
		if h.noCredit {
			h.heldCredit += n.Len
		} else if n.Len > 0 {
			if st := h.e.Update(h.idx, &rings.ConnUpdate{Credit: n.Len}); st != rings.StatusOK && !h.closed {
				h.t.Errorf("%s: Update credit: %v", h.name, st)
			}
		}
	}
	if n.Flags&rings.NtfUserBufReq != 0 && h.postOnReq && !h.posted && !h.gotFin {
		h.postAll()
	}
	if n.Flags&rings.NtfFin != 0 {
		if n.Seq != h.expect+1 && !h.ulp {
			h.t.Errorf("%s: FIN at RCV.NXT %d, expected %d", h.name, n.Seq, h.expect+1)
		}
		h.gotFin = true
	}
	if n.Flags&rings.NtfRst != 0 {
		h.rst = true
	}
	if n.Flags&rings.NtfTimeout != 0 {
		h.timeout = true
	}
	if n.Flags&rings.NtfClosed != 0 {
		h.closed = true
	}
	if n.Flags&(rings.NtfAckThreshold|rings.NtfClosed) != 0 && !h.closed {
		h.pump()
	}
}

// giveCredit returns the held legacy credit (zero-window tests).
func (h *hostApp) giveCredit() {
	h.noCredit = false
	if h.heldCredit > 0 {
		if st := h.e.Update(h.idx, &rings.ConnUpdate{Credit: h.heldCredit}); st != rings.StatusOK {
			h.t.Errorf("%s: Update: %v", h.name, st)
		}
		h.heldCredit = 0
	}
}

func (h *hostApp) String() string {
	i, _ := h.e.Info(h.idx)
	return fmt.Sprintf("%s: sent %d/%d recvd %d fin=%v closed=%v flags=%v info=%+v", h.name,
		h.sent, h.sendTotal, h.recvd, h.gotFin, h.closed, h.flags, i)
}

// ---- connection state for a pair ---------------------------------------

var (
	ipA   = [4]byte{10, 0, 0, 1}
	ipB   = [4]byte{10, 0, 0, 2}
	macA  = [6]byte{2, 0, 0, 0, 0, 0xA}
	macB  = [6]byte{2, 0, 0, 0, 0, 0xB}
	portA = uint16(40001)
	portB = uint16(5001)
)

type pairOpts struct {
	issA, issB   uint32
	mss          uint16
	wsA, wsB     uint8 // each side's receive window scale
	rcvBufA      uint32
	rcvBufB      uint32
	sack, ts     bool
	tsA, tsB     uint32
	initialWnd   uint16
	keepaliveMs  uint32
	ackThreshold uint32
	cc           rings.CongestionControl // both ends'
	nagle        bool                    // both ends
	cwnd         uint32                  // both ends' initial window (0: RFC 6928's)
}

// pairStates returns the state blocks of both ends of a connection that has
// just completed its handshake.
func pairStates(o pairOpts) (a, b rings.ConnState) {
	if o.mss == 0 {
		o.mss = 1460
	}
	if o.initialWnd == 0 {
		o.initialWnd = 0xFFFF
	}
	var flags rings.ConnStateFlags
	if o.sack {
		flags |= rings.ConnSACKPermitted
	}
	if o.ts {
		flags |= rings.ConnTimestamps
	}
	if o.nagle {
		flags |= rings.ConnNagle
	}
	a = rings.ConnState{
		Version: rings.ConnStateVersion, Flags: flags, State: rings.StateEstablished, TTL: 64,
		LocalIP: ipA, RemoteIP: ipB, LocalPort: portA, RemotePort: portB,
		LocalMAC: macA, NextHopMAC: macB,
		SndUna: o.issA, SndNxt: o.issA, RcvNxt: o.issB,
		SndWnd: o.initialWnd, SndWndScale: o.wsB, RcvWndScale: o.wsA, MSS: o.mss,
		TSRecent: o.tsB, TSVal: o.tsA, RcvBufSize: o.rcvBufA,
		RcvAdvertised: uint32(o.initialWnd) << o.wsA, AckThreshold: o.ackThreshold,
		KeepaliveIdleMs: o.keepaliveMs, KeepaliveIntervalMs: o.keepaliveMs / 4, KeepaliveCount: 3,
		Congestion: o.cc, Cwnd: o.cwnd,
	}
	b = rings.ConnState{
		Version: rings.ConnStateVersion, Flags: flags, State: rings.StateEstablished, TTL: 64,
		LocalIP: ipB, RemoteIP: ipA, LocalPort: portB, RemotePort: portA,
		LocalMAC: macB, NextHopMAC: macA,
		SndUna: o.issB, SndNxt: o.issB, RcvNxt: o.issA,
		SndWnd: o.initialWnd, SndWndScale: o.wsA, RcvWndScale: o.wsB, MSS: o.mss,
		TSRecent: o.tsA, TSVal: o.tsB, RcvBufSize: o.rcvBufB,
		RcvAdvertised: uint32(o.initialWnd) << o.wsB, AckThreshold: o.ackThreshold,
		KeepaliveIdleMs: o.keepaliveMs, KeepaliveIntervalMs: o.keepaliveMs / 4, KeepaliveCount: 3,
		Congestion: o.cc, Cwnd: o.cwnd,
	}
	if o.keepaliveMs == 0 {
		a.KeepaliveIntervalMs, a.KeepaliveCount = 0, 0
		b.KeepaliveIntervalMs, b.KeepaliveCount = 0, 0
	}
	return a, b
}
