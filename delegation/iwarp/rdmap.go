package iwarp

import (
	"fmt"
	"strconv"
)

// RDMAP (RFC 5040, extended by RFC 7306). The RDMAP control byte is the first
// byte of DDP's RsvdULP:
//
//	bits 7..6 RV (RDMAP version, 1) | bits 5..4 reserved (zero) | bits 3..0 opcode
//
// Send with Invalidate carries the Invalidate STag in RsvdULP[1..4]; every
// other untagged message has zeros there.
const (
	RDMAPVersion     = 1
	RDMAPMaskVersion = 0xC0
	RDMAPMaskRsvd    = 0x30
	RDMAPMaskOpcode  = 0x0F
)

// Opcode is an RDMAP message type.
type Opcode uint8

// RDMAP opcodes.
const (
	OpWrite          Opcode = 0  // tagged
	OpReadRequest    Opcode = 1  // untagged, QN 1
	OpReadResponse   Opcode = 2  // tagged
	OpSend           Opcode = 3  // untagged, QN 0
	OpSendInv        Opcode = 4  // untagged, QN 0, Invalidate STag
	OpSendSE         Opcode = 5  // untagged, QN 0, solicited event
	OpSendSEInv      Opcode = 6  // untagged, QN 0, solicited event, Invalidate STag
	OpTerminate      Opcode = 7  // untagged, QN 2
	OpImmediate      Opcode = 8  // RFC 7306: untagged, QN 0, 8 bytes of immediate data
	OpImmediateSE    Opcode = 9  // RFC 7306: same with solicited event
	OpAtomicRequest  Opcode = 10 // RFC 7306: untagged, QN 3 (parsed and encoded; not executed)
	OpAtomicResponse Opcode = 11 // RFC 7306: untagged, QN 4
)

var opcodeNames = [...]string{"Write", "ReadRequest", "ReadResponse", "Send", "SendInv", "SendSE",
	"SendSEInv", "Terminate", "Immediate", "ImmediateSE", "AtomicRequest", "AtomicResponse"}

func (o Opcode) String() string {
	if int(o) < len(opcodeNames) {
		return opcodeNames[o]
	}
	return "Opcode(" + strconv.Itoa(int(o)) + ")"
}

// Tagged reports whether the opcode uses the tagged buffer model.
func (o Opcode) Tagged() bool { return o == OpWrite || o == OpReadResponse }

// IsSend reports whether the opcode is one of the four Sends.
func (o Opcode) IsSend() bool { return o >= OpSend && o <= OpSendSEInv }

// Solicited reports whether the opcode asks for a solicited event.
func (o Opcode) Solicited() bool { return o == OpSendSE || o == OpSendSEInv || o == OpImmediateSE }

// Invalidates reports whether the opcode carries an Invalidate STag.
func (o Opcode) Invalidates() bool { return o == OpSendInv || o == OpSendSEInv }

// QN is the untagged queue the opcode uses (meaningless for tagged ones).
func (o Opcode) QN() uint32 {
	switch o {
	case OpReadRequest:
		return QNReadRequest
	case OpTerminate:
		return QNTerminate
	case OpAtomicRequest:
		return QNAtomicRequest
	case OpAtomicResponse:
		return QNAtomicResponse
	}
	return QNSend
}

// RDMAPCtrl is the RDMAP control byte of an opcode.
func RDMAPCtrl(op Opcode) uint8 { return RDMAPVersion<<6 | uint8(op)&RDMAPMaskOpcode }

// Read Request payload (28 bytes, after an untagged DDP header with QN 1,
// MO 0, L set):
//
//	0x00 u32 Data Sink STag
//	0x04 u64 Data Sink Tagged Offset
//	0x0C u32 RDMA Read Message Size
//	0x10 u32 Data Source STag
//	0x14 u64 Data Source Tagged Offset
const (
	ReadRequestLen = 28

	RROffSinkSTag = 0x00
	RROffSinkTO   = 0x04
	RROffSize     = 0x0C
	RROffSrcSTag  = 0x10
	RROffSrcTO    = 0x14
)

// ReadRequestHeader is an accessor over a Read Request payload.
type ReadRequestHeader []byte

func (r ReadRequestHeader) SinkSTag() uint32 { return be.Uint32(r[RROffSinkSTag:]) }
func (r ReadRequestHeader) SinkTO() uint64   { return be.Uint64(r[RROffSinkTO:]) }
func (r ReadRequestHeader) Size() uint32     { return be.Uint32(r[RROffSize:]) }
func (r ReadRequestHeader) SrcSTag() uint32  { return be.Uint32(r[RROffSrcSTag:]) }
func (r ReadRequestHeader) SrcTO() uint64    { return be.Uint64(r[RROffSrcTO:]) }

