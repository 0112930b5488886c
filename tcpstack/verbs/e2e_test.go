package verbs_test

// The verbs between two emulated hosts (the shared rig's nodes and QP
// pairs): every opcode, remote access errors, reject, private data, the
// registration cache on a host, and the drivers' copy counters.

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// noWC checks that cq stays empty for a while.
func noWC(t *testing.T, cq *verbs.CQ) {
	t.Helper()
	time.Sleep(20 * time.Millisecond)
	wc := make([]rings.Completion, 4)
	if n := cq.Poll(wc); n != 0 {
		t.Fatalf("unexpected completions %v", wc[:n])
	}
}

func wantWC(t *testing.T, c rings.Completion, op rings.WCOpcode, wrid uint64) {
	t.Helper()
	if c.Opcode != op || c.WRID != wrid || c.Status != rings.WCSuccess {
		t.Fatalf("completion %v, want %v WRID %#x SUCCESS", &c, op, wrid)
	}
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) ^ seed
	}
}

// TestVerbsEveryOpcode runs every iWARP opcode between two emulated hosts
// over the in-memory wire and checks data and completions: Send, Send
// with SE (armed solicited-only verbs.CQ), Send with Invalidate, RDMA Write,
// RDMA Write with Immediate, RDMA Read, inline Send, unsignaled work, a
// batch, polling and armed waits both ways, and an orderly close.
func TestVerbsEveryOpcode(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4791)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	la := a.Local.Bytes()
	fill(la, 1)

	// B's target region, with guard bytes on both sides.
	const regionLen = 64 << 10
	guardBuf := hostrig.Must[*verbs.Buffer](t)(b.V.AllocBuffer(regionLen + 128))
	g := guardBuf.Bytes()
	for i := range g {
		g[i] = 0xEE
	}
	region := g[64 : 64+regionLen]
	rmr := hostrig.Must[*verbs.MR](t)(b.V.RegMRAddr(b.PD, guardBuf.Addr+64, regionLen, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
	checkGuards := func() {
		t.Helper()
		for i, x := range append(g[:64:64], g[64+regionLen:]...) {
			if x != 0xEE {
				t.Fatalf("guard byte %d changed", i)
			}
		}
	}

	// 1. Send A→B (A's first message: B reaches RTS).
	send := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 1, NumSGE: 1}
	send.SGL[0] = a.LocalMR.SGE(0, 100)
	if err := a.QP.PostSend(&send); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 1)
	rc := testutil.WaitCompletions(t, b.CQ, 1)[0]
	wantWC(t, rc, rings.WCRecv, hostrig.RecvWRID(0))
	if rc.ByteLen != 100 || !bytes.Equal(b.RecvData(rc), la[:100]) || rc.QPN != b.QP.QPN() {
		t.Fatalf("Send: %v, data %x", &rc, b.RecvData(rc)[:8])
	}
	if err := b.QP.WaitEstablished(ctx); err != nil {
		t.Fatal(err)
	}

	// 2. Send with SE: B arms solicited-only; an unsolicited Send does
	// not fire the event, a solicited one does.
	if err := b.CQ.ReqNotify(true); err != nil {
		t.Fatal(err)
	}
	send.WRID, send.SGL[0] = 2, a.LocalMR.SGE(100, 200)
	if err := a.QP.PostSend(&send); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 2)
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	wantWC(t, rc, rings.WCRecv, 1001)
	time.Sleep(20 * time.Millisecond)
	select {
	case <-b.CQ.C():
		t.Fatal("solicited-only verbs.CQ fired on an unsolicited Send")
	default:
	}
	se := send
	se.WRID, se.Flags = 3, rings.WRSignaled|rings.WRSolicited
	if err := a.QP.PostSend(&se); err != nil {
		t.Fatal(err)
	}
	if err := b.CQ.Wait(ctx); err != nil {
		t.Fatalf("no verbs.CQ event for a Send with SE: %v", err)
	}
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	wantWC(t, rc, rings.WCRecv, 1002)
	if rc.Flags&rings.WCSolicitedF == 0 || !bytes.Equal(b.RecvData(rc), la[100:300]) {
		t.Fatalf("Send with SE: %v", &rc)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 3)

	// 3. RDMA Write A→B, then a Send: its receive completion means the
	// Write was placed (messages are placed in order).
	wr := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 4, RemoteAddr: rmr.TO(0), RKey: rmr.RKey, NumSGE: 1}
	wr.SGL[0] = a.LocalMR.SGE(1000, regionLen)
	send.WRID, send.SGL[0] = 5, a.LocalMR.SGE(0, 8)
	if n, err := a.QP.PostSendList([]rings.SendWR{wr, send}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	c := testutil.WaitCompletions(t, a.CQ, 2)
	wantWC(t, c[0], rings.WCRDMAWrite, 4)
	wantWC(t, c[1], rings.WCSend, 5)
	wantWC(t, testutil.WaitCompletions(t, b.CQ, 1)[0], rings.WCRecv, 1003)
	if !bytes.Equal(region, la[1000:1000+regionLen]) {
		t.Fatal("RDMA Write data not in B's region")
	}
	checkGuards()

	// 4. RDMA Write with Immediate: one receive completion at B with the
	// immediate data and no bytes.
	imm := rings.SendWR{Opcode: rings.WRRDMAWriteImm, Flags: rings.WRSignaled, WRID: 6, RemoteAddr: rmr.TO(4096),
		RKey: rmr.RKey, ImmData: 0x1122334455667788, NumSGE: 1}
	fill(la[:4096], 9)
	imm.SGL[0] = a.LocalMR.SGE(0, 4096)
	if err := a.QP.PostSend(&imm); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCRDMAWrite, 6)
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	wantWC(t, rc, rings.WCRecvRDMAWithImm, 1004)
	if rc.Flags&rings.WCWithImm == 0 || rc.ImmData != 0x1122334455667788 || rc.ByteLen != 0 {
		t.Fatalf("Write with Immediate: %v", &rc)
	}
	if !bytes.Equal(region[4096:8192], la[:4096]) {
		t.Fatal("Write with Immediate data not in B's region")
	}

	// 5. RDMA Read A←B into A's buffer.
	fill(region, 0x5A)
	rd := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: 7, RemoteAddr: rmr.TO(512), RKey: rmr.RKey, NumSGE: 1}
	rd.SGL[0] = a.LocalMR.SGE(128<<10, 32<<10)
	if err := a.QP.PostSend(&rd); err != nil {
		t.Fatal(err)
	}
	c = testutil.WaitCompletions(t, a.CQ, 1)
	wantWC(t, c[0], rings.WCRDMARead, 7)
	if c[0].ByteLen != 32<<10 || !bytes.Equal(la[128<<10:160<<10], region[512:512+32<<10]) {
		t.Fatalf("RDMA Read: %v", &c[0])
	}
	checkGuards()

	// 6. Unsignaled work: three unsignaled Writes and a signaled Send
	// give exactly one completion at A.
	var list []rings.SendWR
	for i := range 3 {
		w := wr
		w.Flags, w.WRID, w.RemoteAddr = 0, uint64(20+i), rmr.TO(i*1024)
		w.SGL[0] = a.LocalMR.SGE(i*1024, 1024)
		list = append(list, w)
	}
	send.WRID = 23
	list = append(list, send)
	fill(la[:3072], 0x33)
	if n, err := a.QP.PostSendList(list); n != 4 || err != nil {
		t.Fatal(n, err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 23)
	wantWC(t, testutil.WaitCompletions(t, b.CQ, 1)[0], rings.WCRecv, 1005)
	noWC(t, a.CQ)
	if !bytes.Equal(region[:3072], la[:3072]) {
		t.Fatal("unsignaled Writes not placed")
	}

	// 7. Inline Send, and a batch of Sends in one doorbell.
	in := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled | rings.WRInline, WRID: 30, InlineLen: 40}
	copy(in.InlineData[:], "inline data travels inside the SQ entry!")
	if err := a.QP.PostSend(&in); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 30)
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	if string(b.RecvData(rc)) != "inline data travels inside the SQ entry!" {
		t.Fatalf("inline Send: %q", b.RecvData(rc))
	}
	var sends []rings.SendWR
	for i := range 8 {
		s := send
		s.WRID, s.SGL[0] = uint64(40+i), a.LocalMR.SGE(i*10, 10)
		sends = append(sends, s)
	}
	if n, err := a.QP.PostSendList(sends); n != 8 || err != nil {
		t.Fatal(n, err)
	}
	for i, c := range testutil.WaitCompletions(t, a.CQ, 8) {
		wantWC(t, c, rings.WCSend, uint64(40+i))
	}
	for i, c := range testutil.WaitCompletions(t, b.CQ, 8) {
		if c.Status != rings.WCSuccess || !bytes.Equal(b.RecvData(c), la[i*10:i*10+10]) {
			t.Fatalf("batched Send %d: %v", i, &c)
		}
	}
	// B used 15 receives: give them back.
	if err := b.PostRecvs(b.QP, 0, 15); err != nil {
		t.Fatal(err)
	}

	// 8. B→A Send, taken by A with an armed wait (PollWait), and a B→A
	// RDMA Write.
	bl := b.Local.Bytes()
	fill(bl[:300], 0x77)
	bs := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 50, NumSGE: 1}
	bs.SGL[0] = b.LocalMR.SGE(0, 300)
	go func() {
		time.Sleep(10 * time.Millisecond)
		_ = b.QP.PostSend(&bs)
	}()
	wc := make([]rings.Completion, 4)
	n, err := a.CQ.PollWait(ctx, wc, false)
	if err != nil || n != 1 {
		t.Fatal(n, err)
	}
	wantWC(t, wc[0], rings.WCRecv, hostrig.RecvWRID(0))
	if !bytes.Equal(a.RecvData(wc[0]), bl[:300]) {
		t.Fatal("B→A Send data")
	}
	wantWC(t, testutil.WaitCompletions(t, b.CQ, 1)[0], rings.WCSend, 50)
	if st := a.CQ.Stats(); st.Events == 0 {
		t.Error("PollWait returned without a verbs.CQ event and without polling one")
	}

	// 9. Send with Invalidate: A invalidates B's region; B's completion
	// names it.
	inv := rings.SendWR{Opcode: rings.WRSendInv, Flags: rings.WRSignaled, WRID: 60, InvSTag: rmr.RKey, NumSGE: 1}
	inv.SGL[0] = a.LocalMR.SGE(0, 16)
	if err := a.QP.PostSend(&inv); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 60)
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	if rc.Status != rings.WCSuccess || rc.Flags&rings.WCWithInv == 0 || uint32(rc.ImmData) != rmr.RKey || rc.ByteLen != 16 {
		t.Fatalf("Send with Invalidate: %v", &rc)
	}

	// Orderly close from A; B follows the FIN by itself.
	start := time.Now()
	defer func() { t.Logf("closed in %v", time.Since(start)) }()
	if err := a.QP.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	if err := verbs.WaitQP(ctx, b.QP, func(s verbs.QPState, llpClosed bool) bool { return llpClosed || s >= verbs.QPStateError }); err != nil {
		t.Fatalf("B did not close: %v", err)
	}
	for _, s := range []*hostrig.Node{a, b} {
		if err := s.QP.Destroy(); err != nil {
			t.Fatal(err)
		}
		if err := s.QP.PostSend(&send); !errors.Is(err, verbs.ErrQPDestroyed) {
			t.Fatalf("post after Destroy: %v", err)
		}
	}
	if err := rmr.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := guardBuf.Free(); err != nil {
		t.Fatal(err)
	}
}

