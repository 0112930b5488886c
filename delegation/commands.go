package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// initialQueue is the size a connection's transmit and user-buffer queues
// start at; they double as the host queues more, up to Config.MaxTxBuffers
// and Config.MaxUserBufs.
const initialQueue = 8

// growRing doubles ring q (count entries from head) up to limit entries,
// keeping the order, and returns it with its new head (0).
func growRing[T any](q []T, head, count, limit int) ([]T, int) {
	n := min(max(2*len(q), initialQueue), limit)
	nq := make([]T, n)
	for i := 0; i < count; i++ {
		nq[i] = q[(head+i)%len(q)]
	}
	return nq, 0
}

// maxSendQueue bounds the bytes queued on a connection (sent and unsent), so
// sequence comparisons over the send queue stay unambiguous.
const maxSendQueue = 1 << 30

// OffloadAt reads a state block from host memory (the OFFLOAD command's
// Addr/Len) and calls Offload.
func (e *Engine) OffloadAt(idx uint32, addr rings.Addr, n uint32) rings.Status {
	if n < rings.ConnStateSize {
		return rings.StatusBadParam
	}
	b, err := e.dma.Map(addr, rings.ConnStateSize)
	if err != nil {
		e.ctr.DMAErrors++
		return rings.StatusBadAddress
	}
	if !rings.ConnStateBlock(b).ReservedZero() {
		return rings.StatusBadParam
	}
	var st rings.ConnState
	if err := st.Decode(b); err != nil {
		return rings.StatusBadParam
	}
	if st.Version != rings.ConnStateVersion2 {
		return e.Offload(idx, &st)
	}
	// Version 2: the addresses follow the block.
	if n < rings.ConnStateSizeV2 {
		return rings.StatusBadParam
	}
	xb, err := e.dma.Map(addr+rings.ConnStateSize, rings.ConnAddrExtSize)
	if err != nil {
		e.ctr.DMAErrors++
		return rings.StatusBadAddress
	}
	var x rings.ConnAddrExt
	if err := x.Decode(xb); err != nil {
		return rings.StatusBadParam
	}
	return e.OffloadAddrs(idx, &st, &x)
}

// Offload installs delegated connection idx from the host's state. It
// validates everything and never panics:
//
//	StatusBadConn   idx out of range
//	StatusBadState  idx already delegated, or the 4-tuple already is
//	StatusBadParam  anything in st out of range (version, state, window
//	                scale > 14, MSS < 64 or > 65495, SND.UNA != SND.NXT,
//	                zero address or port, unknown flags, buffer sizes)
func (e *Engine) Offload(idx uint32, st *rings.ConnState) rings.Status {
	return e.OffloadAddrs(idx, st, nil)
}

