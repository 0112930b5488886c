package nic

import (
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// Header geometry the device's callers use. The wire formats themselves
// (offsets, parsers, checksums) are package hdr's, shared with the offload
// engine and the host driver. The device parses only what it must to
// validate a frame and find its flow; everything else is the host stack's
// business.
const (
	EthHeaderLen  = hdr.EthernetSize
	EtherTypeIPv4 = hdr.EtherTypeIPv4
	EtherTypeARP  = hdr.EtherTypeARP
	EtherTypeIPv6 = hdr.EtherTypeIPv6
	IPv4MinHdrLen = hdr.IPv4MinSize
	ProtoTCP      = hdr.ProtoTCP
	ProtoUDP      = hdr.ProtoUDP
)

// rxVerdict is the classifier's outcome for one received frame.
type rxVerdict uint8

const (
	rxLegacy rxVerdict = iota // hand to the host stack through a legacy buffer
	rxDropShort
	rxDropChecksum
	rxDropEtherType
	rxDropOversize
	rxDropNotForUs
	rxDropVLAN    // the tag layer (vlan.go): another VLAN's frame
	rxDropBadVLAN // the tag layer: VLAN ID 0 or 4095, truncated or double tagged
	rxDropIPv6ExtChain
	rxDropIPv6RoutingType0
	rxDropIPv6Fragment
	rxDropIPv6Jumbogram
)

// rxDropStat is the stat block counter of each drop verdict.
var rxDropStat = [...]rings.StatID{
	rxDropShort:            rings.StatRxDropShort,
	rxDropChecksum:         rings.StatRxDropBadChecksum,
	rxDropEtherType:        rings.StatRxDropEtherType,
	rxDropOversize:         rings.StatRxDropOversize,
	rxDropNotForUs:         rings.StatRxDropNotForUs,
	rxDropVLAN:             rings.StatRxDropVLAN,
	rxDropBadVLAN:          rings.StatRxDropBadVLAN,
	rxDropIPv6ExtChain:     rings.StatRxDropIPv6ExtChain,
	rxDropIPv6RoutingType0: rings.StatRxDropIPv6RoutingType0,
	rxDropIPv6Fragment:     rings.StatRxDropIPv6Fragment,
	rxDropIPv6Jumbogram:    rings.StatRxDropIPv6Jumbogram,
}

// IPv6Drop names a counter of IPv6 bad input the receive parser dropped:
// each is a stat block counter (Stat), published in the counter area like
// every other, so a host reads them by StatID in process or not.
type IPv6Drop uint8

const (
	IPv6DropExtChain     IPv6Drop = iota // extension-header chain malformed, too long or looping
	IPv6DropRoutingType0                 // routing header type 0 (RFC 5095)
	IPv6DropFragment                     // atomic fragment, or one no valid datagram holds (RFC 8021, RFC 8200 §4.5)
	IPv6DropJumbogram                    // hop-by-hop jumbo payload option (RFC 2675)
	NumIPv6Drops
)

// Stat is the drop's stat block counter.
func (id IPv6Drop) Stat() rings.StatID { return rxDropStat[rxDropIPv6ExtChain+rxVerdict(id)] }

func (id IPv6Drop) String() string {
	if id < NumIPv6Drops {
		return id.Stat().String()
	}
	return "rx_drop_ipv6_unknown"
}

// IPv6DropCount reads one IPv6 drop counter.
func (d *Device) IPv6DropCount(id IPv6Drop) uint64 { return d.stats[id.Stat()].Load() }

// countDrop counts a frame classify refused.
func (d *Device) countDrop(v rxVerdict) { d.count(rxDropStat[v]) }

// parsedFrame locates the headers of a validated IPv4 or IPv6 frame.
type parsedFrame struct {
	etherType uint16
	ipOff     int // start of the IP header
	l4Off     int // start of the transport header (past any IPv6 extension headers)
	l4Len     int // transport header + payload length (from the IP length field)
	proto     uint8
	fragment  bool
	l4CsumOK  bool // the TCP or UDP checksum was verified (not just absent)
}

// tcp4 returns a classified frame's IPv4 header and TCP segment, and true,
// when it is an unfragmented TCP/IPv4 packet: one the offload engine may
// own.
func (pf *parsedFrame) tcp4(f []byte) (ip, seg []byte, ok bool) {
	if pf.proto != ProtoTCP || pf.fragment || pf.etherType != EtherTypeIPv4 {
		return nil, nil, false
	}
	return f[pf.ipOff:pf.l4Off], f[pf.l4Off : pf.l4Off+pf.l4Len], true
}

// tcpSegment is tcp4 past the network layer, for either family: it reads
// the segment's connection tuple, as the receiver (this device) sees it,
// into *t and returns the TCP segment (behind any IPv6 extension headers). The engine takes these, never the network
// header.
func (pf *parsedFrame) tcpSegment(f []byte, t *hdr.Tuple) (seg []byte, ok bool) {
	if pf.etherType == EtherTypeIPv6 {
		if pf.proto != ProtoTCP || pf.fragment {
			return nil, false
		}
		seg = f[pf.l4Off : pf.l4Off+pf.l4Len]
		hdr.IPv6(f[pf.ipOff:]).ReadRxTuple(t, hdr.TCP(seg))
		return seg, true
	}
	ip, seg, ok := pf.tcp4(f)
	if !ok {
		return nil, false
	}
	hdr.IPv4(ip).ReadRxTuple(t, hdr.TCP(seg))
	return seg, true
}

// engineFlags is what classify established about a frame, for the offload
// engine: a TCP segment whose checksum it verified is not summed again.
func (pf *parsedFrame) engineFlags() delegation.RxFlags {
	if pf.l4CsumOK && pf.proto == hdr.ProtoTCP {
		return delegation.RxTCPChecksumOK
	}
	return 0
}

// classify validates a received frame the way a NIC's receive parser does:
// length, destination MAC, EtherType, IPv4 header checksum and, for
// unfragmented TCP and UDP, the transport checksum (receive checksum
// offload: the host stack is told not to check again, and so is the offload
// engine, by engineFlags). Frames that fail are dropped and counted by the
// caller.
// l4Verified says the port vouched for the transport checksum.
func classify(f []byte, mac [6]byte, maxFrame int, pf *parsedFrame, l4Verified bool) rxVerdict {
	pf.l4CsumOK = false
	if len(f) < hdr.EthernetSize {
		return rxDropShort
	}
	if len(f) > maxFrame {
		return rxDropOversize
	}
	eth := hdr.Ethernet(f)
	if !eth.DstGroup() && eth.Dst() != mac { // unicast, not ours
		return rxDropNotForUs
	}
	pf.etherType = eth.Type()
	switch pf.etherType {
	case hdr.EtherTypeARP:
		if _, err := hdr.ParseARP(eth.Payload()); err != nil {
			return rxDropShort
		}
		return rxLegacy
	case hdr.EtherTypeIPv4:
	case hdr.EtherTypeIPv6:
		return classify6(eth.Payload(), pf, l4Verified)
	default:
		return rxDropEtherType
	}
	// hdr tells a bad version, IHL and total length apart; the device
	// counts them all as short frames (one counter).
	ip, err := hdr.ParseIPv4(eth.Payload())
	if err != nil {
		return rxDropShort
	}
	if !ip.ChecksumOK() {
		return rxDropChecksum
	}
	ihl := ip.HeaderLen()
	pf.ipOff = hdr.EthernetSize
	pf.l4Off = hdr.EthernetSize + ihl
	pf.l4Len = len(ip) - ihl
	pf.proto = ip.Proto()
	pf.fragment = ip.IsFragment()
	if pf.fragment {
		return rxLegacy // reassembly is the host's job; it checks the checksum
	}
	l4 := ip.Payload()
	switch pf.proto {
	case hdr.ProtoTCP:
		if len(l4) < hdr.TCPMinSize {
			return rxDropShort
		}
		if !l4Verified && !hdr.TCP(l4).ChecksumOK(ip.Src(), ip.Dst()) {
			return rxDropChecksum
		}
		pf.l4CsumOK = true
	case hdr.ProtoUDP:
		// Only the header must be there: the UDP length field is the
		// host's to check.
		if len(l4) < hdr.UDPSize {
			return rxDropShort
		}
		u := hdr.UDP(l4)
		// A zero UDP checksum means "none" in IPv4.
		if u.Checksum() != 0 {
			if !l4Verified && !u.ChecksumOK(ip.Src(), ip.Dst()) {
				return rxDropChecksum
			}
			pf.l4CsumOK = true
		}
	}
	return rxLegacy
}

// classify6 is classify's IPv6 half: the fixed header, the extension-header
// chain walked to the transport header (hdr.WalkIPv6 bounds it and refuses
// what RFCs 5095, 8021, 8200 and 2675 say a receiver must not accept, each
// with its own counter), and the TCP or UDP checksum over the IPv6
// pseudo-header. IPv6 has no header checksum. Frames that pass go to a
// delegated flow's connection, or up the legacy path.
func classify6(b []byte, pf *parsedFrame, l4Verified bool) rxVerdict {
	ip, err := hdr.ParseIPv6(b)
	if err != nil {
		return rxDropShort
	}
	var ch hdr.IPv6Chain
	switch hdr.WalkIPv6(ip, &ch) {
	case nil:
	case hdr.ErrRoutingType0:
		return rxDropIPv6RoutingType0
	case hdr.ErrAtomicFragment, hdr.ErrFragment:
		return rxDropIPv6Fragment
	case hdr.ErrJumbogram:
		return rxDropIPv6Jumbogram
	case hdr.ErrShort:
		return rxDropShort
	default:
		return rxDropIPv6ExtChain
	}
	pf.ipOff = hdr.EthernetSize
	pf.l4Off = hdr.EthernetSize + ch.L4Off
	pf.l4Len = len(ip) - ch.L4Off
	pf.proto = ch.Proto
	pf.fragment = ch.Fragment
	if pf.fragment {
		return rxLegacy // the host reassembles, and checks overlaps (RFC 5722)
	}
	l4 := ip[ch.L4Off:]
	switch pf.proto {
	case hdr.ProtoTCP:
		if len(l4) < hdr.TCPMinSize {
			return rxDropShort
		}
	case hdr.ProtoUDP:
		if len(l4) < hdr.UDPSize {
			return rxDropShort
		}
		// Unlike IPv4, a zero UDP checksum is not "none" over IPv6
		// (RFC 8200 §8.1): it is a wrong one.
		if hdr.UDP(l4).Checksum() == 0 {
			return rxDropChecksum
		}
	default:
		return rxLegacy
	}
	if !l4Verified && !ip.TransportChecksumOK(pf.proto, l4) {
		return rxDropChecksum
	}
	pf.l4CsumOK = true
	return rxLegacy
}
