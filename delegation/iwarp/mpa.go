package iwarp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// MPA (RFC 5044): the connection set-up frames exchanged once at the start of
// the TCP stream, then FPDU framing of every DDP segment.
//
// MPA request/reply frame (all multi-byte fields big-endian):
//
//	0x00 [16] Key: "MPA ID Req Frame" or "MPA ID Rep Frame"
//	0x10 u8   M (0x80) | C (0x40) | R (0x20) | S (0x10, revision 2) | Res (0x0F, zero)
//	0x11 u8   Rev (1 or 2)
//	0x12 u16  PD_Length: bytes of private data that follow (at most 512)
//	0x14 [PD_Length] private data; with S, it starts with the 4-byte
//	          enhanced connection data of RFC 6581 (MPAv2Data, mpa_v2.go)
//
// FPDU (markers off):
//
//	0x00 u16  ULPDU_Length (big-endian)
//	0x02 [ULPDU_Length] ULPDU (the DDP segment)
//	     [0..3] pad: zeros up to a multiple of 4 of 2+ULPDU_Length
//	     u32  CRC-32C of everything before it, LITTLE-endian on the wire
//
// The CRC byte order is the trap: RFC 5044 describes the CRC "in network
// order", but what Linux siw, Chelsio and Wireshark put on the wire is the
// CRC-32C register as it falls out of the reflected algorithm, least
// significant byte first (the same bytes iSCSI sends). tshark's
// iwarp_mpa.crc_check agrees only with that order (TestTsharkDecodesSession).
const (
	MPAKeyLen         = 16
	MPAFrameHeaderLen = 20 // key, flags, revision, PD_Length
	MPAMaxPrivateData = 512
	// MPARevision1 is RFC 5044's revision; MPARevision2 RFC 6581's (the
	// enhanced connection set-up: IRD/ORD, peer-to-peer mode).
	MPARevision1 = 1
	MPARevision2 = 2
	// MPARevision is the revision an initiator sends by default.
	MPARevision = MPARevision2

	MPAOffKey     = 0x00
	MPAOffFlags   = 0x10
	MPAOffRev     = 0x11
	MPAOffPDLen   = 0x12
	MPAOffPrivate = 0x14

	MPAFlagMarkers  = 0x80 // M: markers requested (we never do; a request with M is rejected)
	MPAFlagCRC      = 0x40 // C: the sender wants CRC-32C (used both ways if either side sets it)
	MPAFlagReject   = 0x20 // R: reply rejects the connection
	MPAFlagEnhanced = 0x10 // S (RFC 6581): the private data starts with MPAv2Data (revision 2 only)
	MPAFlagReserved = 0x0F // Res: zero on send, ignored on receipt (siw uses 0x08 for its GSO hint)

	FPDUHeaderLen = 2 // ULPDU_Length
	MPACRCLen     = 4
	// MaxULPDU is the largest ULPDU an FPDU can carry (a 16-bit length).
	MaxULPDU = 0xFFFF
	// MaxFPDULen is the largest FPDU on the wire (2 + 65535 + 3 pad + 4).
	MaxFPDULen = FPDUHeaderLen + MaxULPDU + 3 + MPACRCLen
	// MinFPDUOverhead is the framing added to a ULPDU whose 2+length is a
	// multiple of 4 (no pad).
	MinFPDUOverhead = FPDUHeaderLen + MPACRCLen
)

// The MPA keys.
const (
	MPAKeyRequest = "MPA ID Req Frame"
	MPAKeyReply   = "MPA ID Rep Frame"
)

var be = binary.BigEndian

// castagnoli is the CRC-32C table (hardware-accelerated by hash/crc32 where
// the CPU has it).
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// CRC32C returns the CRC-32C of b as MPA computes it.
func CRC32C(b []byte) uint32 { return crc32.Checksum(b, castagnoli) }

// Errors of the wire-format decoders. Every decoder wraps one of these.
var (
	ErrShort     = errors.New("iwarp: truncated")
	ErrBadKey    = errors.New("iwarp: MPA key is not a request/reply key")
	ErrBadLength = errors.New("iwarp: length field out of range")
	ErrBadCRC    = errors.New("iwarp: MPA CRC mismatch")
)

func errShort(what string, got, want int) error {
	return fmt.Errorf("%w: %s of %d bytes, need %d", ErrShort, what, got, want)
}

// MPAFrame is an accessor over an MPA request or reply frame.
type MPAFrame []byte

