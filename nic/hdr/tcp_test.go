package hdr

import (
	"fmt"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func TestTCPRoundTrip(t *testing.T) {
	in := TCPFields{SrcPort: 0x1234, DstPort: 80, Seq: 0x01020304, Ack: 0x0a0b0c0d, HeaderLen: 32,
		Flags: TCPFlagACK | TCPFlagPSH, Window: 0x2000, Checksum: 0xabcd, Urgent: 0}
	b := make([]byte, 32)
	if n := in.Encode(b); n != 32 {
		t.Fatalf("Encode: %d", n)
	}
	want := []byte{0x12, 0x34, 0x00, 0x50, 1, 2, 3, 4, 0x0a, 0x0b, 0x0c, 0x0d, 0x80, 0x18, 0x20, 0x00, 0xab, 0xcd, 0, 0}
	if string(b[:TCPMinSize]) != string(want) {
		t.Fatalf("wire % x\nwant % x", b[:TCPMinSize], want)
	}
	var out TCPFields
	if n, err := out.Decode(b); err != nil || n != 32 || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}
	// HeaderLen 0 encodes the minimum; reserved bits are cleared.
	b[TCPOffDataOff] = 0xff
	(&TCPFields{}).Encode(b)
	if b[TCPOffDataOff] != 0x50 || TCP(b).HeaderLen() != TCPMinSize {
		t.Fatalf("data offset byte %#02x", b[TCPOffDataOff])
	}
}

func TestTCPChecksum(t *testing.T) {
	f, ipOff, tcpOff := tcpFrame([]byte{1, 1, 1, 0}, sackOptions(1), 77, TCPFlagACK)
	ip, err := ParseIPv4(f[ipOff:])
	if err != nil {
		t.Fatal(err)
	}
	tcp, err := ParseTCP(ip.Payload())
	if err != nil || tcpOff != ipOff+ip.HeaderLen() {
		t.Fatal(err)
	}
	if !tcp.ChecksumOK(ip.Src(), ip.Dst()) {
		t.Fatal("own checksum fails")
	}
	c := append(TCP(nil), tcp...)
	c.SetChecksum(0)
	if got, want := tcp.Checksum(), ^refTransport(ProtoTCP, addrA, addrB, c); got != want {
		t.Fatalf("checksum %#04x, reference %#04x", got, want)
	}
	tcp[len(tcp)-1] ^= 0x40
	if tcp.ChecksumOK(ip.Src(), ip.Dst()) {
		t.Fatal("corrupted payload passes")
	}
}

// collect walks opts with the iterator and renders what it found.
func collect(opts []byte) (string, error) {
	s := ""
	it := IterTCPOptions(opts)
	for o, ok := it.Next(); ok; o, ok = it.Next() {
		if !o.WellFormed() {
			s += fmt.Sprintf("bad(%d,%d) ", o.Kind(), o.Len())
			continue
		}
		switch o.Kind() {
		case TCPOptMSS:
			s += fmt.Sprintf("mss %d ", o.MSS())
		case TCPOptWS:
			s += fmt.Sprintf("ws %d ", o.WindowShift())
		case TCPOptSACKPermitted:
			s += "sackOK "
		case TCPOptTimestamp:
			s += fmt.Sprintf("ts %d %d ", o.TSVal(), o.TSEcr())
		case TCPOptSACK:
			s += "sack"
			for i := range o.SACKBlocks() {
				l, r := o.SACKBlock(i)
				s += fmt.Sprintf(" %d-%d", l, r)
			}
			s += " "
		default:
			s += fmt.Sprintf("kind %d len %d ", o.Kind(), len(o.Body()))
		}
	}
	return s, it.Err()
}

