package rings

import (
	"errors"
	"fmt"
	"strconv"
)

// Host-facing ring layouts of the verbs queues: the send queue (SQ) and
// receive queue (RQ) the host produces work requests into, and the
// completion queue (CQ) the device produces completions into. They are
// ordinary rings (Layout, Producer/Consumer): every entry starts
// with the ring-owned 32-bit control word; everything here is little-endian.
// Opcode, flag and status values mirror rdma-core's libibverbs (ibv_wr_opcode,
// ibv_send_flags, ibv_wc_opcode, ibv_wc_status, ibv_access_flags) so a verbs
// shim is a copy of fields, not a translation.

// ErrShortWR is wrapped by the decoders of the verbs queue entries when the
// buffer is shorter than the entry.
var ErrShortWR = errors.New("rings: truncated verbs queue entry")

// Scatter/gather element (16 bytes), inside SQ and RQ entries:
//
//	0x00 u64 Addr: tagged offset inside the memory region named by LKey
//	         (the region's VA space, or 0-based for AccessZeroBased regions)
//	0x08 u32 Length
//	0x0C u32 LKey: the region's STag
const (
	SGESize    = 16
	SGEOffAddr = 0x00
	SGEOffLen  = 0x08
	SGEOffLKey = 0x0C
)

// SGE is the fields of a scatter/gather element.
type SGE struct {
	Addr   uint64
	Length uint32
	LKey   uint32
}

// Encode writes the element into b (SGESize bytes).
func (s *SGE) Encode(b []byte) {
	_ = b[SGESize-1]
	le.PutUint64(b[SGEOffAddr:], s.Addr)
	le.PutUint32(b[SGEOffLen:], s.Length)
	le.PutUint32(b[SGEOffLKey:], s.LKey)
}

// Decode reads the element from b.
func (s *SGE) Decode(b []byte) error {
	if len(b) < SGESize {
		return fmt.Errorf("%w: SGE of %d bytes", ErrShortWR, len(b))
	}
	s.Addr, s.Length, s.LKey = le.Uint64(b[SGEOffAddr:]), le.Uint32(b[SGEOffLen:]), le.Uint32(b[SGEOffLKey:])
	return nil
}

// Send queue entry (128 bytes):
//
//	0x00 u32 ring control word
//	0x04 u8  Opcode (WROpcode)
//	0x05 u8  Flags (WRFlags)
//	0x06 u8  NumSGE (0..MaxSendSGE; ignored with WRInline)
//	0x07 u8  InlineLen (with WRInline: bytes of inline data at 0x40, 0..MaxInline)
//	0x08 u64 WRID: the host's cookie, returned in the completion
//	0x10 u64 RemoteAddr: remote tagged offset (RDMA_WRITE*, RDMA_READ); REG_MR: the VA
//	0x18 u32 RKey: remote STag (RDMA_WRITE*, RDMA_READ); REG_MR: the STag, new key
//	0x1C u32 InvSTag: STag to invalidate (SEND_WITH_INV: the peer's; LOCAL_INV: ours)
//	0x20 u64 ImmData: RFC 7306 Immediate Data (RDMA_WRITE_WITH_IMM), sent big-endian;
//	         REG_MR: the access flags (MRAccess*)
//	0x28 u64 CompareAdd (atomics; reserved)
//	0x30 u64 Swap (atomics; reserved)
//	0x38 u64 reserved, zero
//	0x40 [4] SGE, or up to 64 bytes of inline data
const (
	SQEntrySize  = 128
	MaxSendSGE   = 4
	MaxInline    = 64
	SQOffOpcode  = 0x04
	SQOffFlags   = 0x05
	SQOffNumSGE  = 0x06
	SQOffInline  = 0x07
	SQOffWRID    = 0x08
	SQOffRAddr   = 0x10
	SQOffRKey    = 0x18
	SQOffInvSTag = 0x1C
	SQOffImm     = 0x20
	SQOffCmpAdd  = 0x28
	SQOffSwap    = 0x30
	SQOffSGE     = 0x40
)