// ReadRequest is the fields of a Read Request payload.
type ReadRequest struct {
	SinkSTag uint32
	SinkTO   uint64
	Size     uint32
	SrcSTag  uint32
	SrcTO    uint64
}

// Encode writes the payload into b and returns ReadRequestLen.
func (r *ReadRequest) Encode(b []byte) int {
	_ = b[ReadRequestLen-1]
	be.PutUint32(b[RROffSinkSTag:], r.SinkSTag)
	be.PutUint64(b[RROffSinkTO:], r.SinkTO)
	be.PutUint32(b[RROffSize:], r.Size)
	be.PutUint32(b[RROffSrcSTag:], r.SrcSTag)
	be.PutUint64(b[RROffSrcTO:], r.SrcTO)
	return ReadRequestLen
}

// Decode reads the payload from b.
func (r *ReadRequest) Decode(b []byte) (int, error) {
	if len(b) < ReadRequestLen {
		return 0, errShort("read request", len(b), ReadRequestLen)
	}
	h := ReadRequestHeader(b)
	*r = ReadRequest{SinkSTag: h.SinkSTag(), SinkTO: h.SinkTO(), Size: h.Size(), SrcSTag: h.SrcSTag(), SrcTO: h.SrcTO()}
	return ReadRequestLen, nil
}

// Terminate payload (after an untagged DDP header with QN 2, MSN 1, MO 0, L
// set), RFC 5040 §4.8:
//
//	0x00 u8  Layer (bits 7..4) | EType (bits 3..0)
//	0x01 u8  Error Code
//	0x02 u16 HdrCt: M (0x8000) | D (0x4000) | R (0x2000) | reserved (0x1FFF)
//	0x04 u16 DDP Segment Length of the terminated segment  (if M or D)
//	0x06 [14|18] terminated DDP header                    (if D; its T flag gives the length)
//	     [28] terminated RDMA header: the Read Request     (if R)
//
// This engine sets M and D together and puts the ULPDU length of the
// offending FPDU (its DDP header included) in DDP Segment Length.
const (
	TermCtrlLen   = 4
	TermOffLayer  = 0x00
	TermOffCode   = 0x01
	TermOffHdrCt  = 0x02
	TermOffSegLen = 0x04
	TermOffDDP    = 0x06

	TermFlagM       = 0x8000
	TermFlagD       = 0x4000
	TermFlagR       = 0x2000
	TermMaskRsvd    = 0x1FFF
	MaxTerminateLen = TermOffDDP + DDPUntaggedHeaderLen + ReadRequestLen
)

// Error layers (Terminate Control, RFC 5040 §7.1).
const (
	LayerRDMAP = 0
	LayerDDP   = 1
	LayerLLP   = 2 // MPA
)

// Error types.
const (
	// RDMAP layer.
	ETypeRDMAPCatastrophic = 0
	ETypeRemoteProtection  = 1
	ETypeRemoteOperation   = 2
	// DDP layer.
	ETypeDDPCatastrophic = 0
	ETypeTaggedBuffer    = 1
	ETypeUntaggedBuffer  = 2
	// LLP layer.
	ETypeMPA = 0
)

// Error codes.
const (
	// RDMAP, Remote Protection (1) and Remote Operation (2) errors.
	CodeInvalidSTag       = 0x00
	CodeBaseBounds        = 0x01
	CodeAccessRights      = 0x02
	CodeSTagNotAssociated = 0x03
	CodeTOWrap            = 0x04
	CodeInvalidRDMAPVer   = 0x05
	CodeUnexpectedOpcode  = 0x06
	CodeCatastrophicLocal = 0x07 // localized to the RDMAP stream
	CodeCatastrophicAll   = 0x08
	CodeCannotInvalidate  = 0x09
	CodeUnspecified       = 0xFF

	// DDP, Tagged Buffer errors (EType 1).
	CodeTInvalidSTag    = 0x00
	CodeTBaseBounds     = 0x01
	CodeTNotAssociated  = 0x02
	CodeTTOWrap         = 0x03
	CodeTInvalidVersion = 0x04

	// DDP, Untagged Buffer errors (EType 2).
	CodeUInvalidQN      = 0x01
	CodeUNoBuffer       = 0x02 // Invalid MSN: no buffer available
	CodeUMSNRange       = 0x03 // Invalid MSN: MSN range is not valid
	CodeUInvalidMO      = 0x04
	CodeUTooLong        = 0x05 // DDP message too long for the available buffer
	CodeUInvalidVersion = 0x06

	// LLP (MPA, RFC 5044 §8).
	CodeMPAConnLost       = 0x01
	CodeMPACRC            = 0x02
	CodeMPAMarker         = 0x03 // marker and ULPDU length mismatch
	CodeMPAInvalidReqResp = 0x04
	// RFC 6581's, with siw's values (0x05 is "local catastrophic").
	CodeMPAInsufficientIRD = 0x06
	CodeMPANoMatchingRTR   = 0x07
)

