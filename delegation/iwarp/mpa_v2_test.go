package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

// siwRequest is the MPA request siw's rping sends (siw-vm README): revision
// 2, S, IRD 1, ORD 1; with peer_to_peer=1 the data is 80 01 c0 01.
func siwRequest(flags byte, v2 ...byte) []byte {
	b := append([]byte(MPAKeyRequest), flags, 2, 0, byte(len(v2)))
	return append(b, v2...)
}

func TestMPAv2DecodeSiwBytes(t *testing.T) {
	for _, c := range []struct {
		b    []byte
		want MPAConn
	}{
		{siwRequest(0x10, 0, 1, 0, 1), MPAConn{Rev: 2, Enhanced: true, V2: MPAv2Fields{IRD: 1, ORD: 1}}},
		{siwRequest(0x50, 0, 1, 0, 1), MPAConn{Rev: 2, CRC: true, Enhanced: true, V2: MPAv2Fields{IRD: 1, ORD: 1}}},
		{siwRequest(0x18, 0, 0x80, 0, 0x80), MPAConn{Rev: 2, Enhanced: true, V2: MPAv2Fields{IRD: 128, ORD: 128}}},
		{siwRequest(0x10, 0x80, 1, 0xc0, 1), MPAConn{Rev: 2, Enhanced: true,
			V2: MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true, ReadRTR: true}}},
		{siwRequest(0x10, 0xc0, 1, 0, 1), MPAConn{Rev: 2, Enhanced: true, V2: MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, SendRTR: true}}},
	} {
		f, got, n, err := ParseMPAConn(c.b)
		if err != nil || n != len(c.b) {
			t.Fatalf("% x: %d %v", c.b, n, err)
		}
		c.want.AppData = []byte{}
		if got.Rev != c.want.Rev || got.CRC != c.want.CRC || got.Enhanced != c.want.Enhanced || got.V2 != c.want.V2 || len(got.AppData) != 0 {
			t.Fatalf("% x: got %+v, want %+v", c.b, got, c.want)
		}
		// Encoding the fields back gives the same bytes.
		out := make([]byte, f.Len())
		f.Encode(out)
		if !bytes.Equal(out, c.b) {
			t.Fatalf("re-encoded % x, want % x", out, c.b)
		}
	}
}

func TestMPAv2RoundTrip(t *testing.T) {
	for _, v := range []MPAv2Fields{
		{},
		{IRD: MPAv2MaxIRDORD, ORD: MPAv2MaxIRDORD, PeerToPeer: true, SendRTR: true, WriteRTR: true, ReadRTR: true},
		{IRD: 16, ORD: 0, PeerToPeer: true, WriteRTR: true},
	} {
		var b [MPAv2DataLen]byte
		v.Encode(b[:])
		var got MPAv2Fields
		if n, err := got.Decode(b[:]); err != nil || n != MPAv2DataLen || got != v {
			t.Fatalf("%+v: got %+v %d %v", v, got, n, err)
		}
		if d := MPAv2Data(b[:]); d.IRD() != v.IRD || d.ORD() != v.ORD || d.PeerToPeer() != v.PeerToPeer {
			t.Fatalf("accessors %+v", v)
		}
	}
}

// mpaV2Frames are encoded revision-2 frames: the seeds of the fuzzer and
// the truncation test.
func mpaV2Frames() [][]byte {
	var out [][]byte
	for _, f := range []struct {
		v   MPAv2Fields
		app []byte
		fl  MPAFrameFields
	}{
		{MPAv2Fields{IRD: 1, ORD: 1}, nil, MPAFrameFields{Rev: 2}},
		{MPAv2Fields{IRD: 128, ORD: 128}, []byte("app"), MPAFrameFields{Rev: 2, CRC: true}},
		{MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, nil, MPAFrameFields{Rev: 2, Reply: true}},
		{MPAv2Fields{}, bytes.Repeat([]byte{9}, MPAv2MaxAppPrivateData), MPAFrameFields{Rev: 2, Reply: true, Reject: true}},
	} {
		pd := make([]byte, MPAv2DataLen+len(f.app))
		f.v.Encode(pd)
		copy(pd[MPAv2DataLen:], f.app)
		fl := f.fl
		fl.Enhanced, fl.PrivateData = true, pd
		b := make([]byte, fl.Len())
		fl.Encode(b)
		out = append(out, b)
	}
	return out
}