// WROpcode is a send work request's operation (ibv_wr_opcode values).
type WROpcode uint8

// Send work request opcodes.
const (
	WRRDMAWrite      WROpcode = 0
	WRRDMAWriteImm   WROpcode = 1 // RDMA Write, then an RFC 7306 Immediate Data message
	WRSend           WROpcode = 2 // Send (Send with SE if WRSolicited)
	WRSendImm        WROpcode = 3 // not in iWARP: completes with LocQPOpErr
	WRRDMARead       WROpcode = 4 // exactly one SGE: the local sink
	WRAtomicCmpSwap  WROpcode = 5 // not supported: LocQPOpErr
	WRAtomicFetchAdd WROpcode = 6 // not supported: LocQPOpErr
	WRLocalInv       WROpcode = 7 // invalidate InvSTag locally
	WRBindMW         WROpcode = 8 // not supported: LocQPOpErr
	WRSendInv        WROpcode = 9 // Send with Invalidate (with SE if WRSolicited)
	// WRRegMR is fast registration (the kernel verbs' IB_WR_REG_MR, and
	// its value; iWARP verbs' Fast-Register): it maps SGE 0's host memory
	// under an STag allocated for it (REG_MR with MRAccessFastReg), with
	// RKey's key, RemoteAddr as the VA and ImmData's access flags.
	WRRegMR WROpcode = 0x20
)

var wrOpcodeNames = [...]string{"RDMA_WRITE", "RDMA_WRITE_WITH_IMM", "SEND", "SEND_WITH_IMM", "RDMA_READ",
	"ATOMIC_CMP_AND_SWP", "ATOMIC_FETCH_AND_ADD", "LOCAL_INV", "BIND_MW", "SEND_WITH_INV"}

func (o WROpcode) String() string {
	if o == WRRegMR {
		return "REG_MR"
	}
	if int(o) < len(wrOpcodeNames) {
		return wrOpcodeNames[o]
	}
	return "WR_" + strconv.Itoa(int(o))
}

// WRFlags are send work request flags (ibv_send_flags values).
type WRFlags uint8

// Send work request flags.
const (
	WRFence     WRFlags = 1 << 0 // wait for every earlier RDMA Read to complete
	WRSignaled  WRFlags = 1 << 1 // generate a completion on success
	WRSolicited WRFlags = 1 << 2 // Send with SE / Immediate Data with SE
	WRInline    WRFlags = 1 << 3 // data is in the entry, not in SGEs
	WRFlagsAll          = WRFence | WRSignaled | WRSolicited | WRInline
)

// SQEntry is an accessor over one send queue entry.
type SQEntry []byte

func (e SQEntry) Opcode() WROpcode   { return WROpcode(e[SQOffOpcode]) }
func (e SQEntry) Flags() WRFlags     { return WRFlags(e[SQOffFlags]) }
func (e SQEntry) NumSGE() int        { return int(e[SQOffNumSGE]) }
func (e SQEntry) InlineLen() int     { return int(e[SQOffInline]) }
func (e SQEntry) WRID() uint64       { return le.Uint64(e[SQOffWRID:]) }
func (e SQEntry) RemoteAddr() uint64 { return le.Uint64(e[SQOffRAddr:]) }
func (e SQEntry) RKey() uint32       { return le.Uint32(e[SQOffRKey:]) }
func (e SQEntry) InvSTag() uint32    { return le.Uint32(e[SQOffInvSTag:]) }
func (e SQEntry) ImmData() uint64    { return le.Uint64(e[SQOffImm:]) }
func (e SQEntry) SGE(i int) []byte   { o := SQOffSGE + i*SGESize; return e[o : o+SGESize] }
func (e SQEntry) Inline() []byte     { return e[SQOffSGE : SQOffSGE+MaxInline] }

