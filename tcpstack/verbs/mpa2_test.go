package verbs_test

import (
	"bytes"
	"context"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// mpaRequest is a raw MPA request: flags, revision, private data.
func mpaRequest(flags, rev byte, pd []byte, pdLen int) []byte {
	b := append([]byte(iwarp.MPAKeyRequest), flags, rev, byte(pdLen>>8), byte(pdLen))
	return append(b, pd...)
}

// TestMPAHostileRequests sends an RDMA listener MPA requests from a plain
// TCP client (netstack on the other host) — an unknown revision, the S
// flag without its data, a private data length beyond what comes, IRD/ORD
// of 0 and of the most the fields hold — while a good QP on the same
// listener runs: each bad one gets a reject reply or is dropped, is
// counted by the listener, and the good QP never notices.
func TestMPAHostileRequests(t *testing.T) {
	_, a, b := hostrig.QPPair(t, hostrig.Config{}, hostrig.NodeConfig{}, 4792)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(wrid uint64) {
		t.Helper()
		w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: wrid, NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(0, 64)
		if err := a.QP.PostSend(&w); err != nil {
			t.Fatal(err)
		}
		wantWC(t, testutil.WaitCompletions(t, a.CQ, 1)[0], rings.WCSend, wrid)
		if c := testutil.WaitCompletions(t, b.CQ, 1)[0]; c.Status != rings.WCSuccess || c.ByteLen != 64 {
			t.Fatalf("the good QP's receive: %v", &c)
		}
		if err := b.PostRecvs(b.QP, 0); err != nil {
			t.Fatal(err)
		}
	}
	send(1)

	const port = 4793
	// The hostile connections' QPs have a CQ of their own: their flushed
	// receives are not the good QP's business.
	attr := b.Attr()
	cq := hostrig.Must[*verbs.CQ](t)(b.V.CreateCQ(64))
	attr.SendCQ, attr.RecvCQ = cq, cq
	l := hostrig.Must[*verbs.RDMAListener](t)(b.V.ListenRDMA(port, attr))
	defer l.Close()
	dst := netip.AddrPortFrom(b.H.Addr(), port)
	// exchange sends req and returns what comes back until the listener
	// closes the connection (at most 1 s of silence after req).
	exchange := func(req []byte, closeAfter bool) []byte {
		t.Helper()
		c, err := a.H.Dial(ctx, dst)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := c.Write(req); err != nil {
			t.Fatal(err)
		}
		if closeAfter {
			c.Close()
			return nil
		}
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		out, _ := io.ReadAll(c)
		return out
	}
	for _, c := range []struct {
		name    string
		req     []byte
		rev     byte // the reject's revision
		dropped bool // no reply: the peer closed before the request was whole
	}{
		{"revision 3", mpaRequest(0x40, 3, nil, 0), 2, false},
		{"revision 0", mpaRequest(0x40, 0, nil, 0), 1, false},
		{"S without its data", mpaRequest(0x50, 2, []byte{0, 1}, 2), 2, false},
		{"private data beyond the frame", mpaRequest(0x50, 2, []byte{0, 1, 0, 1, 9}, 100), 0, true},
		{"private data over 512", mpaRequest(0x50, 2, nil, 513), 2, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			before := l.Failed()
			out := exchange(c.req, c.dropped)
			if !c.dropped {
				var f iwarp.MPAFrameFields
				if n, err := f.Decode(out); err != nil || n != len(out) || !f.Reply || !f.Reject || f.Rev != c.rev {
					t.Fatalf("reply % x (%v): %+v", out, err, f)
				}
			}
			// The listener counts the connection that never became a
			// request.
			deadline := time.Now().Add(5 * time.Second)
			for l.Failed() == before && time.Now().Before(deadline) {
				time.Sleep(5 * time.Millisecond)
			}
			if l.Failed() != before+1 {
				t.Fatalf("listener counted %d failures, want %d (last: %v)", l.Failed(), before+1, l.LastError())
			}
			t.Logf("listener: %v (the good QP is %d)", l.LastError(), b.QP.QPN())
		})
	}
	// IRD/ORD of 0 and of 16383 are requests: answered within what the
	// QP holds (its 16, or 0 kept), not refused.
	for _, c := range []struct {
		name     string
		ird, ord byte
		want     []byte
	}{
		{"IRD/ORD 0", 0, 0, []byte{0, 0, 0, 0}},
		{"IRD/ORD 16383", 0x3f, 0xff, []byte{0, 16, 0, 16}},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := a.H.Dial(ctx, dst)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if _, err := cl.Write(mpaRequest(0x50, 2, []byte{c.ird, c.ord, c.ird, c.ord}, 4)); err != nil {
				t.Fatal(err)
			}
			r, err := l.GetRequest(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if err := r.Accept(nil); err != nil {
				t.Fatal(err)
			}
			rep := make([]byte, iwarp.MPAFrameHeaderLen+4)
			_ = cl.SetReadDeadline(time.Now().Add(5 * time.Second))
			if _, err := io.ReadFull(cl, rep); err != nil {
				t.Fatal(err)
			}
			if rep[iwarp.MPAOffFlags] != 0x50 || rep[iwarp.MPAOffRev] != 2 || !bytes.Equal(rep[iwarp.MPAOffPrivate:], c.want) {
				t.Fatalf("reply % x, want IRD/ORD % x", rep, c.want)
			}
			_ = r.QP().Destroy()
		})
	}
	// The good QP never noticed.
	send(2)
}
