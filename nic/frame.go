package nic

import (
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic/hdr"
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
)

// parsedFrame locates the headers of a validated IPv4 frame.
type parsedFrame struct {
	etherType uint16
	ipOff     int // start of the IPv4 header
	l4Off     int // start of the transport header
	l4Len     int // transport header + payload length (from the IPv4 total length)
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

// tcpSegment is tcp4 past the network layer: it reads the segment's
// connection tuple, as the receiver (this device) sees it, into *t and
// returns the TCP segment. The engine takes these, never the network
// header.
func (pf *parsedFrame) tcpSegment(f []byte, t *hdr.Tuple) (seg []byte, ok bool) {
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
