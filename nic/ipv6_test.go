package nic

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

var (
	peer6 = hdr.IPv6Addr(netip.MustParseAddr("fd00::2").As16())
	dev6  = hdr.IPv6Addr(netip.MustParseAddr("fd00::1").As16())
)

// frame6 builds an Ethernet/IPv6 frame from the peer to the device: the
// extension-header chain ext (its first header's type first, already
// linked), then an upper-layer segment of protocol proto (TCP or UDP with
// a right checksum over the IPv6 pseudo-header, or raw bytes).
func frame6(firstNext uint8, ext []byte, proto uint8, payload int) []byte {
	var l4 []byte
	switch proto {
	case hdr.ProtoTCP:
		l4 = make([]byte, hdr.TCPMinSize+payload)
		(&hdr.TCPFields{SrcPort: 40000, DstPort: 80, Seq: 1, Ack: 2, HeaderLen: hdr.TCPMinSize,
			Flags: hdr.TCPFlagACK, Window: 1000}).Encode(l4)
	case hdr.ProtoUDP:
		l4 = make([]byte, hdr.UDPSize+payload)
		(&hdr.UDPFields{SrcPort: 1000, DstPort: 2000, Length: uint16(len(l4))}).Encode(l4)
	default:
		l4 = make([]byte, payload)
	}
	for i := len(l4) - payload; i < len(l4); i++ {
		l4[i] = byte(i)
	}
	f := make([]byte, EthHeaderLen+hdr.IPv6Size+len(ext)+len(l4))
	(&hdr.EthernetFields{Dst: devMAC, Src: peerMAC, Type: EtherTypeIPv6}).Encode(f)
	if len(ext) == 0 {
		firstNext = proto
	}
	ip := hdr.IPv6(f[EthHeaderLen:])
	(&hdr.IPv6Fields{PayloadLen: uint16(len(ext) + len(l4)), NextHeader: firstNext, HopLimit: 64,
		Src: peer6, Dst: dev6}).Encode(ip)
	copy(ip[hdr.IPv6Size:], ext)
	seg := ip[hdr.IPv6Size+len(ext):]
	copy(seg, l4)
	switch proto {
	case hdr.ProtoTCP:
		hdr.TCP(seg).SetChecksum(ip.TransportChecksum(proto, seg))
	case hdr.ProtoUDP:
		c := ip.TransportChecksum(proto, seg)
		if c == 0 {
			c = 0xFFFF
		}
		hdr.UDP(seg).SetChecksum(c)
	}
	return f
}

// ext8 is one 8-byte extension header carrying next, with the two bytes
// after the length (a routing header's type and segments left, a fragment
// header's offset word, or the start of options).
func ext8(next, b2, b3 uint8) []byte { return []byte{next, 0, b2, b3, 0, 0, 0, 0} }

func TestClassifyIPv6(t *testing.T) {
	var pf parsedFrame
	f := frame6(0, nil, hdr.ProtoTCP, 100)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || !pf.l4CsumOK || pf.proto != ProtoTCP ||
		pf.l4Off != EthHeaderLen+hdr.IPv6Size || pf.l4Len != hdr.TCPMinSize+100 {
		t.Fatalf("TCP/IPv6: verdict %d %+v", v, pf)
	}
	// The engine gets the segment and the receiver's tuple.
	var tu hdr.Tuple
	if seg, ok := pf.tcpSegment(f, &tu); !ok || len(seg) != hdr.TCPMinSize+100 ||
		tu != (hdr.Tuple{LocalIP: netip.AddrFrom16(dev6), RemoteIP: netip.AddrFrom16(peer6), LocalPort: 80, RemotePort: 40000}) {
		t.Fatalf("tcpSegment: %v %+v", ok, tu)
	}
	f[len(f)-1] ^= 1
	if v := classify(f, devMAC, 1514, &pf, false); v != rxDropChecksum {
		t.Fatalf("corrupt TCP/IPv6: verdict %d", v)
	}
	// Through a hop-by-hop header (PadN) and a routing header of type 2.
	ext := append(ext8(hdr.ProtoIPv6Routing, 1, 4), ext8(hdr.ProtoUDP, 2, 0)...)
	f = frame6(hdr.ProtoIPv6HopByHop, ext, hdr.ProtoUDP, 30)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || !pf.l4CsumOK || pf.proto != ProtoUDP ||
		pf.l4Off != EthHeaderLen+hdr.IPv6Size+16 {
		t.Fatalf("UDP behind two extension headers: verdict %d %+v", v, pf)
	}
	hdr.UDP(f[pf.l4Off:]).SetChecksum(0)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxDropChecksum {
		t.Fatalf("zero UDP checksum over IPv6: verdict %d", v)
	}
	// A non-first fragment goes up unsummed, for the host to reassemble.
	f = frame6(hdr.ProtoIPv6Fragment, ext8(hdr.ProtoTCP, 0, 0x10), 0xFF, 16)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || !pf.fragment || pf.l4CsumOK {
		t.Fatalf("fragment: verdict %d %+v", v, pf)
	}
	// ICMPv6 (neighbour discovery, echo) goes up as it is.
	f = frame6(0, nil, hdr.ProtoICMPv6, 24)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || pf.proto != hdr.ProtoICMPv6 {
		t.Fatalf("ICMPv6: verdict %d", v)
	}
}

