package delegation

import "github.com/emunic/emunic/nic/hdr"

// Out-of-order reassembly.
//
// Segments that arrive beyond RCV.NXT are held in device memory: an
// engine-wide slab of fixed pages (oooPool), preallocated, shared by all
// connections. A connection maps the sequence space [RCV.NXT, RCV.NXT +
// OOOLimit) onto pages through a small circular slot table indexed by
// (seq / oooPageSize) mod len(slots): since every page it holds touches that
// window and len(slots) exceeds the pages the window can touch, two live
// pages never share a slot, and because len(slots) is a power of two the
// mapping is continuous across the 2^32 sequence wrap. The held bytes are
// described by at most maxOOORanges disjoint, sorted ranges; a segment that
// would need one more range is dropped (the peer retransmits it). Nothing
// is allocated per segment.

const (
	oooPageShift = 11
	oooPageSize  = 1 << oooPageShift
	maxOOORanges = 16
)

// oooPool is the shared slab.
type oooPool struct {
	mem  []byte
	free []int32 // stack of free page numbers
}

func newOOOPool(bytes int) oooPool {
	n := (bytes + oooPageSize - 1) / oooPageSize
	p := oooPool{mem: make([]byte, n*oooPageSize), free: make([]int32, n)}
	for i := range p.free {
		p.free[i] = int32(n - 1 - i)
	}
	return p
}

func (p *oooPool) page(i int32) []byte {
	return p.mem[int(i)*oooPageSize : int(i+1)*oooPageSize]
}

// FreePages is the number of unused slab pages.
func (p *oooPool) freePages() int { return len(p.free) }

type oooRange struct {
	start, end seq
	stamp      uint32 // last update, for SACK block order (RFC 2018: most recent first)
	push       bool   // the segment ending the range had PSH
}

type oooQueue struct {
	ranges [maxOOORanges]oooRange
	n      int
	slots  []int32 // page number + 1; 0: none (made at the first segment held)
	nslots int     // the table's size for the limit (init)
	pages  int     // slots in use
	bytes  uint32  // bytes held (sum of range lengths)
	stamp  uint32
}

// init sizes the slot table for a limit. The table is made when the
// connection first holds a segment (write), and a connection slot keeps it
// for its next lives: a table of 10,000 connections that never see a hole
// costs none (at the 1 MiB default limit, a table is 4 KiB).
func (q *oooQueue) init(limit uint32) {
	want := int(limit/oooPageSize) + 2
	n := 4
	for n < want {
		n <<= 1
	}
	q.nslots = n
	if len(q.slots) != 0 && len(q.slots) != n {
		q.slots = nil
	}
}

func (q *oooQueue) reset(p *oooPool) {
	if q.pages > 0 {
		for i, s := range q.slots {
			if s != 0 {
				p.free = append(p.free, s-1)
				q.slots[i] = 0
			}
		}
	}
	q.pages = 0
	q.n = 0
	q.bytes = 0
}

// write copies data, which belongs at sequence number at, into pages,
// allocating them as needed. It returns how many leading bytes it stored
// (fewer than len(data) only when the slab ran out).
func (q *oooQueue) write(p *oooPool, at seq, data []byte) int {
	if len(q.slots) == 0 {
		q.slots = make([]int32, q.nslots)
	}
	done := 0
	mask := uint32(len(q.slots) - 1)
	for done < len(data) {
		s := at.Add(uint32(done))
		slot := (uint32(s) >> oooPageShift) & mask
		if q.slots[slot] == 0 {
			if len(p.free) == 0 {
				break
			}
			q.slots[slot] = p.free[len(p.free)-1] + 1
			p.free = p.free[:len(p.free)-1]
			q.pages++
		}
		pg := p.page(q.slots[slot] - 1)
		off := uint32(s) & (oooPageSize - 1)
		done += copy(pg[off:], data[done:])
	}
	return done
}

// read returns the held bytes starting at sq up to the end of its page or
// n bytes, whichever is less.
func (q *oooQueue) read(p *oooPool, sq seq, n uint32) []byte {
	slot := (uint32(sq) >> oooPageShift) & uint32(len(q.slots)-1)
	off := uint32(sq) & (oooPageSize - 1)
	if m := oooPageSize - off; n > m {
		n = m
	}
	return p.page(q.slots[slot] - 1)[off : off+n]
}