// SendWR is the fields of a send queue entry.
type SendWR struct {
	Opcode     WROpcode
	Flags      WRFlags
	WRID       uint64
	RemoteAddr uint64
	RKey       uint32
	InvSTag    uint32
	ImmData    uint64
	CompareAdd uint64
	Swap       uint64
	NumSGE     int // 0..MaxSendSGE
	SGL        [MaxSendSGE]SGE
	InlineLen  int // with WRInline
	InlineData [MaxInline]byte
}

// Encode writes the fields into e (bytes 4 and up; the control word belongs to
// the ring).
func (w *SendWR) Encode(e SQEntry) {
	_ = e[SQEntrySize-1]
	e[SQOffOpcode] = byte(w.Opcode)
	e[SQOffFlags] = byte(w.Flags)
	e[SQOffNumSGE] = byte(w.NumSGE)
	e[SQOffInline] = byte(w.InlineLen)
	le.PutUint64(e[SQOffWRID:], w.WRID)
	le.PutUint64(e[SQOffRAddr:], w.RemoteAddr)
	le.PutUint32(e[SQOffRKey:], w.RKey)
	le.PutUint32(e[SQOffInvSTag:], w.InvSTag)
	le.PutUint64(e[SQOffImm:], w.ImmData)
	le.PutUint64(e[SQOffCmpAdd:], w.CompareAdd)
	le.PutUint64(e[SQOffSwap:], w.Swap)
	le.PutUint64(e[0x38:], 0)
	if w.Flags&WRInline != 0 {
		copy(e[SQOffSGE:SQOffSGE+MaxInline], w.InlineData[:])
		return
	}
	for i := range MaxSendSGE {
		w.SGL[i].Encode(e.SGE(i))
	}
}

// Decode reads the fields from e, which must be a whole entry. Counts are
// returned as found; the device judges them.
func (w *SendWR) Decode(e SQEntry) error {
	if len(e) < SQEntrySize {
		return fmt.Errorf("%w: SQ entry of %d bytes, want %d", ErrShortWR, len(e), SQEntrySize)
	}
	w.Opcode, w.Flags, w.NumSGE, w.InlineLen = e.Opcode(), e.Flags(), e.NumSGE(), e.InlineLen()
	w.WRID, w.RemoteAddr, w.RKey, w.InvSTag = e.WRID(), e.RemoteAddr(), e.RKey(), e.InvSTag()
	w.ImmData, w.CompareAdd, w.Swap = e.ImmData(), le.Uint64(e[SQOffCmpAdd:]), le.Uint64(e[SQOffSwap:])
	if w.Flags&WRInline != 0 {
		copy(w.InlineData[:], e.Inline())
		w.SGL = [MaxSendSGE]SGE{}
		return nil
	}
	for i := range MaxSendSGE {
		_ = w.SGL[i].Decode(e.SGE(i))
	}
	return nil
}

// Receive queue entry (64 bytes):
//
//	0x00 u32 ring control word
//	0x04 u8  NumSGE (0..MaxRecvSGE)
//	0x05 [3] reserved, zero
//	0x08 u64 WRID
//	0x10 [3] SGE
const (
	RQEntrySize = 64
	MaxRecvSGE  = 3
	RQOffNumSGE = 0x04
	RQOffWRID   = 0x08
	RQOffSGE    = 0x10
)

// RQEntry is an accessor over one receive queue entry.
type RQEntry []byte

func (e RQEntry) NumSGE() int      { return int(e[RQOffNumSGE]) }
func (e RQEntry) WRID() uint64     { return le.Uint64(e[RQOffWRID:]) }
func (e RQEntry) SGE(i int) []byte { o := RQOffSGE + i*SGESize; return e[o : o+SGESize] }

// RecvWR is the fields of a receive queue entry.
type RecvWR struct {
	WRID   uint64
	NumSGE int
	SGL    [MaxRecvSGE]SGE
}