// TermError names one Terminate error: layer, type and code.
type TermError struct {
	Layer, EType, Code uint8
}

func (e TermError) String() string {
	return fmt.Sprintf("%s/%d/%#02x", [...]string{"RDMAP", "DDP", "LLP", "?"}[min(int(e.Layer), 3)], e.EType, e.Code)
}

// TerminateHeader is an accessor over a Terminate payload.
type TerminateHeader []byte

func (t TerminateHeader) Layer() uint8     { return t[TermOffLayer] >> 4 }
func (t TerminateHeader) EType() uint8     { return t[TermOffLayer] & 0x0F }
func (t TerminateHeader) Code() uint8      { return t[TermOffCode] }
func (t TerminateHeader) HdrCt() uint16    { return be.Uint16(t[TermOffHdrCt:]) }
func (t TerminateHeader) M() bool          { return t.HdrCt()&TermFlagM != 0 }
func (t TerminateHeader) D() bool          { return t.HdrCt()&TermFlagD != 0 }
func (t TerminateHeader) R() bool          { return t.HdrCt()&TermFlagR != 0 }
func (t TerminateHeader) Error() TermError { return TermError{t.Layer(), t.EType(), t.Code()} }

// Terminate is the fields of a Terminate payload.
type Terminate struct {
	TermError
	M, D, R   bool
	Reserved  uint16 // low 13 bits of HdrCt; zero on send
	SegLen    uint16 // valid if M or D
	DDPHeader []byte // the terminated DDP header (14 or 18 bytes) if D
	RDMAHdr   []byte // the terminated Read Request (28 bytes) if R
}

// Len is the encoded size.
func (t *Terminate) Len() int {
	n := TermCtrlLen
	if t.M || t.D {
		n += 2
	}
	if t.D {
		n += len(t.DDPHeader)
	}
	if t.R {
		n += ReadRequestLen
	}
	return n
}

// Encode writes the payload into b and returns its length. DDPHeader must be
// a whole DDP header when D is set, RDMAHdr 28 bytes when R is set.
func (t *Terminate) Encode(b []byte) int {
	_ = b[t.Len()-1]
	b[TermOffLayer] = t.Layer<<4 | t.EType&0x0F
	b[TermOffCode] = t.Code
	h := t.Reserved & TermMaskRsvd
	if t.M {
		h |= TermFlagM
	}
	if t.D {
		h |= TermFlagD
	}
	if t.R {
		h |= TermFlagR
	}
	be.PutUint16(b[TermOffHdrCt:], h)
	n := TermCtrlLen
	if t.M || t.D {
		be.PutUint16(b[n:], t.SegLen)
		n += 2
	}
	if t.D {
		n += copy(b[n:], t.DDPHeader)
	}
	if t.R {
		n += copy(b[n:n+ReadRequestLen], t.RDMAHdr)
	}
	return n
}

// Decode reads a Terminate payload from b and returns its length. DDPHeader
// and RDMAHdr alias b. The terminated DDP header's length comes from its own
// T flag.
func (t *Terminate) Decode(b []byte) (int, error) {
	if len(b) < TermCtrlLen {
		return 0, errShort("terminate", len(b), TermCtrlLen)
	}
	h := TerminateHeader(b)
	*t = Terminate{TermError: h.Error(), M: h.M(), D: h.D(), R: h.R(), Reserved: h.HdrCt() & TermMaskRsvd}
	n := TermCtrlLen
	if t.M || t.D {
		if len(b) < n+2 {
			return 0, errShort("terminate", len(b), n+2)
		}
		t.SegLen = be.Uint16(b[n:])
		n += 2
	}
	if t.D {
		if len(b) < n+1 {
			return 0, errShort("terminate", len(b), n+1)
		}
		hl := DDPHeaderLen(b[n])
		if len(b) < n+hl {
			return 0, errShort("terminate", len(b), n+hl)
		}
		t.DDPHeader = b[n : n+hl : n+hl]
		n += hl
	}
	if t.R {
		if len(b) < n+ReadRequestLen {
			return 0, errShort("terminate", len(b), n+ReadRequestLen)
		}
		t.RDMAHdr = b[n : n+ReadRequestLen : n+ReadRequestLen]
		n += ReadRequestLen
	}
	return n, nil
}

// ImmediateDataLen is the payload of an Immediate Data message (RFC 7306).
const ImmediateDataLen = 8

