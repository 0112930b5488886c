package iwarp

import "github.com/emunic/emunic/rings"

// The verbs queue layouts (SQ, RQ and CQ entries) are part of the ring ABI
// the host and the device share, so they live in package rings; these
// aliases keep the device code reading naturally.

type (
	SGE        = rings.SGE
	WROpcode   = rings.WROpcode
	WRFlags    = rings.WRFlags
	SQEntry    = rings.SQEntry
	SendWR     = rings.SendWR
	RQEntry    = rings.RQEntry
	RecvWR     = rings.RecvWR
	WCOpcode   = rings.WCOpcode
	WCStatus   = rings.WCStatus
	WCFlags    = rings.WCFlags
	CQEntry    = rings.CQEntry
	Completion = rings.Completion
)

const (
	SGESize           = rings.SGESize
	SGEOffAddr        = rings.SGEOffAddr
	SGEOffLen         = rings.SGEOffLen
	SGEOffLKey        = rings.SGEOffLKey
	SQEntrySize       = rings.SQEntrySize
	MaxSendSGE        = rings.MaxSendSGE
	MaxInline         = rings.MaxInline
	SQOffOpcode       = rings.SQOffOpcode
	SQOffFlags        = rings.SQOffFlags
	SQOffNumSGE       = rings.SQOffNumSGE
	SQOffInline       = rings.SQOffInline
	SQOffWRID         = rings.SQOffWRID
	SQOffRAddr        = rings.SQOffRAddr
	SQOffRKey         = rings.SQOffRKey
	SQOffInvSTag      = rings.SQOffInvSTag
	SQOffImm          = rings.SQOffImm
	SQOffCmpAdd       = rings.SQOffCmpAdd
	SQOffSwap         = rings.SQOffSwap
	SQOffSGE          = rings.SQOffSGE
	WRRDMAWrite       = rings.WRRDMAWrite
	WRRDMAWriteImm    = rings.WRRDMAWriteImm
	WRSend            = rings.WRSend
	WRSendImm         = rings.WRSendImm
	WRRDMARead        = rings.WRRDMARead
	WRAtomicCmpSwap   = rings.WRAtomicCmpSwap
	WRAtomicFetchAdd  = rings.WRAtomicFetchAdd
	WRLocalInv        = rings.WRLocalInv
	WRBindMW          = rings.WRBindMW
	WRSendInv         = rings.WRSendInv
	WRRegMR           = rings.WRRegMR
	WRFence           = rings.WRFence
	WRSignaled        = rings.WRSignaled
	WRSolicited       = rings.WRSolicited
	WRInline          = rings.WRInline
	WRFlagsAll        = rings.WRFlagsAll
	RQEntrySize       = rings.RQEntrySize
	MaxRecvSGE        = rings.MaxRecvSGE
	RQOffNumSGE       = rings.RQOffNumSGE
	RQOffWRID         = rings.RQOffWRID
	RQOffSGE          = rings.RQOffSGE
	CQEntrySize       = rings.CQEntrySize
	CQOffOpcode       = rings.CQOffOpcode
	CQOffStatus       = rings.CQOffStatus
	CQOffFlags        = rings.CQOffFlags
	CQOffWRID         = rings.CQOffWRID
	CQOffByteLen      = rings.CQOffByteLen
	CQOffQPN          = rings.CQOffQPN
	CQOffImmOrInv     = rings.CQOffImmOrInv
	WCSend            = rings.WCSend
	WCRDMAWrite       = rings.WCRDMAWrite
	WCRDMARead        = rings.WCRDMARead
	WCCompSwap        = rings.WCCompSwap
	WCFetchAdd        = rings.WCFetchAdd
	WCBindMW          = rings.WCBindMW
	WCLocalInv        = rings.WCLocalInv
	WCRegMR           = rings.WCRegMR
	WCRecv            = rings.WCRecv
	WCRecvRDMAWithImm = rings.WCRecvRDMAWithImm
	WCSuccess         = rings.WCSuccess
	WCLocLenErr       = rings.WCLocLenErr
	WCLocQPOpErr      = rings.WCLocQPOpErr
	WCLocProtErr      = rings.WCLocProtErr
	WCWRFlushErr      = rings.WCWRFlushErr
	WCBadRespErr      = rings.WCBadRespErr
	WCLocAccessErr    = rings.WCLocAccessErr
	WCRemInvReqErr    = rings.WCRemInvReqErr
	WCRemAccessErr    = rings.WCRemAccessErr
	WCRemOpErr        = rings.WCRemOpErr
	WCRemInvRdReqErr  = rings.WCRemInvRdReqErr
	WCRemAbortErr     = rings.WCRemAbortErr
	WCFatalErr        = rings.WCFatalErr
	WCGeneralErr      = rings.WCGeneralErr
	WCWithImm         = rings.WCWithImm
	WCWithInv         = rings.WCWithInv
	WCSolicitedF      = rings.WCSolicitedF
)

var (
	AllocSQ = rings.AllocSQ
	AllocRQ = rings.AllocRQ
	AllocCQ = rings.AllocCQ
)
