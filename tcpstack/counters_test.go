package tcpstack

import (
	"bytes"
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// TestDriverFrameTooLarge: a FRAME_TOO_LARGE notification (the device
// dropped a frame longer than the buffer and returned the buffer) is
// counted, and the buffer named in Aux goes back on the receive ring.
func TestDriverFrameTooLarge(t *testing.T) {
	d, dev, ntf := driverOnRingDevice(t)
	rx, err := rings.NewConsumer(d.Memory(), dev.rc.Rx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Take buffer 5's descriptor as the device would, then report it.
	posted := rx.Available()
	var id uint32 = ^uint32(0)
	for range 6 {
		e, err := rx.Peek()
		if err != nil || e == nil {
			t.Fatalf("receive ring: %v", err)
		}
		id = rings.RxDesc(e).BufID()
		rx.Pop()
	}
	rx.Release()
	n := rings.Notification{Flags: rings.NtfFrameTooLarge, Conn: rings.NoConn, Aux: id, Len: 9000}
	n.Encode(rings.NotificationEntry(ntf.Next()))
	ntf.Commit()
	ntf.Publish()
	waitFor(t, "the notification", func() bool { return d.Stats().Notifications == 1 })
	s := d.Stats()
	if s.RxFrameTooLarge != 1 || s.RxErrors != 0 || s.RxFrames != 0 {
		t.Fatalf("driver stats %+v: want 1 frame too large, no errors, no frames", s)
	}
	if got := d.NotificationCounts().Flag(rings.NtfFrameTooLarge); got != 1 {
		t.Errorf("NotificationCounts: %d FRAME_TOO_LARGE, want 1", got)
	}
	// The driver reposted exactly that buffer, behind the ones left.
	waitFor(t, "the repost", func() bool { return rx.ProducerIndex() == uint32(posted)+1 })
	for range posted - 6 {
		rx.Pop()
	}
	if rx.Available() != 1 {
		t.Fatalf("%d descriptors after the ones first posted, want 1", rx.Available())
	}
	e, err := rx.Peek()
	if err != nil || e == nil || rings.RxDesc(e).BufID() != id {
		t.Fatalf("reposted descriptor %v (%v), want buffer %d", e, err, id)
	}
}

// TestDriverCountsInterrupts: DriverStats' interrupt counts are the kicks
// the device gave each vector, not the handler's wake-ups (which coalesce
// kicks and also happen while polling).
func TestDriverCountsInterrupts(t *testing.T) {
	d, dev, _ := driverOnRingDevice(t)
	for range 5 {
		dev.vec.Notify.Kick()
	}
	for range 3 {
		dev.vec.TxSpace.Kick()
	}
	dev.vec.Command.Kick()
	s := d.Stats()
	if s.Interrupts != 5 || s.TxSpaceInterrupts != 3 || s.CommandInterrupts != 1 {
		t.Fatalf("interrupts %d / %d / %d, want 5 / 3 / 1", s.Interrupts, s.TxSpaceInterrupts, s.CommandInterrupts)
	}
}

// TestRDMACopyCounter: RDMA Write, Read and Send between registered
// buffers copy nothing on the host CPU (RDMACopyBytes and HostCopyBytes
// stay put on both hosts), and the paths that do copy move both: an
// inline Send (the data is copied into the send queue entry) and MPA
// private data.
func TestRDMACopyCounter(t *testing.T) {
	a, b := rdmaPair(t, 4797)
	la := a.local.Bytes()
	fill(la, 3)
	copies := func() (uint64, uint64, uint64, uint64) {
		sa, sb := a.h.Driver.Stats(), b.h.Driver.Stats()
		return sa.RDMACopyBytes, sb.RDMACopyBytes, sa.HostCopyBytes, sb.HostCopyBytes
	}
	ra0, rb0, ha0, hb0 := copies()

	region := must[*Buffer](t)(b.h.AllocBuffer(64 << 10))
	rmr := must[*MR](t)(b.h.RegMR(b.pd, region, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead))
	// Send (B reaches RTS), RDMA Write, RDMA Read back into A, Send.
	send := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 1, NumSGE: 1}
	send.SGL[0] = a.lmr.SGE(0, 1000)
	write := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 2, RemoteAddr: rmr.TO(0), RKey: rmr.RKey, NumSGE: 1}
	write.SGL[0] = a.lmr.SGE(0, 64<<10)
	read := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: 3, RemoteAddr: rmr.TO(0), RKey: rmr.RKey, NumSGE: 1}
	read.SGL[0] = a.lmr.SGE(128<<10, 64<<10)
	if n, err := a.qp.PostSendList([]rings.SendWR{send, write, read}); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	c := testutil.WaitCompletions(t, a.cq, 3)
	wantWC(t, c[0], rings.WCSend, 1)
	wantWC(t, c[1], rings.WCRDMAWrite, 2)
	wantWC(t, c[2], rings.WCRDMARead, 3)
	rc := testutil.WaitCompletions(t, b.cq, 1)[0]
	wantWC(t, rc, rings.WCRecv, 1000)
	if !bytes.Equal(b.recvData(rc), la[:1000]) || !bytes.Equal(region.Bytes(), la[:64<<10]) ||
		!bytes.Equal(la[128<<10:192<<10], la[:64<<10]) {
		t.Fatal("the data did not arrive")
	}
	if ra, rb, ha, hb := copies(); ra != ra0 || rb != rb0 || ha != ha0 || hb != hb0 {
		t.Fatalf("registered-buffer RDMA copied on the host: RDMA copies A %d B %d, host copies A %d B %d (before %d %d %d %d)",
			ra, rb, ha, hb, ra0, rb0, ha0, hb0)
	}

	// An inline Send: the CPU copies its bytes into the SQ entry.
	in := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled | rings.WRInline, WRID: 4, InlineLen: 40}
	copy(in.InlineData[:], "forty bytes of inline data, copied once")
	if err := a.qp.PostSend(&in); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.cq, 1)[0], rings.WCSend, 4)
	rc = testutil.WaitCompletions(t, b.cq, 1)[0]
	if !bytes.Equal(b.recvData(rc), in.InlineData[:40]) {
		t.Fatalf("inline Send delivered %q", b.recvData(rc))
	}
	if ra, rb, ha, hb := copies(); ra != ra0+40 || rb != rb0 || ha != ha0+40 || hb != hb0 {
		t.Fatalf("after a 40-byte inline Send: RDMA copies A %d B %d, host copies A %d B %d; want A +40 on both, B unchanged (before %d %d %d %d)",
			ra, rb, ha, hb, ra0, rb0, ha0, hb0)
	}
}

