package testutil

import "github.com/emunic/emunic/nic/hdr"

// Frames for tests, built with nic/hdr's encoders: the header layouts
// live in one place, and a test says which fields it sets rather than at
// which offsets.

// TCPFrame returns the Ethernet/IPv4/TCP frame f describes, in a buffer of
// its own, with both checksums computed.
func TCPFrame(f hdr.TCPFrameFields) []byte {
	b := make([]byte, f.Len())
	f.Encode(b)
	return b
}

// TCPPacket returns the IPv4 header and the TCP segment (options and
// payload included) of the frame f describes: what the offload engine's
// input takes once the device has stripped the Ethernet header. Both are
// slices of one buffer, each with no room past its end, so a test that
// appends to either (Ethernet padding) copies rather than overwrites.
func TCPPacket(f hdr.TCPFrameFields) (ip hdr.IPv4, tcp hdr.TCP) {
	b := TCPFrame(f)
	const ipEnd = hdr.EthernetSize + hdr.IPv4MinSize
	return hdr.IPv4(b[hdr.EthernetSize:ipEnd:ipEnd]), hdr.TCP(b[ipEnd:])
}

// TSOFrame returns f as the kernel hands a TCP super-frame to a TAP with
// segmentation offload: one frame of any length, the IPv4 total length
// that of the whole, and the TCP checksum field holding only the
// pseudo-header's sum, for the segmenter to finish per segment.
func TSOFrame(f hdr.TCPFrameFields) []byte {
	b := TCPFrame(f)
	tcp := hdr.TCP(b[hdr.EthernetSize+hdr.IPv4MinSize:])
	tcp.SetChecksum(hdr.Fold(hdr.PseudoHeaderSum(hdr.ProtoTCP, f.Src, f.Dst, len(tcp))))
	return b
}

// UDPFrameFields is a whole Ethernet/IPv4/UDP frame to build (TTL
// hdr.IPv4DefaultTTL, IP ID 0, fragmenting allowed).
type UDPFrameFields struct {
	SrcMAC, DstMAC   hdr.MAC
	Src, Dst         hdr.IPv4Addr
	SrcPort, DstPort uint16
	// NoChecksum leaves the UDP checksum 0, which IPv4 allows: "none".
	NoChecksum bool
	Payload    []byte
}

// UDPFrame returns the frame f describes, in a buffer of its own, with
// the IP checksum (and, unless NoChecksum, the UDP checksum) computed.
func UDPFrame(f UDPFrameFields) []byte {
	const l4 = hdr.EthernetSize + hdr.IPv4MinSize
	b := make([]byte, l4+hdr.UDPSize+len(f.Payload))
	eth := hdr.EthernetFields{Dst: f.DstMAC, Src: f.SrcMAC, Type: hdr.EtherTypeIPv4}
	eth.Encode(b)
	ipf := hdr.IPv4Fields{TotalLen: uint16(len(b) - hdr.EthernetSize), TTL: hdr.IPv4DefaultTTL, Proto: hdr.ProtoUDP, Src: f.Src, Dst: f.Dst}
	ip := hdr.IPv4(b[hdr.EthernetSize:l4])
	ipf.Encode(ip)
	ip.UpdateChecksum()
	udpf := hdr.UDPFields{SrcPort: f.SrcPort, DstPort: f.DstPort, Length: uint16(len(b) - l4)}
	udp := hdr.UDP(b[l4:])
	udpf.Encode(udp)
	copy(udp[hdr.UDPSize:], f.Payload)
	if !f.NoChecksum {
		udp.UpdateChecksum(f.Src, f.Dst)
	}
	return b
}
