package delegation

import "github.com/emunic/emunic/seqnum"

// The sender's SACK scoreboard (RFC 2018, used as RFC 6675 does): the
// ranges above SND.UNA the peer reported holding. Loss recovery uses it to
// retransmit the holes below the highest SACKed byte instead of one segment
// per round trip, and the go-back after a timeout skips what the peer holds.
// SACK information is advisory (the receiver may renege), so a second
// timeout in a row discards it and the engine falls back to plain go-back.

const maxSACKRanges = 16

type scoreboard struct {
	r [maxSACKRanges]sackBlock
	n int
}

func (b *scoreboard) reset() { b.n = 0 }

// add records [start, end), merging with ranges it overlaps or touches.
// With the board full, a new disjoint range is ignored (advisory data).
func (b *scoreboard) add(start, end seq) {
	i := 0
	for i < b.n && b.r[i].end.LessThan(start) {
		i++
	}
	j := i
	for j < b.n && b.r[j].start.LessThanEq(end) {
		start = seqnum.Min(start, b.r[j].start)
		end = seqnum.Max(end, b.r[j].end)
		j++
	}
	switch merged := j - i; {
	case merged == 0:
		if b.n == maxSACKRanges {
			return
		}
		copy(b.r[i+1:b.n+1], b.r[i:b.n])
		b.n++
	case merged > 1:
		copy(b.r[i+1:], b.r[j:b.n])
		b.n -= merged - 1
	}
	b.r[i] = sackBlock{start, end}
}

// trim forgets everything below una (cumulatively acknowledged).
func (b *scoreboard) trim(una seq) {
	k := 0
	for k < b.n && b.r[k].end.LessThanEq(una) {
		k++
	}
	if k > 0 {
		copy(b.r[:], b.r[k:b.n])
		b.n -= k
	}
	if b.n > 0 && b.r[0].start.LessThan(una) {
		b.r[0].start = una
	}
}

// high is the end of the highest SACKed range (valid when n > 0).
func (b *scoreboard) high() seq { return b.r[b.n-1].end }

// gap returns the first run of [s, e) the peer has not SACKed:
// [start, end) (ok false: all of it is).
func (b *scoreboard) gap(s, e seq) (start, end seq, ok bool) {
	for i := 0; i < b.n && s.LessThan(e); i++ {
		r := b.r[i]
		if r.end.LessThanEq(s) {
			continue
		}
		if r.start.LessThanEq(s) {
			s = r.end // inside a SACKed range: skip it
			continue
		}
		return s, seqnum.Min(r.start, e), true
	}
	if s.LessThan(e) {
		return s, e, true
	}
	return 0, 0, false
}

// next returns where the next SACKed range after s starts (ok false: none).
func (b *scoreboard) next(s seq) (seq, bool) {
	for i := 0; i < b.n; i++ {
		if b.r[i].end.GreaterThan(s) {
			return b.r[i].start, true
		}
	}
	return 0, false
}

// covering returns the end of the SACKed range holding s, if any.
func (b *scoreboard) covering(s seq) (seq, bool) {
	for i := 0; i < b.n; i++ {
		if b.r[i].start.LessThanEq(s) && s.LessThan(b.r[i].end) {
			return b.r[i].end, true
		}
	}
	return 0, false
}

// covers reports whether [s, e) is SACKed whole.
func (b *scoreboard) covers(s, e seq) bool {
	end, ok := b.covering(s)
	return ok && !end.LessThan(e)
}

// within is the number of SACKed bytes in [s, e).
func (b *scoreboard) within(s, e seq) uint32 {
	n := uint32(0)
	for i := 0; i < b.n; i++ {
		lo, up := seqnum.Max(b.r[i].start, s), seqnum.Min(b.r[i].end, e)
		if lo.LessThan(up) {
			n += up.Sub(lo)
		}
	}
	return n
}

// below is the number of SACKed bytes before s.
func (b *scoreboard) below(s seq) uint32 {
	n := uint32(0)
	for i := 0; i < b.n; i++ {
		r := b.r[i]
		if !r.start.LessThan(s) {
			break
		}
		n += seqnum.Min(r.end, s).Sub(r.start)
	}
	return n
}
