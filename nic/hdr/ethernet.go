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
