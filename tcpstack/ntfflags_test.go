package tcpstack

import (
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// Ring-level tests of the notification flags: for each, the condition the
// device reports, the flag in a notification on the ring, and what the
// host does with it. The device is the test (offloadRig): it answers the
// host's commands and posts notifications as a device would.

// cmdSeq walks the commands the host publishes, in ring order.
type cmdSeq struct {
	r    *offloadRig
	next uint32
}

// take waits for the next command, checks its opcode and answers it with
// status and result.
func (s *cmdSeq) take(op rings.Opcode, st rings.Status, result uint64) rings.Command {
	s.r.t.Helper()
	cmd := s.r.c.published(s.next)
	if cmd.Opcode != op {
		s.r.t.Fatalf("command %d is %v, want %v (%+v)", s.next, cmd.Opcode, op, cmd)
	}
	s.r.c.writeBack(s.next, st, result, true)
	s.next++
	s.r.c.release(s.next)
	return cmd
}

// userBufs decodes a POST_BUFFERS' descriptors.
func userBufs(t *testing.T, r *offloadRig, cmd rings.Command) []rings.UserBuf {
	t.Helper()
	p, err := r.c.d.Memory().Map(cmd.Addr, int(cmd.Arg0)*rings.UserBufDescSize)
	if err != nil {
		t.Fatal(err)
	}
	out := make([]rings.UserBuf, cmd.Arg0)
	for i := range out {
		_ = out[i].Decode(rings.UserBufDesc(p[i*rings.UserBufDescSize:]))
	}
	return out
}

// readAsync starts a Read of n bytes and returns its result channel.
type readRes struct {
	n   int
	err error
}

func readAsync(dc *DelegatedConn, n int) <-chan readRes {
	ch := make(chan readRes, 1)
	go func() {
		k, err := dc.Read(make([]byte, n))
		ch <- readRes{k, err}
	}()
	return ch
}

func waitRes[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: no result", what)
	}
	var zero T
	return zero
}

// TestFlagAckThresholdWakesWriter: ACK_THRESHOLD is the send low-water
// mark. A writer that fills the send buffer arms the ACK threshold with
// what it still needs freed (SET_THRESHOLDS Arg0: the mark less what is
// free), and the notification carrying the flag, whose Ack frees that
// much, wakes it.
func TestFlagAckThresholdWakesWriter(t *testing.T) {
	r := newOffloadRig(t) // SendBufSize 64 KiB: OFFLOAD armed the ACK threshold at 16 KiB
	cs := &cmdSeq{r: r}
	dc := r.conn(1)
	if err := dc.SetSendLowWater(24 << 10); err != nil {
		t.Fatal(err)
	}
	res := make(chan error, 1)
	go func() {
		_, err := dc.Write(make([]byte, 80<<10))
		res <- err
	}()
	cmd := cs.take(rings.OpSetThresholds, rings.StatusOK, 0)
	if cmd.Conn != 1 || cmd.Arg0 != 24<<10 || cmd.Flags != 0 {
		t.Fatalf("SET_THRESHOLDS %+v, want the ACK threshold at 24 KiB", cmd)
	}
	if i := dc.HostInfo(); i.SendLowWater != 24<<10 || i.BytesQueued != 64<<10 {
		t.Fatalf("info %+v", i)
	}
	// The device acknowledged 24 KiB: the threshold.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 1, Ack: 1000 + 24<<10, Seq: 1000 + 64<<10, AckCount: 3})
	if err := waitRes(t, res, "Write"); err != nil {
		t.Fatal(err)
	}
	// The first descriptor wholly acknowledged: a round-trip sample.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 1, Ack: 1000 + 64<<10, Seq: 1000 + 80<<10, AckCount: 4})
	testutil.WaitFor(t, "the ACK taken", func() bool { return dc.HostInfo().AcksReceived == 4 })
	i := dc.HostInfo()
	if i.SndUna != 1000+64<<10 || i.SndNxt != 1000+80<<10 || i.BytesInFlight != 16<<10 || i.BytesQueued != 16<<10 ||
		i.CwndLowerBound != 40<<10 || i.RTTSamples != 1 || i.RTT <= 0 {
		t.Fatalf("info %+v", i)
	}
}

