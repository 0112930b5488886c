package rings

import (
	"net/netip"
	"testing"
)

// TestConnStateV2: SetAddrs picks version 1 for IPv4 and version 2 for
// IPv6; a version-2 block and its extension round-trip through Encode and
// Decode, and Addrs gives the addresses back.
func TestConnStateV2(t *testing.T) {
	var st ConnState
	var x ConnAddrExt
	v4a, v4b := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	st.SetAddrs(&x, v4a, v4b)
	if st.Version != ConnStateVersion || st.Family != 0 || x != (ConnAddrExt{}) {
		t.Fatalf("IPv4: version %d family %d ext %v, want version 1", st.Version, st.Family, x)
	}
	if l, r, ok := st.Addrs(nil); !ok || l != v4a || r != v4b {
		t.Fatalf("IPv4 Addrs: %v %v %v", l, r, ok)
	}

	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	st.SetAddrs(&x, v6a, v6b)
	st.LocalPort, st.RemotePort = 1, 2
	if st.Version != ConnStateVersion2 || st.Family != FamilyIPv6 || st.LocalIP != ([4]byte{}) {
		t.Fatalf("IPv6: %+v", st)
	}
	b := make([]byte, ConnStateSizeV2)
	st.Encode(ConnStateBlock(b[:ConnStateSize]))
	x.Encode(ConnAddrExtBlock(b[ConnStateSize:]))
	if b[CsOffFamily] != 6 || b[ConnStateSize+CaOffLocalAddr] != 0x20 || b[ConnStateSize+CaOffRemoteAddr+15] != 2 {
		t.Fatalf("encoded % x", b)
	}
	if !ConnStateBlock(b).ReservedZero() {
		t.Fatal("a good version-2 block has non-zero reserved bytes")
	}
	var st2 ConnState
	var x2 ConnAddrExt
	if err := st2.Decode(ConnStateBlock(b)); err != nil || st2 != st {
		t.Fatalf("Decode: %+v %v, want %+v", st2, err, st)
	}
	if err := x2.Decode(ConnAddrExtBlock(b[ConnStateSize:])); err != nil || x2 != x {
		t.Fatalf("Decode ext: %v %v", x2, err)
	}
	if l, r, ok := st2.Addrs(&x2); !ok || l != v6a || r != v6b {
		t.Fatalf("IPv6 Addrs: %v %v %v", l, r, ok)
	}
	if err := x2.Decode(make(ConnAddrExtBlock, ConnAddrExtSize-1)); err == nil {
		t.Fatal("short extension decoded")
	}

	// IPv4 in a version-2 block: the first 4 bytes of each field.
	st2.Family = FamilyIPv4
	x2 = ConnAddrExt{}
	copy(x2.LocalAddr[:], []byte{10, 0, 0, 1})
	copy(x2.RemoteAddr[:], []byte{10, 0, 0, 2})
	if l, r, ok := st2.Addrs(&x2); !ok || l != v4a || r != v4b {
		t.Fatalf("IPv4 in version 2: %v %v %v", l, r, ok)
	}
	x2.LocalAddr[4] = 1
	if _, _, ok := st2.Addrs(&x2); ok {
		t.Fatal("IPv4 address with trailing bytes accepted")
	}
	x2.LocalAddr[4] = 0
	if _, _, ok := st2.Addrs(nil); ok {
		t.Fatal("version 2 without its extension accepted")
	}
	st2.Family = 5
	if _, _, ok := st2.Addrs(&x2); ok {
		t.Fatal("unknown family accepted")
	}
	st2.Version = 3
	if _, _, ok := st2.Addrs(&x2); ok {
		t.Fatal("unknown version accepted")
	}
}

// TestConnStateV2Reserved: the bytes a version-2 block must keep zero, and
// the family it must name.
func TestConnStateV2Reserved(t *testing.T) {
	st := ConnState{Version: ConnStateVersion2, Family: FamilyIPv4}
	b := make(ConnStateBlock, ConnStateSize)
	for _, c := range []struct {
		name string
		mut  func(ConnStateBlock)
		ok   bool
	}{
		{"good", func(ConnStateBlock) {}, true},
		{"IPv6", func(b ConnStateBlock) { b[CsOffFamily] = byte(FamilyIPv6) }, true},
		{"no family", func(b ConnStateBlock) { b[CsOffFamily] = 0 }, false},
		{"unknown family", func(b ConnStateBlock) { b[CsOffFamily] = 7 }, false},
		{"local IP", func(b ConnStateBlock) { b[CsOffLocalIP+3] = 1 }, false},
		{"remote IP", func(b ConnStateBlock) { b[CsOffRemoteIP] = 1 }, false},
		{"reserved", func(b ConnStateBlock) { b[CsOffReserved] = 1 }, false},
		{"version 1 with a family", func(b ConnStateBlock) { le.PutUint16(b[CsOffVersion:], ConnStateVersion) }, false},
	} {
		st.Encode(b)
		c.mut(b)
		if got := b.ReservedZero(); got != c.ok {
			t.Errorf("%s: ReservedZero %v, want %v", c.name, got, c.ok)
		}
	}
}
