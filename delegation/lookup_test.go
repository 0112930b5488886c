package delegation

import (
	"math/rand/v2"
	"testing"
)

// The tuple table against a Go map, through random inserts and deletes
// (backward-shift deletion must keep every probe run intact).
func TestTupleTable(t *testing.T) {
	type key struct {
		ips   uint64
		ports uint32
	}
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
		return key{uint64(r.IntN(8))<<32 | uint64(r.IntN(64)), uint32(r.IntN(16))<<16 | uint32(r.IntN(16))}
	}
	for step := 0; step < 200000; step++ {
		k := randKey()
		idx, in := ref[k]
		switch {
		case !in && len(free) > 0 && r.IntN(2) == 0:
			idx = free[len(free)-1]
			free = free[:len(free)-1]
			tt.put(k.ips, k.ports, idx)
			ref[k] = idx
		case in && r.IntN(2) == 0:
			tt.del(k.ips, k.ports)
			delete(ref, k)
			free = append(free, idx)
		}
		if step%1000 == 0 {
			for k, want := range ref {
				if got, ok := tt.get(k.ips, k.ports); !ok || got != want {
					t.Fatalf("step %d: %v → %d %v, want %d", step, k, got, ok, want)
				}
			}
		}
		want, in := ref[k]
		if got, ok := tt.get(k.ips, k.ports); ok != in || (ok && got != want) {
			t.Fatalf("step %d: lookup of %v: %d %v, want %d %v", step, k, got, ok, want, in)
		}
	}
}

func TestLookupAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	r := newRig(t, defaultRigOpts())
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: flACK})
	n := testing.AllocsPerRun(1000, func() {
		if idx, ok := r.e.LookupSegment(ip, tcp); !ok || idx != 0 {
			t.Fatal("lookup failed")
		}
		if _, ok := r.e.Lookup(ipB, ipA, portB, portA+1); ok {
			t.Fatal("wrong port found")
		}
	})
	if n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}
