package rings

import (
	"bytes"
	"errors"
	"testing"
)

func TestSendWRRoundTrip(t *testing.T) {
	w := SendWR{Opcode: WRRDMAWriteImm, Flags: WRSignaled | WRSolicited, WRID: 0x1122334455667788, RemoteAddr: 0xAABB,
		RKey: 0x1234, InvSTag: 0x5678, ImmData: 0xDEADBEEF, CompareAdd: 1, Swap: 2, NumSGE: 4}
	for i := range w.SGL {
		w.SGL[i] = SGE{Addr: uint64(i) << 40, Length: uint32(i + 1), LKey: uint32(0x100 * (i + 1))}
	}
	e := make([]byte, SQEntrySize)
	e[0] = 0xA5 // the ring's control byte is left alone
	w.Encode(e)
	if e[0] != 0xA5 {
		t.Fatal("Encode wrote the control word")
	}
	var g SendWR
	if err := g.Decode(e); err != nil || g != w {
		t.Fatalf("round trip: %v\n%+v\n%+v", err, g, w)
	}
	if SQEntry(e).WRID() != w.WRID || SQEntry(e).Opcode() != w.Opcode || SQEntry(e).ImmData() != w.ImmData {
		t.Fatal("accessors")
	}
	if e[SQOffOpcode] != 1 || e[SQOffFlags] != 6 || e[SQOffNumSGE] != 4 || e[SQOffWRID] != 0x88 || e[SQOffSGE+SGEOffLen] != 1 {
		t.Fatalf("layout: % x", e[:0x48])
	}
	in := SendWR{Opcode: WRSend, Flags: WRInline, InlineLen: 5}
	copy(in.InlineData[:], "hello")
	in.Encode(e)
	if err := g.Decode(e); err != nil || g != in || !bytes.Equal(e[SQOffSGE:SQOffSGE+5], []byte("hello")) {
		t.Fatal("inline round trip")
	}
	if err := g.Decode(e[:SQEntrySize-1]); !errors.Is(err, ErrShortWR) {
		t.Fatal("short SQ entry accepted")
	}
}

func TestRecvWRAndCompletionRoundTrip(t *testing.T) {
	r := RecvWR{WRID: 77, NumSGE: 2, SGL: [3]SGE{{1, 2, 3}, {4, 5, 6}}}
	e := make([]byte, RQEntrySize)
	r.Encode(e)
	var g RecvWR
	if err := g.Decode(e); err != nil || g != r || RQEntry(e).NumSGE() != 2 || e[RQOffSGE+SGESize] != 4 {
		t.Fatal("RecvWR round trip")
	}
	if err := g.Decode(e[:10]); !errors.Is(err, ErrShortWR) {
		t.Fatal("short RQ entry accepted")
	}
	c := Completion{Opcode: WCRecvRDMAWithImm, Status: WCRemAccessErr, Flags: WCWithImm, WRID: 5, ByteLen: 6, QPN: 7, ImmData: 8}
	e = make([]byte, CQEntrySize)
	c.Encode(e)
	want := []byte{0, 0, 0, 0, 129, 10, 2, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(e, want) {
		t.Fatalf("CQE bytes % x", e)
	}
	var gc Completion
	if err := gc.Decode(e); err != nil || gc != c {
		t.Fatal("Completion round trip")
	}
	if err := gc.Decode(e[:31]); !errors.Is(err, ErrShortWR) {
		t.Fatal("short CQ entry accepted")
	}
	if WCWRFlushErr.String() != "WR_FLUSH_ERR" || WRRDMARead.String() != "RDMA_READ" || WCRecv.String() != "RECV" {
		t.Fatal("names")
	}
}

func FuzzSendWR(f *testing.F) {
	e := make([]byte, SQEntrySize)
	(&SendWR{Opcode: WRSend, Flags: WRSignaled, NumSGE: 1, SGL: [4]SGE{{1, 2, 3}}}).Encode(e)
	f.Add(e)
	f.Fuzz(func(t *testing.T, b []byte) {
		var w SendWR
		if w.Decode(b) != nil {
			return
		}
		for n := 0; n < SQEntrySize; n++ { // every truncated prefix is rejected
			var p SendWR
			if p.Decode(b[:n]) == nil {
				t.Fatalf("Decode accepted a %d-byte prefix", n)
			}
		}
		out := make([]byte, SQEntrySize)
		copy(out[:4], b[:4])
		w.Encode(out)
		var w2 SendWR
		_ = w2.Decode(out)
		if w2 != w {
			t.Fatal("decode(encode(decode)) differs")
		}
	})
}
