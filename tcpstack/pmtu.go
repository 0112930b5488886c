package tcpstack

import (
	"encoding/binary"
	"net/netip"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Path MTU discovery (RFC 1191), the host's part. An ICMP "fragmentation
// needed" reaches the driver as a legacy frame, whichever path its TCP
// connection is on. The host judges it before anyone acts on it, as
// Linux's tcp_v4_err does:
//
//   - it must be well formed (ICMP checksum, a quote of at least the IPv4
//     header and 8 bytes of TCP, a next-hop MTU of at least 68), quote a
//     TCP segment we sent, and name a connection of ours;
//   - the quoted sequence number must be in flight (SND.UNA up to SND.NXT):
//     a stale one (acknowledged since) or a forged one is dropped;
//   - an MTU below PathMTUFloor (Linux's min_pmtu, 552) counts as 552: a
//     forged "MTU 68" otherwise leaves a connection sending 8-byte
//     segments, or none (netstack's sender stalls, the peer backs off).
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
}

type pmtuCounters struct {
	applied, floored, stale, noConn, malformed, errors, busy atomic.Uint64
}

// PathMTUStats returns the host's ICMP "fragmentation needed" counts.
func (h *Host) PathMTUStats() PathMTUStats {
	c := &h.pmtu
	return PathMTUStats{Applied: c.applied.Load(), Floored: c.floored.Load(), Stale: c.stale.Load(),
		NoConn: c.noConn.Load(), Malformed: c.malformed.Load(), Errors: c.errors.Load(), Busy: c.busy.Load()}
}

// isICMPv4 is the driver's cheap test of a legacy frame: IPv4, ICMP.
func isICMPv4(frame []byte) bool {
	return len(frame) > hdr.EthernetSize+hdr.IPv4OffProto &&
		binary.BigEndian.Uint16(frame[hdr.EthernetOffType:]) == hdr.EtherTypeIPv4 &&
		frame[hdr.EthernetSize+hdr.IPv4OffProto] == hdr.ProtoICMP
}

// icmpFrame judges a legacy ICMP frame (the flow tracker's icmpErr). It
// returns true for a frame it consumed (dropped or turned into PATH_MTU);
// false hands the frame on to netstack, after any change it made to it.
func (h *Host) icmpFrame(frame []byte) bool {
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
	if local != h.Addr() {
		c.malformed.Add(1) // not a segment we sent
		return true
	}
	t := hdr.TCP(qtcp)
	key := hdr.Tuple{LocalIP: local, RemoteIP: remote, LocalPort: t.SrcPort(), RemotePort: t.DstPort()}
	quoted, mtu := t.Seq(), uint32(m.NextHopMTU())
	if dc, f, busy := h.Driver.flows.pmtuStart(key); dc != nil {
		if busy {
			c.busy.Add(1)
		} else {
			h.pathMTUDelegated(dc, f, quoted, mtu)
		}
		return true
	}
	ep := h.S.FindTransportEndpoint(ipv4.ProtocolNumber, tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: key.LocalPort, LocalAddress: tcpip.AddrFrom4(local.As4()),
		RemotePort: key.RemotePort, RemoteAddress: tcpip.AddrFrom4(remote.As4()),
	}, nicID)
	tep, ok := ep.(tcpip.Endpoint)
	if !ok {
		c.noConn.Add(1)
		return true
	}
	st, err := readEndpointState(tep, h.S.Clock().NowMonotonic())
	if err != nil {
		c.noConn.Add(1) // a listener's, or one closing: nothing in flight
		return true
	}
	if !inFlight(quoted, st.sndUna, st.sndNxt) {
		c.stale.Add(1)
		return true
	}
	if mtu < PathMTUFloor {
		m.SetNextHopMTU(PathMTUFloor)
		m.UpdateChecksum()
		c.floored.Add(1)
	}
	c.applied.Add(1)
	return false
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