// Encode writes the fields into e (bytes 4 and up).
func (w *RecvWR) Encode(e RQEntry) {
	_ = e[RQEntrySize-1]
	e[RQOffNumSGE] = byte(w.NumSGE)
	e[0x05], e[0x06], e[0x07] = 0, 0, 0
	le.PutUint64(e[RQOffWRID:], w.WRID)
	for i := range MaxRecvSGE {
		w.SGL[i].Encode(e.SGE(i))
	}
}

// Decode reads the fields from e.
func (w *RecvWR) Decode(e RQEntry) error {
	if len(e) < RQEntrySize {
		return fmt.Errorf("%w: RQ entry of %d bytes, want %d", ErrShortWR, len(e), RQEntrySize)
	}
	w.NumSGE, w.WRID = e.NumSGE(), e.WRID()
	for i := range MaxRecvSGE {
		_ = w.SGL[i].Decode(e.SGE(i))
	}
	return nil
}

// Completion queue entry (32 bytes):
//
//	0x00 u32 ring control word
//	0x04 u8  Opcode (WCOpcode)
//	0x05 u8  Status (WCStatus)
//	0x06 u8  Flags (WCFlags)
//	0x07 u8  reserved, zero
//	0x08 u64 WRID
//	0x10 u32 ByteLen: bytes received (receives) or transferred (RDMA Read)
//	0x14 u32 QPN
//	0x18 u64 ImmData (WCWithImm) or the invalidated STag in the low 32 bits (WCWithInv)
const (
	CQEntrySize   = 32
	CQOffOpcode   = 0x04
	CQOffStatus   = 0x05
	CQOffFlags    = 0x06
	CQOffWRID     = 0x08
	CQOffByteLen  = 0x10
	CQOffQPN      = 0x14
	CQOffImmOrInv = 0x18
)

// WCOpcode is a completion's operation (ibv_wc_opcode values).
type WCOpcode uint8

// Completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompSwap        WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCBindMW          WCOpcode = 5
	WCLocalInv        WCOpcode = 6
	WCRegMR           WCOpcode = 10 // the kernel's IB_WC_REG_MR
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

func (o WCOpcode) String() string {
	switch o {
	case WCSend:
		return "SEND"
	case WCRDMAWrite:
		return "RDMA_WRITE"
	case WCRDMARead:
		return "RDMA_READ"
	case WCCompSwap:
		return "COMP_SWAP"
	case WCFetchAdd:
		return "FETCH_ADD"
	case WCBindMW:
		return "BIND_MW"
	case WCLocalInv:
		return "LOCAL_INV"
	case WCRegMR:
		return "REG_MR"
	case WCRecv:
		return "RECV"
	case WCRecvRDMAWithImm:
		return "RECV_RDMA_WITH_IMM"
	}
	return "WC_" + strconv.Itoa(int(o))
}

// WCStatus is a completion status (ibv_wc_status values).
type WCStatus uint8

// Completion statuses. The device uses the ones named in docs/iwarp.md.
const (
	WCSuccess         WCStatus = 0
	WCLocLenErr       WCStatus = 1
	WCLocQPOpErr      WCStatus = 2
	WCLocProtErr      WCStatus = 4
	WCWRFlushErr      WCStatus = 5
	WCBadRespErr      WCStatus = 7
	WCLocAccessErr    WCStatus = 8
	WCRemInvReqErr    WCStatus = 9
	WCRemAccessErr    WCStatus = 10
	WCRemOpErr        WCStatus = 11
	WCRemInvRdReqErr  WCStatus = 15
	WCRemAbortErr     WCStatus = 16
	WCFatalErr        WCStatus = 19
	WCGeneralErr      WCStatus = 21
	wcStatusNameCount          = 22
)

var wcStatusNames = [wcStatusNameCount]string{0: "SUCCESS", 1: "LOC_LEN_ERR", 2: "LOC_QP_OP_ERR", 4: "LOC_PROT_ERR",
	5: "WR_FLUSH_ERR", 7: "BAD_RESP_ERR", 8: "LOC_ACCESS_ERR", 9: "REM_INV_REQ_ERR", 10: "REM_ACCESS_ERR",
	11: "REM_OP_ERR", 15: "REM_INV_RD_REQ_ERR", 16: "REM_ABORT_ERR", 19: "FATAL_ERR", 21: "GENERAL_ERR"}