// OffloadAddrs is Offload for a state block of either version: x is a
// version-2 block's address extension (nil for version 1). The addresses
// are IPv4 ones, or (version 2) IPv6 unicast ones; an IPv4-mapped IPv6
// address is StatusBadParam (it is an IPv4 connection: family IPv4 says
// so).
func (e *Engine) OffloadAddrs(idx uint32, st *rings.ConnState, x *rings.ConnAddrExt) rings.Status {
	if idx >= uint32(len(e.conns)) {
		return rings.StatusBadConn
	}
	c := e.conns[idx]
	if c == nil {
		c = &conn{e: e, idx: idx, heapIdx: -1}
		e.conns[idx] = c
		e.nBlocks++
	}
	if c.inUse {
		return rings.StatusBadState
	}
	local, remote, addrsOK := st.Addrs(x)
	switch {
	case !addrsOK, local.Is4In6(), remote.Is4In6(), local.IsMulticast(), remote.IsMulticast(),
		st.Version == rings.ConnStateVersion && st.Family != 0,
		!st.Flags.KnownFlags(),
		st.State != rings.StateEstablished && st.State != rings.StateCloseWait,
		st.SndWndScale > hdr.TCPMaxWindowShift, st.RcvWndScale > hdr.TCPMaxWindowShift,
		st.MSS < minMSS, st.MSS > maxMSS,
		st.SndUna != st.SndNxt,
		st.LocalPort == 0, st.RemotePort == 0,
		st.RcvBufSize > maxWindowBytes, st.RcvAdvertised > maxWindowBytes,
		!st.Congestion.Known(),
		st.KeepaliveIdleMs != 0 && (st.KeepaliveIntervalMs == 0 || st.KeepaliveCount == 0):
		return rings.StatusBadParam
	}
	key := hdr.Tuple{LocalIP: local, RemoteIP: remote, LocalPort: st.LocalPort, RemotePort: st.RemotePort}
	if _, dup := e.table.get(&key); dup {
		return rings.StatusBadState
	}
	if i, ok := e.tw.table.get(&key); ok {
		// The host opened a new connection on a 4-tuple in TIME_WAIT
		// (its stack accepted the SYN): the record has no say any more.
		e.ctr.TimeWaitReopened++
		e.tw.remove(int32(i))
	}

	now := e.env.NowNanos()
	cfg := &e.cfg
	// Queues start small and grow with use (growRing) up to their
	// configured bounds, so a table of mostly idle connections costs
	// little device memory; a slot keeps what it grew for its next life.
	// The pending-notification queue is allocated only when the ring is
	// first found full.
	if len(c.txq) == 0 {
		c.txq = make([]txBuf, min(initialQueue, cfg.MaxTxBuffers))
	}
	if len(c.userq) == 0 {
		c.userq = make([]userBuf, min(initialQueue, cfg.MaxUserBufs))
	}
	c.ooo.init(cfg.OOOLimit)

	c.inUse = true
	c.state = st.State
	c.tuple = key
	c.sackOK = st.Flags&rings.ConnSACKPermitted != 0
	c.tsOK = st.Flags&rings.ConnTimestamps != 0
	c.sndScale, c.rcvScale = st.SndWndScale, st.RcvWndScale
	c.mss = uint32(st.MSS)
	c.ttl, c.tos = st.TTL, st.TOS
	if c.ttl == 0 {
		c.ttl = 64
	}
	c.buildTemplate(st.LocalMAC, st.NextHopMAC)

	c.sndUna, c.sndNxt, c.sndMax, c.sndEnd = seq(st.SndUna), seq(st.SndNxt), seq(st.SndNxt), seq(st.SndNxt)
	c.sndWnd = uint32(st.SndWnd) << st.SndWndScale
	c.maxSndWnd = c.sndWnd
	c.sndWl1, c.sndWl2 = seq(st.RcvNxt), seq(st.SndUna)
	c.maxTx = cfg.MaxTxBuffers
	if st.MaxTxBuffers != 0 && int(st.MaxTxBuffers) < c.maxTx {
		c.maxTx = int(st.MaxTxBuffers)
	}

	mss := c.maxPayload()
	c.cwnd = st.Cwnd
	if c.cwnd == 0 {
		c.cwnd = min(10*mss, max(2*mss, 14600)) // RFC 6928
	}
	if c.cwnd < mss {
		c.cwnd = mss
	}
	c.cwnd = min(c.cwnd, maxWindowBytes)
	c.ssthresh = st.Ssthresh
	if c.ssthresh == 0 || c.ssthresh > maxWindowBytes {
		c.ssthresh = maxWindowBytes
	}
	c.cc = ccState{nagle: st.Flags&rings.ConnNagle != 0}
	c.setCC(st.Congestion)
	c.recover = c.sndUna - 1
	if st.SRTTus != 0 {
		c.srtt = int64(st.SRTTus) * 1000
		c.rttvar = int64(st.RTTVarUs) * 1000
		c.hasRTT = true
		c.setRTO()
	} else {
		c.rto = cfg.InitialRTO
	}

	c.rcvNxt = seq(st.RcvNxt)
	c.rcvAdvEdge = c.rcvNxt.Add(st.RcvAdvertised)
	c.rcvBuf = st.RcvBufSize
	if c.rcvBuf == 0 {
		c.rcvBuf = cfg.RcvBufSize
	}
	c.lastAckSent = c.rcvNxt
	c.finRcvd = st.State == rings.StateCloseWait

	c.tsRecent, c.tsRecentAt = st.TSRecent, now
	c.tsBase, c.tsBaseNow, c.lastTSval = st.TSVal, now, st.TSVal

	c.ackThresh = st.AckThreshold
	c.seqThresh = seq(st.SeqThreshold)
	c.seqArmed = st.Flags&rings.ConnSeqThreshold != 0

	c.lastRecv = now
	c.setKeepalive(now, st.KeepaliveIdleMs, st.KeepaliveIntervalMs, st.KeepaliveCount)

	e.table.put(&key, idx)
	e.nConns++
	c.checkSeqThreshold()
	e.schedule(c)
	return rings.StatusOK
}

