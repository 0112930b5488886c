package verbs_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// TestFastReg: an STag allocated for fast registration is mapped by a
// REG_MR work request posted with the Send that advertises it, the peer
// RDMA-writes it and ends it with a Send with Invalidate; the next mapping
// has a new key, and the peer's Write to the old STag is refused by the
// NIC (Terminate: both QPs go to ERROR) with nothing placed.
func TestFastReg(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4795)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	la := a.Local.Bytes()
	fill(la, 7)
	// A's first message: B reaches RTS.
	send := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 1, NumSGE: 1}
	send.SGL[0] = a.LocalMR.SGE(0, 8)
	if err := a.QP.PostSend(&send); err != nil {
		t.Fatal(err)
	}
	testutil.WaitCompletions(t, a.CQ, 1)
	testutil.WaitCompletions(t, b.CQ, 1)
	if err := b.QP.WaitEstablished(ctx); err != nil {
		t.Fatal(err)
	}

	buf := hostrig.Must[*verbs.Buffer](t)(b.V.AllocBuffer(64 << 10))
	for i := range buf.Bytes() {
		buf.Bytes()[i] = 0xEE
	}
	f := hostrig.Must[*verbs.FastMR](t)(b.V.AllocMR(b.PD, buf.Addr, buf.Len()))
	if _, _, err := f.RegWR(buf.Addr+rings.Addr(buf.Len()), 16, verbs.AccessLocalWrite); err == nil {
		t.Fatal("RegWR outside the bound accepted")
	}
	// advertise maps [off, off+n) of buf for remote write and sends B's
	// Send in the same doorbell.
	advertise := func(off, n int, wrid uint64) uint32 {
		t.Helper()
		reg, stag, err := f.RegWR(buf.Addr+rings.Addr(off), n, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		s := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: wrid, NumSGE: 1}
		s.SGL[0] = b.LocalMR.SGE(0, 8)
		if k, err := b.QP.PostSendList([]rings.SendWR{reg, s}); k != 2 || err != nil {
			t.Fatal(k, err)
		}
		// Only the Send completes: the REG_MR is unsignaled.
		wantWC(t, testutil.WaitCompletions(t, b.CQ, 1)[0], rings.WCSend, wrid)
		testutil.WaitCompletions(t, a.CQ, 1)
		return stag
	}
	stag := advertise(4096, 8192, 10)
	if _, _, err := f.RegWR(buf.Addr, 16, verbs.AccessLocalWrite); !errors.Is(err, verbs.ErrFastMRBusy) {
		t.Fatalf("RegWR of a mapped STag: %v", err)
	}
	if err := buf.Free(); !errors.Is(err, verbs.ErrBufferRegistered) {
		t.Fatalf("Free of memory mapped under a fast-registration STag: %v", err)
	}
	// A writes it and ends it with a Send with Invalidate.
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 2, RemoteAddr: uint64(buf.Addr) + 4096, RKey: stag, NumSGE: 1}
	w.SGL[0] = a.LocalMR.SGE(0, 8192)
	inv := rings.SendWR{Opcode: rings.WRSendInv, Flags: rings.WRSignaled, WRID: 3, InvSTag: stag, NumSGE: 1}
	inv.SGL[0] = a.LocalMR.SGE(0, 8)
	if k, err := a.QP.PostSendList([]rings.SendWR{w, inv}); k != 2 || err != nil {
		t.Fatal(k, err)
	}
	testutil.WaitCompletions(t, a.CQ, 2)
	rc := testutil.WaitCompletions(t, b.CQ, 1)[0]
	if rc.Flags&rings.WCWithInv == 0 || uint32(rc.ImmData) != stag || !f.Invalidated(uint32(rc.ImmData)) {
		t.Fatalf("Send with Invalidate of %#x: %v", stag, &rc)
	}
	if !bytes.Equal(buf.Bytes()[4096:12288], la[:8192]) || buf.Bytes()[4095] != 0xEE || buf.Bytes()[12288] != 0xEE {
		t.Fatal("RDMA Write into the fast-registered region not placed exactly")
	}
	// The next mapping has another key; the old STag is dead.
	stag2 := advertise(0, 4096, 11)
	if stag2 == stag || stag2>>8 != stag>>8 {
		t.Fatalf("second mapping's STag %#x after %#x", stag2, stag)
	}
	fill(la[:4096], 0x42)
	w.RemoteAddr, w.RKey, w.WRID, w.SGL[0] = uint64(buf.Addr), stag, 4, a.LocalMR.SGE(0, 4096)
	if err := a.QP.PostSend(&w); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*hostrig.Node{a, b} {
		err := verbs.WaitQP(ctx, s.QP, func(st verbs.QPState, _ bool) bool { return st >= verbs.QPStateError })
		if err != nil {
			t.Fatalf("QP not in error after a Write to an invalidated STag: %v", err)
		}
	}
	for _, x := range buf.Bytes()[:4096] {
		if x != 0xEE {
			t.Fatal("a Write to an invalidated STag was placed")
		}
	}
	if err := f.Dereg(); err != nil {
		t.Fatal(err)
	}
	if err := buf.Free(); err != nil {
		t.Fatalf("Free after the STag was deregistered: %v", err)
	}
}