func (s WCStatus) String() string {
	if int(s) < len(wcStatusNames) && wcStatusNames[s] != "" {
		return wcStatusNames[s]
	}
	return "WC_STATUS_" + strconv.Itoa(int(s))
}

// WCFlags qualify a completion (ibv_wc_flags values where rdma-core has one).
type WCFlags uint8

// Completion flags.
const (
	WCWithImm    WCFlags = 1 << 1 // ImmData is valid
	WCWithInv    WCFlags = 1 << 3 // the low 32 bits of ImmData are the STag the peer invalidated
	WCSolicitedF WCFlags = 1 << 7 // the message asked for a solicited event (emunic)
)

// CQEntry is an accessor over one completion queue entry.
type CQEntry []byte

func (e CQEntry) Opcode() WCOpcode { return WCOpcode(e[CQOffOpcode]) }
func (e CQEntry) Status() WCStatus { return WCStatus(e[CQOffStatus]) }
func (e CQEntry) Flags() WCFlags   { return WCFlags(e[CQOffFlags]) }
func (e CQEntry) WRID() uint64     { return le.Uint64(e[CQOffWRID:]) }
func (e CQEntry) ByteLen() uint32  { return le.Uint32(e[CQOffByteLen:]) }
func (e CQEntry) QPN() uint32      { return le.Uint32(e[CQOffQPN:]) }
func (e CQEntry) ImmData() uint64  { return le.Uint64(e[CQOffImmOrInv:]) }

// Completion is the fields of a completion queue entry.
type Completion struct {
	Opcode  WCOpcode
	Status  WCStatus
	Flags   WCFlags
	WRID    uint64
	ByteLen uint32
	QPN     uint32
	ImmData uint64 // or the invalidated STag (WCWithInv)
}

// Encode writes the fields into e (bytes 4 and up).
func (c *Completion) Encode(e CQEntry) {
	_ = e[CQEntrySize-1]
	le.PutUint32(e[CQOffOpcode:], uint32(c.Opcode)|uint32(c.Status)<<8|uint32(c.Flags)<<16)
	le.PutUint64(e[CQOffWRID:], c.WRID)
	le.PutUint64(e[CQOffByteLen:], uint64(c.ByteLen)|uint64(c.QPN)<<32)
	le.PutUint64(e[CQOffImmOrInv:], c.ImmData)
}

// Decode reads the fields from e.
func (c *Completion) Decode(e CQEntry) error {
	if len(e) < CQEntrySize {
		return fmt.Errorf("%w: CQ entry of %d bytes, want %d", ErrShortWR, len(e), CQEntrySize)
	}
	*c = Completion{Opcode: e.Opcode(), Status: e.Status(), Flags: e.Flags(), WRID: e.WRID(),
		ByteLen: e.ByteLen(), QPN: e.QPN(), ImmData: e.ImmData()}
	return nil
}

func (c *Completion) String() string {
	return fmt.Sprintf("{%v %v wrid=%#x len=%d qpn=%d flags=%#x imm=%#x}", c.Opcode, c.Status, c.WRID, c.ByteLen, c.QPN, c.Flags, c.ImmData)
}

// Ring geometry helpers for the host side.

// AllocSQ allocates a send queue ring of count entries in a.
func AllocSQ(a *Arena, count uint32) (Layout, error) {
	return AllocRing(a, count, SQEntrySize)
}

// AllocRQ allocates a receive queue ring of count entries in a.
func AllocRQ(a *Arena, count uint32) (Layout, error) {
	return AllocRing(a, count, RQEntrySize)
}

// AllocCQ allocates a completion queue ring of count entries in a.
func AllocCQ(a *Arena, count uint32) (Layout, error) {
	return AllocRing(a, count, CQEntrySize)
}
