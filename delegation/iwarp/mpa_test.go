package iwarp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"reflect"
	"testing"
)

func TestMPAFrameRoundTrip(t *testing.T) {
	for _, f := range []MPAFrameFields{
		{CRC: true, Rev: 1},
		{Reply: true, CRC: true, Rev: 1, PrivateData: []byte("hello")},
		{Reply: true, Reject: true, Markers: true, Enhanced: true, Res: 0x05, Rev: 2, PrivateData: bytes.Repeat([]byte{7}, MPAMaxPrivateData)},
	} {
		b := make([]byte, f.Len())
		if n := f.Encode(b); n != len(b) {
			t.Fatalf("Encode returned %d, want %d", n, len(b))
		}
		var g MPAFrameFields
		n, err := g.Decode(b)
		if err != nil || n != len(b) {
			t.Fatalf("Decode: %d, %v", n, err)
		}
		if len(g.PrivateData) == 0 {
			g.PrivateData = nil
		}
		if len(f.PrivateData) == 0 {
			f.PrivateData = nil
		}
		if !reflect.DeepEqual(f, g) {
			t.Fatalf("round trip: got %+v, want %+v", g, f)
		}
		fr := MPAFrame(b)
		if fr.IsReply() != f.Reply || fr.Reject() != f.Reject || fr.Markers() != f.Markers || fr.CRC() != f.CRC ||
			fr.Rev() != f.Rev || int(fr.PrivateDataLen()) != len(f.PrivateData) {
			t.Fatal("accessors disagree with fields")
		}
		for i := 0; i < len(b); i++ {
			if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("prefix of %d/%d bytes: %v", i, len(b), err)
			}
		}
	}
}

func TestMPAFrameBytes(t *testing.T) {
	f := MPAFrameFields{CRC: true, Rev: 1, PrivateData: []byte{0xAB}}
	b := make([]byte, f.Len())
	f.Encode(b)
	want := append([]byte("MPA ID Req Frame"), 0x40, 0x01, 0x00, 0x01, 0xAB)
	if !bytes.Equal(b, want) {
		t.Fatalf("request bytes % x, want % x", b, want)
	}
}

func TestMPAFrameRejects(t *testing.T) {
	var g MPAFrameFields
	b := append([]byte("MPA ID Xxx Frame"), 0x40, 1, 0, 0)
	if _, err := g.Decode(b); !errors.Is(err, ErrBadKey) {
		t.Fatalf("bad key: %v", err)
	}
	b = append([]byte(MPAKeyRequest), 0x40, 1, 0x02, 0x01)
	if _, err := g.Decode(b); !errors.Is(err, ErrBadLength) {
		t.Fatalf("513 bytes of private data: %v", err)
	}
}

func TestCRC32CVector(t *testing.T) {
	// RFC 3720 B.4: 32 bytes of zeros.
	if got := CRC32C(make([]byte, 32)); got != 0x8a9136aa {
		t.Fatalf("CRC32C(zeros) = %#x", got)
	}
	if crc32.Checksum([]byte("123456789"), castagnoli) != 0xe3069283 {
		t.Fatal("check value")
	}
}

func TestFPDURoundTrip(t *testing.T) {
	for n := 0; n < 40; n++ {
		u := make([]byte, n)
		fill(u, byte(n))
		p := FPDUFields{ULPDU: u}
		b := make([]byte, p.Len())
		if p.Encode(b) != len(b) || len(b)%4 != 0 || len(b) != FPDULen(n) {
			t.Fatalf("n=%d: FPDU of %d bytes", n, len(b))
		}
		if int(binary.BigEndian.Uint16(b)) != n {
			t.Fatal("length field")
		}
		// The CRC is little-endian on the wire.
		if binary.LittleEndian.Uint32(b[len(b)-4:]) != CRC32C(b[:len(b)-4]) {
			t.Fatal("CRC byte order")
		}
		var g FPDUFields
		k, err := g.Decode(b)
		if err != nil || k != len(b) || !bytes.Equal(g.ULPDU, u) {
			t.Fatalf("n=%d: Decode %d %v", n, k, err)
		}
		for i := 0; i < len(b); i++ {
			if _, err := g.Decode(b[:i]); !errors.Is(err, ErrShort) {
				t.Fatalf("n=%d prefix %d: %v", n, i, err)
			}
		}
		for i := range b {
			c := bytes.Clone(b)
			c[i] ^= 0x20
			if _, err := g.Decode(c); err == nil && i >= 2 {
				t.Fatalf("n=%d: flipped byte %d not detected", n, i)
			}
		}
	}
}

func TestMULPDU(t *testing.T) {
	for mss := 6; mss < 70000; mss++ {
		m := MULPDU(mss)
		if m > 0 && FPDULen(m) > mss {
			t.Fatalf("mss %d: MULPDU %d gives FPDU %d", mss, m, FPDULen(m))
		}
		if m < MaxULPDU && FPDULen(m+1) <= mss && FPDULen(m+1)%4 == 0 && m+1 <= MaxULPDU {
			t.Fatalf("mss %d: MULPDU %d not maximal", mss, m)
		}
	}
	if MULPDU(1460) != 1454 {
		t.Fatalf("MULPDU(1460) = %d", MULPDU(1460))
	}
	if FPDULen(MaxULPDU) != MaxFPDULen {
		t.Fatal("MaxFPDULen")
	}
}

func FuzzMPAFrame(f *testing.F) {
	for _, m := range []MPAFrameFields{{CRC: true, Rev: 1}, {Reply: true, Reject: true, Rev: 1, PrivateData: []byte("x")}} {
		b := make([]byte, m.Len())
		m.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var m MPAFrameFields
		n, err := m.Decode(b)
		if err != nil {
			return
		}
		rejectsPrefixes(t, b, n, func(p []byte) (int, error) { var x MPAFrameFields; return x.Decode(p) })
		out := make([]byte, m.Len())
		if m.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs: % x vs % x", out, b[:n])
		}
	})
}

func FuzzFPDU(f *testing.F) {
	for _, u := range [][]byte{nil, []byte("a"), []byte("abcdefgh")} {
		p := FPDUFields{ULPDU: u}
		b := make([]byte, p.Len())
		p.Encode(b)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var p FPDUFields
		n, err := p.Decode(b)
		if err != nil {
			return
		}
		rejectsPrefixes(t, b, n, func(q []byte) (int, error) { var x FPDUFields; return x.Decode(q) })
		out := make([]byte, p.Len())
		if p.Encode(out) != n || !bytes.Equal(out, b[:n]) {
			t.Fatalf("re-encode differs")
		}
	})
}
