// Package iwarp is the device-side iWARP protocol engine of the emulated
// RNIC: MPA (RFC 5044) negotiation and FPDU framing, DDP (RFC 5041)
// placement, RDMAP (RFC 5040) with RFC 7306 Immediate Data, on top of the
// in-order byte stream of one delegated TCP connection. It places inbound
// data straight into registered host memory through rings.DMA (the host
// never copies) and reads outbound payload from host memory the same way.
//
// It runs inside the offload unit goroutine: single-threaded, no locks, no
// allocation per FPDU. It imports rings only; the TCP engine (package
// delegation) and the nic drive it through the seam below. docs/iwarp.md
// gives every wire and ring byte.
//
// # Objects
//
//	mem := iwarp.NewMemTable(dma, size, seed)   // device-wide regions and STags
//	cq, _ := iwarp.NewCQ(dma, cqLayout, notify) // one per host CQ ring; shareable
//	qp, _ := iwarp.NewQP(dma, mem, iwarp.Config{QPN, PD, Initiator, MSS, IRD, ORD,
//	        PrivateData, SQ, RQ, SendCQ, RecvCQ, OnEvent})
//
// Memory registration: mem.Register / Deregister / Invalidate / Revalidate /
// Lookup / Resolve, or from the command ring mem.RegMRCommand(&cmd) and
// mem.DeregMRCommand(&cmd) (argument conventions in commands.go).
//
// # The seam with the TCP engine
//
// Receive: for every in-order payload byte range of the connection (any
// split; FPDUs may straddle calls), call
//
//	qp.Receive(payload)
//
// It takes all bytes; an incomplete FPDU is held in the QP (at most one,
// 64 KiB). Nothing of an FPDU is placed before its CRC is verified. Each
// DDP segment is then dispatched through one table indexed by RDMAP
// opcode (rxOps, rxops.go: header length, queue, validator, handler); the
// handlers are in rx.go.
//
// Transmit: the QP never pushes; the TCP engine pulls when it has room in
// its send buffer:
//
//	n := qp.Transmit(dst) // whole FPDUs (and the MPA frame), zero-copy into dst
//
// or, through the QP's own buffer, into anything implementing Stream
// (Space() int; Write([]byte) int):
//
//	qp.Pump(stream)
//
// An FPDU is at most Config.MSS bytes and never split across calls, so
// calling Transmit with one MSS of room yields FPDU-aligned segments.
// qp.HasOutput() says whether Transmit would produce bytes; qp.Poll() is the
// SQ/RQ doorbell handler (flushes work posted to a dead QP).
//
// Connection management: an initiator calls qp.Connect() once the TCP
// connection is delegated (the MPA request goes out on the next Transmit);
// a responder gets EvConnectRequest (PeerPrivateData) and answers with
// qp.Accept(pd) or qp.Reject(pd) — either may also be called in advance.
// qp.Close() for an orderly close, qp.LLPClosed() when the TCP connection is
// gone. qp.WantClose() turns true when the connection should be closed (the
// QP rejected, terminated or failed, and its last bytes went out).
//
// Events (Config.OnEvent, synchronous, must not call Receive/Transmit/Pump):
// EvConnectRequest, EvEstablished, EvRejected, EvTerminate, EvError,
// EvClosed. Completion notifications go through the CQ's notify function
// after cq.Arm(solicitedOnly).
//
// # Host rings
//
// SQ (SQEntrySize 128: SendWR), RQ (RQEntrySize 64: RecvWR) and CQ
// (CQEntrySize 32: Completion) are rings.Layout rings in host memory; the
// host produces SQ/RQ entries with rings.Producer and consumes CQ entries
// with rings.Consumer. Opcodes, flags and statuses carry rdma-core's values.
//
// # What is not here
//
// RFC 7306 atomics are encoded and decoded but not executed (an inbound
// Atomic Request draws a Terminate, an ATOMIC work request completes with
// LOC_QP_OP_ERR); MPA markers are refused; an initiator in RFC 6581
// peer-to-peer mode offers only the zero-length RDMA Write RTR; memory
// windows and shared receive queues do not exist. MPA revision 2 (IRD/ORD,
// peer-to-peer mode) and revision 1 are both spoken (mpa_v2.go).
package iwarp
