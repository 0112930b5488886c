package testutil

import "github.com/emunic/emunic/nic/hdr"

// TCPFrame6 returns the frame f describes carried over IPv6 from src to dst
// instead of IPv4 (f's IPv4 addresses, ID and DontFragment are ignored; its
// TTL is the hop limit), with the TCP checksum over the IPv6 pseudo-header.
func TCPFrame6(f hdr.TCPFrameFields, src, dst hdr.IPv6Addr) []byte {
	v4 := TCPFrame(f)
	seg := v4[hdr.EthernetSize+hdr.IPv4MinSize:]
	b := make([]byte, hdr.EthernetSize+hdr.IPv6Size+len(seg))
	eth := hdr.EthernetFields{Dst: f.DstMAC, Src: f.SrcMAC, Type: hdr.EtherTypeIPv6}
	eth.Encode(b)
	hl := f.TTL
	if hl == 0 {
		hl = hdr.IPv6DefaultHopLimit
	}
	ipf := hdr.IPv6Fields{PayloadLen: uint16(len(seg)), NextHeader: hdr.ProtoTCP, HopLimit: hl, Src: src, Dst: dst}
	ip := hdr.IPv6(b[hdr.EthernetSize:])
	ipf.Encode(ip)
	tcp := hdr.TCP(ip[hdr.IPv6Size:])
	copy(tcp, seg)
	tcp.SetChecksum(0)
	tcp.SetChecksum(ip.TransportChecksum(hdr.ProtoTCP, tcp))
	return b
}

// TSOFrame6 is TSOFrame over IPv6: TCPFrame6 with the TCP checksum field
// holding only the pseudo-header's sum.
func TSOFrame6(f hdr.TCPFrameFields, src, dst hdr.IPv6Addr) []byte {
	b := TCPFrame6(f, src, dst)
	ip := hdr.IPv6(b[hdr.EthernetSize:])
	tcp := hdr.TCP(ip[hdr.IPv6Size:])
	tcp.SetChecksum(hdr.Fold(ip.TransportPseudoHeaderSum(hdr.ProtoTCP, len(tcp))))
	return b
}

// ICMPv6PacketTooBigFrame returns an Ethernet/IPv6 frame carrying an
// ICMPv6 Packet Too Big (RFC 4443 §3.2) from src to dst reporting mtu,
// quoting the start of quoted (an IPv6 packet: as much as fits in the
// minimum MTU, as a router quotes), its checksum computed.
func ICMPv6PacketTooBigFrame(srcMAC, dstMAC hdr.MAC, src, dst hdr.IPv6Addr, quoted []byte, mtu uint32) []byte {
	n := min(len(quoted), hdr.IPv6MinMTU-hdr.IPv6Size-hdr.ICMPv6Size)
	const icmpAt = hdr.EthernetSize + hdr.IPv6Size
	b := make([]byte, icmpAt+hdr.ICMPv6Size+n)
	eth := hdr.EthernetFields{Dst: dstMAC, Src: srcMAC, Type: hdr.EtherTypeIPv6}
	eth.Encode(b)
	ipf := hdr.IPv6Fields{PayloadLen: uint16(len(b) - icmpAt), NextHeader: hdr.ProtoICMPv6, HopLimit: 255, Src: src, Dst: dst}
	ip := hdr.IPv6(b[hdr.EthernetSize:])
	ipf.Encode(ip)
	icf := hdr.ICMPv6Fields{Type: hdr.ICMPv6TypePacketTooBig, MTU: mtu}
	icf.Encode(b[icmpAt:])
	copy(b[icmpAt+hdr.ICMPv6Size:], quoted[:n])
	hdr.ICMPv6(b[icmpAt:]).UpdateChecksum(ip)
	return b
}
