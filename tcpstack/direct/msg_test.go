package direct

import (
	"bytes"
	"errors"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

const testMaxInline = 64

// validMsgs is one valid message of each type (the fuzz seeds).
func validMsgs() [][]byte {
	var out [][]byte
	add := func(m Msg, payload []byte) {
		b := make([]byte, HeaderSize+len(payload))
		m.Encode(b)
		copy(b[HeaderSize:], payload)
		out = append(out, b)
	}
	add(Msg{Type: TypeData, Credits: 3, UAcks: 1, Len: 5}, []byte("hello"))
	add(Msg{Type: TypeData, Len: testMaxInline}, bytes.Repeat([]byte{0xAB}, testMaxInline))
	add(Msg{Type: TypeSrcAvail, Credits: 1, Len: 1 << 18, ID: 7, STag: 0x123456_42, TO: 0x1000_0000}, nil)
	add(Msg{Type: TypeRdDone, Len: 1 << 18, ID: 7}, nil)
	add(Msg{Type: TypeSinkAvail, Len: 1 << 18, ID: 9, STag: 0xABCDEF_01, TO: 0x2000}, nil)
	add(Msg{Type: TypeWrDone, Credits: 30, Len: 100, ID: 9}, nil)
	add(Msg{Type: TypeCredit, Credits: 16, UAcks: 2}, nil)
	add(Msg{Type: TypeFin}, nil)
	return out
}

// TestMsgLayout pins every offset of the header (docs/direct.md).
func TestMsgLayout(t *testing.T) {
	m := Msg{Type: TypeSrcAvail, Credits: 0x04030201, UAcks: 0x0605, Len: 0x0C0B0A09, ID: 0x100F0E0D,
		STag: 0x14131211, TO: 0x1C1B1A1918171615}
	b := make([]byte, HeaderSize)
	m.Encode(b)
	want := []byte{MsgVersion, byte(TypeSrcAvail), 0, 0, 1, 2, 3, 4, 5, 6, 0, 0, 9, 0xA, 0xB, 0xC,
		0xD, 0xE, 0xF, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", b, want)
	}
	h := Header(b)
	if h.Version() != MsgVersion || h.Type() != TypeSrcAvail || h.Flags() != 0 || h.Credits() != m.Credits ||
		h.UAcks() != m.UAcks || h.Len() != m.Len || h.ID() != m.ID || h.STag() != m.STag || h.TO() != m.TO {
		t.Fatal("accessors disagree with the encoding")
	}
	var back Msg
	if _, err := back.Decode(b, testMaxInline); err != nil || back != m {
		t.Fatalf("decode: %+v %v", back, err)
	}
}

// TestMsgRejects: each rule of Decode, broken once.
func TestMsgRejects(t *testing.T) {
	enc := func(m Msg, payload []byte) []byte {
		b := make([]byte, HeaderSize+len(payload))
		m.Encode(b)
		copy(b[HeaderSize:], payload)
		return b
	}
	bad := map[string][]byte{
		"short":               make([]byte, HeaderSize-1),
		"version":             func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[0] = 2; return b }(),
		"flags":               func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[msgOffFlags] = 1; return b }(),
		"reserved":            func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[msgOffRsvd+1] = 1; return b }(),
		"unknown type":        enc(Msg{Type: 99}, nil),
		"type zero":           enc(Msg{}, nil),
		"empty data":          enc(Msg{Type: TypeData}, nil),
		"data len mismatch":   enc(Msg{Type: TypeData, Len: 4}, []byte("abc")),
		"data too long":       enc(Msg{Type: TypeData, Len: testMaxInline + 1}, make([]byte, testMaxInline+1)),
		"data with a region":  enc(Msg{Type: TypeData, Len: 1, STag: 5}, []byte("a")),
		"empty src":           enc(Msg{Type: TypeSrcAvail, STag: 1}, nil),
		"wrapping src":        enc(Msg{Type: TypeSrcAvail, Len: 2, STag: 1, TO: ^uint64(0)}, nil),
		"src with payload":    enc(Msg{Type: TypeSrcAvail, Len: 2, STag: 1}, []byte("x")),
		"empty rd done":       enc(Msg{Type: TypeRdDone, ID: 1}, nil),
		"wr done with region": enc(Msg{Type: TypeWrDone, ID: 1, Len: 1, STag: 3}, nil),
		"credit with len":     enc(Msg{Type: TypeCredit, Len: 1}, nil),
		"fin with id":         enc(Msg{Type: TypeFin, ID: 1}, nil),
		"fin with payload":    enc(Msg{Type: TypeFin}, []byte("x")),
	}
	for name, b := range bad {
		var m Msg
		if _, err := m.Decode(b, testMaxInline); !errors.Is(err, ErrBadMessage) {
			t.Errorf("%s: Decode = %v, want ErrBadMessage", name, err)
		}
	}
}

// FuzzMsg: whatever decodes re-encodes to the same header bytes and fields,
// and every truncated prefix of it is rejected.
func FuzzMsg(f *testing.F) {
	for _, b := range validMsgs() {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var m Msg
		payload, err := m.Decode(data, testMaxInline)
		if err != nil {
			if !errors.Is(err, ErrBadMessage) {
				t.Fatalf("error %v does not wrap ErrBadMessage", err)
			}
			return
		}
		if len(payload) != len(data)-HeaderSize || (m.Type == TypeData) != (len(payload) > 0) {
			t.Fatalf("payload of %d bytes for %v from %d", len(payload), m.Type, len(data))
		}
		b := make([]byte, HeaderSize+4)
		m.Encode(b)
		if !bytes.Equal(b[:HeaderSize], data[:HeaderSize]) || !bytes.Equal(b[HeaderSize:], make([]byte, 4)) {
			t.Fatalf("re-encoded\n% x\nfrom\n% x", b[:HeaderSize], data[:HeaderSize])
		}
		for n := 0; n < len(data); n++ {
			var w Msg
			if _, err := w.Decode(data[:n], testMaxInline); err == nil {
				t.Fatalf("a %d-byte prefix of a %d-byte %v decoded", n, len(data), m.Type)
			}
		}
	})
}

// TestWriteFuzzCorpus writes the checked-in seed corpora (with
// -update-corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	fuzzcorpus.Updating(t)
	fuzzcorpus.Write(t, "FuzzMsg", validMsgs())
	fuzzcorpus.Write(t, "FuzzHello", validHellos())
}
