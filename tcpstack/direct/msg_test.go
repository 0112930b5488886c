package direct

import (
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

const testMaxInline = 64

// validMsgs is one valid message of each type (the fuzz seeds).
func validMsgs() [][]byte {
	var out [][]byte
	for _, v := range wireMsgs {
		out = append(out, v.enc())
	}
	return out
}

// wireMsg is one control message as docs/direct.md gives it byte by byte.
type wireMsg struct {
	name    string
	m       Msg
	payload []byte
	want    string // the header's 32 bytes in hex, as the doc's examples
}

func (w wireMsg) enc() []byte {
	b := make([]byte, HeaderSize+len(w.payload))
	w.m.Encode(b)
	copy(b[HeaderSize:], w.payload)
	return b
}

// wireMsgs is every control message of the session protocol with the
// bytes docs/direct.md's examples show ("Control messages, byte by byte").
var wireMsgs = []wireMsg{
	{"DATA", Msg{Type: TypeData, Credits: 3, Len: 5}, []byte("hello"),
		"02 01 0000 03000000 00000000 05000000 00000000 00000000 0000000000000000"},
	{"DATA full", Msg{Type: TypeData, Len: testMaxInline}, bytes.Repeat([]byte{0xAB}, testMaxInline),
		"02 01 0000 00000000 00000000 40000000 00000000 00000000 0000000000000000"},
	{"DATA urgent", Msg{Type: TypeData, Flags: FlagUrgent, Len: 1}, []byte("!"),
		"02 01 0100 00000000 00000000 01000000 00000000 00000000 0000000000000000"},
	{"SRC_AVAIL read", Msg{Type: TypeSrcAvail, Credits: 1, Total: 0x40000, Len: 4, ID: 7, STag: 0x12345642, TO: 0x10000004}, []byte("abcd"),
		"02 02 0000 01000000 00000400 04000000 07000000 42563412 0400001000000000"},
	{"SRC_AVAIL write", Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 0x10000, Len: 2, ID: 8}, []byte("ab"),
		"02 02 0100 00000000 00000100 02000000 08000000 00000000 0000000000000000"},
	{"SRC_AVAIL zero copy", Msg{Type: TypeSrcAvail, Total: 0x10000, ID: 9, STag: 0xABCDEF01, TO: 0x2000}, nil,
		"02 02 0000 00000000 00000100 00000000 09000000 01EFCDAB 0020000000000000"},
	{"RD_DONE", Msg{Type: TypeRdDone, Len: 0x3fffc, ID: 7}, nil,
		"02 03 0000 00000000 00000000 fcff0300 07000000 00000000 0000000000000000"},
	{"SINK_AVAIL", Msg{Type: TypeSinkAvail, Len: 0xfffe, ID: 8, STag: 0xABCDEF01, TO: 0x2000}, nil,
		"02 04 0000 00000000 00000000 feff0000 08000000 01EFCDAB 0020000000000000"},
	{"WR_DONE", Msg{Type: TypeWrDone, Credits: 30, Len: 0xfffe, ID: 8}, nil,
		"02 05 0000 1e000000 00000000 feff0000 08000000 00000000 0000000000000000"},
	{"CREDIT", Msg{Type: TypeCredit, Credits: 16}, nil,
		"02 06 0000 10000000 00000000 00000000 00000000 00000000 0000000000000000"},
	{"SINK_WAIT", Msg{Type: TypeSinkWait, Len: 1 << 20, ID: 3}, nil,
		"02 08 0000 00000000 00000000 00001000 03000000 00000000 0000000000000000"},
	{"FIN", Msg{Type: TypeFin}, nil,
		"02 07 0000 00000000 00000000 00000000 00000000 00000000 0000000000000000"},
}

// TestMsgBytes checks every control message's bytes against the examples
// of docs/direct.md, and that each decodes back to its fields and payload.
func TestMsgBytes(t *testing.T) {
	for _, w := range wireMsgs {
		want, err := hex.DecodeString(strings.ReplaceAll(w.want, " ", ""))
		if err != nil || len(want) != HeaderSize {
			t.Fatalf("%s: bad expectation", w.name)
		}
		b := w.enc()
		if !bytes.Equal(b[:HeaderSize], want) {
			t.Errorf("%s: encoded\n% x\nwant\n% x", w.name, b[:HeaderSize], want)
		}
		var back Msg
		p, err := back.Decode(b, testMaxInline)
		if err != nil || back != w.m || !bytes.Equal(p, w.payload) {
			t.Errorf("%s: decoded %+v %q %v", w.name, back, p, err)
		}
	}
	// The doc's table of examples must be the one tested here.
	doc, err := os.ReadFile("../../docs/direct.md")
	if err != nil {
		t.Skipf("docs/direct.md: %v", err)
	}
	for _, w := range wireMsgs {
		if !strings.Contains(string(doc), "`"+w.want+"`") {
			t.Errorf("docs/direct.md has no example `%s` (%s)", w.want, w.name)
		}
	}
}

