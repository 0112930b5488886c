package rings

import "errors"

// RDMA control through the command ring. Memory registration, completion
// queues and queue pairs are created by command; the work request and
// completion rings themselves (SQEntry, RQEntry, CQEntry in wqe.go) live in
// host memory like every other ring.
//
//	REG_MR      Addr: host address of the region; Len: bytes; Arg3: VA (tagged
//	            offset of the first byte; ignored with AccessZeroBased);
//	            Arg0: protection domain; Arg1: access flags (MRAccess*).
//	            Result: the STag (24-bit index << 8 | 8-bit key).
//	            Arg1 = MRAccessFastReg: the STag is allocated invalid, for
//	            REG_MR work requests mapping memory inside [Addr, +Len).
//	DEREG_MR    Arg0: STag.
//	CREATE_CQ   Conn: CQ number (host chosen, < device limit); Addr: the CQ
//	            ring's base; Arg0: entries (power of two). The ring is a
//	            Layout with CQEntrySize entries.
//	DESTROY_CQ  Conn: CQ number.
//	ARM_CQ      Conn: CQ number; Arg0: 1 = solicited completions only.
//	            The next matching completion posts one NtfCQEvent (Conn = CQ
//	            number), then the CQ is disarmed (ibv_req_notify_cq).
//	CREATE_QP   Conn: the delegated connection the QP runs on (its QP
//	            number is the connection index); Addr/Len: a QPConfig block.
//	            The connection must be ESTABLISHED with no data exchanged
//	            since OFFLOAD and no user buffers posted.
//	MODIFY_QP   Conn: connection index; Arg0: QPAction; for ACCEPT/REJECT,
//	            Addr/Len: private data (at most 512 bytes).
//	DESTROY_QP  Conn: connection index. Outstanding work completes flushed.
//	QP_DOORBELL Conn: connection index: the host posted to the SQ or RQ.
//
// A device with FeatQPDoorbell (bar0.go) also takes a QP's doorbell and a
// CQ's arm as posted register writes (RegQPDoorbell, RegCQArm), with no
// command: what a host rings per message.
//
// QP and CQ events reach the host as notifications: NtfQPEvent (Conn =
// connection index, Aux = QPEvent) and NtfCQEvent (Conn = CQ number).
//
// The opcodes are with every other family's in command.go, and each one's
// row of the command table (Commands) is there too.

// Notification flags for RDMA events.
const (
	NtfQPEvent NotifyFlags = 1 << 12 // Aux = QPEvent
	NtfCQEvent NotifyFlags = 1 << 13 // Conn = CQ number
)

func init() { notifyFlagNames = append(notifyFlagNames, "QP_EVENT", "CQ_EVENT") }

// MR access flags (ibv_access_flags values).
const (
	MRAccessLocalWrite   = 1 << 0
	MRAccessRemoteWrite  = 1 << 1
	MRAccessRemoteRead   = 1 << 2
	MRAccessRemoteAtomic = 1 << 3
	MRAccessZeroBased    = 1 << 5
	// MRAccessFastReg, alone, makes REG_MR allocate an STag for fast
	// registration (ib_alloc_mr; iWARP's Allocate Non-Shared Memory
	// Region STag): it starts invalid, and [Addr, Addr+Len) bounds the
	// host memory a REG_MR work request may map under it.
	MRAccessFastReg = 1 << 6
)

// QPAction is MODIFY_QP's Arg0.
type QPAction uint32

// QP actions.
const (
	QPConnect QPAction = 1 // initiator: send the MPA request (RTR → RTS on the reply)
	QPAccept  QPAction = 2 // responder: accept the MPA request with private data
	QPReject  QPAction = 3 // responder: reject it (MPA reply with the R bit)
	QPClose   QPAction = 4 // orderly close: outstanding work completes, then the connection closes
)

// QPEvent is the Aux of an NtfQPEvent.
type QPEvent uint32

// QP events (the device's iwarp.Event values).
const (
	QPEvConnectRequest QPEvent = 1 // responder: a valid MPA request arrived (answer with ACCEPT or REJECT)
	QPEvEstablished    QPEvent = 2 // the QP entered RTS
	QPEvRejected       QPEvent = 3
	QPEvTerminate      QPEvent = 4 // a Terminate was sent or received: the QP is in ERROR
	QPEvError          QPEvent = 5
	QPEvClosed         QPEvent = 6
)