func TestMPAv2TruncatedRejected(t *testing.T) {
	for _, b := range mpaV2Frames() {
		for i := 0; i < len(b); i++ {
			if _, _, _, err := ParseMPAConn(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix of %d of %d bytes: %v", i, len(b), err)
			}
		}
		if _, _, n, err := ParseMPAConn(b); err != nil || n != len(b) {
			t.Fatalf("whole frame: %d %v", n, err)
		}
	}
	// The frame is whole but S promises more than PD_Length holds.
	for pd := 0; pd < MPAv2DataLen; pd++ {
		b := append([]byte(MPAKeyRequest), MPAFlagEnhanced, 2, 0, byte(pd))
		b = append(b, make([]byte, pd)...)
		if _, _, _, err := ParseMPAConn(b); !errors.Is(err, ErrMPAv2Data) {
			t.Fatalf("S with %d bytes of private data: %v", pd, err)
		}
	}
	for _, rev := range []byte{0, 3, 255} {
		b := append([]byte(MPAKeyRequest), 0, rev, 0, 0)
		if _, _, _, err := ParseMPAConn(b); !errors.Is(err, ErrMPARevision) {
			t.Fatalf("revision %d: %v", rev, err)
		}
	}
	// S in a revision-1 frame is a reserved bit: ignored.
	b := append([]byte(MPAKeyRequest), MPAFlagEnhanced, 1, 0, 0)
	if _, c, _, err := ParseMPAConn(b); err != nil || c.Enhanced {
		t.Fatalf("revision 1 with S: %+v %v", c, err)
	}
}

func FuzzParseMPAConn(f *testing.F) {
	for _, b := range mpaV2Frames() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		fl, c, n, err := ParseMPAConn(b)
		if err != nil {
			return
		}
		if n > len(b) || n != fl.Len() {
			t.Fatalf("length %d of %d", n, len(b))
		}
		out := make([]byte, n)
		fl.Encode(out)
		if !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encoded % x, want % x", out, b[:n])
		}
		if c.Enhanced {
			var v [MPAv2DataLen]byte
			c.V2.Encode(v[:])
			if !bytes.Equal(v[:], fl.PrivateData[:MPAv2DataLen]) || len(c.AppData) != len(fl.PrivateData)-MPAv2DataLen {
				t.Fatalf("enhanced data %+v of % x", c.V2, fl.PrivateData)
			}
		}
	})
}

// replyOf decodes the responder's reply.
func replyOf(t *testing.T, out []byte) (MPAFrameFields, MPAConn) {
	t.Helper()
	f, c, _, err := ParseMPAConn(out)
	if err != nil || !f.Reply {
		t.Fatalf("reply % x: %v", out, err)
	}
	return f, c
}

