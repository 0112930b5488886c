package nic

import "github.com/emunic/emunic/rings"

// cmdQueryConn is QUERY_CONN: the engine's view of a delegated connection,
// written by DMA as a connection info block to the command's Addr. Which
// status wins when several parameters are wrong: reserved flags, then the
// connection, then the length, then the address. The block is written
// whole or not at all (a DMA write is bounds-checked before it moves a
// byte), and only with OK: a host reading the block after a refusal finds
// what it left there.
func (d *Device) cmdQueryConn(ce rings.CommandEntry) (rings.Status, uint64) {
	if ce.Flags() != 0 {
		return rings.StatusBadParam, 0
	}
	var ci rings.ConnInfo
	if st := d.eng.QueryConn(ce.Conn(), &ci); st != rings.StatusOK {
		return st, 0
	}
	if ce.Len() < rings.ConnInfoSize {
		return rings.StatusBadParam, 0
	}
	var blk [rings.ConnInfoSize]byte
	ci.Encode(blk[:])
	if err := d.mem.WriteAt(blk[:], ce.Addr()); err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress, 0
	}
	return rings.StatusOK, rings.ConnInfoSize
}
