package testutil

import "github.com/emunic/emunic/nic/hdr"

// ICMPFragNeededFrame returns an Ethernet/IPv4 frame carrying an ICMP
// "fragmentation needed" (RFC 1191) from src to dst reporting a next-hop MTU
// of mtu, quoting the start of quoted (an IPv4 datagram: its header and the
// first 8 bytes after it, as a router quotes), with every checksum
// computed.
func ICMPFragNeededFrame(srcMAC, dstMAC hdr.MAC, src, dst hdr.IPv4Addr, quoted []byte, mtu uint16) []byte {
	q := hdr.IPv4(quoted)
	n := min(len(quoted), q.HeaderLen()+hdr.ICMPQuotedTransportMin)
	const ipAt, icmpAt = hdr.EthernetSize, hdr.EthernetSize + hdr.IPv4MinSize
	b := make([]byte, icmpAt+hdr.ICMPSize+n)
	eth := hdr.EthernetFields{Dst: dstMAC, Src: srcMAC, Type: hdr.EtherTypeIPv4}
	eth.Encode(b)
	ipf := hdr.IPv4Fields{TotalLen: uint16(len(b) - ipAt), TTL: hdr.IPv4DefaultTTL, Proto: hdr.ProtoICMP, Src: src, Dst: dst}
	ip := hdr.IPv4(b[ipAt:icmpAt])
	ipf.Encode(ip)
	ip.UpdateChecksum()
	icf := hdr.ICMPFields{Type: hdr.ICMPTypeDestUnreach, Code: hdr.ICMPCodeFragNeeded, NextHopMTU: mtu}
	icf.Encode(b[icmpAt:])
	copy(b[icmpAt+hdr.ICMPSize:], quoted[:n])
	hdr.ICMP(b[icmpAt:]).UpdateChecksum()
	return b
}
