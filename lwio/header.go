package lwio

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// All LWIO structures are little-endian: the source's types are those of a
// Windows x86/x64 host (UINT16, PVOID64), laid out with the C compiler's
// natural alignment. Where that alignment leaves holes, the holes are
// reserved bytes, written zero (docs/lwio.md names every one).
var le = binary.LittleEndian

// Common header: every client-to-server message on an RDMA connection
// starts with it (LWIO_COMMON_HEADER).
const (
	HeaderSize = 56

	HdrOffLength     = 0x00 // u32 request: bytes of data to read or write, or of the message
	HdrOffStatus     = 0x04 // u32 the same four bytes read as a status (server use)
	HdrOffOpcode     = 0x04 // u8 Opcode
	HdrOffFlags      = 0x05 // u8 Flags
	HdrOffCredits    = 0x06 // u8 the client's pending requests: a hint for credits
	HdrOffMarker     = 0x07 // u8 Marker on I/O requests
	HdrOffFid        = 0x08 // u16 file ID from registration
	HdrOffSequence   = 0x0A // u16
	HdrOffTid        = 0x0C // u32
	HdrOffOffset     = 0x10 // u64 file offset (CREDIT: upper 32 bits are the credit count)
	HdrOffDataVa     = 0x18 // u64 the client's buffer (RDMA tagged offset)
	HdrOffDataMh     = 0x20 // u32 its memory handle (STag)
	HdrOffNumPages   = 0x20 // u16 vectored I/O: regions (or pages) that follow
	HdrOffPageSize   = 0x22 // u16 vectored I/O: the client's page size
	HdrOffReserved1  = 0x24 // 4 bytes, alignment of the next union
	HdrOffIosMh      = 0x28 // u32 polling: the status block's memory handle
	HdrOffImmCookie  = 0x28 // u32 non-polling: the immediate data of an RDMA Write completion
	HdrOffReserved2  = 0x2C // 4 bytes, alignment
	HdrOffIosVa      = 0x30 // u64 polling: where the status block goes
	HdrOffCookie     = 0x30 // u64 non-polling: returned in the status response
	IOMarker         = 0xFF // Marker of read and write requests
	MaxCredits       = 255  // Credits is one byte
	HeaderSizeForAny = HeaderSize
)

// Opcode is a client request's operation.
type Opcode uint8

// Opcodes (LWIO_OPCODE_*).
const (
	OpRead      Opcode = 0x0
	OpWrite     Opcode = 0x1
	OpVecRead   Opcode = 0x2
	OpVecWrite  Opcode = 0x3
	OpClose     Opcode = 0x4
	OpCancel    Opcode = 0x5
	OpAuth      Opcode = 0x6
	OpRegister  Opcode = 0x7
	OpCredit    Opcode = 0x8
	OpInterrupt Opcode = 0x9
)

var opNames = [...]string{"READ", "WRITE", "VEC_READ", "VEC_WRITE", "CLOSE", "CANCEL", "AUTH", "REGISTER", "CREDIT", "INTERRUPT"}

func (o Opcode) String() string {
	if int(o) < len(opNames) {
		return opNames[o]
	}
	return fmt.Sprintf("OP_%#02x", uint8(o))
}

// Header flags (LWIO_HDR_FLAG_*).
const (
	FlagInterrupt  = 0x80 // complete by a send (non-polling); clear: RDMA the status block (polling)
	FlagControl    = 0x40 // a control request (INTERRUPT)
	FlagCollapseIO = 0x20 // vectored write: every page holds the same data, one page is sent
	FlagsDefined   = FlagInterrupt | FlagControl | FlagCollapseIO
)

// Errors of the codecs.
var (
	ErrShort   = errors.New("lwio: message shorter than its structure")
	ErrFlags   = errors.New("lwio: undefined header flags")
	ErrMagic   = errors.New("lwio: bad magic or protocol id")
	ErrVersion = errors.New("lwio: unsupported revision")
	ErrLength  = errors.New("lwio: a length field disagrees with the message")
)

// CommonHeader is a view of a common header.
type CommonHeader []byte