// TestFlagSeqThresholdWakesReader: SEQ_THRESHOLD is the receive low-water
// mark (SO_RCVLOWAT). A reader waiting for 3000 bytes arms the sequence
// threshold at RCV.NXT + 3000 and is not woken by the segments before it:
// it gets all 3000 bytes in one read.
func TestFlagSeqThresholdWakesReader(t *testing.T) {
	r := newOffloadRig(t)
	cs := &cmdSeq{r: r}
	dc := r.conn(1)
	if err := dc.SetReadLowWater(3000); err != nil {
		t.Fatal(err)
	}
	res := readAsync(dc, 4096)
	cmd := cs.take(rings.OpSetThresholds, rings.StatusOK, 0)
	if cmd.Flags != rings.CmdFlagArmSeqThreshold || cmd.Arg1 != 3000 || cmd.Arg0 != 16<<10 {
		t.Fatalf("SET_THRESHOLDS %+v, want the sequence threshold armed at 3000", cmd)
	}
	for range 3 {
		r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 1, Aux: r.takeRx(), Len: 1000})
	}
	r.post(rings.Notification{Flags: rings.NtfSeqThreshold, Conn: 1, Seq: 3000, Ack: 1000})
	if got := waitRes(t, res, "Read"); got.err != nil || got.n != 3000 {
		t.Fatalf("Read %d, %v; want the 3000 bytes at once", got.n, got.err)
	}
	if i := dc.HostInfo(); i.RcvNxt != 3000 || i.ReadLowWater != 3000 {
		t.Fatalf("info %+v", i)
	}
	// A reader whose buffer is smaller than the mark waits for its
	// buffer's worth only.
	res = readAsync(dc, 100)
	r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 1, Aux: r.takeRx(), Len: 1000})
	if got := waitRes(t, res, "Read"); got.err != nil || got.n != 100 {
		t.Fatalf("Read %d, %v; want 100", got.n, got.err)
	}
}

// TestFlagUserBufReqPostsReaderBuffer: USER_BUF_REQ. A registered reader's
// buffer, refused by the device for want of room, is posted again when the
// device asks for a user buffer; the device fills it (USER_BUF_DONE) and
// the reader gets the bytes in it.
func TestFlagUserBufReqPostsReaderBuffer(t *testing.T) {
	r := newOffloadRig(t)
	cs := &cmdSeq{r: r}
	dc := r.conn(1)
	rb := regBuf(t, r, 4096)
	type regRes struct {
		p   []byte
		in  *RegisteredBuf
		err error
	}
	res := make(chan regRes, 1)
	go func() {
		p, in, err := dc.ReadRegistered(rb)
		res <- regRes{p, in, err}
	}()
	// Posted at once (the reader waits); the device has no room.
	cmd := cs.take(rings.OpPostBuffers, rings.StatusNoResources, 0)
	ub := userBufs(t, r, cmd)
	if len(ub) != 1 || ub[0].Addr != rb.addr || ub[0].Len != 4096 || ub[0].ID&regIDFlag == 0 {
		t.Fatalf("posted %+v", ub)
	}
	testutil.WaitFor(t, "the refusal taken", func() bool { return r.c.d.Stats().PostBuffersPartial == 1 })
	// Payload waits in the device: it asks for a user buffer.
	r.post(rings.Notification{Flags: rings.NtfUserBufReq, Conn: 1, Ack: 1000})
	cmd = cs.take(rings.OpPostBuffers, rings.StatusOK, 1)
	ub2 := userBufs(t, r, cmd)
	if len(ub2) != 1 || ub2[0].Addr != rb.addr {
		t.Fatalf("posted again %+v", ub2)
	}
	copy(rb.b, "placed by the device")
	r.post(rings.Notification{Flags: rings.NtfUserBufDone, Conn: 1, Aux: ub2[0].ID, Len: 20, Ack: 1000})
	got := waitRes(t, res, "ReadRegistered")
	if got.err != nil || got.in != rb || string(got.p) != "placed by the device" || &got.p[0] != &rb.b[0] {
		t.Fatalf("ReadRegistered %q in %p, %v", got.p, got.in, got.err)
	}
	if s := r.c.d.Stats(); s.UserBufRequests != 1 || s.UserBufPosted != 2 || s.ZeroCopyBytes != 20 || s.PostBuffersPartial != 1 {
		t.Fatalf("stats %+v", s)
	}
}

