package nic

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// The transmit checksum tests build their frames and check what leaves
// with gVisor's header and checksum packages, not the device's own hdr
// code: a mistake shared by the builder and the device would otherwise
// pass.

var (
	csumSrc4 = tcpip.AddrFrom4([4]byte{10, 0, 0, 1})
	csumDst4 = tcpip.AddrFrom4([4]byte{10, 0, 0, 2})
	csumSrc6 = tcpip.AddrFrom16(dev6)
	csumDst6 = tcpip.AddrFrom16(peer6)
)

// csumFrame describes a frame for the checksum tests.
type csumFrame struct {
	v6      bool
	proto   tcpip.TransportProtocolNumber
	ext     []byte // IPv6 extension headers, linked, the first of type extType
	extType uint8
	ipOpts  []byte // IPv4 options (a multiple of 4 bytes)
	payload []byte
}

// build returns the Ethernet frame with junk in every checksum field the
// device is to fill in, and the offset of the transport header.
func (c csumFrame) build() ([]byte, int) {
	l4n := header.TCPMinimumSize
	if c.proto == header.UDPProtocolNumber {
		l4n = header.UDPMinimumSize
	}
	l4 := make([]byte, l4n+len(c.payload))
	copy(l4[l4n:], c.payload)
	if c.proto == header.UDPProtocolNumber {
		header.UDP(l4).Encode(&header.UDPFields{SrcPort: 1000, DstPort: 2000, Length: uint16(len(l4)), Checksum: 0xDEAD})
	} else {
		header.TCP(l4).Encode(&header.TCPFields{SrcPort: 40000, DstPort: 80, SeqNum: 1, AckNum: 2,
			DataOffset: header.TCPMinimumSize, Flags: header.TCPFlagAck | header.TCPFlagPsh, WindowSize: 1000, Checksum: 0xBEEF})
	}
	var ip []byte
	if c.v6 {
		ip = make([]byte, header.IPv6MinimumSize+len(c.ext)+len(l4))
		header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: uint16(len(c.ext) + len(l4)),
			TransportProtocol: c.proto, HopLimit: 64, SrcAddr: csumSrc6, DstAddr: csumDst6})
		if len(c.ext) > 0 {
			ip[6] = c.extType // the fixed header's Next Header
			copy(ip[header.IPv6MinimumSize:], c.ext)
		}
		copy(ip[header.IPv6MinimumSize+len(c.ext):], l4)
	} else {
		hl := header.IPv4MinimumSize + len(c.ipOpts)
		ip = make([]byte, hl+len(l4))
		header.IPv4(ip).Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), TTL: 64, Protocol: uint8(c.proto),
			SrcAddr: csumSrc4, DstAddr: csumDst4, Flags: header.IPv4FlagDontFragment})
		if len(c.ipOpts) > 0 {
			ip[0] = 0x40 | uint8(hl/4)
			copy(ip[header.IPv4MinimumSize:], c.ipOpts)
		}
		header.IPv4(ip).SetChecksum(0x1234)
		copy(ip[hl:], l4)
	}
	typ := header.IPv4ProtocolNumber
	if c.v6 {
		typ = header.IPv6ProtocolNumber
	}
	f := make([]byte, header.EthernetMinimumSize+len(ip))
	header.Ethernet(f).Encode(&header.EthernetFields{SrcAddr: tcpip.LinkAddress(devMAC[:]), DstAddr: tcpip.LinkAddress(peerMAC[:]), Type: typ})
	copy(f[header.EthernetMinimumSize:], ip)
	return f, len(f) - len(l4)
}

// checkCsums verifies, with gVisor's code, the IPv4 header checksum and
// the transport checksum of the frame f whose IP header starts at l3 and
// transport header at l4.
func checkCsums(t *testing.T, c csumFrame, f []byte, l3, l4 int) {
	t.Helper()
	var src, dst tcpip.Address
	if c.v6 {
		ip := header.IPv6(f[l3:])
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	} else {
		ip := header.IPv4(f[l3:])
		if !ip.IsChecksumValid() {
			t.Errorf("IPv4 header checksum %#04x wrong", ip.Checksum())
		}
		src, dst = ip.SourceAddress(), ip.DestinationAddress()
	}
	seg := f[l4:]
	if got := checksum.Checksum(seg, header.PseudoHeaderChecksum(c.proto, src, dst, uint16(len(seg)))); got != 0xFFFF {
		t.Errorf("transport checksum wrong: the segment sums to %#04x", got)
	}
	if c.proto == header.UDPProtocolNumber && header.UDP(seg).Checksum() == 0 {
		t.Error("UDP checksum 0 on the wire (means none)")
	}
}

