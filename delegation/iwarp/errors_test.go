package iwarp

import (
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestProtocolViolations feeds hand-made segments to a responder in FPDU
// mode and checks the Terminate error each one draws, and that the QP ends
// in ERROR with its posted receives flushed.
func TestProtocolViolations(t *testing.T) {
	type seg struct {
		d       DDP
		payload []byte
	}
	send := func(msn, mo uint32, last bool, n int) seg {
		return seg{DDP{Last: last, Version: 1, ULPCtrl: RDMAPCtrl(OpSend), QN: 0, MSN: msn, MO: mo}, make([]byte, n)}
	}
	rreq := func(ft *fuzzTarget, msn uint32, size uint32) seg {
		p := make([]byte, ReadRequestLen)
		r, _ := ft.h.mem.Lookup(ft.stags[1])
		(&ReadRequest{SinkSTag: 0x777700, Size: size, SrcSTag: ft.stags[1], SrcTO: r.VA}).Encode(p)
		return seg{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpReadRequest), QN: 1, MSN: msn}, p}
	}
	cases := []struct {
		name string
		segs func(ft *fuzzTarget) []seg
		want TermError
	}{
		{"DDP version 0 tagged", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Tagged: true, Last: true, Version: 0, ULPCtrl: RDMAPCtrl(OpWrite)}, nil}}
		}, TermError{LayerDDP, ETypeTaggedBuffer, CodeTInvalidVersion}},
		{"DDP version 2 untagged", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 2, ULPCtrl: RDMAPCtrl(OpSend)}, nil}}
		}, TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidVersion}},
		{"RDMAP version 0", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: uint8(OpSend), MSN: 1}, nil}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeInvalidRDMAPVer}},
		{"unknown opcode 15", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(15), MSN: 1}, nil}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"atomic request (not supported)", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpAtomicRequest), QN: 3, MSN: 1}, make([]byte, AtomicRequestLen)}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"Write untagged", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpWrite), MSN: 1}, nil}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"Send tagged", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSend)}, nil}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"Send on QN 1", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSend), QN: 1, MSN: 1}, nil}}
		}, TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidQN}},
		{"Send MSN 2 first", func(ft *fuzzTarget) []seg { return []seg{send(2, 0, true, 10)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUMSNRange}},
		{"Send MSN repeated", func(ft *fuzzTarget) []seg { return []seg{send(1, 0, true, 10), send(1, 0, true, 10)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUMSNRange}},
		{"Send first MO 5", func(ft *fuzzTarget) []seg { return []seg{send(1, 5, true, 10)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidMO}},
		{"Send MO gap", func(ft *fuzzTarget) []seg { return []seg{send(1, 0, false, 10), send(1, 11, true, 10)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUInvalidMO}},
		{"Send too long", func(ft *fuzzTarget) []seg { return []seg{send(1, 0, false, 600), send(1, 600, true, 401)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUTooLong}},
		{"Send without receive", func(ft *fuzzTarget) []seg {
			var s []seg
			for i := uint32(1); i <= 9; i++ {
				s = append(s, send(i, 0, true, 1))
			}
			return s
		}, TermError{LayerDDP, ETypeUntaggedBuffer, CodeUNoBuffer}},
		{"Send changes opcode mid-message", func(ft *fuzzTarget) []seg {
			s2 := send(1, 10, true, 10)
			s2.d.ULPCtrl = RDMAPCtrl(OpSendSE)
			return []seg{send(1, 0, false, 10), s2}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"Send with Invalidate of a foreign STag", func(ft *fuzzTarget) []seg {
			s := send(1, 0, true, 4)
			s.d.ULPCtrl, s.d.ULP32 = RDMAPCtrl(OpSendInv), 0xABCDEF01
			return []seg{s}
		}, TermError{LayerRDMAP, ETypeRemoteProtection, CodeCannotInvalidate}},
		{"Immediate Data of 7 bytes", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpImmediate), MSN: 1}, make([]byte, 7)}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}},
		{"Read Request MSN 2", func(ft *fuzzTarget) []seg { return []seg{rreq(ft, 2, 10)} },
			TermError{LayerDDP, ETypeUntaggedBuffer, CodeUMSNRange}},
		{"Read Request short", func(ft *fuzzTarget) []seg {
			s := rreq(ft, 1, 10)
			s.payload = s.payload[:20]
			return []seg{s}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}},
		{"Read Requests beyond IRD", func(ft *fuzzTarget) []seg {
			return []seg{rreq(ft, 1, 10), rreq(ft, 2, 10), rreq(ft, 3, 10), rreq(ft, 4, 10), rreq(ft, 5, 10)}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeCatastrophicLocal}},
		{"Read Response without a Read", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpReadResponse), STag: 0x100}, nil}}
		}, TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnexpectedOpcode}},
		{"ULPDU shorter than its header", func(ft *fuzzTarget) []seg {
			return []seg{{DDP{Tagged: true, Version: 1}, nil}} // trimmed below
		}, TermError{LayerDDP, ETypeDDPCatastrophic, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ft := newFuzzTarget(t)
			var stream []byte
			for i, s := range c.segs(ft) {
				u := make([]byte, s.d.Len()+len(s.payload))
				s.d.Encode(u)
				copy(u[s.d.Len():], s.payload)
				if c.name == "ULPDU shorter than its header" && i == 0 {
					u = u[:9]
				}
				p := FPDUFields{ULPDU: u}
				b := make([]byte, p.Len())
				p.Encode(b)
				stream = append(stream, b...)
			}
			ft.h.qp.Receive(stream)
			out := drain(ft.h.qp)
			te, ok := ft.h.qp.LastTermError()
			if !ok || te != c.want {
				t.Fatalf("Terminate %v (%v), want %v", te, ok, c.want)
			}
			if ft.h.qp.State() != StateError {
				t.Fatalf("state %v", ft.h.qp.State())
			}
			// The Terminate is the last FPDU on the wire.
			var fp FPDUFields
			var last []byte
			for len(out) > 0 {
				n, err := fp.Decode(out)
				if err != nil {
					t.Fatal(err)
				}
				last, out = fp.ULPDU, out[n:]
			}
			if DDPHeader(last).Opcode() != OpTerminate || TerminateHeader(last[DDPUntaggedHeaderLen:]).Error() != c.want {
				t.Fatalf("last FPDU on the wire is not the Terminate: % x", last)
			}
			// Every receive still posted comes back flushed.
			cs := ft.h.poll()
			flushed := 0
			for _, c := range cs {
				if c.Status == WCWRFlushErr {
					flushed++
				}
			}
			if flushed == 0 && c.name != "Send without receive" {
				t.Fatalf("no flushed receives: %v", cs)
			}
			if ft.h.dma.bad != nil {
				t.Fatal("DMA outside registered regions")
			}
		})
	}
}

