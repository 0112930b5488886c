package nic

import (
	"encoding/binary"

	"gvisor.dev/gvisor/pkg/tcpip/checksum"
)

// Link and network header geometry the classifier needs. The device parses
// only what it must to validate a frame and find its flow; everything else is
// the host stack's business.
const (
	EthHeaderLen   = 14
	EthOffDst      = 0
	EthOffSrc      = 6
	EthOffType     = 12
	EtherTypeIPv4  = 0x0800
	EtherTypeARP   = 0x0806
	IPv4MinHdrLen  = 20
	IPv4OffVerIHL  = 0
	IPv4OffTotLen  = 2
	IPv4OffFlagFrg = 6
	IPv4OffProto   = 9
	IPv4OffCsum    = 10
	IPv4OffSrc     = 12
	IPv4OffDst     = 16
	ProtoTCP       = 6
	ProtoUDP       = 17
	TCPMinHdrLen   = 20
	UDPHdrLen      = 8
	arpLen         = 28
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
}

// classify validates a received frame the way a NIC's receive parser does:
// length, destination MAC, EtherType, IPv4 header checksum and, for
// unfragmented TCP and UDP, the transport checksum (receive checksum
// offload: the host stack is told not to check again). Frames that fail are
// dropped and counted by the caller.
func classify(f []byte, mac [6]byte, maxFrame int, pf *parsedFrame) rxVerdict {
	if len(f) < EthHeaderLen {
		return rxDropShort
	}
	if len(f) > maxFrame {
		return rxDropOversize
	}
	dst := f[EthOffDst : EthOffDst+6]
	if dst[0]&1 == 0 && string(dst) != string(mac[:]) { // unicast, not ours
		return rxDropNotForUs
	}
	pf.etherType = binary.BigEndian.Uint16(f[EthOffType:])
	switch pf.etherType {
	case EtherTypeARP:
		if len(f) < EthHeaderLen+arpLen {
			return rxDropShort
		}
		return rxLegacy
	case EtherTypeIPv4:
	default:
		return rxDropEtherType
	}
	ip := f[EthHeaderLen:]
	if len(ip) < IPv4MinHdrLen || ip[IPv4OffVerIHL]>>4 != 4 {
		return rxDropShort
	}
	ihl := int(ip[IPv4OffVerIHL]&0xf) * 4
	tot := int(binary.BigEndian.Uint16(ip[IPv4OffTotLen:]))
	if ihl < IPv4MinHdrLen || tot < ihl || tot > len(ip) {
		return rxDropShort
	}
	if checksum.Checksum(ip[:ihl], 0) != 0xffff {
		return rxDropChecksum
	}
	pf.ipOff = EthHeaderLen
	pf.l4Off = EthHeaderLen + ihl
	pf.l4Len = tot - ihl
	pf.proto = ip[IPv4OffProto]
	frag := binary.BigEndian.Uint16(ip[IPv4OffFlagFrg:])
	pf.fragment = frag&0x3fff != 0 // MF set or a non-zero offset
	if pf.fragment {
		return rxLegacy // reassembly is the host's job; it checks the checksum
	}
	l4 := f[pf.l4Off : pf.l4Off+pf.l4Len]
	switch pf.proto {
	case ProtoTCP:
		if len(l4) < TCPMinHdrLen {
			return rxDropShort
		}
		if transportChecksum(ip[IPv4OffSrc:IPv4OffSrc+4], ip[IPv4OffDst:IPv4OffDst+4], ProtoTCP, l4) != 0xffff {
			return rxDropChecksum
		}
	case ProtoUDP:
		if len(l4) < UDPHdrLen {
			return rxDropShort
		}
		// A zero UDP checksum means "none" in IPv4.
		if binary.BigEndian.Uint16(l4[6:]) != 0 &&
			transportChecksum(ip[IPv4OffSrc:IPv4OffSrc+4], ip[IPv4OffDst:IPv4OffDst+4], ProtoUDP, l4) != 0xffff {
			return rxDropChecksum
		}
	}
	return rxLegacy
}

// transportChecksum folds the IPv4 pseudo-header and the segment; a valid
// segment sums to 0xffff.
func transportChecksum(src, dst []byte, proto uint8, seg []byte) uint16 {
	var ph [12]byte
	copy(ph[0:4], src)
	copy(ph[4:8], dst)
	ph[9] = proto
	binary.BigEndian.PutUint16(ph[10:], uint16(len(seg)))
	return checksum.Checksum(seg, checksum.Checksum(ph[:], 0))
}
