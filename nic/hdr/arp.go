package hdr

// ARP packet (RFC 826) for Ethernet and IPv4, the only kind this NIC sees:
//
//	0x00 u16 hardware type (1: Ethernet)
//	0x02 u16 protocol type (0x0800: IPv4)
//	0x04 u8  hardware address length (6)
//	0x05 u8  protocol address length (4)
//	0x06 u16 operation (1: request, 2: reply)
//	0x08 [6] sender hardware address
//	0x0E [4] sender protocol address
//	0x12 [6] target hardware address
//	0x18 [4] target protocol address
const (
	ARPSize     = 28
	ARPOffHType = 0x00
	ARPOffPType = 0x02
	ARPOffHLen  = 0x04
	ARPOffPLen  = 0x05
	ARPOffOp    = 0x06
	ARPOffSHA   = 0x08
	ARPOffSPA   = 0x0E
	ARPOffTHA   = 0x12
	ARPOffTPA   = 0x18

	ARPHTypeEthernet = 1
	ARPOpRequest     = 1
	ARPOpReply       = 2
)

// ARP is a view of an Ethernet/IPv4 ARP packet.
type ARP []byte

// ParseARP returns the first ARPSize bytes of b as an ARP view. It checks
// the length only: whether the packet is Ethernet/IPv4 at all is
// IsEthernetIPv4's question, and the host's to ask.
func ParseARP(b []byte) (ARP, error) {
	if len(b) < ARPSize {
		return nil, ErrShort
	}
	return ARP(b[:ARPSize]), nil
}

func (a ARP) HType() uint16 { return be.Uint16(a[ARPOffHType:]) }
func (a ARP) PType() uint16 { return be.Uint16(a[ARPOffPType:]) }
func (a ARP) HLen() uint8   { return a[ARPOffHLen] }
func (a ARP) PLen() uint8   { return a[ARPOffPLen] }
func (a ARP) Op() uint16    { return be.Uint16(a[ARPOffOp:]) }
func (a ARP) SHA() MAC      { return MAC(a[ARPOffSHA : ARPOffSHA+6]) }
func (a ARP) SPA() IPv4Addr { return IPv4Addr(a[ARPOffSPA : ARPOffSPA+4]) }
func (a ARP) THA() MAC      { return MAC(a[ARPOffTHA : ARPOffTHA+6]) }
func (a ARP) TPA() IPv4Addr { return IPv4Addr(a[ARPOffTPA : ARPOffTPA+4]) }

// IsEthernetIPv4 reports whether the packet's address formats are the
// ones its offsets assume.
func (a ARP) IsEthernetIPv4() bool {
	return a.HType() == ARPHTypeEthernet && a.PType() == EtherTypeIPv4 && a.HLen() == 6 && a.PLen() == 4
}

func (a ARP) SetOp(op uint16)    { be.PutUint16(a[ARPOffOp:], op) }
func (a ARP) SetSHA(m MAC)       { copy(a[ARPOffSHA:ARPOffSHA+6], m[:]) }
func (a ARP) SetSPA(ip IPv4Addr) { copy(a[ARPOffSPA:ARPOffSPA+4], ip[:]) }
func (a ARP) SetTHA(m MAC)       { copy(a[ARPOffTHA:ARPOffTHA+6], m[:]) }
func (a ARP) SetTPA(ip IPv4Addr) { copy(a[ARPOffTPA:ARPOffTPA+4], ip[:]) }

// ARPFields is the fields of an ARP packet. An Ethernet/IPv4 packet has
// HType ARPHTypeEthernet, PType EtherTypeIPv4, HLen 6 and PLen 4.
type ARPFields struct {
	HType, PType uint16
	HLen, PLen   uint8
	Op           uint16
	SHA          MAC
	SPA          IPv4Addr
	THA          MAC
	TPA          IPv4Addr
}

// Encode writes the packet at the start of b and returns its length.
func (f *ARPFields) Encode(b []byte) int {
	a := ARP(b[:ARPSize])
	be.PutUint16(a[ARPOffHType:], f.HType)
	be.PutUint16(a[ARPOffPType:], f.PType)
	a[ARPOffHLen], a[ARPOffPLen] = f.HLen, f.PLen
	a.SetOp(f.Op)
	a.SetSHA(f.SHA)
	a.SetSPA(f.SPA)
	a.SetTHA(f.THA)
	a.SetTPA(f.TPA)
	return ARPSize
}

// Decode reads the packet at the start of b and returns its length.
func (f *ARPFields) Decode(b []byte) (int, error) {
	a, err := ParseARP(b)
	if err != nil {
		return 0, err
	}
	*f = ARPFields{HType: a.HType(), PType: a.PType(), HLen: a.HLen(), PLen: a.PLen(), Op: a.Op(),
		SHA: a.SHA(), SPA: a.SPA(), THA: a.THA(), TPA: a.TPA()}
	return ARPSize, nil
}
