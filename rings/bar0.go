package rings

import "fmt"

// The device's register block (BAR0): what a driver reads and writes to
// identify the device, negotiate features, place its rings, ring doorbells,
// mask and moderate interrupts and find its counters. Every register is a
// little-endian u32 at a 4-byte-aligned offset; a 64-bit value is two
// registers, low word first. docs/bar0.md is the byte-by-byte contract
// (TestDocBAR0 holds it to these constants) and the C header carries them.
//
// Over a unix socket (nic/split) a register access is a REG_READ or
// REG_WRITE message; over QEMU's ivshmem the block is the first page of
// BAR2 (the register window). The register model that answers both is
// nic/regs.
const (
	Bar0Bytes = 0x1000 // bytes of the register block (one 4 KiB page)

	// Identification and features (read-only unless said).
	RegID          = 0x000 // u32 vendor ID (bits 0–15) and device ID (bits 16–31)
	RegVersion     = 0x004 // u32 register map version: major (bits 16–31), minor (bits 0–15)
	RegDevFeatures = 0x008 // u32 Bar0Feature bits the device has
	RegDrvFeatures = 0x00C // u32 read-write: the Bar0Feature bits the driver uses, a subset of RegDevFeatures; writable while disabled
	RegCtrl        = 0x010 // u32 read-write: Bar0Ctrl bits
	RegStatus      = 0x014 // u32 Bar0Status bits
	RegError       = 0x018 // u32 Bar0ErrCode of the last refused access or failed enable (0: none); cleared by reset
	RegErrorOffset = 0x01C // u32 the register offset of the last refused access
	RegMACLo       = 0x020 // u32 station address bytes 0–3 (byte 0 in bits 0–7)
	RegMACHi       = 0x024 // u32 station address bytes 4–5 (bits 0–15)
	RegMTU         = 0x028 // u32 the largest IP packet the device sends and receives
	RegNumVectors  = 0x02C // u32 interrupt vectors (Bar0Vectors)
	RegMemBaseLo   = 0x030 // u32 DMA address of the first byte of shared memory, low word
	RegMemBaseHi   = 0x034 // u32 high word
	RegMemSizeLo   = 0x038 // u32 bytes of shared memory, low word
	RegMemSizeHi   = 0x03C // u32 high word
	RegMemFirst    = 0x040 // u32 bytes at the start of shared memory that are not for rings (the register window over ivshmem; 0 over a socket)
	RegCounterLo   = 0x048 // u32 read-write: counter area DMA address, low word; writable while disabled
	RegCounterHi   = 0x04C // u32 read-write: high word
	RegCounterLen  = 0x050 // u32 read-write: counter area bytes (0: none); writable while disabled

	// RDMA doorbells (FeatQPDoorbell): posted writes that name a QP or a
	// CQ, as a store to an RNIC's doorbell page does; the QP and CQ
	// rings' bases and sizes stay in their CREATE_QP and CREATE_CQ
	// contexts (docs/bar0.md, "Queue pair and completion queue rings").
	RegQPDoorbell  = 0x060    // u32 write-only (reads 0): the host posted to a QP's SQ or RQ; the value is the QP number (bits 0–23)
	RegCQArm       = 0x064    // u32 write-only (reads 0): arm a CQ: its number in bits 0–15, ARM_CQ's Arg0 flags in bits 16–17
	Bar0QPNMask    = 0xFFFFFF // RegQPDoorbell: the QP number's bits; the others are reserved (ErrBadValue)
	Bar0CQNumMask  = 0xFFFF   // RegCQArm: the CQ number's bits
	Bar0CQArmShift = 16       // RegCQArm: ArmSolicited and ArmIfPending, shifted left by this

	// Rings: Bar0Rings blocks of Bar0RingStride bytes from Bar0RingBase,
	// ring r's block at Bar0RingBase + r × Bar0RingStride.
	Bar0RingBase     = 0x100
	Bar0RingStride   = 0x20
	Bar0Rings        = 4       // command, notification, transmit, receive
	RingRegBaseLo    = 0x00    // u32 read-write: DMA address of the ring's header, low word; writable while disabled
	RingRegBaseHi    = 0x04    // u32 read-write: high word
	RingRegCount     = 0x08    // u32 read-write: entries, a power of two (0: not set up); writable while disabled
	RingRegEntry     = 0x0C    // u32 the ring's entry size in bytes
	RingRegDoorbell  = 0x10    // u32 write-only: the host published to the ring (the value is not used; reads 0)
	RingRegVector    = 0x14    // u32 the interrupt vector the device raises for this ring, or Bar0NoVector
	RingRegRsvd      = 0x18    // 8 bytes reserved, read 0
	Bar0NoVector     = 0xFFFF  // RingRegVector: the ring raises no interrupt
	Bar0MaxRingCount = 1 << 20 // the most entries a ring may have

	// Interrupt vectors: Bar0Vectors blocks of Bar0VecStride bytes from
	// Bar0VecBase.
	Bar0VecBase     = 0x200
	Bar0VecStride   = 0x10
	Bar0Vectors     = 3    // notification, transmit space, command completion
	VecRegCause     = 0x00 // u32 write 1 to clear: bit 0 set when the device raised the vector since the last clear
	VecRegMask      = 0x04 // u32 read-write: bit 0 masks the vector (a raise while masked is pending and delivered on unmask)
	VecRegModUsecs  = 0x08 // u32 read-write: moderation delay in µs (vector Bar0VecNotify only; 0: device default); writable while disabled
	VecRegModCount  = 0x0C // u32 read-write: moderation count (vector Bar0VecNotify only; 0: device default); writable while disabled
	Bar0VecNotify   = 0    // the notification ring's vector
	Bar0VecTxSpace  = 1    // the transmit ring's: slots released while the host waits for space
	Bar0VecCommand  = 2    // the command ring's: completions while the host waits for them
	Bar0MaxModUsecs = 1000000

	// Register access counters: Bar0RegCounters u32 counters from
	// Bar0CounterBase, counter id at Bar0CounterBase + 4 × id. They count
	// from the device process's start, across attaches and resets, and wrap.
	Bar0CounterBase = 0x400

	// MSI-X table and pending-bit array, in the PCI layout: one
	// MsixEntryBytes-byte entry per vector from Bar0MsixTable, and one
	// pending bit per vector in the u64 words from Bar0MsixPBA.
	Bar0MsixTable     = 0x800
	Bar0MsixPBA       = 0xC00
	MsixEntryBytes    = 16
	MsixOffAddrLo     = 0x0 // u32 message address, low word (stored; see docs/bar0.md)
	MsixOffAddrHi     = 0x4 // u32 message address, high word
	MsixOffData       = 0x8 // u32 message data
	MsixOffCtrl       = 0xC // u32 vector control: bit 0 MsixCtrlMasked (the same bit as VecRegMask)
	MsixCtrlMasked    = 0x1
	Bar0VendorID      = 0x1DE7 // RegID bits 0–15 (the register block's own identification, not a PCI ID)
	Bar0DeviceID      = 0x0E31 // RegID bits 16–31
	Bar0VersionMajor  = 1
	Bar0VersionMinor  = 0
	Bar0RingCommand   = 0 // ring 0: the command ring (64-byte entries)
	Bar0RingNotify    = 1 // ring 1: the notification ring (32-byte entries)
	Bar0RingTx        = 2 // ring 2: the transmit ring (32-byte descriptors)
	Bar0RingRx        = 3 // ring 3: the receive ring (32-byte descriptors)
	Bar0RegisterAlign = 4 // every access is a u32 at a multiple of 4
)