// TestMPAv2Responder is the responder's answer to siw's requests.
func TestMPAv2Responder(t *testing.T) {
	for _, c := range []struct {
		name     string
		req      []byte
		ird, ord int // responder's configuration
		noCRC    bool
		want     MPAv2Fields
		crc      bool
		adjusted uint64
	}{
		{"siw rping", siwRequest(0x10, 0, 1, 0, 1), 16, 16, false, MPAv2Fields{IRD: 1, ORD: 1}, true, 0},
		{"no CRC either side", siwRequest(0x10, 0, 1, 0, 1), 16, 16, true, MPAv2Fields{IRD: 1, ORD: 1}, false, 0},
		{"siw CRC required", siwRequest(0x50, 0, 1, 0, 1), 16, 16, true, MPAv2Fields{IRD: 1, ORD: 1}, true, 0},
		{"rdma_client 128", siwRequest(0x10, 0, 128, 0, 128), 16, 16, false, MPAv2Fields{IRD: 16, ORD: 16}, true, 1},
		{"IRD/ORD 0", siwRequest(0x10, 0, 0, 0, 0), 16, 16, false, MPAv2Fields{}, true, 1},
		{"IRD/ORD max", siwRequest(0x10, 0x3f, 0xff, 0x3f, 0xff), 4, 8, false, MPAv2Fields{IRD: 4, ORD: 8}, true, 1},
		{"p2p write+read", siwRequest(0x10, 0x80, 1, 0xc0, 1), 16, 16, false, MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, true, 0},
		{"p2p read only", siwRequest(0x10, 0x80, 1, 0x40, 1), 16, 16, false, MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, ReadRTR: true}, true, 0},
		{"p2p send only", siwRequest(0x10, 0xc0, 1, 0, 1), 16, 16, false, MPAv2Fields{IRD: 1, ORD: 1, PeerToPeer: true, WriteRTR: true}, true, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			b := newHost(t, "B", hostOpts{ird: c.ird, ord: c.ord, noCRC: c.noCRC})
			if err := b.qp.Accept([]byte("pd")); err != nil {
				t.Fatal(err)
			}
			b.qp.Receive(c.req)
			f, got := replyOf(t, drain(b.qp))
			if f.Rev != 2 || !got.Enhanced || got.V2 != c.want || got.CRC != c.crc || string(got.AppData) != "pd" || f.Reject {
				t.Fatalf("reply %+v %+v, want %+v CRC %v", f, got, c.want, c.crc)
			}
			n := b.qp.Negotiated()
			if n.IRD != int(c.want.IRD) || n.ORD != int(c.want.ORD) || n.CRC != c.crc || n.PeerToPeer != c.want.PeerToPeer {
				t.Fatalf("negotiated %+v", n)
			}
			if b.qp.Stats().IRDORDAdjusted != c.adjusted {
				t.Fatalf("IRDORDAdjusted %d, want %d", b.qp.Stats().IRDORDAdjusted, c.adjusted)
			}
		})
	}
	t.Run("revision 1 answered in kind", func(t *testing.T) {
		b := newHost(t, "B", hostOpts{})
		_ = b.qp.Accept(nil)
		b.qp.Receive(append([]byte(MPAKeyRequest), 0, 1, 0, 0))
		f, got := replyOf(t, drain(b.qp))
		if f.Rev != 1 || got.Enhanced || !got.CRC {
			t.Fatalf("reply %+v", f)
		}
	})
}

// TestMPAv2IRDORD: revision 2 brings the initiator's ORD down to the
// responder's IRD, so it never overruns it (revision 1 does: the IRD case
// of TestOutstandingReadLimits).
func TestMPAv2IRDORD(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, ord: 4})
	b := newHost(t, "B", hostOpts{ird: 2})
	l := connect(t, a, b, 52)
	if n := a.qp.Negotiated(); n.ORD != 2 || !n.Enhanced {
		t.Fatalf("initiator negotiated %+v", n)
	}
	const sz = 64
	src := b.buf(sz)
	sk := b.reg(src, sz, AccessRemoteRead)
	sink := a.buf(3 * sz)
	kk := a.reg(sink, 3*sz, AccessLocalWrite)
	maxOut := 0
	l.ab.tap = func([]byte) { maxOut = max(maxOut, a.qp.orqN) }
	var want []Completion
	for i := 0; i < 3; i++ {
		a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: uint64(i), RemoteAddr: uint64(src), RKey: sk, NumSGE: 1,
			SGL: [4]SGE{{Addr: uint64(sink) + uint64(i*sz), Length: sz, LKey: kk}}})
		want = append(want, Completion{Opcode: WCRDMARead, WRID: uint64(i), ByteLen: sz})
	}
	l.run()
	wantCompletion(t, a.poll(), want...)
	if maxOut > 2 || b.qp.State() != StateRTS {
		t.Fatalf("%d reads outstanding against IRD 2; responder %v", maxOut, b.qp.State())
	}
}