func (f MPAFrame) Key() []byte            { return f[MPAOffKey : MPAOffKey+MPAKeyLen] }
func (f MPAFrame) IsRequest() bool        { return string(f.Key()) == MPAKeyRequest }
func (f MPAFrame) IsReply() bool          { return string(f.Key()) == MPAKeyReply }
func (f MPAFrame) Flags() uint8           { return f[MPAOffFlags] }
func (f MPAFrame) Markers() bool          { return f[MPAOffFlags]&MPAFlagMarkers != 0 }
func (f MPAFrame) CRC() bool              { return f[MPAOffFlags]&MPAFlagCRC != 0 }
func (f MPAFrame) Reject() bool           { return f[MPAOffFlags]&MPAFlagReject != 0 }
func (f MPAFrame) Enhanced() bool         { return f[MPAOffFlags]&MPAFlagEnhanced != 0 }
func (f MPAFrame) Rev() uint8             { return f[MPAOffRev] }
func (f MPAFrame) PrivateDataLen() uint16 { return be.Uint16(f[MPAOffPDLen:]) }

// PrivateData returns the private data; f must hold the whole frame.
func (f MPAFrame) PrivateData() []byte {
	return f[MPAOffPrivate : MPAOffPrivate+int(f.PrivateDataLen())]
}

// MPAFrameFields is the fields of an MPA request or reply frame.
type MPAFrameFields struct {
	Reply       bool // key: "MPA ID Rep Frame" (else the request key)
	Markers     bool
	CRC         bool
	Reject      bool
	Enhanced    bool  // S: PrivateData starts with the RFC 6581 enhanced connection data
	Res         uint8 // reserved flag bits (low 4); zero on send
	Rev         uint8
	PrivateData []byte // at most MPAMaxPrivateData bytes
}

// Len is the encoded size.
func (m *MPAFrameFields) Len() int { return MPAFrameHeaderLen + len(m.PrivateData) }

// Encode writes the frame into b (at least Len bytes) and returns its length.
// It panics if the private data is longer than MPAMaxPrivateData: that is a
// local bug, never input from the wire.
func (m *MPAFrameFields) Encode(b []byte) int {
	if len(m.PrivateData) > MPAMaxPrivateData {
		panic("iwarp: MPA private data longer than 512 bytes")
	}
	_ = b[m.Len()-1]
	key := MPAKeyRequest
	if m.Reply {
		key = MPAKeyReply
	}
	copy(b[MPAOffKey:], key)
	fl := m.Res & MPAFlagReserved
	if m.Markers {
		fl |= MPAFlagMarkers
	}
	if m.CRC {
		fl |= MPAFlagCRC
	}
	if m.Reject {
		fl |= MPAFlagReject
	}
	if m.Enhanced {
		fl |= MPAFlagEnhanced
	}
	b[MPAOffFlags] = fl
	b[MPAOffRev] = m.Rev
	be.PutUint16(b[MPAOffPDLen:], uint16(len(m.PrivateData)))
	copy(b[MPAOffPrivate:], m.PrivateData)
	return m.Len()
}

// Decode reads a whole frame from the start of b and returns its length.
// PrivateData aliases b. It fails on a truncated frame, on a key that is
// neither the request's nor the reply's, and on a private data length above
// MPAMaxPrivateData (checked before the private data is waited for: a peer
// cannot make us hold 64 KiB of set-up bytes). Revision and flags are
// returned, not judged.
func (m *MPAFrameFields) Decode(b []byte) (int, error) {
	if len(b) < MPAFrameHeaderLen {
		return 0, errShort("MPA frame header", len(b), MPAFrameHeaderLen)
	}
	f := MPAFrame(b)
	switch {
	case f.IsRequest():
		m.Reply = false
	case f.IsReply():
		m.Reply = true
	default:
		return 0, ErrBadKey
	}
	n := int(f.PrivateDataLen())
	if n > MPAMaxPrivateData {
		return 0, fmt.Errorf("%w: MPA private data length %d > %d", ErrBadLength, n, MPAMaxPrivateData)
	}
	if len(b) < MPAFrameHeaderLen+n {
		return 0, errShort("MPA frame", len(b), MPAFrameHeaderLen+n)
	}
	fl := f.Flags()
	m.Markers = fl&MPAFlagMarkers != 0
	m.CRC = fl&MPAFlagCRC != 0
	m.Reject = fl&MPAFlagReject != 0
	m.Enhanced = fl&MPAFlagEnhanced != 0
	m.Res = fl & MPAFlagReserved
	m.Rev = f.Rev()
	m.PrivateData = b[MPAOffPrivate : MPAOffPrivate+n : MPAOffPrivate+n]
	return MPAFrameHeaderLen + n, nil
}