func TestTCPOptions(t *testing.T) {
	for _, c := range []struct {
		name string
		opts []byte
		want string
		err  error
	}{
		{"SYN", synOptions(), "mss 1460 sackOK ts 287454020 0 ws 7 ", nil},
		{"TS + 1 SACK", sackOptions(1), "ts 1000 2000 sack 1-50 ", nil},
		{"TS + 3 SACK", sackOptions(3), "ts 1000 2000 sack 1-50 101-150 201-250 ", nil},
		{"4 SACK", func() []byte {
			o := make([]byte, 36)
			o[0], o[1] = TCPOptNOP, TCPOptNOP
			PutTCPOptSACK(o[2:], TCPMaxSACKBlocks)
			for i := range TCPMaxSACKBlocks {
				PutTCPSACKBlock(o[2:], i, uint32(i), uint32(i+1))
			}
			return o
		}(), "sack 0-1 1-2 2-3 3-4 ", nil},
		{"empty", nil, "", nil},
		{"NOPs", []byte{1, 1, 1, 1}, "", nil},
		{"EOL ends the list", []byte{0, 2, 4, 0x05, 0xb4}, "", nil},
		{"EOL after MSS", []byte{2, 4, 0x05, 0xb4, 0, 0xff, 0xff, 0xff}, "mss 1460 ", nil},
		{"unknown kind", []byte{30, 4, 9, 9, 1, 1, 4, 2}, "kind 30 len 2 sackOK ", nil},
		{"MSS of length 3", []byte{2, 3, 5, 1}, "bad(2,3) ", nil},
		{"WS of length 4", []byte{3, 4, 5, 5}, "bad(3,4) ", nil},
		{"SACK of no blocks", []byte{5, 2, 1, 1}, "bad(5,2) ", nil},
		{"SACK of 9 bytes", []byte{5, 11, 0, 0, 0, 1, 0, 0, 0, 2, 9, 1}, "bad(5,11) ", nil},
		{"TS of length 8", []byte{8, 8, 0, 0, 0, 1, 0, 0}, "bad(8,8) ", nil},
		{"length byte missing", []byte{1, 1, 1, 2}, "", ErrOption},
		{"length 0", []byte{2, 0, 1, 1}, "", ErrOption},
		{"length 1", []byte{4, 1, 1, 1}, "", ErrOption},
		{"length past the end", []byte{2, 4, 5, 0xb4, 8, 10, 0, 0}, "mss 1460 ", ErrOption},
	} {
		got, err := collect(c.opts)
		if got != c.want || err != c.err {
			t.Errorf("%s: %q %v, want %q %v", c.name, got, err, c.want, c.err)
		}
	}
}

// Every prefix of a segment shorter than its header (options included) is
// refused.
func TestTCPTruncated(t *testing.T) {
	f, _, tcpOff := tcpFrame(nil, synOptions(), 0, TCPFlagSYN)
	b := f[tcpOff:]
	hl := TCP(b).HeaderLen()
	if hl != TCPMinSize+20 {
		t.Fatalf("header %d", hl)
	}
	for n := range hl {
		if _, err := ParseTCP(b[:n]); err == nil {
			t.Fatalf("ParseTCP took %d of %d header bytes", n, hl)
		}
		var fl TCPFields
		if _, err := fl.Decode(b[:n]); err == nil {
			t.Fatalf("Decode took %d bytes", n)
		}
	}
	if tcp, err := ParseTCP(b); err != nil || len(tcp.Payload()) != 0 {
		t.Fatal(err)
	}
	for _, off := range []uint8{0, 1, 4} {
		c := append([]byte(nil), b...)
		c[TCPOffDataOff] = off << 4
		if _, err := ParseTCP(c); err != ErrHeaderLen {
			t.Fatalf("data offset %d: %v", off, err)
		}
	}
}