// Bar0Feature is a bit of RegDevFeatures and RegDrvFeatures.
type Bar0Feature uint32

// Features.
const (
	FeatLegacy     Bar0Feature = 1 << 0 // legacy transmit and receive rings (frames the host's own stack handles)
	FeatDelegation Bar0Feature = 1 << 1 // TCP connection delegation (OFFLOAD and the delegated commands)
	FeatRDMA       Bar0Feature = 1 << 2 // iWARP queue pairs and completion queues (CREATE_QP, CREATE_CQ)
	FeatCounters   Bar0Feature = 1 << 3 // the counter area (RegCounterLo/Hi/Size)
	FeatModeration Bar0Feature = 1 << 4 // interrupt moderation (VecRegModUsecs/VecRegModCount)
	FeatVLAN       Bar0Feature = 1 << 5 // 802.1Q tag insertion on transmit (TxOffVLAN)
	FeatTxCsum     Bar0Feature = 1 << 6 // transmit checksum offload on legacy frames (TxCsum); the device refuses the flag unless the driver writes this bit
	FeatQPDoorbell Bar0Feature = 1 << 7 // RDMA doorbell registers (RegQPDoorbell, RegCQArm); needs FeatRDMA
	Bar0Features               = FeatLegacy | FeatDelegation | FeatRDMA | FeatCounters | FeatModeration | FeatVLAN | FeatTxCsum | FeatQPDoorbell
)

// Bar0Ctrl is a bit of RegCtrl.
type Bar0Ctrl uint32