// sameBut fails unless got is want with only the checksum fields changed.
func sameBut(t *testing.T, got, want []byte, fields ...int) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("frame length %d, want %d", len(got), len(want))
	}
	g := bytes.Clone(got)
	for _, off := range fields {
		copy(g[off:off+2], want[off:off+2])
	}
	if !bytes.Equal(g, want) {
		t.Errorf("the device changed more than the checksum fields:\n got % x\nwant % x", got, want)
	}
}

// txLegacy posts one legacy descriptor for the frame at a.
func (h *hostSide) txLegacy(a rings.Addr, n int, fl rings.TxFlags, vlan uint16) {
	e := h.tx.Next()
	(&rings.Tx{Conn: rings.NoConn, Addr: a, Len: uint32(n), Flags: fl, VLAN: vlan}).Encode(rings.TxDesc(e))
	h.tx.Commit()
}

// destOpts is a Destination Options header of 8 bytes (PadN), followed by
// next.
func destOpts(next uint8) []byte { return []byte{next, 0, 1, 4, 0, 0, 0, 0} }

func csumCases() map[string]csumFrame {
	payload := make([]byte, 999) // odd: the last word is half padding
	for i := range payload {
		payload[i] = byte(i*7 + 3)
	}
	return map[string]csumFrame{
		"IPv4 TCP":             {proto: header.TCPProtocolNumber, payload: payload},
		"IPv4 TCP, IP options": {proto: header.TCPProtocolNumber, ipOpts: []byte{1, 1, 1, 0}, payload: payload[:100]},
		"IPv4 TCP, no payload": {proto: header.TCPProtocolNumber},
		"IPv4 UDP":             {proto: header.UDPProtocolNumber, payload: payload},
		"IPv6 TCP":             {v6: true, proto: header.TCPProtocolNumber, payload: payload},
		"IPv6 UDP":             {v6: true, proto: header.UDPProtocolNumber, payload: payload[:200]},
		"IPv6 TCP, dest opts":  {v6: true, proto: header.TCPProtocolNumber, ext: destOpts(hdr.ProtoTCP), extType: hdr.ProtoIPv6DstOpts, payload: payload},
		"IPv6 UDP, dest opts":  {v6: true, proto: header.UDPProtocolNumber, ext: destOpts(hdr.ProtoUDP), extType: hdr.ProtoIPv6DstOpts, payload: payload[:300]},
		"IPv6 UDP, hop-by-hop": {v6: true, proto: header.UDPProtocolNumber, ext: destOpts(hdr.ProtoUDP), extType: hdr.ProtoIPv6HopByHop, payload: payload[:64]},
		"IPv6 UDP, routing, 0 left": {v6: true, proto: header.UDPProtocolNumber,
			ext: []byte{hdr.ProtoUDP, 2, 4, 0, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, extType: hdr.ProtoIPv6Routing, payload: payload[:10]},
	}
}

// TestTxCsumFills: a legacy frame with TxCsum leaves with right IPv4
// header and TCP/UDP checksums, whatever the host left in the fields, and
// only those bytes changed; the host's buffer is left as it was.
func TestTxCsumFills(t *testing.T) {
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(4096, 64)
	n := 0
	for name, c := range csumCases() {
		t.Run(name, func(t *testing.T) {
			f, l4 := c.build()
			_ = h.mem.WriteAt(f, buf)
			h.txLegacy(buf, len(f), rings.TxCsum, 0)
			got := h.wire.Next(t, 2*time.Second)
			n++
			checkCsums(t, c, got, header.EthernetMinimumSize, l4)
			fields := []int{l4 + hdr.TCPOffChecksum}
			if c.proto == header.UDPProtocolNumber {
				fields[0] = l4 + hdr.UDPOffChecksum
			}
			if !c.v6 {
				fields = append(fields, header.EthernetMinimumSize+hdr.IPv4OffChecksum)
			}
			sameBut(t, got, f, fields...)
			if host, _ := h.mem.Map(buf, len(f)); !bytes.Equal(host, f) {
				t.Error("the device wrote into the host's transmit buffer")
			}
		})
	}
	if got := h.dev.Stat(rings.StatTxCsum); got != uint64(n) {
		t.Errorf("tx_csum = %d, want %d", got, n)
	}
	if got := h.dev.Stat(rings.StatTxDropCsum) + h.dev.Stat(rings.StatTxDropBadDesc); got != 0 {
		t.Errorf("%d drops", got)
	}
}

// TestTxCsumUDPZero: a UDP datagram whose checksum comes out zero leaves
// with 0xFFFF (zero means "no checksum"), over IPv4 and IPv6.
func TestTxCsumUDPZero(t *testing.T) {
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(2048, 64)
	for _, v6 := range []bool{false, true} {
		c := csumFrame{v6: v6, proto: header.UDPProtocolNumber, payload: make([]byte, 16)}
		f, l4 := c.build()
		// Choose the payload's last word so the whole sums to 0xFFFF with
		// the checksum field zero: the checksum is then ^0xFFFF = 0.
		seg := f[l4:]
		header.UDP(seg).SetChecksum(0)
		var src, dst tcpip.Address
		if v6 {
			src, dst = csumSrc6, csumDst6
		} else {
			src, dst = csumSrc4, csumDst4
		}
		s := checksum.Checksum(seg, header.PseudoHeaderChecksum(c.proto, src, dst, uint16(len(seg))))
		binary.BigEndian.PutUint16(seg[len(seg)-2:], ^s)
		_ = h.mem.WriteAt(f, buf)
		h.txLegacy(buf, len(f), rings.TxCsum, 0)
		got := h.wire.Next(t, 2*time.Second)
		if cs := header.UDP(got[l4:]).Checksum(); cs != 0xFFFF {
			t.Errorf("v6=%v: UDP checksum %#04x, want 0xffff", v6, cs)
		}
		checkCsums(t, c, got, header.EthernetMinimumSize, l4)
	}
}

// TestTxCsumVLAN: on a device on a VLAN the tag goes in and the checksums
// are right behind it (one copy for both); on a device on no VLAN a frame
// the host tagged itself is parsed past its tag.
func TestTxCsumVLAN(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		c := csumFrame{v6: v6, proto: header.TCPProtocolNumber, payload: []byte("tagged and checksummed")}
		f, l4 := c.build()

		h := newHostSideConfig(t, 0, Config{VLAN: 10})
		buf, _ := h.mem.Alloc(2048, 64)
		_ = h.mem.WriteAt(f, buf)
		pcp := uint16(hdr.MakeVLANTCI(3, 10))
		h.txLegacy(buf, len(f), rings.TxCsum, pcp)
		h.txLegacy(buf, len(f), rings.TxCsum, 0)
		for _, tci := range []uint16{pcp, 10} {
			got := h.wire.Next(t, 2*time.Second)
			if v := hdr.EthernetVLAN(got); !hdr.IsVLANTPID(v.TPID()) || uint16(v.TCI()) != tci {
				t.Fatalf("v6=%v: frame not tagged %d: % x", v6, tci, got[:18])
			}
			checkCsums(t, c, got, header.EthernetMinimumSize+hdr.VLANTagSize, l4+hdr.VLANTagSize)
		}
		if host, _ := h.mem.Map(buf, len(f)); !bytes.Equal(host, f) {
			t.Error("the device wrote into the host's transmit buffer")
		}

		h = newHostSide(t, 0)
		pre := tagged(f, hdr.EtherTypeVLAN, 20)
		buf, _ = h.mem.Alloc(2048, 64)
		_ = h.mem.WriteAt(pre, buf)
		h.txLegacy(buf, len(pre), rings.TxCsum, 0)
		got := h.wire.Next(t, 2*time.Second)
		checkCsums(t, c, got, header.EthernetMinimumSize+hdr.VLANTagSize, l4+hdr.VLANTagSize)
		if h.dev.Stat(rings.StatTxCsum) != 1 {
			t.Errorf("host-tagged frame: tx_csum %d", h.dev.Stat(rings.StatTxCsum))
		}
	}
}

