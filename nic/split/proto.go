package split

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

var le = binary.LittleEndian

// Message header: every message, both ways.
const (
	HeaderSize = 16

	HdrOffMagic   = 0x00 // u32 Magic
	HdrOffVersion = 0x04 // u16 Version
	HdrOffType    = 0x06 // u16 MsgType
	HdrOffLen     = 0x08 // u32 body length in bytes, at most MaxBody
	HdrOffSeq     = 0x0C // u32 the host's request number; a reply echoes it

	Magic   = 0x434E4D45 // "EMNC" in little-endian byte order
	Version = 2          // 2: the rings and the start are register writes (REG_WRITE), no longer RINGS and START
	MaxBody = 64 << 10   // bytes; a larger length is BAD_MESSAGE
	// MaxFDs is the most file descriptors one message carries.
	MaxFDs = 4
)

// MsgType names a message.
type MsgType uint16

// Requests (host → device). A reply has the request's type with
// MsgReplyBit set.
const (
	MsgHello    MsgType = 0x01 // body: u64 features the host wants
	MsgMemory   MsgType = 0x02 // body: u64 size; fd: a memfd of at least size bytes
	MsgConfig   MsgType = 0x03 // body: the device configuration (JSON of nic.Config); fd: the port, with FeaturePortFD
	MsgVectors  MsgType = 0x05 // body: u32 VectorMode, u32 poll interval in µs; fds: doorbell, notify, txspace, command
	MsgReset    MsgType = 0x07 // body: empty; the device is reset and forgets the memory, the port and the vectors
	MsgLink     MsgType = 0x08 // body: LINK body; fds: the link's memfd, this side's eventfd, the peer's (FeatureShmLink)
	MsgRegRead  MsgType = 0x09 // body: u32 register offset; the reply's value is the register's
	MsgRegWrite MsgType = 0x0A // body: u32 register offset, u32 value
	// MsgRegPost is REG_WRITE posted, for the doorbell registers: no
	// reply unless the write is refused (RegPostRefusal).
	MsgRegPost MsgType = 0x0B

	MsgReplyBit MsgType = 0x8000
)

var msgNames = map[MsgType]string{MsgHello: "HELLO", MsgMemory: "MEMORY", MsgConfig: "CONFIG",
	MsgVectors: "VECTORS", MsgReset: "RESET", MsgLink: "LINK", MsgRegRead: "REG_READ", MsgRegWrite: "REG_WRITE", MsgRegPost: "REG_POST"}

func (t MsgType) String() string {
	if t&MsgReplyBit != 0 {
		return "REPLY(" + (t &^ MsgReplyBit).String() + ")"
	}
	if s, ok := msgNames[t]; ok {
		return s
	}
	return fmt.Sprintf("MSG_%#04x", uint16(t))
}

// Features (HELLO): the host asks, the device grants what it has.
const (
	FeatureEventFD uint64 = 1 << 0 // doorbell and interrupt vectors as eventfds
	FeaturePoll    uint64 = 1 << 1 // no fds: both sides poll the rings
	FeaturePortFD  uint64 = 1 << 2 // the host supplies the device's port with CONFIG
	FeatureShmLink uint64 = 1 << 3 // the device's port is a shared-memory link to another device (LINK)
	// FeatureKickWords: each eventfd has a word in host memory counting the
	// kicks its reader has not taken yet, and a kick writes the eventfd only
	// when that count was zero (VECTORS carries the words' address).
	FeatureKickWords uint64 = 1 << 4
	FeaturesAll             = FeatureEventFD | FeaturePoll | FeaturePortFD | FeatureShmLink | FeatureKickWords
)

// Reply body.
const (
	ReplyOffStatus = 0x00 // u32 ReplyStatus
	ReplyOffRsvd   = 0x04 // u32 reserved, zero
	ReplyOffValue  = 0x08 // u64 HELLO: the features granted; else 0
	ReplyOffMsg    = 0x10 // UTF-8 message to the end of the body (empty on OK)
	ReplyMinSize   = 0x10
)

// ReplyStatus is a reply's verdict.
type ReplyStatus uint32

