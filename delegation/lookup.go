package delegation

import (
	"net/netip"

	"github.com/emunic/emunic/nic/hdr"
)

// tupleTable maps a received segment's 4-tuple to a connection index. It is
// an open-addressing hash table with linear probing and backward-shift
// deletion (no tombstones), sized at twice the connection table rounded up
// to a power of two, so a lookup is a few cache lines and never allocates.
// The key is hdr.Tuple, the connection as seen from our end, so the table
// holds either address family.
type tupleTable struct {
	slots []tupleSlot
	mask  uint32
	// last is the slot of the last hit, a one-entry flow cache as NICs
	// keep in front of their flow tables: frames of one flow come in
	// bursts, and a slot (56 bytes, a random line of a table of up to a few
	// MiB) is usually out of the cache again by the next frame, after the
	// payload copies have gone through it. With it the 64 KiB RDMA Read
	// benchmark went back from 23.9 to 18 µs; the packed IPv4 key this
	// table replaced had 16-byte slots. put and del clear it, so it never
	// answers for a key that has gone.
	last tupleSlot
}

type tupleSlot struct {
	key hdr.Tuple
	idx uint32 // connection index + 1; 0: empty
}

func newTupleTable(maxConns int) tupleTable {
	n := 16
	for n < 2*maxConns {
		n <<= 1
	}
	return tupleTable{slots: make([]tupleSlot, n), mask: uint32(n - 1)}
}

// hash mixes both addresses and the ports. An IPv4 address is read with
// As4, much cheaper than As16 here, so the family IPv4 connections use
// costs what the packed IPv4 key it replaced did.
func (t *tupleTable) hash(k *hdr.Tuple) uint32 {
	h := addrBits(k.RemoteIP)*0x9E3779B97F4A7C15 ^ addrBits(k.LocalIP) ^
		uint64(uint32(k.RemotePort)<<16|uint32(k.LocalPort))*0xC2B2AE3D27D4EB4F
	h ^= h >> 29
	h *= 0xBF58476D1CE4E5B9
	h ^= h >> 32
	return uint32(h) & t.mask
}

// addrBits folds an address into 64 bits for hashing.
func addrBits(a netip.Addr) uint64 {
	if a.Is4() {
		v := a.As4()
		return uint64(be.Uint32(v[:]))
	}
	v := a.As16()
	return be.Uint64(v[:8])*0x94D049BB133111EB ^ be.Uint64(v[8:])
}

func (t *tupleTable) get(k *hdr.Tuple) (uint32, bool) {
	if t.last.idx != 0 && t.last.key == *k {
		return t.last.idx - 1, true
	}
	for i := t.hash(k); ; i = (i + 1) & t.mask {
		s := &t.slots[i]
		if s.idx == 0 {
			return 0, false
		}
		// The ports first: a cheap test that rejects most other
		// connections before the addresses are compared.
		if s.key.LocalPort == k.LocalPort && s.key.RemotePort == k.RemotePort && s.key == *k {
			t.last = *s
			return s.idx - 1, true
		}
	}
}

// put inserts a key that is not present. The table never fills: it has
// twice as many slots as there can be connections.
func (t *tupleTable) put(k *hdr.Tuple, idx uint32) {
	t.last = tupleSlot{}
	i := t.hash(k)
	for t.slots[i].idx != 0 {
		i = (i + 1) & t.mask
	}
	t.slots[i] = tupleSlot{key: *k, idx: idx + 1}
}

func (t *tupleTable) del(k *hdr.Tuple) {
	t.last = tupleSlot{}
	i := t.hash(k)
	for {
		s := &t.slots[i]
		if s.idx == 0 {
			return
		}
		if s.key == *k {
			break
		}
		i = (i + 1) & t.mask
	}
	// Backward-shift deletion: pull later entries of the probe run into the
	// hole when their home slot is not between the hole and them.
	hole := i
	for j := (i + 1) & t.mask; t.slots[j].idx != 0; j = (j + 1) & t.mask {
		home := t.hash(&t.slots[j].key)
		if (j-home)&t.mask >= (j-hole)&t.mask {
			t.slots[hole] = t.slots[j]
			hole = j
		}
	}
	t.slots[hole] = tupleSlot{}
}
