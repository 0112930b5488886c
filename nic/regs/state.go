package regs

import (
	"github.com/emunic/emunic/rings"
)

// span is a byte range of DMA addresses, for the placement checks.
type span struct{ lo, hi uint64 }

func (s span) overlaps(o span) bool { return s.lo < o.hi && o.lo < s.hi }

// enable checks the ring and counter registers and starts the device (mu
// held). A failure leaves the device disabled with StatusFailed.
func (m *Model) enable() rings.Bar0ErrCode {
	e := m.tryEnable()
	if e != rings.ErrNone {
		m.failed = true
		return e
	}
	m.failed = false
	m.count(rings.RegCtrEnables)
	return rings.ErrNone
}

func (m *Model) tryEnable() rings.Bar0ErrCode {
	m.startErr = nil
	if !m.memOK || !m.vecOK {
		return rings.ErrEnableFailed
	}
	var ls [rings.Bar0Rings]rings.Layout
	var spans []span
	for r := range ls {
		l := rings.Layout{Base: rings.Addr(uint64(m.ring[r][1])<<32 | uint64(m.ring[r][0])), Count: m.ring[r][2],
			EntrySize: rings.Bar0RingEntry(r)}
		if l.Count == 0 || l.Validate() != nil {
			return rings.ErrRingSetup
		}
		ls[r] = l
		spans = append(spans, span{uint64(l.Base), uint64(l.Base) + uint64(l.Size())})
	}
	ctr := rings.Addr(uint64(m.ctrArea[1])<<32 | uint64(m.ctrArea[0]))
	if n := m.ctrArea[2]; n != 0 {
		if uint64(ctr)%8 != 0 || int(n) < rings.CounterAreaLayout.MinSize() {
			return rings.ErrRingSetup
		}
		spans = append(spans, span{uint64(ctr), uint64(ctr) + uint64(n)})
	}
	// Inside the memory, past its first MemFirst bytes; the sums cannot
	// wrap, since a count is at most 2^31 and an entry 64 bytes.
	lo, hi := uint64(m.mem.Base)+uint64(m.mem.First), uint64(m.mem.Base)+m.mem.Size
	for _, s := range spans {
		if s.lo < lo || s.hi > hi || s.hi < s.lo {
			return rings.ErrRingOutside
		}
	}
	for i := range spans {
		for j := i + 1; j < len(spans); j++ {
			if spans[i].overlaps(spans[j]) {
				return rings.ErrRingSetup
			}
		}
	}
	s := Setup{Rings: rings.Bar0RingConfig(ls), Features: rings.Bar0Feature(m.drvFeat),
		ModUsecs: m.mod[rings.Bar0VecNotify][0], ModCount: m.mod[rings.Bar0VecNotify][1]}
	if m.ctrArea[2] != 0 {
		s.CounterBase, s.CounterLen = ctr, m.ctrArea[2]
	}
	vec := [rings.Bar0Vectors]*rings.Doorbell{&s.Vectors.Notify, &s.Vectors.TxSpace, &s.Vectors.Command}
	for v, p := range vec {
		if m.gates[v].out.Load() != nil {
			*p = &m.gates[v]
		}
	}
	door, err := m.be.Start(s)
	if err != nil {
		m.startErr = err
		return rings.ErrEnableFailed
	}
	m.enabled = true
	b := &bell{d: door}
	if rd, ok := door.(RDMADoorbells); ok && m.drvFeat&uint32(rings.FeatQPDoorbell) != 0 {
		b.rdma = rd
	}
	m.door.Store(b)
	return rings.ErrNone
}

// disable stops the device (mu held); the registers keep their values.
func (m *Model) disable() {
	if !m.enabled {
		return
	}
	m.door.Store(nil)
	m.be.Stop()
	m.enabled = false
}

// reset stops the device and returns every read-write register to zero
// (mu held). The access counters stay.
func (m *Model) reset() {
	m.disable()
	m.drvFeat, m.failed, m.errCode, m.errOff = 0, false, rings.ErrNone, 0
	m.ctrArea, m.ring, m.mod, m.msix = [3]uint32{}, [rings.Bar0Rings][3]uint32{}, [rings.Bar0Vectors][2]uint32{}, [rings.Bar0Vectors][3]uint32{}
	for i := range m.gates {
		m.gates[i].st.Store(0)
	}
	m.count(rings.RegCtrResets)
}
