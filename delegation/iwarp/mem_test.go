package iwarp

import (
	"math"
	"testing"

	"github.com/emunic/emunic/rings"
)

func newTable(t *testing.T, size int) (*MemTable, *rings.Arena) {
	ar, err := rings.NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	return NewMemTable(ar, size, 42), ar
}

func TestSTagScheme(t *testing.T) {
	m, ar := newTable(t, 16)
	a, _ := ar.Alloc(4096, 64)
	seen := map[uint32]bool{}
	var first uint32
	for i := 0; i < 40; i++ {
		s, err := m.Register(1, a, 0x10000, 4096, AccessRemoteWrite)
		if err != nil {
			t.Fatal(err)
		}
		if seen[s] {
			t.Fatalf("STag %#x handed out twice", s)
		}
		seen[s] = true
		if s < 0x100 {
			t.Fatalf("STag %#x has index 0", s)
		}
		if i == 0 {
			first = s
		}
		if err := m.Deregister(s); err != nil {
			t.Fatal(err)
		}
		if _, ae := m.Resolve(s, 1, 0x10000, 1, 0); ae != ErrSTagInvalid {
			t.Fatalf("deregistered STag resolves: %v", ae)
		}
	}
	// The same index comes back with another key.
	idx := map[uint32]int{}
	for s := range seen {
		idx[STagIndex(s)]++
	}
	if len(idx) > 16 {
		t.Fatalf("%d indices for a 16-slot table", len(idx))
	}
	m2, _ := newTable(t, 16)
	s2, _ := m2.Register(1, a, 0, 1, 0)
	if s2 != first {
		t.Fatal("same seed, different first STag")
	}
	if m.Len() != 0 {
		t.Fatal("Len after deregistering everything")
	}
	// A full table refuses.
	for i := 0; i < 16; i++ {
		if _, err := m.Register(1, a, 0, 1, 0); err != nil {
			if i < 15 { // one slot may map to index 0
				t.Fatal(err)
			}
		}
	}
	if _, err := m.Register(1, a, 0, 1, 0); err != ErrNoSTag {
		t.Fatalf("full table: %v", err)
	}
}

func TestResolveChecks(t *testing.T) {
	m, ar := newTable(t, 64)
	a, _ := ar.Alloc(4096, 64)
	const va = 0x7000_0000
	s, err := m.Register(3, a, va, 4096, AccessLocalWrite|AccessRemoteRead)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		stag, pd uint32
		to, n    uint64
		need     Access
		want     AccessError
	}{
		{s, 3, va, 4096, AccessRemoteRead, AccessOK},
		{s, 3, va + 4096, 0, AccessRemoteRead, AccessOK},
		{s, 3, va + 4095, 1, AccessLocalWrite, AccessOK},
		{s ^ 1, 3, va, 1, 0, ErrSTagInvalid},
		{s + 0x100, 3, va, 1, 0, ErrSTagInvalid},
		{0, 3, va, 1, 0, ErrSTagInvalid},
		{s, 4, va, 1, 0, ErrPDMismatch},
		{s, 3, va, 1, AccessRemoteWrite, ErrAccessRights},
		{s, 3, math.MaxUint64, 2, 0, ErrTOWrap},
		{s, 3, va - 1, 1, 0, ErrBaseBounds},
		{s, 3, va + 4096, 1, 0, ErrBaseBounds},
		{s, 3, va + 1, 4096, 0, ErrBaseBounds},
		{s, 3, va, math.MaxUint64 - va, 0, ErrBaseBounds},
		{s, 3, va + 4097, 0, 0, ErrBaseBounds},
	}
	for i, c := range cases {
		got, ae := m.Resolve(c.stag, c.pd, c.to, c.n, c.need)
		if ae != c.want {
			t.Fatalf("case %d: %v, want %v", i, ae, c.want)
		}
		if ae == AccessOK && got != a+rings.Addr(c.to-va) {
			t.Fatalf("case %d: address %#x", i, got)
		}
	}
	if ae := m.Invalidate(s, 4); ae != ErrPDMismatch {
		t.Fatal("invalidate from another PD")
	}
	if ae := m.Invalidate(s, 3); ae != AccessOK {
		t.Fatal(ae)
	}
	if _, ae := m.Resolve(s, 3, va, 1, 0); ae != ErrSTagInvalid {
		t.Fatal("invalidated STag resolves")
	}
	if ae := m.Invalidate(s, 3); ae != ErrSTagInvalid {
		t.Fatal("double invalidate")
	}
	s2, err := m.Revalidate(s, 0x5A)
	if err != nil || STagKey(s2) != 0x5A || STagIndex(s2) != STagIndex(s) {
		t.Fatal(err)
	}
	if _, ae := m.Resolve(s2, 3, va, 1, 0); ae != AccessOK {
		t.Fatal(ae)
	}
	if _, ae := m.Resolve(s, 3, va, 1, 0); ae != ErrSTagInvalid && STagKey(s) != 0x5A {
		t.Fatal("old key still resolves")
	}
	// Registration refuses ranges outside host memory and wrapping VAs.
	if _, err := m.Register(1, ar.Base()+rings.Addr(ar.Size())-10, 0, 11, 0); err == nil {
		t.Fatal("region past the end of host memory")
	}
	if _, err := m.Register(1, a, math.MaxUint64-10, 100, 0); err == nil {
		t.Fatal("wrapping VA")
	}
	if _, err := m.Register(1, a, 0, 1, 0x80); err == nil {
		t.Fatal("unknown access flag")
	}
	zb, _ := m.Register(1, a, 0x5555, 100, AccessZeroBased)
	if got, ae := m.Resolve(zb, 1, 99, 1, 0); ae != AccessOK || got != a+99 {
		t.Fatal("zero-based region")
	}
}

