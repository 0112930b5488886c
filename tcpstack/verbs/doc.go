// Package verbs is RDMA verbs on delegated connections: the host side of
// the iWARP RNIC. A program that only wants RDMA (LWIO, sockets direct)
// imports this package and tcpstack's Host; delegation's internals stay
// in tcpstack, behind its RDMA provider seam (tcpstack.RDMAHooks and
// tcpstack.RDMAHost).
//
// The API mirrors rdma-core's libibverbs and librdmacm: Open returns a
// host's Provider (ibv_open_device), which allocates protection domains
// (ibv_alloc_pd), registers memory regions (ibv_reg_mr / ibv_dereg_mr),
// creates completion queues (ibv_create_cq, ibv_poll_cq,
// ibv_req_notify_cq, ibv_get_cq_event) and connects queue pairs
// (ibv_post_send / ibv_post_recv) with connection management
// (rdma_connect, rdma_listen, connect requests answered with rdma_accept
// or rdma_reject). Work requests and completions are rings.SendWR, RecvWR
// and Completion, which carry rdma-core's opcode, flag and status values.
//
//	v, err := verbs.Open(host)
//	pd := v.AllocPD()
//	cq, err := v.CreateCQ(256)
//	buf, err := v.AllocBuffer(1 << 20)
//	mr, err := v.RegMR(pd, buf, verbs.AccessLocalWrite)
//	qp, err := v.DialRDMA(ctx, dst, verbs.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq})
//
// Everything crosses the rings: memory registration, CQ and QP set-up and
// the QP doorbell are commands; the send, receive and completion queues are
// rings in host memory the host produces into (SQ, RQ) or consumes (CQ);
// QP and CQ events arrive as notifications. The device places and fetches
// payload by DMA: the verbs layer never copies data.
//
// A QP runs on a delegated TCP connection that has no user buffers posted:
// from CREATE_QP on, the device's iWARP engine owns the byte stream in both
// directions. The QP number is the connection's delegated-connection index.
// netstack makes the TCP connection; delegation then issues OFFLOAD and
// CREATE_QP in one publish (the provider's PrepareDelegation and Publish),
// so the unit attaches the QP before it handles another received frame.
// Bytes the peer sends to an RDMA listener before its end is delegated (its
// MPA request, when the initiator is quicker than our accept) are held by
// the driver's receive filter (holdEarlyData) and handed to the unit after
// the CREATE_QP, in the same publish (RX_INJECT): the unit steers them to
// the new connection as if they had just arrived, so the MPA request
// reaches the QP, never netstack, and nothing waits for the peer to
// retransmit it.
//
// MPA (revision 2 by default, RFC 6581: IRD/ORD negotiated; revision 1 with
// QPAttr.MPARev1) has the initiator speak first (in peer-to-peer mode,
// QPAttr.PeerToPeer, with a zero-length RDMA Write): a responder's QP is ready
// (ACCEPTED) once it accepted, may post at once, but its sends go out when
// the initiator's first message arrived (then it is in RTS).
//
// # Latency: busy polling and posted doorbells
//
// A request/response exchange on RDMA (sockets direct's small messages)
// pays for two things the rings add to every message: waking the waiter
// when its completion arrives, and ringing the QP's doorbell. Both have a
// cheap form, which an upper layer turns on per object:
//
//   - CQ.SetBusyPoll(d): PollWait and PollSpin, finding the CQ empty, keep
//     polling the CQ ring in host memory for up to d (yielding the
//     processor to runnable goroutines between polls) before they arm the
//     CQ (the arm register, or ARM_CQ) and sleep on its event (a
//     notification through the host's interrupt goroutine). Like NAPI
//     busy-poll or an ibv_poll_cq loop ahead of ibv_req_notify_cq, it
//     trades CPU for latency: the waiter holds a processor for up to d per
//     wait. CQStats.BusySpins, BusySpinHits and BusySpinTime say how often
//     it spun, how often that paid, and what it cost. A bound a little
//     above the expected round trip (tens to hundreds of µs) keeps an idle
//     connection from burning a core; SetBusyPoll(0) turns it off.
//   - QP.SetAsyncDoorbell(true): a doorbell the device refuses moves the QP
//     to ERROR (ErrDoorbell) instead of failing the post. Where the device
//     has the doorbell registers (rings.FeatQPDoorbell, docs/bar0.md) every
//     post rings the QP with one posted register write, no command, in
//     either mode (doorbell.go). Elsewhere the doorbell is the QP_DOORBELL
//     command, and then this matters: PostSend and PostRecv do not wait
//     for its answer; on a real host it is posted
//     (tcpstack.RDMAPostedSubmitter), the host's command vector neither
//     woken for it nor by its completion, and a refusal reaches the QP
//     within a millisecond.
//
// PollWait arms the CQ the same way: with the CQ arm register, or a posted
// ARM_CQ where the host takes posted commands; either carries ArmIfPending
// and is not waited for, so the device posts the event at once if a
// completion landed between the waiter's last poll and the arm. That saves
// the sleeping waiter a command round trip per wait; ReqNotify stays a
// synchronous ARM_CQ.
//
// A sockets-direct connection that wants the latency turns both on for its
// CQ and QP:
//
//	cq, _ := v.CreateCQ(n)
//	cq.SetBusyPoll(200 * time.Microsecond)
//	qp, _ := v.DialRDMA(ctx, dst, verbs.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq})
//	qp.SetAsyncDoorbell(true)
//	n, err := cq.PollWait(ctx, wc, false) // spins up to 200 µs, then sleeps
//
// BenchmarkSendRTT measures both against delegated TCP's 1-byte ping-pong,
// BenchmarkTransferCPU the host CPU per GiB of large RDMA transfers (see
// docs/benchmarks.md).
//
// Files:
//
//   - provider.go: Provider and Open, limits and errors, the command
//     helpers, and Route (CQ and QP events out of the delegated path).
//   - pd.go: protection domains, host memory buffers, memory regions
//     (RegMR, RegMRAddr, Dereg) and the host side of registration caches.
//   - regcache.go: the registration cache (RegCache).
//   - cq.go: completion queues.
//   - qp.go: queue pairs: attributes, state, posting, disconnect, destroy.
//   - cm.go: connection management: DialRDMA, ListenRDMA and
//     RDMAListener, connect requests, MPA private data.
//   - delegation.go: the RDMA side of delegation: the QP made with its
//     connection's OFFLOAD and adopted afterwards.
//   - hold.go: early data held off netstack and injected behind CREATE_QP.
//
// Package rdmatool (below this one) runs librdmacm's example exchanges
// (rping, rdma_server/rdma_client, ucmatose) on these verbs.
package verbs
