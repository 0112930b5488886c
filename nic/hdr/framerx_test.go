package hdr

import (
	"errors"
	"net/netip"
	"testing"
)

// TestParseTCPFrameRx: one parse for either family gives the receiver's
// tuple and the segment (behind IPv6 extension headers too), without
// allocating; what is not an unfragmented TCP segment, or an IPv6 chain
// WalkIPv6 refuses, is an error.
func TestParseTCPFrameRx(t *testing.T) {
	eth := func(typ uint16, pkt []byte) []byte {
		b := make([]byte, EthernetSize+len(pkt))
		(&EthernetFields{Type: typ}).Encode(b)
		copy(b[EthernetSize:], pkt)
		return b
	}
	v4 := (&TCPFrameFields{Src: IPv4Addr{10, 0, 0, 1}, Dst: IPv4Addr{10, 0, 0, 2},
		TCP: TCPFields{SrcPort: 1234, DstPort: 80, Seq: 9, Flags: TCPFlagACK}, Payload: []byte("hi")}).Append(nil)
	p6, l4 := tcp6Packet([]uint8{ProtoIPv6HopByHop, ProtoIPv6DstOpts}, [][]byte{{1, 2, 0, 0}, {1, 2, 0, 0}}, 100)
	v6 := eth(EtherTypeIPv6, p6)
	for _, c := range []struct {
		name       string
		f          []byte
		local, rem netip.Addr
		lp, rp     uint16
		payload    int
	}{
		{"ipv4", v4, netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("10.0.0.1"), 80, 1234, 2},
		{"ipv6 behind two extension headers", v6, netip.AddrFrom16(addr6B), netip.AddrFrom16(addr6A), 80, 40000, 100},
	} {
		var k Tuple
		seg, err := ParseTCPFrameRx(c.f, &k)
		if err != nil || k != (Tuple{LocalIP: c.local, RemoteIP: c.rem, LocalPort: c.lp, RemotePort: c.rp}) || len(seg.Payload()) != c.payload {
			t.Fatalf("%s: %v, %+v, %d bytes", c.name, err, k, len(seg.Payload()))
		}
		if n := testing.AllocsPerRun(100, func() { _, _ = ParseTCPFrameRx(c.f, &k) }); n != 0 {
			t.Fatalf("%s: %v allocations per parse", c.name, n)
		}
	}
	rh0, _ := tcp6Packet([]uint8{ProtoIPv6Routing}, [][]byte{{0, 1, 0, 0, 0, 0}}, 10)
	frag := append([]byte(nil), p6...)
	frag[IPv6OffNextHeader] = ProtoIPv6Fragment
	for name, f := range map[string][]byte{
		"routing type 0": eth(EtherTypeIPv6, rh0),
		"bad chain":      eth(EtherTypeIPv6, frag),
		"arp":            eth(EtherTypeARP, make([]byte, 28)),
		"ipv6 short":     v6[:EthernetSize+IPv6Size+10],
		"ipv6 tcp cut":   eth(EtherTypeIPv6, p6[:l4+10]),
		"ipv4 truncated": v4[:EthernetSize+IPv4MinSize+5],
		"runt":           v4[:10],
	} {
		var k Tuple
		if _, err := ParseTCPFrameRx(f, &k); err == nil {
			t.Errorf("%s: parsed", name)
		} else if name == "arp" && !errors.Is(err, ErrNotTCP) {
			t.Errorf("arp: %v, want ErrNotTCP", err)
		}
	}
}
