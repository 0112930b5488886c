package iwarp

import (
	"bytes"
	"testing"
)

// TestEveryOpcode runs each verb between two hosts over a re-chunked byte
// pipe and checks the data and the completions on both sides.
func TestEveryOpcode(t *testing.T) {
	for seed := uint64(1); seed <= 4; seed++ {
		a, b, l := pair(t, seed)
		const n = 100_000 // several FPDUs at MSS 1460

		// A's source buffers, B's targets.
		src := a.buf(n)
		fill(a.bytesAt(src, n), 1)
		srcKey := a.reg(src, n, 0)
		wtgt := b.buf(n)
		wtgtKey := b.reg(wtgt, n, AccessLocalWrite|AccessRemoteWrite)
		rsrc := b.buf(n)
		fill(b.bytesAt(rsrc, n), 9)
		rsrcKey := b.reg(rsrc, n, AccessRemoteRead)
		rsink := a.buf(n)
		rsinkKey := a.reg(rsink, n, AccessLocalWrite)
		recv := b.buf(3 * n)
		recvKey := b.reg(recv, 3*n, AccessLocalWrite)
		inv := b.buf(64)
		invKey := b.reg(inv, 64, AccessRemoteWrite)

		// B posts receives: two SGEs for the first Send.
		b.postRecv(100, SGE{Addr: uint64(recv), Length: 1000, LKey: recvKey}, SGE{Addr: uint64(recv) + 1000, Length: n, LKey: recvKey})
		b.postRecv(101, SGE{Addr: uint64(recv) + 2*n, Length: 500, LKey: recvKey})
		b.postRecv(102, SGE{Addr: uint64(recv) + 2*n + 500, Length: 500, LKey: recvKey})
		b.postRecv(103) // for the Immediate Data
		b.postRecv(104, SGE{Addr: uint64(recv) + 2*n + 1000, Length: 64, LKey: recvKey})

		// 1. Send (multi-FPDU, into two SGEs), the initiator's first FPDU.
		a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: srcKey}}})
		// 2. RDMA Write (multi-FPDU), unsignaled.
		a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 2, RemoteAddr: uint64(wtgt), RKey: wtgtKey, NumSGE: 2,
			SGL: [4]SGE{{Addr: uint64(src), Length: 300, LKey: srcKey}, {Addr: uint64(src) + 300, Length: n - 300, LKey: srcKey}}})
		// 3. RDMA Read.
		a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: 3, RemoteAddr: uint64(rsrc), RKey: rsrcKey, NumSGE: 1,
			SGL: [4]SGE{{Addr: uint64(rsink), Length: n, LKey: rsinkKey}}})
		// 4. Send with solicited event, inline.
		w := SendWR{Opcode: WRSend, Flags: WRSignaled | WRSolicited | WRInline | WRFence, WRID: 4, InlineLen: 17}
		copy(w.InlineData[:], "inline solicited!")
		a.postSend(w)
		// 5. Send with Invalidate of B's inv region.
		a.postSend(SendWR{Opcode: WRSendInv, Flags: WRSignaled, WRID: 5, InvSTag: invKey, NumSGE: 1,
			SGL: [4]SGE{{Addr: uint64(src) + 5, Length: 300, LKey: srcKey}}})
		// 6. RDMA Write with Immediate (RFC 7306 Immediate Data).
		a.postSend(SendWR{Opcode: WRRDMAWriteImm, Flags: WRSignaled | WRSolicited, WRID: 6, RemoteAddr: uint64(wtgt) + 10, RKey: wtgtKey,
			ImmData: 0x0102030405060708, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src) + 7, Length: 5000, LKey: srcKey}}})
		// 7. Send with SE and Invalidate (of an already invalid STag would fail; register a fresh one).
		inv2 := b.reg(b.buf(8), 8, AccessRemoteRead)
		a.postSend(SendWR{Opcode: WRSendInv, Flags: WRSignaled | WRSolicited, WRID: 7, InvSTag: inv2, NumSGE: 1,
			SGL: [4]SGE{{Addr: uint64(src), Length: 64, LKey: srcKey}}})
		// 8. Local invalidate of A's own read sink after everything.
		a.postSend(SendWR{Opcode: WRLocalInv, Flags: WRSignaled | WRFence, WRID: 8, InvSTag: rsinkKey})
		b.cq.Arm(true)
		l.run()

		if a.qp.State() != StateRTS || b.qp.State() != StateRTS {
			t.Fatalf("states: %v %v (A err %v, B term %v)", a.qp.State(), b.qp.State(), a.qp.Err(), b.qp.termErr)
		}
		want := a.bytesAt(src, n)
		if got := b.bytesAt(recv, 1000+n); !bytes.Equal(got[:n], want) {
			t.Fatal("Send payload differs")
		}
		if got := b.bytesAt(wtgt, n); !bytes.Equal(got[:10], want[:10]) || !bytes.Equal(got[10:5010], want[7:5007]) || !bytes.Equal(got[5010:], want[5010:]) {
			t.Fatal("RDMA Write payload differs")
		}
		if !bytes.Equal(a.bytesAt(rsink, n), b.bytesAt(rsrc, n)) {
			t.Fatal("RDMA Read payload differs")
		}
		if got := b.bytesAt(recv+2*n, 17); string(got) != "inline solicited!" {
			t.Fatalf("inline Send got %q", got)
		}
		if !bytes.Equal(b.bytesAt(recv+2*n+500, 300), want[5:305]) {
			t.Fatal("Send with Invalidate payload differs")
		}
		if r, _ := b.mem.Lookup(invKey); r.Valid {
			t.Fatal("Send with Invalidate left the STag valid")
		}
		if r, _ := a.mem.Lookup(rsinkKey); r.Valid {
			t.Fatal("local invalidate left the STag valid")
		}
		wantCompletion(t, a.poll(),
			Completion{Opcode: WCSend, WRID: 1},
			Completion{Opcode: WCRDMARead, WRID: 3, ByteLen: n},
			Completion{Opcode: WCSend, WRID: 4},
			Completion{Opcode: WCSend, WRID: 5},
			Completion{Opcode: WCRDMAWrite, WRID: 6},
			Completion{Opcode: WCSend, WRID: 7},
			Completion{Opcode: WCLocalInv, WRID: 8})
		wantCompletion(t, b.poll(),
			Completion{Opcode: WCRecv, WRID: 100, ByteLen: n},
			Completion{Opcode: WCRecv, WRID: 101, ByteLen: 17, Flags: WCSolicitedF},
			Completion{Opcode: WCRecv, WRID: 102, ByteLen: 300, Flags: WCWithInv, ImmData: uint64(invKey)},
			Completion{Opcode: WCRecvRDMAWithImm, WRID: 103, Flags: WCWithImm | WCSolicitedF, ImmData: 0x0102030405060708},
			Completion{Opcode: WCRecv, WRID: 104, ByteLen: 64, Flags: WCWithInv | WCSolicitedF, ImmData: uint64(inv2)})
		if b.cqEv != 1 {
			t.Fatalf("solicited-only CQ events: %d, want 1", b.cqEv)
		}
		if !a.hasEvent(EvEstablished) || !b.hasEvent(EvEstablished) {
			t.Fatalf("events: A %v, B %v", a.evs, b.evs)
		}
		st := a.qp.Stats()
		if st.TxBytes != uint64(l.ab.total) || st.CRCErrors != 0 || b.qp.Stats().CRCErrors != 0 {
			t.Fatalf("stats: %+v", st)
		}
		if a.dma.bad != nil || b.dma.bad != nil {
			t.Fatal("DMA outside registered regions")
		}
	}
}