// TestVerbsRemoteAccessError: an RDMA Write into a region registered
// without remote write kills both QPs; the region and its guards are
// untouched and outstanding work completes in error.
func TestVerbsRemoteAccessError(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4792)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	buf := hostrig.Must[*verbs.Buffer](t)(b.V.AllocBuffer(4096))
	for i := range buf.Bytes() {
		buf.Bytes()[i] = 0xEE
	}
	mr := hostrig.Must[*verbs.MR](t)(b.V.RegMR(b.PD, buf, verbs.AccessLocalWrite|verbs.AccessRemoteRead))
	fill(a.Local.Bytes(), 3)
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 1, RemoteAddr: mr.TO(0), RKey: mr.RKey, NumSGE: 1}
	w.SGL[0] = a.LocalMR.SGE(0, 1024)
	s := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 2, NumSGE: 1}
	s.SGL[0] = a.LocalMR.SGE(0, 10)
	if n, err := a.QP.PostSendList([]rings.SendWR{w, s}); n != 2 || err != nil {
		t.Fatal(n, err)
	}
	for _, s := range []*hostrig.Node{a, b} {
		err := verbs.WaitQP(ctx, s.QP, func(st verbs.QPState, _ bool) bool { return st >= verbs.QPStateError })
		if err != nil {
			t.Fatalf("QP not in error: %v (state %v)", err, s.QP.State())
		}
	}
	if !errors.Is(a.QP.Err(), verbs.ErrQPError) && !errors.Is(b.QP.Err(), verbs.ErrQPError) {
		t.Fatalf("errors %v / %v", a.QP.Err(), b.QP.Err())
	}
	for _, x := range buf.Bytes() {
		if x != 0xEE {
			t.Fatal("data placed into a region without remote write")
		}
	}
	// B's posted receives complete flushed; A's work does not all succeed.
	rc := testutil.WaitCompletions(t, b.CQ, b.Cfg.RecvN)
	for _, c := range rc {
		if c.Status != rings.WCWRFlushErr {
			t.Fatalf("B receive %v, want flushed", &c)
		}
	}
	ac := testutil.WaitCompletions(t, a.CQ, 1)
	bad := false
	for _, c := range append(ac, hostrig.Quiet(a.CQ)...) {
		bad = bad || c.Status != rings.WCSuccess
	}
	if !bad {
		t.Fatalf("every A completion succeeded: %v", ac)
	}
	// Posting to a verbs.QP in error is allowed: the work completes flushed.
	s.WRID = 3
	if err := a.QP.PostSend(&s); err != nil {
		t.Fatal(err)
	}
	if c := testutil.WaitCompletions(t, a.CQ, 1)[0]; c.WRID != 3 || c.Status != rings.WCWRFlushErr {
		t.Fatalf("post to a verbs.QP in error: %v", &c)
	}
	for _, s := range []*hostrig.Node{a, b} {
		if err := s.QP.Destroy(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestVerbsReject: the responder rejects the request; DialRDMA reports
// verbs.ErrRejected, and the listener goes on accepting.
func TestVerbsReject(t *testing.T) {
	ha, hb := hostrig.Pair(t)
	a, b := hostrig.NewNode(t, ha, hostrig.NodeConfig{}), hostrig.NewNode(t, hb, hostrig.NodeConfig{})
	l, err := b.V.ListenRDMA(4793, b.Attr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	go func() {
		r, err := l.GetRequest(ctx)
		if err == nil {
			err = r.Reject([]byte("go away"))
		}
		if err != nil {
			t.Error(err)
		}
	}()
	_, err = a.V.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4793), a.Attr())
	if !errors.Is(err, verbs.ErrRejected) {
		t.Fatalf("DialRDMA against a rejecting listener: %v", err)
	}
	// The listener still works.
	go func() {
		if _, err := l.Accept(ctx); err != nil {
			t.Error(err)
		}
	}()
	qp, err := a.V.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4793), a.Attr())
	if err != nil {
		t.Fatalf("second dial: %v", err)
	}
	if err := qp.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerbsRegCacheOnHost: a host registration cache against the device,
