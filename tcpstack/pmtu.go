package tcpstack

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Path MTU discovery (RFC 1191; RFC 8201 for IPv6), the host's part. An
// ICMP "fragmentation needed" or an ICMPv6 Packet Too Big reaches the
// driver as a legacy frame, whichever path its TCP connection is on. The
// host judges it before anyone acts on it, as Linux's tcp_v4_err and
// tcp_v6_err do:
//
//   - it must be well formed (ICMP checksum, a quote of at least the IPv4
//     header and 8 bytes of TCP, a next-hop MTU of at least 68), quote a
//     TCP segment we sent, and name a connection of ours;
//   - the quoted sequence number must be in flight (SND.UNA up to SND.NXT):
//     a stale one (acknowledged since) or a forged one is dropped;
//   - an MTU below PathMTUFloor (Linux's min_pmtu, 552) counts as 552: a
//     forged "MTU 68" otherwise leaves a connection sending 8-byte
//     segments, or none (netstack's sender stalls, the peer backs off);
//   - a Packet Too Big must carry a good checksum over the IPv6
//     pseudo-header and quote the IPv6 header, its extension headers and
//     8 bytes of TCP; one reporting an MTU below 1280 is dropped (no IPv6
//     link is smaller).
//
// A delegated connection's ICMP becomes a PATH_MTU command: the engine
// alone knows what is in flight, checks the quote and lowers the MSS. A
// netstack connection's is checked against netstack's own endpoint state
// and handed on to netstack with the MTU raised to the floor if it was
// below. Every verdict is counted (PathMTUStats).

// PathMTUFloor is the least path MTU the host (and the engine) accept.
const PathMTUFloor = 552

// PathMTUStats counts ICMP "fragmentation needed" messages by verdict.
type PathMTUStats struct {
	Applied   uint64 // acted on: a PATH_MTU the engine took, or handed to netstack
	Floored   uint64 // of those, reporting an MTU below PathMTUFloor (taken as the floor)
	Stale     uint64 // quoting a sequence number not in flight: stale or forged, dropped
	NoConn    uint64 // quoting no connection of ours, dropped
	Malformed uint64 // bad checksum, short quote, MTU below 68, not a segment we sent: dropped
	Errors    uint64 // PATH_MTU commands the device refused otherwise or never answered
	Busy      uint64 // quoting a delegated connection whose last one was still with the device: dropped
	// BelowMinimum counts ICMPv6 Packet Too Big messages reporting an MTU
	// below IPv6's minimum link MTU (1280): dropped.
	BelowMinimum uint64
}

type pmtuCounters struct {
	applied, floored, stale, noConn, malformed, errors, busy, belowMin atomic.Uint64
}

// PathMTUStats returns the host's ICMP "fragmentation needed" counts.
func (h *Host) PathMTUStats() PathMTUStats {
	c := &h.pmtu
	return PathMTUStats{Applied: c.applied.Load(), Floored: c.floored.Load(), Stale: c.stale.Load(),
		NoConn: c.noConn.Load(), Malformed: c.malformed.Load(), Errors: c.errors.Load(), Busy: c.busy.Load(),
		BelowMinimum: c.belowMin.Load()}
}

// isICMPError is the driver's cheap test of a legacy frame: IPv4 carrying
// ICMP, or IPv6 carrying ICMPv6 straight behind the fixed header or behind
// extension headers (icmpFrame walks them).
func isICMPError(frame []byte) bool {
	if len(frame) <= hdr.EthernetSize+hdr.IPv6OffNextHeader {
		return false
	}
	switch binary.BigEndian.Uint16(frame[hdr.EthernetOffType:]) {
	case hdr.EtherTypeIPv4:
		return frame[hdr.EthernetSize+hdr.IPv4OffProto] == hdr.ProtoICMP
	case hdr.EtherTypeIPv6:
		next := frame[hdr.EthernetSize+hdr.IPv6OffNextHeader]
		return next != hdr.ProtoTCP && next != hdr.ProtoUDP
	}
	return false
}

// icmpFrame judges a legacy ICMP or ICMPv6 frame (the flow tracker's
// icmpErr). It returns true for a frame it consumed (dropped or turned
// into PATH_MTU); false hands the frame on to netstack, after any change
// it made to it.
func (h *Host) icmpFrame(frame []byte) bool {
	if binary.BigEndian.Uint16(frame[hdr.EthernetOffType:]) == hdr.EtherTypeIPv6 {
		return h.icmpFrame6(frame)
	}
	ip, err := hdr.ParseIPv4(frame[hdr.EthernetSize:])
	if err != nil || ip.IsFragment() {
		return false // netstack's to judge
	}
	m, err := hdr.ParseICMP(ip.Payload())
	if err != nil || !m.FragNeeded() {
		return false // echo and the rest: netstack's
	}
	c := &h.pmtu
	qip, qtcp, err := m.Quoted()
	if err != nil || !m.ChecksumOK() || m.NextHopMTU() < 68 {
		c.malformed.Add(1)
		return true
	}
	if qip.Proto() != hdr.ProtoTCP {
		return false // a UDP or ICMP datagram's: netstack's
	}
	local, remote := netip.AddrFrom4(qip.Src()), netip.AddrFrom4(qip.Dst())
	mtu := uint32(m.NextHopMTU())
	switch h.pathMTUQuote(local, remote, hdr.TCP(qtcp), mtu) {
	case pmtuNetstack:
		if mtu < PathMTUFloor {
			m.SetNextHopMTU(PathMTUFloor)
			m.UpdateChecksum()
			c.floored.Add(1)
		}
		c.applied.Add(1)
		return false
	default:
		return true
	}
}

