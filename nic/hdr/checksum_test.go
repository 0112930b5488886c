package hdr

import (
	"fmt"
	"math/bits"
	"math/rand/v2"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

// RFC 1071 section 3: the sum of 00 01 f2 03 f4 f5 f6 f7 is 2ddf0, which
// folds to ddf2; the checksum is its complement.
func TestChecksumRFC1071Example(t *testing.T) {
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if got := Checksum(b, 0); got != 0xddf2 {
		t.Fatalf("sum %#04x, want 0xddf2", got)
	}
	if got := ^Checksum(b, 0); got != 0x220d {
		t.Fatalf("checksum %#04x, want 0x220d", got)
	}
	// Byte order independence (RFC 1071 2(B)): the byte-swapped words sum
	// to the byte-swapped sum.
	sw := []byte{0x01, 0x00, 0x03, 0xf2, 0xf5, 0xf4, 0xf7, 0xf6}
	if got := Checksum(sw, 0); got != 0xf2dd {
		t.Fatalf("swapped sum %#04x, want 0xf2dd", got)
	}
	// Incremental: a partial sum carried in as the initial value.
	if got := Checksum(b[4:], Checksum(b[:4], 0)); got != 0xddf2 {
		t.Fatalf("incremental sum %#04x, want 0xddf2", got)
	}
}

// A captured IPv4 header (192.168.0.1 -> 192.168.0.199, UDP) whose checksum
// field holds the known right value, 0xb861.
func TestChecksumIPv4Vector(t *testing.T) {
	h := IPv4{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0xb8, 0x61,
		0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	if !h.ChecksumOK() {
		t.Fatal("known-good header fails")
	}
	c := append(IPv4(nil), h...)
	c.UpdateChecksum()
	if c.Checksum() != 0xb861 {
		t.Fatalf("computed %#04x, want 0xb861", c.Checksum())
	}
	c[IPv4OffTTL]--
	if c.ChecksumOK() {
		t.Fatal("changed header passes")
	}
}

func TestChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 600; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		switch n % 7 {
		case 0: // all ones: the carry paths
			for i := range b {
				b[i] = 0xFF
			}
		case 1:
			clear(b)
		}
		for _, init := range []uint16{0, 1, 0x8000, 0xFFFF, uint16(r.Uint32())} {
			if got, want := Checksum(b, init), refChecksum(b, uint32(init)); got != want {
				t.Fatalf("len %d init %#x: %#04x, want %#04x", n, init, got, want)
			}
		}
	}
}

// Sum chained over pieces of even length equals Sum over the whole, and the
// accumulator may start anywhere (a pseudo-header sum is large).
func TestSumChains(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	b := make([]byte, 1500)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	whole := Fold(Sum(0, b))
	for _, cut := range []int{0, 2, 8, 14, 34, 54, 256, 1498, 1500} {
		if got := Fold(Sum(Sum(0, b[:cut]), b[cut:])); got != whole {
			t.Fatalf("cut at %d: %#04x, want %#04x", cut, got, whole)
		}
	}
	acc := ^uint64(0) - 3 // near overflow: the carry out of the accumulator
	if got, want := Fold(Sum(acc, b)), refChecksum(b, uint32(Fold(acc))); got != want {
		t.Fatalf("large accumulator: %#04x, want %#04x", got, want)
	}
}

// refTransport is the pseudo-header as RFC 9293 draws it, 12 bytes in front
// of the segment.
func refTransport(proto uint8, src, dst IPv4Addr, seg []byte) uint16 {
	ph := make([]byte, 12, 12+len(seg))
	copy(ph, src[:])
	copy(ph[4:], dst[:])
	ph[9] = proto
	ph[10], ph[11] = byte(len(seg)>>8), byte(len(seg))
	return refChecksum(append(ph, seg...), 0)
}