// Atomic Request payload (RFC 7306 §5.2, 52 bytes, untagged QN 3):
//
//	0x00 u32 reserved (28 bits) | Atomic Operation (4 bits)
//	0x04 u32 Request Identifier
//	0x08 u32 Remote STag
//	0x0C u64 Remote Tagged Offset (8-byte aligned)
//	0x14 u64 Add or Swap Data
//	0x1C u64 Add or Swap Mask
//	0x24 u64 Compare Data
//	0x2C u64 Compare Mask
//
// Atomic Response payload (12 bytes, untagged QN 4):
//
//	0x00 u32 Original Request Identifier
//	0x04 u64 Original Remote Data Value
const (
	AtomicRequestLen  = 52
	AtomicResponseLen = 12

	AROffOp      = 0x00
	AROffReqID   = 0x04
	AROffSTag    = 0x08
	AROffTO      = 0x0C
	AROffData    = 0x14
	AROffMask    = 0x1C
	AROffCmp     = 0x24
	AROffCmpMask = 0x2C

	ARspOffReqID = 0x00
	ARspOffValue = 0x04
)

// AtomicOp is the operation of an Atomic Request.
type AtomicOp uint8

// Atomic operations.
const (
	AtomicFetchAdd AtomicOp = 0
	AtomicSwap     AtomicOp = 1
	AtomicCmpSwap  AtomicOp = 2
)

// AtomicRequestHeader is an accessor over an Atomic Request payload.
type AtomicRequestHeader []byte

func (a AtomicRequestHeader) Op() AtomicOp        { return AtomicOp(be.Uint32(a[AROffOp:]) & 0x0F) }
func (a AtomicRequestHeader) ReqID() uint32       { return be.Uint32(a[AROffReqID:]) }
func (a AtomicRequestHeader) STag() uint32        { return be.Uint32(a[AROffSTag:]) }
func (a AtomicRequestHeader) TO() uint64          { return be.Uint64(a[AROffTO:]) }
func (a AtomicRequestHeader) Data() uint64        { return be.Uint64(a[AROffData:]) }
func (a AtomicRequestHeader) Mask() uint64        { return be.Uint64(a[AROffMask:]) }
func (a AtomicRequestHeader) Compare() uint64     { return be.Uint64(a[AROffCmp:]) }
func (a AtomicRequestHeader) CompareMask() uint64 { return be.Uint64(a[AROffCmpMask:]) }

// AtomicRequest is the fields of an Atomic Request payload.
type AtomicRequest struct {
	Op          AtomicOp
	Reserved    uint32 // upper 28 bits of the first word; zero on send
	ReqID       uint32
	STag        uint32
	TO          uint64
	Data, Mask  uint64
	Compare     uint64
	CompareMask uint64
}

// Encode writes the payload into b and returns AtomicRequestLen.
func (a *AtomicRequest) Encode(b []byte) int {
	_ = b[AtomicRequestLen-1]
	be.PutUint32(b[AROffOp:], a.Reserved<<4|uint32(a.Op)&0x0F)
	be.PutUint32(b[AROffReqID:], a.ReqID)
	be.PutUint32(b[AROffSTag:], a.STag)
	be.PutUint64(b[AROffTO:], a.TO)
	be.PutUint64(b[AROffData:], a.Data)
	be.PutUint64(b[AROffMask:], a.Mask)
	be.PutUint64(b[AROffCmp:], a.Compare)
	be.PutUint64(b[AROffCmpMask:], a.CompareMask)
	return AtomicRequestLen
}

// Decode reads the payload from b.
func (a *AtomicRequest) Decode(b []byte) (int, error) {
	if len(b) < AtomicRequestLen {
		return 0, errShort("atomic request", len(b), AtomicRequestLen)
	}
	h := AtomicRequestHeader(b)
	*a = AtomicRequest{Op: h.Op(), Reserved: be.Uint32(b[AROffOp:]) >> 4, ReqID: h.ReqID(), STag: h.STag(),
		TO: h.TO(), Data: h.Data(), Mask: h.Mask(), Compare: h.Compare(), CompareMask: h.CompareMask()}
	return AtomicRequestLen, nil
}

// AtomicResponse is the fields of an Atomic Response payload.
type AtomicResponse struct {
	ReqID uint32
	Value uint64
}

// Encode writes the payload into b and returns AtomicResponseLen.
func (a *AtomicResponse) Encode(b []byte) int {
	_ = b[AtomicResponseLen-1]
	be.PutUint32(b[ARspOffReqID:], a.ReqID)
	be.PutUint64(b[ARspOffValue:], a.Value)
	return AtomicResponseLen
}

// Decode reads the payload from b.
func (a *AtomicResponse) Decode(b []byte) (int, error) {
	if len(b) < AtomicResponseLen {
		return 0, errShort("atomic response", len(b), AtomicResponseLen)
	}
	*a = AtomicResponse{ReqID: be.Uint32(b[ARspOffReqID:]), Value: be.Uint64(b[ARspOffValue:])}
	return AtomicResponseLen, nil
}