// icmpFrame6 is icmpFrame for IPv6: a Packet Too Big (RFC 8201) is
// judged as a "fragmentation needed" is, and one reporting an MTU below
// IPv6's minimum link MTU (1280) is dropped and counted (BelowMinimum):
// no path is smaller, so it is forged or broken, and RFC 8201 §4 has a
// node never lower its estimate below 1280 anyway.
func (h *Host) icmpFrame6(frame []byte) bool {
	ip, err := hdr.ParseIPv6(frame[hdr.EthernetSize:])
	if err != nil {
		return false
	}
	var ch hdr.IPv6Chain
	if hdr.WalkIPv6(ip, &ch) != nil || ch.Proto != hdr.ProtoICMPv6 || ch.Fragment {
		return false // netstack's to judge (the NIC refused the bad chains)
	}
	m, err := hdr.ParseICMPv6(ip[ch.L4Off:])
	if err != nil || !m.PacketTooBig() {
		return false // neighbour discovery, echo and the rest: netstack's
	}
	c := &h.pmtu
	qip, qtcp, err := m.QuotedTCP()
	switch {
	case errors.Is(err, hdr.ErrNotTCP):
		return false // a UDP or ICMPv6 packet's: netstack's
	case err != nil || !m.ChecksumOK(ip):
		c.malformed.Add(1)
		return true
	case m.MTU() < hdr.IPv6MinMTU:
		c.belowMin.Add(1)
		return true
	}
	mtu := min(m.MTU(), hdr.IPv4MaxTotalLen) // a jumbo path is no help to a 16-bit MSS
	if h.pathMTUQuote(qip.SourceAddress(), qip.DestinationAddress(), hdr.TCP(qtcp), mtu) == pmtuNetstack {
		c.applied.Add(1)
		return false
	}
	return true
}

// pmtuVerdict is what pathMTUQuote made of a quote.
type pmtuVerdict uint8

const (
	pmtuTaken    pmtuVerdict = iota // dropped (counted) or handed to the engine as PATH_MTU
	pmtuNetstack                    // a netstack connection's, in flight: netstack acts on it
)

// pathMTUQuote judges the TCP segment an ICMP error quoted (local and
// remote are the quoted packet's source and destination) for either
// family: a delegated connection's goes to the engine, a netstack one's
// is checked against its endpoint's SND.UNA..SND.NXT.
func (h *Host) pathMTUQuote(local, remote netip.Addr, t hdr.TCP, mtu uint32) pmtuVerdict {
	c := &h.pmtu
	if !h.isLocal(local) {
		c.malformed.Add(1) // not a segment we sent
		return pmtuTaken
	}
	key := hdr.Tuple{LocalIP: local, RemoteIP: remote, LocalPort: t.SrcPort(), RemotePort: t.DstPort()}
	quoted := t.Seq()
	if dc, f, busy := h.Driver.flows.pmtuStart(key); dc != nil {
		if busy {
			c.busy.Add(1)
		} else {
			h.pathMTUDelegated(dc, f, quoted, mtu)
		}
		return pmtuTaken
	}
	ep := h.S.FindTransportEndpoint(netProto(local), tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: key.LocalPort, LocalAddress: tcpipAddr(local),
		RemotePort: key.RemotePort, RemoteAddress: tcpipAddr(remote),
	}, nicID)
	tep, ok := ep.(tcpip.Endpoint)
	if !ok {
		c.noConn.Add(1)
		return pmtuTaken
	}
	st, err := readEndpointState(tep, h.S.Clock().NowMonotonic())
	if err != nil {
		c.noConn.Add(1) // a listener's, or one closing: nothing in flight
		return pmtuTaken
	}
	if !inFlight(quoted, st.sndUna, st.sndNxt) {
		c.stale.Add(1)
		return pmtuTaken
	}
	return pmtuNetstack
}

// inFlight reports una <= s < nxt in sequence space.
func inFlight(s, una, nxt uint32) bool {
	return s-una < nxt-una
}

// pathMTUDelegated hands a delegated connection's ICMP to the engine as a
// PATH_MTU command, without waiting: the interrupt goroutine must not. One
// at a time per connection (f is busy until the answer).
func (h *Host) pathMTUDelegated(dc *DelegatedConn, f *flowInfo, quoted, mtu uint32) {
	c := &h.pmtu
	req := []cmdReq{{c: rings.Command{Opcode: rings.OpPathMTU, Conn: dc.idx, Arg0: quoted, Arg1: mtu}}}
	err := h.Driver.submitAsync(req, func(r []rings.Command, err error) {
		defer h.Driver.flows.pmtuDone(f)
		switch {
		case err != nil:
			c.errors.Add(1)
		case r[0].Status == rings.StatusOK:
			c.applied.Add(1)
			if mtu < PathMTUFloor {
				c.floored.Add(1)
			}
		case r[0].Status == rings.StatusBadState:
			c.stale.Add(1) // not in flight (or the connection is closing)
		case r[0].Status == rings.StatusBadConn:
			c.noConn.Add(1) // released meanwhile
		default:
			c.errors.Add(1)
		}
	})
	if err != nil {
		c.errors.Add(1)
		h.Driver.flows.pmtuDone(f)
	}
}