// badCsumFrames are frames with TxCsum whose checksums the device cannot
// place: each is dropped and counted in tx_drop_csum.
func badCsumFrames() map[string][]byte {
	tcp4, l4 := csumFrame{proto: header.TCPProtocolNumber, payload: make([]byte, 40)}.build()
	udp4, _ := csumFrame{proto: header.UDPProtocolNumber, payload: make([]byte, 40)}.build()
	tcp6, l6 := csumFrame{v6: true, proto: header.TCPProtocolNumber, payload: make([]byte, 40)}.build()
	udp6, u6 := csumFrame{v6: true, proto: header.UDPProtocolNumber, payload: make([]byte, 40)}.build()
	const l3 = header.EthernetMinimumSize
	mod := func(f []byte, fn func(f []byte)) []byte { f = bytes.Clone(f); fn(f); return f }
	ext6 := func(typ uint8, ext []byte, proto tcpip.TransportProtocolNumber) []byte {
		f, _ := csumFrame{v6: true, proto: proto, ext: ext, extType: typ, payload: make([]byte, 40)}.build()
		return f
	}
	return map[string][]byte{
		"ARP":                  mod(tcp4, func(f []byte) { binary.BigEndian.PutUint16(f[12:], hdr.EtherTypeARP) }),
		"unknown EtherType":    mod(tcp4, func(f []byte) { binary.BigEndian.PutUint16(f[12:], 0x88B5) }),
		"Ethernet header only": tcp4[:l3],
		"double tagged":        tagged(tagged(tcp4, hdr.EtherTypeVLAN, 20), hdr.EtherTypeQinQ, 30),
		"truncated tag":        tagged(tcp4, hdr.EtherTypeVLAN, 20)[:l3+2],
		"IPv4 ICMP":            mod(tcp4, func(f []byte) { f[l3+9] = hdr.ProtoICMP }),
		"IPv4 version 5":       mod(tcp4, func(f []byte) { f[l3] = 0x55 }),
		"IPv4 IHL 4":           mod(tcp4, func(f []byte) { f[l3] = 0x44 }),
		"IPv4 IHL past frame":  mod(tcp4, func(f []byte) { f[l3] = 0x4F })[:l3+40],
		"IPv4 header cut":      tcp4[:l3+12],
		"IPv4 total length past frame": mod(tcp4, func(f []byte) {
			binary.BigEndian.PutUint16(f[l3+2:], uint16(len(f)-l3+1))
		}),
		"IPv4 total length under IHL": mod(tcp4, func(f []byte) { binary.BigEndian.PutUint16(f[l3+2:], 16) }),
		"IPv4 first fragment (MF)":    mod(tcp4, func(f []byte) { binary.BigEndian.PutUint16(f[l3+6:], hdr.IPv4FlagMF) }),
		"IPv4 later fragment":         mod(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l3+6:], 3) }),
		"TCP header cut": mod(tcp4, func(f []byte) {
			binary.BigEndian.PutUint16(f[l3+2:], uint16(l4-l3+12))
		}),
		"TCP data offset 4": mod(tcp4, func(f []byte) { f[l4+12] = 4 << 4 }),
		"TCP data offset past segment": mod(tcp4, func(f []byte) {
			binary.BigEndian.PutUint16(f[l3+2:], uint16(l4-l3+40))
			f[l4+12] = 11 << 4
		})[:l4+40],
		"UDP length short": mod(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], 20) }),
		"UDP length long":  mod(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], uint16(len(f)-l4+2)) }),
		"UDP length 7":     mod(udp4, func(f []byte) { binary.BigEndian.PutUint16(f[l4+4:], 7) }),
		"IPv6 header cut":  tcp6[:l3+30],
		"IPv6 version 4":   mod(tcp6, func(f []byte) { f[l3] = 0x40 }),
		"IPv6 payload length past frame": mod(tcp6, func(f []byte) {
			binary.BigEndian.PutUint16(f[l3+4:], uint16(len(f)-l3-header.IPv6MinimumSize+1))
		}),
		"IPv6 TCP header cut": mod(tcp6, func(f []byte) {
			binary.BigEndian.PutUint16(f[l3+4:], 19)
		})[:l6+19],
		"IPv6 UDP length wrong": mod(udp6, func(f []byte) { binary.BigEndian.PutUint16(f[u6+4:], 9) }),
		"IPv6 ICMPv6":           mod(tcp6, func(f []byte) { f[l3+6] = hdr.ProtoICMPv6 }),
		"IPv6 fragment header": ext6(hdr.ProtoIPv6Fragment,
			[]byte{hdr.ProtoTCP, 0, 0, 1, 0, 0, 0, 7}, header.TCPProtocolNumber), // offset 0, M set
		"IPv6 routing, 1 left": ext6(hdr.ProtoIPv6Routing,
			[]byte{hdr.ProtoUDP, 2, 4, 1, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, header.UDPProtocolNumber),
		"IPv6 routing type 0": ext6(hdr.ProtoIPv6Routing,
			[]byte{hdr.ProtoUDP, 2, 0, 0, 0, 0, 0, 0, 0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9}, header.UDPProtocolNumber),
		"IPv6 ext header cut": ext6(hdr.ProtoIPv6DstOpts, []byte{hdr.ProtoTCP, 9, 1, 4, 0, 0, 0, 0}, header.TCPProtocolNumber),
		"IPv6 ext loop": ext6(hdr.ProtoIPv6DstOpts,
			append(append(destOpts(hdr.ProtoIPv6DstOpts), destOpts(hdr.ProtoIPv6DstOpts)...), destOpts(hdr.ProtoTCP)...), header.TCPProtocolNumber),
		"IPv6 no next header": ext6(hdr.ProtoIPv6DstOpts, destOpts(hdr.ProtoIPv6NoNext), header.TCPProtocolNumber),
	}
}

