package verbs

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// verbsTCP6Frame builds an Ethernet/IPv6/TCP frame from [fd00::1]:40000,
// with the extension headers ext (already chained: ext's first byte is
// the Next Header of the last one, rewritten here to TCP) in front of the
// TCP header.
func verbsTCP6Frame(dst netip.Addr, dport uint16, flags uint8, payload int, ext []byte) []byte {
	l4 := make([]byte, hdr.TCPMinSize+payload)
	(&hdr.TCPFields{SrcPort: 40000, DstPort: dport, Flags: flags, Window: 1000}).Encode(l4)
	next := uint8(hdr.ProtoTCP)
	if len(ext) > 0 {
		ext = bytes.Clone(ext)
		ext[hdr.IPv6ExtOffNextHeader] = hdr.ProtoTCP
		next = hdr.ProtoIPv6DstOpts
	}
	f := make([]byte, hdr.EthernetSize+hdr.IPv6Size, hdr.EthernetSize+hdr.IPv6Size+len(ext)+len(l4))
	f[12], f[13] = hdr.EtherTypeIPv6>>8, hdr.EtherTypeIPv6&0xff
	ip := hdr.IPv6Fields{PayloadLen: uint16(len(ext) + len(l4)), NextHeader: next, HopLimit: 64,
		Src: hdr.IPv6Addr(netip.MustParseAddr("fd00::1").As16()), Dst: hdr.IPv6Addr(dst.As16())}
	ip.Encode(f[hdr.EthernetSize:])
	f = append(append(f, ext...), l4...)
	src, d := netip.MustParseAddr("fd00::1"), dst
	hdr.TCP(f[hdr.EthernetSize+hdr.IPv6Size+len(ext):]).UpdateChecksumAddr(src, d)
	return f
}

// TestVerbsHoldEarlyDataIPv6: an RDMA listener on a dual-stack host holds
// the early bytes of IPv6 connections to its port as it does IPv4 ones,
// through a destination-options header too, and nothing else.
func TestVerbsHoldEarlyDataIPv6(t *testing.T) {
	v, _ := fakeVerbs(t)
	me4, me6 := netip.MustParseAddr("10.0.0.2"), netip.MustParseAddr("fd00::2")
	keys := []listenKey{{me4, 4791}, {me6, 4791}}
	if err := v.listenOn(keys, &QPAttr{}); err != nil {
		t.Fatal(err)
	}
	if err := v.listenOn([]listenKey{{me6, 4791}}, &QPAttr{}); err == nil {
		t.Fatal("second RDMA listener on an IPv6 address's port accepted")
	}
	// A destination-options header of 8 bytes: two PadN bytes and four
	// of padding.
	dstOpts := []byte{0, 0, 1, 4, 0, 0, 0, 0}
	data := verbsTCP6Frame(me6, 4791, hdr.TCPFlagACK|hdr.TCPFlagPSH, 100, nil)
	for name, c := range map[string]struct {
		f    []byte
		hold bool
	}{
		"payload to the listener":        {data, true},
		"behind a destination options":   {verbsTCP6Frame(me6, 4791, hdr.TCPFlagACK, 10, dstOpts), true},
		"padded frame":                   {append(verbsTCP6Frame(me6, 4791, hdr.TCPFlagACK, 1, nil), 0, 0, 0, 0), true},
		"SYN":                            {verbsTCP6Frame(me6, 4791, hdr.TCPFlagSYN, 0, nil), false},
		"pure ACK":                       {verbsTCP6Frame(me6, 4791, hdr.TCPFlagACK, 0, nil), false},
		"payload to another port":        {verbsTCP6Frame(me6, 4792, hdr.TCPFlagACK, 100, nil), false},
		"payload to another address":     {verbsTCP6Frame(netip.MustParseAddr("fd00::3"), 4791, hdr.TCPFlagACK, 100, nil), false},
		"truncated":                      {data[:60], false},
		"payload length past the frame":  {func() []byte { f := bytes.Clone(data); f[18] = 0xff; return f }(), false},
		"version 4 in an IPv6 EtherType": {func() []byte { f := bytes.Clone(data); f[14] = 0x40; return f }(), false},
	} {
		if got := v.holdEarlyData(c.f); got != c.hold {
			t.Errorf("%s: hold %v, want %v", name, got, c.hold)
		}
	}
	// The held frame is the packet without the padding, under its IPv6
	// tuple.
	key := hdr.Tuple{LocalIP: me6, RemoteIP: netip.MustParseAddr("fd00::1"), LocalPort: 4791, RemotePort: 40000}
	v.mu.Lock()
	ef := v.early[key]
	v.mu.Unlock()
	if ef == nil || len(ef.frames) != 3 {
		t.Fatalf("held for %v: %+v, want 3 frames", key, ef)
	}
	for i, f := range ef.frames {
		if want := hdr.EthernetSize + hdr.IPv6Size + int(hdr.IPv6(f[hdr.EthernetSize:]).PayloadLen()); len(f) != want {
			t.Errorf("held frame %d: %d bytes, want %d (no padding)", i, len(f), want)
		}
	}
	_ = v.listenOn(keys, nil)
	if v.holdEarlyData(data) {
		t.Fatal("held after the listener closed")
	}
	v.mu.Lock()
	n := len(v.early)
	v.mu.Unlock()
	if n != 0 {
		t.Fatalf("%d flows still held after the listener closed", n)
	}
}
