package direct

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// The hello: the MPA private data of the connection request (dialler) and
// of the reply (listener), which negotiates the session (docs/direct.md).
//
//	0x00 [4] Magic "SDv2"
//	0x04 u8  Kind: 1 request, 2 reply
//	0x05 u8  Caps: CapRead, CapWrite (what this side does as a sink)
//	0x06 u8  Pref: this side's preferred transfer for its large sends (Transfer)
//	0x07 u8  reserved, zero
//	0x08 u16 Port: request: the listener's TCP port; reply: zero
//	0x0A u16 Slots: credit-only receive buffers this side posted (2..1025); the
//	         peer's pool is at most Slots-1
//	0x0C u32 Pool: receive buffers this side's credits cover: the peer's initial credits
//	0x10 u32 MaxInline: most payload bytes one DATA message to this side may carry
//	0x14 u32 MaxTransfer: most bytes one SRC_AVAIL to this side may announce (its sink chunk)
const (
	HelloSize = 24

	helloOffMagic     = 0x00
	helloOffKind      = 0x04
	helloOffCaps      = 0x05
	helloOffPref      = 0x06
	helloOffRsvd8     = 0x07
	helloOffPort      = 0x08
	helloOffSlots     = 0x0A
	helloOffPool      = 0x0C
	helloOffMaxInline = 0x10
	helloOffMaxXfer   = 0x14

	helloMagic = "SDv2"

	helloRequest = 1
	helloReply   = 2

	// CapRead: as a sink, this side takes SRC_AVAIL and pulls the data
	// with RDMA Read.
	CapRead = 1 << 0
	// CapWrite: as a sink, this side advertises registered buffers
	// (SINK_AVAIL) the peer RDMA-writes into.
	CapWrite = 1 << 1
	capsAll  = CapRead | CapWrite

	// Limits a hello may state: bigger pools or messages than these are
	// refused (they would make the other side allocate without bound).
	maxPool      = 1024
	maxSlots     = maxPool + 1
	maxInlineCap = 1 << 20
	maxTransfer  = 1 << 30
)

// ErrBadHello is wrapped by every parse error of a hello.
var ErrBadHello = errors.New("direct: bad hello")

// Hello is the fields of a hello.
type Hello struct {
	Reply     bool
	Caps      uint8
	Pref      Transfer
	Port      uint16
	Slots     uint16
	Pool      uint32
	MaxInline uint32
	// MaxTransfer is the most bytes one SRC_AVAIL to this side may
	// announce: its sink chunk size.
	MaxTransfer uint32
}

// Encode writes the hello into b (at least HelloSize bytes).
func (h *Hello) Encode(b []byte) {
	b = b[:HelloSize]
	copy(b[helloOffMagic:], helloMagic)
	b[helloOffKind] = helloRequest
	if h.Reply {
		b[helloOffKind] = helloReply
	}
	b[helloOffCaps] = h.Caps
	b[helloOffPref] = uint8(h.Pref)
	b[helloOffRsvd8] = 0
	binary.LittleEndian.PutUint16(b[helloOffPort:], h.Port)
	binary.LittleEndian.PutUint16(b[helloOffSlots:], h.Slots)
	binary.LittleEndian.PutUint32(b[helloOffPool:], h.Pool)
	binary.LittleEndian.PutUint32(b[helloOffMaxInline:], h.MaxInline)
	binary.LittleEndian.PutUint32(b[helloOffMaxXfer:], h.MaxTransfer)
}

// Decode parses a hello; it must be exactly HelloSize bytes (the private
// data is the hello and nothing else).
func (h *Hello) Decode(b []byte) error {
	if len(b) != HelloSize {
		return fmt.Errorf("%w: %d bytes, want %d", ErrBadHello, len(b), HelloSize)
	}
	if string(b[helloOffMagic:helloOffMagic+4]) != helloMagic {
		return fmt.Errorf("%w: magic %q", ErrBadHello, b[:4])
	}
	kind := b[helloOffKind]
	if kind != helloRequest && kind != helloReply {
		return fmt.Errorf("%w: kind %d", ErrBadHello, kind)
	}
	if b[helloOffRsvd8] != 0 || b[helloOffCaps]&^capsAll != 0 {
		return fmt.Errorf("%w: reserved bits set", ErrBadHello)
	}
	*h = Hello{Reply: kind == helloReply, Caps: b[helloOffCaps], Pref: Transfer(b[helloOffPref]),
		Port:  binary.LittleEndian.Uint16(b[helloOffPort:]),
		Slots: binary.LittleEndian.Uint16(b[helloOffSlots:]), Pool: binary.LittleEndian.Uint32(b[helloOffPool:]),
		MaxInline:   binary.LittleEndian.Uint32(b[helloOffMaxInline:]),
		MaxTransfer: binary.LittleEndian.Uint32(b[helloOffMaxXfer:])}
	switch {
	case h.Pref > TransferWrite:
		return fmt.Errorf("%w: transfer preference %d", ErrBadHello, uint8(h.Pref))
	case h.Reply && h.Port != 0:
		return fmt.Errorf("%w: a reply with port %d", ErrBadHello, h.Port)
	case !h.Reply && h.Port == 0:
		return fmt.Errorf("%w: a request for port 0", ErrBadHello)
	case h.Slots < 2 || h.Slots > maxSlots:
		return fmt.Errorf("%w: %d credit-only slots (2..%d)", ErrBadHello, h.Slots, maxSlots)
	case h.Pool < 2 || h.Pool > maxPool:
		return fmt.Errorf("%w: pool of %d (2..%d)", ErrBadHello, h.Pool, maxPool)
	case h.MaxInline < 1 || h.MaxInline > maxInlineCap:
		return fmt.Errorf("%w: max inline %d (1..%d)", ErrBadHello, h.MaxInline, maxInlineCap)
	case h.MaxTransfer < 1 || h.MaxTransfer > maxTransfer:
		return fmt.Errorf("%w: max transfer %d (1..%d)", ErrBadHello, h.MaxTransfer, maxTransfer)
	}
	return nil
}

// Transfer is how large sends travel.
type Transfer uint8

// Transfer modes. The mode of one direction is chosen by both sides alike
// from the source's preference and the sink's caps (transferMode).
const (
	// TransferAuto: RDMA Read when the sink does it, RDMA Write when
	// not, inline when neither.
	TransferAuto Transfer = 0
	// TransferInline: every byte inline in DATA messages.
	TransferInline Transfer = 1
	// TransferRead: as TransferAuto.
	TransferRead Transfer = 2
	// TransferWrite: RDMA Write when the sink does it, RDMA Read when
	// not, inline when neither.
	TransferWrite Transfer = 3
)

var transferNames = [...]string{"auto", "inline", "rdma-read", "rdma-write"}

func (t Transfer) String() string {
	if int(t) < len(transferNames) {
		return transferNames[t]
	}
	return fmt.Sprintf("transfer(%d)", uint8(t))
}

// transferMode is the mode of large sends from a source preferring pref
// to a sink with caps: TransferInline, TransferRead or TransferWrite.
func transferMode(pref Transfer, caps uint8) Transfer {
	read, write := caps&CapRead != 0, caps&CapWrite != 0
	switch {
	case pref == TransferInline:
		return TransferInline
	case pref == TransferWrite && write, !read && write:
		return TransferWrite
	case read:
		return TransferRead
	}
	return TransferInline
}
