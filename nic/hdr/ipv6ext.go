package hdr

// IPv6 extension headers (RFC 8200 §4). All but the Fragment header and AH
// share one layout, which is what lets a parser skip a header it does not
// otherwise understand:
//
//	0x00 u8 next header
//	0x01 u8 header extension length (8-octet units, not counting the first 8 octets)
//	0x02    type-specific data (options for Hop-by-Hop and Destination Options)
//
// Routing header: 0x02 u8 routing type, 0x03 u8 segments left.
// Fragment header (fixed 8 octets):
//
//	0x00 u8  next header
//	0x01 u8  reserved
//	0x02 u16 fragment offset (8-octet units) << 3 | reserved (2) | M (more fragments)
//	0x04 u32 identification
//
// AH (RFC 4302): the length byte counts 4-octet units, minus 2.
const (
	IPv6ExtMinSize = 8

	IPv6ExtOffNextHeader = 0x00
	IPv6ExtOffLen        = 0x01
	IPv6RoutingOffType   = 0x02
	IPv6RoutingOffLeft   = 0x03
	IPv6FragOffOffset    = 0x02
	IPv6FragOffID        = 0x04

	IPv6FragMF         = 0x0001 // more fragments, in the offset word
	IPv6FragOffsetMask = 0xFFF8 // offset in 8-octet units, already scaled by 8 in place

	// Next Header values of the extension headers, and the two that end a
	// chain without a transport header.
	ProtoIPv6HopByHop = 0
	ProtoIPv6Routing  = 43
	ProtoIPv6Fragment = 44
	ProtoESP          = 50
	ProtoAH           = 51
	ProtoICMPv6       = 58
	ProtoIPv6NoNext   = 59
	ProtoIPv6DstOpts  = 60
	ProtoMobility     = 135
	ProtoHIP          = 139
	ProtoShim6        = 140
	ProtoExperiment1  = 253
	ProtoExperiment2  = 254

	// Options of Hop-by-Hop and Destination Options headers (RFC 8200
	// §4.2, RFC 2675).
	IPv6OptPad1       = 0x00
	IPv6OptJumboPayld = 0xC2

	// IPv6MaxExtHeaders bounds the walk: a receive parser gives up on a
	// chain longer than this, as hardware parsers do (each header costs a
	// parse step). Real traffic carries one or two.
	IPv6MaxExtHeaders = 8
	// IPv6MaxChainLen bounds the bytes the chain may take before the
	// transport header.
	IPv6MaxChainLen = 512
	// RoutingType0 is the deprecated source-routing header (RFC 5095).
	RoutingType0 = 0
)

// ipv6Ext describes one extension header type: its bit in the walk's
// seen-set (for the repeat rule) and how many times a chain may carry it.
type ipv6Ext struct {
	bit     uint16
	maxSeen uint8
}

// ipv6ExtTable is the one table of IPv6 extension headers the walker
// knows: RFC 8200 §4.1's order rules say each may appear once, except
// Destination Options (before a Routing header and at the end). Any Next
// Header not here is an upper-layer protocol and ends the chain.
var ipv6ExtTable = [256]ipv6Ext{
	ProtoIPv6HopByHop: {1 << 0, 1},
	ProtoIPv6Routing:  {1 << 1, 1},
	ProtoIPv6Fragment: {1 << 2, 1},
	ProtoAH:           {1 << 3, 1},
	ProtoIPv6DstOpts:  {1 << 4, 2},
	ProtoMobility:     {1 << 5, 1},
	ProtoHIP:          {1 << 6, 1},
	ProtoShim6:        {1 << 7, 1},
	ProtoExperiment1:  {1 << 8, 1},
	ProtoExperiment2:  {1 << 9, 1},
}

// IPv6Chain is what WalkIPv6 found behind an IPv6 fixed header.
type IPv6Chain struct {
	// Proto is the upper-layer protocol (ProtoTCP, ProtoUDP,
	// ProtoICMPv6, ...), or ProtoESP or ProtoIPv6NoNext, which end a chain
	// with nothing the parser can read behind them.
	Proto uint8
	// L4Off is the offset of the upper-layer header from the start of the
	// fixed header. For a non-first fragment it is where the fragment's
	// data starts, which is no header at all.
	L4Off int
	// ExtHeaders is how many extension headers the chain had.
	ExtHeaders int
	// Fragment: the packet is a fragment (the host reassembles it).
	Fragment bool
	// FirstFragment: a fragment at offset 0, which carries the whole chain
	// and the upper-layer header (RFC 7112).
	FirstFragment bool
	// RoutingLeft: a Routing header with segments left, so the fixed
	// header's destination is not the final one the upper-layer
	// checksum's pseudo-header names (RFC 8200 §8.1).
	RoutingLeft bool
}