func (h CommonHeader) Length() uint32    { return le.Uint32(h[HdrOffLength:]) }
func (h CommonHeader) Opcode() Opcode    { return Opcode(h[HdrOffOpcode]) }
func (h CommonHeader) Flags() uint8      { return h[HdrOffFlags] }
func (h CommonHeader) Credits() uint8    { return h[HdrOffCredits] }
func (h CommonHeader) Fid() uint16       { return le.Uint16(h[HdrOffFid:]) }
func (h CommonHeader) Offset() uint64    { return le.Uint64(h[HdrOffOffset:]) }
func (h CommonHeader) Cookie() uint64    { return le.Uint64(h[HdrOffCookie:]) }
func (h CommonHeader) Polling() bool     { return h.Flags()&FlagInterrupt == 0 }
func (h CommonHeader) DataVa() uint64    { return le.Uint64(h[HdrOffDataVa:]) }
func (h CommonHeader) DataMh() uint32    { return le.Uint32(h[HdrOffDataMh:]) }
func (h CommonHeader) NumPages() int     { return int(le.Uint16(h[HdrOffNumPages:])) }
func (h CommonHeader) PageSize() int     { return int(le.Uint16(h[HdrOffPageSize:])) }
func (h CommonHeader) IosVa() uint64     { return le.Uint64(h[HdrOffIosVa:]) }
func (h CommonHeader) IosMh() uint32     { return le.Uint32(h[HdrOffIosMh:]) }
func (h CommonHeader) ImmCookie() uint32 { return le.Uint32(h[HdrOffImmCookie:]) }

// ParseHeader checks that b starts with a whole common header with only
// defined flags, and returns it.
func ParseHeader(b []byte) (CommonHeader, error) {
	if len(b) < HeaderSize {
		return nil, ErrShort
	}
	h := CommonHeader(b[:HeaderSize])
	if h.Flags()&^FlagsDefined != 0 {
		return nil, ErrFlags
	}
	return h, nil
}

// Header is the fields of a common header. The unions are flattened:
// DataMh and NumPages/PageSize share bytes (vectored requests use the
// latter), as do IosMh/IosVa and ImmCookie/Cookie (polling requests use the
// former); Encode writes the ones the request's kind uses.
type Header struct {
	Length    uint32
	Opcode    Opcode
	Flags     uint8
	Credits   uint8
	Marker    uint8
	Fid       uint16
	Sequence  uint16
	Tid       uint32
	Offset    uint64
	DataVa    uint64
	DataMh    uint32 // non-vectored
	NumPages  uint16 // vectored
	PageSize  uint16 // vectored
	IosMh     uint32 // polling
	IosVa     uint64 // polling
	ImmCookie uint32 // non-polling
	Cookie    uint64 // non-polling
}

// Vectored reports whether the request's opcode uses NumPages/PageSize.
func (h *Header) Vectored() bool { return h.Opcode == OpVecRead || h.Opcode == OpVecWrite }

// Encode writes the header at the start of b (HeaderSize bytes).
func (h *Header) Encode(b []byte) {
	b = b[:HeaderSize]
	clear(b)
	le.PutUint32(b[HdrOffLength:], h.Length)
	b[HdrOffOpcode], b[HdrOffFlags], b[HdrOffCredits], b[HdrOffMarker] = uint8(h.Opcode), h.Flags, h.Credits, h.Marker
	le.PutUint16(b[HdrOffFid:], h.Fid)
	le.PutUint16(b[HdrOffSequence:], h.Sequence)
	le.PutUint32(b[HdrOffTid:], h.Tid)
	le.PutUint64(b[HdrOffOffset:], h.Offset)
	le.PutUint64(b[HdrOffDataVa:], h.DataVa)
	if h.Vectored() {
		le.PutUint16(b[HdrOffNumPages:], h.NumPages)
		le.PutUint16(b[HdrOffPageSize:], h.PageSize)
	} else {
		le.PutUint32(b[HdrOffDataMh:], h.DataMh)
	}
	if h.Flags&FlagInterrupt == 0 {
		le.PutUint32(b[HdrOffIosMh:], h.IosMh)
		le.PutUint64(b[HdrOffIosVa:], h.IosVa)
	} else {
		le.PutUint32(b[HdrOffImmCookie:], h.ImmCookie)
		le.PutUint64(b[HdrOffCookie:], h.Cookie)
	}
}

// Decode reads a common header from the start of b.
func (h *Header) Decode(b []byte) error {
	v, err := ParseHeader(b)
	if err != nil {
		return err
	}
	*h = Header{Length: v.Length(), Opcode: v.Opcode(), Flags: v.Flags(), Credits: v.Credits(), Marker: v[HdrOffMarker],
		Fid: v.Fid(), Sequence: le.Uint16(v[HdrOffSequence:]), Tid: le.Uint32(v[HdrOffTid:]), Offset: v.Offset(),
		DataVa: v.DataVa()}
	if h.Vectored() {
		h.NumPages, h.PageSize = uint16(v.NumPages()), uint16(v.PageSize())
	} else {
		h.DataMh = v.DataMh()
	}
	if v.Polling() {
		h.IosMh, h.IosVa = v.IosMh(), v.IosVa()
	} else {
		h.ImmCookie, h.Cookie = v.ImmCookie(), v.Cookie()
	}
	return nil
}

// Polling reports whether the request completes by a status block
// RDMA-written to IosVa/IosMh (FlagInterrupt clear).
func (h *Header) Polling() bool { return h.Flags&FlagInterrupt == 0 }
