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

// RxTuple is the tuple of the connection that receives the TCP segment t
// carried in h: the receiver is the destination. (A method on each family's
// view, not a function of Network: the receive path builds one per packet,
// and an interface or generic call there costs more than the lookup.)
func (h IPv4) RxTuple(t TCP) Tuple {
	var k Tuple
	h.ReadRxTuple(&k, t)
	return k
}

// ReadRxTuple is RxTuple into *k, for the per-packet path: filling the
// caller's tuple in place saves copying 56 bytes through temporaries.
func (h IPv4) ReadRxTuple(k *Tuple, t TCP) {
	k.LocalIP, k.RemoteIP = netip.AddrFrom4(h.Dst()), netip.AddrFrom4(h.Src())
	k.LocalPort, k.RemotePort = t.DstPort(), t.SrcPort()
}

// TxTuple is the tuple of the connection that sends the TCP segment t
// carried in h: the sender is the source.
func (h IPv4) TxTuple(t TCP) Tuple {
	return Tuple{
		LocalIP: netip.AddrFrom4(h.Src()), RemoteIP: netip.AddrFrom4(h.Dst()),
		LocalPort: t.SrcPort(), RemotePort: t.DstPort(),
	}
}

// PseudoHeaderSumAddr is PseudoHeaderSum for either family: the IPv4
// pseudo-header for IPv4 addresses, the IPv6 one (RFC 8200 §8.1: source,
// destination, 32-bit upper-layer length, next header) otherwise. The sums
// agree because the one's complement sum does not care how the words are
// grouped.
func PseudoHeaderSumAddr(proto uint8, src, dst netip.Addr, l4Len int) uint64 {
	if src.Is4() && dst.Is4() {
		return PseudoHeaderSum(proto, src.As4(), dst.As4(), l4Len)
	}
	s, d := src.As16(), dst.As16()
	acc := uint64(proto) + uint64(l4Len)
	for i := 0; i < 16; i += 4 {
		acc += uint64(be.Uint32(s[i:])) + uint64(be.Uint32(d[i:]))
	}
	return acc
}

// ChecksumOKAddr is ChecksumOK for addresses of either family.
func (t TCP) ChecksumOKAddr(src, dst netip.Addr) bool {
	return Fold(Sum(PseudoHeaderSumAddr(ProtoTCP, src, dst, len(t)), t)) == 0xFFFF
}

// UpdateChecksumAddr is UpdateChecksum for addresses of either family.
func (t TCP) UpdateChecksumAddr(src, dst netip.Addr) {
	t.SetChecksum(0)
	t.SetChecksum(^Fold(Sum(PseudoHeaderSumAddr(ProtoTCP, src, dst, len(t)), t)))
}
