package direct

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Control messages (docs/direct.md gives every byte, with the session
// protocol's wording beside each rule). A control message is one RDMA Send
// into a receive buffer of the peer's pool: a 32-byte header and, for
// TypeData and TypeSrcAvail only, up to the peer's MaxInline bytes of
// stream data. Multi-byte fields are little-endian, like every other
// layout of the project.
//
//	0x00 u8  Version (MsgVersion)
//	0x01 u8  Type
//	0x02 u16 Flags: SrcAvail: FlagSinkReq; Data: FlagUrgent; none on other types
//	0x04 u32 Credits: receive buffers the sender re-posted since its last message (a grant)
//	0x08 u32 Total: SrcAvail: the bytes of the whole send (the first part
//	         inline plus the rest by RDMA); zero on other types
//	0x0C u32 Len: Data, SrcAvail: payload bytes after the header (SrcAvail:
//	         the send's first part); SinkAvail: the region's length;
//	         RdDone, WrDone: bytes transferred by RDMA
//	0x10 u32 ID: the transfer (SrcAvail, its SinkAvail, RdDone and WrDone);
//	         SinkWait: the data messages the sender has received
//	0x14 u32 STag of the advertised region (SrcAvail without FlagSinkReq, SinkAvail)
//	0x18 u64 TO: tagged offset of the advertised region's first byte
const (
	HeaderSize = 32
	MsgVersion = 2

	msgOffVersion = 0x00
	msgOffType    = 0x01
	msgOffFlags   = 0x02
	msgOffCredits = 0x04
	msgOffTotal   = 0x08
	msgOffLen     = 0x0C
	msgOffID      = 0x10
	msgOffSTag    = 0x14
	msgOffTO      = 0x18
)

// FlagSinkReq on a SRC_AVAIL asks for RDMA Write rendezvous: the sink
// registers a region for the rest of the send (Total-Len bytes) for remote
// write and advertises it with SINK_AVAIL; without it the SRC_AVAIL names
// the source's region, registered for remote read (RDMA Read rendezvous).
const FlagSinkReq uint16 = 1 << 0

// FlagUrgent on a DATA marks its one byte as urgent (out-of-band) data:
// it is not part of the stream; the receiver keeps it for ReadOOB, and
// the stream position it was sent at is the mark (AtMark).
const FlagUrgent uint16 = 1 << 0

// MsgType is a control message's type.
type MsgType uint8

// Control message types.
const (
	// TypeData carries Len bytes of the stream inline, after the header: a
	// small send.
	TypeData MsgType = 1
	// TypeSrcAvail starts a large send of Total bytes: its first Len
	// bytes follow the header, the rest go by RDMA as transfer ID. RDMA
	// Read rendezvous: the rest is in the sender's region STag at TO,
	// registered for remote read for this transfer only; the sink reads
	// it and answers TypeRdDone. RDMA Write rendezvous (FlagSinkReq, no
	// region): the sink registers a region on request and advertises it
	// with TypeSinkAvail.
	TypeSrcAvail MsgType = 2
	// TypeRdDone: the sink has read transfer ID (Len bytes). It is a Send
	// with Invalidate of the source's STag, so the source's NIC
	// invalidates the region as the message arrives; the source then
	// deregisters it.
	TypeRdDone MsgType = 3
	// TypeSinkAvail: the sender's region STag at TO, Len bytes,
	// registered for remote write for transfer ID only: the answer to a
	// SRC_AVAIL with FlagSinkReq (same ID, Len its Total-Len).
	TypeSinkAvail MsgType = 4
	// TypeWrDone: the source RDMA-wrote Len bytes of the stream into sink
	// region ID (the Write precedes this Send on the QP, so the bytes are
	// placed when it arrives). It is a Send with Invalidate of the sink's
	// STag; the sink then deregisters the region.
	TypeWrDone MsgType = 5
	// TypeCredit carries credits only. It takes no credit but one of the
	// receiver's credit-only buffers, and grants at least one credit
	// (except the dialler's first message).
	TypeCredit MsgType = 6
	// TypeFin: the sender will send no more stream bytes (half-close).
	TypeFin MsgType = 7
	// TypeSinkWait: the sender's application is blocked in a read of Len
	// bytes into registered memory, with nothing to read, having received
	// ID data messages (DATA and SRC_AVAIL, mod 2^32). A hint, with no
	// region: a peer that has sent no more data messages than ID sends its
	// next large sends, up to Len bytes, asking for a sink with no first
	// part (RDMA Write rendezvous), and the sink it gets is that read's
	// buffer (zero copy); a hint that crossed data is stale and ignored.
	TypeSinkWait MsgType = 8
)

var msgTypeNames = [...]string{1: "DATA", 2: "SRC_AVAIL", 3: "RD_DONE", 4: "SINK_AVAIL", 5: "WR_DONE", 6: "CREDIT", 7: "FIN", 8: "SINK_WAIT"}

func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) && msgTypeNames[t] != "" {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MSG_%d", uint8(t))
}

