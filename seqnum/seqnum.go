// Package seqnum is TCP sequence-number arithmetic: 32-bit values that wrap,
// compared modulo 2^32 (RFC 1982 serial arithmetic). It is a leaf that the
// engine, the host driver's flow tracking and the tests share, so that there
// is one definition of "before" for everyone.
//
// a is before b when the signed distance from b to a is negative. That is
// right whenever the two are less than 2^31 apart, as every pair TCP compares
// is (windows are at most 2^30).
package seqnum

// Value is a TCP sequence number.
type Value uint32

// LessThan reports v < w.
func (v Value) LessThan(w Value) bool { return int32(v-w) < 0 }

// LessThanEq reports v <= w.
func (v Value) LessThanEq(w Value) bool { return int32(v-w) <= 0 }

// GreaterThan reports v > w.
func (v Value) GreaterThan(w Value) bool { return int32(v-w) > 0 }

// GreaterThanEq reports v >= w.
func (v Value) GreaterThanEq(w Value) bool { return int32(v-w) >= 0 }

// Add returns v + n.
func (v Value) Add(n uint32) Value { return v + Value(n) }

// Sub is the distance from w up to v (v - w), meaningful when w <= v.
func (v Value) Sub(w Value) uint32 { return uint32(v - w) }

// InRange reports lo <= v < hi: the half-open interval, wrap-safe for any
// lo, hi with hi - lo < 2^32.
func (v Value) InRange(lo, hi Value) bool { return uint32(v-lo) < uint32(hi-lo) }

// Max returns the later of a and b.
func Max(a, b Value) Value {
	if a.LessThan(b) {
		return b
	}
	return a
}

// Min returns the earlier of a and b.
func Min(a, b Value) Value {
	if a.LessThan(b) {
		return a
	}
	return b
}
