package hdr

import (
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func TestIPv4RoundTrip(t *testing.T) {
	// The captured header of TestChecksumIPv4Vector, from fields.
	in := IPv4Fields{HeaderLen: 20, TotalLen: 0x73, FlagsFrag: IPv4FlagDF, TTL: 64, Proto: ProtoUDP,
		Src: IPv4Addr{192, 168, 0, 1}, Dst: IPv4Addr{192, 168, 0, 199}}
	b := make([]byte, 0x73)
	if n := in.Encode(b); n != IPv4MinSize {
		t.Fatalf("Encode: %d", n)
	}
	h := IPv4(b)
	h.UpdateChecksum()
	want := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if string(b[:IPv4MinSize]) != string(want) {
		t.Fatalf("wire % x\nwant % x", b[:IPv4MinSize], want)
	}
	in.Checksum = 0xb861
	var out IPv4Fields
	if n, err := out.Decode(b); err != nil || n != IPv4MinSize || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}

	// With options (a 4-byte NOP-padded record route stand-in).
	in = IPv4Fields{HeaderLen: 24, TOS: 0xb8, TotalLen: 24 + 8, ID: 0xbeef, FlagsFrag: IPv4FlagMF | 3,
		TTL: 1, Proto: ProtoTCP, Src: addrA, Dst: addrB}
	b = make([]byte, 32)
	if n := in.Encode(b); n != 24 {
		t.Fatalf("Encode: %d", n)
	}
	copy(b[20:], []byte{1, 1, 1, 0})
	h = IPv4(b)
	h.UpdateChecksum()
	in.Checksum = h.Checksum()
	if n, err := out.Decode(b); err != nil || n != 24 || out != in {
		t.Fatalf("Decode with options: %+v %d %v", out, n, err)
	}
	h, err := ParseIPv4(b)
	if err != nil || !h.ChecksumOK() || len(h.Options()) != 4 || len(h.Payload()) != 8 {
		t.Fatalf("ParseIPv4: %v", err)
	}
	if !h.IsFragment() || !h.MF() || h.DF() || h.FragOffset() != 24 {
		t.Fatal("fragment fields")
	}
}

func TestIPv4Fragments(t *testing.T) {
	h := IPv4(make([]byte, IPv4MinSize))
	for _, c := range []struct {
		ff   uint16
		frag bool
	}{{0, false}, {IPv4FlagDF, false}, {IPv4FlagMF, true}, {1, true}, {IPv4FlagDF | IPv4FragOffMask, true}} {
		h.SetFlagsFrag(c.ff)
		if h.IsFragment() != c.frag {
			t.Fatalf("flags/offset %#04x: fragment %v", c.ff, !c.frag)
		}
	}
}

func TestIPv4Rejects(t *testing.T) {
	base := func() []byte {
		b := make([]byte, 40)
		(&IPv4Fields{TotalLen: 40, TTL: 64, Proto: ProtoTCP, Src: addrA, Dst: addrB}).Encode(b)
		return b
	}
	for _, c := range []struct {
		name string
		mod  func(b []byte) []byte
		err  error // from ParseIPv4
	}{
		{"version 6", func(b []byte) []byte { b[0] = 0x65; return b }, ErrVersion},
		{"IHL 4", func(b []byte) []byte { b[0] = 0x44; return b }, ErrHeaderLen},
		{"IHL past the buffer", func(b []byte) []byte { b[0] = 0x4f; return b[:40] }, ErrHeaderLen},
		{"total below IHL", func(b []byte) []byte { IPv4(b).SetTotalLen(19); return b }, ErrTotalLen},
		{"total past the buffer", func(b []byte) []byte { IPv4(b).SetTotalLen(41); return b }, ErrShort},
	} {
		if _, err := ParseIPv4(c.mod(base())); err != c.err {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
		}
	}
	// Ethernet padding behind the datagram is not part of it.
	b := base()
	IPv4(b).SetTotalLen(28)
	if h, err := ParseIPv4(b); err != nil || len(h) != 28 || len(h.Payload()) != 8 {
		t.Fatalf("padded datagram: %d %v", len(h), err)
	}
	// The header alone is enough for ParseIPv4Header, whatever the total.
	if h, err := ParseIPv4Header(base()[:20]); err != nil || len(h) != 20 || h.TotalLen() != 40 {
		t.Fatalf("header only: %v", err)
	}
}