// MPAPad is the number of pad bytes after a ULPDU of n bytes.
func MPAPad(n int) int { return -(FPDUHeaderLen + n) & 3 }

// FPDULen is the wire size of the FPDU carrying a ULPDU of n bytes.
func FPDULen(n int) int { return FPDUHeaderLen + n + MPAPad(n) + MPACRCLen }

// MULPDU is the largest ULPDU whose FPDU fits in mss bytes (RFC 5044's
// MULPDU with markers off), or 0 if not even an empty one does.
func MULPDU(mss int) int {
	if mss > MaxFPDULen {
		mss = MaxFPDULen
	}
	n := (mss-MPACRCLen)&^3 - FPDUHeaderLen
	if n > MaxULPDU {
		n = MaxULPDU
	}
	if n < 0 {
		return 0
	}
	return n
}

// FPDU is an accessor over one FPDU (b must hold at least the length field).
type FPDU []byte

func (f FPDU) ULPDULen() int { return int(be.Uint16(f)) }

// WireLen is the total length of the FPDU per its length field.
func (f FPDU) WireLen() int { return FPDULen(f.ULPDULen()) }

// ULPDU returns the ULPDU; f must hold the whole FPDU.
func (f FPDU) ULPDU() []byte {
	n := f.ULPDULen()
	return f[FPDUHeaderLen : FPDUHeaderLen+n : FPDUHeaderLen+n]
}

// CRC returns the received CRC field (little-endian on the wire).
func (f FPDU) CRC() uint32 {
	n := f.WireLen()
	return binary.LittleEndian.Uint32(f[n-MPACRCLen:])
}

// Verify checks the CRC of the whole FPDU at the start of f.
func (f FPDU) Verify() bool {
	n := f.WireLen()
	return CRC32C(f[:n-MPACRCLen]) == binary.LittleEndian.Uint32(f[n-MPACRCLen:])
}

// SealFPDU completes an FPDU whose ULPDU of n bytes is already at b[2:]: it
// writes the length field, zeroes the pad, appends the CRC and returns the
// FPDU length. b must hold FPDULen(n) bytes.
func SealFPDU(b []byte, n int) int { return sealFPDU(b, n, true) }

// sealFPDU is SealFPDU with the CRC field zero when crc is false (MPA
// without CRC: the field is still there, RFC 5044 §5.1).
func sealFPDU(b []byte, n int, crc bool) int {
	total := FPDULen(n)
	_ = b[total-1]
	be.PutUint16(b, uint16(n))
	end := FPDUHeaderLen + n
	for i := end; i < total-MPACRCLen; i++ {
		b[i] = 0
	}
	var c uint32
	if crc {
		c = CRC32C(b[:total-MPACRCLen])
	}
	binary.LittleEndian.PutUint32(b[total-MPACRCLen:], c)
	return total
}

// FPDUFields is an FPDU as a value: the ULPDU it carries.
type FPDUFields struct {
	ULPDU []byte // at most MaxULPDU bytes
}

// Len is the encoded size.
func (p *FPDUFields) Len() int { return FPDULen(len(p.ULPDU)) }

// Encode writes the FPDU into b and returns its length.
func (p *FPDUFields) Encode(b []byte) int {
	if len(p.ULPDU) > MaxULPDU {
		panic("iwarp: ULPDU longer than 65535 bytes")
	}
	copy(b[FPDUHeaderLen:p.Len()-MPACRCLen], p.ULPDU)
	return SealFPDU(b, len(p.ULPDU))
}

// Decode reads one FPDU from the start of b, verifies its CRC and returns its
// length. ULPDU aliases b.
func (p *FPDUFields) Decode(b []byte) (int, error) {
	if len(b) < FPDUHeaderLen {
		return 0, errShort("FPDU length field", len(b), FPDUHeaderLen)
	}
	f := FPDU(b)
	n := f.WireLen()
	if len(b) < n {
		return 0, errShort("FPDU", len(b), n)
	}
	if !f.Verify() {
		return 0, ErrBadCRC
	}
	p.ULPDU = f.ULPDU()
	return n, nil
}
