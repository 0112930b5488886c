package verbs

import (
	"errors"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/emunic/emunic/rings"
)

// fakeRegistrar hands out STags and records what is registered.
type fakeRegistrar struct {
	mu      sync.Mutex
	next    uint32
	live    map[uint32]*MR
	regs    int
	deregs  int
	failReg error
}

func newFakeRegistrar() *fakeRegistrar {
	return &fakeRegistrar{next: 0x100, live: map[uint32]*MR{}}
}

func (f *fakeRegistrar) RegMR(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failReg != nil {
		return nil, f.failReg
	}
	f.next += 0x100
	f.regs++
	mr := &MR{PD: pd, LKey: f.next, RKey: f.next, Addr: addr, VA: uint64(addr), Len: length, Access: access}
	f.live[mr.LKey] = mr
	return mr, nil
}

func (f *fakeRegistrar) DeregMR(mr *MR) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.live[mr.LKey] != mr {
		return errors.New("fake: not registered")
	}
	delete(f.live, mr.LKey)
	f.deregs++
	return nil
}

func (f *fakeRegistrar) liveCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live)
}

const la = AccessLocalWrite

func mustGet(t *testing.T, c *RegCache, pd PD, a rings.Addr, n, access int) *MR {
	t.Helper()
	mr, err := c.Get(pd, a, n, access)
	if err != nil {
		t.Fatalf("Get(%d, %#x, %d, %#x): %v", pd, uint64(a), n, access, err)
	}
	return mr
}

func TestRegCacheHitsCoveringRange(t *testing.T) {
	f := newFakeRegistrar()
	c := NewRegCache(f, RegCacheConfig{})
	a := mustGet(t, c, 1, 0x1000, 4096, la)
	// Inside the registered range: the same registration.
	for _, r := range [][2]int{{0x1000, 4096}, {0x1000, 1}, {0x1800, 100}, {0x1fff, 1}} {
		b := mustGet(t, c, 1, rings.Addr(r[0]), r[1], la)
		if b != a {
			t.Errorf("Get(%#x, %d) registered again", r[0], r[1])
		}
	}
	// Not covered, another PD, other access: new registrations.
	for _, r := range []struct {
		pd     PD
		a, n   int
		access int
	}{
		{1, 0x1fff, 2, la}, {1, 0xfff, 2, la}, {1, 0x800, 8192, la},
		{2, 0x1000, 100, la}, {1, 0x1000, 100, la | AccessRemoteWrite}, {1, 0x1000, 100, 0},
	} {
		b := mustGet(t, c, r.pd, rings.Addr(r.a), r.n, r.access)
		if b == a {
			t.Errorf("Get(pd %d, %#x, %d, %#x) reused a registration that does not fit", r.pd, r.a, r.n, r.access)
		}
	}
	// The wider registration now covers [0x800, 0x2800): found for a
	// range only it covers.
	if b := mustGet(t, c, 1, 0x900, 0x1f00, la); b.Addr != 0x800 {
		t.Errorf("covering registration not found: got one at %#x", uint64(b.Addr))
	}
	s := c.Stats()
	if s.Hits != 5 || s.Misses != 7 || s.Registrations != 7 || f.regs != 7 {
		t.Errorf("stats %+v, registrar %d registrations", s, f.regs)
	}
	if s.Entries != 7 || s.InUse != 7 {
		t.Errorf("entries %d in use %d", s.Entries, s.InUse)
	}
}