const (
	StatusOK          ReplyStatus = 0
	StatusBadMessage  ReplyStatus = 1 // malformed: bad magic, version, length, body or fds
	StatusOutOfOrder  ReplyStatus = 2 // not valid in the session's state (see docs/split.md)
	StatusBadMemory   ReplyStatus = 3 // the memfd is too small or cannot be mapped
	StatusBadConfig   ReplyStatus = 4 // the configuration is refused
	StatusBadRings    ReplyStatus = 5 // version 1's RINGS only (a reserved number in version 2)
	StatusStartFailed ReplyStatus = 6 // version 1's START only (a reserved number in version 2)
	StatusUnsupported ReplyStatus = 7 // a feature or mode the device does not have
	StatusBadRegister ReplyStatus = 8 // the register block refused the access; the reply's value is its rings.Bar0ErrCode
)

var statusNames = []string{"OK", "BAD_MESSAGE", "OUT_OF_ORDER", "BAD_MEMORY", "BAD_CONFIG", "BAD_RINGS",
	"START_FAILED", "UNSUPPORTED", "BAD_REGISTER"}

func (s ReplyStatus) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return fmt.Sprintf("STATUS_%d", uint32(s))
}

// REG_READ and REG_WRITE bodies: a register access of the device's
// register block (rings/bar0.go, docs/bar0.md).
const (
	RegReadBodySize  = 4
	RegWriteBodySize = 8
	RegOffOffset     = 0x00 // u32 the register's offset in the block
	RegOffValue      = 0x04 // u32 REG_WRITE: the value written
)

// EncodeRegRead returns the REG_READ body.
func EncodeRegRead(off uint32) []byte {
	b := make([]byte, RegReadBodySize)
	le.PutUint32(b, off)
	return b
}

// EncodeRegWrite returns the REG_WRITE body.
func EncodeRegWrite(off, v uint32) []byte {
	b := make([]byte, RegWriteBodySize)
	le.PutUint32(b[RegOffOffset:], off)
	le.PutUint32(b[RegOffValue:], v)
	return b
}

// RegPostRefusal is a refused REG_POST's reply value: the error code in
// bits 0–15, the register's offset in bits 16–31 and the value written in
// bits 32–63, since no request waits for the reply to name the write.
func RegPostRefusal(e rings.Bar0ErrCode, off, v uint32) uint64 {
	return uint64(e)&0xFFFF | uint64(off&0xFFFF)<<16 | uint64(v)<<32
}

// DecodeRegPostRefusal is RegPostRefusal's inverse.
func DecodeRegPostRefusal(x uint64) (e rings.Bar0ErrCode, off, v uint32) {
	return rings.Bar0ErrCode(x & 0xFFFF), uint32(x>>16) & 0xFFFF, uint32(x >> 32)
}

// AppendRegPost appends a whole REG_POST message (header and body) to
// dst: a doorbell's message, built without an allocation.
func AppendRegPost(dst []byte, seq, off, v uint32) []byte {
	var m [HeaderSize + RegWriteBodySize]byte
	(&Header{Type: MsgRegPost, Len: RegWriteBodySize, Seq: seq}).Encode(m[:])
	le.PutUint32(m[HeaderSize+RegOffOffset:], off)
	le.PutUint32(m[HeaderSize+RegOffValue:], v)
	return append(dst, m[:]...)
}

// DecodeReg reads a REG_READ (value 0) or REG_WRITE body.
func DecodeReg(t MsgType, b []byte) (off, v uint32, err error) {
	want := RegReadBodySize
	if t == MsgRegWrite || t == MsgRegPost {
		want = RegWriteBodySize
	}
	if len(b) != want {
		return 0, 0, fmt.Errorf("%v body of %d bytes, want %d", t, len(b), want)
	}
	if want == RegWriteBodySize {
		v = le.Uint32(b[RegOffValue:])
	}
	return le.Uint32(b[RegOffOffset:]), v, nil
}

