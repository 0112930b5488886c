package iwarp

import (
	"errors"

	"github.com/emunic/emunic/rings"
)

// Memory registration through the command ring (rings.OpRegMR,
// rings.OpDeregMR). Argument conventions (proposed; the nic owns the
// command processor):
//
//	REG_MR    Addr: host address of the region's first byte
//	          Len: length in bytes
//	          Arg3: VA, the tagged offset of the first byte (ignored with AccessZeroBased)
//	          Arg0: protection domain
//	          Arg1: access flags (Access: LocalWrite 1, RemoteWrite 2, RemoteRead 4,
//	                RemoteAtomic 8, ZeroBased 32)
//	          Result: the STag (index<<8 | key)
//	          Arg1 = MRAccessFastReg (64) alone: the STag is allocated
//	          invalid, for REG_MR work requests that map memory inside
//	          [Addr, +Len) under it (Allocate, FastRegister)
//	DEREG_MR  Arg0: STag
//
// Statuses: StatusOK; StatusBadAddress for a range outside host memory or a
// VA range that wraps; StatusBadParam for unknown access bits; StatusNoResources
// when the table is full; StatusBadParam for an unknown STag on DEREG_MR.

// RegMRCommand executes a REG_MR command against the table and returns the
// status and result to write back.
func (t *MemTable) RegMRCommand(c *rings.Command) (rings.Status, uint64) {
	if c.Arg1 > 0xFF {
		return rings.StatusBadParam, 0
	}
	var stag uint32
	var err error
	if c.Arg1 == rings.MRAccessFastReg {
		stag, err = t.Allocate(c.Arg0, c.Addr, uint64(c.Len))
	} else {
		stag, err = t.Register(c.Arg0, c.Addr, c.Arg3, uint64(c.Len), Access(c.Arg1))
	}
	switch {
	case err == nil:
		return rings.StatusOK, uint64(stag)
	case errors.Is(err, ErrBadAccess):
		return rings.StatusBadParam, 0
	case errors.Is(err, ErrNoSTag):
		return rings.StatusNoResources, 0
	}
	return rings.StatusBadAddress, 0
}

// DeregMRCommand executes a DEREG_MR command.
func (t *MemTable) DeregMRCommand(c *rings.Command) rings.Status {
	if err := t.Deregister(c.Arg0); err != nil {
		return rings.StatusBadParam
	}
	return rings.StatusOK
}