func TestMRCommands(t *testing.T) {
	m, ar := newTable(t, 4)
	a, _ := ar.Alloc(4096, 64)
	c := rings.Command{Opcode: rings.OpRegMR, Addr: a, Len: 4096, Arg3: 0x9000, Arg0: 5, Arg1: uint32(AccessRemoteWrite)}
	st, res := m.RegMRCommand(&c)
	if st != rings.StatusOK {
		t.Fatal(st)
	}
	if r, ok := m.Lookup(uint32(res)); !ok || r.PD != 5 || r.VA != 0x9000 || r.Length != 4096 || r.Addr != a {
		t.Fatalf("%+v", r)
	}
	for _, bad := range []rings.Command{
		{Addr: a, Len: 16, Arg1: 0x102},
		{Addr: a, Len: 16, Arg1: 0x41}, // fast registration takes no access flags
		{Addr: a, Len: 16, Arg1: 0x80},
		{Addr: 1, Len: 16, Arg1: rings.MRAccessFastReg},
		{Addr: 1, Len: 16},
		{Addr: a, Len: 16, Arg3: ^uint64(0)},
	} {
		if st, _ := m.RegMRCommand(&bad); st == rings.StatusOK {
			t.Fatalf("%+v accepted", bad)
		}
	}
	if m.DeregMRCommand(&rings.Command{Arg0: uint32(res)}) != rings.StatusOK || m.DeregMRCommand(&rings.Command{Arg0: uint32(res)}) == rings.StatusOK {
		t.Fatal("dereg")
	}
}

// TestFastRegister: an STag allocated for fast registration (REG_MR with
// MRAccessFastReg) is invalid until a REG_MR work request maps memory
// inside its bound under a new key; invalidation ends the mapping, and the
// next one must take another key.
func TestFastRegister(t *testing.T) {
	m, ar := newTable(t, 4)
	a, _ := ar.Alloc(8192, 64)
	st, res := m.RegMRCommand(&rings.Command{Opcode: rings.OpRegMR, Addr: a, Len: 8192, Arg0: 5, Arg1: rings.MRAccessFastReg})
	if st != rings.StatusOK {
		t.Fatal(st)
	}
	stag := uint32(res)
	if _, e := m.Resolve(stag, 5, 0, 1, 0); e != ErrSTagInvalid {
		t.Fatalf("a fresh fast-registration STag resolves: %v", e)
	}
	next := STag(STagIndex(stag), STagKey(stag)+1)
	rw := AccessLocalWrite | AccessRemoteWrite
	for _, bad := range []struct {
		stag, pd uint32
		addr     rings.Addr
		n        uint64
		access   Access
		want     AccessError
	}{
		{stag, 5, a, 16, rw, ErrSTagInvalid},                 // the same key
		{next, 6, a, 16, rw, ErrPDMismatch},                  // another PD
		{next, 5, a + 8000, 256, rw, ErrBaseBounds},          // past the bound
		{next, 5, a - 64, 16, rw, ErrBaseBounds},             // before it
		{next, 5, a, 16, AccessRemoteWrite, ErrAccessRights}, // remote write without local write
		{next, 5, a, 16, 0x80, ErrAccessRights},
	} {
		if e := m.FastRegister(bad.stag, bad.pd, bad.addr, uint64(bad.addr), bad.n, bad.access); e != bad.want {
			t.Fatalf("%+v: %v", bad, e)
		}
	}
	if e := m.FastRegister(next, 5, a+4096, 0x1000, 4096, rw); e != AccessOK {
		t.Fatal(e)
	}
	if got, e := m.Resolve(next, 5, 0x1800, 16, AccessRemoteWrite); e != AccessOK || got != a+4096+0x800 {
		t.Fatalf("resolve: %#x %v", got, e)
	}
	if _, e := m.Resolve(stag, 5, 0x1000, 16, 0); e != ErrSTagInvalid {
		t.Fatal("the old key resolves")
	}
	// Mapped: another REG_MR is refused until it is invalidated.
	third := STag(STagIndex(stag), STagKey(stag)+2)
	if e := m.FastRegister(third, 5, a, uint64(a), 16, rw); e != ErrSTagInvalid {
		t.Fatalf("REG_MR of a valid STag: %v", e)
	}
	if m.Invalidate(next, 5) != AccessOK {
		t.Fatal("invalidate")
	}
	if _, e := m.Resolve(next, 5, 0x1800, 16, 0); e != ErrSTagInvalid {
		t.Fatal("resolves after invalidation")
	}
	if e := m.FastRegister(third, 5, a, uint64(a), 16, rw); e != AccessOK {
		t.Fatal(e)
	}
	// An ordinary region is not for fast registration.
	st, res = m.RegMRCommand(&rings.Command{Opcode: rings.OpRegMR, Addr: a, Len: 64, Arg0: 5, Arg1: uint32(rw)})
	if st != rings.StatusOK || m.Invalidate(uint32(res), 5) != AccessOK {
		t.Fatal(st)
	}
	if e := m.FastRegister(uint32(res)+1, 5, a, uint64(a), 16, rw); e != ErrSTagInvalid {
		t.Fatalf("REG_MR work request on an ordinary region: %v", e)
	}
}
