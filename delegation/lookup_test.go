package delegation

import (
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// The tuple table against a Go map, through random inserts and deletes
// (backward-shift deletion must keep every probe run intact).
func TestTupleTable(t *testing.T) {
	type key = hdr.Tuple
	const n = 512
	tt := newTupleTable(n)
	ref := map[key]uint32{}
	free := make([]uint32, 0, n)
	for i := uint32(0); i < n; i++ {
		free = append(free, i)
	}
	r := rand.New(rand.NewPCG(3, 4))
	randKey := func() key {
		// Few distinct values, so that hashes collide and runs form.
		return key{RemoteIP: netip.AddrFrom4([4]byte{10, 0, 0, byte(r.IntN(8))}), LocalIP: netip.AddrFrom4([4]byte{10, 0, 1, byte(r.IntN(64))}),
			RemotePort: uint16(r.IntN(16)), LocalPort: uint16(r.IntN(16))}
	}
	for step := 0; step < 200000; step++ {
		k := randKey()
		idx, in := ref[k]
		switch {
		case !in && len(free) > 0 && r.IntN(2) == 0:
			idx = free[len(free)-1]
			free = free[:len(free)-1]
			tt.put(&k, idx)
			ref[k] = idx
		case in && r.IntN(2) == 0:
			tt.del(&k)
			delete(ref, k)
			free = append(free, idx)
		}
		if step%1000 == 0 {
			for k, want := range ref {
				if got, ok := tt.get(&k); !ok || got != want {
					t.Fatalf("step %d: %v → %d %v, want %d", step, k, got, ok, want)
				}
			}
		}
		want, in := ref[k]
		if got, ok := tt.get(&k); ok != in || (ok && got != want) {
			t.Fatalf("step %d: lookup of %v: %d %v, want %d %v", step, k, got, ok, want, in)
		}
	}
}

// The one-entry flow cache never answers for a key that has gone or moved
// to another index.
func TestTupleTableLastHit(t *testing.T) {
	tt := newTupleTable(4)
	k := hdr.Tuple{LocalIP: netip.AddrFrom4([4]byte{10, 0, 0, 1}), RemoteIP: netip.AddrFrom4([4]byte{10, 0, 0, 2}), LocalPort: 1, RemotePort: 2}
	tt.put(&k, 3)
	for range 2 { // the second get is the cache's
		if got, ok := tt.get(&k); !ok || got != 3 {
			t.Fatalf("get after put: %d %v, want 3", got, ok)
		}
	}
	tt.del(&k)
	if got, ok := tt.get(&k); ok {
		t.Fatalf("get after del: %d, want none", got)
	}
	tt.put(&k, 1)
	if got, ok := tt.get(&k); !ok || got != 1 {
		t.Fatalf("get after a new put: %d %v, want 1", got, ok)
	}
	other := k
	other.RemotePort = 9
	if got, ok := tt.get(&other); ok {
		t.Fatalf("another key hit the cache: %d", got)
	}
}

func TestLookupAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := newRig(t, defaultRigOpts())
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK})
	miss := rxTuple(ipB, ipA, portB, portA+1)
	n := testing.AllocsPerRun(1000, func() {
		if idx, ok := r.e.LookupSegment(ip, tcp); !ok || idx != 0 {
			t.Fatal("lookup failed")
		}
		if _, ok := r.e.Lookup(miss); ok {
			t.Fatal("wrong port found")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}

// rxTuple is the tuple of a segment from src:sport to dst:dport, as its
// receiver (dst) sees it.
func rxTuple(src, dst [4]byte, sport, dport uint16) *hdr.Tuple {
	return &hdr.Tuple{LocalIP: netip.AddrFrom4(dst), RemoteIP: netip.AddrFrom4(src), LocalPort: dport, RemotePort: sport}
}