func TestRegCacheRefcountAndLRU(t *testing.T) {
	f := newFakeRegistrar()
	c := NewRegCache(f, RegCacheConfig{MaxUnused: 2})
	var mrs []*MR
	for i := range 4 {
		mrs = append(mrs, mustGet(t, c, 1, rings.Addr(0x10000*(i+1)), 4096, la))
	}
	again := mustGet(t, c, 1, 0x10000, 4096, la)
	if again != mrs[0] {
		t.Fatal("no hit")
	}
	// Two references on mrs[0]: one Put keeps it in use.
	if err := c.Put(mrs[0]); err != nil {
		t.Fatal(err)
	}
	if s := c.Stats(); s.InUse != 4 {
		t.Fatalf("in use %d after one of two Puts", s.InUse)
	}
	for _, mr := range mrs {
		if err := c.Put(mr); err != nil {
			t.Fatal(err)
		}
	}
	// Four unused, two kept: the two least recently released went.
	s := c.Stats()
	if s.Evictions != 2 || s.Entries != 2 || f.liveCount() != 2 || s.Deregistrations != 2 {
		t.Fatalf("after the Puts: %+v, %d live", s, f.liveCount())
	}
	if f.live[mrs[0].LKey] != nil || f.live[mrs[1].LKey] != nil {
		t.Error("evicted the most recently used")
	}
	// A kept one is a hit again; an evicted one is registered again.
	if mustGet(t, c, 1, 0x40000, 4096, la) != mrs[3] {
		t.Error("kept registration not reused")
	}
	if mustGet(t, c, 1, 0x10000, 4096, la) == mrs[0] {
		t.Error("evicted registration handed out")
	}
	// Misuse is an error, not a panic.
	if err := c.Put(mrs[0]); err == nil {
		t.Error("Put of an evicted region accepted")
	}
	if err := c.Put(nil); err == nil {
		t.Error("Put(nil) accepted")
	}
	if err := c.Put(&MR{}); err == nil {
		t.Error("Put of a foreign region accepted")
	}
	if mustGet(t, c, 1, 0x30000, 100, la) != mrs[2] {
		t.Error("kept registration not reused")
	}
	if err := c.Put(mrs[2]); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(mrs[2]); err == nil {
		t.Error("one Put too many accepted")
	}
	if err := mrs[3].Dereg(); err == nil {
		t.Error("Dereg of a cached region accepted")
	}
}

func TestRegCacheInvalidate(t *testing.T) {
	f := newFakeRegistrar()
	c := NewRegCache(f, RegCacheConfig{})
	inUse := mustGet(t, c, 1, 0x1000, 0x1000, la)  // [0x1000, 0x2000)
	unused := mustGet(t, c, 1, 0x3000, 0x1000, la) // [0x3000, 0x4000)
	remote := mustGet(t, c, 2, 0x1800, 0x100, la|AccessRemoteRead)
	far := mustGet(t, c, 1, 0x9000, 0x1000, la) // untouched
	if err := c.Put(unused); err != nil {
		t.Fatal(err)
	}
	if err := c.Put(remote); err != nil {
		t.Fatal(err)
	}
	// Free [0x1f00, 0x3100): overlaps inUse, unused; not remote, not far.
	if n := c.Invalidate(0x1f00, 0x1200); n != 2 {
		t.Fatalf("Invalidate removed %d registrations, want 2", n)
	}
	if f.live[unused.LKey] != nil {
		t.Error("unused overlapping registration still registered")
	}
	if f.live[inUse.LKey] == nil {
		t.Error("registration in use deregistered under its user")
	}
	if f.live[remote.LKey] == nil || f.live[far.LKey] == nil {
		t.Error("non-overlapping registration deregistered")
	}
	// The doomed one is no longer found, even for memory it covers.
	if mr := mustGet(t, c, 1, 0x1000, 0x100, la); mr == inUse {
		t.Error("invalidated registration handed out")
	} else if err := c.Put(mr); err != nil {
		t.Fatal(err)
	}
	// Its last Put deregisters it.
	if err := c.Put(inUse); err != nil {
		t.Fatal(err)
	}
	if f.live[inUse.LKey] != nil {
		t.Error("invalidated registration survived its last Put")
	}
	// Edge overlaps: an invalidation ending exactly at a start, or
	// starting exactly at an end, touches nothing.
	if n := c.Invalidate(0x8000, 0x1000); n != 0 {
		t.Errorf("range ending at a registration's start removed %d", n)
	}
	if n := c.Invalidate(0xa000, 0x1000); n != 0 {
		t.Errorf("range starting at a registration's end removed %d", n)
	}
	if n := c.Invalidate(0x9fff, 1); n != 1 {
		t.Errorf("last byte: removed %d", n)
	}
	if n := c.Invalidate(0, 0); n != 0 {
		t.Error("empty invalidation removed something")
	}
	if n := c.Invalidate(^rings.Addr(0)-10, 100); n != 0 {
		t.Error("wrapping invalidation removed something")
	}
	s := c.Stats()
	if s.Invalidations != 3 {
		t.Errorf("invalidations %d, want 3", s.Invalidations)
	}
	if err := c.Put(far); err != nil {
		t.Fatal(err)
	}
}

