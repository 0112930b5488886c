package tcpstack

import "github.com/emunic/emunic/nic/hdr"

// Transmit checksum offload. A driver on a device that fills in checksums
// (TxChecksummer) tells netstack so (CapabilityTXChecksumOffload): its TCP
// and UDP endpoints then leave the transport checksum field zero, and the
// driver marks those frames TxCsum for the device to fill in. Netstack
// still computes the IPv4 header checksum (the device writes it again,
// which costs it 20 bytes of summing) and every ICMP checksum, so frames
// without the flag leave complete.
//
// One case no link layer can repair: a UDP datagram larger than the MTU,
// which netstack fragments after its UDP endpoint left the checksum to the
// device. The device never sees the whole datagram, so the driver does not
// flag the fragments (the device would refuse them) and the datagram
// leaves with checksum 0: "none" over IPv4, which receivers take, but a
// receiver drops it over IPv6, where the checksum is mandatory. Linux
// computes such a checksum in software before fragmenting
// (ip_do_fragment); netstack does not. A host that sends UDP datagrams
// over the MTU on IPv6 through this driver needs a device without
// FeatTxCsum.

// txChecksumNeeded reports whether the Ethernet frame f is one netstack
// left its transport checksum to the device for: TCP or UDP straight
// behind an IPv4 header that is not a fragment's, or behind an IPv6 fixed
// header (netstack adds no extension header to TCP or UDP but a Fragment
// header).
func txChecksumNeeded(f []byte) bool {
	if len(f) < hdr.EthernetSize {
		return false
	}
	l3 := f[hdr.EthernetSize:]
	var proto uint8
	switch hdr.Ethernet(f).Type() {
	case hdr.EtherTypeIPv4:
		ip, err := hdr.ParseIPv4Header(l3)
		if err != nil || ip.IsFragment() {
			return false
		}
		proto = ip.Proto()
	case hdr.EtherTypeIPv6:
		ip, err := hdr.ParseIPv6Header(l3)
		if err != nil {
			return false
		}
		proto = ip.NextHeader()
	default:
		return false
	}
	return proto == hdr.ProtoTCP || proto == hdr.ProtoUDP
}