// Every prefix of a datagram shorter than its total length is refused by
// ParseIPv4, and every prefix shorter than its header by ParseIPv4Header
// and Decode.
func TestIPv4Truncated(t *testing.T) {
	f, ipOff, tcpOff := tcpFrame([]byte{1, 1, 1, 0, 7, 3, 4, 0}, synOptions(), 10, TCPFlagSYN)
	b := f[ipOff:]
	ihl := tcpOff - ipOff
	for n := range len(b) {
		if _, err := ParseIPv4(b[:n]); err == nil {
			t.Fatalf("ParseIPv4 took %d of %d bytes", n, len(b))
		}
		_, err := ParseIPv4Header(b[:n])
		if (err == nil) != (n >= ihl) {
			t.Fatalf("ParseIPv4Header, %d bytes: %v", n, err)
		}
		var fl IPv4Fields
		if _, err := fl.Decode(b[:n]); (err == nil) != (n >= ihl) {
			t.Fatalf("Decode, %d bytes: %v", n, err)
		}
	}
	if h, err := ParseIPv4(b); err != nil || !h.ChecksumOK() || h.HeaderLen() != ihl {
		t.Fatalf("whole datagram: %v", err)
	}
}

func TestIPv4Allocs(t *testing.T) {
	f, ipOff, _ := tcpFrame(nil, nil, 100, TCPFlagACK)
	var fl IPv4Fields
	if n := testing.AllocsPerRun(100, func() {
		h, err := ParseIPv4(f[ipOff:])
		if err != nil || !h.ChecksumOK() || h.IsFragment() || h.Proto() != ProtoTCP {
			t.Fatal("parse")
		}
		if _, err := ParseIPv4(f[ipOff : ipOff+30]); err == nil {
			t.Fatal("short")
		}
		if _, err := fl.Decode(f[ipOff:]); err != nil {
			t.Fatal(err)
		}
		fl.Encode(f[ipOff:])
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// refParseIPv4 is the validity rule spelled out with no shared code.
func refParseIPv4(b []byte) (ihl, total int, ok bool) {
	if len(b) < 20 || b[0]>>4 != 4 {
		return 0, 0, false
	}
	ihl = int(b[0]&0xf) * 4
	total = int(b[2])<<8 | int(b[3])
	return ihl, total, ihl >= 20 && ihl <= len(b) && total >= ihl && total <= len(b)
}

func FuzzIPv4(f *testing.F) {
	fr, ipOff, _ := tcpFrame(nil, sackOptions(2), 20, TCPFlagACK)
	f.Add(fr[ipOff:])
	fr, ipOff, _ = tcpFrame([]byte{1, 1, 1, 0}, synOptions(), 0, TCPFlagSYN)
	f.Add(fr[ipOff:])
	f.Add(fr[ipOff : ipOff+23])
	f.Fuzz(func(t *testing.T, b []byte) {
		ihl, total, ok := refParseIPv4(b)
		h, err := ParseIPv4(b)
		if (err == nil) != ok {
			t.Fatalf("ParseIPv4: %v, reference %v", err, ok)
		}
		if err != nil {
			return
		}
		if len(h) != total || h.HeaderLen() != ihl || len(h.Payload()) != total-ihl ||
			len(h.Options()) != ihl-IPv4MinSize {
			t.Fatalf("view %d/%d, want %d/%d", len(h), h.HeaderLen(), total, ihl)
		}
		_ = h.ChecksumOK()
		for n := range total {
			if _, err := ParseIPv4(b[:n]); err == nil {
				t.Fatalf("took a %d-byte prefix of a %d-byte datagram", n, total)
			}
		}
		var fl IPv4Fields
		if n, err := fl.Decode(b); err != nil || n != ihl {
			t.Fatalf("Decode: %d %v", n, err)
		}
		re := make([]byte, ihl)
		fl.Encode(re)
		copy(re[IPv4MinSize:], h.Options())
		if string(re) != string(b[:ihl]) {
			t.Fatalf("re-encoded % x\nwas % x", re, b[:ihl])
		}
	})
}

func TestWriteCorpusIPv4(t *testing.T) {
	fuzzcorpus.Updating(t)
	a, ipA, _ := tcpFrame(nil, sackOptions(2), 20, TCPFlagACK)
	s, ipS, _ := tcpFrame([]byte{1, 1, 1, 0}, synOptions(), 0, TCPFlagSYN)
	fuzzcorpus.Write(t, "FuzzIPv4", [][]byte{a[ipA:], s[ipS:], s[ipS : ipS+23], a[ipA : len(a)-1]})
}