// TestTxCsumBadFramesDropped: every frame the device cannot checksum is a
// counted drop that sends nothing; the frames around it go out.
func TestTxCsumBadFramesDropped(t *testing.T) {
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(4096, 64)
	good, l4 := csumFrame{proto: header.UDPProtocolNumber, payload: []byte("between bad ones")}.build()
	goodBuf := buf + 2048
	_ = h.mem.WriteAt(good, goodBuf)
	n := uint64(0)
	for name, f := range badCsumFrames() {
		_ = h.mem.WriteAt(f, buf)
		h.txLegacy(buf, len(f), rings.TxCsum, 0)
		h.txLegacy(goodBuf, len(good), rings.TxCsum, 0)
		n++
		h.waitStat(rings.StatTxDropCsum, n)
		got := h.wire.Next(t, 2*time.Second)
		sameBut(t, got, good, l4+hdr.UDPOffChecksum, header.EthernetMinimumSize+hdr.IPv4OffChecksum)
		checkCsums(t, csumFrame{proto: header.UDPProtocolNumber}, got, header.EthernetMinimumSize, l4)
		if host, _ := h.mem.Map(buf, len(f)); !bytes.Equal(host, f) {
			t.Errorf("%s: the device wrote into the host's buffer", name)
		}
	}
	if got := h.dev.Stat(rings.StatTxDropCsum); got != n {
		t.Errorf("tx_drop_csum = %d, want %d", got, n)
	}
	if got := h.dev.Stat(rings.StatTxCsum); got != n {
		t.Errorf("tx_csum = %d, want %d (the good frames)", got, n)
	}
	if got := h.dev.Stat(rings.StatTxFrames); got != n {
		t.Errorf("tx_frames = %d, want %d", got, n)
	}
}

