package ivshmem

import (
	"encoding/binary"
	"fmt"
)

// The client-server protocol (QEMU's docs/specs/ivshmem-spec.rst, "The
// ivshmem Client-Server Protocol"). The connection is one-way, server to
// client; each message is one little-endian signed 64-bit number, some
// with one file descriptor (SCM_RIGHTS):
//
//	order  number           descriptor     meaning
//	1      ProtocolVersion  none           the protocol's version
//	2      the client's ID  none           its peer ID, 0..MaxPeerID
//	3      ShmMessage (-1)  shared memory  BAR2's memory object
//	4      a peer's ID      one eventfd    N times: interrupt that peer's vectors 0..N-1
//	5      the client's ID  one eventfd    N times: the client's own vectors 0..N-1
//	later  a peer's ID      none           that peer has gone
//	later  a peer's ID      one eventfd    a new peer (as in 4)
const (
	// ProtocolVersion is the only version QEMU (2.5 and later) speaks.
	ProtocolVersion int64 = 0
	// ShmMessage is the number sent with the shared memory's descriptor.
	ShmMessage int64 = -1
	// MessageSize is the size of every message.
	MessageSize = 8
	// MaxPeerID is the largest peer ID: the Doorbell register has 16 bits
	// for it.
	MaxPeerID = 0xFFFF
	// DevicePeerID is the device's own peer ID. The guest rings the device
	// by writing (DevicePeerID << 16 | vector) to ivshmem's Doorbell
	// register; guests get IDs from 1 up.
	DevicePeerID = 0
	// MaxVectors is the most vectors a session may have (QEMU's ivshmem
	// takes up to 1024 MSI-X vectors; the device needs far fewer).
	MaxVectors = 64
)

// The ivshmem device's own registers in BAR0 (ivshmem-spec.rst, "PCI
// device registers"), which the guest driver uses beside emunic's
// register window in BAR2.
const (
	RegIntrMask   = 0x00 // u32, read/write: INTx mask (revision 0 only)
	RegIntrStatus = 0x04 // u32, read/write: INTx status (revision 0 only)
	RegIVPosition = 0x08 // u32, read-only: this guest's peer ID
	RegDoorbell   = 0x0C // u32, write-only: peer ID << 16 | vector
	BAR0Size      = 0x100
)

// DoorbellValue is what a guest writes to RegDoorbell to ring vector v of
// the device.
func DoorbellValue(v int) uint32 { return uint32(DevicePeerID)<<16 | uint32(v)&0xFFFF }

// encode writes one message.
func encode(n int64) [MessageSize]byte {
	var b [MessageSize]byte
	binary.LittleEndian.PutUint64(b[:], uint64(n))
	return b
}

// decode reads one message.
func decode(b []byte) (int64, error) {
	if len(b) != MessageSize {
		return 0, fmt.Errorf("ivshmem: a message is %d bytes, got %d", MessageSize, len(b))
	}
	return int64(binary.LittleEndian.Uint64(b)), nil
}
