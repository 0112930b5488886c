package iwarp

import "fmt"

// DDP (RFC 5041) segment headers. The first two bytes are shared: the DDP
// control byte and the first byte of RsvdULP, which RDMAP uses as its control
// byte (rdmap.go). All multi-byte fields are big-endian.
//
// Tagged buffer model (14 bytes):
//
//	0x00 u8  T (0x80) | L (0x40) | Rsvd (0x3C) | DV (0x03, = 1)
//	0x01 u8  RsvdULP: the RDMAP control byte
//	0x02 u32 STag (data sink)
//	0x06 u64 TO (tagged offset)
//
// Untagged buffer model (18 bytes):
//
//	0x00 u8  T=0 | L | Rsvd | DV
//	0x01 u8  RsvdULP[0]: the RDMAP control byte
//	0x02 u32 RsvdULP[1..4]: zero, or the Invalidate STag of Send with Invalidate
//	0x06 u32 QN  (queue number)
//	0x0A u32 MSN (message sequence number, 1 for a queue's first message)
//	0x0E u32 MO  (message offset of this segment's first payload byte)
const (
	DDPTaggedHeaderLen   = 14
	DDPUntaggedHeaderLen = 18
	DDPVersion           = 1

	DDPOffCtrl    = 0x00
	DDPOffULPCtrl = 0x01
	DDPOffSTag    = 0x02 // tagged
	DDPOffTO      = 0x06 // tagged
	DDPOffULP32   = 0x02 // untagged: RsvdULP bytes 1..4
	DDPOffQN      = 0x06 // untagged
	DDPOffMSN     = 0x0A // untagged
	DDPOffMO      = 0x0E // untagged

	DDPFlagTagged   = 0x80
	DDPFlagLast     = 0x40
	DDPMaskReserved = 0x3C
	DDPMaskVersion  = 0x03
)

// Untagged queue numbers used by RDMAP (RFC 5040 §5.1, RFC 7306 §8.1).
const (
	QNSend           = 0 // Send family and Immediate Data
	QNReadRequest    = 1
	QNTerminate      = 2
	QNAtomicRequest  = 3 // RFC 7306
	QNAtomicResponse = 4 // RFC 7306 (uses the requester's QN 1-style response queue)
)

// DDPHeader is an accessor over a tagged or untagged DDP header (b must hold
// the header its T flag announces).
type DDPHeader []byte

func (h DDPHeader) Ctrl() uint8      { return h[DDPOffCtrl] }
func (h DDPHeader) Tagged() bool     { return h[DDPOffCtrl]&DDPFlagTagged != 0 }
func (h DDPHeader) Last() bool       { return h[DDPOffCtrl]&DDPFlagLast != 0 }
func (h DDPHeader) Version() uint8   { return h[DDPOffCtrl] & DDPMaskVersion }
func (h DDPHeader) Reserved() uint8  { return (h[DDPOffCtrl] & DDPMaskReserved) >> 2 }
func (h DDPHeader) ULPCtrl() uint8   { return h[DDPOffULPCtrl] }
func (h DDPHeader) STag() uint32     { return be.Uint32(h[DDPOffSTag:]) }
func (h DDPHeader) TO() uint64       { return be.Uint64(h[DDPOffTO:]) }
func (h DDPHeader) ULP32() uint32    { return be.Uint32(h[DDPOffULP32:]) }
func (h DDPHeader) QN() uint32       { return be.Uint32(h[DDPOffQN:]) }
func (h DDPHeader) MSN() uint32      { return be.Uint32(h[DDPOffMSN:]) }
func (h DDPHeader) MO() uint32       { return be.Uint32(h[DDPOffMO:]) }
func (h DDPHeader) Opcode() Opcode   { return Opcode(h[DDPOffULPCtrl] & RDMAPMaskOpcode) }
func (h DDPHeader) RDMAPVer() uint8  { return h[DDPOffULPCtrl] >> 6 }
func (h DDPHeader) HeaderLen() int   { return DDPHeaderLen(h[DDPOffCtrl]) }
func (h DDPHeader) SetMO(v uint32)   { be.PutUint32(h[DDPOffMO:], v) }
func (h DDPHeader) SetTO(v uint64)   { be.PutUint64(h[DDPOffTO:], v) }
func (h DDPHeader) SetLast(on bool)  { h[DDPOffCtrl] = setBit(h[DDPOffCtrl], DDPFlagLast, on) }
func (h DDPHeader) SetMSN(v uint32)  { be.PutUint32(h[DDPOffMSN:], v) }
func (h DDPHeader) SetSTag(v uint32) { be.PutUint32(h[DDPOffSTag:], v) }