// TestTxFlagsRefused: a legacy descriptor with a flag it cannot carry
// (TxPush, TxFin, a reserved bit), or with TxCsum at a device whose
// driver did not enable it, is a counted bad descriptor, never a frame
// sent as if the flag were not there. A frame without TxCsum goes out
// byte for byte, wrong checksums and all.
func TestTxFlagsRefused(t *testing.T) {
	f, _ := csumFrame{proto: header.TCPProtocolNumber, payload: []byte("x")}.build()
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(2048, 64)
	_ = h.mem.WriteAt(f, buf)
	bad := []rings.TxFlags{rings.TxPush, rings.TxFin, rings.TxPush | rings.TxCsum, 1 << 3, 1 << 15}
	for _, fl := range bad {
		h.txLegacy(buf, len(f), fl, 0)
	}
	h.txLegacy(buf, len(f), 0, 0)
	if got := h.wire.Next(t, 2*time.Second); !bytes.Equal(got, f) {
		t.Fatalf("a frame without TxCsum changed on its way: % x", got)
	}
	h.waitStat(rings.StatTxDropBadDesc, uint64(len(bad)))

	off := newHostSideConfig(t, 0, Config{Withheld: rings.FeatTxCsum})
	buf, _ = off.mem.Alloc(2048, 64)
	_ = off.mem.WriteAt(f, buf)
	off.txLegacy(buf, len(f), rings.TxCsum, 0)
	off.txLegacy(buf, len(f), 0, 0)
	if got := off.wire.Next(t, 2*time.Second); !bytes.Equal(got, f) {
		t.Fatalf("FeatTxCsum withheld: % x", got)
	}
	off.waitStat(rings.StatTxDropBadDesc, 1)
	if off.dev.Stat(rings.StatTxCsum) != 0 || off.dev.Stat(rings.StatTxFrames) != 1 {
		t.Errorf("FeatTxCsum withheld: tx_csum %d, tx_frames %d", off.dev.Stat(rings.StatTxCsum), off.dev.Stat(rings.StatTxFrames))
	}
}