// class is the type's credit class (credit.go).
func (t MsgType) class() msgClass {
	switch t {
	case TypeData, TypeSrcAvail:
		return classData
	case TypeCredit:
		return classCredit
	}
	return classCtl
}

// ErrBadMessage is wrapped by every parse error of a control message.
var ErrBadMessage = errors.New("direct: bad control message")

// Header is an accessor over a control message's header.
type Header []byte

func (h Header) Version() uint8  { return h[msgOffVersion] }
func (h Header) Type() MsgType   { return MsgType(h[msgOffType]) }
func (h Header) Flags() uint16   { return binary.LittleEndian.Uint16(h[msgOffFlags:]) }
func (h Header) Credits() uint32 { return binary.LittleEndian.Uint32(h[msgOffCredits:]) }
func (h Header) Total() uint32   { return binary.LittleEndian.Uint32(h[msgOffTotal:]) }
func (h Header) Len() uint32     { return binary.LittleEndian.Uint32(h[msgOffLen:]) }
func (h Header) ID() uint32      { return binary.LittleEndian.Uint32(h[msgOffID:]) }
func (h Header) STag() uint32    { return binary.LittleEndian.Uint32(h[msgOffSTag:]) }
func (h Header) TO() uint64      { return binary.LittleEndian.Uint64(h[msgOffTO:]) }

// Msg is the fields of a control message header.
type Msg struct {
	Type    MsgType
	Flags   uint16
	Credits uint32
	Total   uint32
	Len     uint32
	ID      uint32
	STag    uint32
	TO      uint64
}

// Encode writes the header into b (at least HeaderSize bytes). The
// payload of a TypeData or TypeSrcAvail message goes at b[HeaderSize:].
func (m *Msg) Encode(b []byte) {
	h := b[:HeaderSize]
	h[msgOffVersion] = MsgVersion
	h[msgOffType] = byte(m.Type)
	binary.LittleEndian.PutUint16(h[msgOffFlags:], m.Flags)
	binary.LittleEndian.PutUint32(h[msgOffCredits:], m.Credits)
	binary.LittleEndian.PutUint32(h[msgOffTotal:], m.Total)
	binary.LittleEndian.PutUint32(h[msgOffLen:], m.Len)
	binary.LittleEndian.PutUint32(h[msgOffID:], m.ID)
	binary.LittleEndian.PutUint32(h[msgOffSTag:], m.STag)
	binary.LittleEndian.PutUint64(h[msgOffTO:], m.TO)
}