// TestLocalErrors checks work requests the device refuses: the error
// completion, ERROR, the Terminate to the peer, the rest flushed.
func TestLocalErrors(t *testing.T) {
	cases := []struct {
		name string
		wr   func(a *host) SendWR
		want WCStatus
	}{
		{"bad lkey", func(a *host) SendWR {
			return SendWR{Opcode: WRSend, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: 0x1000, Length: 10, LKey: 0x4242}}}
		}, WCLocProtErr},
		{"lkey of another PD", func(a *host) SendWR {
			b := a.buf(64)
			a.dma.setup = true
			k, _ := a.mem.Register(99, b, uint64(b), 64, AccessLocalWrite)
			a.dma.setup = false
			return SendWR{Opcode: WRSend, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(b), Length: 10, LKey: k}}}
		}, WCLocProtErr},
		{"SGE past the region", func(a *host) SendWR {
			b := a.buf(64)
			return SendWR{Opcode: WRSend, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(b) + 60, Length: 10, LKey: a.reg(b, 64, 0)}}}
		}, WCLocProtErr},
		{"read sink without local write", func(a *host) SendWR {
			b := a.buf(64)
			return SendWR{Opcode: WRRDMARead, WRID: 1, RKey: 0x100, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(b), Length: 10, LKey: a.reg(b, 64, 0)}}}
		}, WCLocProtErr},
		{"five SGEs", func(a *host) SendWR { return SendWR{Opcode: WRSend, WRID: 1, NumSGE: 5} }, WCLocQPOpErr},
		{"atomic", func(a *host) SendWR { return SendWR{Opcode: WRAtomicFetchAdd, WRID: 1} }, WCLocQPOpErr},
		{"send with immediate", func(a *host) SendWR { return SendWR{Opcode: WRSendImm, WRID: 1} }, WCLocQPOpErr},
		{"unknown opcode", func(a *host) SendWR { return SendWR{Opcode: 200, WRID: 1} }, WCLocQPOpErr},
		{"unknown flag", func(a *host) SendWR { return SendWR{Opcode: WRSend, Flags: 0x40, WRID: 1} }, WCLocQPOpErr},
		{"inline too long", func(a *host) SendWR { return SendWR{Opcode: WRSend, Flags: WRInline, InlineLen: 65, WRID: 1} }, WCLocLenErr},
		{"local invalidate of nothing", func(a *host) SendWR { return SendWR{Opcode: WRLocalInv, InvSTag: 0x4242, WRID: 1} }, WCLocProtErr},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, l := pair(t, 40)
			b.postRecv(7)
			b.postRecv(8)
			a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 0})
			a.postSend(c.wr(a))
			a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 2})
			l.run()
			wantCompletion(t, a.poll(),
				Completion{Opcode: WCSend, WRID: 0},
				Completion{Opcode: wcOpcodeOf(c.wr(a).Opcode), Status: c.want, WRID: 1},
				Completion{Opcode: WCSend, Status: WCWRFlushErr, WRID: 2})
			if a.qp.State() != StateError || b.qp.State() != StateError {
				t.Fatalf("states %v %v", a.qp.State(), b.qp.State())
			}
			if pt, ok := b.qp.PeerTermError(); !ok || pt != (TermError{LayerRDMAP, ETypeRDMAPCatastrophic, CodeUnspecified}) {
				t.Fatalf("peer got %v %v", pt, ok)
			}
			wantCompletion(t, b.poll(), Completion{Opcode: WCRecv, WRID: 7}, Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 8})
		})
	}
}