// Control bits.
const (
	// CtrlEnable: writing 1 (from 0) checks the ring and counter registers
	// and starts the device; a check that fails leaves it 0, sets
	// StatusFailed and RegError. Writing 0 (from 1) stops it; the registers
	// keep their values.
	CtrlEnable Bar0Ctrl = 1 << 0
	// CtrlReset: writing 1 stops the device and returns every read-write
	// register to its reset value (zero); it reads 0 (self-clearing). The
	// access counters are not reset.
	CtrlReset    Bar0Ctrl = 1 << 1
	Bar0CtrlMask          = CtrlEnable | CtrlReset // the bits that may be written 1
)

// Bar0Status is a bit of RegStatus.
type Bar0Status uint32

// Status bits.
const (
	StatusEnabled Bar0Status = 1 << 0 // the device runs: its rings are live
	StatusFailed  Bar0Status = 1 << 1 // the last enable failed (RegError says why); cleared by the next enable or reset
	StatusMemory  Bar0Status = 1 << 2 // shared memory is attached (RegMemBase/Size are valid)
	StatusVectors Bar0Status = 1 << 3 // the transport has interrupt delivery (or polling) ready, so enable may succeed
)

// Bar0ErrCode is RegError's value: why an access was refused or an enable
// failed.
type Bar0ErrCode uint32

// Error codes.
const (
	ErrNone         Bar0ErrCode = 0
	ErrBadOffset    Bar0ErrCode = 1 // outside the block, not 4-byte aligned, or a reserved register
	ErrReadOnly     Bar0ErrCode = 2 // a write to a read-only register
	ErrWrongState   Bar0ErrCode = 3 // a register locked in this state (a ring's base while enabled)
	ErrBadValue     Bar0ErrCode = 4 // a value the register refuses (a count not a power of two, a feature the device lacks, a reserved bit)
	ErrRingOutside  Bar0ErrCode = 5 // enable: a ring or the counter area outside shared memory or over its first RegMemFirst bytes
	ErrRingSetup    Bar0ErrCode = 6 // enable: a ring not set up, or rings that overlap
	ErrNoDoorbell   Bar0ErrCode = 7 // a doorbell for a ring that was never set up, a QP or CQ that does not exist, without its feature, or while disabled
	ErrEnableFailed Bar0ErrCode = 8 // enable: the device refused to start (no memory, no vectors, no port)
)

var bar0ErrNames = [...]string{"NONE", "BAD_OFFSET", "READ_ONLY", "WRONG_STATE", "BAD_VALUE", "RING_OUTSIDE",
	"RING_SETUP", "NO_DOORBELL", "ENABLE_FAILED"}

func (e Bar0ErrCode) String() string {
	if int(e) < len(bar0ErrNames) {
		return bar0ErrNames[e]
	}
	return fmt.Sprintf("BAR0_ERR_%d", uint32(e))
}

// RegCounterID names a register access counter (Bar0CounterBase + 4 × id).
type RegCounterID uint32

// Register access counters.
const (
	RegCtrBadOffset    RegCounterID = 0  // accesses refused ErrBadOffset
	RegCtrReadOnly     RegCounterID = 1  // writes refused ErrReadOnly
	RegCtrWrongState   RegCounterID = 2  // writes refused ErrWrongState
	RegCtrBadValue     RegCounterID = 3  // writes refused ErrBadValue
	RegCtrRingOutside  RegCounterID = 4  // enables refused ErrRingOutside
	RegCtrRingSetup    RegCounterID = 5  // enables refused ErrRingSetup
	RegCtrNoDoorbell   RegCounterID = 6  // doorbells refused ErrNoDoorbell
	RegCtrEnableFailed RegCounterID = 7  // enables refused ErrEnableFailed
	RegCtrHostGone     RegCounterID = 8  // hosts that went away while the device was enabled
	RegCtrResets       RegCounterID = 9  // resets (CtrlReset, and the reset at each detach)
	RegCtrEnables      RegCounterID = 10 // enables that started the device
	RegCtrInterrupts   RegCounterID = 11 // interrupts delivered, all vectors
	RegCtrMaskedRaises RegCounterID = 12 // raises that found their vector masked (delivered on unmask)
	Bar0RegCounters                 = 13
)

// Bar0ErrCounter is the counter that counts refusals with code e (e
// from ErrBadOffset to ErrEnableFailed).
func Bar0ErrCounter(e Bar0ErrCode) RegCounterID { return RegCounterID(e - 1) }

// Bar0CQArm is RegCQArm's value that arms CQ cq with ARM_CQ's flags
// (ArmSolicited, ArmIfPending).
func Bar0CQArm(cq, flags uint32) uint32 { return cq&Bar0CQNumMask | flags<<Bar0CQArmShift }