func regBuf(t *testing.T, r *offloadRig, n int) *RegisteredBuf {
	t.Helper()
	h := &Host{Driver: r.c.d}
	b, err := h.NewRegisteredBuf(n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestFlagDupAckCounted: DUP_ACK means the engine entered fast recovery:
// the host counts it (ConnInfo.FastRecoveries, DriverStats) and takes its
// numbers.
func TestFlagDupAckCounted(t *testing.T) {
	r := newOffloadRig(t)
	dc := r.conn(1)
	if _, err := dc.Write(make([]byte, 10000)); err != nil {
		t.Fatal(err)
	}
	r.post(rings.Notification{Flags: rings.NtfDupAck, Conn: 1, Ack: 2000, Seq: 11000, AckCount: 5})
	testutil.WaitFor(t, "the recovery counted", func() bool { return dc.HostInfo().FastRecoveries == 1 })
	if i := dc.HostInfo(); i.SndUna != 2000 || i.SndNxt != 11000 || i.AcksReceived != 5 {
		t.Fatalf("info %+v", i)
	}
	if s := r.c.d.Stats(); s.FastRecoveries != 1 {
		t.Fatalf("stats %+v", s)
	}
}

// TestFlagsEndOfStream: FIN (at RCV.NXT + 1) is end of stream, RST and
// TIMEOUT fail the connection, a transmit refusal (ERROR alone, Aux = the
// status) other than NO_RESOURCES fails it with the status, each on its
// own connection.
func TestFlagsEndOfStream(t *testing.T) {
	r := newOffloadRig(t)
	c1, c2, c3 := r.conn(1), r.conn(2), r.conn(3)
	r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 1, Aux: r.takeRx(), Len: 10})
	r.post(rings.Notification{Flags: rings.NtfFin, Conn: 1, Seq: 11, Ack: 1000})
	if n, err := io.ReadFull(c1, make([]byte, 10)); n != 10 || err != nil {
		t.Fatalf("Read %d, %v", n, err)
	}
	if _, err := c1.Read(make([]byte, 1)); err != io.EOF {
		t.Fatalf("Read after FIN: %v", err)
	}
	r.post(rings.Notification{Flags: rings.NtfRst | rings.NtfClosed, Conn: 2, Ack: 1000})
	if _, err := c2.Read(make([]byte, 1)); !errors.Is(err, ErrConnReset) {
		t.Fatalf("Read after RST: %v", err)
	}
	r.post(rings.Notification{Flags: rings.NtfError, Conn: 3, Aux: uint32(rings.StatusBadParam), Len: 4096})
	if _, err := c3.Read(make([]byte, 1)); err == nil || !strings.Contains(err.Error(), "BAD_PARAM") {
		t.Fatalf("Read after a transmit refusal: %v", err)
	}
	if s := r.c.d.Stats(); s.NtfOutOfSequence+s.NtfImpossibleSeq != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestPostBuffersPartialAcceptance: the device accepts only part of a
// POST_BUFFERS (NO_RESOURCES, result 1 of 2). The connection carries on:
// the refused buffer is posted again when the device gives one back, and
// the bytes come through both.
func TestPostBuffersPartialAcceptance(t *testing.T) {
	r := newOffloadRig(t)
	cs := &cmdSeq{r: r}
	dc := r.conn(1)
	dc.mu.Lock()
	r.o.growRecv(dc)
	dc.mu.Unlock()
	cmd := cs.take(rings.OpPostBuffers, rings.StatusNoResources, 1)
	ub := userBufs(t, r, cmd)
	if len(ub) != 2 {
		t.Fatalf("posted %+v", ub)
	}
	testutil.WaitFor(t, "the partial acceptance taken", func() bool { return r.c.d.Stats().PostBuffersPartial == 1 })
	// The device fills the one it took; the host posts the other again.
	fill := func(id uint32, s string) {
		m, _ := r.c.d.Memory().Map(ub[id].Addr, len(s))
		copy(m, s)
		r.post(rings.Notification{Flags: rings.NtfUserBufDone, Conn: 1, Aux: id, Len: uint32(len(s))})
	}
	fill(0, "first")
	cmd = cs.take(rings.OpPostBuffers, rings.StatusOK, 1)
	if again := userBufs(t, r, cmd); len(again) != 1 || again[0].ID != 1 || again[0].Addr != ub[1].Addr {
		t.Fatalf("posted again %+v, want buffer 1", again)
	}
	fill(1, "second")
	buf := make([]byte, 11)
	if n, err := io.ReadFull(dc, buf); n != 11 || err != nil || string(buf) != "firstsecond" {
		t.Fatalf("Read %q, %v", buf[:n], err)
	}
}

// TestBadNotifications: a device that lies. Each lie is counted and
// touches nothing of any other connection; numbers out of sequence are
// not taken, data out of sequence fails its connection only, and a
// POST_BUFFERS result claiming more than was posted is counted and taken
// as all accepted.
func TestBadNotifications(t *testing.T) {
	r := newOffloadRig(t)
	cs := &cmdSeq{r: r}
	good, bad := r.conn(1), r.conn(2)
	for _, dc := range []*DelegatedConn{good, bad} {
		if _, err := dc.Write(make([]byte, 5000)); err != nil {
			t.Fatal(err)
		}
	}
	stats := func() DriverStats { return r.c.d.Stats() }
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 2, Ack: 3000, Seq: 6000, AckCount: 10})
	// AckCount back: out of sequence.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 2, Ack: 3500, Seq: 6000, AckCount: 9})
	testutil.WaitFor(t, "out of sequence counted", func() bool { return stats().NtfOutOfSequence == 1 })
	// SND.UNA back.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 2, Ack: 2000, Seq: 6000, AckCount: 11})
	testutil.WaitFor(t, "SND.UNA back counted", func() bool { return stats().NtfOutOfSequence == 2 })
	// SND.UNA past what was queued, SND.NXT past it too: impossible.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 2, Ack: 9000, Seq: 9000, AckCount: 12})
	r.post(rings.Notification{Flags: rings.NtfDupAck, Conn: 2, Ack: 3000, Seq: 7000, AckCount: 12})
	testutil.WaitFor(t, "impossible numbers counted", func() bool { return stats().NtfImpossibleSeq == 2 })
	if i := bad.HostInfo(); i.SndUna != 3000 || i.AcksReceived != 10 || i.DeviceErrors != 4 || i.FastRecoveries != 0 {
		t.Fatalf("numbers taken from bad notifications: %+v", i)
	}
	// A connection index the host has free.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold | rings.NtfFin, Conn: 3, Ack: 1, Seq: 1})
	testutil.WaitFor(t, "unknown connection counted", func() bool { return stats().NtfUnknownConn == 1 })
	// Data not at RCV.NXT: the connection fails, its stream is broken.
	r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 2, Aux: r.takeRx(), Len: 10, Seq: 500, Ack: 3000, AckCount: 12})
	if _, err := bad.Read(make([]byte, 10)); err == nil || !strings.Contains(err.Error(), "out of sequence") {
		t.Fatalf("Read after data out of sequence: %v", err)
	}
	// A POST_BUFFERS result above the count posted.
	good.mu.Lock()
	r.o.growRecv(good)
	good.mu.Unlock()
	cs.take(rings.OpPostBuffers, rings.StatusOK, 5)
	testutil.WaitFor(t, "the overclaim counted", func() bool { return stats().PostBuffersOverclaim == 1 })
	// The good connection is untouched: its data and ACKs go on.
	r.post(rings.Notification{Flags: rings.NtfLegacyUpload, Conn: 1, Aux: r.takeRx(), Len: 4})
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 1, Ack: 6000, Seq: 6000, AckCount: 1})
	if n, err := io.ReadFull(good, make([]byte, 4)); n != 4 || err != nil {
		t.Fatalf("good Read %d, %v", n, err)
	}
	testutil.WaitFor(t, "the good connection's ACK", func() bool { return good.HostInfo().SndUna == 6000 })
	if i := good.HostInfo(); i.DeviceErrors != 1 { // the overclaim, its own
		t.Fatalf("good info %+v", i)
	}
	if _, err := good.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
}

