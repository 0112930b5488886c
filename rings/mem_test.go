package rings

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"testing"
	"unsafe"
)

func TestNewArena(t *testing.T) {
	for _, n := range []int{0, -1, math.MinInt} {
		if _, err := NewArena(n); err == nil {
			t.Errorf("NewArena(%d) succeeded", n)
		}
	}
	a, err := NewArena(100)
	if err != nil {
		t.Fatal(err)
	}
	if a.Size() != 128 || a.Base() != ArenaBase || a.InUse() != 0 {
		t.Fatalf("size %d base %#x in use %d", a.Size(), a.Base(), a.InUse())
	}
	b, _ := a.Map(a.Base(), a.Size())
	if uintptr(unsafe.Pointer(&b[0]))%CacheLine != 0 {
		t.Fatal("arena memory is not 64-byte aligned")
	}
	if _, err := NewArenaOn(nil); err == nil {
		t.Error("NewArenaOn(nil) succeeded")
	}
	if _, err := NewArenaOn(b[1:65]); err == nil {
		t.Error("NewArenaOn on unaligned memory succeeded")
	}
}

// TestDMABounds: every access that is not entirely inside host memory fails
// with a *DMAError wrapping ErrOutOfRange, whatever the arithmetic would
// have done (addresses near 2^64, huge or negative lengths, below the base);
// exactly up to the end is fine, one byte past is not.
func TestDMABounds(t *testing.T) {
	a, _ := NewArena(4096)
	base, end := a.Base(), a.Base()+Addr(a.Size())
	cases := []struct {
		name string
		addr Addr
		n    int
		ok   bool
	}{
		{"whole arena", base, 4096, true},
		{"first byte", base, 1, true},
		{"last byte", end - 1, 1, true},
		{"empty at end", end, 0, true},
		{"last 64 bytes", end - 64, 64, true},
		{"empty at base", base, 0, true},
		{"one past the end", end, 1, false},
		{"straddles the end", end - 4, 5, false},
		{"whole arena plus one", base, 4097, false},
		{"past the end, empty", end + 1, 0, false},
		{"below base", base - 1, 1, false},
		{"below base, reaching in", base - 1, 2, false},
		{"address zero", 0, 1, false},
		{"address zero, empty", 0, 0, false},
		{"near 2^64", math.MaxUint64, 1, false},
		{"near 2^64, empty", math.MaxUint64, 0, false},
		{"wraps past 2^64 into the arena", math.MaxUint64 - 15, int(base) + 32, false},
		{"huge length", base, math.MaxInt, false},
		{"huge length from the last byte", end - 1, math.MaxInt, false},
		{"negative length", base, -1, false},
		{"most negative length", base + 8, math.MinInt, false},
		{"offset overflowing int", base + 1<<63, 1, false},
	}
	for _, tc := range cases {
		check := func(op string, err error) {
			t.Helper()
			if tc.ok {
				if err != nil {
					t.Errorf("%s: %s(%#x, %d) = %v", tc.name, op, uint64(tc.addr), tc.n, err)
				}
				return
			}
			var de *DMAError
			if !errors.As(err, &de) || !errors.Is(err, ErrOutOfRange) {
				t.Errorf("%s: %s(%#x, %d) = %v, want a *DMAError wrapping ErrOutOfRange", tc.name, op, uint64(tc.addr), tc.n, err)
				return
			}
			if de.Op != op || de.Addr != tc.addr || de.Len != tc.n {
				t.Errorf("%s: error %+v does not describe the %s", tc.name, *de, op)
			}
			if de.Error() == "" {
				t.Errorf("%s: empty message", tc.name)
			}
		}
		if got := a.Contains(tc.addr, tc.n); got != tc.ok {
			t.Errorf("%s: Contains = %v", tc.name, got)
		}
		m, err := a.Map(tc.addr, tc.n)
		check("map", err)
		if err == nil && (len(m) != tc.n || cap(m) != tc.n) {
			t.Errorf("%s: Map returned len %d cap %d, want both %d", tc.name, len(m), cap(m), tc.n)
		}
		if tc.n >= 0 && tc.n <= 1<<16 {
			check("read", a.ReadAt(make([]byte, tc.n), tc.addr))
			check("write", a.WriteAt(make([]byte, tc.n), tc.addr))
		}
	}
	// Reads and writes move the bytes.
	if err := a.WriteAt([]byte("hello"), end-5); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 5)
	if err := a.ReadAt(got, end-5); err != nil || string(got) != "hello" {
		t.Fatalf("ReadAt = %q, %v", got, err)
	}
	m, _ := a.Map(end-5, 5)
	if string(m) != "hello" {
		t.Fatalf("Map sees %q", m)
	}
	// A failed write changes nothing.
	if err := a.WriteAt([]byte("xxxxxx"), end-5); err == nil {
		t.Fatal("write past the end succeeded")
	}
	if string(m) != "hello" {
		t.Fatalf("a failed write modified memory: %q", m)
	}
}

