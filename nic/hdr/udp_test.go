package hdr

import (
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func udpDatagram(payload int) []byte {
	b := make([]byte, UDPSize+payload)
	(&UDPFields{SrcPort: 5353, DstPort: 53, Length: uint16(len(b))}).Encode(b)
	for i := range payload {
		b[UDPSize+i] = byte(i)
	}
	UDP(b).UpdateChecksum(addrA, addrB)
	return b
}

func TestUDPRoundTrip(t *testing.T) {
	in := UDPFields{SrcPort: 0x14e9, DstPort: 0x35, Length: 12, Checksum: 0x1234}
	b := make([]byte, 12)
	if n := in.Encode(b); n != UDPSize {
		t.Fatalf("Encode: %d", n)
	}
	if want := []byte{0x14, 0xe9, 0, 0x35, 0, 12, 0x12, 0x34}; string(b[:UDPSize]) != string(want) {
		t.Fatalf("wire % x", b[:UDPSize])
	}
	var out UDPFields
	if n, err := out.Decode(b); err != nil || n != UDPSize || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}
	u := UDP(udpDatagram(30))
	if !u.ChecksumOK(addrA, addrB) || len(u.Payload()) != 30 {
		t.Fatal("own checksum")
	}
	c := append(UDP(nil), u...)
	c.SetChecksum(0)
	if got, want := u.Checksum(), ^refTransport(ProtoUDP, addrA, addrB, c); got != want {
		t.Fatalf("checksum %#04x, reference %#04x", got, want)
	}
}

// A datagram whose sum comes out zero carries 0xFFFF, never zero ("none").
func TestUDPZeroChecksum(t *testing.T) {
	b := make([]byte, 10)
	(&UDPFields{Length: 10}).Encode(b)
	// Pick the last two payload bytes so that the checksum computes to 0.
	u := UDP(b)
	c := TransportChecksum(ProtoUDP, addrA, addrB, u)
	be.PutUint16(b[8:], c) // adding c cancels the complement: the new sum is 0xFFFF, the checksum 0
	if TransportChecksum(ProtoUDP, addrA, addrB, u) != 0 {
		t.Fatal("setup: checksum not zero")
	}
	u.UpdateChecksum(addrA, addrB)
	if u.Checksum() != 0xFFFF || !u.ChecksumOK(addrA, addrB) {
		t.Fatalf("checksum %#04x", u.Checksum())
	}
}

func TestUDPTruncated(t *testing.T) {
	b := udpDatagram(20)
	for n := range len(b) {
		if _, err := ParseUDP(b[:n]); err != ErrShort {
			t.Fatalf("%d of %d bytes: %v", n, len(b), err)
		}
		var fl UDPFields
		if _, err := fl.Decode(b[:n]); err == nil {
			t.Fatalf("Decode took %d bytes", n)
		}
	}
	UDP(b).SetLength(7)
	if _, err := ParseUDP(b); err != ErrTotalLen {
		t.Fatalf("length 7: %v", err)
	}
	UDP(b).SetLength(10)
	if u, err := ParseUDP(b); err != nil || len(u) != 10 {
		t.Fatalf("trailing bytes: %d %v", len(u), err)
	}
}

func TestUDPAllocs(t *testing.T) {
	b := udpDatagram(100)
	if n := testing.AllocsPerRun(100, func() {
		u, err := ParseUDP(b)
		if err != nil || !u.ChecksumOK(addrA, addrB) {
			t.Fatal("parse")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

func FuzzUDP(f *testing.F) {
	f.Add(udpDatagram(0))
	f.Add(udpDatagram(13))
	f.Fuzz(func(t *testing.T, b []byte) {
		u, err := ParseUDP(b)
		ok := len(b) >= 8 && int(b[4])<<8|int(b[5]) >= 8 && int(b[4])<<8|int(b[5]) <= len(b)
		if (err == nil) != ok {
			t.Fatalf("ParseUDP: %v, reference %v", err, ok)
		}
		if err != nil {
			return
		}
		if len(u) != int(u.Length()) {
			t.Fatal("view")
		}
		for n := range len(u) {
			if _, err := ParseUDP(b[:n]); err == nil {
				t.Fatalf("took a %d-byte prefix of a %d-byte datagram", n, len(u))
			}
		}
		var fl UDPFields
		if _, err := fl.Decode(b); err != nil {
			t.Fatal(err)
		}
		re := make([]byte, UDPSize)
		fl.Encode(re)
		if string(re) != string(b[:UDPSize]) {
			t.Fatalf("re-encoded % x, was % x", re, b[:UDPSize])
		}
	})
}

func TestWriteCorpusUDP(t *testing.T) {
	fuzzcorpus.Updating(t)
	d := udpDatagram(13)
	fuzzcorpus.Write(t, "FuzzUDP", [][]byte{udpDatagram(0), d, d[:len(d)-1]})
}