func TestClassifyIPv6Allocs(t *testing.T) {
	f := frame6(hdr.ProtoIPv6HopByHop, ext8(hdr.ProtoTCP, 1, 4), hdr.ProtoTCP, 100)
	var pf parsedFrame
	if n := testing.AllocsPerRun(100, func() {
		if classify(f, devMAC, 1514, &pf, false) != rxLegacy {
			t.Fatal("verdict")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per classify", n)
	}
}

// IPv6 bad input is dropped, each with its counter, and a good IPv6 frame
// behind it reaches the host unchanged.
func TestReceiveIPv6BadInputCounted(t *testing.T) {
	h := newHostSide(t, 4)
	chain := func(n int) []byte {
		var b []byte
		for i := range n {
			next := uint8(hdr.ProtoIPv6DstOpts)
			if i == n-1 {
				next = hdr.ProtoTCP
			}
			b = append(b, ext8(next, 1, 4)...)
		}
		return b
	}
	ipv6Drop := func(id IPv6Drop) func() uint64 { return func() uint64 { return h.dev.IPv6DropCount(id) } }
	stat := func(id rings.StatID) func() uint64 { return func() uint64 { return h.dev.Stat(id) } }
	good := frame6(0, nil, hdr.ProtoTCP, 200)
	jumbo := []byte{hdr.ProtoTCP, 0, hdr.IPv6OptJumboPayld, 4, 0, 1, 0, 0}
	inputs := []struct {
		name string
		f    []byte
		read func() uint64
	}{
		{"destination options three times (a loop)", frame6(hdr.ProtoIPv6DstOpts, chain(3), hdr.ProtoTCP, 10),
			ipv6Drop(IPv6DropExtChain)},
		{"routing header type 0", frame6(hdr.ProtoIPv6Routing, ext8(hdr.ProtoTCP, hdr.RoutingType0, 1), hdr.ProtoTCP, 10),
			ipv6Drop(IPv6DropRoutingType0)},
		{"atomic fragment", frame6(hdr.ProtoIPv6Fragment, ext8(hdr.ProtoTCP, 0, 0), hdr.ProtoTCP, 10),
			ipv6Drop(IPv6DropFragment)},
		{"non-final fragment of odd length", frame6(hdr.ProtoIPv6Fragment, ext8(hdr.ProtoTCP, 0, 1), hdr.ProtoTCP, 11),
			ipv6Drop(IPv6DropFragment)},
		{"jumbogram", frame6(hdr.ProtoIPv6HopByHop, jumbo, hdr.ProtoTCP, 10), ipv6Drop(IPv6DropJumbogram)},
		{"payload length past the frame", frame6(0, nil, hdr.ProtoTCP, 10)[:EthHeaderLen+hdr.IPv6Size+12],
			stat(rings.StatRxDropShort)},
	}
	for _, in := range inputs {
		before := in.read()
		if err := h.wire.Inject(in.f); err != nil {
			t.Fatal(err)
		}
		// Each drop is counted before the next frame is taken, and
		// the good frame below is taken last: waiting for its upload
		// waits for every count.
		if err := h.wire.Inject(good); err != nil {
			t.Fatal(err)
		}
		n, ok := h.notification()
		if !ok || n.Flags != rings.NtfLegacyUpload || int(n.Len) != len(good) {
			t.Fatalf("%s: good frame behind it: notification %+v ok=%v", in.name, n, ok)
		}
		h.postRx(n.Aux)
		h.rx.Publish()
		if got := in.read(); got != before+1 {
			t.Fatalf("%s: counter %d, want %d", in.name, got, before+1)
		}
	}
	if err := h.wire.Inject(good); err != nil {
		t.Fatal(err)
	}
	n, ok := h.notification()
	if !ok || n.Flags != rings.NtfLegacyUpload || n.Conn != rings.NoConn || int(n.Len) != len(good) {
		t.Fatalf("good IPv6 frame after the bad ones: notification %+v ok=%v", n, ok)
	}
	got, _ := h.mem.Map(h.bufs+rings.Addr(int(n.Aux)*h.bufLen), int(n.Len))
	if !bytes.Equal(got, good) {
		t.Fatal("legacy buffer does not hold the frame")
	}
	if h.dev.Stat(rings.StatRxDropEtherType) != 0 {
		t.Fatal("IPv6 counted as an unknown EtherType")
	}
}

// BenchmarkClassifyIPv6: the receive parser on TCP/IPv6 frames (a pure ACK
// and a full-sized segment, checksum summed over the IPv6 pseudo-header)
// beside the same TCP/IPv4 frames in the same run.
func BenchmarkClassifyIPv6(b *testing.B) {
	for _, payload := range []int{0, 1440} {
		for _, fam := range []string{"ipv4", "ipv6"} {
			f := tcpTestFrame(payload)
			if fam == "ipv6" {
				f = frame6(0, nil, hdr.ProtoTCP, payload) // 1514 bytes at 1440: no options
			}
			b.Run(fmt.Sprintf("%s/%d", fam, payload), func(b *testing.B) {
				var pf parsedFrame
				b.SetBytes(int64(len(f)))
				for b.Loop() {
					if classify(f, devMAC, 1514, &pf, false) != rxLegacy {
						b.Fatal("dropped")
					}
				}
			})
		}
	}
}
