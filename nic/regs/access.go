package regs

import (
	"github.com/emunic/emunic/rings"
)

// region says which group of registers off falls in, and its index and
// register offset within the group.
type region int

const (
	rgNone region = iota
	rgTop
	rgRing
	rgVec
	rgCounter
	rgMsix
	rgPBA
)

func locate(off uint32) (rg region, idx int, reg uint32) {
	switch {
	case off >= rings.Bar0Bytes || off%rings.Bar0RegisterAlign != 0:
		return rgNone, 0, 0
	case off < rings.Bar0RingBase:
		return rgTop, 0, off
	case off < rings.Bar0Ring(rings.Bar0Rings, 0):
		o := off - rings.Bar0RingBase
		return rgRing, int(o / rings.Bar0RingStride), o % rings.Bar0RingStride
	case off >= rings.Bar0VecBase && off < rings.Bar0Vec(rings.Bar0Vectors, 0):
		o := off - rings.Bar0VecBase
		return rgVec, int(o / rings.Bar0VecStride), o % rings.Bar0VecStride
	case off >= rings.Bar0CounterBase && off < rings.Bar0Counter(rings.Bar0RegCounters):
		return rgCounter, int((off - rings.Bar0CounterBase) / 4), 0
	case off >= rings.Bar0MsixTable && off < rings.Bar0Msix(rings.Bar0Vectors, 0):
		o := off - rings.Bar0MsixTable
		return rgMsix, int(o / rings.MsixEntryBytes), o % rings.MsixEntryBytes
	case off >= rings.Bar0MsixPBA && off < rings.Bar0MsixPBA+8:
		return rgPBA, 0, off - rings.Bar0MsixPBA
	}
	return rgNone, 0, 0
}

// Read32 reads the register at off. A refused read (outside the block,
// unaligned, reserved) returns 0 and the refusal, counted.
func (m *Model) Read32(off uint32) (uint32, rings.Bar0ErrCode) {
	m.mu.Lock()
	defer m.mu.Unlock()
	v, ok := m.read(off)
	if !ok {
		return 0, m.refuse(off, rings.ErrBadOffset)
	}
	return v, rings.ErrNone
}

func (m *Model) read(off uint32) (uint32, bool) {
	rg, i, reg := locate(off)
	switch rg {
	case rgTop:
		return m.readTop(reg)
	case rgRing:
		switch reg {
		case rings.RingRegBaseLo, rings.RingRegBaseHi, rings.RingRegCount:
			return m.ring[i][reg/4], true
		case rings.RingRegEntry:
			return rings.Bar0RingEntry(i), true
		case rings.RingRegDoorbell:
			return 0, true
		case rings.RingRegVector:
			return rings.Bar0RingVector(i), true
		}
		return 0, false
	case rgVec:
		st := m.gates[i].st.Load()
		switch reg {
		case rings.VecRegCause:
			return st & gateCause, true
		case rings.VecRegMask:
			return b2u(st&gateMasked != 0), true
		case rings.VecRegModUsecs, rings.VecRegModCount:
			return m.mod[i][(reg-rings.VecRegModUsecs)/4], true
		}
	case rgCounter:
		return m.ctr[i].Load(), true
	case rgMsix:
		if reg == rings.MsixOffCtrl {
			return b2u(m.gates[i].st.Load()&gateMasked != 0), true
		}
		return m.msix[i][reg/4], true
	case rgPBA:
		if reg == 0 {
			return m.pending(), true
		}
		return 0, true
	}
	return 0, false
}

func (m *Model) readTop(reg uint32) (uint32, bool) {
	switch reg {
	case rings.RegID:
		return rings.Bar0VendorID | rings.Bar0DeviceID<<16, true
	case rings.RegVersion:
		return rings.Bar0VersionMajor<<16 | rings.Bar0VersionMinor, true
	case rings.RegDevFeatures:
		return m.devFeat, true
	case rings.RegDrvFeatures:
		return m.drvFeat, true
	case rings.RegCtrl:
		return uint32(b2u(m.enabled)) * uint32(rings.CtrlEnable), true
	case rings.RegStatus:
		var s rings.Bar0Status
		if m.enabled {
			s |= rings.StatusEnabled
		}
		if m.failed {
			s |= rings.StatusFailed
		}
		if m.memOK {
			s |= rings.StatusMemory
		}
		if m.vecOK {
			s |= rings.StatusVectors
		}
		return uint32(s), true
	case rings.RegError:
		return uint32(m.errCode), true
	case rings.RegErrorOffset:
		return m.errOff, true
	case rings.RegMACLo:
		return uint32(m.id.MAC[0]) | uint32(m.id.MAC[1])<<8 | uint32(m.id.MAC[2])<<16 | uint32(m.id.MAC[3])<<24, true
	case rings.RegMACHi:
		return uint32(m.id.MAC[4]) | uint32(m.id.MAC[5])<<8, true
	case rings.RegMTU:
		return uint32(m.id.MTU), true
	case rings.RegNumVectors:
		return rings.Bar0Vectors, true
	case rings.RegMemBaseLo, rings.RegMemBaseHi, rings.RegMemSizeLo, rings.RegMemSizeHi, rings.RegMemFirst:
		if !m.memOK {
			return 0, true
		}
		return [...]uint32{uint32(m.mem.Base), uint32(m.mem.Base >> 32), uint32(m.mem.Size), uint32(m.mem.Size >> 32),
			m.mem.First}[(reg-rings.RegMemBaseLo)/4], true
	case rings.RegCounterLo, rings.RegCounterHi, rings.RegCounterLen:
		return m.ctrArea[(reg-rings.RegCounterLo)/4], true
	case rings.RegQPDoorbell, rings.RegCQArm:
		return 0, true // write-only
	}
	return 0, false
}