// WalkIPv6 follows the extension-header chain of the whole IPv6 packet h
// (from ParseIPv6) to its upper-layer header, within IPv6MaxExtHeaders
// headers and IPv6MaxChainLen bytes, and fills *c. It refuses, each with
// its own error, chains that are truncated (ErrShort), malformed, too long
// or looping (ErrExtChain), a Routing header of type 0 (ErrRoutingType0),
// an atomic fragment (ErrAtomicFragment), a fragment that cannot be part
// of a valid datagram (ErrFragment), and a Jumbo Payload option
// (ErrJumbogram). It does not allocate.
func WalkIPv6(h IPv6, c *IPv6Chain) error {
	*c = IPv6Chain{}
	next := h.NextHeader()
	off := IPv6Size
	var seen uint16
	var dstOpts uint8
	for {
		e := ipv6ExtTable[next]
		if e.bit == 0 {
			break // an upper-layer protocol (or ESP / No Next Header)
		}
		if c.ExtHeaders == IPv6MaxExtHeaders {
			return ErrExtChain
		}
		if next == ProtoIPv6HopByHop && c.ExtHeaders != 0 {
			return ErrExtChain // Hop-by-Hop only straight behind the fixed header
		}
		if next == ProtoIPv6DstOpts {
			dstOpts++
			if dstOpts > e.maxSeen {
				return ErrExtChain
			}
		} else if seen&e.bit != 0 {
			return ErrExtChain
		}
		seen |= e.bit
		if len(h)-off < IPv6ExtMinSize {
			return ErrShort
		}
		x := h[off:]
		var n int
		switch next {
		case ProtoIPv6Fragment:
			n = IPv6ExtMinSize
		case ProtoAH:
			n = (int(x[IPv6ExtOffLen]) + 2) * 4
		default:
			n = (int(x[IPv6ExtOffLen]) + 1) * 8
		}
		if n > len(x) {
			return ErrShort
		}
		if off+n-IPv6Size > IPv6MaxChainLen {
			return ErrExtChain
		}
		x = x[:n]
		c.ExtHeaders++
		switch next {
		case ProtoIPv6HopByHop:
			if err := walkIPv6Options(x[2:], true); err != nil {
				return err
			}
		case ProtoIPv6DstOpts:
			if err := walkIPv6Options(x[2:], false); err != nil {
				return err
			}
		case ProtoIPv6Routing:
			if x[IPv6RoutingOffType] == RoutingType0 {
				return ErrRoutingType0
			}
			c.RoutingLeft = x[IPv6RoutingOffLeft] != 0
		case ProtoIPv6Fragment:
			w := be.Uint16(x[IPv6FragOffOffset:])
			fragOff, more := int(w&IPv6FragOffsetMask), w&IPv6FragMF != 0
			if fragOff == 0 && !more {
				return ErrAtomicFragment
			}
			data := len(h) - (off + n)
			if (more && data%8 != 0) || fragOff+data > IPv4MaxTotalLen {
				return ErrFragment
			}
			c.Fragment = true
			if fragOff != 0 {
				// The rest is fragment data, not headers: the chain
				// was in the first fragment.
				c.Proto, c.L4Off = x[IPv6ExtOffNextHeader], off+n
				return nil
			}
			c.FirstFragment = true
		}
		next = x[IPv6ExtOffNextHeader]
		off += n
	}
	c.Proto, c.L4Off = next, off
	return nil
}

// walkIPv6Options checks the TLV options of a Hop-by-Hop or Destination
// Options header: each must fit, and a Hop-by-Hop header must not carry a
// Jumbo Payload.
func walkIPv6Options(o []byte, hopByHop bool) error {
	for len(o) > 0 {
		if o[0] == IPv6OptPad1 {
			o = o[1:]
			continue
		}
		if len(o) < 2 || 2+int(o[1]) > len(o) {
			return ErrExtChain
		}
		if hopByHop && o[0] == IPv6OptJumboPayld {
			return ErrJumbogram
		}
		o = o[2+int(o[1]):]
	}
	return nil
}

// IPv6TCPSegment returns the TCP segment of the whole IPv6 packet h when
// the walk c found an unfragmented TCP one, and true.
func IPv6TCPSegment(h IPv6, c *IPv6Chain) (TCP, bool) {
	if c.Proto != ProtoTCP || c.Fragment || len(h)-c.L4Off < TCPMinSize {
		return nil, false
	}
	return TCP(h[c.L4Off:]), true
}