func setBit(b, bit uint8, on bool) uint8 {
	if on {
		return b | bit
	}
	return b &^ bit
}

// DDPHeaderLen is the header length a DDP control byte announces.
func DDPHeaderLen(ctrl uint8) int {
	if ctrl&DDPFlagTagged != 0 {
		return DDPTaggedHeaderLen
	}
	return DDPUntaggedHeaderLen
}

// DDP is the fields of a DDP header.
type DDP struct {
	Tagged   bool
	Last     bool
	Reserved uint8 // the 4 reserved bits; zero on send, ignored on receipt
	Version  uint8 // DV; DDPVersion
	ULPCtrl  uint8 // RsvdULP[0]: the RDMAP control byte
	// Tagged.
	STag uint32
	TO   uint64
	// Untagged.
	ULP32 uint32 // RsvdULP[1..4]: Invalidate STag or zero
	QN    uint32
	MSN   uint32
	MO    uint32
}

// Len is the encoded header size.
func (d *DDP) Len() int {
	if d.Tagged {
		return DDPTaggedHeaderLen
	}
	return DDPUntaggedHeaderLen
}

// Encode writes the header into b and returns its length.
func (d *DDP) Encode(b []byte) int {
	c := d.Version&DDPMaskVersion | d.Reserved<<2&DDPMaskReserved
	if d.Last {
		c |= DDPFlagLast
	}
	if d.Tagged {
		_ = b[DDPTaggedHeaderLen-1]
		b[DDPOffCtrl] = c | DDPFlagTagged
		b[DDPOffULPCtrl] = d.ULPCtrl
		be.PutUint32(b[DDPOffSTag:], d.STag)
		be.PutUint64(b[DDPOffTO:], d.TO)
		return DDPTaggedHeaderLen
	}
	_ = b[DDPUntaggedHeaderLen-1]
	b[DDPOffCtrl] = c
	b[DDPOffULPCtrl] = d.ULPCtrl
	be.PutUint32(b[DDPOffULP32:], d.ULP32)
	be.PutUint32(b[DDPOffQN:], d.QN)
	be.PutUint32(b[DDPOffMSN:], d.MSN)
	be.PutUint32(b[DDPOffMO:], d.MO)
	return DDPUntaggedHeaderLen
}

// Decode reads a header from the start of b and returns its length. It fails
// only if b is shorter than the header the T flag announces; field values are
// the receiver's to judge.
func (d *DDP) Decode(b []byte) (int, error) {
	if len(b) < 1 {
		return 0, errShort("DDP header", 0, DDPTaggedHeaderLen)
	}
	n := DDPHeaderLen(b[0])
	if len(b) < n {
		return 0, errShort("DDP header", len(b), n)
	}
	h := DDPHeader(b)
	*d = DDP{Tagged: h.Tagged(), Last: h.Last(), Reserved: h.Reserved(), Version: h.Version(),
		ULPCtrl: h.ULPCtrl()}
	if d.Tagged {
		d.STag, d.TO = h.STag(), h.TO()
	} else {
		d.ULP32, d.QN, d.MSN, d.MO = h.ULP32(), h.QN(), h.MSN(), h.MO()
	}
	return n, nil
}

func (d *DDP) String() string {
	if d.Tagged {
		return fmt.Sprintf("DDP{T L=%v DV=%d ulp=%#02x STag=%#08x TO=%#x}", d.Last, d.Version, d.ULPCtrl, d.STag, d.TO)
	}
	return fmt.Sprintf("DDP{U L=%v DV=%d ulp=%#02x ulp32=%#x QN=%d MSN=%d MO=%d}", d.Last, d.Version, d.ULPCtrl, d.ULP32, d.QN, d.MSN, d.MO)
}
