package hdr

// ICMPv4 error message (RFC 792; the next-hop MTU of RFC 1191):
//
//	0x00 u8  type
//	0x01 u8  code
//	0x02 u16 checksum (over the whole message)
//	0x04 u16 unused (0)
//	0x06 u16 next-hop MTU (type 3 code 4; 0 from routers older than RFC 1191)
//	0x08     the offending datagram's IPv4 header and at least its first 8
//	         payload bytes: for TCP, the ports and the sequence number
const (
	ICMPSize          = 8
	ICMPOffType       = 0x00
	ICMPOffCode       = 0x01
	ICMPOffChecksum   = 0x02
	ICMPOffNextHopMTU = 0x06

	ICMPTypeEchoReply      = 0
	ICMPTypeDestUnreach    = 3
	ICMPTypeEchoRequest    = 8
	ICMPCodeFragNeeded     = 4 // destination unreachable: fragmentation needed and DF set
	ICMPQuotedTransportMin = 8 // transport bytes every ICMP error quotes (RFC 792)
)

// ICMP is a view of an ICMPv4 message: the header and what follows it.
type ICMP []byte

// ParseICMP checks that b holds at least an ICMP header.
func ParseICMP(b []byte) (ICMP, error) {
	if len(b) < ICMPSize {
		return nil, ErrShort
	}
	return ICMP(b), nil
}

func (m ICMP) Type() uint8            { return m[ICMPOffType] }
func (m ICMP) Code() uint8            { return m[ICMPOffCode] }
func (m ICMP) Checksum() uint16       { return be.Uint16(m[ICMPOffChecksum:]) }
func (m ICMP) NextHopMTU() uint16     { return be.Uint16(m[ICMPOffNextHopMTU:]) }
func (m ICMP) Payload() []byte        { return m[ICMPSize:] }
func (m ICMP) SetType(v uint8)        { m[ICMPOffType] = v }
func (m ICMP) SetCode(v uint8)        { m[ICMPOffCode] = v }
func (m ICMP) SetChecksum(v uint16)   { be.PutUint16(m[ICMPOffChecksum:], v) }
func (m ICMP) SetNextHopMTU(v uint16) { be.PutUint16(m[ICMPOffNextHopMTU:], v) }

// FragNeeded reports whether m is "fragmentation needed and DF set".
func (m ICMP) FragNeeded() bool {
	return m.Type() == ICMPTypeDestUnreach && m.Code() == ICMPCodeFragNeeded
}

// ChecksumOK verifies the checksum over the whole message.
func (m ICMP) ChecksumOK() bool { return Checksum(m, 0) == 0xFFFF }

// UpdateChecksum computes and writes the checksum over the whole message.
func (m ICMP) UpdateChecksum() {
	m.SetChecksum(0)
	m.SetChecksum(^Checksum(m, 0))
}

// Quoted parses the datagram an ICMP error quotes: its IPv4 header (whole,
// options included) and the transport bytes after it, of which RFC 792
// promises only 8. The quoted header's total length describes the original
// datagram, not the quote, so it is not checked against what is there.
func (m ICMP) Quoted() (IPv4, []byte, error) {
	q := m.Payload()
	if len(q) < IPv4MinSize {
		return nil, nil, ErrShort
	}
	h := IPv4(q)
	if h.Version() != IPv4Version {
		return nil, nil, ErrVersion
	}
	hl := h.HeaderLen()
	if hl < IPv4MinSize {
		return nil, nil, ErrHeaderLen
	}
	if len(q) < hl+ICMPQuotedTransportMin {
		return nil, nil, ErrShort
	}
	return h[:hl], q[hl:], nil
}

// ICMPFields is the fields of an ICMPv4 error header.
type ICMPFields struct {
	Type, Code uint8
	Checksum   uint16 // written as given: UpdateChecksum computes it
	NextHopMTU uint16
}

// Encode writes the header at the start of b and returns its length.
func (f *ICMPFields) Encode(b []byte) int {
	m := ICMP(b[:ICMPSize])
	m.SetType(f.Type)
	m.SetCode(f.Code)
	m.SetChecksum(f.Checksum)
	be.PutUint16(m[0x04:], 0)
	m.SetNextHopMTU(f.NextHopMTU)
	return ICMPSize
}

// Decode reads the header at the start of b.
func (f *ICMPFields) Decode(b []byte) (int, error) {
	m, err := ParseICMP(b)
	if err != nil {
		return 0, err
	}
	*f = ICMPFields{Type: m.Type(), Code: m.Code(), Checksum: m.Checksum(), NextHopMTU: m.NextHopMTU()}
	return ICMPSize, nil
}