func (c *conn) setKeepalive(now int64, idleMs, intvlMs, count uint32) {
	c.kaIdle = int64(idleMs) * 1e6
	c.kaIntvl = int64(intvlMs) * 1e6
	c.kaCount = int(count)
	c.kaSent = 0
	c.kaAt = 0
	if c.kaIdle > 0 {
		c.kaAt = now + c.kaIdle
	}
}

// Send queues a host transmit buffer (tx.Addr, tx.Len; tx.Conn is ignored:
// idx names the connection) on the send queue. The buffer stays the host's
// and must stay unchanged until an NtfAckThreshold's Ack covers its last
// byte (its FIN too, for TxFin). TxPush sets PSH on the segment holding its
// last byte; TxFin closes the sending direction after it (Len may be 0 for a
// bare FIN, which uses no queue slot).
//
//	StatusBadConn      idx not delegated
//	StatusBadState     sending direction closed (FIN queued) or connection closing/closed
//	StatusBadParam     Len 0 without TxFin, Len > 1 GiB, unknown flags
//	StatusBadAddress   [Addr, Addr+Len) not in host memory
//	StatusNoResources  MaxTxBuffers buffers already queued, or 1 GiB queued;
//	                   and every later buffer or FIN until a resume
//
// A buffer refused for want of room leaves a hole in the stream, and the
// host's next buffers are already in the transmit ring behind it: taking
// them would send their bytes at the hole's sequence numbers. So the
// connection's sending stalls: every buffer (and FIN) after the refused one
// is refused too, until the host, having seen the refusals, queues a
// resume (Len 0, no flags; StatusBadParam when nothing is stalled) and the
// refused bytes again behind it. SendEnd says where the hole starts.
func (e *Engine) Send(idx uint32, tx *rings.Tx) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if len(e.pendList) > 0 {
		e.flushNotify(e.env.NowNanos())
	}
	if c.txStalled {
		if tx.Len == 0 && tx.Flags == 0 {
			c.txStalled = false
			return rings.StatusOK
		}
		if c.ulp.u == nil && (c.state == rings.StateEstablished || c.state == rings.StateCloseWait) {
			return rings.StatusNoResources
		}
	}
	if c.ulp.u != nil || c.finQueued || (c.state != rings.StateEstablished && c.state != rings.StateCloseWait) {
		return rings.StatusBadState
	}
	if tx.Flags&^(rings.TxPush|rings.TxFin) != 0 || (tx.Len == 0 && tx.Flags&rings.TxFin == 0) ||
		tx.Len > maxSendQueue {
		return rings.StatusBadParam
	}
	if tx.Len > 0 {
		if err := rings.Check(e.dma, tx.Addr, int(tx.Len)); err != nil {
			return rings.StatusBadAddress
		}
		if c.txCount >= c.maxTx || c.sndEnd.Sub(c.sndUna)+tx.Len > maxSendQueue {
			c.txStalled = true
			return rings.StatusNoResources
		}
		if c.txCount == len(c.txq) {
			c.txq, c.txHead = growRing(c.txq, c.txHead, c.txCount, e.cfg.MaxTxBuffers)
		}
		*c.txAt(c.txCount) = txBuf{addr: tx.Addr, len: tx.Len, start: c.sndEnd, push: tx.Flags&rings.TxPush != 0}
		c.txCount++
		c.sndEnd = c.sndEnd.Add(tx.Len)
	}
	if tx.Flags&rings.TxFin != 0 {
		c.queueFin()
	}
	now := e.env.NowNanos()
	c.output(now)
	e.schedule(c)
	return rings.StatusOK
}

// SendEnd returns where connection idx's send queue ends (the sequence
// number the next buffer's first byte would have), SND.UNA and the ACKs
// received: what the device tells the host with a refused transmit
// descriptor. ok is false for an index not delegated.
func (e *Engine) SendEnd(idx uint32) (end, una, acks uint32, ok bool) {
	c := e.get(idx)
	if c == nil {
		return 0, 0, 0, false
	}
	return uint32(c.sndEnd), uint32(c.sndUna), c.ackCount, true
}

func (c *conn) queueFin() {
	c.finQueued = true
	c.finSeq = c.sndEnd
	switch c.state {
	case rings.StateEstablished:
		c.state = rings.StateFinWait1
	case rings.StateCloseWait:
		c.state = rings.StateLastAck
	}
}

