package delegation

import (
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// TestOffloadV2: a version-2 state block (the 128 bytes with Family, then
// the address extension) is accepted from host memory for IPv4, and every
// malformed one is BAD_PARAM: unknown version or family, version-1 address
// bytes set, IPv4 addresses with trailing bytes, a zero address, a Len too
// short for the extension, and IPv4-mapped or multicast IPv6 addresses.
// An IPv6 connection is taken, found by its tuple, and snapshots as
// version 2 with its addresses in the extension.
func TestOffloadV2(t *testing.T) {
	now := int64(1e9)
	env := newTestEnv(t, 1<<20, &now)
	e := NewEngine(Config{MaxConns: 16}, env)
	good, _ := pairStates(pairOpts{issA: 1, issB: 2, ts: true, sack: true, wsA: 7, wsB: 7})
	a, _ := env.arena.Alloc(rings.ConnStateSizeV2, 64)
	blk, _ := env.arena.Map(a, rings.ConnStateSizeV2)

	v2 := func(port uint16, fam rings.AddrFamily, local, remote []byte) rings.ConnState {
		st := good
		st.LocalPort = port
		st.Version, st.Family = rings.ConnStateVersion2, fam
		st.LocalIP, st.RemoteIP = [4]byte{}, [4]byte{}
		st.Encode(blk[:rings.ConnStateSize])
		var x rings.ConnAddrExt
		copy(x.LocalAddr[:], local)
		copy(x.RemoteAddr[:], remote)
		x.Encode(blk[rings.ConnStateSize:])
		return st
	}
	idx := uint32(0)
	want := func(name string, n uint32, status rings.Status) {
		t.Helper()
		if got := e.OffloadAt(idx, a, n); got != status {
			t.Errorf("%s: %v, want %v", name, got, status)
		}
		if status == rings.StatusOK {
			idx++
		}
	}

	v2(portA, rings.FamilyIPv4, ipA[:], ipB[:])
	want("short Len", rings.ConnStateSizeV2-1, rings.StatusBadParam)
	want("v2 IPv4", rings.ConnStateSizeV2, rings.StatusOK)
	if i, ok := e.Lookup(rxTuple(ipB, ipA, portB, portA)); !ok || i != 0 {
		t.Fatalf("lookup of the version-2 connection: %d %v", i, ok)
	}
	var snap rings.ConnState
	if s := e.Snapshot(0, &snap); s != rings.StatusOK {
		t.Fatal(s)
	}
	if snap.Version != rings.ConnStateVersion || snap.LocalIP != ipA || snap.RemoteIP != ipB {
		t.Errorf("snapshot of an IPv4 connection: version %d %v %v, want version 1", snap.Version, snap.LocalIP, snap.RemoteIP)
	}

	v2(portA+1, 5, ipA[:], ipB[:])
	want("unknown family", rings.ConnStateSizeV2, rings.StatusBadParam)
	v2(portA+1, 0, ipA[:], ipB[:])
	want("no family", rings.ConnStateSizeV2, rings.StatusBadParam)
	v2(portA+1, rings.FamilyIPv4, ipA[:], ipB[:])
	blk[rings.CsOffLocalIP] = 10
	want("version-1 address bytes", rings.ConnStateSizeV2, rings.StatusBadParam)
	v2(portA+1, rings.FamilyIPv4, append(ipA[:], 1), ipB[:])
	want("IPv4 with trailing bytes", rings.ConnStateSizeV2, rings.StatusBadParam)
	v2(portA+1, rings.FamilyIPv4, nil, ipB[:])
	want("zero address", rings.ConnStateSizeV2, rings.StatusBadParam)
	mapped := netip.MustParseAddr("::ffff:10.0.0.1").As16()
	v2(portA+1, rings.FamilyIPv6, mapped[:], mapped[:])
	want("IPv4-mapped IPv6", rings.ConnStateSizeV2, rings.StatusBadParam)
	multi := netip.MustParseAddr("ff02::1").As16()
	six, six2 := netip.MustParseAddr("2001:db8::1").As16(), netip.MustParseAddr("2001:db8::2").As16()
	v2(portA+1, rings.FamilyIPv6, six[:], multi[:])
	want("IPv6 multicast peer", rings.ConnStateSizeV2, rings.StatusBadParam)
	v2(portA+1, rings.FamilyIPv6, six[:], six2[:])
	want("IPv6", rings.ConnStateSizeV2, rings.StatusOK)
	t6 := hdr.Tuple{LocalIP: netip.AddrFrom16(six), RemoteIP: netip.AddrFrom16(six2), LocalPort: portA + 1, RemotePort: portB}
	if i, ok := e.Lookup(&t6); !ok || i != 1 {
		t.Fatalf("lookup of the IPv6 connection: %d %v", i, ok)
	}
	var x rings.ConnAddrExt
	if s := e.SnapshotAddrs(1, &snap, &x); s != rings.StatusOK || snap.Version != rings.ConnStateVersion2 ||
		snap.Family != rings.FamilyIPv6 || snap.LocalIP != ([4]byte{}) || x.LocalAddr != six || x.RemoteAddr != six2 {
		t.Errorf("snapshot of an IPv6 connection: %v version %d family %d %v", s, snap.Version, snap.Family, x)
	}
	if s := e.SnapshotAddrs(0, &snap, &x); s != rings.StatusOK || snap.Version != rings.ConnStateVersion || x != (rings.ConnAddrExt{}) {
		t.Errorf("snapshot of an IPv4 connection with the extension: %v %v", s, x)
	}
	st := v2(portA+1, rings.FamilyIPv4, ipA[:], ipB[:])
	st.Version = 3
	st.Encode(blk[:rings.ConnStateSize])
	want("unknown version", rings.ConnStateSizeV2, rings.StatusBadParam)

	// Version 1 still: Family must be zero there.
	st = good
	st.LocalPort = portA + 2
	st.Encode(blk[:rings.ConnStateSize])
	blk[rings.CsOffFamily] = byte(rings.FamilyIPv4)
	want("v1 with a family", rings.ConnStateSize, rings.StatusBadParam)
	blk[rings.CsOffFamily] = 0
	want("v1", rings.ConnStateSize, rings.StatusOK)
}
