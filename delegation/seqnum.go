package delegation

// seq is a TCP sequence number: 32 bits that wrap. Comparisons are modulo
// 2^32 (RFC 1982 serial arithmetic): a is before b when the signed distance
// from b to a is negative, which is right whenever the two are less than 2^31
// apart, as every pair the engine compares is (windows are at most 2^30).
type seq uint32

// lt reports a < b.
func (a seq) lt(b seq) bool { return int32(a-b) < 0 }

// le reports a <= b.
func (a seq) le(b seq) bool { return int32(a-b) <= 0 }

// gt reports a > b.
func (a seq) gt(b seq) bool { return int32(a-b) > 0 }

// ge reports a >= b.
func (a seq) ge(b seq) bool { return int32(a-b) >= 0 }

// add returns a + n.
func (a seq) add(n uint32) seq { return a + seq(n) }

// sub is the distance from b up to a (a - b), meaningful when b <= a.
func (a seq) sub(b seq) uint32 { return uint32(a - b) }

// inRange reports lo <= a < hi (the half-open interval, wrap-safe: it is
// correct for any lo, hi with hi - lo < 2^32).
func (a seq) inRange(lo, hi seq) bool { return uint32(a-lo) < uint32(hi-lo) }

// seqMax returns the later of a and b.
func seqMax(a, b seq) seq {
	if a.lt(b) {
		return b
	}
	return a
}

// seqMin returns the earlier of a and b.
func seqMin(a, b seq) seq {
	if a.lt(b) {
		return a
	}
	return b
}