func TestTCPAllocs(t *testing.T) {
	f, _, tcpOff := tcpFrame(nil, sackOptions(3), 500, TCPFlagACK)
	var fl TCPFields
	if n := testing.AllocsPerRun(100, func() {
		tcp, err := ParseTCP(f[tcpOff:])
		if err != nil || tcp.Flags() != TCPFlagACK {
			t.Fatal("parse")
		}
		k := 0
		it := tcp.OptionIter()
		for o, ok := it.Next(); ok; o, ok = it.Next() {
			if !o.WellFormed() {
				t.Fatal("option")
			}
			if o.Kind() == TCPOptSACK {
				for i := range o.SACKBlocks() {
					l, r := o.SACKBlock(i)
					k += int(r - l)
				}
			}
		}
		if it.Err() != nil || k != 3*49 {
			t.Fatal("options")
		}
		if _, err := fl.Decode(tcp); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// refOptions walks options the way RFC 9293 3.2 describes them, with no
// shared code, and renders them as collect does.
func refOptions(opts []byte) (string, bool) {
	s := ""
	for i := 0; i < len(opts); {
		switch opts[i] {
		case 0:
			return s, true
		case 1:
			i++
			continue
		}
		if i+1 >= len(opts) || opts[i+1] < 2 || i+int(opts[i+1]) > len(opts) {
			return s, false
		}
		k, l := opts[i], int(opts[i+1])
		o := opts[i : i+l]
		u32 := func(j int) uint32 { return uint32(o[j])<<24 | uint32(o[j+1])<<16 | uint32(o[j+2])<<8 | uint32(o[j+3]) }
		switch {
		case k == 2 && l == 4:
			s += fmt.Sprintf("mss %d ", int(o[2])<<8|int(o[3]))
		case k == 3 && l == 3:
			s += fmt.Sprintf("ws %d ", o[2])
		case k == 4 && l == 2:
			s += "sackOK "
		case k == 8 && l == 10:
			s += fmt.Sprintf("ts %d %d ", u32(2), u32(6))
		case k == 5 && l >= 10 && (l-2)%8 == 0:
			s += "sack"
			for j := 2; j < l; j += 8 {
				s += fmt.Sprintf(" %d-%d", u32(j), u32(j+4))
			}
			s += " "
		case k == 2 || k == 3 || k == 4 || k == 5 || k == 8:
			s += fmt.Sprintf("bad(%d,%d) ", k, l)
		default:
			s += fmt.Sprintf("kind %d len %d ", k, l-2)
		}
		i += l
	}
	return s, true
}

func FuzzTCPOptions(f *testing.F) {
	f.Add(synOptions())
	f.Add(sackOptions(3))
	f.Add([]byte{2, 4, 5, 0xb4, 8, 10, 0, 0})
	f.Fuzz(func(t *testing.T, opts []byte) {
		got, err := collect(opts)
		want, ok := refOptions(opts)
		if got != want || (err == nil) != ok {
			t.Fatalf("% x: %q %v, reference %q %v", opts, got, err, want, ok)
		}
	})
}

func FuzzTCP(f *testing.F) {
	for _, o := range [][]byte{nil, synOptions(), sackOptions(2)} {
		fr, _, tcpOff := tcpFrame(nil, o, 9, TCPFlagACK)
		f.Add(fr[tcpOff:])
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tcp, err := ParseTCP(b)
		ok := len(b) >= 20 && int(b[12]>>4)*4 >= 20 && int(b[12]>>4)*4 <= len(b)
		if (err == nil) != ok {
			t.Fatalf("ParseTCP: %v, reference %v", err, ok)
		}
		if err != nil {
			return
		}
		hl := tcp.HeaderLen()
		if hl+len(tcp.Payload()) != len(b) || len(tcp.Options()) != hl-TCPMinSize {
			t.Fatal("view")
		}
		for n := range hl {
			if _, err := ParseTCP(b[:n]); err == nil {
				t.Fatalf("took a %d-byte prefix of a %d-byte header", n, hl)
			}
		}
		got, err := collect(tcp.Options())
		if want, ok := refOptions(tcp.Options()); got != want || (err == nil) != ok {
			t.Fatalf("options %q %v, reference %q %v", got, err, want, ok)
		}
		var fl TCPFields
		if n, err := fl.Decode(b); err != nil || n != hl {
			t.Fatalf("Decode: %d %v", n, err)
		}
		re := make([]byte, hl)
		fl.Encode(re)
		copy(re[TCPMinSize:], tcp.Options())
		re[TCPOffDataOff] |= b[TCPOffDataOff] & 0x0f // reserved bits: Encode clears them
		if string(re) != string(b[:hl]) {
			t.Fatalf("re-encoded % x\nwas % x", re, b[:hl])
		}
	})
}

func TestWriteCorpusTCP(t *testing.T) {
	fuzzcorpus.Updating(t)
	var seeds [][]byte
	for _, o := range [][]byte{nil, synOptions(), sackOptions(2), sackOptions(3)} {
		fr, _, tcpOff := tcpFrame(nil, o, 9, TCPFlagACK)
		seeds = append(seeds, fr[tcpOff:])
	}
	fr, _, tcpOff := tcpFrame(nil, synOptions(), 0, TCPFlagSYN)
	seeds = append(seeds, fr[tcpOff:len(fr)-1])
	fuzzcorpus.Write(t, "FuzzTCP", seeds)
	fuzzcorpus.Write(t, "FuzzTCPOptions", [][]byte{synOptions(), sackOptions(3), {2, 4, 5, 0xb4, 8, 10, 0, 0},
		{30, 4, 9, 9, 1, 1, 4, 2}, {5, 11, 0, 0, 0, 1, 0, 0, 0, 2, 9, 1}})
}
