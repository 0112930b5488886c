package hdr

// TCP header (RFC 9293 3.1):
//
//	0x00 u16 source port
//	0x02 u16 destination port
//	0x04 u32 sequence number
//	0x08 u32 acknowledgment number
//	0x0C u8  data offset (high nibble, header length in 32-bit words) | reserved
//	0x0D u8  flags: CWR ECE URG ACK PSH RST SYN FIN
//	0x0E u16 window
//	0x10 u16 checksum (over the IPv4 pseudo-header, the header and the payload)
//	0x12 u16 urgent pointer
//	0x14     options, to the data offset
const (
	TCPMinSize        = 20
	TCPMaxSize        = 60 // data offset 15
	TCPMaxOptionsSize = TCPMaxSize - TCPMinSize

	TCPOffSrcPort  = 0x00
	TCPOffDstPort  = 0x02
	TCPOffSeq      = 0x04
	TCPOffAck      = 0x08
	TCPOffDataOff  = 0x0C
	TCPOffFlags    = 0x0D
	TCPOffWindow   = 0x0E
	TCPOffChecksum = 0x10
	TCPOffUrgent   = 0x12

	TCPFlagFIN = 0x01
	TCPFlagSYN = 0x02
	TCPFlagRST = 0x04
	TCPFlagPSH = 0x08
	TCPFlagACK = 0x10
	TCPFlagURG = 0x20
	TCPFlagECE = 0x40
	TCPFlagCWR = 0x80
)

// TCP is a view of a TCP segment: the header, its options and the payload
// behind them.
type TCP []byte

// ParseTCP checks that b starts with a whole TCP header: the fixed 20 bytes
// and a data offset of at least 5 words that ends inside b. The segment is
// all of b (the IPv4 total length decides where it ends: pass
// IPv4.Payload()). Options are not looked at: OptionIter walks them.
func ParseTCP(b []byte) (TCP, error) {
	if len(b) < TCPMinSize {
		return nil, ErrShort
	}
	t := TCP(b)
	if off := t.HeaderLen(); off < TCPMinSize || off > len(b) {
		return nil, ErrHeaderLen
	}
	return t, nil
}

func (t TCP) SrcPort() uint16  { return be.Uint16(t[TCPOffSrcPort:]) }
func (t TCP) DstPort() uint16  { return be.Uint16(t[TCPOffDstPort:]) }
func (t TCP) Seq() uint32      { return be.Uint32(t[TCPOffSeq:]) }
func (t TCP) Ack() uint32      { return be.Uint32(t[TCPOffAck:]) }
func (t TCP) Flags() uint8     { return t[TCPOffFlags] }
func (t TCP) Window() uint16   { return be.Uint16(t[TCPOffWindow:]) }
func (t TCP) Checksum() uint16 { return be.Uint16(t[TCPOffChecksum:]) }
func (t TCP) Urgent() uint16   { return be.Uint16(t[TCPOffUrgent:]) }

// HeaderLen is the data offset in bytes: the header with its options.
func (t TCP) HeaderLen() int { return int(t[TCPOffDataOff]>>4) * 4 }

// Options is the option bytes, between the fixed header and the data.
func (t TCP) Options() []byte { return t[TCPMinSize:t.HeaderLen()] }

// Payload is the data behind the header.
func (t TCP) Payload() []byte { return t[t.HeaderLen():] }

// OptionIter walks the header's options.
func (t TCP) OptionIter() TCPOptionIter { return TCPOptionIter{rest: t.Options()} }

func (t TCP) SetSrcPort(p uint16)  { be.PutUint16(t[TCPOffSrcPort:], p) }
func (t TCP) SetDstPort(p uint16)  { be.PutUint16(t[TCPOffDstPort:], p) }
func (t TCP) SetSeq(v uint32)      { be.PutUint32(t[TCPOffSeq:], v) }
func (t TCP) SetAck(v uint32)      { be.PutUint32(t[TCPOffAck:], v) }
func (t TCP) SetFlags(f uint8)     { t[TCPOffFlags] = f }
func (t TCP) SetWindow(w uint16)   { be.PutUint16(t[TCPOffWindow:], w) }
func (t TCP) SetChecksum(v uint16) { be.PutUint16(t[TCPOffChecksum:], v) }
func (t TCP) SetUrgent(v uint16)   { be.PutUint16(t[TCPOffUrgent:], v) }

// SetHeaderLen writes the data offset for an n-byte header (n a multiple
// of 4, 20..60) and clears the reserved bits.
func (t TCP) SetHeaderLen(n int) { t[TCPOffDataOff] = uint8(n/4) << 4 }

// ChecksumOK verifies the checksum of the whole segment t between src and
// dst (the IPv4 header's source and destination).
func (t TCP) ChecksumOK(src, dst IPv4Addr) bool {
	return TransportChecksumOK(ProtoTCP, src, dst, t)
}

// UpdateChecksum computes and writes the checksum of the whole segment t.
func (t TCP) UpdateChecksum(src, dst IPv4Addr) {
	t.SetChecksum(0)
	t.SetChecksum(TransportChecksum(ProtoTCP, src, dst, t))
}

// TCPFields is the fields of a TCP header; options are the caller's to
// write behind the fixed part (the PutTCPOpt functions).
type TCPFields struct {
	SrcPort, DstPort uint16
	Seq, Ack         uint32
	HeaderLen        int // bytes, options included: 20..60, a multiple of 4; 0 is 20
	Flags            uint8
	Window           uint16
	Checksum         uint16 // written as given: UpdateChecksum computes it
	Urgent           uint16
}

// Encode writes the fixed 20 bytes of the header (and the data offset for
// HeaderLen) at the start of b and returns the header length.
func (f *TCPFields) Encode(b []byte) int {
	t := TCP(b[:TCPMinSize])
	n := f.HeaderLen
	if n == 0 {
		n = TCPMinSize
	}
	t.SetSrcPort(f.SrcPort)
	t.SetDstPort(f.DstPort)
	t.SetSeq(f.Seq)
	t.SetAck(f.Ack)
	t.SetHeaderLen(n)
	t.SetFlags(f.Flags)
	t.SetWindow(f.Window)
	t.SetChecksum(f.Checksum)
	t.SetUrgent(f.Urgent)
	return n
}

// Decode reads the header at the start of b, validated as ParseTCP does,
// and returns its length (options included).
func (f *TCPFields) Decode(b []byte) (int, error) {
	t, err := ParseTCP(b)
	if err != nil {
		return 0, err
	}
	*f = TCPFields{SrcPort: t.SrcPort(), DstPort: t.DstPort(), Seq: t.Seq(), Ack: t.Ack(),
		HeaderLen: t.HeaderLen(), Flags: t.Flags(), Window: t.Window(), Checksum: t.Checksum(),
		Urgent: t.Urgent()}
	return f.HeaderLen, nil
}
