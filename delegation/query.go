package delegation

import "github.com/emunic/emunic/rings"

// QUERY_CONN: the engine's view of one connection, for the host's
// tcp_info. The notifications give the host SND.UNA, SND.NXT and the ACK
// count as they change; the congestion state and the loss-recovery counts
// change on every ACK and timer, and a notification per change would cost
// the ring more than they are worth, so the host asks when it wants them,
// as a NIC driver reads a queue's context.

// connStats is a connection's own counts, from its OFFLOAD on (reset clears
// them with the rest of the slot). Each is counted beside the engine-wide
// counter of the same event.
type connStats struct {
	retrans        uint64 // data/FIN segments sent again (Counters.TxRetransSegs)
	fastRecoveries uint64 // fast recoveries entered (Counters.FastRetransmits)
	rtos           uint64 // retransmission timer expirations (Counters.RTOExpired)
	tlps           uint64 // tail loss probes sent (Counters.TailLossProbes)
	segsIn         uint64 // segments received past the header checks (Counters.RxSegments)
	segsOut        uint64 // segments transmitted (Counters.TxSegments)
	bytesAcked     uint64 // SND.UNA's advance
	bytesRecv      uint64 // payload placed in order (Counters.RxBytes)
	rttSamples     uint64 // RTT samples taken (Counters.RTTSamples)
	minRTT         int64  // the least of them, ns
}

// QueryConn is the QUERY_CONN command's engine half: it fills out with
// connection idx's state and changes nothing.
//
//	StatusBadConn  idx not delegated (never, or released; TIME_WAIT has left its index)
func (e *Engine) QueryConn(idx uint32, out *rings.ConnInfo) rings.Status {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn
	}
	us := func(ns int64) uint32 { return uint32(min(max(ns, 0)/1000, 1<<32-1)) }
	rcvWnd := uint32(0)
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) {
		rcvWnd = c.rcvAdvEdge.Sub(c.rcvNxt)
	}
	*out = rings.ConnInfo{Version: rings.ConnInfoVersion, State: c.state, SndScale: c.sndScale, RcvScale: c.rcvScale,
		SndUna: uint32(c.sndUna), SndNxt: uint32(c.sndNxt), RcvNxt: uint32(c.rcvNxt),
		SndWnd: c.sndWnd, RcvWnd: rcvWnd, MSS: c.mss, Cwnd: c.cwnd, Ssthresh: c.ssthresh,
		RTO: us(c.curRTO()), OOOBytes: c.ooo.bytes,
		Retrans: c.st.retrans, FastRecoveries: c.st.fastRecoveries, RTOs: c.st.rtos, TLPs: c.st.tlps,
		SegsIn: c.st.segsIn, SegsOut: c.st.segsOut, BytesAcked: c.st.bytesAcked, BytesReceived: c.st.bytesRecv}
	// An RTT below 1 µs (an in-memory wire) still is one: 0 means none.
	if c.hasRTT {
		out.SRTT, out.RTTVar = max(us(c.srtt), 1), us(c.rttvar)
	}
	if c.hasRTT && c.st.rttSamples > 0 {
		out.MinRTT = max(us(c.st.minRTT), 1)
	}
	return rings.StatusOK
}