// TestFPDUSizes checks that no FPDU exceeds the MSS and that full ones fill it.
func TestFPDUSizes(t *testing.T) {
	for _, mss := range []int{128, 536, 1460, 8960, 65535} {
		a := newHost(t, "A", hostOpts{initiator: true, mss: mss})
		b := newHost(t, "B", hostOpts{mss: mss})
		l := connect(t, a, b, 3)
		var sizes []int
		l.ab.tap = func(p []byte) {
			for len(p) >= 2 {
				n := FPDU(p).WireLen()
				if n > len(p) {
					t.Fatalf("FPDU split across Write calls")
				}
				sizes = append(sizes, n)
				p = p[n:]
			}
		}
		const n = 200_000
		src := a.buf(n)
		fill(a.bytesAt(src, n), 3)
		tgt := b.buf(n)
		a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 1, RemoteAddr: uint64(tgt), RKey: b.reg(tgt, n, AccessRemoteWrite),
			NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: a.reg(src, n, 0)}}})
		l.run()
		if !bytes.Equal(a.bytesAt(src, n), b.bytesAt(tgt, n)) {
			t.Fatalf("mss %d: data differs", mss)
		}
		for i, s := range sizes {
			if s > mss {
				t.Fatalf("mss %d: FPDU of %d bytes", mss, s)
			}
			if i < len(sizes)-1 && s < mss-3 {
				t.Fatalf("mss %d: non-final FPDU of %d bytes", mss, s)
			}
		}
	}
}

// TestSmallStreamSpace: a TCP send buffer with little room. The MPA frames
// go out a few bytes at a time; FPDUs wait until a whole one fits, and each
// Write then carries exactly one.
func TestSmallStreamSpace(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, pdata: bytes.Repeat([]byte("p"), 300)})
	b := newHost(t, "B", hostOpts{})
	l := newLink(t, a, b, 9)
	l.ab.cap, l.ba.cap = 7, 7
	_ = b.qp.Accept([]byte("ok"))
	_ = a.qp.Connect()
	l.run()
	if a.qp.State() != StateRTS || len(b.qp.PeerPrivateData()) != 300 {
		t.Fatalf("handshake through a 7-byte buffer: %v", a.qp.State())
	}
	l.run() // nothing to send: no progress, no spin
	const n = 20_000
	src := a.buf(n)
	fill(a.bytesAt(src, n), 6)
	tgt := b.buf(n)
	a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 1, RemoteAddr: uint64(tgt), RKey: b.reg(tgt, n, AccessRemoteWrite),
		NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: a.reg(src, n, 0)}}})
	l.run()
	if !a.qp.HasOutput() {
		t.Fatal("an FPDU that does not fit should still be pending")
	}
	writes := 0
	l.ab.cap = 1460
	l.ab.tap = func(p []byte) {
		writes++
		if FPDU(p).WireLen() != len(p) {
			t.Fatalf("a Write of %d bytes is not one FPDU", len(p))
		}
	}
	l.run()
	if !bytes.Equal(a.bytesAt(src, n), b.bytesAt(tgt, n)) || writes != (n+1439)/1440 {
		t.Fatalf("data or FPDU count (%d writes)", writes)
	}
}
