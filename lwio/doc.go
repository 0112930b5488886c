// Package lwio is the LWIO lightweight file-I/O protocol (the LWIO protocol
// specification) over the RDMA verbs of delegated connections: discovery
// over a pipe (a plain TCP connection on the host stack), authentication, file
// registration, reads as RDMA Writes into client memory, writes as sends,
// vectored I/O, cancel, delta credits, and polling or interrupt completion.
//
//	exp, _ := lwio.OpenExport("/srv/data")
//	srv, _ := lwio.NewServer(hostB, exp, lwio.ServerConfig{})
//	c, _ := lwio.Dial(ctx, hostA, hostB.Addr(), lwio.ClientConfig{})
//	f, _ := c.Open(ctx, "file", lwio.OpenFlags{})
//	n, err := f.ReadAt(p, 0) // io.ReaderAt; memory from c.Alloc is zero-copy
//
// The message layer is one file per family, each structure an accessor or
// a fields type with Encode/Decode (or Append for the variable-length
// ones), byte-compatible with the source's C layouts on a little-endian
// 64-bit host: the common header (header.go), the resume key and the
// negotiate exchange (control.go), the file-access messages (pipe.go), the
// directory operations on the same channel (pipe_dir.go) and
// the logon that proves the shared secret first (logon.go), the
// authentication parameters with their options and signature (auth.go),
// the status block and response, the file registration parameters and the
// RDMA region (status.go). The server is server.go (its configuration,
// one RDMA listener per provider instance, one completion poller),
// server_pipe.go (file-access channels, pipes, access control) with
// server_dir.go (the directory operations) and, per RDMA
// connection, sconn.go (its buffers, authentication and teardown),
// sconn_request.go (the request table: one entry per opcode),
// sconn_io.go (the workers and the answers) and sconn_credit.go; the
// export of a local directory is export.go with export_dir.go. The client is client.go (the
// configuration, the connection and its authentication, close),
// client_request.go (admission by credits, building and posting a
// request), client_completion.go (the completion loop and the credit
// messages), discover.go (the logon, the pipe, NEGOTIATE), links.go
// (several connections, I/O spread over them), client_buffers.go (the
// caller's memory: Alloc, registration through the cache, staging),
// client_cancel.go (cancel tied to a context), file.go (open, the
// synchronous file API, close), file_io.go (the Start calls) and
// client_dir.go (the directory operations). Package lwfuse mounts an
// export with FUSE.
// docs/lwio.md gives every byte and
// every choice where the source is open, and the doc tests hold it to
// these constants and to the request table.
//
// lwio is host side, above tcpstack and tcpstack/verbs; the device never
// imports it.
package lwio