// Decode parses a whole received message b (header and payload) of a peer
// that may send at most maxInline payload bytes, and returns the payload.
// Everything the receiver relies on is checked: version, type, the zero
// fields, the length against the bytes received and the type, and the
// fields each type must (not) carry.
func (m *Msg) Decode(b []byte, maxInline int) ([]byte, error) {
	if len(b) < HeaderSize {
		return nil, fmt.Errorf("%w: %d bytes, the header is %d", ErrBadMessage, len(b), HeaderSize)
	}
	h := Header(b)
	if v := h.Version(); v != MsgVersion {
		return nil, fmt.Errorf("%w: version %d", ErrBadMessage, v)
	}
	*m = Msg{Type: h.Type(), Flags: h.Flags(), Credits: h.Credits(), Total: h.Total(), Len: h.Len(), ID: h.ID(), STag: h.STag(), TO: h.TO()}
	payload := b[HeaderSize:]
	if m.Flags != 0 && !(m.Type == TypeSrcAvail && m.Flags == FlagSinkReq || m.Type == TypeData && m.Flags == FlagUrgent) {
		return nil, fmt.Errorf("%w: %v with flags %#x", ErrBadMessage, m.Type, m.Flags)
	}
	if m.Total != 0 && m.Type != TypeSrcAvail {
		return nil, fmt.Errorf("%w: %v with a total", ErrBadMessage, m.Type)
	}
	switch m.Type {
	case TypeData:
		if m.Len == 0 || uint64(m.Len) != uint64(len(payload)) || len(payload) > maxInline {
			return nil, fmt.Errorf("%w: DATA of %d bytes with %d received (at most %d)", ErrBadMessage, m.Len, len(payload), maxInline)
		}
		if m.ID != 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: DATA with a region", ErrBadMessage)
		}
		if m.Flags == FlagUrgent && m.Len != 1 {
			return nil, fmt.Errorf("%w: urgent DATA of %d bytes (one byte)", ErrBadMessage, m.Len)
		}
		return payload, nil
	case TypeSrcAvail:
		if uint64(m.Len) != uint64(len(payload)) || len(payload) > maxInline {
			return nil, fmt.Errorf("%w: SRC_AVAIL with a first part of %d bytes, %d received (at most %d)", ErrBadMessage, m.Len, len(payload), maxInline)
		}
		if m.Total <= m.Len || m.ID == 0 {
			return nil, fmt.Errorf("%w: SRC_AVAIL of %d bytes in all, %d inline, ID %d: nothing left for RDMA", ErrBadMessage, m.Total, m.Len, m.ID)
		}
		rest := uint64(m.Total - m.Len)
		if m.Flags&FlagSinkReq != 0 {
			if m.STag != 0 || m.TO != 0 {
				return nil, fmt.Errorf("%w: SRC_AVAIL asking for a sink names a region", ErrBadMessage)
			}
		} else if m.STag == 0 || m.TO+rest < m.TO {
			return nil, fmt.Errorf("%w: SRC_AVAIL region STag %#x TO %#x of %d bytes", ErrBadMessage, m.STag, m.TO, rest)
		}
		return payload, nil
	case TypeSinkAvail:
		if m.Len == 0 || m.ID == 0 || m.STag == 0 || m.TO+uint64(m.Len) < m.TO {
			return nil, fmt.Errorf("%w: SINK_AVAIL region STag %#x TO %#x of %d bytes, ID %d", ErrBadMessage, m.STag, m.TO, m.Len, m.ID)
		}
	case TypeRdDone, TypeWrDone:
		if m.Len == 0 || m.ID == 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: %v with length %d, ID %d or a region", ErrBadMessage, m.Type, m.Len, m.ID)
		}
	case TypeSinkWait:
		if m.Len == 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: SINK_WAIT of %d bytes with a region", ErrBadMessage, m.Len)
		}
	case TypeCredit, TypeFin:
		if m.Len != 0 || m.ID != 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: %v with a length, ID or region", ErrBadMessage, m.Type)
		}
	default:
		return nil, fmt.Errorf("%w: type %d", ErrBadMessage, uint8(m.Type))
	}
	if len(payload) != 0 {
		return nil, fmt.Errorf("%w: %v with %d bytes of payload", ErrBadMessage, m.Type, len(payload))
	}
	return nil, nil
}