// TestOutstandingReadLimits: ORD holds reads back without losing any; a peer
// that ignores our IRD gets a Terminate.
func TestOutstandingReadLimits(t *testing.T) {
	t.Run("ORD", func(t *testing.T) {
		a := newHost(t, "A", hostOpts{initiator: true, ord: 2})
		b := newHost(t, "B", hostOpts{ird: 2})
		l := connect(t, a, b, 50)
		const n = 3000
		src := b.buf(n)
		fill(b.bytesAt(src, n), 4)
		sk := b.reg(src, n, AccessRemoteRead)
		sink := a.buf(8 * n)
		kk := a.reg(sink, 8*n, AccessLocalWrite)
		maxOut := 0
		l.ab.tap = func([]byte) { maxOut = max(maxOut, a.qp.orqN) }
		for i := 0; i < 8; i++ {
			a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: uint64(i), RemoteAddr: uint64(src), RKey: sk, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(sink) + uint64(i*n), Length: n, LKey: kk}}})
		}
		a.qp.Pump(&l.ab)
		if a.qp.orqN != 2 || a.qp.HasOutput() {
			t.Fatalf("%d reads outstanding, HasOutput %v", a.qp.orqN, a.qp.HasOutput())
		}
		l.run()
		var want []Completion
		for i := 0; i < 8; i++ {
			want = append(want, Completion{Opcode: WCRDMARead, WRID: uint64(i), ByteLen: n})
			if string(a.bytesAt(sink+rings.Addr(i*n), n)) != string(b.bytesAt(src, n)) {
				t.Fatalf("read %d data", i)
			}
		}
		wantCompletion(t, a.poll(), want...)
		if maxOut > 2 {
			t.Fatalf("%d reads outstanding with ORD 2", maxOut)
		}
	})
	t.Run("IRD", func(t *testing.T) {
		// MPA revision 1: no IRD/ORD exchange, so A's ORD 4 overruns
		// B's IRD 2 (revision 2 would have brought A's ORD down to 2:
		// TestMPAv2IRDORD).
		a := newHost(t, "A", hostOpts{initiator: true, ord: 4, mpaRev: 1})
		b := newHost(t, "B", hostOpts{ird: 2})
		l := connect(t, a, b, 51)
		src := b.buf(64)
		sk := b.reg(src, 64, AccessRemoteRead)
		sink := a.buf(64)
		kk := a.reg(sink, 64, AccessLocalWrite)
		for i := 0; i < 3; i++ {
			a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: uint64(i), RemoteAddr: uint64(src), RKey: sk, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(sink), Length: 64, LKey: kk}}})
		}
		// A frames all three before B answers any.
		l.a.qp.Pump(&l.ab)
		l.deliver(&l.ab, b, nil)
		l.run()
		if te, _ := b.qp.LastTermError(); te != (TermError{LayerRDMAP, ETypeRemoteOperation, CodeCatastrophicLocal}) {
			t.Fatalf("B sent %v", te)
		}
		if a.qp.State() != StateError {
			t.Fatal("A not in ERROR")
		}
	})
}