// TestRDMACopyCounterPrivateData: MPA private data is copied by the CPU
// into host memory (request and reply) and out of it (the peer's), and
// each copy is counted.
func TestRDMACopyCounterPrivateData(t *testing.T) {
	ha, hb := rdmaHosts(t)
	a, b := newSide(t, ha), newSide(t, hb)
	l, err := hb.ListenRDMA(4798, b.attr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	const req, rep = "a request of 24 bytes...", "a reply of 18 bytes"
	got := make(chan string, 1)
	go func() {
		r, err := l.GetRequest(ctx)
		if err != nil {
			t.Error(err)
			got <- ""
			return
		}
		got <- string(r.PrivateData())
		if err := r.Accept([]byte(rep)); err != nil {
			t.Error(err)
		}
	}()
	attr := a.attr()
	attr.PrivateData = []byte(req)
	qp, err := ha.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4798), attr)
	skipNoRDMA(t, err)
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	if s := <-got; s != req {
		t.Fatalf("request private data %q", s)
	}
	if s := string(qp.PeerPrivateData()); s != rep {
		t.Fatalf("reply private data %q", s)
	}
	// A: its request into host memory, the reply out of host memory and
	// out to the caller. B: the request out of host memory and out to the
	// caller, its reply into host memory; and if A's request came before
	// B's end was delegated, the frame B held (a copy out of the legacy
	// buffer) and handed to the device (a copy into host memory).
	held := hb.Driver.Stats().RxHeldBytes
	wantA, wantB := uint64(len(req)+2*len(rep)), uint64(2*len(req)+len(rep))+2*held
	waitFor(t, "the copy counts", func() bool {
		return ha.Driver.Stats().RDMACopyBytes >= wantA && hb.Driver.Stats().RDMACopyBytes >= wantB
	})
	if ga, gb := ha.Driver.Stats().RDMACopyBytes, hb.Driver.Stats().RDMACopyBytes; ga != wantA || gb != wantB {
		t.Errorf("RDMA copies A %d B %d, want %d and %d (B held %d bytes of early data)", ga, gb, wantA, wantB, held)
	}
	if ga, gb := ha.Driver.Stats(), hb.Driver.Stats(); ga.HostCopyBytes < ga.RDMACopyBytes || gb.HostCopyBytes < gb.RDMACopyBytes {
		t.Errorf("HostCopyBytes (A %d, B %d) leaves out RDMACopyBytes (A %d, B %d)", ga.HostCopyBytes, gb.HostCopyBytes, ga.RDMACopyBytes, gb.RDMACopyBytes)
	}
}
