package hdr

import "net/netip"

// Network is what the transport layer needs from a network-layer header,
// whatever its family: the two addresses, the protocol it carries, the
// payload, and the transport checksum's pseudo-header. It is the seam that
// keeps IPv4 out of the TCP code: the engine and the flow tracker read a
// connection's tuple and segment through it, so a second family means a
// second implementation here, not edits above it. gVisor's header.Network
// has the same shape.
type Network interface {
	// SourceAddress and DestinationAddress are the header's addresses.
	SourceAddress() netip.Addr
	DestinationAddress() netip.Addr
	// TransportProtocol is the IP protocol number of the payload (ProtoTCP).
	TransportProtocol() uint8
	// Payload is the transport segment, as long as the header says.
	Payload() []byte
	// PseudoHeaderSum is the pseudo-header accumulator for a transport
	// segment of l4Len bytes carried in this header.
	PseudoHeaderSum(l4Len int) uint64
}

var _ Network = IPv4(nil)

// SourceAddress is Src as a netip.Addr.
func (h IPv4) SourceAddress() netip.Addr { return netip.AddrFrom4(h.Src()) }

// DestinationAddress is Dst as a netip.Addr.
func (h IPv4) DestinationAddress() netip.Addr { return netip.AddrFrom4(h.Dst()) }

// TransportProtocol is Proto.
func (h IPv4) TransportProtocol() uint8 { return h.Proto() }

// Tuple names one TCP connection from one end of it: its own address and
// port and its peer's. It is the one connection key of the device and the
// driver alike (the driver's flow tracking, the engine's lookup, the
// verbs); netip.Addr holds either family, so nothing above the header
// parsers knows which one a connection runs over.
type Tuple struct {
	LocalIP, RemoteIP     netip.Addr
	LocalPort, RemotePort uint16
}

// RxTuple (generic so that an IPv4 view is never boxed in an interface on
// the receive path) is the tuple of the connection that receives a segment carried in
// n: the receiver is the destination.
func RxTuple[N Network](n N, t TCP) Tuple {
	return Tuple{
		LocalIP: n.DestinationAddress(), RemoteIP: n.SourceAddress(),
		LocalPort: t.DstPort(), RemotePort: t.SrcPort(),
	}
}

// TxTuple is the tuple of the connection that sends a segment carried in n:
// the sender is the source.
func TxTuple[N Network](n N, t TCP) Tuple {
	return Tuple{
		LocalIP: n.SourceAddress(), RemoteIP: n.DestinationAddress(),
		LocalPort: t.SrcPort(), RemotePort: t.DstPort(),
	}
}
