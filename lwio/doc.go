// Package lwio is the LWIO lightweight file-I/O protocol (seeds 000 and 001)
// over the RDMA verbs of delegated connections: discovery over a pipe (a
// plain TCP connection on the host stack), authentication, file
// registration, reads as RDMA Writes into client memory, writes as sends,
// vectored I/O, cancel, delta credits, and polling or interrupt completion.
//
// Built so far: the message layer. Every structure the source gives, as an
// accessor or a fields type with Encode/Decode (or Append for the
// variable-length ones), byte-compatible with the source's C layouts on a
// little-endian 64-bit host: the common header (header.go), the resume key
// and the negotiate exchange (control.go), the authentication parameters
// with their options and MD5 signature (auth.go), the status block and
// response, the file registration parameters and the RDMA region
// (status.go). docs/lwio.md gives every byte and every choice where the
// source is open, and the doc test holds it to these constants. The server,
// the client and the CLI build on this next.
//
// lwio is host side, above tcpstack and tcpstack/verbs; the device never
// imports it.
package lwio
