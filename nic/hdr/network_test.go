package hdr

import (
	"encoding/binary"
	"net/netip"
	"testing"
)

// TestNetworkIPv4: the IPv4 view through the Network interface, and the
// tuples read from it.
func TestNetworkIPv4(t *testing.T) {
	b := make([]byte, IPv4MinSize+TCPMinSize+3)
	f := IPv4Fields{TTL: 64, Proto: ProtoTCP, Src: IPv4Addr{10, 0, 0, 1}, Dst: IPv4Addr{10, 0, 0, 2}, TotalLen: uint16(len(b))}
	f.Encode(b)
	(&TCPFields{SrcPort: 1000, DstPort: 80}).Encode(b[IPv4MinSize:])
	var n Network = IPv4(b)
	src, dst := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	if n.SourceAddress() != src || n.DestinationAddress() != dst || n.TransportProtocol() != ProtoTCP ||
		len(n.Payload()) != TCPMinSize+3 || n.PseudoHeaderSum(23) != PseudoHeaderSum(ProtoTCP, f.Src, f.Dst, 23) {
		t.Fatalf("Network view of %v", f)
	}
	tcp := TCP(b[IPv4MinSize:])
	rx, tx := IPv4(b).RxTuple(tcp), IPv4(b).TxTuple(tcp)
	if rx != (Tuple{LocalIP: dst, RemoteIP: src, LocalPort: 80, RemotePort: 1000}) ||
		tx != (Tuple{LocalIP: src, RemoteIP: dst, LocalPort: 1000, RemotePort: 80}) {
		t.Fatalf("rx %v tx %v", rx, tx)
	}
}

// TestPseudoHeaderSumAddr: for IPv4 addresses it is the IPv4 pseudo-header;
// for IPv6 it sums RFC 8200's pseudo-header (addresses, 32-bit length,
// three zero bytes, next header), written out byte by byte here.
func TestPseudoHeaderSumAddr(t *testing.T) {
	a4, b4 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.7")
	if Fold(PseudoHeaderSumAddr(ProtoTCP, a4, b4, 1234)) != Fold(PseudoHeaderSum(ProtoTCP, a4.As4(), b4.As4(), 1234)) {
		t.Fatal("IPv4 addresses: not the IPv4 pseudo-header")
	}
	a6, b6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:ffff::fe:2")
	var ph [40]byte
	s, d := a6.As16(), b6.As16()
	copy(ph[0:], s[:])
	copy(ph[16:], d[:])
	binary.BigEndian.PutUint32(ph[32:], 70000)
	ph[39] = ProtoTCP
	if got, want := Fold(PseudoHeaderSumAddr(ProtoTCP, a6, b6, 70000)), Fold(Sum(0, ph[:])); got != want {
		t.Fatalf("IPv6 pseudo-header sum %#x, want %#x", got, want)
	}
	// A segment checksummed over it verifies, and not over other addresses.
	seg := make(TCP, TCPMinSize+5)
	(&TCPFields{SrcPort: 1, DstPort: 2}).Encode(seg)
	seg.UpdateChecksumAddr(a6, b6)
	if !seg.ChecksumOKAddr(a6, b6) || seg.ChecksumOKAddr(b6, a4) {
		t.Fatal("IPv6 TCP checksum")
	}
}
