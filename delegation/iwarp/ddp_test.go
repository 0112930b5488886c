package iwarp

import (
	"bytes"
	"errors"
	"testing"
)

var ddpSamples = []DDP{
	{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpWrite), STag: 0x12345678, TO: 0x1122334455667788},
	{Tagged: true, Version: 1, Reserved: 0xF, ULPCtrl: RDMAPCtrl(OpReadResponse), STag: 1, TO: 2},
	{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSendInv), ULP32: 0xCAFEBABE, QN: 0, MSN: 1, MO: 0},
	{Version: 3, ULPCtrl: 0xFF, QN: 0xFFFFFFFF, MSN: 0x80000000, MO: 12345},
}

func TestDDPRoundTrip(t *testing.T) {
	for _, d := range ddpSamples {
		b := make([]byte, d.Len())
		if d.Encode(b) != len(b) {
			t.Fatal("Encode length")
		}
		var g DDP
		n, err := g.Decode(b)
		if err != nil || n != len(b) || g != d {
			t.Fatalf("round trip: %v %v, got %v want %v", n, err, &g, &d)
		}
		h := DDPHeader(b)
		if h.Tagged() != d.Tagged || h.Last() != d.Last || h.Version() != d.Version || h.ULPCtrl() != d.ULPCtrl ||
			h.HeaderLen() != d.Len() {
			t.Fatal("accessors disagree")
		}
		for i := 0; i < len(b); i++ {
			if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix %d: %v", i, err)
			}
		}
	}
}

func TestDDPBytes(t *testing.T) {
	d := DDP{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpWrite), STag: 0x01020304, TO: 0x05060708090A0B0C}
	b := make([]byte, 14)
	d.Encode(b)
	want := []byte{0xC1, 0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}
	if !bytes.Equal(b, want) {
		t.Fatalf("tagged header % x, want % x", b, want)
	}
	u := DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSend), QN: 0, MSN: 1, MO: 0x100}
	b = make([]byte, 18)
	u.Encode(b)
	want = []byte{0x41, 0x43, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 1, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("untagged header % x, want % x", b, want)
	}
}

func FuzzDDP(f *testing.F) {
	for _, d := range ddpSamples {
		b := make([]byte, d.Len())
		d.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var d DDP
		n, err := d.Decode(b)
		if err != nil {
			return
		}
		rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x DDP; return x.Decode(p) })
		out := make([]byte, d.Len())
		if d.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs: % x vs % x", out, b[:n])
		}
	})
}