// FuzzFillChecksums: whatever the bytes, the parser does not panic or
// read past the frame; a frame it refuses is left untouched; one it takes
// changes only in checksum fields and is a fixed point (a second pass
// changes nothing); an IPv4 one then has a right header checksum by
// gVisor's reckoning.
func FuzzFillChecksums(f *testing.F) {
	for _, c := range csumCases() {
		fr, _ := c.build()
		f.Add(fr)
	}
	for _, fr := range badCsumFrames() {
		f.Add(fr)
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		fr := bytes.Clone(in)
		if !fillChecksums(fr) {
			if !bytes.Equal(fr, in) {
				t.Fatal("a refused frame was changed")
			}
			return
		}
		diff := 0
		for i := range fr {
			if fr[i] != in[i] {
				diff++
			}
		}
		if diff > 4 {
			t.Fatalf("%d bytes changed, at most 4 checksum bytes may", diff)
		}
		again := bytes.Clone(fr)
		if !fillChecksums(again) || !bytes.Equal(again, fr) {
			t.Fatal("a second pass changed the frame")
		}
		l3 := header.EthernetMinimumSize
		typ := binary.BigEndian.Uint16(fr[12:])
		if hdr.IsVLANTPID(typ) {
			l3 += hdr.VLANTagSize
			typ = binary.BigEndian.Uint16(fr[16:])
		}
		if typ == hdr.EtherTypeIPv4 && !header.IPv4(fr[l3:]).IsChecksumValid() {
			t.Fatal("IPv4 header checksum wrong")
		}
	})
}

// TestFillChecksumsAllocs: the transmit path's parser allocates nothing.
func TestFillChecksumsAllocs(t *testing.T) {
	for _, c := range []csumFrame{
		{proto: header.TCPProtocolNumber, payload: make([]byte, 1400)},
		{v6: true, proto: header.UDPProtocolNumber, ext: destOpts(hdr.ProtoUDP), extType: hdr.ProtoIPv6DstOpts, payload: make([]byte, 1000)},
	} {
		f, _ := c.build()
		if n := testing.AllocsPerRun(100, func() { fillChecksums(f) }); n != 0 {
			t.Errorf("%v allocations per frame", n)
		}
	}
}