// invalidated by verbs.Buffer.Free.
func TestVerbsRegCacheOnHost(t *testing.T) {
	h, _ := hostrig.Pair(t)
	v := hostrig.Must[*verbs.Provider](t)(verbs.Open(h))
	pd := v.AllocPD()
	c, err := v.NewRegCache(verbs.RegCacheConfig{})
	if err != nil {
		t.Fatal(err)
	}
	buf := hostrig.Must[*verbs.Buffer](t)(v.AllocBuffer(64 << 10))
	mr := hostrig.Must[*verbs.MR](t)(c.Get(pd, buf.Addr, 64<<10, verbs.AccessLocalWrite))
	again := hostrig.Must[*verbs.MR](t)(c.Get(pd, buf.Addr+4096, 4096, verbs.AccessLocalWrite))
	if again != mr || mr.LKey == 0 || mr.LKey>>8 == 0 {
		t.Fatalf("cache: %+v / %+v", mr, again)
	}
	rem := hostrig.Must[*verbs.MR](t)(c.Get(pd, buf.Addr, 4096, verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	if rem == mr {
		t.Fatal("a local registration handed out for remote access")
	}
	for _, m := range []*verbs.MR{mr, again, rem} {
		if err := c.Put(m); err != nil {
			t.Fatal(err)
		}
	}
	if err := mr.Dereg(); err == nil {
		t.Fatal("Dereg of a cached registration")
	}
	// Free: both unused registrations are deregistered by the callback.
	held := hostrig.Must[*verbs.MR](t)(c.Get(pd, buf.Addr, 100, verbs.AccessLocalWrite))
	if err := buf.Free(); !errors.Is(err, verbs.ErrBufferRegistered) {
		t.Fatalf("Free with a registration in use: %v", err)
	}
	if err := c.Put(held); err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		t.Fatal(err)
	}
	s := c.Stats()
	if s.Entries != 0 || s.Deregistrations != s.Registrations || s.Errors != 0 || s.Invalidations != 2 {
		t.Fatalf("stats %+v", s)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestVerbsPrivateData: the MPA private data of each side reaches the other
// side's host (the responder sees the request's before it accepts, the
// initiator the reply's once established).
func TestVerbsPrivateData(t *testing.T) {
	ha, hb := hostrig.Pair(t)
	a, b := hostrig.NewNode(t, ha, hostrig.NodeConfig{}), hostrig.NewNode(t, hb, hostrig.NodeConfig{})
	l, err := b.V.ListenRDMA(4794, b.Attr())
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	got := make(chan []byte, 1)
	go func() {
		r, err := l.GetRequest(ctx)
		if err != nil {
			t.Error(err)
			got <- nil
			return
		}
		got <- r.PrivateData()
		if err := r.Accept([]byte("lwio negotiate response")); err != nil {
			t.Error(err)
		}
	}()
	attr := a.Attr()
	attr.PrivateData = []byte("lwio negotiate request")
	qp, err := a.V.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4794), attr)
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Close()
	if req := <-got; string(req) != "lwio negotiate request" {
		t.Errorf("responder saw request private data %q", req)
	}
	if rep := qp.PeerPrivateData(); string(rep) != "lwio negotiate response" {
		t.Errorf("initiator saw reply private data %q", rep)
	}
}

// TestRDMACopyCounter: RDMA Write, Read and Send between registered
// buffers copy nothing on the host CPU (RDMACopyBytes and HostCopyBytes
// stay put on both hosts), and the paths that do copy move both: an
// inline Send (the data is copied into the send queue entry) and MPA
// private data.
func TestRDMACopyCounter(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4797)
	la := a.Local.Bytes()
	fill(la, 3)
	copies := func() (uint64, uint64, uint64, uint64) {
		sa, sb := a.H.Driver.Stats(), b.H.Driver.Stats()
		return sa.RDMACopyBytes, sb.RDMACopyBytes, sa.HostCopyBytes, sb.HostCopyBytes
	}
	ra0, rb0, ha0, hb0 := copies()

	region := hostrig.Must[*verbs.Buffer](t)(b.V.AllocBuffer(64 << 10))
	rmr := hostrig.Must[*verbs.MR](t)(b.V.RegMR(b.PD, region, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
	// Send (B reaches RTS), RDMA Write, RDMA Read back into A, Send.
	send := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 1, NumSGE: 1}
	send.SGL[0] = a.LocalMR.SGE(0, 1000)
	write := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 2, RemoteAddr: rmr.TO(0), RKey: rmr.RKey, NumSGE: 1}
	write.SGL[0] = a.LocalMR.SGE(0, 64<<10)
	read := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: 3, RemoteAddr: rmr.TO(0), RKey: rmr.RKey, NumSGE: 1}
	read.SGL[0] = a.LocalMR.SGE(128<<10, 64<<10)
	if n, err := a.QP.PostSendList([]rings.SendWR{send, write, read}); n != 3 || err != nil {
		t.Fatal(n, err)
	}
	c := testutil.WaitCompletions(t, a.CQ, 3)
	wantWC(t, c[0], rings.WCSend, 1)
	wantWC(t, c[1], rings.WCRDMAWrite, 2)
	wantWC(t, c[2], rings.WCRDMARead, 3)
	rc := testutil.WaitCompletions(t, b.CQ, 1)[0]
	wantWC(t, rc, rings.WCRecv, hostrig.RecvWRID(0))
	if !bytes.Equal(b.RecvData(rc), la[:1000]) || !bytes.Equal(region.Bytes(), la[:64<<10]) ||
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
	if err := a.QP.PostSend(&in); err != nil {
		t.Fatal(err)
	}
	wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, 4)
	rc = testutil.WaitCompletions(t, b.CQ, 1)[0]
	if !bytes.Equal(b.RecvData(rc), in.InlineData[:40]) {
		t.Fatalf("inline Send delivered %q", b.RecvData(rc))
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
	ha, hb := hostrig.Pair(t)
	a, b := hostrig.NewNode(t, ha, hostrig.NodeConfig{}), hostrig.NewNode(t, hb, hostrig.NodeConfig{})
	l, err := b.V.ListenRDMA(4798, b.Attr())
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
	attr := a.Attr()
	attr.PrivateData = []byte(req)
	qp, err := a.V.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4798), attr)
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
	testutil.WaitFor(t, "the copy counts", func() bool {
		return ha.Driver.Stats().RDMACopyBytes >= wantA && hb.Driver.Stats().RDMACopyBytes >= wantB
	})
	if ga, gb := ha.Driver.Stats().RDMACopyBytes, hb.Driver.Stats().RDMACopyBytes; ga != wantA || gb != wantB {
		t.Errorf("RDMA copies A %d B %d, want %d and %d (B held %d bytes of early data)", ga, gb, wantA, wantB, held)
	}
	if ga, gb := ha.Driver.Stats(), hb.Driver.Stats(); ga.HostCopyBytes < ga.RDMACopyBytes || gb.HostCopyBytes < gb.RDMACopyBytes {
		t.Errorf("HostCopyBytes (A %d, B %d) leaves out RDMACopyBytes (A %d, B %d)", ga.HostCopyBytes, gb.HostCopyBytes, ga.RDMACopyBytes, gb.RDMACopyBytes)
	}
}