func TestRegCacheBadInputAndErrors(t *testing.T) {
	f := newFakeRegistrar()
	c := NewRegCache(f, RegCacheConfig{MaxUnused: -1})
	for _, n := range []int{0, -1} {
		if _, err := c.Get(1, 0x1000, n, la); err == nil {
			t.Errorf("Get of %d bytes accepted", n)
		}
	}
	if _, err := c.Get(1, ^rings.Addr(0)-10, 100, la); err == nil {
		t.Error("wrapping range accepted")
	}
	var nilCache *RegCache
	if _, err := nilCache.Get(1, 0x1000, 1, la); err == nil {
		t.Error("nil cache Get accepted")
	}
	if nilCache.Invalidate(0, 1) != 0 {
		t.Error("nil cache invalidated")
	}
	f.failReg = errors.New("device says no")
	if _, err := c.Get(1, 0x1000, 10, la); err == nil {
		t.Error("registration failure not reported")
	}
	f.failReg = nil
	if s := c.Stats(); s.Errors != 1 || s.Entries != 0 || s.Misses != 1 {
		t.Errorf("after a failed registration: %+v", s)
	}
	// MaxUnused < 0: the last Put deregisters.
	mr := mustGet(t, c, 1, 0x1000, 10, la)
	if err := c.Put(mr); err != nil {
		t.Fatal(err)
	}
	if f.liveCount() != 0 {
		t.Error("unused registration kept with MaxUnused < 0")
	}
	// Close: in-use registrations go at their last Put; Get fails.
	mr = mustGet(t, c, 1, 0x1000, 10, la)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(1, 0x1000, 10, la); err == nil {
		t.Error("Get after Close")
	}
	if err := c.Put(mr); err != nil {
		t.Fatal(err)
	}
	if f.liveCount() != 0 {
		t.Error("registration outlived Close and its Put")
	}
}

// TestRegCacheConcurrent hammers the cache from several goroutines (run
// with -race) and checks that nothing in use is ever deregistered and that
// everything is deregistered at the end.
func TestRegCacheConcurrent(t *testing.T) {
	f := newFakeRegistrar()
	c := NewRegCache(f, RegCacheConfig{MaxUnused: 8})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(g), 1))
			for range 2000 {
				a := rings.Addr(0x1000 * (1 + r.IntN(32)))
				n := 1 + r.IntN(0x3000)
				if r.IntN(10) == 0 {
					c.Invalidate(a, n)
					continue
				}
				mr, err := c.Get(PD(1+r.IntN(2)), a, n, la)
				if err != nil {
					t.Error(err)
					return
				}
				f.mu.Lock()
				ok := f.live[mr.LKey] == mr
				f.mu.Unlock()
				if !ok || uint64(mr.Addr) > uint64(a) || uint64(mr.Addr)+uint64(mr.Len) < uint64(a)+uint64(n) {
					t.Errorf("Get returned a dead or short registration")
					return
				}
				if err := c.Put(mr); err != nil {
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	s := c.Stats()
	if s.InUse != 0 {
		t.Errorf("%d still in use", s.InUse)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	if f.liveCount() != 0 {
		t.Errorf("%d registrations left after Close", f.liveCount())
	}
	t.Logf("%+v", c.Stats())
}