// TestMPAv2NoCRC: neither side asks for CRC: every FPDU carries a zero CRC
// field and the session works; a corrupted payload is then not detected by
// MPA (that is what CRC is for).
func TestMPAv2NoCRC(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, noCRC: true})
	b := newHost(t, "B", hostOpts{noCRC: true})
	l := connect(t, a, b, 53)
	var crcs []uint32
	l.ab.tap = func(p []byte) {
		for len(p) >= FPDUHeaderLen && len(p) >= FPDU(p).WireLen() {
			crcs = append(crcs, FPDU(p).CRC())
			p = p[FPDU(p).WireLen():]
		}
	}
	dst := b.buf(32)
	b.postRecv(9, SGE{Addr: uint64(dst), Length: 32, LKey: b.reg(dst, 32, AccessLocalWrite)})
	src := a.buf(32)
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: 32, LKey: a.reg(src, 32, 0)}}})
	l.run()
	wantCompletion(t, b.poll(), Completion{Opcode: WCRecv, WRID: 9, ByteLen: 32})
	if a.qp.Negotiated().CRC || b.qp.Negotiated().CRC {
		t.Fatal("CRC negotiated with neither side asking")
	}
	if len(crcs) == 0 {
		t.Fatal("no FPDU seen")
	}
	for _, c := range crcs {
		if c != 0 {
			t.Fatalf("CRC field %#x without CRC", c)
		}
	}
	// One side asking is enough.
	a2 := newHost(t, "A", hostOpts{initiator: true, noCRC: true})
	b2 := newHost(t, "B", hostOpts{})
	connect(t, a2, b2, 54)
	if !a2.qp.Negotiated().CRC || !b2.qp.Negotiated().CRC {
		t.Fatal("CRC not used with the responder asking")
	}
}

// TestMPAv2PeerToPeer: the initiator's first FPDU is the zero-length RDMA
// Write RTR; the responder, which needs it to send, can then send first.
func TestMPAv2PeerToPeer(t *testing.T) {
	a := newHost(t, "A", hostOpts{initiator: true, p2p: true})
	b := newHost(t, "B", hostOpts{})
	l := newLink(t, a, b, 55)
	dst := a.buf(16)
	a.postRecv(7, SGE{Addr: uint64(dst), Length: 16, LKey: a.reg(dst, 16, AccessLocalWrite)})
	_ = b.qp.Accept(nil)
	var first []byte
	l.ab.tap = func(p []byte) {
		if first == nil && b.qp.mpa == mpaDone {
			first = append([]byte(nil), p...)
		}
	}
	_ = a.qp.Connect()
	// The responder posts its Send before any FPDU came: it goes out
	// once the RTR is in; the RTR waits for the initiator's doorbell.
	src := b.buf(16)
	b.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: 16, LKey: b.reg(src, 16, 0)}}})
	l.run()
	if a.qp.State() != StateRTS || a.qp.HasOutput() || b.qp.State() != StateRTR || first != nil {
		t.Fatalf("before the doorbell: initiator %v (output %v), responder %v", a.qp.State(), a.qp.HasOutput(), b.qp.State())
	}
	a.qp.Poll()
	l.run()
	if b.qp.State() != StateRTS || a.qp.Stats().RTRsSent != 1 || b.qp.Stats().RTRsRecv != 1 {
		t.Fatalf("responder %v, RTRs sent %d received %d", b.qp.State(), a.qp.Stats().RTRsSent, b.qp.Stats().RTRsRecv)
	}
	u := FPDU(first).ULPDU()
	h := DDPHeader(u)
	if len(u) != DDPTaggedHeaderLen || !h.Tagged() || h.Opcode() != OpWrite || h.STag() != RTRSTag || h.TO() != 0 || !h.Last() {
		t.Fatalf("first FPDU % x is not the RTR Write", first)
	}
	wantCompletion(t, a.poll(), Completion{Opcode: WCRecv, WRID: 7, ByteLen: 16})
	if n := a.qp.Negotiated(); !n.PeerToPeer || n.RTR != RTRWrite {
		t.Fatalf("initiator negotiated %+v", n)
	}
}

