package hdr

import "net/netip"

// IPv6 fixed header (RFC 8200 §3):
//
//	0x00 u32 version (top 4 bits, 6) | traffic class (8) | flow label (20)
//	0x04 u16 payload length (bytes after the fixed header, extension headers included)
//	0x06 u8  next header (the first extension header's type, or the transport protocol)
//	0x07 u8  hop limit
//	0x08 [16] source address
//	0x18 [16] destination address
//	0x28      extension headers, then the transport segment
const (
	IPv6Size = 40

	IPv6OffVerTCFlow  = 0x00
	IPv6OffPayloadLen = 0x04
	IPv6OffNextHeader = 0x06
	IPv6OffHopLimit   = 0x07
	IPv6OffSrc        = 0x08
	IPv6OffDst        = 0x18

	IPv6Version         = 6
	IPv6DefaultHopLimit = 64
	// IPv6MinMTU is the smallest link MTU IPv6 allows (RFC 8200 §5): no
	// path MTU estimate goes below it, whatever a Packet Too Big says.
	IPv6MinMTU       = 1280
	ipv6VersionShift = 28
	ipv6TCShift      = 20
	ipv6FlowMask     = 0xFFFFF
)

// IPv6Addr is an IPv6 address in network order. An alias, like IPv4Addr.
type IPv6Addr = [16]byte

// IPv6 is a view of an IPv6 fixed header, and of the packet when it came
// from ParseIPv6.
type IPv6 []byte

// ParseIPv6 checks that b starts with a whole IPv6 packet: a version 6
// fixed header and a payload length that fits in b. It returns the packet,
// b[:IPv6Size+PayloadLen] (an Ethernet frame may be padded past it). A
// payload length of zero with a Jumbo Payload option (RFC 2675) is not
// taken: a jumbogram cannot cross an Ethernet link, and WalkIPv6 refuses the
// option itself.
func ParseIPv6(b []byte) (IPv6, error) {
	h, err := ParseIPv6Header(b)
	if err != nil {
		return nil, err
	}
	n := IPv6Size + int(h.PayloadLen())
	if n > len(b) {
		return nil, ErrShort
	}
	return IPv6(b[:n]), nil
}

// ParseIPv6Header checks that b starts with a whole version 6 fixed header
// and returns it, b[:IPv6Size].
func ParseIPv6Header(b []byte) (IPv6, error) {
	if len(b) < IPv6Size {
		return nil, ErrShort
	}
	h := IPv6(b)
	if h.Version() != IPv6Version {
		return nil, ErrVersion
	}
	return h[:IPv6Size], nil
}

func (h IPv6) Version() uint8 { return h[IPv6OffVerTCFlow] >> 4 }
func (h IPv6) TrafficClass() uint8 {
	return uint8(be.Uint32(h[IPv6OffVerTCFlow:]) >> ipv6TCShift)
}
func (h IPv6) FlowLabel() uint32  { return be.Uint32(h[IPv6OffVerTCFlow:]) & ipv6FlowMask }
func (h IPv6) PayloadLen() uint16 { return be.Uint16(h[IPv6OffPayloadLen:]) }
func (h IPv6) NextHeader() uint8  { return h[IPv6OffNextHeader] }
func (h IPv6) HopLimit() uint8    { return h[IPv6OffHopLimit] }
func (h IPv6) Src() IPv6Addr      { return IPv6Addr(h[IPv6OffSrc : IPv6OffSrc+16]) }
func (h IPv6) Dst() IPv6Addr      { return IPv6Addr(h[IPv6OffDst : IPv6OffDst+16]) }

// SetVersionTCFlow writes the version (6), the traffic class and the flow
// label (its low 20 bits).
func (h IPv6) SetVersionTCFlow(tc uint8, flow uint32) {
	be.PutUint32(h[IPv6OffVerTCFlow:], IPv6Version<<ipv6VersionShift|uint32(tc)<<ipv6TCShift|flow&ipv6FlowMask)
}
func (h IPv6) SetPayloadLen(n uint16) { be.PutUint16(h[IPv6OffPayloadLen:], n) }
func (h IPv6) SetNextHeader(v uint8)  { h[IPv6OffNextHeader] = v }
func (h IPv6) SetHopLimit(v uint8)    { h[IPv6OffHopLimit] = v }
func (h IPv6) SetSrc(a IPv6Addr)      { copy(h[IPv6OffSrc:IPv6OffSrc+16], a[:]) }
func (h IPv6) SetDst(a IPv6Addr)      { copy(h[IPv6OffDst:IPv6OffDst+16], a[:]) }

