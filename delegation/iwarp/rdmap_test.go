package iwarp

import (
	"bytes"
	"errors"
	"reflect"
	"testing"
)

func TestRDMAPCtrl(t *testing.T) {
	for op := OpWrite; op <= OpAtomicResponse; op++ {
		c := RDMAPCtrl(op)
		if c>>6 != RDMAPVersion || c&RDMAPMaskRsvd != 0 || Opcode(c&RDMAPMaskOpcode) != op {
			t.Fatalf("%v: ctrl %#x", op, c)
		}
		if op.String() == "" {
			t.Fatal("name")
		}
	}
	if OpSendSEInv.QN() != QNSend || OpReadRequest.QN() != QNReadRequest || OpTerminate.QN() != QNTerminate {
		t.Fatal("queue numbers")
	}
	if !OpSendSE.Solicited() || OpSend.Solicited() || !OpImmediateSE.Solicited() || !OpSendInv.Invalidates() {
		t.Fatal("predicates")
	}
}

func TestReadRequestRoundTrip(t *testing.T) {
	r := ReadRequest{SinkSTag: 0x11223344, SinkTO: 0x5566778899AABBCC, Size: 65536, SrcSTag: 0xDDEEFF00, SrcTO: 1}
	b := make([]byte, ReadRequestLen)
	if r.Encode(b) != ReadRequestLen {
		t.Fatal("length")
	}
	want := []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0x99, 0xAA, 0xBB, 0xCC, 0, 1, 0, 0,
		0xDD, 0xEE, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 1}
	if !bytes.Equal(b, want) {
		t.Fatalf("bytes % x", b)
	}
	var g ReadRequest
	if _, err := g.Decode(b); err != nil || g != r {
		t.Fatalf("round trip %v %+v", err, g)
	}
	for i := 0; i < len(b); i++ {
		if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
			t.Fatalf("prefix %d: %v", i, err)
		}
	}
}

func terminateSamples() []Terminate {
	tagged := make([]byte, 14)
	(&DDP{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpWrite), STag: 0x100, TO: 8}).Encode(tagged)
	untagged := make([]byte, 18)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpReadRequest), QN: 1, MSN: 3}).Encode(untagged)
	rr := make([]byte, ReadRequestLen)
	(&ReadRequest{SinkSTag: 1, Size: 2, SrcSTag: 3}).Encode(rr)
	return []Terminate{
		{TermError: TermError{LayerLLP, ETypeMPA, CodeMPACRC}},
		{TermError: TermError{LayerDDP, ETypeTaggedBuffer, CodeTBaseBounds}, M: true, D: true, SegLen: 40, DDPHeader: tagged},
		{TermError: TermError{LayerRDMAP, ETypeRemoteProtection, CodeAccessRights}, M: true, D: true, R: true, SegLen: 46,
			DDPHeader: untagged, RDMAHdr: rr},
		{TermError: TermError{LayerRDMAP, ETypeRemoteOperation, CodeUnspecified}, M: true, SegLen: 9, Reserved: 5},
	}
}

func TestTerminateRoundTrip(t *testing.T) {
	for _, tm := range terminateSamples() {
		b := make([]byte, tm.Len())
		if tm.Encode(b) != len(b) {
			t.Fatal("length")
		}
		var g Terminate
		n, err := g.Decode(b)
		if err != nil || n != len(b) || !reflect.DeepEqual(g, tm) {
			t.Fatalf("round trip %d %v: %+v vs %+v", n, err, g, tm)
		}
		h := TerminateHeader(b)
		if h.Error() != tm.TermError || h.M() != tm.M || h.D() != tm.D || h.R() != tm.R {
			t.Fatal("accessors")
		}
		for i := 0; i < len(b); i++ {
			if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d/%d: %v", i, len(b), err)
			}
		}
	}
	// Layer/type/code bytes as RFC 5040 draws them.
	b := make([]byte, 6)
	(&Terminate{TermError: TermError{LayerDDP, ETypeUntaggedBuffer, CodeUNoBuffer}, M: true, SegLen: 0x1234}).Encode(b)
	if !bytes.Equal(b, []byte{0x12, 0x02, 0x80, 0x00, 0x12, 0x34}) {
		t.Fatalf("terminate control % x", b)
	}
}

func TestAtomicRoundTrip(t *testing.T) {
	a := AtomicRequest{Op: AtomicCmpSwap, ReqID: 9, STag: 0x1234, TO: 0x1000, Data: 1, Mask: 2, Compare: 3, CompareMask: 4}
	b := make([]byte, AtomicRequestLen)
	a.Encode(b)
	var g AtomicRequest
	if _, err := g.Decode(b); err != nil || g != a {
		t.Fatalf("%v %+v", err, g)
	}
	if AtomicRequestHeader(b).Op() != AtomicCmpSwap || AtomicRequestHeader(b).TO() != 0x1000 {
		t.Fatal("accessors")
	}
	for i := 0; i < len(b); i++ {
		if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
			t.Fatal("prefix")
		}
	}
	r := AtomicResponse{ReqID: 9, Value: 0xFFFF}
	b = make([]byte, AtomicResponseLen)
	r.Encode(b)
	var gr AtomicResponse
	if _, err := gr.Decode(b); err != nil || gr != r {
		t.Fatal("response round trip")
	}
	for i := 0; i < len(b); i++ {
		if _, err := gr.Decode(b[:i]); !errors.Is(err, ErrShort) {
			t.Fatal("prefix")
		}
	}
}

func FuzzTerminate(f *testing.F) {
	for _, tm := range terminateSamples() {
		b := make([]byte, tm.Len())
		tm.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var tm Terminate
		n, err := tm.Decode(b)
		if err != nil {
			return
		}
		rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x Terminate; return x.Decode(p) })
		out := make([]byte, tm.Len())
		if tm.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs: % x vs % x", out, b[:n])
		}
	})
}

func FuzzReadRequest(f *testing.F) {
	b := make([]byte, ReadRequestLen)
	(&ReadRequest{SinkSTag: 1, SinkTO: 2, Size: 3, SrcSTag: 4, SrcTO: 5}).Encode(b)
	f.Add(b)
	a := make([]byte, AtomicRequestLen)
	(&AtomicRequest{Op: AtomicFetchAdd, Data: 1}).Encode(a)
	f.Add(a)
	f.Fuzz(func(t *testing.T, b []byte) {
		var r ReadRequest
		if n, err := r.Decode(b); err == nil {
			rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x ReadRequest; return x.Decode(p) })
			out := make([]byte, n)
			r.Encode(out)
			if !bytes.Equal(out, b[:n]) {
				t.Fatal("read request re-encode differs")
			}
		}
		var a AtomicRequest
		if n, err := a.Decode(b); err == nil {
			out := make([]byte, n)
			a.Encode(out)
			if !bytes.Equal(out, b[:n]) {
				t.Fatal("atomic request re-encode differs")
			}
		}
	})
}