// TestTxNoResourcesBackpressure: the device refuses a transmit descriptor
// for want of room (its own limit is 2 descriptors), and the one the host
// queued behind it. The connection lives: the host queues a resume, then
// the refused bytes again as the device's ACKs free room, never more than
// the 2 descriptors it learned the device holds; a Write meanwhile waits,
// and its bytes and the FIN follow in order.
func TestTxNoResourcesBackpressure(t *testing.T) {
	r := newOffloadRig(t)
	d := r.c.d
	dc := r.conn(1) // stream offset 0 is sequence number 1000
	tx, err := rings.NewConsumer(d.Memory(), r.c.dev.rc.Tx, 1, r.c.dev.vec.TxSpace)
	if err != nil {
		t.Fatal(err)
	}
	next := func() rings.Tx {
		t.Helper()
		var e []byte
		testutil.WaitFor(t, "a transmit descriptor", func() bool { e, _ = tx.Peek(); return e != nil })
		var desc rings.Tx
		_ = desc.Decode(rings.TxDesc(e))
		tx.Pop()
		tx.Release()
		return desc
	}
	var addrs []rings.Addr
	for range 4 {
		if _, err := dc.Write(make([]byte, 1000)); err != nil {
			t.Fatal(err)
		}
		desc := next()
		if desc.Len != 1000 {
			t.Fatalf("descriptor %+v", desc)
		}
		addrs = append(addrs, desc.Addr)
	}
	// The device took the first two; the third and the fourth are refused.
	refuse := func() {
		r.post(rings.Notification{Flags: rings.NtfError, Conn: 1, Aux: uint32(rings.StatusNoResources), Len: 1000,
			Seq: 3000, Ack: 1000})
	}
	refuse()
	if desc := next(); desc.Len != 0 || desc.Flags != 0 || desc.Conn != 1 {
		t.Fatalf("descriptor %+v, want the resume", desc)
	}
	refuse()
	testutil.WaitFor(t, "the refusals taken", func() bool { return dc.HostInfo().TxRefused == 2 })
	// A Write now waits behind the refused bytes.
	wrote := make(chan error, 1)
	go func() {
		_, err := dc.Write(make([]byte, 90)) // (fits the 4 KiB chunk the first bytes are in)
		wrote <- err
	}()
	// The first descriptor acknowledged: room for one, and the refused
	// bytes go in it (they are contiguous).
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 1, Ack: 2000, Seq: 3000, AckCount: 1})
	if desc := next(); desc.Addr != addrs[2] || desc.Len != 2000 {
		t.Fatalf("descriptor %+v, want the third and fourth again", desc)
	}
	// Two in the device: the Write's bytes wait for room.
	r.post(rings.Notification{Flags: rings.NtfAckThreshold, Conn: 1, Ack: 3000, Seq: 5000, AckCount: 2})
	if err := waitRes(t, wrote, "Write"); err != nil {
		t.Fatal(err)
	}
	if desc := next(); desc.Len != 90 || desc.Addr != addrs[3]+1000 {
		t.Fatalf("descriptor %+v, want the Write's 90 bytes after the fourth", desc)
	}
	if err := dc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	if desc := next(); desc.Flags != rings.TxFin {
		t.Fatalf("descriptor %+v, want the FIN", desc)
	}
	if i := dc.HostInfo(); i.TxRefused != 2 || i.DeviceErrors != 0 || i.BytesQueued != 2090 {
		t.Fatalf("info %+v", i)
	}
	dc.mu.Lock()
	err = dc.stateErr
	dc.mu.Unlock()
	if err != nil {
		t.Fatalf("connection failed: %v", err)
	}
}
