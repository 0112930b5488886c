package direct

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// Control messages (docs/direct.md gives every byte). A control message is
// one RDMA Send into a receive buffer of the peer's pool: a 32-byte header
// and, for TypeData only, up to the peer's MaxInline bytes of stream data.
// Multi-byte fields are little-endian, like every other layout of the
// project.
//
//	0x00 u8  Version (MsgVersion)
//	0x01 u8  Type
//	0x02 u16 Flags (none defined: must be zero)
//	0x04 u32 Credits: receive buffers the sender re-posted since its last message (a grant)
//	0x08 u16 UAcks: credit-only messages the sender consumed since its last message
//	0x0A u16 reserved, zero
//	0x0C u32 Len: Data: payload bytes after the header; SrcAvail, SinkAvail: the region's
//	         length; RdDone, WrDone: bytes transferred
//	0x10 u32 ID: the transfer (SrcAvail and its RdDone; SinkAvail and its WrDone)
//	0x14 u32 STag of the advertised region (SrcAvail, SinkAvail)
//	0x18 u64 TO: tagged offset of the advertised region's first byte (SrcAvail, SinkAvail)
const (
	HeaderSize = 32
	MsgVersion = 1

	msgOffVersion = 0x00
	msgOffType    = 0x01
	msgOffFlags   = 0x02
	msgOffCredits = 0x04
	msgOffUAcks   = 0x08
	msgOffRsvd    = 0x0A
	msgOffLen     = 0x0C
	msgOffID      = 0x10
	msgOffSTag    = 0x14
	msgOffTO      = 0x18
)

// MsgType is a control message's type.
type MsgType uint8

// Control message types.
const (
	// TypeData carries Len bytes of the stream inline, after the header.
	TypeData MsgType = 1
	// TypeSrcAvail (RDMA Read transfers): Len bytes of the stream are in
	// the sender's region STag at TO, registered for remote read; the
	// sink reads them, then answers with TypeRdDone and the same ID.
	TypeSrcAvail MsgType = 2
	// TypeRdDone: the sink has read transfer ID (Len bytes); the source
	// may deregister and reuse its region.
	TypeRdDone MsgType = 3
	// TypeSinkAvail (RDMA Write transfers): the sender's region STag at TO,
	// Len bytes, registered for remote write, is free for the peer's next
	// transfer, named ID.
	TypeSinkAvail MsgType = 4
	// TypeWrDone: the source RDMA-wrote Len bytes of the stream at the
	// start of the sink region ID (the Write precedes this Send on the
	// QP, so the bytes are placed when it arrives).
	TypeWrDone MsgType = 5
	// TypeCredit carries credits and acknowledgements only. It takes a
	// credit-only slot, not a credit.
	TypeCredit MsgType = 6
	// TypeFin: the sender will send no more stream bytes (half-close).
	TypeFin MsgType = 7
)

var msgTypeNames = [...]string{1: "DATA", 2: "SRC_AVAIL", 3: "RD_DONE", 4: "SINK_AVAIL", 5: "WR_DONE", 6: "CREDIT", 7: "FIN"}

func (t MsgType) String() string {
	if int(t) < len(msgTypeNames) && msgTypeNames[t] != "" {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("MSG_%d", uint8(t))
}

// class is the type's credit class (credit.go).
func (t MsgType) class() msgClass {
	switch t {
	case TypeData, TypeSrcAvail, TypeWrDone:
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
func (h Header) UAcks() uint16   { return binary.LittleEndian.Uint16(h[msgOffUAcks:]) }
func (h Header) Len() uint32     { return binary.LittleEndian.Uint32(h[msgOffLen:]) }
func (h Header) ID() uint32      { return binary.LittleEndian.Uint32(h[msgOffID:]) }
func (h Header) STag() uint32    { return binary.LittleEndian.Uint32(h[msgOffSTag:]) }
func (h Header) TO() uint64      { return binary.LittleEndian.Uint64(h[msgOffTO:]) }

// Msg is the fields of a control message header.
type Msg struct {
	Type    MsgType
	Credits uint32
	UAcks   uint16
	Len     uint32
	ID      uint32
	STag    uint32
	TO      uint64
}

// Encode writes the header into b (at least HeaderSize bytes). The
// payload of a TypeData message goes at b[HeaderSize:].
func (m *Msg) Encode(b []byte) {
	h := b[:HeaderSize]
	h[msgOffVersion] = MsgVersion
	h[msgOffType] = byte(m.Type)
	binary.LittleEndian.PutUint16(h[msgOffFlags:], 0)
	binary.LittleEndian.PutUint32(h[msgOffCredits:], m.Credits)
	binary.LittleEndian.PutUint16(h[msgOffUAcks:], m.UAcks)
	binary.LittleEndian.PutUint16(h[msgOffRsvd:], 0)
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
	if h.Flags() != 0 || binary.LittleEndian.Uint16(h[msgOffRsvd:]) != 0 {
		return nil, fmt.Errorf("%w: reserved bits set", ErrBadMessage)
	}
	*m = Msg{Type: h.Type(), Credits: h.Credits(), UAcks: h.UAcks(), Len: h.Len(), ID: h.ID(), STag: h.STag(), TO: h.TO()}
	payload := b[HeaderSize:]
	switch m.Type {
	case TypeData:
		if m.Len == 0 || uint64(m.Len) != uint64(len(payload)) || len(payload) > maxInline {
			return nil, fmt.Errorf("%w: DATA of %d bytes with %d received (at most %d)", ErrBadMessage, m.Len, len(payload), maxInline)
		}
		if m.ID != 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: DATA with a region", ErrBadMessage)
		}
		return payload, nil
	case TypeSrcAvail, TypeSinkAvail:
		if m.Len == 0 {
			return nil, fmt.Errorf("%w: %v of an empty region", ErrBadMessage, m.Type)
		}
		if m.TO+uint64(m.Len) < m.TO {
			return nil, fmt.Errorf("%w: %v region wraps", ErrBadMessage, m.Type)
		}
	case TypeRdDone, TypeWrDone:
		if m.Len == 0 || m.STag != 0 || m.TO != 0 {
			return nil, fmt.Errorf("%w: %v with length %d or a region", ErrBadMessage, m.Type, m.Len)
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
