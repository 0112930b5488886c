package hdr

// ICMPv6 error message (RFC 4443 §3; Packet Too Big is §3.2):
//
//	0x00 u8  type
//	0x01 u8  code
//	0x02 u16 checksum (over the IPv6 pseudo-header and the whole message)
//	0x04 u32 MTU (Packet Too Big; the pointer or unused word of the others)
//	0x08     as much of the invoking packet as fits in the minimum MTU:
//	         its IPv6 header, extension headers, and the transport header
const (
	ICMPv6Size      = 8
	ICMPv6OffType   = 0x00
	ICMPv6OffCode   = 0x01
	ICMPv6OffCsum   = 0x02
	ICMPv6OffMTU    = 0x04
	ICMPv6OffQuoted = ICMPv6Size

	ICMPv6TypePacketTooBig = 2
)

// ICMPv6 is a view of an ICMPv6 message: the header and what follows it.
type ICMPv6 []byte

// ParseICMPv6 checks that b holds at least an ICMPv6 error header.
func ParseICMPv6(b []byte) (ICMPv6, error) {
	if len(b) < ICMPv6Size {
		return nil, ErrShort
	}
	return ICMPv6(b), nil
}

func (m ICMPv6) Type() uint8      { return m[ICMPv6OffType] }
func (m ICMPv6) Code() uint8      { return m[ICMPv6OffCode] }
func (m ICMPv6) Checksum() uint16 { return be.Uint16(m[ICMPv6OffCsum:]) }
func (m ICMPv6) MTU() uint32      { return be.Uint32(m[ICMPv6OffMTU:]) }
func (m ICMPv6) Payload() []byte  { return m[ICMPv6Size:] }
func (m ICMPv6) SetMTU(v uint32)  { be.PutUint32(m[ICMPv6OffMTU:], v) }

// PacketTooBig reports whether m is a Packet Too Big (type 2; its code is
// always 0, and a receiver ignores it, RFC 4443 §3.2).
func (m ICMPv6) PacketTooBig() bool { return m.Type() == ICMPv6TypePacketTooBig }

// ChecksumOK verifies the checksum of m carried in the IPv6 packet ip.
func (m ICMPv6) ChecksumOK(ip IPv6) bool { return ip.TransportChecksumOK(ProtoICMPv6, m) }

// UpdateChecksum computes and writes the checksum of m carried in ip.
func (m ICMPv6) UpdateChecksum(ip IPv6) {
	be.PutUint16(m[ICMPv6OffCsum:], 0)
	be.PutUint16(m[ICMPv6OffCsum:], ip.TransportChecksum(ProtoICMPv6, m))
}

// QuotedTCP parses the invoking packet an ICMPv6 error quotes, as far as
// the first ICMPQuotedTransportMin bytes of its TCP header (ports and
// sequence number): the fixed header, then the extension headers the quote
// holds, each whole. The quoted payload length describes the original
// packet, not the quote, so it is not checked against what is there. It
// returns the quoted header and the TCP bytes; ErrNotTCP for a quote of
// anything else (UDP, a non-first fragment).
func (m ICMPv6) QuotedTCP() (IPv6, []byte, error) {
	q := m.Payload()
	h, err := ParseIPv6Header(q)
	if err != nil {
		return nil, nil, err
	}
	var c IPv6Chain
	if err := WalkIPv6(IPv6(q), &c); err != nil {
		return nil, nil, err
	}
	if c.Proto != ProtoTCP || (c.Fragment && !c.FirstFragment) {
		return nil, nil, ErrNotTCP
	}
	if len(q)-c.L4Off < ICMPQuotedTransportMin {
		return nil, nil, ErrShort
	}
	return h, q[c.L4Off:], nil
}

// ICMPv6Fields is the fields of an ICMPv6 error header.
type ICMPv6Fields struct {
	Type, Code uint8
	Checksum   uint16 // written as given: UpdateChecksum computes it
	MTU        uint32
}

// Encode writes the header at the start of b and returns its length.
func (f *ICMPv6Fields) Encode(b []byte) int {
	m := ICMPv6(b[:ICMPv6Size])
	m[ICMPv6OffType], m[ICMPv6OffCode] = f.Type, f.Code
	be.PutUint16(m[ICMPv6OffCsum:], f.Checksum)
	m.SetMTU(f.MTU)
	return ICMPv6Size
}

// Decode reads the header at the start of b.
func (f *ICMPv6Fields) Decode(b []byte) (int, error) {
	m, err := ParseICMPv6(b)
	if err != nil {
		return 0, err
	}
	*f = ICMPv6Fields{Type: m.Type(), Code: m.Code(), Checksum: m.Checksum(), MTU: m.MTU()}
	return ICMPv6Size, nil
}