// TestRDMAEarlyRequestInjected: the initiator's MPA request reaches the
// responder's host before the responder has delegated its end (the test
// holds the responder's delegation until it has). The request is held and
// injected behind the CREATE_QP, so the connection completes at once,
// although the initiator's engine would not retransmit it for 30 s.
func TestRDMAEarlyRequestInjected(t *testing.T) {
	r := hostrig.New(t, hostrig.Config{HostA: func(c *board.HostConfig) { c.Device.Engine.MinRTO = 30e9 }})
	ha, hb := r.A, r.B
	a, b := hostrig.NewNode(t, ha, hostrig.NodeConfig{}), hostrig.NewNode(t, hb, hostrig.NodeConfig{})
	held := make(chan struct{})
	var once sync.Once
	v := b.V
	// Delegation's RDMA side waits for the held request: B's end is not
	// delegated until the MPA request reached B's host.
	verbs.SetEarlyHooks(v, func(hdr.Tuple) { once.Do(func() { close(held) }) }, func(hdr.Tuple) {
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Error("no early MPA request held")
		}
	})
	start := time.Now()
	hostrig.Connect(t, a, b, 4795)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("connected in %v: the MPA request waited for a retransmission", d)
	}
	if held, injected, dropped := verbs.EarlyCounts(v); held != 1 || injected != 1 || dropped != 0 {
		t.Fatalf("early frames: held %d injected %d dropped %d", held, injected, dropped)
	}
	// The QPs work.
	sendCheck(t, a, b, "after an early request")
}