func TestTransportChecksum(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 10))
	for n := 8; n < 400; n += 13 {
		seg := make([]byte, n)
		for i := range seg {
			seg[i] = byte(r.Uint32())
		}
		for _, proto := range []uint8{ProtoTCP, ProtoUDP} {
			off := TCPOffChecksum
			if proto == ProtoUDP {
				off = UDPOffChecksum
			}
			if n < off+2 {
				continue
			}
			seg[off], seg[off+1] = 0, 0
			c := TransportChecksum(proto, addrA, addrB, seg)
			if want := ^refTransport(proto, addrA, addrB, seg); c != want {
				t.Fatalf("len %d proto %d: %#04x, want %#04x", n, proto, c, want)
			}
			be.PutUint16(seg[off:], c)
			if !TransportChecksumOK(proto, addrA, addrB, seg) {
				t.Fatalf("len %d proto %d: own checksum fails", n, proto)
			}
			if TransportChecksumOK(proto, addrB, IPv4Addr{10, 0, 0, 3}, seg) {
				t.Fatalf("len %d proto %d: passes with the wrong pseudo-header", n, proto)
			}
		}
	}
}

func TestChecksumAllocs(t *testing.T) {
	f, ipOff, tcpOff := tcpFrame(nil, sackOptions(3), 1000, TCPFlagACK)
	ip, tcp := IPv4(f[ipOff:tcpOff]), TCP(f[tcpOff:])
	if n := testing.AllocsPerRun(100, func() {
		if !ip.ChecksumOK() || !tcp.ChecksumOK(addrA, addrB) || Checksum(f, 0) == 1 {
			t.Fatal("bad checksum")
		}
		tcp.UpdateChecksum(addrA, addrB)
		ip.UpdateChecksum()
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte{0xFF, 0xFF, 0xFF}, uint16(0xFFFF))
	f.Add([]byte{}, uint16(0))
	f.Add([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, uint16(0))
	fr, _, _ := tcpFrame(nil, synOptions(), 33, TCPFlagSYN)
	f.Add(fr, uint16(0x1234))
	f.Fuzz(func(t *testing.T, b []byte, init uint16) {
		if got, want := Checksum(b, init), refChecksum(b, uint32(init)); got != want {
			t.Fatalf("%#04x, want %#04x", got, want)
		}
		cut := len(b) / 2 &^ 1
		if got, want := Fold(Sum(Sum(uint64(init), b[:cut]), b[cut:])), refChecksum(b, uint32(init)); got != want {
			t.Fatalf("chained at %d: %#04x, want %#04x", cut, got, want)
		}
	})
}

func TestWriteCorpusChecksum(t *testing.T) {
	fuzzcorpus.Updating(t)
	fr, _, _ := tcpFrame(nil, synOptions(), 33, TCPFlagSYN)
	fuzzcorpus.Write(t, "FuzzChecksum", [][]byte{fr, fr[:EthernetSize+IPv4MinSize+1], {0xff, 0xff, 0xff}}, "uint16(4660)")
}

// checksumAccBaseline is delegation/wire.go's checksumAcc as it was before
// the engine moved to this package: the speed Sum must keep.
func checksumAccBaseline(acc uint64, b []byte) uint64 {
	var c, carry uint64
	for len(b) >= 32 {
		acc, c = bits.Add64(acc, be.Uint64(b), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[8:]), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[16:]), 0)
		carry += c
		acc, c = bits.Add64(acc, be.Uint64(b[24:]), 0)
		carry += c
		b = b[32:]
	}
	for len(b) >= 8 {
		acc, c = bits.Add64(acc, be.Uint64(b), 0)
		carry += c
		b = b[8:]
	}
	if len(b) > 0 {
		var w uint64
		for i, v := range b {
			w |= uint64(v) << (56 - 8*i)
		}
		acc, c = bits.Add64(acc, w, 0)
		carry += c
	}
	acc, c = bits.Add64(acc, carry, 0)
	return acc + c
}

var benchSink uint64

// BenchmarkChecksum: Sum (new) against the engine's former checksumAcc
// (baseline) at the sizes the datapath sums: an IPv4 header, a pure ACK
// with timestamps, a full-sized segment, a jumbo one.
func BenchmarkChecksum(b *testing.B) {
	for _, n := range []int{20, 32, 52, 1480, 9000} {
		buf := make([]byte, n)
		for i := range buf {
			buf[i] = byte(i)
		}
		for _, impl := range []struct {
			name string
			sum  func(uint64, []byte) uint64
		}{{"new", Sum}, {"baseline", checksumAccBaseline}} {
			b.Run(fmt.Sprintf("%s/%d", impl.name, n), func(b *testing.B) {
				b.SetBytes(int64(n))
				for range b.N {
					benchSink += impl.sum(0, buf)
				}
			})
		}
	}
}
