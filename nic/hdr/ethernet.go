package hdr

// Ethernet II header (IEEE 802.3 with an EtherType), untagged; the FCS is
// the MAC's and never in these buffers.
//
//	0x00 [6] destination MAC
//	0x06 [6] source MAC
//	0x0C u16 EtherType
const (
	EthernetSize    = 14
	EthernetOffDst  = 0
	EthernetOffSrc  = 6
	EthernetOffType = 12

	// EthernetMinFrame is the shortest frame on the wire without its FCS
	// (64 with it); a MAC pads shorter ones with zeros.
	EthernetMinFrame = 60

	EtherTypeIPv4 = 0x0800
	EtherTypeARP  = 0x0806
	EtherTypeVLAN = 0x8100
	EtherTypeIPv6 = 0x86DD
)

// BroadcastMAC is ff:ff:ff:ff:ff:ff.
var BroadcastMAC = MAC{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}

// Ethernet is a view of an Ethernet II header and what follows it.
type Ethernet []byte

// ParseEthernet returns b as an Ethernet view if it holds the header.
func ParseEthernet(b []byte) (Ethernet, error) {
	if len(b) < EthernetSize {
		return nil, ErrShort
	}
	return Ethernet(b), nil
}

func (e Ethernet) Dst() MAC     { return MAC(e[EthernetOffDst : EthernetOffDst+6]) }
func (e Ethernet) Src() MAC     { return MAC(e[EthernetOffSrc : EthernetOffSrc+6]) }
func (e Ethernet) Type() uint16 { return be.Uint16(e[EthernetOffType:]) }

// DstGroup reports the destination's I/G bit: a multicast or broadcast
// frame, which every station on the segment may take.
func (e Ethernet) DstGroup() bool { return e[EthernetOffDst]&1 != 0 }

// Payload is what follows the header.
func (e Ethernet) Payload() []byte { return e[EthernetSize:] }

func (e Ethernet) SetDst(m MAC)     { copy(e[EthernetOffDst:EthernetOffDst+6], m[:]) }
func (e Ethernet) SetSrc(m MAC)     { copy(e[EthernetOffSrc:EthernetOffSrc+6], m[:]) }
func (e Ethernet) SetType(t uint16) { be.PutUint16(e[EthernetOffType:], t) }

// EthernetFields is the fields of an Ethernet II header.
type EthernetFields struct {
	Dst, Src MAC
	Type     uint16
}

// Encode writes the header at the start of b and returns its length.
func (f *EthernetFields) Encode(b []byte) int {
	e := Ethernet(b[:EthernetSize])
	e.SetDst(f.Dst)
	e.SetSrc(f.Src)
	e.SetType(f.Type)
	return EthernetSize
}

// Decode reads the header at the start of b and returns its length.
func (f *EthernetFields) Decode(b []byte) (int, error) {
	e, err := ParseEthernet(b)
	if err != nil {
		return 0, err
	}
	*f = EthernetFields{Dst: e.Dst(), Src: e.Src(), Type: e.Type()}
	return EthernetSize, nil
}

// IEEE 802.1Q tag: inserted after the source MAC, it moves the EtherType
// back by four bytes. The tag control information (TCI) packs the priority
// code point (PCP, 3 bits), the drop eligible indicator (DEI, 1 bit) and
// the VLAN identifier (VID, 12 bits).
//
//	0x00 [6] destination MAC
//	0x06 [6] source MAC
//	0x0C u16 TPID (0x8100 for a C-tag, 0x88A8 for an 802.1ad S-tag)
//	0x0E u16 TCI
//	0x10 u16 EtherType of the payload
const (
	VLANTagSize        = 4
	EthernetVLANSize   = EthernetSize + VLANTagSize
	EthernetVLANOffTCI = 14
	EthernetVLANOffTyp = 16

	EtherTypeQinQ = 0x88A8 // 802.1ad service tag (the outer tag of a double-tagged frame)

	VLANIDMask = 0x0FFF
	// VLANIDNone (0) in a tag is a priority tag: no VLAN, just a PCP.
	VLANIDNone = 0
	// VLANIDReserved (4095) is reserved by 802.1Q and never on the wire.
	VLANIDReserved = 4095
)

// IsVLANTPID reports whether an EtherType is a VLAN tag protocol
// identifier (C-tag or S-tag): a frame that carries it is tagged.
func IsVLANTPID(t uint16) bool { return t == EtherTypeVLAN || t == EtherTypeQinQ }

// VLANTCI is a tag control information word.
type VLANTCI uint16

// MakeVLANTCI packs a priority and a VLAN ID (DEI clear).
func MakeVLANTCI(pcp uint8, vid uint16) VLANTCI {
	return VLANTCI(uint16(pcp&7)<<13 | vid&VLANIDMask)
}

func (t VLANTCI) VID() uint16 { return uint16(t) & VLANIDMask }
func (t VLANTCI) PCP() uint8  { return uint8(t >> 13) }
func (t VLANTCI) DEI() bool   { return t&(1<<12) != 0 }

// EthernetVLAN is a view of an 802.1Q-tagged Ethernet header and what
// follows it.
type EthernetVLAN []byte

// ParseEthernetVLAN returns b as a tagged Ethernet view when it holds a
// whole tagged header. The caller has seen a TPID (IsVLANTPID) at the
// EtherType's place: that is what makes the frame tagged.
func ParseEthernetVLAN(b []byte) (EthernetVLAN, error) {
	if len(b) < EthernetVLANSize {
		return nil, ErrShort
	}
	return EthernetVLAN(b), nil
}

func (e EthernetVLAN) TPID() uint16     { return be.Uint16(e[EthernetOffType:]) }
func (e EthernetVLAN) TCI() VLANTCI     { return VLANTCI(be.Uint16(e[EthernetVLANOffTCI:])) }
func (e EthernetVLAN) Type() uint16     { return be.Uint16(e[EthernetVLANOffTyp:]) }
func (e EthernetVLAN) Payload() []byte  { return e[EthernetVLANSize:] }
func (e EthernetVLAN) SetTCI(t VLANTCI) { be.PutUint16(e[EthernetVLANOffTCI:], uint16(t)) }

// StripVLAN writes f without its tag into dst (which must hold
// len(f)-VLANTagSize bytes) and returns that slice: the MACs, then the
// inner EtherType and payload. f must be a parsed tagged frame.
func StripVLAN(dst []byte, f EthernetVLAN) []byte {
	n := copy(dst, f[:EthernetOffType])
	n += copy(dst[n:], f[EthernetVLANOffTyp:])
	return dst[:n]
}

// InsertVLAN writes the untagged frame f into dst with a C-tag (0x8100)
// carrying tci after the source MAC, and returns it; dst must hold
// len(f)+VLANTagSize bytes and f a whole Ethernet header.
func InsertVLAN(dst []byte, f Ethernet, tci VLANTCI) []byte {
	n := copy(dst, f[:EthernetOffType])
	be.PutUint16(dst[n:], EtherTypeVLAN)
	be.PutUint16(dst[n+2:], uint16(tci))
	n += VLANTagSize
	n += copy(dst[n:], f[EthernetOffType:])
	return dst[:n]
}
