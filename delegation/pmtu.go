package delegation

import (
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Path MTU discovery (RFC 1191) for a delegated connection. The device does
// not parse ICMP: an ICMP "fragmentation needed" goes up to the host like
// any frame that is not a delegated flow's TCP, and the host hands it back
// as a PATH_MTU command naming the connection, the reported MTU and the
// sequence number the ICMP quoted. The engine, which alone knows what is in
// flight, judges it as Linux's tcp_v4_err does. (Not an UPDATE flag: the
// quoted sequence number needs 32 bits, and every 32-bit field of UPDATE's
// entry already carries one of its parameters.)

// PathMTUFloor is the least path MTU the engine accepts: a report below it
// lowers the MSS only to PathMTUFloor-40. It is Linux's min_pmtu (552),
// the floor that keeps a forged "MTU 68" from shrinking a connection to
// 28-byte segments (RFC 1191 §3 allows 68; no real path is that small).
const PathMTUFloor = 552

// pathMTUOverhead is the IPv4 and TCP headers without options: a path MTU
// less it is the largest MSS the path carries.
const pathMTUOverhead = hdr.IPv4MinSize + hdr.TCPMinSize

// pathMTUInFlight reports whether quoted is a sequence number the
// connection has sent and not yet had acknowledged, SND.UNA <= quoted <
// SND.MAX: the segment the router refused must be one still in flight. A
// quote outside it is stale (the segment was acknowledged since) or forged.
// Linux checks between(seq, snd_una, snd_nxt), its snd_nxt being our
// SND.MAX.
func (c *conn) pathMTUInFlight(quoted seq) bool {
	return !quoted.LessThan(c.sndUna) && quoted.LessThan(c.sndMax)
}

// pathMTU applies a validated ICMP "fragmentation needed" reporting a
// next-hop MTU of mtu: the MSS drops to what the path carries (floored at
// PathMTUFloor; never raised: RFC 1191 raises only by probing), and, when
// it dropped, everything in flight is sent again in the new size, as
// Linux's tcp_simple_retransmit does: the router discarded every segment
// larger than it. The congestion window is left alone (the loss was the
// path's size, not congestion) but not above what is now in flight.
func (c *conn) pathMTU(now int64, mtu uint16) {
	mss := uint32(max(mtu, PathMTUFloor)) - pathMTUOverhead
	if !c.tuple.LocalIP.Is4() {
		// IPv6: a Packet Too Big never takes the path below the
		// minimum link MTU (RFC 8200 §5, RFC 8201 §4), and the
		// header is 20 bytes longer.
		mss = uint32(max(mtu, hdr.IPv6MinMTU)) - hdr.IPv6Size - hdr.TCPMinSize
	}
	if mss >= c.mss {
		return // no smaller than what we send: nothing to do
	}
	c.mss = mss
	if c.cwnd < c.maxPayload() {
		c.cwnd = c.maxPayload()
	}
	if c.sndMax == c.sndUna || !c.canSend() {
		return
	}
	// Everything unacknowledged was sent in the old size: resend it all,
	// from SND.UNA, in the new one.
	c.setLost(true)
	c.highRxt, c.rtxOut = c.sndUna, 0
	c.sndNxt = c.sndUna
	if !c.retransmitHead(now) {
		return
	}
	c.output(now)
}

// PathMTU is the PATH_MTU command: an ICMP "fragmentation needed" that
// quoted sequence number quoted of connection idx reported a next-hop MTU
// of mtu. It returns the MSS in effect after it.
//
//	StatusBadConn   idx not delegated
//	StatusBadParam  an MTU below the family's minimum (IPv4 68, IPv6 1280:
//	                a Packet Too Big reporting less is bad input) or above 65535
//	StatusBadState  the connection is closed or in TIME_WAIT, or the quote
//	                is not in flight (stale or forged): nothing changes
func (e *Engine) PathMTU(idx uint32, quoted, mtu uint32) (rings.Status, uint32) {
	c := e.get(idx)
	if c == nil {
		return rings.StatusBadConn, 0
	}
	minMTU := uint32(minIPv4MTU)
	if !c.tuple.LocalIP.Is4() {
		minMTU = hdr.IPv6MinMTU
	}
	if mtu < minMTU || mtu > hdr.IPv4MaxTotalLen {
		return rings.StatusBadParam, c.mss
	}
	if c.state == rings.StateClosed || c.state == rings.StateTimeWait || !c.pathMTUInFlight(seq(quoted)) {
		return rings.StatusBadState, c.mss
	}
	c.pathMTU(e.env.NowNanos(), uint16(mtu))
	e.schedule(c)
	return rings.StatusOK, c.mss
}

// minIPv4MTU is the least MTU every IPv4 link has (RFC 791): an ICMP
// reporting less is malformed, not merely small.
const minIPv4MTU = 68
