// Package split runs an emulated NIC in its own process, in the manner of
// vhost-user: a host process attaches over a unix socket and hands the
// device its memory (a memfd both sides map) and its interrupt vectors
// (eventfds), then programs it through its register block (rings/bar0.go,
// docs/bar0.md; the model is nic/regs) with register reads and writes, so
// host and device share nothing but host
// memory and a few file descriptors, exactly as a driver and a chip on a
// bus. A device in another language, or an RTL simulation bridged to this
// protocol, can sit on either side.
//
// The setup protocol is documented byte by byte in docs/split.md (checked
// against this package by its doc test): a 16-byte header on every message
// (magic, version, type, body length, sequence), request/reply, file
// descriptors as SCM_RIGHTS. The host says HELLO, then gives MEMORY,
// CONFIG (and optionally the port: a SOCK_SEQPACKET socket that carries the
// device's frames to a wire in the host's process) and VECTORS, then
// REG_READ and REG_WRITE: the rings' registers, and CtrlEnable to start;
// RESET ends a session's device and lets the host start again.
// Either side's death is seen by the other as the socket closing: the
// device stops and waits for the next host; the host fails its I/O with a
// clear error.
//
// The server (device side) is Server; the messages are Header and the
// body accessors in proto.go, shared with the host's client in tcpstack.
package split