// The QP configuration block (CREATE_QP's Addr/Len), 96 bytes,
// little-endian:
//
//	0x00 u32 PD
//	0x04 u32 flags (QPFlagInitiator, QPFlagNoCRC, QPFlagPeerToPeer, QPFlagMPARev1)
//	0x08 u16 IRD, 0x0A u16 ORD (0: device default 16)
//	0x0C u32 send CQ number
//	0x10 u32 receive CQ number
//	0x14 u32 reserved, zero
//	0x18 u64 SQ base, 0x20 u32 SQ entries (SQEntrySize each), 0x24 u32 reserved
//	0x28 u64 RQ base, 0x30 u32 RQ entries (RQEntrySize each), 0x34 u32 reserved
//	0x38 u64 private data address (initiator: sent in the MPA request)
//	0x40 u32 private data length (at most 512)
//	0x44 u32 reserved, zero
//	0x48 u64 peer private data address: 512 bytes where the device writes
//	         the private data of the peer's MPA request (responder, before
//	         QPEvConnectRequest) or reply (initiator, before QPEvEstablished
//	         or QPEvRejected); the event notification's Len is its length.
//	         0: not delivered.
//	0x50..0x5F reserved, zero
const (
	QPConfigSize = 96

	QcOffPD       = 0x00
	QcOffFlags    = 0x04
	QcOffIRD      = 0x08
	QcOffORD      = 0x0A
	QcOffSendCQ   = 0x0C
	QcOffRecvCQ   = 0x10
	QcOffSQBase   = 0x18
	QcOffSQCount  = 0x20
	QcOffRQBase   = 0x28
	QcOffRQCount  = 0x30
	QcOffPrivAddr = 0x38
	QcOffPrivLen  = 0x40
	QcOffPeerPriv = 0x48

	QPFlagInitiator  = 1 << 0
	QPFlagNoCRC      = 1 << 1 // do not ask for MPA CRC (used anyway if the peer asks)
	QPFlagPeerToPeer = 1 << 2 // initiator: ask for RFC 6581 peer-to-peer mode (RTR)
	QPFlagMPARev1    = 1 << 3 // initiator: MPA revision 1 (RFC 5044) instead of 2
)

// QPConfig is the fields of a QP configuration block.
type QPConfig struct {
	PD             uint32
	Flags          uint32
	IRD, ORD       uint16
	SendCQ, RecvCQ uint32
	SQBase         Addr
	SQCount        uint32
	RQBase         Addr
	RQCount        uint32
	PrivAddr       Addr
	PrivLen        uint32
	PeerPrivAddr   Addr // where the device writes the peer's private data (0: nowhere)
}

// Encode writes the block.
func (q *QPConfig) Encode(b []byte) {
	_ = b[QPConfigSize-1]
	clear(b[:QPConfigSize])
	le.PutUint32(b[QcOffPD:], q.PD)
	le.PutUint32(b[QcOffFlags:], q.Flags)
	le.PutUint16(b[QcOffIRD:], q.IRD)
	le.PutUint16(b[QcOffORD:], q.ORD)
	le.PutUint32(b[QcOffSendCQ:], q.SendCQ)
	le.PutUint32(b[QcOffRecvCQ:], q.RecvCQ)
	le.PutUint64(b[QcOffSQBase:], uint64(q.SQBase))
	le.PutUint32(b[QcOffSQCount:], q.SQCount)
	le.PutUint64(b[QcOffRQBase:], uint64(q.RQBase))
	le.PutUint32(b[QcOffRQCount:], q.RQCount)
	le.PutUint64(b[QcOffPrivAddr:], uint64(q.PrivAddr))
	le.PutUint32(b[QcOffPrivLen:], q.PrivLen)
	le.PutUint64(b[QcOffPeerPriv:], uint64(q.PeerPrivAddr))
}

// Decode reads the block; reserved bytes must be zero.
func (q *QPConfig) Decode(b []byte) error {
	if len(b) < QPConfigSize {
		return errShort("QP config", len(b), QPConfigSize)
	}
	for _, r := range [][2]int{{0x14, 0x18}, {0x24, 0x28}, {0x34, 0x38}, {0x44, 0x48}, {0x50, QPConfigSize}} {
		for _, c := range b[r[0]:r[1]] {
			if c != 0 {
				return errReserved
			}
		}
	}
	*q = QPConfig{
		PD: le.Uint32(b[QcOffPD:]), Flags: le.Uint32(b[QcOffFlags:]),
		IRD: le.Uint16(b[QcOffIRD:]), ORD: le.Uint16(b[QcOffORD:]),
		SendCQ: le.Uint32(b[QcOffSendCQ:]), RecvCQ: le.Uint32(b[QcOffRecvCQ:]),
		SQBase: Addr(le.Uint64(b[QcOffSQBase:])), SQCount: le.Uint32(b[QcOffSQCount:]),
		RQBase: Addr(le.Uint64(b[QcOffRQBase:])), RQCount: le.Uint32(b[QcOffRQCount:]),
		PrivAddr: Addr(le.Uint64(b[QcOffPrivAddr:])), PrivLen: le.Uint32(b[QcOffPrivLen:]),
		PeerPrivAddr: Addr(le.Uint64(b[QcOffPeerPriv:])),
	}
	return nil
}

var errReserved = errors.New("rings: QP config: reserved bytes are not zero")
