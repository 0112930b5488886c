package seqnum

import (
	"math/rand/v2"
	"testing"
)

func TestSeqCompare(t *testing.T) {
	cases := []struct {
		a, b       Value
		lt, le, gt bool
	}{
		{0, 1, true, true, false},
		{1, 0, false, false, true},
		{5, 5, false, true, false},
		{0xFFFFFFFF, 0, true, true, false}, // wraps: 2^32-1 is just before 0
		{0, 0xFFFFFFFF, false, false, true},
		{0xFFFFFF00, 0x100, true, true, false},
		{0x7FFFFFFF, 0, false, false, true},
	}
	for _, c := range cases {
		if c.a.LessThan(c.b) != c.lt || c.a.LessThanEq(c.b) != c.le || c.a.GreaterThan(c.b) != c.gt || c.a.GreaterThanEq(c.b) != !c.lt {
			t.Errorf("%#x vs %#x: lt %v le %v gt %v ge %v", uint32(c.a), uint32(c.b),
				c.a.LessThan(c.b), c.a.LessThanEq(c.b), c.a.GreaterThan(c.b), c.a.GreaterThanEq(c.b))
		}
	}
}

func TestSeqRangeWrap(t *testing.T) {
	lo := Value(0xFFFFFFF0)
	hi := lo.Add(0x20) // 0x10, past the wrap
	for _, v := range []Value{0xFFFFFFF0, 0xFFFFFFFF, 0, 0xF} {
		if !v.InRange(lo, hi) {
			t.Errorf("%#x not in [%#x,%#x)", uint32(v), uint32(lo), uint32(hi))
		}
	}
	for _, v := range []Value{0x10, 0xFFFFFFEF, 0x7FFFFFFF} {
		if v.InRange(lo, hi) {
			t.Errorf("%#x in [%#x,%#x)", uint32(v), uint32(lo), uint32(hi))
		}
	}
	if hi.Sub(lo) != 0x20 {
		t.Fatal(hi.Sub(lo))
	}
	if Value(5).InRange(5, 5) {
		t.Fatal("empty range contains its start")
	}
	if Max(0xFFFFFFFF, 1) != 1 || Min(0xFFFFFFFF, 1) != 0xFFFFFFFF {
		t.Fatal("Max/Min across the wrap")
	}
}

// TestSeqProperties checks the relations against 64-bit arithmetic for
// values less than 2^31 apart, at random bases including near the wrap.
func TestSeqProperties(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 100000; i++ {
		base := r.Uint32()
		if i%4 == 0 {
			base = 0xFFFFFFFF - uint32(r.IntN(1<<16))
		}
		da, db := int64(r.IntN(1<<30)), int64(r.IntN(1<<30))
		a, b := Value(base).Add(uint32(da)), Value(base).Add(uint32(db))
		if a.LessThan(b) != (da < db) || a.LessThanEq(b) != (da <= db) || a.GreaterThan(b) != (da > db) {
			t.Fatalf("base %#x da %d db %d", base, da, db)
		}
		if da <= db && b.Sub(a) != uint32(db-da) {
			t.Fatalf("sub")
		}
		lo, n := Value(base), uint32(r.IntN(1<<30))
		if a.InRange(lo, lo.Add(n)) != (da < int64(n)) {
			t.Fatalf("inRange base %#x da %d n %d", base, da, n)
		}
	}
}