func TestArenaAlloc(t *testing.T) {
	a, _ := NewArena(1 << 16)
	mustAlloc := func(n, align int) Addr {
		t.Helper()
		addr, err := a.Alloc(n, align)
		if err != nil {
			t.Fatalf("Alloc(%d, %d): %v", n, align, err)
		}
		al := align
		if al <= 0 {
			al = CacheLine
		}
		if uint64(addr-a.Base())%uint64(al) != 0 {
			t.Fatalf("Alloc(%d, %d) = %#x, misaligned", n, align, uint64(addr))
		}
		return addr
	}
	for _, tc := range []struct{ n, align int }{{0, 0}, {-5, 0}, {8, 3}, {8, 48}, {1 << 17, 0}, {math.MaxInt, 0}, {math.MaxInt - 63, 64}} {
		if _, err := a.Alloc(tc.n, tc.align); err == nil {
			t.Errorf("Alloc(%d, %d) succeeded", tc.n, tc.align)
		}
	}
	x := mustAlloc(100, 0)
	y := mustAlloc(1, 4096)
	z := mustAlloc(64, 8)
	if a.InUse() != 165 {
		t.Fatalf("InUse = %d", a.InUse())
	}
	// A huge request after a non-zero offset must fail cleanly, not overflow.
	if _, err := a.Alloc(math.MaxInt-8, 4096); err == nil {
		t.Fatal("huge aligned Alloc succeeded")
	}
	// Memory comes back zeroed.
	m, _ := a.Map(x, 100)
	for i := range m {
		m[i] = 0xFF
	}
	if err := a.Free(x); err != nil {
		t.Fatal(err)
	}
	if err := a.Free(x); err == nil {
		t.Fatal("double free succeeded")
	}
	if err := a.Free(x + 1); err == nil {
		t.Fatal("free of an address inside nothing succeeded")
	}
	x2 := mustAlloc(100, 0)
	m, _ = a.Map(x2, 100)
	for _, b := range m {
		if b != 0 {
			t.Fatal("Alloc returned dirty memory")
		}
	}
	// Free everything, in an order that needs coalescing both ways: then
	// the whole arena is one span again.
	for _, addr := range []Addr{y, x2, z} {
		if err := a.Free(addr); err != nil {
			t.Fatal(err)
		}
	}
	if a.InUse() != 0 {
		t.Fatalf("InUse = %d after freeing everything", a.InUse())
	}
	if len(a.free) != 1 {
		t.Fatalf("free list %v not coalesced", a.free)
	}
	all := mustAlloc(1<<16, 0)
	if all != a.Base() {
		t.Fatalf("whole-arena Alloc at %#x", uint64(all))
	}
	if _, err := a.Alloc(1, 0); err == nil {
		t.Fatal("Alloc from a full arena succeeded")
	}
}

// TestArenaAllocRandom runs random allocations and frees against a model:
// live allocations never overlap and stay inside memory, InUse is their
// sum, and freeing everything coalesces back to one span.
func TestArenaAllocRandom(t *testing.T) {
	const size = 1 << 16
	a, _ := NewArena(size)
	r := rand.New(rand.NewPCG(1, 2))
	live := map[Addr]int{}
	for step := 0; step < 20000; step++ {
		if len(live) > 0 && r.IntN(2) == 0 {
			for addr := range live { // a random-enough live allocation
				if err := a.Free(addr); err != nil {
					t.Fatal(err)
				}
				delete(live, addr)
				break
			}
			continue
		}
		n := 1 + r.IntN(2048)
		align := 1 << r.IntN(10)
		addr, err := a.Alloc(n, align)
		if err != nil {
			continue // fragmented or full: fine
		}
		if uint64(addr-a.Base())%uint64(align) != 0 || !a.Contains(addr, n) {
			t.Fatalf("Alloc(%d, %d) = %#x", n, align, uint64(addr))
		}
		live[addr] = n
		// No overlap with any other live allocation.
		addrs := make([]Addr, 0, len(live))
		sum := int64(0)
		for a, n := range live {
			addrs = append(addrs, a)
			sum += int64(n)
		}
		sort.Slice(addrs, func(i, j int) bool { return addrs[i] < addrs[j] })
		for i := 1; i < len(addrs); i++ {
			if addrs[i-1]+Addr(live[addrs[i-1]]) > addrs[i] {
				t.Fatalf("allocations %#x+%d and %#x overlap", uint64(addrs[i-1]), live[addrs[i-1]], uint64(addrs[i]))
			}
		}
		if a.InUse() != sum {
			t.Fatalf("InUse %d, live sum %d", a.InUse(), sum)
		}
	}
	for addr := range live {
		if err := a.Free(addr); err != nil {
			t.Fatal(err)
		}
	}
	if a.InUse() != 0 || len(a.free) != 1 || a.free[0] != (span{0, size}) {
		t.Fatalf("after freeing everything: in use %d, free list %v", a.InUse(), a.free)
	}
}
