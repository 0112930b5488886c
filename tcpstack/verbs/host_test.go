package verbs

// Tests of the provider on two emulated hosts that look at the drivers'
// counters and at delegation's timing (moved here with the verbs from
// tcpstack's counters, gate and command-path tests).

import (
	"bytes"
	"context"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
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

	region := must[*Buffer](t)(b.v.AllocBuffer(64 << 10))
	rmr := must[*MR](t)(b.v.RegMR(b.pd, region, AccessLocalWrite|AccessRemoteWrite|AccessRemoteRead))
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
	l, err := b.v.ListenRDMA(4798, b.attr())
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
	qp, err := a.v.DialRDMA(ctx, netip.AddrPortFrom(hb.Addr(), 4798), attr)
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

// TestRDMAEarlyRequestInjected: the initiator's MPA request reaches the
// responder's host before the responder has delegated its end (the test
// holds the responder's delegation until it has). The request is held and
// injected behind the CREATE_QP, so the connection completes at once,
// although the initiator's engine would not retransmit it for 30 s.
func TestRDMAEarlyRequestInjected(t *testing.T) {
	pa, pb := port.MustNewWire(port.WireConfig{})
	ca := tcpstack.HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: netip.MustParsePrefix("10.0.0.1/24")}
	ca.Device.Engine.MinRTO = 30e9
	ha, err := tcpstack.NewHost(ca, pa)
	if err != nil {
		t.Fatal(err)
	}
	hb, err := tcpstack.NewHost(tcpstack.HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addr: netip.MustParsePrefix("10.0.0.2/24")}, pb)
	if err != nil {
		ha.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { ha.Close(); hb.Close() })
	a, b := newSide(t, ha), newSide(t, hb)
	held := make(chan struct{})
	var once sync.Once
	v := b.v
	v.onEarlyHold = func(tcpstack.FlowKey) { once.Do(func() { close(held) }) }
	// Delegation's RDMA side waits for the held request: B's end is not
	// delegated until the MPA request reached B's host.
	v.beforePrepare = func(tcpstack.FlowKey) {
		select {
		case <-held:
		case <-time.After(10 * time.Second):
			t.Error("no early MPA request held")
		}
	}
	start := time.Now()
	connect(t, a, b, 4795)
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("connected in %v: the MPA request waited for a retransmission", d)
	}
	if v.earlyHeld.Load() != 1 || v.earlyInjected.Load() != 1 || v.earlyDropped.Load() != 0 {
		t.Fatalf("early frames: held %d injected %d dropped %d", v.earlyHeld.Load(), v.earlyInjected.Load(), v.earlyDropped.Load())
	}
	// The QPs work.
	wr := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 9, NumSGE: 1}
	copy(a.local.Bytes(), "after an early request")
	wr.SGL[0] = a.lmr.SGE(0, 22)
	if err := a.qp.PostSend(&wr); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	wc := make([]rings.Completion, 1)
	if _, err := b.cq.PollWait(ctx, wc, false); err != nil {
		t.Fatal(err)
	}
	if wc[0].Status != rings.WCSuccess || string(b.recvData(wc[0])) != "after an early request" {
		t.Fatalf("receive %v %q", &wc[0], b.recvData(wc[0]))
	}
}

// TestAllocPDPerHost: protection domain numbers are per host (per
// provider: a host has one).
func TestAllocPDPerHost(t *testing.T) {
	a, _ := fakeVerbs(t)
	b, _ := fakeVerbs(t)
	if pa, pb := a.AllocPD(), b.AllocPD(); pa != 1 || pb != 1 || a.AllocPD() != 2 {
		t.Fatalf("PDs %d %d", pa, pb)
	}
}