// Close sends a FIN after the queued data (half-close: receiving goes on
// until the peer's FIN). Closing twice is OK.
func (e *Engine) Close(idx uint32) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if c.finQueued || c.ulp.close {
		return rings.StatusOK
	}
	if c.state != rings.StateEstablished && c.state != rings.StateCloseWait {
		return rings.StatusBadState
	}
	if c.ulp.u != nil {
		// The FIN goes after the ULP's output (ulpPull queues it).
		c.ulp.close = true
	} else {
		c.queueFin()
	}
	c.output(e.env.NowNanos())
	e.schedule(c)
	return rings.StatusOK
}

// Abort resets the connection (RST to the peer unless it is already
// closed) and frees its index at once. Every buffer is the host's again; no
// notification follows.
func (e *Engine) Abort(idx uint32) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if c.state != rings.StateClosed && c.state != rings.StateTimeWait {
		c.sendRst(e.env.NowNanos())
	}
	c.ulpDown()
	c.free()
	return rings.StatusOK
}

// Release frees the index of a CLOSED connection (after NtfClosed).
func (e *Engine) Release(idx uint32) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if c.state != rings.StateClosed {
		return rings.StatusBadState
	}
	c.free()
	return rings.StatusOK
}

// PostBuffers reads count user buffer descriptors (rings.UserBufDesc) at
// addr and queues them for in-order placement. It returns how many it
// accepted (a prefix of the array) and:
//
//	StatusOK           all accepted; or none (result 0) when the peer's FIN
//	                   already arrived or the connection is closing: nothing
//	                   more will need a buffer, and a host reposting one it
//	                   drained before it saw NtfFin is racing, not erring
//	StatusNoResources  the queue (MaxUserBufs) filled; the rest were not taken
//	StatusBadAddress   the array, or the buffer after the accepted ones, is
//	                   not in host memory
//	StatusBadParam     the buffer after the accepted ones has length 0 or > 1 GiB
//	StatusBadState     an upper-layer protocol (iWARP) owns the byte stream
//	StatusBadConn      idx not delegated
func (e *Engine) PostBuffers(idx uint32, addr rings.Addr, count uint32) (uint32, rings.Status) {
	c := e.get(idx)
	if c == nil {
		return 0, rings.StatusBadConn
	}
	if c.ulp.u != nil {
		return 0, rings.StatusBadState
	}
	if c.finRcvd || c.state == rings.StateClosed || c.state == rings.StateTimeWait {
		// No more data will need a buffer. A host reposting a buffer it
		// drained before it saw NtfFin (or NtfClosed) is racing the
		// notification, not erring: nothing is accepted, and the result
		// (0 accepted) says so, not an error status.
		return 0, rings.StatusOK
	}
	if count == 0 {
		return 0, rings.StatusOK
	}
	if count > uint32(e.cfg.MaxUserBufs) {
		count = uint32(e.cfg.MaxUserBufs) + 1 // reading more cannot be accepted anyway
	}
	descs, err := e.dma.Map(addr, int(count)*rings.UserBufDescSize)
	if err != nil {
		e.ctr.DMAErrors++
		return 0, rings.StatusBadAddress
	}
	accepted := uint32(0)
	status := rings.StatusOK
	for i := uint32(0); i < count; i++ {
		d := rings.UserBufDesc(descs[i*rings.UserBufDescSize:])
		if c.uqCount == len(c.userq) {
			if c.uqCount >= e.cfg.MaxUserBufs {
				status = rings.StatusNoResources
				break
			}
			c.userq, c.uqHead = growRing(c.userq, c.uqHead, c.uqCount, e.cfg.MaxUserBufs)
		}
		l := d.Len()
		if l == 0 || l > maxSendQueue {
			status = rings.StatusBadParam
			break
		}
		if err := rings.Check(e.dma, d.Addr(), int(l)); err != nil {
			status = rings.StatusBadAddress
			break
		}
		c.userq[(c.uqHead+c.uqCount)%len(c.userq)] = userBuf{addr: d.Addr(), len: l, id: d.ID()}
		c.uqCount++
		accepted++
	}
	if accepted > 0 {
		c.userBufReqSent = false
		c.retryOOO(e.env.NowNanos())
		e.schedule(c)
	}
	return accepted, status
}

// SetThresholds sets the ACK threshold (bytes acknowledged between
// NtfAckThreshold; 0: every time an ACK frees a transmit buffer) and, if
// armSeq, the sequence threshold: NtfSeqThreshold fires once when RCV.NXT
// reaches seqThresh (at once if it already has). StatusBadState on a CLOSED
// connection.
func (e *Engine) SetThresholds(idx uint32, ackThresh, seqThresh uint32, armSeq bool) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if c.state == rings.StateClosed {
		return rings.StatusBadState // nothing left to measure against
	}
	c.ackThresh = ackThresh
	c.seqThresh = seq(seqThresh)
	c.seqArmed = armSeq
	if armSeq && c.state != rings.StateClosed {
		c.checkSeqThreshold()
	}
	return rings.StatusOK
}