// LINK body: one side of a shared-memory link (nic/port's ShmPort).
const (
	LinkBodySize = 16
	LinkOffSide  = 0x00 // u32 this device's side, 0 or 1 (ring i carries side i's frames)
	LinkOffEntry = 0x04 // u32 bytes per ring entry (as port.ShmLinkGeometry gives for the frame size)
	LinkOffSize  = 0x08 // u64 bytes of link memory
)

// EncodeLink returns the LINK body.
func EncodeLink(side int, entry uint32, size uint64) []byte {
	b := make([]byte, LinkBodySize)
	le.PutUint32(b[LinkOffSide:], uint32(side))
	le.PutUint32(b[LinkOffEntry:], entry)
	le.PutUint64(b[LinkOffSize:], size)
	return b
}

// DecodeLink reads a LINK body.
func DecodeLink(b []byte) (side int, entry uint32, size uint64, err error) {
	if len(b) != LinkBodySize {
		return 0, 0, 0, fmt.Errorf("LINK body of %d bytes, want %d", len(b), LinkBodySize)
	}
	return int(le.Uint32(b[LinkOffSide:])), le.Uint32(b[LinkOffEntry:]), le.Uint64(b[LinkOffSize:]), nil
}

// VECTORS body.
const (
	VectorsBodySize   = 8
	VecOffMode        = 0x00 // u32 VectorMode
	VecOffPollMicros  = 0x04 // u32 VectorPoll: µs between polls, 0 = DefaultPollMicros
	VectorEventFD     = 0    // four eventfds: doorbell (host kicks), notify, txspace, command (device kicks)
	VectorPoll        = 1    // no fds: the device polls its doorbell, the host its vectors
	DefaultPollMicros = 50
	MaxPollMicros     = 100000

	// With FeatureKickWords the body may be VectorsKickBodySize bytes: the
	// kick words' DMA address follows (0: none, the eventfds alone).
	VectorsKickBodySize = 16
	VecOffKickWords     = 0x08 // u64 DMA address of the kick words, KickWordsAlign-aligned, or 0
)

// Kick words (FeatureKickWords): one u32 per eventfd of VECTORS, in the
// same order, each on a cache line of its own, since each is written by
// both sides.
const (
	KickWordsSize   = 4 * KickWordStride // bytes at the kick words' address
	KickWordStride  = 64                 // bytes from one word to the next
	KickWordsAlign  = 64                 // the address is a multiple of this
	KickWordDoor    = 0                  // the doorbell's word (the host adds, the device takes)
	KickWordNotify  = 1                  // the notification vector's (the device adds, the host takes)
	KickWordTxSpace = 2                  // the transmit-space vector's
	KickWordCommand = 3                  // the command vector's
	// MaxPendingKicks is the most kicks a word may count: a reader that
	// takes more has found garbage, counts it and takes one kick.
	MaxPendingKicks = 1 << 20
)

// KickWord is eventfd i's kick word (KickWordDoor, ...) in words, the
// KickWordsSize bytes at the kick words' address as mapped here.
func KickWord(words []byte, i int) *uint32 {
	return (*uint32)(unsafe.Pointer(&words[i*KickWordStride]))
}

// Errors of the codec.
var (
	ErrShort   = errors.New("split: message shorter than its header or length")
	ErrMagic   = errors.New("split: bad magic")
	ErrVersion = errors.New("split: unsupported protocol version")
	ErrTooLong = errors.New("split: body longer than MaxBody")
)

// Header is a message header's fields.
type Header struct {
	Type MsgType
	Len  uint32
	Seq  uint32
}

// Encode writes the header (with Magic and Version) at the start of b.
func (h *Header) Encode(b []byte) {
	b = b[:HeaderSize]
	le.PutUint32(b[HdrOffMagic:], Magic)
	le.PutUint16(b[HdrOffVersion:], Version)
	le.PutUint16(b[HdrOffType:], uint16(h.Type))
	le.PutUint32(b[HdrOffLen:], h.Len)
	le.PutUint32(b[HdrOffSeq:], h.Seq)
}