// pending is the pending-bit array's first word: bit v for each vector
// holding a raise while masked. It reads only atomics.
func (m *Model) pending() uint32 {
	var v uint32
	for i := range m.gates {
		if m.gates[i].st.Load()&gatePending != 0 {
			v |= 1 << i
		}
	}
	return v
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}

// Write32 writes v to the register at off; a refused write changes
// nothing but RegError, RegErrorOffset and its counter.
func (m *Model) Write32(off, v uint32) rings.Bar0ErrCode {
	rg, i, reg := locate(off)
	if rg == rgRing && reg == rings.RingRegDoorbell {
		return m.ringDoorbell(i)
	}
	if rg == rgTop && (reg == rings.RegQPDoorbell || reg == rings.RegCQArm) {
		return m.rdmaDoorbell(reg, v)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if e := m.write(rg, i, reg, v); e != rings.ErrNone {
		return m.refuse(off, e)
	}
	return rings.ErrNone
}

func (m *Model) write(rg region, i int, reg, v uint32) rings.Bar0ErrCode {
	switch rg {
	case rgTop:
		return m.writeTop(reg, v)
	case rgRing:
		switch reg {
		case rings.RingRegBaseLo, rings.RingRegBaseHi, rings.RingRegCount:
			if m.enabled {
				return rings.ErrWrongState
			}
			if reg == rings.RingRegCount && (v&(v-1) != 0 || v > rings.Bar0MaxRingCount) {
				return rings.ErrBadValue
			}
			m.ring[i][reg/4] = v
			return rings.ErrNone
		case rings.RingRegEntry, rings.RingRegVector:
			return rings.ErrReadOnly
		}
		return rings.ErrBadOffset
	case rgVec:
		return m.writeVec(i, reg, v)
	case rgCounter, rgPBA:
		return rings.ErrReadOnly
	case rgMsix:
		if reg == rings.MsixOffCtrl {
			if v&^rings.MsixCtrlMasked != 0 {
				return rings.ErrBadValue
			}
			m.gates[i].setMask(v&rings.MsixCtrlMasked != 0)
			return rings.ErrNone
		}
		m.msix[i][reg/4] = v
		return rings.ErrNone
	}
	return rings.ErrBadOffset
}

func (m *Model) writeTop(reg, v uint32) rings.Bar0ErrCode {
	switch reg {
	case rings.RegDrvFeatures:
		if m.enabled {
			return rings.ErrWrongState
		}
		if v&^m.devFeat != 0 {
			return rings.ErrBadValue
		}
		if v&uint32(rings.FeatQPDoorbell) != 0 && v&uint32(rings.FeatRDMA) == 0 {
			return rings.ErrBadValue // doorbells for QPs it cannot make
		}
		m.drvFeat = v
		return rings.ErrNone
	case rings.RegCtrl:
		if v&^uint32(rings.Bar0CtrlMask) != 0 {
			return rings.ErrBadValue
		}
		if v&uint32(rings.CtrlReset) != 0 {
			m.reset()
		}
		on := v&uint32(rings.CtrlEnable) != 0
		switch {
		case on && !m.enabled:
			return m.enable()
		case !on && m.enabled:
			m.disable()
		}
		return rings.ErrNone
	case rings.RegCounterLo, rings.RegCounterHi, rings.RegCounterLen:
		if m.enabled || (v != 0 && m.drvFeat&uint32(rings.FeatCounters) == 0) {
			return rings.ErrWrongState
		}
		m.ctrArea[(reg-rings.RegCounterLo)/4] = v
		return rings.ErrNone
	}
	if _, ok := m.readTop(reg); ok {
		return rings.ErrReadOnly
	}
	return rings.ErrBadOffset
}

func (m *Model) writeVec(i int, reg, v uint32) rings.Bar0ErrCode {
	switch reg {
	case rings.VecRegCause:
		if v&^1 != 0 {
			return rings.ErrBadValue
		}
		if v != 0 {
			m.gates[i].clearCause()
		}
	case rings.VecRegMask:
		if v&^1 != 0 {
			return rings.ErrBadValue
		}
		m.gates[i].setMask(v != 0)
	case rings.VecRegModUsecs, rings.VecRegModCount:
		switch {
		case m.enabled || (v != 0 && m.drvFeat&uint32(rings.FeatModeration) == 0):
			return rings.ErrWrongState
		case v != 0 && i != rings.Bar0VecNotify:
			return rings.ErrBadValue
		case reg == rings.VecRegModUsecs && v > rings.Bar0MaxModUsecs:
			return rings.ErrBadValue
		}
		m.mod[i][(reg-rings.VecRegModUsecs)/4] = v
	}
	return rings.ErrNone
}