// Update returns window credit for legacy-uploaded bytes the application
// consumed and applies the cached-state changes u.Flags names. A window
// update goes out at once if the credit reopened a small window (or with
// UpdAckNow).
//
//	StatusBadParam  unknown flags, credit above the bytes uploaded and not
//	                yet credited, receive buffer 0 or > 1 GiB, keepalive
//	                interval or count 0 with idle > 0, an unknown
//	                congestion control
func (e *Engine) Update(idx uint32, u *rings.ConnUpdate) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	if !u.Flags.KnownFlags() || u.Credit > c.legacyUncredited {
		return rings.StatusBadParam
	}
	if u.Flags&rings.UpdRcvBufSize != 0 && (u.RcvBufSize == 0 || u.RcvBufSize > maxWindowBytes) {
		return rings.StatusBadParam
	}
	if u.Flags&rings.UpdKeepalive != 0 && u.KeepaliveIdleMs != 0 &&
		(u.KeepaliveIntervalMs == 0 || u.KeepaliveCount == 0) {
		return rings.StatusBadParam
	}
	if u.Flags&rings.UpdCongestion != 0 && !u.Congestion.Known() {
		return rings.StatusBadParam
	}
	now := e.env.NowNanos()
	c.legacyUncredited -= u.Credit
	if u.Flags&rings.UpdRcvBufSize != 0 {
		c.rcvBuf = u.RcvBufSize
	}
	if u.Flags&rings.UpdKeepalive != 0 {
		c.setKeepalive(now, u.KeepaliveIdleMs, u.KeepaliveIntervalMs, u.KeepaliveCount)
	}
	if u.Flags&rings.UpdCongestion != 0 && u.Congestion != c.cc.algo {
		c.setCC(u.Congestion)
	}
	if u.Flags&rings.UpdNagle != 0 {
		c.cc.nagle = u.Nagle // held data goes at the output pass that follows
	}
	if u.Flags&rings.UpdTTLTOS != 0 {
		c.ttl, c.tos = u.TTL, u.TOS
		if c.ttl == 0 {
			c.ttl = 64
		}
		setNetTTLTOS(c.tmpl[:], c.ttl, c.tos)
	}
	if u.Flags&rings.UpdNextHopMAC != 0 {
		hdr.Ethernet(c.tmpl[:]).SetDst(u.NextHopMAC)
	}
	live := c.state != rings.StateClosed && c.state != rings.StateTimeWait
	if live {
		c.retryOOO(now)
	}
	if live && !c.finRcvd && (u.Flags&rings.UpdAckNow != 0 || c.windowUpdateDue()) {
		c.sendAck(now)
	}
	if live && u.Flags&rings.UpdNagle != 0 {
		c.output(now) // what Nagle held goes once it is off
	}
	e.schedule(c)
	return rings.StatusOK
}

// ConnInfo is a snapshot of a connection for tests, tracing and the host's
// diagnostics.
type ConnInfo struct {
	State                  rings.TCPState
	SndUna, SndNxt, SndMax uint32
	SndEnd                 uint32 // just past the last queued byte
	RcvNxt                 uint32
	RcvWnd                 uint32 // advertised right edge - RCV.NXT
	SndWnd                 uint32 // peer's window, scaled
	Cwnd, Ssthresh         uint32
	SRTT, RTO              int64
	InRecovery             bool
	Congestion             rings.CongestionControl
	Nagle                  bool
	TxQueued, UserBufs     int
	LegacyUncredited       uint32
	OOOBytes               uint32
	OOORanges              int
	PendingNotify          int
	TSVal                  uint32 // last TSval sent
	SegPayload             uint32 // payload bytes in a full segment (the MSS less the timestamp option)
	ULP                    bool   // an upper-layer protocol owns the byte stream
	ULPHeld                uint32 // in-order bytes received that the ULP has not taken yet
}