// Decode reads the header at the start of msg and checks that msg holds
// exactly the body it announces.
func (h *Header) Decode(msg []byte) error {
	if len(msg) < HeaderSize {
		return ErrShort
	}
	if le.Uint32(msg[HdrOffMagic:]) != Magic {
		return ErrMagic
	}
	if le.Uint16(msg[HdrOffVersion:]) != Version {
		return ErrVersion
	}
	*h = Header{Type: MsgType(le.Uint16(msg[HdrOffType:])), Len: le.Uint32(msg[HdrOffLen:]), Seq: le.Uint32(msg[HdrOffSeq:])}
	if h.Len > MaxBody {
		return ErrTooLong
	}
	if int(h.Len) != len(msg)-HeaderSize {
		return ErrShort
	}
	return nil
}

// Message builds a whole message of type t with body.
func Message(t MsgType, seq uint32, body []byte) []byte {
	m := make([]byte, HeaderSize+len(body))
	(&Header{Type: t, Len: uint32(len(body)), Seq: seq}).Encode(m)
	copy(m[HeaderSize:], body)
	return m
}

// Reply is a reply body's fields.
type Reply struct {
	Status ReplyStatus
	Value  uint64
	Msg    string
}

// Encode returns the reply body.
func (r *Reply) Encode() []byte {
	b := make([]byte, ReplyMinSize+len(r.Msg))
	le.PutUint32(b[ReplyOffStatus:], uint32(r.Status))
	le.PutUint64(b[ReplyOffValue:], r.Value)
	copy(b[ReplyOffMsg:], r.Msg)
	return b
}

// Decode reads a reply body.
func (r *Reply) Decode(b []byte) error {
	if len(b) < ReplyMinSize {
		return ErrShort
	}
	*r = Reply{Status: ReplyStatus(le.Uint32(b[ReplyOffStatus:])), Value: le.Uint64(b[ReplyOffValue:]), Msg: string(b[ReplyOffMsg:])}
	return nil
}

// Err is the reply as an error (nil on OK).
func (r *Reply) Err(req MsgType) error {
	if r.Status == StatusOK {
		return nil
	}
	return &ReplyError{Req: req, Status: r.Status, Msg: r.Msg}
}

// ReplyError is a request the device refused.
type ReplyError struct {
	Req    MsgType
	Status ReplyStatus
	Msg    string
}

func (e *ReplyError) Error() string {
	return fmt.Sprintf("split device refused %v: %v: %s", e.Req, e.Status, e.Msg)
}

// EncodeVectors returns the VECTORS body.
func EncodeVectors(mode, pollMicros uint32) []byte {
	b := make([]byte, VectorsBodySize)
	le.PutUint32(b[VecOffMode:], mode)
	le.PutUint32(b[VecOffPollMicros:], pollMicros)
	return b
}

// EncodeVectorsKick returns the VECTORS body with the kick words' address
// (FeatureKickWords).
func EncodeVectorsKick(mode, pollMicros uint32, words rings.Addr) []byte {
	b := make([]byte, VectorsKickBodySize)
	copy(b, EncodeVectors(mode, pollMicros))
	le.PutUint64(b[VecOffKickWords:], uint64(words))
	return b
}

// DecodeVectors reads a VECTORS body of either size; words is 0 in the
// short one.
func DecodeVectors(b []byte) (mode, pollMicros uint32, words rings.Addr, err error) {
	if len(b) != VectorsBodySize && len(b) != VectorsKickBodySize {
		return 0, 0, 0, fmt.Errorf("VECTORS body of %d bytes, want %d or %d", len(b), VectorsBodySize, VectorsKickBodySize)
	}
	if len(b) == VectorsKickBodySize {
		words = rings.Addr(le.Uint64(b[VecOffKickWords:]))
	}
	return le.Uint32(b[VecOffMode:]), le.Uint32(b[VecOffPollMicros:]), words, nil
}

// EncodeU64 is the body of HELLO and MEMORY.
func EncodeU64(v uint64) []byte { b := make([]byte, 8); le.PutUint64(b, v); return b }

// DecodeU64 reads the body of HELLO or MEMORY.
func DecodeU64(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("body of %d bytes, want 8", len(b))
	}
	return le.Uint64(b), nil
}
