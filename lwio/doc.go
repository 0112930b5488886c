// Package lwio will hold the LWIO lightweight file-I/O protocol, client and
// server, over the RDMA verbs of delegated connections: discovery over a
// pipe (a plain TCP connection on the host stack), authentication, file
// registration, reads as RDMA Writes into client memory, writes as sends,
// vectored I/O, cancel, delta credits, and polling or interrupt completion.
//
// Nothing is implemented yet. The transport it needs is in place: RDMA
// verbs in tcpstack/verbs (DialRDMA/ListenRDMA with MPA private data for the
// negotiate exchange, RegMR, CQs with solicited-event arming) over iWARP
// queue pairs that the offload unit runs on delegated connections. The
// package exists so the layout is the one the project card names and the
// dependency direction is fixed from the start: lwio is host side, above
// tcpstack; the device never imports it.
package lwio