// TestMPAv2ReadRTR: a peer that offers only the Read RTR gets it chosen and
// its zero-length Read Request (source STag 1, never valid) answered by a
// zero-length Read Response.
func TestMPAv2ReadRTR(t *testing.T) {
	b := newHost(t, "B", hostOpts{})
	_ = b.qp.Accept(nil)
	b.qp.Receive(siwRequest(0x50, 0x80, 1, 0x40, 1))
	drain(b.qp)
	var u [DDPUntaggedHeaderLen + ReadRequestLen]byte
	d := DDP{Last: true, Version: DDPVersion, ULPCtrl: RDMAPCtrl(OpReadRequest), QN: QNReadRequest, MSN: 1}
	rr := ReadRequest{SinkSTag: 0, SrcSTag: RTRSTag}
	rr.Encode(u[d.Encode(u[:]):])
	f := make([]byte, FPDULen(len(u)))
	copy(f[FPDUHeaderLen:], u[:])
	SealFPDU(f, len(u))
	b.qp.Receive(f)
	out := drain(b.qp)
	var p FPDUFields
	if _, err := p.Decode(out); err != nil {
		t.Fatalf("% x: %v", out, err)
	}
	h := DDPHeader(p.ULPDU)
	if b.qp.State() != StateRTS || len(p.ULPDU) != DDPTaggedHeaderLen || h.Opcode() != OpReadResponse || h.STag() != 0 || !h.Last() {
		t.Fatalf("state %v, answer % x", b.qp.State(), out)
	}
}

// TestMPAv2BadReply: a reply granting less than the initiator needs, or
// no RTR it offered, ends the connection with the RFC 6581 Terminate.
func TestMPAv2BadReply(t *testing.T) {
	for _, c := range []struct {
		name string
		o    hostOpts
		v2   []byte
		want TermError
	}{
		{"responder ORD above our IRD", hostOpts{initiator: true, ird: 2}, []byte{0, 1, 0, 4}, TermError{LayerLLP, ETypeMPA, CodeMPAInsufficientIRD}},
		{"no RTR picked", hostOpts{initiator: true, p2p: true}, []byte{0x80, 1, 0, 1}, TermError{LayerLLP, ETypeMPA, CodeMPANoMatchingRTR}},
		{"read RTR we did not offer", hostOpts{initiator: true, p2p: true}, []byte{0x80, 1, 0x40, 1}, TermError{LayerLLP, ETypeMPA, CodeMPANoMatchingRTR}},
	} {
		t.Run(c.name, func(t *testing.T) {
			a := newHost(t, "A", c.o)
			_ = a.qp.Connect()
			drain(a.qp)
			rep := append([]byte(MPAKeyReply), MPAFlagCRC|MPAFlagEnhanced, 2, 0, 4)
			a.qp.Receive(append(rep, c.v2...))
			out := drain(a.qp)
			var p FPDUFields
			if _, err := p.Decode(out); err != nil {
				t.Fatalf("no Terminate: % x %v", out, err)
			}
			var term Terminate
			if _, err := term.Decode(p.ULPDU[DDPUntaggedHeaderLen:]); err != nil || term.TermError != c.want {
				t.Fatalf("Terminate %+v %v, want %v", term, err, c.want)
			}
			if a.qp.State() != StateError || a.qp.Stats().MPAFailures != 1 || a.qp.Err() == nil || !a.qp.WantClose() {
				t.Fatalf("state %v stats %+v err %v", a.qp.State(), a.qp.Stats(), a.qp.Err())
			}
		})
	}
	// A rejected request is counted too, and the rest of the QP table is
	// not involved: one QP's failure is its own.
	b := newHost(t, "B", hostOpts{})
	b.qp.Receive(append([]byte(MPAKeyRequest), 0, 7, 0, 0))
	if b.qp.Stats().MPAFailures != 1 || !errors.Is(b.qp.Err(), ErrMPARevision) {
		t.Fatalf("stats %+v err %v", b.qp.Stats(), b.qp.Err())
	}
}