// TestVerbsAsyncDoorbell: with SetAsyncDoorbell, posts return without
// waiting for QP_DOORBELL's answer and every Send still arrives, in order.
func TestVerbsAsyncDoorbell(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4799)
	a.QP.SetAsyncDoorbell(true)
	b.QP.SetAsyncDoorbell(true)
	const n = 200
	sendEach(t, a, b, n, rings.WRSignaled, func(s int) error { return b.PostRecvs(b.QP, s) })
	for i, c := range testutil.WaitCompletions(t, a.CQ, n) {
		if c.Status != rings.WCSuccess || c.WRID != uint64(i) {
			t.Fatalf("completion %d: %v", i, &c)
		}
	}
	if err := a.QP.Err(); err != nil {
		t.Fatal(err)
	}
}

// TestVerbsAsyncDoorbellRefused: a doorbell the device refuses (the QP is
// gone there) fails the QP with ErrDoorbell and closes Failed, since the
// work behind it will never complete.
func TestVerbsAsyncDoorbellRefused(t *testing.T) {
	_, a, _ := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4798)
	a.QP.SetAsyncDoorbell(true)
	select {
	case <-a.QP.Failed():
		t.Fatal("Failed closed on a working QP")
	default:
	}
	if err := verbs.ForgetOnDevice(a.QP); err != nil {
		t.Fatal(err)
	}
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, NumSGE: 1}
	w.SGL[0] = a.LocalMR.SGE(0, 1)
	if err := a.QP.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	select {
	case <-a.QP.Failed():
	case <-ctx.Done():
		t.Fatal("a refused doorbell did not fail the QP")
	}
	if err := a.QP.DoorbellErr(); !errors.Is(err, verbs.ErrDoorbell) || !errors.Is(err, verbs.ErrQPError) {
		t.Fatalf("DoorbellErr = %v, want ErrDoorbell and ErrQPError", err)
	}
}