// TestCQOverrun: a CQ too small for the completions: the QP goes to ERROR
// with EvError and the CQ counts the loss.
func TestCQOverrun(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, cqCount: 4})
	b := newHost(t, "B", hostOpts{})
	l := connect(t, a, b, 60)
	for i := 0; i < 6; i++ {
		b.postRecv(uint64(i))
		a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: uint64(i)})
	}
	l.run()
	if a.qp.State() != StateError || !a.hasEvent(EvError) || a.qp.Err() != ErrCQOverrun || !a.cq.Overrun() {
		t.Fatalf("state %v events %v err %v", a.qp.State(), a.evs, a.qp.Err())
	}
	if len(a.poll()) != 4 || a.qp.Stats().CompletionsLost == 0 {
		t.Fatal("overrun accounting")
	}
}

// TestCloseAndLLP: orderly close flushes and reports EvClosed; a lost
// connection without Close is an error.
func TestCloseAndLLP(t *testing.T) {
	a, b, l := pair(t, 70)
	b.postRecv(1)
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1})
	l.run()
	a.postRecv(5)
	a.qp.Close()
	if a.qp.State() != StateClosing || !a.qp.WantClose() {
		t.Fatal("close")
	}
	a.qp.LLPClosed()
	b.postRecv(2)
	b.qp.LLPClosed()
	if a.qp.State() != StateError || !a.hasEvent(EvClosed) || b.qp.State() != StateError || !b.hasEvent(EvError) {
		t.Fatalf("A %v %v, B %v %v", a.qp.State(), a.evs, b.qp.State(), b.evs)
	}
	wantCompletion(t, a.poll(), Completion{Opcode: WCSend, WRID: 1}, Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 5})
	wantCompletion(t, b.poll(), Completion{Opcode: WCRecv, WRID: 1}, Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 2})
}

// TestCorruptSQ: an SQ entry published without its phase tag is a host bug:
// the QP stops instead of executing garbage.
func TestCorruptSQ(t *testing.T) {
	a, b, l := pair(t, 80)
	b.postRecv(1)
	e := a.sqP.Next()
	(&SendWR{Opcode: WRSend, WRID: 9}).Encode(e)
	a.sqP.Commit()
	e[0] ^= 1 // wrong phase
	a.sqP.Publish()
	l.run()
	if a.qp.State() != StateError || a.qp.Stats().BadHostEntries == 0 {
		t.Fatalf("state %v stats %+v", a.qp.State(), a.qp.Stats())
	}
}
