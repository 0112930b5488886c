package delegation

// tupleTable maps a received segment's 4-tuple to a connection index. It is
// an open-addressing hash table with linear probing and backward-shift
// deletion (no tombstones), sized at twice the connection table rounded up
// to a power of two, so a lookup is a few cache lines and never allocates.
type tupleTable struct {
	slots []tupleSlot
	mask  uint32
}

type tupleSlot struct {
	ips   uint64 // remote IP << 32 | local IP
	ports uint32 // remote port << 16 | local port
	idx   uint32 // connection index + 1; 0: empty
}

func newTupleTable(maxConns int) tupleTable {
	n := 16
	for n < 2*maxConns {
		n <<= 1
	}
	return tupleTable{slots: make([]tupleSlot, n), mask: uint32(n - 1)}
}

func tupleKey(remote, local [4]byte, rport, lport uint16) (uint64, uint32) {
	return uint64(be.Uint32(remote[:]))<<32 | uint64(be.Uint32(local[:])), uint32(rport)<<16 | uint32(lport)
}

func (t *tupleTable) hash(ips uint64, ports uint32) uint32 {
	h := ips*0x9E3779B97F4A7C15 ^ uint64(ports)*0xC2B2AE3D27D4EB4F
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return uint32(h) & t.mask
}

func (t *tupleTable) get(ips uint64, ports uint32) (uint32, bool) {
	for i := t.hash(ips, ports); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.idx == 0 {
			return 0, false
		}
		if s.ips == ips && s.ports == ports {
			return s.idx - 1, true
		}
	}
}

// put inserts a key that is not present. The table never fills: it has
// twice as many slots as there can be connections.
func (t *tupleTable) put(ips uint64, ports uint32, idx uint32) {
	i := t.hash(ips, ports)
	for t.slots[i].idx != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = tupleSlot{ips: ips, ports: ports, idx: idx + 1}
}

func (t *tupleTable) del(ips uint64, ports uint32) {
	i := t.hash(ips, ports)
	for {
		s := &t.slots[i]
		if s.idx == 0 {
			return
		}
		if s.ips == ips && s.ports == ports {
			break
		}
		i = (i + 1) & t.mask
	}
	// Backward-shift deletion: pull later entries of the probe run into the
	// hole when their home slot is not between the hole and them.
	hole := i
	for j := (i + 1) & t.mask; t.slots[j].idx != 0; j = (j + 1) & t.mask {
		home := t.hash(t.slots[j].ips, t.slots[j].ports)
		if (j-home)&t.mask >= (j-hole)&t.mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = tupleSlot{}
}
