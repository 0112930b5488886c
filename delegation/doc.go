// Package delegation is the device-side delegated TCP engine of the emulated
// TCP-offload NIC: the per-connection fast path (TCB, receive placement,
// ACK and window generation, segmentation, retransmission, thresholds) that
// runs inside the NIC's offload unit once the host stack has handed a
// connection over with an OFFLOAD command.
//
// The engine is single-threaded: every method is called from the offload
// unit goroutine, and no method may be called from inside an Env callback.
// It reaches host memory only through rings.DMA and the host only through
// notifications (Env.Notify); it never imports the host stack.
//
// # Integration (the device's side)
//
//	e := delegation.NewEngine(delegation.Config{MaxConns: n}, env)
//
// Env (implemented by the device):
//
//	DMA() rings.DMA                           host memory (called once)
//	Notify(*rings.Notification) bool          false: notification ring full
//	Transmit(frame []byte) error              Ethernet+IPv4+TCP frame, checksums done; copy it
//	TakeLegacyBuffer() (id, addr, cap, ok)    next legacy rx buffer from the receive descriptor ring
//	NowNanos() int64                          monotonic device clock
//
// Receive path: the device's network layer parses the frame and hands the
// engine the connection tuple (as the receiver sees it) and the TCP
// segment, never the network header:
//
//	if idx, ok := e.Lookup(&tuple); ok { e.InputSegment(idx, &tuple, tcpSeg, fl) }
//
// Frames that do not match go to the legacy path (or, for a 4-tuple in
// TIME_WAIT, to InputUnmatchedSegment). The engine verifies the TCP
// checksum over the tuple's pseudo-header unless fl has RxTCPChecksumOK: a
// device whose receive parser already did (nic's classify does, for every
// unfragmented TCP segment) says so, and the segment is summed once. A
// device that takes a TCP super-frame whole (large receive offload: nic
// with a TAP that hands over the kernel's 64 KiB frames) calls
// e.InputSegmentLRO with the number of wire segments it stands for: one
// placement pass, the ACK rules counting every segment. Input, InputFlags
// and LookupSegment are the same on raw IPv4 headers (netlayer.go), for
// the tests and the RX_INJECT path. The wire formats and the checksum are package
// nic/hdr's.
//
// Commands (rings.Command → engine; write the Status, and the Result where
// noted, back into the entry):
//
//	OpOffload        e.OffloadAt(cmd.Conn, cmd.Addr, cmd.Len)           (or Offload with a decoded rings.ConnState)
//	OpPostBuffers    n, st := e.PostBuffers(cmd.Conn, cmd.Addr, cmd.Arg0); Result = n
//	OpSetThresholds  e.SetThresholds(cmd.Conn, cmd.Arg0, cmd.Arg1, cmd.Flags&rings.CmdFlagArmSeqThreshold != 0)
//	OpUpdate         var u rings.ConnUpdate; u.FromCommand(&cmd); e.Update(cmd.Conn, &u)
//	OpClose          e.Close(cmd.Conn)
//	OpAbort          e.Abort(cmd.Conn)
//	OpRelease        e.Release(cmd.Conn)
//	OpPathMTU        st, mss := e.PathMTU(cmd.Conn, cmd.Arg0, cmd.Arg1); Result = mss (pmtu.go)
//	OpQueryConn      var ci rings.ConnInfo; st := e.QueryConn(cmd.Conn, &ci); with OK, ci.Encode to cmd.Addr by DMA (query.go)
//
// Transmit descriptors with Conn != NoConn: e.Send(tx.Conn, &tx); a status
// other than StatusOK means the descriptor was not taken (count it, and
// tell the host: StatusNoResources is flow control, the others are host
// bugs). After a StatusNoResources the connection refuses every later
// descriptor until a resume (Len 0, no flags): tell the host where the send
// queue ends (e.SendEnd) so it can queue the refused bytes again behind one.
//
// Upper-layer protocols running inside the device (iWARP QPs; see "ULP
// mode" below): e.AttachULP(idx, u, sendBuf) when the QP is created on the
// connection, e.ULPKick(idx) when the host rings the QP's doorbell or the
// ULP has room again.
//
// Timers: call e.Tick(now) when now >= e.NextDeadline() (NoDeadline when
// nothing is armed). When the host has consumed notifications after Notify
// returned false, call e.RetryNotifications() (Tick retries too, every
// Config.NotifyRetry).
//
// Diagnostics: e.Counters() (every drop and rejection), e.Info(idx),
// e.Snapshot(idx, &st), e.PendingNotifications().
//
// OFFLOAD takes a quiesced connection (SND.UNA == SND.NXT: the engine cannot
// retransmit bytes it never had) in ESTABLISHED or CLOSE_WAIT, with
// RcvAdvertised = the window the host last advertised (the engine never
// advertises a right edge left of it) and TSVal = the last TSval the host
// sent (+1 is fine). The device must keep steering the 4-tuple to the
// engine until RELEASE, and after it until the host stack knows the flow is
// gone, or the host stack answers stray segments with RST.
//
// Frames: Ethernet (dst = NextHopMAC, src = LocalMAC) + IPv4 (20 bytes, DF,
// TTL/TOS from the state block, an ID counter per connection) + TCP with
// timestamps and SACK options as negotiated; frames shorter than 60 bytes
// are zero-padded to the Ethernet minimum.
//
// # Notifications
//
// Every notification carries Conn = the index, Ack = SND.UNA and AckCount =
// ACK segments received on the connection (free-running). Seq depends on the
// kind:
//
//	NtfUserBufDone   Aux = buffer id, Len = bytes placed, Seq = sequence number of its first byte.
//	                 A user buffer completes when full, on PSH, or when the FIN arrives.
//	                 With NtfError: the buffer could not be written (it is returned with
//	                 the Len bytes placed before the fault).
//	NtfLegacyUpload  Aux = legacy buffer id, Len = bytes, Seq = sequence number of the first byte.
//	                 The host must return window credit for these bytes with UPDATE (Credit)
//	                 once the application consumed them. With NtfError and Len 0: the legacy
//	                 buffer's address was bad; the buffer is returned unused.
//	NtfUserBufReq    payload arrived with no user buffer posted (once, until the next POST_BUFFERS).
//	NtfAckThreshold  bytes acknowledged since the last one >= the ACK threshold, or
//	                 (threshold 0) an ACK freed at least one transmit buffer, or the send
//	                 queue emptied / our FIN was acknowledged. Seq = SND.NXT. The host frees
//	                 every transmit buffer whose last byte (FIN included) is below Ack.
//	NtfDupAck        fast recovery entered (three duplicate ACKs, or RACK found a loss): once per
//	                 recovery, not per duplicate ACK. Seq = SND.NXT.
//	NtfSeqThreshold  RCV.NXT reached the armed sequence threshold. Seq = RCV.NXT.
//	NtfFin           the peer's FIN arrived in order. Seq = RCV.NXT (FIN included).
//	NtfRst           an acceptable RST arrived (always with NtfClosed).
//	NtfTimeout       Aux = AuxTimeout*: retransmission, keepalive or zero-window probes
//	                 gave up; the engine sent RST (always with NtfClosed).
//	NtfError         Aux = AuxError*: e.g. a transmit buffer became unreadable; RST sent
//	                 (with NtfClosed).
//	NtfClosed        the connection is CLOSED (LAST_ACK done, TIME_WAIT over, RST,
//	                 timeout, error). Every transmit and posted user buffer is the host's
//	                 again. RELEASE frees the index.
//
// When Notify returns false the engine keeps the notification in a
// per-connection queue (Config.PendingNotify deep) and posts it, in order,
// later. Payload is refused (and counted, DropBackpressure; the peer
// retransmits) before that queue runs out, so FIN, RST, timeout and close
// notifications always have room; if even the reserve runs out, their flags
// are merged into one notification posted after the queue drains. ACK,
// duplicate-ACK, sequence-threshold and user-buffer-request notifications
// are cumulative and are merged into a pending one of the same kind.
//
// # The TCP it implements
//
// Receive: RFC 9293 acceptability against the advertised window (never
// accepts outside it; answers with an ACK), RFC 7323 timestamps and PAWS,
// RFC 5961 (RST and SYN in window but not exact: challenge ACK, rate
// limited; ACKs below SND.UNA-MAX.SND.WND: challenge ACK; ACK above
// SND.MAX: ignored with an ACK), in-order placement into posted user
// buffers (DMA writes) or else legacy buffers, a bounded out-of-order queue
// in a preallocated device slab merged when the hole fills, SACK blocks
// (RFC 2018, most recent first), delayed ACK (every second segment or
// Config.DelayedAck, immediate on out-of-order data, hole fill, FIN and
// window updates after credit), advertised window = receive buffer −
// uncredited legacy bytes − out-of-order bytes held, with window scaling,
// receiver silly-window avoidance, and a right edge that never moves left.
//
// Send: the send queue is the host's buffers, read by DMA straight into the
// frame for every (re)transmission; MSS segmentation (MSS less the
// timestamp option, RFC 6691) limited by the peer's scaled window and cwnd;
// slow start, then the connection's congestion control (cc.go: CUBIC, RFC
// 9438, by default; NewReno, RFC 5681 byte counting, selectable in the
// state block and by UPDATE), limited transmit (RFC 3042), fast retransmit
// and recovery (RFC 6582's partial ACKs without SACK; with SACK, RACK,
// RFC 8985, rack.go: a log of when each range was last sent marks lost
// whatever was sent before a range the peer has since acknowledged or
// SACKed, once a reordering window has passed: a quarter of the minimum
// RTT once the path has shown reordering, widened by D-SACKs; a reordering
// timer for what is not old enough yet; retransmissions lost again are
// found the same way; the pipe is the un-SACKed bytes not marked lost), the
// window brought down through recovery by Proportional Rate Reduction (RFC
// 6937; below ssthresh at slow start's pace per byte delivered, so that a
// peer's stretch ACK for a whole super-frame does not make it linear), a
// resent head that brings no ACK in two round trips resent again, the tail
// loss probe (RFC 8985 §7, whose verdict cuts the window once for a loss
// it repaired without a recovery, §7.4), D-SACK undo of spurious recoveries and
// timeouts (RFC 2883), Nagle's algorithm when the host asks for it, RTO
// per RFC 6298 (timestamps or Karn samples, Config.MinRTO, exponential
// backoff, Config.MaxRetries → NtfTimeout + RST; after a timeout the engine
// goes back to SND.UNA in slow start, skipping SACKed data unless a second
// timeout suggests the peer reneged), zero-window probing (persist timer,
// one-byte probes at SND.UNA-1 that every stack answers), keepalive, sender
// silly-window avoidance. TSval continues from the state block's TSVal at 1
// ms per tick and never goes backwards.
//
// Close: FIN after queued data in both directions, half-close both ways,
// simultaneous close, LAST_ACK, TIME_WAIT. A connection entering TIME_WAIT
// is reported CLOSED at once (its index can be released) and its TIME_WAIT
// duties go to a small record (timewait.go: Config.TimeWait, restarted by a
// retransmitted FIN; RSTs ignored per RFC 1337; ended early by a newer SYN
// per RFC 6191, by the host's own SYN on the tuple, or by an OFFLOAD of it).
//
// Nothing on the per-segment path allocates: segments are parsed in place,
// frames are built in one engine buffer, a slot's control block and queues
// are allocated on its first OFFLOAD (the queues small, doubling with use
// up to their bounds, outside the per-segment path) and reused, and the
// tuple lookup is an open-addressing table. Out-of-order data lives in an engine-wide slab of 2 KiB pages
// (Config.OOOPoolBytes), at most Config.OOOLimit bytes beyond RCV.NXT per
// connection and at most 16 separate ranges; what does not fit is dropped
// and counted (the peer retransmits it).
//
// # ULP mode
//
// AttachULP(idx, u, sendBuf) hands an ESTABLISHED connection's byte stream,
// from SND.NXT and RCV.NXT on, to an upper-layer protocol running in the
// device (type ULP: Receive, Transmit, HasOutput, LLPClosed; optionally
// ULPCloser.WantClose), with no host transmit buffer queued or
// unacknowledged and no user buffer posted. Bytes placed before it stay the
// host's, so it must come before the peer's first ULP byte (post it with
// OFFLOAD). From then on:
//
// Receive: in-order payload goes to u.Receive instead of user or legacy
// buffers (no NtfUserBufDone, NtfLegacyUpload or NtfUserBufReq; RxBytes
// counts it); out-of-order handling is unchanged. What u does not take is
// acknowledged and kept in a device hold the size of the receive buffer,
// offered again (before newer bytes) on every segment and on ULPKick; the
// advertised window is the receive buffer less the held bytes, so a ULP that
// stops taking closes the window and the peer probes it. The window's
// rounding to the window scale may round down on a ULP connection (by less
// than one scale unit) so it never promises more than the hold can take.
//
// Send: the engine calls u.Transmit into a device-owned retransmission
// buffer of sendBuf bytes (preallocated by AttachULP) whenever it has room
// (after ACKs, on ULPKick), with room for one segment's payload (MSS less
// the timestamp option) per call, and fills a segment's remaining room with
// further calls while none of it has been sent; what one segment's calls
// wrote (a record) goes out as one segment, so a ULP writing whole frames no
// larger than its room gets frames aligned with segments (RFC 5044 §8,
// FPDUs). A record that does not fit the peer's window waits while data is
// in flight and is split only when nothing is. Segmentation, congestion
// control, SACK recovery and retransmission are the TCP send path's;
// retransmissions re-read the device buffer, never host memory, and ACKs
// free it. Send and POST_BUFFERS answer StatusBadState; NtfAckThreshold is
// sent only for the ACK threshold or the FIN's ACK.
//
// Close: CLOSE on a ULP connection queues the FIN after the ULP's output
// (once HasOutput is false); so does a ULPCloser whose WantClose says yes.
// u.LLPClosed is called once, when both FINs are through (TIME_WAIT entered
// or LAST_ACK done), on RST, timeout or error (before the NtfClosed), and on
// ABORT; bytes still held are offered to u first. RELEASE and ABORT detach u.
// ULP methods are called from inside engine methods and must not call the
// engine; Info reports ULP, ULPHeld and SegPayload (the MULPDU basis).
//
// Not implemented (TODO): urgent data (URG is ignored), ECN, path MTU
// changes, IP options on output, upload of a connection back to the host
// stack.
package delegation
