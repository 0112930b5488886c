package hdr

// IPv4 header (RFC 791):
//
//	0x00 u8  version (high nibble, 4) | IHL (low nibble, header length in 32-bit words)
//	0x01 u8  type of service (DSCP | ECN)
//	0x02 u16 total length (header and payload, bytes)
//	0x04 u16 identification
//	0x06 u16 flags (0x4000 DF, 0x2000 MF) | fragment offset (8-byte units)
//	0x08 u8  time to live
//	0x09 u8  protocol
//	0x0A u16 header checksum
//	0x0C [4] source address
//	0x10 [4] destination address
//	0x14     options, to IHL*4
const (
	IPv4MinSize = 20
	IPv4MaxSize = 60 // IHL 15

	IPv4OffVerIHL    = 0x00
	IPv4OffTOS       = 0x01
	IPv4OffTotalLen  = 0x02
	IPv4OffID        = 0x04
	IPv4OffFlagsFrag = 0x06
	IPv4OffTTL       = 0x08
	IPv4OffProto     = 0x09
	IPv4OffChecksum  = 0x0A
	IPv4OffSrc       = 0x0C
	IPv4OffDst       = 0x10

	IPv4Version      = 4
	IPv4FlagDF       = 0x4000 // don't fragment
	IPv4FlagMF       = 0x2000 // more fragments
	IPv4FragOffMask  = 0x1FFF // fragment offset, in 8-byte units
	IPv4MaxTotalLen  = 65535
	IPv4DefaultTTL   = 64
	ProtoICMP        = 1
	ProtoTCP         = 6
	ProtoUDP         = 17
	ipv4VersionShift = 4
)

// IPv4 is a view of an IPv4 header, and of the datagram when it came from
// ParseIPv4.
type IPv4 []byte

// ParseIPv4 checks that b starts with a whole IPv4 datagram: a version 4
// header of IHL >= 5 words and a total length that covers the header and
// fits in b. It returns the datagram, b[:TotalLen] (an Ethernet frame may be
// padded past it), so Payload is the transport segment. It does not verify
// the header checksum (ChecksumOK does).
func ParseIPv4(b []byte) (IPv4, error) {
	h, err := ParseIPv4Header(b)
	if err != nil {
		return nil, err
	}
	tot := int(h.TotalLen())
	if tot > len(b) {
		return nil, ErrShort
	}
	return IPv4(b[:tot]), nil
}

// ParseIPv4Header checks that b starts with a whole IPv4 header (version 4,
// IHL >= 5 words, IHL*4 bytes present, a total length that covers the
// header) and returns it, b[:HeaderLen]. The payload need not follow in b:
// the device hands the header and the segment over as separate slices.
func ParseIPv4Header(b []byte) (IPv4, error) {
	if len(b) < IPv4MinSize {
		return nil, ErrShort
	}
	h := IPv4(b)
	if h.Version() != IPv4Version {
		return nil, ErrVersion
	}
	ihl := h.HeaderLen()
	if ihl < IPv4MinSize || ihl > len(b) {
		return nil, ErrHeaderLen
	}
	if int(h.TotalLen()) < ihl {
		return nil, ErrTotalLen
	}
	return h[:ihl], nil
}

func (h IPv4) Version() uint8 { return h[IPv4OffVerIHL] >> ipv4VersionShift }

// HeaderLen is the header length in bytes (IHL*4), options included.
func (h IPv4) HeaderLen() int    { return int(h[IPv4OffVerIHL]&0x0F) * 4 }
func (h IPv4) TOS() uint8        { return h[IPv4OffTOS] }
func (h IPv4) TotalLen() uint16  { return be.Uint16(h[IPv4OffTotalLen:]) }
func (h IPv4) ID() uint16        { return be.Uint16(h[IPv4OffID:]) }
func (h IPv4) FlagsFrag() uint16 { return be.Uint16(h[IPv4OffFlagsFrag:]) }
func (h IPv4) DF() bool          { return h.FlagsFrag()&IPv4FlagDF != 0 }
func (h IPv4) MF() bool          { return h.FlagsFrag()&IPv4FlagMF != 0 }
func (h IPv4) TTL() uint8        { return h[IPv4OffTTL] }
func (h IPv4) Proto() uint8      { return h[IPv4OffProto] }
func (h IPv4) Checksum() uint16  { return be.Uint16(h[IPv4OffChecksum:]) }
func (h IPv4) Src() IPv4Addr     { return IPv4Addr(h[IPv4OffSrc : IPv4OffSrc+4]) }
func (h IPv4) Dst() IPv4Addr     { return IPv4Addr(h[IPv4OffDst : IPv4OffDst+4]) }
func (h IPv4) Options() []byte   { return h[IPv4MinSize:h.HeaderLen()] }

