// Package direct is sockets direct: a byte-stream net.Conn and
// net.Listener over an RDMA queue pair, with the session protocol of the
// Windows Sockets Direct switch (Microsoft's Windows Sockets Direct
// documentation: "Using Session Protocol", and "Windows Sockets SPI
// Extensions for SANs" for the memory registration calls), behind a switch
// that falls back to plain TCP on netstack when either end has no RDMA.
//
//	l, err := direct.Listen(hostB, 80, direct.Config{})
//	c, err := direct.Dial(ctx, hostA, netip.AddrPortFrom(hostB.Addr(), 80), direct.Config{})
//	direct.PathOf(c) // rdma (send rdma-read, receive rdma-read), or tcp fallback: why
//
// Every host has one switch (switch.go): a protection domain, one
// completion queue polled by one goroutine for all of the host's
// connections, a registration cache, and an RDMA listener on the switch
// port (DefaultSwitchPort) that serves every Listener of the host: the
// connection request's MPA private data (the hello, hello.go) names the
// listener's port and each side's pool, inline limit, caps and transfer
// preference. A peer host without a switch answers the switch port with
// RST, a switch without a listener on the port rejects the request, and
// Dial then connects over TCP to the port itself, where the Listener also
// accepts (so plain TCP clients reach it too).
//
// The session protocol (conn.go; send.go, recv.go and completions.go for
// its send side, its receive side and its completions): each connection
// has a pool of registered control-message buffers, Pool+Slots posted for
// receives and re-posted as soon as a batch of completions is consumed,
// the rest for sends.
// Control messages (msg.go) are a 32-byte header and, for DATA and
// SRC_AVAIL, inline stream bytes. Writes below Config.Threshold travel
// inline; longer ones go in transfers of up to a chunk (a chunk not full is
// held for the next Writes while transfers are in flight), each announced
// by a SRC_AVAIL that carries the transfer's total and its first part. RDMA
// Read rendezvous: the source registers the rest for remote read for this
// transfer only (WSPRegisterRdmaMemory) and names it in the SRC_AVAIL; the
// sink pulls it into memory registered for local access only and answers
// RD_DONE as a Send with Invalidate, so the source's STag is dead when the
// source deregisters it (WSPDeregisterRdmaMemory). RDMA Write rendezvous
// (FlagSinkReq): the sink registers a region for remote write on request,
// advertises it (SINK_AVAIL), and the source writes it and sends WR_DONE as
// a Send with Invalidate of the sink's STag; the sink then deregisters it.
// Both registrations are fast registrations (fastreg.go): a REG_MR work
// request in the doorbell of the message that names the region, and the
// completion message's invalidation ends it, with no device command.
// Memory that cannot be allocated or registered fails the Write with
// ErrNoBuffers (WSAENOBUFS). Credit flow control of control
// messages, with a reserve so neither side can deadlock, is credit.go,
// checked by an exhaustive model (credit_model_test.go). docs/direct.md
// gives every byte and the rules.
package direct