// TestVerbsQuietRecv: receive buffers posted with PostRecvListQuiet on an
// established QP cost no command, and every Send still finds its buffer:
// the device takes receive work requests from the queue when a message
// arrives.
func TestVerbsQuietRecv(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4797)
	const n = 100
	before := b.H.Driver.Stats().Commands
	sendEach(t, a, b, n, 0, func(s int) error {
		r := rings.RecvWR{WRID: hostrig.RecvWRID(s), NumSGE: 1}
		r.SGL[0] = b.RecvMR.SGE(s*b.Cfg.RecvSize, b.Cfg.RecvSize)
		_, err := b.QP.PostRecvListQuiet([]rings.RecvWR{r})
		return err
	})
	if got := b.H.Driver.Stats().Commands - before; got != 0 {
		t.Fatalf("%d commands for %d receive posts, want 0", got, n)
	}
	if err := b.QP.Err(); err != nil {
		t.Fatal(err)
	}
}

// sendEach sends n one-byte messages from a to b one at a time, each
// checked on arrival and its receive slot handed to repost.
func sendEach(t *testing.T, a, b *hostrig.Node, n int, flags rings.WRFlags, repost func(slot int) error) {
	t.Helper()
	la := a.Local.Bytes()
	for i := range n {
		la[i] = byte(i)
		w := rings.SendWR{Opcode: rings.WRSend, Flags: flags, WRID: uint64(i), NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(i, 1)
		if err := a.QP.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		c := testutil.WaitCompletions(t, b.CQ, 1)[0]
		if c.Status != rings.WCSuccess || b.RecvData(c)[0] != byte(i) {
			t.Fatalf("send %d: %v", i, &c)
		}
		if err := repost(b.Slot(c)); err != nil {
			t.Fatal(err)
		}
	}
}