// releaseBelow frees every page that lies entirely before sq (RCV.NXT moved
// from old to sq).
func (q *oooQueue) releaseBelow(p *oooPool, old, sq seq) {
	if q.pages == 0 {
		return
	}
	if q.n == 0 {
		q.reset(p)
		return
	}
	mask := uint32(len(q.slots) - 1)
	first := uint32(old) >> oooPageShift
	last := uint32(sq) >> oooPageShift // pages before this one are wholly below sq
	const pageNumMask = 1<<(32-oooPageShift) - 1
	for i, pn := 0, first; pn != last && i < len(q.slots); i, pn = i+1, (pn+1)&pageNumMask {
		slot := pn & mask
		if q.slots[slot] != 0 {
			p.free = append(p.free, q.slots[slot]-1)
			q.slots[slot] = 0
			q.pages--
		}
	}
}

// canAdd reports whether [start, end) can be recorded without a new range
// beyond maxOOORanges.
func (q *oooQueue) canAdd(start, end seq) bool {
	if q.n < maxOOORanges {
		return true
	}
	for i := 0; i < q.n; i++ {
		r := &q.ranges[i]
		if start.LessThanEq(r.end) && r.start.LessThanEq(end) {
			return true // overlaps or touches an existing range
		}
	}
	return false
}

// add records [start, end) as held, merging ranges that overlap or touch.
// canAdd must have said yes.
func (q *oooQueue) add(start, end seq, push bool) {
	q.stamp++
	// Find the insertion point: the first range whose end is >= start.
	i := 0
	for i < q.n && q.ranges[i].end.LessThan(start) {
		i++
	}
	// Merge every range that overlaps or touches [start, end).
	j := i
	for j < q.n && q.ranges[j].start.LessThanEq(end) {
		if q.ranges[j].start.LessThan(start) {
			start = q.ranges[j].start
		}
		if q.ranges[j].end.GreaterThan(end) {
			end = q.ranges[j].end
			push = q.ranges[j].push
		} else if q.ranges[j].end == end {
			push = push || q.ranges[j].push
		}
		j++
	}
	nr := oooRange{start: start, end: end, stamp: q.stamp, push: push}
	switch merged := j - i; {
	case merged == 0:
		copy(q.ranges[i+1:q.n+1], q.ranges[i:q.n])
		q.n++
	case merged > 1:
		copy(q.ranges[i+1:], q.ranges[j:q.n])
		q.n -= merged - 1
	}
	q.ranges[i] = nr
	q.bytes = 0
	for k := 0; k < q.n; k++ {
		q.bytes += q.ranges[k].end.Sub(q.ranges[k].start)
	}
}

// trimBelow drops held bytes before sq (they were received in order).
func (q *oooQueue) trimBelow(sq seq) {
	k := 0
	for k < q.n && q.ranges[k].end.LessThanEq(sq) {
		k++
	}
	if k > 0 {
		copy(q.ranges[:], q.ranges[k:q.n])
		q.n -= k
	}
	if q.n > 0 && q.ranges[0].start.LessThan(sq) {
		q.ranges[0].start = sq
	}
	q.bytes = 0
	for i := 0; i < q.n; i++ {
		q.bytes += q.ranges[i].end.Sub(q.ranges[i].start)
	}
}

// sackBlocks writes up to max blocks, most recently updated first.
func (q *oooQueue) sackBlocks(dst *[hdr.TCPMaxSACKBlocks]sackBlock, max int) int {
	if max > q.n {
		max = q.n
	}
	var used [maxOOORanges]bool
	for k := 0; k < max; k++ {
		best := -1
		for i := 0; i < q.n; i++ {
			if !used[i] && (best < 0 || q.ranges[i].stamp > q.ranges[best].stamp) {
				best = i
			}
		}
		used[best] = true
		dst[k] = sackBlock{q.ranges[best].start, q.ranges[best].end}
	}
	return max
}
