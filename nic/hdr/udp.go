package hdr

// UDP header (RFC 768):
//
//	0x00 u16 source port
//	0x02 u16 destination port
//	0x04 u16 length (header and payload)
//	0x06 u16 checksum (over the IPv4 pseudo-header, the header and the
//	         payload; zero: none, IPv4 only)
const (
	UDPSize        = 8
	UDPOffSrcPort  = 0x00
	UDPOffDstPort  = 0x02
	UDPOffLength   = 0x04
	UDPOffChecksum = 0x06
)

// UDP is a view of a UDP datagram: the header and the payload.
type UDP []byte

// ParseUDP checks that b starts with a whole UDP datagram: the header and
// a length field that covers it and fits in b. It returns b[:Length].
func ParseUDP(b []byte) (UDP, error) {
	if len(b) < UDPSize {
		return nil, ErrShort
	}
	u := UDP(b)
	n := int(u.Length())
	if n < UDPSize {
		return nil, ErrTotalLen
	}
	if n > len(b) {
		return nil, ErrShort
	}
	return u[:n], nil
}

func (u UDP) SrcPort() uint16      { return be.Uint16(u[UDPOffSrcPort:]) }
func (u UDP) DstPort() uint16      { return be.Uint16(u[UDPOffDstPort:]) }
func (u UDP) Length() uint16       { return be.Uint16(u[UDPOffLength:]) }
func (u UDP) Checksum() uint16     { return be.Uint16(u[UDPOffChecksum:]) }
func (u UDP) Payload() []byte      { return u[UDPSize:] }
func (u UDP) SetSrcPort(p uint16)  { be.PutUint16(u[UDPOffSrcPort:], p) }
func (u UDP) SetDstPort(p uint16)  { be.PutUint16(u[UDPOffDstPort:], p) }
func (u UDP) SetLength(n uint16)   { be.PutUint16(u[UDPOffLength:], n) }
func (u UDP) SetChecksum(v uint16) { be.PutUint16(u[UDPOffChecksum:], v) }

// ChecksumOK verifies the checksum of the whole datagram u between src and
// dst. A zero checksum field means the sender computed none; that is the
// caller's to accept (it does not sum to 0xFFFF).
func (u UDP) ChecksumOK(src, dst IPv4Addr) bool {
	return TransportChecksumOK(ProtoUDP, src, dst, u)
}

// UpdateChecksum computes and writes the checksum of the whole datagram u;
// a computed zero is sent as 0xFFFF, since zero on the wire means "none".
func (u UDP) UpdateChecksum(src, dst IPv4Addr) {
	u.SetChecksum(0)
	c := TransportChecksum(ProtoUDP, src, dst, u)
	if c == 0 {
		c = 0xFFFF
	}
	u.SetChecksum(c)
}

// UDPFields is the fields of a UDP header.
type UDPFields struct {
	SrcPort, DstPort uint16
	Length           uint16
	Checksum         uint16 // written as given: UpdateChecksum computes it
}

// Encode writes the header at the start of b and returns its length.
func (f *UDPFields) Encode(b []byte) int {
	u := UDP(b[:UDPSize])
	u.SetSrcPort(f.SrcPort)
	u.SetDstPort(f.DstPort)
	u.SetLength(f.Length)
	u.SetChecksum(f.Checksum)
	return UDPSize
}

// Decode reads the header at the start of b, validated as ParseUDP does,
// and returns its length.
func (f *UDPFields) Decode(b []byte) (int, error) {
	u, err := ParseUDP(b)
	if err != nil {
		return 0, err
	}
	*f = UDPFields{SrcPort: u.SrcPort(), DstPort: u.DstPort(), Length: u.Length(), Checksum: u.Checksum()}
	return UDPSize, nil
}
