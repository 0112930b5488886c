package nic

import "github.com/emunic/emunic/nic/hdr"

// Transmit checksum offload (docs/rings.md "Transmit checksum offload"). A
// legacy descriptor with TxCsum asks the device to fill in the IPv4 header
// checksum and the TCP or UDP checksum of its frame, as a NIC with
// per-descriptor IPCS/TCPCS/UDPCS bits does. The descriptor has no room
// for a csum_start/csum_offset pair, so the device parses the frame to find
// the transport header: Ethernet, at most one 802.1Q tag, IPv4 or IPv6
// (the receive parser's bounded extension-header walk), TCP or UDP.
//
// The frame in host memory is never written: a NIC reads a transmit buffer
// and the host owns it (it may still be on a retransmission queue). The
// checksums go into a copy in the unit's transmit scratch buffer, the one
// the VLAN layer inserts tags into, so a tagged frame is copied once.

// txScratch is the unit's buffer for a frame it changes on its way out: a
// tag inserted, checksums filled in. The port copies what it is given, so
// one buffer serves every frame (unit goroutine only).
func (d *Device) txScratch() []byte {
	if d.txTagBuf == nil {
		d.txTagBuf = make([]byte, d.maxFrame+hdr.VLANTagSize)
	}
	return d.txTagBuf
}

// txChecksum returns wire with its checksums filled in, in the scratch
// buffer (wire is copied there unless the tag layer already put it there),
// or nil when the device cannot place them (counted by the caller).
func (d *Device) txChecksum(wire []byte) []byte {
	s := d.txScratch()
	if len(wire) == 0 || len(wire) > len(s) {
		return nil
	}
	if &wire[0] != &s[0] {
		wire = s[:copy(s, wire)]
	}
	if !fillChecksums(wire) {
		return nil
	}
	return wire
}

// fillChecksums writes the IPv4 header checksum and the TCP or UDP
// checksum of the Ethernet frame f in place, and reports whether it could:
// false for a frame that is not IPv4 or IPv6 carrying TCP or UDP, an IP
// fragment, a header cut short, lengths that disagree, or an IPv6 Routing
// header with segments left. f is unchanged when it returns false.
func fillChecksums(f []byte) bool {
	e, err := hdr.ParseEthernet(f)
	if err != nil {
		return false
	}
	typ, l3 := e.Type(), e.Payload()
	if hdr.IsVLANTPID(typ) {
		v, err := hdr.ParseEthernetVLAN(f)
		if err != nil || hdr.IsVLANTPID(v.Type()) {
			return false // truncated, or a second tag
		}
		typ, l3 = v.Type(), v.Payload()
	}
	switch typ {
	case hdr.EtherTypeIPv4:
		return fillIPv4(l3)
	case hdr.EtherTypeIPv6:
		return fillIPv6(l3)
	}
	return false
}

func fillIPv4(b []byte) bool {
	ip, err := hdr.ParseIPv4(b)
	if err != nil || ip.IsFragment() {
		return false
	}
	seg := ip.Payload()
	if !transportFits(ip.Proto(), seg) {
		return false
	}
	ip.UpdateChecksum()
	setTransportChecksum(ip.Proto(), seg, hdr.PseudoHeaderSum(ip.Proto(), ip.Src(), ip.Dst(), len(seg)))
	return true
}

func fillIPv6(b []byte) bool {
	ip, err := hdr.ParseIPv6(b)
	if err != nil {
		return false
	}
	var c hdr.IPv6Chain
	if hdr.WalkIPv6(ip, &c) != nil || c.Fragment || c.RoutingLeft {
		return false
	}
	seg := ip[c.L4Off:]
	if !transportFits(c.Proto, seg) {
		return false
	}
	setTransportChecksum(c.Proto, seg, ip.TransportPseudoHeaderSum(c.Proto, len(seg)))
	return true
}

// transportFits reports whether seg, the whole IP payload, is a TCP
// segment or UDP datagram whose own lengths agree with it.
func transportFits(proto uint8, seg []byte) bool {
	switch proto {
	case hdr.ProtoTCP:
		if len(seg) < hdr.TCPMinSize {
			return false
		}
		n := hdr.TCP(seg).HeaderLen()
		return n >= hdr.TCPMinSize && n <= len(seg)
	case hdr.ProtoUDP:
		return len(seg) >= hdr.UDPSize && int(hdr.UDP(seg).Length()) == len(seg)
	}
	return false
}

// setTransportChecksum writes the checksum of the TCP or UDP segment seg,
// whose pseudo-header accumulator is pseudo, over whatever the host left in
// its checksum field. A UDP checksum of zero goes out as 0xFFFF, since zero
// on the wire means "no checksum" (RFC 768, RFC 8200 §8.1).
func setTransportChecksum(proto uint8, seg []byte, pseudo uint64) {
	off := hdr.TCPOffChecksum
	if proto == hdr.ProtoUDP {
		off = hdr.UDPOffChecksum
	}
	seg[off], seg[off+1] = 0, 0
	c := ^hdr.Fold(hdr.Sum(pseudo, seg))
	if c == 0 && proto == hdr.ProtoUDP {
		c = 0xFFFF
	}
	seg[off], seg[off+1] = byte(c>>8), byte(c)
}