// Payload is everything behind the fixed header, extension headers
// included, to the payload length. The view must hold the whole packet
// (ParseIPv6).
func (h IPv6) Payload() []byte { return h[IPv6Size : IPv6Size+int(h.PayloadLen())] }

// TransportPseudoHeaderSum is the RFC 8200 §8.1 pseudo-header accumulator
// of an upper-layer segment of l4Len bytes with protocol proto carried in
// this packet: source, destination, 32-bit length, three zero bytes, next
// header. proto is the transport's, not the fixed header's Next Header
// (extension headers may sit between). Summed straight from the header's
// bytes: the addresses are contiguous and 16-bit aligned.
func (h IPv6) TransportPseudoHeaderSum(proto uint8, l4Len int) uint64 {
	return Sum(uint64(proto)+uint64(l4Len), h[IPv6OffSrc:IPv6OffDst+16])
}

// TransportChecksumOK reports whether the TCP, UDP or ICMPv6 segment seg,
// whose protocol is proto, carries the right checksum for this packet.
func (h IPv6) TransportChecksumOK(proto uint8, seg []byte) bool {
	return Fold(Sum(h.TransportPseudoHeaderSum(proto, len(seg)), seg)) == 0xFFFF
}

// TransportChecksum is the checksum field value for seg (its checksum field
// zero) with protocol proto in this packet.
func (h IPv6) TransportChecksum(proto uint8, seg []byte) uint16 {
	return ^Fold(Sum(h.TransportPseudoHeaderSum(proto, len(seg)), seg))
}

var _ Network = IPv6(nil)

// SourceAddress is Src as a netip.Addr.
func (h IPv6) SourceAddress() netip.Addr { return netip.AddrFrom16(h.Src()) }

// DestinationAddress is Dst as a netip.Addr.
func (h IPv6) DestinationAddress() netip.Addr { return netip.AddrFrom16(h.Dst()) }

// TransportProtocol is NextHeader: the transport protocol when no extension
// header follows the fixed one (WalkIPv6 finds it otherwise).
func (h IPv6) TransportProtocol() uint8 { return h.NextHeader() }

// PseudoHeaderSum is TransportPseudoHeaderSum for the fixed header's Next
// Header.
func (h IPv6) PseudoHeaderSum(l4Len int) uint64 {
	return h.TransportPseudoHeaderSum(h.NextHeader(), l4Len)
}

// ReadRxTuple fills *k with the tuple of the connection that receives the
// TCP segment t carried in h, as IPv4.ReadRxTuple does.
func (h IPv6) ReadRxTuple(k *Tuple, t TCP) {
	k.LocalIP, k.RemoteIP = netip.AddrFrom16(h.Dst()), netip.AddrFrom16(h.Src())
	k.LocalPort, k.RemotePort = t.DstPort(), t.SrcPort()
}

// RxTuple is ReadRxTuple returning the tuple.
func (h IPv6) RxTuple(t TCP) Tuple {
	var k Tuple
	h.ReadRxTuple(&k, t)
	return k
}

// TxTuple is the tuple of the connection that sends the TCP segment t
// carried in h.
func (h IPv6) TxTuple(t TCP) Tuple {
	return Tuple{
		LocalIP: netip.AddrFrom16(h.Src()), RemoteIP: netip.AddrFrom16(h.Dst()),
		LocalPort: t.SrcPort(), RemotePort: t.DstPort(),
	}
}

// IPv6Fields is the fields of an IPv6 fixed header; extension headers are
// the caller's to write behind it.
type IPv6Fields struct {
	TrafficClass uint8
	FlowLabel    uint32 // 20 bits
	PayloadLen   uint16
	NextHeader   uint8
	HopLimit     uint8
	Src, Dst     IPv6Addr
}

// Encode writes the fixed header at the start of b and returns its length.
func (f *IPv6Fields) Encode(b []byte) int {
	h := IPv6(b[:IPv6Size])
	h.SetVersionTCFlow(f.TrafficClass, f.FlowLabel)
	h.SetPayloadLen(f.PayloadLen)
	h.SetNextHeader(f.NextHeader)
	h.SetHopLimit(f.HopLimit)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
	return IPv6Size
}

// Decode reads the fixed header at the start of b, validated as
// ParseIPv6Header does, and returns its length.
func (f *IPv6Fields) Decode(b []byte) (int, error) {
	h, err := ParseIPv6Header(b)
	if err != nil {
		return 0, err
	}
	*f = IPv6Fields{TrafficClass: h.TrafficClass(), FlowLabel: h.FlowLabel(), PayloadLen: h.PayloadLen(),
		NextHeader: h.NextHeader(), HopLimit: h.HopLimit(), Src: h.Src(), Dst: h.Dst()}
	return IPv6Size, nil
}