// TestMsgLayout pins every offset of the header (docs/direct.md).
func TestMsgLayout(t *testing.T) {
	m := Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Credits: 0x04030201, Total: 0x08070605, Len: 0, ID: 0x100F0E0D}
	b := make([]byte, HeaderSize)
	m.Encode(b)
	want := []byte{MsgVersion, byte(TypeSrcAvail), 1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0,
		0xD, 0xE, 0xF, 0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", b, want)
	}
	m = Msg{Type: TypeSinkAvail, Len: 0x0C0B0A09, ID: 0x100F0E0D, STag: 0x14131211, TO: 0x1C1B1A1918171615}
	m.Encode(b)
	want = []byte{MsgVersion, byte(TypeSinkAvail), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, 0xA, 0xB, 0xC,
		0xD, 0xE, 0xF, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1A, 0x1B, 0x1C}
	if !bytes.Equal(b, want) {
		t.Fatalf("encoded\n% x\nwant\n% x", b, want)
	}
	h := Header(b)
	if h.Version() != MsgVersion || h.Type() != TypeSinkAvail || h.Flags() != 0 || h.Credits() != 0 || h.Total() != 0 ||
		h.Len() != m.Len || h.ID() != m.ID || h.STag() != m.STag || h.TO() != m.TO {
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
		"short":                  make([]byte, HeaderSize-1),
		"version":                func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[0] = 1; return b }(),
		"flags":                  func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[msgOffFlags] = 1; return b }(),
		"unknown src flag":       enc(Msg{Type: TypeSrcAvail, Flags: 2, Total: 9, ID: 1, STag: 1}, nil),
		"total on fin":           func() []byte { b := enc(Msg{Type: TypeFin}, nil); b[msgOffTotal+3] = 1; return b }(),
		"total on data":          enc(Msg{Type: TypeData, Total: 2, Len: 1}, []byte("a")),
		"unknown type":           enc(Msg{Type: 99}, nil),
		"type zero":              enc(Msg{}, nil),
		"empty data":             enc(Msg{Type: TypeData}, nil),
		"data len mismatch":      enc(Msg{Type: TypeData, Len: 4}, []byte("abc")),
		"data too long":          enc(Msg{Type: TypeData, Len: testMaxInline + 1}, make([]byte, testMaxInline+1)),
		"data with a region":     enc(Msg{Type: TypeData, Len: 1, STag: 5}, []byte("a")),
		"urgent of two bytes":    enc(Msg{Type: TypeData, Flags: FlagUrgent, Len: 2}, []byte("ab")),
		"urgent flag on fin":     enc(Msg{Type: TypeFin, Flags: FlagUrgent}, nil),
		"src nothing for rdma":   enc(Msg{Type: TypeSrcAvail, Total: 3, Len: 3, ID: 1, STag: 1}, []byte("abc")),
		"src total below len":    enc(Msg{Type: TypeSrcAvail, Total: 2, Len: 3, ID: 1, STag: 1}, []byte("abc")),
		"src without id":         enc(Msg{Type: TypeSrcAvail, Total: 9, STag: 1}, nil),
		"src without stag":       enc(Msg{Type: TypeSrcAvail, Total: 9, ID: 1}, nil),
		"wrapping src":           enc(Msg{Type: TypeSrcAvail, Total: 2, ID: 1, STag: 1, TO: ^uint64(0)}, nil),
		"src len mismatch":       enc(Msg{Type: TypeSrcAvail, Total: 9, Len: 2, ID: 1, STag: 1}, []byte("x")),
		"src first too long":     enc(Msg{Type: TypeSrcAvail, Total: 1 << 20, Len: testMaxInline + 1, ID: 1, STag: 1}, make([]byte, testMaxInline+1)),
		"sink request w/ region": enc(Msg{Type: TypeSrcAvail, Flags: FlagSinkReq, Total: 9, ID: 1, STag: 1}, nil),
		"empty sink":             enc(Msg{Type: TypeSinkAvail, ID: 1, STag: 1}, nil),
		"sink without stag":      enc(Msg{Type: TypeSinkAvail, Len: 5, ID: 1}, nil),
		"sink without id":        enc(Msg{Type: TypeSinkAvail, Len: 5, STag: 1}, nil),
		"wrapping sink":          enc(Msg{Type: TypeSinkAvail, Len: 2, ID: 1, STag: 1, TO: ^uint64(0)}, nil),
		"sink with payload":      enc(Msg{Type: TypeSinkAvail, Len: 2, ID: 1, STag: 1}, []byte("x")),
		"empty rd done":          enc(Msg{Type: TypeRdDone, ID: 1}, nil),
		"rd done without id":     enc(Msg{Type: TypeRdDone, Len: 1}, nil),
		"wr done with region":    enc(Msg{Type: TypeWrDone, ID: 1, Len: 1, STag: 3}, nil),
		"credit with len":        enc(Msg{Type: TypeCredit, Len: 1}, nil),
		"fin with id":            enc(Msg{Type: TypeFin, ID: 1}, nil),
		"empty sink wait":        enc(Msg{Type: TypeSinkWait}, nil),
		"sink wait with region":  enc(Msg{Type: TypeSinkWait, Len: 5, STag: 1}, nil),
		"sink wait with a total": enc(Msg{Type: TypeSinkWait, Len: 5, Total: 1}, nil),
		"fin with payload":       enc(Msg{Type: TypeFin}, []byte("x")),
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
		if len(payload) != len(data)-HeaderSize || (m.Type != TypeData && m.Type != TypeSrcAvail && len(payload) > 0) {
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