// Info returns a snapshot of connection idx.
func (e *Engine) Info(idx uint32) (ConnInfo, bool) {
	c := e.get(idx)
	if c == nil {
		return ConnInfo{}, false
	}
	wnd := uint32(0)
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		wnd = c.rcvAdvEdge.Sub(c.rcvNxt)
	}
	pend := c.pendCount
	if c.deferred != 0 {
		pend++
	}
	return ConnInfo{
		State: c.state, SndUna: uint32(c.sndUna), SndNxt: uint32(c.sndNxt), SndMax: uint32(c.sndMax),
		SndEnd: uint32(c.sndEnd), RcvNxt: uint32(c.rcvNxt), RcvWnd: wnd, SndWnd: c.sndWnd,
		Cwnd: c.cwnd, Ssthresh: c.ssthresh, SRTT: c.srtt, RTO: c.rto, InRecovery: c.inRecovery,
		Congestion: c.cc.algo, Nagle: c.cc.nagle,
		TxQueued: c.txCount, UserBufs: c.uqCount, LegacyUncredited: c.legacyUncredited,
		OOOBytes: c.ooo.bytes, OOORanges: c.ooo.n, PendingNotify: pend, TSVal: c.lastTSval,
		SegPayload: c.maxPayload(), ULP: c.ulp.u != nil, ULPHeld: uint32(c.ulp.held),
	}, true
}

// SnapshotAddrs is Snapshot with the version-2 address extension, which
// an IPv6 connection's addresses need (an IPv4 one's are in st, version 1,
// and x is zeroed).
func (e *Engine) SnapshotAddrs(idx uint32, st *rings.ConnState, x *rings.ConnAddrExt) rings.Status {
	if s := e.Snapshot(idx, st); s != rings.StatusOK {
		return s
	}
	*x = rings.ConnAddrExt{}
	if st.Version == rings.ConnStateVersion2 {
		c := e.conns[idx]
		x.LocalAddr, x.RemoteAddr = c.tuple.LocalIP.As16(), c.tuple.RemoteIP.As16()
	}
	return rings.StatusOK
}

// Snapshot writes connection idx's current state as a state block (for
// diagnostics, and for a future upload to the host stack). SndUna/SndNxt
// are the device's; a connection with unacknowledged data cannot be
// re-offloaded from a snapshot.
func (e *Engine) Snapshot(idx uint32, st *rings.ConnState) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	var flags rings.ConnStateFlags
	if c.sackOK {
		flags |= rings.ConnSACKPermitted
	}
	if c.tsOK {
		flags |= rings.ConnTimestamps
	}
	if c.seqArmed {
		flags |= rings.ConnSeqThreshold
	}
	if c.cc.nagle {
		flags |= rings.ConnNagle
	}
	wnd := uint32(0)
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		wnd = c.rcvAdvEdge.Sub(c.rcvNxt)
	}
	*st = rings.ConnState{
		Version: rings.ConnStateVersion, Flags: flags, State: c.state, TTL: c.ttl, TOS: c.tos,
		LocalPort: c.tuple.LocalPort, RemotePort: c.tuple.RemotePort,
		LocalMAC: hdr.Ethernet(c.tmpl[:]).Src(), NextHopMAC: hdr.Ethernet(c.tmpl[:]).Dst(),
		SndUna: uint32(c.sndUna), SndNxt: uint32(c.sndNxt), RcvNxt: uint32(c.rcvNxt),
		SndWnd: uint16(min(c.sndWnd>>c.sndScale, 0xFFFF)), SndWndScale: c.sndScale, RcvWndScale: c.rcvScale,
		MSS: uint16(c.mss), MaxTxBuffers: uint16(min(c.maxTx, 0xFFFF)),
		TSRecent: c.tsRecent, TSVal: c.lastTSval + 1,
		RcvBufSize: c.rcvBuf, RcvAdvertised: wnd,
		AckThreshold: c.ackThresh, SeqThreshold: uint32(c.seqThresh),
		KeepaliveIdleMs: uint32(c.kaIdle / 1e6), KeepaliveIntervalMs: uint32(c.kaIntvl / 1e6),
		KeepaliveCount: uint32(c.kaCount),
		SRTTus:         uint32(c.srtt / 1000), RTTVarUs: uint32(c.rttvar / 1000),
		Cwnd: c.cwnd, Ssthresh: c.ssthresh, Congestion: c.cc.algo,
	}
	if c.tuple.LocalIP.Is4() {
		st.LocalIP, st.RemoteIP = c.tuple.LocalIP.As4(), c.tuple.RemoteIP.As4()
	} else {
		// An IPv6 connection's block is version 2; its addresses are
		// in the extension (SnapshotAddrs).
		st.Version, st.Family = rings.ConnStateVersion2, rings.FamilyIPv6
	}
	return rings.StatusOK
}