// Bar0CQArmFlags is RegCQArm's flag bits.
const Bar0CQArmFlags = (ArmSolicited | ArmIfPending) << Bar0CQArmShift

// RDMADoorbell is a device's RDMA doorbell registers as its register
// model, and a driver in the device's process, reach them: each call is a
// posted write of RegQPDoorbell or RegCQArm (flags: ARM_CQ's), queued for
// the device's loop. It reports false when the device refused it, for a
// QP or CQ it does not have (ErrNoDoorbell). A device's Doorbell
// implements it when the device has the registers (FeatQPDoorbell).
type RDMADoorbell interface {
	QPDoorbell(qpn uint32) bool
	ArmCQ(cq, flags uint32) bool
}

// RDMADoorbellLate is an RDMADoorbell whose writes cross a transport that
// does not wait for the device (the split socket's REG_POST): a write it
// reported sent may be refused later, and f is then called with the
// register's offset (RegQPDoorbell, RegCQArm) and the value written.
type RDMADoorbellLate interface {
	RDMADoorbell
	OnRefused(f func(off, v uint32))
}

// Bar0Ring is the offset of register reg (RingRegBaseLo, ...) of ring r.
func Bar0Ring(r int, reg uint32) uint32 { return Bar0RingBase + uint32(r)*Bar0RingStride + reg }

// Bar0Vec is the offset of register reg (VecRegCause, ...) of vector v.
func Bar0Vec(v int, reg uint32) uint32 { return Bar0VecBase + uint32(v)*Bar0VecStride + reg }

// Bar0Msix is the offset of field off (MsixOffAddrLo, ...) of vector v's
// MSI-X table entry.
func Bar0Msix(v int, off uint32) uint32 { return Bar0MsixTable + uint32(v)*MsixEntryBytes + off }

// Bar0Counter is the offset of register access counter id.
func Bar0Counter(id RegCounterID) uint32 { return Bar0CounterBase + 4*uint32(id) }

// Bar0RingEntry is the entry size of ring r (Bar0RingCommand, ...).
func Bar0RingEntry(r int) uint32 {
	return [Bar0Rings]uint32{CommandEntrySize, NotificationEntrySize, TxDescSize, RxDescSize}[r]
}

// Bar0RingVector is the vector ring r raises (RingRegVector).
func Bar0RingVector(r int) uint32 {
	return [Bar0Rings]uint32{Bar0VecCommand, Bar0VecNotify, Bar0VecTxSpace, Bar0NoVector}[r]
}

// Bar0RingConfig is the ring registers' fields as RingConfig, in ring
// order; Layouts is its inverse.
func Bar0RingConfig(ls [Bar0Rings]Layout) RingConfig {
	return RingConfig{Command: ls[Bar0RingCommand], Notify: ls[Bar0RingNotify], Tx: ls[Bar0RingTx], Rx: ls[Bar0RingRx]}
}

// Layouts is rc's rings in register order (Bar0RingCommand, ...).
func (rc RingConfig) Layouts() [Bar0Rings]Layout {
	return [Bar0Rings]Layout{rc.Command, rc.Notify, rc.Tx, rc.Rx}
}

var regCounterNames = [Bar0RegCounters]string{"bad_offset", "read_only", "wrong_state", "bad_value", "ring_outside",
	"ring_setup", "no_doorbell", "enable_failed", "host_gone", "resets", "enables", "interrupts", "masked_raises"}

func (id RegCounterID) String() string { return idName(regCounterNames[:], uint32(id), "reg_counter_") }

// RegWrite is one register write: Val to the register at Off.
type RegWrite struct{ Off, Val uint32 }

// Bar0RingWrites are the writes that place ring r at l: its base, low
// and high word, and its count.
func Bar0RingWrites(r int, l Layout) [3]RegWrite {
	return [3]RegWrite{{Bar0Ring(r, RingRegBaseLo), uint32(l.Base)}, {Bar0Ring(r, RingRegBaseHi), uint32(uint64(l.Base) >> 32)},
		{Bar0Ring(r, RingRegCount), l.Count}}
}

// Bar0BringUp is a driver's bring-up as register writes (docs/bar0.md, "A
// driver's bring-up"): reset, the features it uses, every ring of rc,
// enable. A driver then reads RegStatus.
func Bar0BringUp(rc RingConfig, feat Bar0Feature) []RegWrite {
	ws := []RegWrite{{RegCtrl, uint32(CtrlReset)}, {RegDrvFeatures, uint32(feat)}}
	for r, l := range rc.Layouts() {
		w := Bar0RingWrites(r, l)
		ws = append(ws, w[:]...)
	}
	return append(ws, RegWrite{RegCtrl, uint32(CtrlEnable)})
}
