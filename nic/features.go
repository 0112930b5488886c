package nic

import "github.com/emunic/emunic/rings"

// Feature gating. A driver that programs the device through its register
// block says which features it uses (RegDrvFeatures, docs/bar0.md
// "Features"); the device then refuses the use of the others, as a chip
// does, rather than let a driver depend on something it never asked for:
//
//   - FeatDelegation: the offload family's commands (OFFLOAD, ...), and
//     transmit descriptors of a delegated connection;
//   - FeatRDMA: the RDMA family's commands (CREATE_QP, ...);
//   - FeatLegacy: legacy transmit descriptors (Conn NoConn);
//   - FeatVLAN: a legacy transmit descriptor's VLAN tag;
//   - FeatTxCsum: a legacy transmit descriptor's TxCsum flag (txcsum.go);
//   - FeatQPDoorbell: the RDMA doorbell registers (rdmabell.go), refused as
//     for a QP that does not exist.
//
// A refused command completes BAD_OPCODE ("unknown or unsupported") and is
// counted cmd_bad_opcode; a refused descriptor is dropped and counted
// tx_drop_bad_desc. FeatCounters and FeatModeration gate registers, so the
// register model (nic/regs) refuses those writes itself.

// familyFeature is the feature a command family needs; the ring family
// (NOP, STATS, ...) is the device's own and always there.
var familyFeature = map[rings.CmdFamily]rings.Bar0Feature{
	rings.CmdFamilyOffload: rings.FeatDelegation,
	rings.CmdFamilyRDMA:    rings.FeatRDMA,
}

// gateFeatures marks the opcodes withheld makes unsupported.
func (d *Device) gateFeatures(withheld rings.Bar0Feature) {
	if withheld == 0 {
		return
	}
	d.gatedOps = make([]bool, len(cmdHandlers))
	for op := range d.gatedOps {
		c, ok := rings.LookupCommand(rings.Opcode(op))
		if !ok {
			continue
		}
		d.gatedOps[op] = withheld&familyFeature[c.Family] != 0
	}
}

// txGated says whether the driver withheld a feature desc uses.
func (d *Device) txGated(desc rings.TxDesc) bool {
	w := d.cfg.Withheld
	if w == 0 {
		return false
	}
	if desc.Conn() != rings.NoConn {
		return w&rings.FeatDelegation != 0
	}
	return w&rings.FeatLegacy != 0 || (w&rings.FeatVLAN != 0 && desc.VLAN() != 0) ||
		(w&rings.FeatTxCsum != 0 && desc.Flags()&rings.TxCsum != 0)
}