// FragOffset is the fragment's offset in the datagram, in bytes.
func (h IPv4) FragOffset() int { return int(h.FlagsFrag()&IPv4FragOffMask) * 8 }

// IsFragment reports a fragment of a larger datagram: MF set or a non-zero
// offset (DF alone is not a fragment). Fragments go to the host whole:
// reassembly is its job.
func (h IPv4) IsFragment() bool { return h.FlagsFrag()&(IPv4FlagMF|IPv4FragOffMask) != 0 }

func (h IPv4) SetTOS(v uint8)        { h[IPv4OffTOS] = v }
func (h IPv4) SetTotalLen(n uint16)  { be.PutUint16(h[IPv4OffTotalLen:], n) }
func (h IPv4) SetID(v uint16)        { be.PutUint16(h[IPv4OffID:], v) }
func (h IPv4) SetFlagsFrag(v uint16) { be.PutUint16(h[IPv4OffFlagsFrag:], v) }
func (h IPv4) SetTTL(v uint8)        { h[IPv4OffTTL] = v }
func (h IPv4) SetProto(v uint8)      { h[IPv4OffProto] = v }
func (h IPv4) SetChecksum(v uint16)  { be.PutUint16(h[IPv4OffChecksum:], v) }
func (h IPv4) SetSrc(a IPv4Addr)     { copy(h[IPv4OffSrc:IPv4OffSrc+4], a[:]) }
func (h IPv4) SetDst(a IPv4Addr)     { copy(h[IPv4OffDst:IPv4OffDst+4], a[:]) }

// SetHeaderLen writes the version (4) and the IHL for an n-byte header (n a
// multiple of 4, 20..60).
func (h IPv4) SetHeaderLen(n int) { h[IPv4OffVerIHL] = IPv4Version<<ipv4VersionShift | uint8(n/4)&0x0F }

// Payload is the transport segment: from the end of the header to the
// total length. The view must hold the whole datagram (ParseIPv4).
func (h IPv4) Payload() []byte { return h[h.HeaderLen():h.TotalLen()] }

// ChecksumOK verifies the header checksum.
func (h IPv4) ChecksumOK() bool { return Checksum(h[:h.HeaderLen()], 0) == 0xFFFF }

// UpdateChecksum computes and writes the header checksum.
func (h IPv4) UpdateChecksum() {
	h.SetChecksum(0)
	h.SetChecksum(^Checksum(h[:h.HeaderLen()], 0))
}

// PseudoHeaderSum is the pseudo-header accumulator of the transport
// segment this header carries, l4Len bytes long.
func (h IPv4) PseudoHeaderSum(l4Len int) uint64 {
	return PseudoHeaderSum(h.Proto(), h.Src(), h.Dst(), l4Len)
}

// IPv4Fields is the fields of an IPv4 header; options are the caller's to
// write behind the fixed part.
type IPv4Fields struct {
	HeaderLen int // bytes, options included: 20..60, a multiple of 4; 0 is 20
	TOS       uint8
	TotalLen  uint16
	ID        uint16
	FlagsFrag uint16 // IPv4FlagDF, IPv4FlagMF and the offset in 8-byte units, as on the wire
	TTL       uint8
	Proto     uint8
	Checksum  uint16 // written as given: UpdateChecksum computes it
	Src, Dst  IPv4Addr
}

// Encode writes the fixed 20 bytes of the header (and the IHL for
// HeaderLen) at the start of b and returns the header length.
func (f *IPv4Fields) Encode(b []byte) int {
	h := IPv4(b[:IPv4MinSize])
	n := f.HeaderLen
	if n == 0 {
		n = IPv4MinSize
	}
	h.SetHeaderLen(n)
	h.SetTOS(f.TOS)
	h.SetTotalLen(f.TotalLen)
	h.SetID(f.ID)
	h.SetFlagsFrag(f.FlagsFrag)
	h.SetTTL(f.TTL)
	h.SetProto(f.Proto)
	h.SetChecksum(f.Checksum)
	h.SetSrc(f.Src)
	h.SetDst(f.Dst)
	return n
}

// Decode reads the header at the start of b, validated as ParseIPv4Header
// does, and returns its length.
func (f *IPv4Fields) Decode(b []byte) (int, error) {
	h, err := ParseIPv4Header(b)
	if err != nil {
		return 0, err
	}
	*f = IPv4Fields{HeaderLen: h.HeaderLen(), TOS: h.TOS(), TotalLen: h.TotalLen(), ID: h.ID(),
		FlagsFrag: h.FlagsFrag(), TTL: h.TTL(), Proto: h.Proto(), Checksum: h.Checksum(),
		Src: h.Src(), Dst: h.Dst()}
	return len(h), nil
}
