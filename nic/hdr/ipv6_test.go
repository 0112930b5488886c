package hdr

import (
	"net/netip"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

var (
	addr6A = IPv6Addr(netip.MustParseAddr("2001:db8::a").As16())
	addr6B = IPv6Addr(netip.MustParseAddr("2001:db8::b").As16())
)

// ext6 builds one extension header of type typ (the type of the header it
// sits in, which decides its length rule) carrying next, with body as its
// bytes from offset 2, padded to the header's length.
func ext6(typ, next uint8, body []byte) []byte {
	switch typ {
	case ProtoIPv6Fragment:
		b := make([]byte, 8)
		b[0] = next
		copy(b[2:], body)
		return b
	case ProtoAH:
		n := (2 + len(body) + 3) &^ 3
		if n < 12 {
			n = 12
		}
		b := make([]byte, n)
		b[0], b[1] = next, uint8(n/4-2)
		copy(b[2:], body)
		return b
	}
	n := (2 + len(body) + 7) &^ 7
	b := make([]byte, n)
	b[0], b[1] = next, uint8(n/8-1)
	copy(b[2:], body)
	return b
}

// tcp6Packet builds IPv6 + the extension headers exts (in order, each
// built by ext6 with the right next header; types lists their types) +
// TCP with payload bytes, the TCP checksum right, and returns the packet
// and the TCP offset.
func tcp6Packet(types []uint8, bodies [][]byte, payload int) ([]byte, int) {
	var chain []byte
	for i, typ := range types {
		next := uint8(ProtoTCP)
		if i+1 < len(types) {
			next = types[i+1]
		}
		chain = append(chain, ext6(typ, next, bodies[i])...)
	}
	first := uint8(ProtoTCP)
	if len(types) > 0 {
		first = types[0]
	}
	thl := TCPMinSize
	b := make([]byte, IPv6Size+len(chain)+thl+payload)
	(&IPv6Fields{TrafficClass: 0xb8, FlowLabel: 0x12345, PayloadLen: uint16(len(b) - IPv6Size),
		NextHeader: first, HopLimit: IPv6DefaultHopLimit, Src: addr6A, Dst: addr6B}).Encode(b)
	copy(b[IPv6Size:], chain)
	l4 := IPv6Size + len(chain)
	t := TCP(b[l4:])
	(&TCPFields{SrcPort: 40000, DstPort: 80, Seq: 1, HeaderLen: thl, Flags: TCPFlagACK, Window: 1000}).Encode(t)
	for i := range payload {
		t[thl+i] = byte(i * 5)
	}
	t.SetChecksum(0)
	t.SetChecksum(IPv6(b).TransportChecksum(ProtoTCP, t))
	return b, l4
}

func TestIPv6RoundTrip(t *testing.T) {
	in := IPv6Fields{TrafficClass: 0xb8, FlowLabel: 0xabcde, PayloadLen: 20, NextHeader: ProtoTCP, HopLimit: 255,
		Src: addr6A, Dst: addr6B}
	b := make([]byte, IPv6Size+20)
	if in.Encode(b) != IPv6Size {
		t.Fatal("Encode length")
	}
	// RFC 8200's first word: version 6, class 0xb8, flow 0xabcde.
	if b[0] != 0x6b || b[1] != 0x8a || b[2] != 0xbc || b[3] != 0xde {
		t.Fatalf("first word % x", b[:4])
	}
	var out IPv6Fields
	if n, err := out.Decode(b); err != nil || n != IPv6Size || out != in {
		t.Fatalf("Decode: %+v %d %v", out, n, err)
	}
	h, err := ParseIPv6(b)
	if err != nil || len(h.Payload()) != 20 {
		t.Fatalf("ParseIPv6: %v", err)
	}
	var n Network = h
	if n.SourceAddress() != netip.AddrFrom16(addr6A) || n.DestinationAddress() != netip.AddrFrom16(addr6B) ||
		n.TransportProtocol() != ProtoTCP {
		t.Fatal("Network view")
	}
	if Fold(n.PseudoHeaderSum(20)) != Fold(PseudoHeaderSumAddr(ProtoTCP, n.SourceAddress(), n.DestinationAddress(), 20)) {
		t.Fatal("pseudo-header sum differs from PseudoHeaderSumAddr")
	}
}

func TestIPv6Rejects(t *testing.T) {
	b, _ := tcp6Packet(nil, nil, 4)
	b[0] = 0x45
	if _, err := ParseIPv6(b); err != ErrVersion {
		t.Fatalf("version 4: %v", err)
	}
	b, _ = tcp6Packet(nil, nil, 4)
	IPv6(b).SetPayloadLen(uint16(len(b) - IPv6Size + 1))
	if _, err := ParseIPv6(b); err != ErrShort {
		t.Fatalf("payload past the buffer: %v", err)
	}
	// Ethernet padding behind the packet is not part of it.
	b, _ = tcp6Packet(nil, nil, 4)
	b = append(b, 0, 0, 0)
	if h, err := ParseIPv6(b); err != nil || len(h) != len(b)-3 {
		t.Fatalf("padded: %v", err)
	}
}

// Every prefix of a packet shorter than its length is refused, and every
// prefix shorter than the fixed header by ParseIPv6Header and Decode.
func TestIPv6Truncated(t *testing.T) {
	b, _ := tcp6Packet([]uint8{ProtoIPv6HopByHop, ProtoIPv6DstOpts}, [][]byte{{1, 2, 0, 0}, {1, 0}}, 10)
	for n := range len(b) {
		if _, err := ParseIPv6(b[:n]); err == nil {
			t.Fatalf("ParseIPv6 took %d of %d bytes", n, len(b))
		}
		if _, err := ParseIPv6Header(b[:n]); (err == nil) != (n >= IPv6Size) {
			t.Fatalf("ParseIPv6Header, %d bytes: %v", n, err)
		}
		var fl IPv6Fields
		if _, err := fl.Decode(b[:n]); (err == nil) != (n >= IPv6Size) {
			t.Fatalf("Decode, %d bytes: %v", n, err)
		}
	}
	// A chain cut short inside its own packet (payload length says so).
	for n := IPv6Size; n < IPv6Size+16; n++ {
		c := append([]byte(nil), b[:n]...)
		IPv6(c).SetPayloadLen(uint16(n - IPv6Size))
		var ch IPv6Chain
		if err := WalkIPv6(IPv6(c), &ch); err != ErrShort {
			t.Fatalf("chain cut at %d: %v", n, err)
		}
	}
}

func TestIPv6Walk(t *testing.T) {
	frag := func(off int, more bool) []byte {
		w := uint16(off) & IPv6FragOffsetMask
		if more {
			w |= IPv6FragMF
		}
		return []byte{0, uint8(w >> 8), uint8(w), 0, 0, 0x12, 0x34}[1:]
	}
	opts := func(o ...byte) []byte { return o }
	for _, c := range []struct {
		name   string
		types  []uint8
		bodies [][]byte
		pay    int
		err    error
		proto  uint8
		frag   bool
	}{
		{"no extension headers", nil, nil, 8, nil, ProtoTCP, false},
		{"hop-by-hop, PadN and Pad1", []uint8{ProtoIPv6HopByHop}, [][]byte{opts(1, 2, 0, 0, 0, 0)}, 0, nil, ProtoTCP, false},
		{"destination options twice around a routing header",
			[]uint8{ProtoIPv6DstOpts, ProtoIPv6Routing, ProtoIPv6DstOpts}, [][]byte{nil, {2, 0}, nil}, 0, nil, ProtoTCP, false},
		{"AH", []uint8{ProtoAH}, [][]byte{make([]byte, 10)}, 0, nil, ProtoTCP, false},
		{"first fragment", []uint8{ProtoIPv6Fragment}, [][]byte{frag(0, true)}, 4, nil, ProtoTCP, true},
		{"last fragment", []uint8{ProtoIPv6Fragment}, [][]byte{frag(1232, false)}, 3, nil, ProtoTCP, true},
		{"routing header type 0", []uint8{ProtoIPv6Routing}, [][]byte{{RoutingType0, 1}}, 0, ErrRoutingType0, 0, false},
		{"routing type 0 with no segments left", []uint8{ProtoIPv6Routing}, [][]byte{{RoutingType0, 0}}, 0, ErrRoutingType0, 0, false},
		{"atomic fragment", []uint8{ProtoIPv6Fragment}, [][]byte{frag(0, false)}, 0, ErrAtomicFragment, 0, false},
		{"non-final fragment not a multiple of 8", []uint8{ProtoIPv6Fragment}, [][]byte{frag(0, true)}, 5, ErrFragment, 0, false},
		{"fragment past 65535", []uint8{ProtoIPv6Fragment}, [][]byte{frag(65528, false)}, 0, ErrFragment, 0, false},
		{"jumbogram option", []uint8{ProtoIPv6HopByHop}, [][]byte{opts(IPv6OptJumboPayld, 4, 0, 1, 0, 0)}, 0, ErrJumbogram, 0, false},
		{"option past its header", []uint8{ProtoIPv6HopByHop}, [][]byte{opts(1, 2, 0, 0, 5, 9)}, 0, ErrExtChain, 0, false},
		{"hop-by-hop not first", []uint8{ProtoIPv6DstOpts, ProtoIPv6HopByHop}, [][]byte{nil, nil}, 0, ErrExtChain, 0, false},
		{"routing header twice", []uint8{ProtoIPv6Routing, ProtoIPv6Routing}, [][]byte{{2, 0}, {2, 0}}, 0, ErrExtChain, 0, false},
		{"destination options three times", []uint8{ProtoIPv6DstOpts, ProtoIPv6DstOpts, ProtoIPv6DstOpts},
			[][]byte{nil, nil, nil}, 0, ErrExtChain, 0, false},
		{"more than the bound", []uint8{ProtoIPv6HopByHop, ProtoIPv6DstOpts, ProtoIPv6Routing, ProtoAH, ProtoMobility,
			ProtoHIP, ProtoShim6, ProtoExperiment1, ProtoExperiment2},
			[][]byte{nil, nil, {2, 0}, make([]byte, 10), nil, nil, nil, nil, nil}, 0, ErrExtChain, 0, false},
		{"longer than the byte bound", []uint8{ProtoIPv6HopByHop}, [][]byte{append(opts(1, 255), make([]byte, 255)...)},
			0, nil, ProtoTCP, false},
		{"two headers over the byte bound", []uint8{ProtoIPv6HopByHop, ProtoIPv6DstOpts},
			[][]byte{append(opts(1, 255), make([]byte, 255)...), append(opts(1, 255), make([]byte, 255)...)},
			0, ErrExtChain, 0, false},
	} {
		b, l4 := tcp6Packet(c.types, c.bodies, c.pay)
		h, err := ParseIPv6(b)
		if err != nil {
			t.Fatalf("%s: ParseIPv6: %v", c.name, err)
		}
		var ch IPv6Chain
		err = WalkIPv6(h, &ch)
		if err != c.err {
			t.Errorf("%s: %v, want %v", c.name, err, c.err)
			continue
		}
		if err != nil {
			continue
		}
		if ch.Proto != c.proto || ch.L4Off != l4 || ch.Fragment != c.frag || ch.ExtHeaders != len(c.types) {
			t.Errorf("%s: %+v, want proto %d at %d", c.name, ch, c.proto, l4)
			continue
		}
		seg, ok := IPv6TCPSegment(h, &ch)
		if ok != !c.frag {
			t.Errorf("%s: TCP segment %v", c.name, ok)
		}
		if ok && !h.TransportChecksumOK(ProtoTCP, seg) {
			t.Errorf("%s: TCP checksum over the IPv6 pseudo-header", c.name)
		}
	}
}

func TestIPv6Allocs(t *testing.T) {
	b, _ := tcp6Packet([]uint8{ProtoIPv6HopByHop}, [][]byte{{1, 2, 0, 0}}, 100)
	var fl IPv6Fields
	var ch IPv6Chain
	if n := testing.AllocsPerRun(100, func() {
		h, err := ParseIPv6(b)
		if err != nil || WalkIPv6(h, &ch) != nil {
			t.Fatal("parse")
		}
		seg, _ := IPv6TCPSegment(h, &ch)
		var k Tuple
		h.ReadRxTuple(&k, seg)
		if !h.TransportChecksumOK(ProtoTCP, seg) {
			t.Fatal("checksum")
		}
		if _, err := fl.Decode(b); err != nil {
			t.Fatal(err)
		}
		fl.Encode(b)
	}); n != 0 {
		t.Fatalf("%v allocations per run", n)
	}
}

// refWalkIPv6 is the chain rule spelled out with no shared code: it only
// reports where the chain ends, for chains it can follow, and whether any
// header was repeated or the bound passed.
func refWalkIPv6(b []byte) (l4 int, ok bool) {
	next, off, count := b[6], 40, 0
	seen := map[uint8]int{}
	for {
		switch next {
		case 0, 43, 44, 51, 60, 135, 139, 140, 253, 254:
		default:
			return off, true
		}
		seen[next]++
		limit := 1
		if next == 60 {
			limit = 2
		}
		if seen[next] > limit || (next == 0 && count > 0) || count == 8 || off+8 > len(b) {
			return 0, false
		}
		n := (int(b[off+1]) + 1) * 8
		if next == 44 {
			n = 8
		} else if next == 51 {
			n = (int(b[off+1]) + 2) * 4
		}
		if off+n > len(b) || off+n-40 > 512 {
			return 0, false
		}
		if next == 44 && (int(b[off+2])<<8|int(b[off+3]))&0xfff8 != 0 {
			return off + n, true // non-first fragment: data follows
		}
		next, off, count = b[off], off+n, count+1
	}
}

func FuzzIPv6(f *testing.F) {
	for _, s := range ipv6Seeds() {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseIPv6(b)
		if err != nil {
			if len(b) >= IPv6Size && b[0]>>4 == 6 && IPv6Size+(int(b[4])<<8|int(b[5])) <= len(b) {
				t.Fatalf("refused a whole packet: %v", err)
			}
			return
		}
		for n := range len(h) {
			if _, err := ParseIPv6(b[:n]); err == nil {
				t.Fatalf("took a %d-byte prefix of a %d-byte packet", n, len(h))
			}
		}
		var fl IPv6Fields
		if n, err := fl.Decode(b); err != nil || n != IPv6Size {
			t.Fatalf("Decode: %d %v", n, err)
		}
		re := make([]byte, IPv6Size)
		fl.Encode(re)
		if string(re) != string(b[:IPv6Size]) {
			t.Fatalf("re-encoded % x\nwas % x", re, b[:IPv6Size])
		}
		var ch IPv6Chain
		err = WalkIPv6(h, &ch)
		l4, refOK := refWalkIPv6(h)
		if err == nil {
			if !refOK || l4 != ch.L4Off || ch.L4Off > len(h) {
				t.Fatalf("walk ended at %d, reference %d %v", ch.L4Off, l4, refOK)
			}
			if seg, ok := IPv6TCPSegment(h, &ch); ok {
				_ = h.TransportChecksumOK(ProtoTCP, seg)
			}
		} else if ipv6ExtTable[h.NextHeader()].bit == 0 {
			t.Fatalf("refused a packet with no extension headers: %v", err)
		}
	})
}

func ipv6Seeds() [][]byte {
	a, _ := tcp6Packet(nil, nil, 20)
	b, _ := tcp6Packet([]uint8{ProtoIPv6HopByHop, ProtoIPv6DstOpts, ProtoIPv6Routing, ProtoIPv6Fragment},
		[][]byte{{1, 2, 0, 0}, nil, {2, 0}, {0, 1, 0, 0, 0, 1}}, 8)
	c, _ := tcp6Packet([]uint8{ProtoIPv6Routing}, [][]byte{{RoutingType0, 1}}, 0)
	d, _ := tcp6Packet([]uint8{ProtoIPv6HopByHop}, [][]byte{{IPv6OptJumboPayld, 4, 0, 1, 0, 0}}, 0)
	return [][]byte{a, b, c, d, b[:IPv6Size+9], a[:len(a)-1]}
}

func TestWriteCorpusIPv6(t *testing.T) {
	fuzzcorpus.Updating(t)
	fuzzcorpus.Write(t, "FuzzIPv6", ipv6Seeds())
}
