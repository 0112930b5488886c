// Package hdr is the wire formats the emulated NIC and its host driver both
// parse and build: Ethernet II, ARP (Ethernet/IPv4), IPv4, IPv6 (with its
// extension-header chain), TCP (with its options) and UDP, plus the
// Internet checksum (RFC 1071) and the IPv4 and IPv6 pseudo-headers.
//
// Each header is an accessor type over the frame's own bytes
// (hdr.IPv4(b).TTL()), in the manner of gVisor's pkg/tcpip/header, with the
// field offsets exported as named constants (IPv4OffTTL) so that a reader
// can check them against the RFC's diagram. A view does no checking of its
// own: construct it with its ParseXxx function, which rejects every buffer
// too short for what the header's length fields announce, and the
// accessors cannot then read outside it. Each header also has a fields
// struct (IPv4Fields, ...) whose Encode writes a header and whose Decode
// parses one, for code that builds frames or wants a copy.
//
// Nothing here allocates, and nothing imports the rest of emunic or gVisor:
// the device side (nic, delegation) must not depend on a host stack for its
// wire formats, and the host side uses the same definitions, so the two
// cannot drift apart.
//
// All multi-byte fields are big-endian (network order).
package hdr

// Error is a reason a Parse function refused a buffer. Distinct reasons let
// a receiver keep a counter for each, as a NIC's parser does.
type Error uint8

const (
	// ErrShort: the buffer ends before the fixed header does, or before the
	// end a length field (IPv4 Total Length, UDP Length) announces.
	ErrShort Error = iota + 1
	// ErrVersion: an IP header whose version field is not its family's (4
	// for IPv4, 6 for IPv6).
	ErrVersion
	// ErrHeaderLen: a header length field (IPv4 IHL, TCP Data Offset) below
	// the minimum header, or past the end of the buffer.
	ErrHeaderLen
	// ErrTotalLen: a total length field (IPv4 Total Length, UDP Length)
	// smaller than the header it covers.
	ErrTotalLen
	// ErrOption: a TCP option whose length byte is missing, below 2, or
	// runs past the end of the options.
	ErrOption
	// ErrNotTCP: a frame that parsed but is not an unfragmented IPv4 TCP
	// segment (another EtherType, another protocol, or a fragment).
	ErrNotTCP
	// ErrExtChain: an IPv6 extension-header chain that is malformed (an
	// option running past its header), longer than IPv6MaxExtHeaders or
	// IPv6MaxChainLen, or that repeats a header (a loop: RFC 8200 §4.1
	// allows each once, Destination Options twice, Hop-by-Hop first only).
	ErrExtChain
	// ErrRoutingType0: an IPv6 Routing header of type 0, deprecated by RFC
	// 5095 because it turns any host into an amplifier.
	ErrRoutingType0
	// ErrAtomicFragment: an IPv6 Fragment header for offset 0 with no more
	// fragments (RFC 6946, RFC 8021: nothing should send one).
	ErrAtomicFragment
	// ErrFragment: an IPv6 fragment that cannot be part of a valid
	// datagram: a non-final fragment whose length is not a multiple of 8, or
	// one that ends past 65,535 bytes (RFC 8200 §4.5).
	ErrFragment
	// ErrJumbogram: a Hop-by-Hop Jumbo Payload option (RFC 2675), which an
	// Ethernet link cannot carry.
	ErrJumbogram
)

func (e Error) Error() string {
	switch e {
	case ErrShort:
		return "hdr: truncated header"
	case ErrVersion:
		return "hdr: wrong IP version"
	case ErrHeaderLen:
		return "hdr: bad header length"
	case ErrTotalLen:
		return "hdr: length field shorter than the header"
	case ErrOption:
		return "hdr: malformed TCP option"
	case ErrNotTCP:
		return "hdr: not an unfragmented IPv4 TCP segment"
	case ErrExtChain:
		return "hdr: malformed, too long or looping IPv6 extension-header chain"
	case ErrRoutingType0:
		return "hdr: IPv6 routing header type 0"
	case ErrAtomicFragment:
		return "hdr: IPv6 atomic fragment"
	case ErrFragment:
		return "hdr: invalid IPv6 fragment"
	case ErrJumbogram:
		return "hdr: IPv6 jumbo payload option"
	}
	return "hdr: error"
}

// MAC is an IEEE 802 MAC address. An alias, so [6]byte values from other
// packages need no conversion.
type MAC = [6]byte

// IPv4Addr is an IPv4 address in network order. An alias, like MAC.
type IPv4Addr = [4]byte
