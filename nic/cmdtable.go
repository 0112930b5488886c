package nic

import "github.com/emunic/emunic/rings"

// The command path, and the device half of the ring commands: one handler
// per opcode, indexed by opcode as rings.Commands (the ABI half: name,
// family, resources, statuses) is. serviceCommands takes commands off the
// ring, execute looks each opcode up here and calls its handler (an opcode
// with no handler completes BAD_OPCODE), and the status and result are
// written back into the entry. TestCommandTable holds this table,
// rings.Commands and docs/rings.md's opcode table to each other.

// serviceCommands executes up to Burst commands, writing each command's
// status back into its entry. A bad command gets an error status; it never
// stops the unit.
func (d *Device) serviceCommands() int {
	n := 0
	for ; n < d.cfg.Burst; n++ {
		e, err := d.cmd.Peek()
		if err != nil {
			// A wrong phase tag, or a producer index more than a ring
			// ahead (then e is nil): counted, never trusted.
			d.phaseError(ringCmd, d.cmd.Head())
			break
		}
		if e == nil {
			break
		}
		ce := rings.CommandEntry(e)
		status, result := d.execute(ce)
		ce.SetWriteBack(status, result)
		d.cmd.Complete(e)
		d.cmd.Pop()
		d.count(rings.StatCmdCompleted)
		if status != rings.StatusOK {
			d.count(rings.StatCmdErrors)
		}
	}
	if n > 0 {
		d.cmd.Release()
	}
	return n
}

// cmdHandler executes one command and returns the status and result to
// write back into its entry. It runs on the unit goroutine.
type cmdHandler func(d *Device, ce rings.CommandEntry) (rings.Status, uint64)

// cmdHandlers is indexed by opcode; nil is no command.
var cmdHandlers = [...]cmdHandler{
	// Ring family: device-wide (below).
	rings.OpNop:   (*Device).cmdNop,
	rings.OpStats: (*Device).cmdStats,

	// TCP offload (offload.go).
	rings.OpOffload:       (*Device).cmdOffload,
	rings.OpPostBuffers:   (*Device).cmdPostBuffers,
	rings.OpSetThresholds: (*Device).cmdSetThresholds,
	rings.OpUpdate:        (*Device).cmdUpdate,
	rings.OpClose:         (*Device).cmdClose,
	rings.OpAbort:         (*Device).cmdAbort,
	rings.OpRelease:       (*Device).cmdRelease,
	rings.OpRxInject:      (*Device).cmdRxInject,
	rings.OpPathMTU:       (*Device).cmdPathMTU,
	rings.OpQueryConn:     (*Device).cmdQueryConn, // connquery.go

	// RDMA (rdma.go).
	rings.OpRegMR:      (*Device).cmdRegMR,
	rings.OpDeregMR:    (*Device).cmdDeregMR,
	rings.OpCreateQP:   (*Device).cmdCreateQP,
	rings.OpModifyQP:   (*Device).cmdModifyQP,
	rings.OpDestroyQP:  (*Device).cmdDestroyQP,
	rings.OpCreateCQ:   (*Device).cmdCreateCQ,
	rings.OpDestroyCQ:  (*Device).cmdDestroyCQ,
	rings.OpArmCQ:      (*Device).cmdArmCQ,
	rings.OpQPDoorbell: (*Device).cmdQPDoorbell,
}

// checkStatus, when set (by the package's tests), sees every status a
// handler writes back, so the tests can hold each handler to the statuses
// rings.Commands declares for it. Nil in a running device: one predictable
// branch per command.
var checkStatus func(op rings.Opcode, st rings.Status)

// execute runs one command. Which status a command gets when several of
// its parameters are wrong is part of its behaviour, so each handler
// validates its own parameters; execute only refuses an opcode it has no
// handler for, or whose family's feature the driver withheld (features.go).
func (d *Device) execute(ce rings.CommandEntry) (rings.Status, uint64) {
	op := ce.Opcode()
	if int(op) >= len(cmdHandlers) || cmdHandlers[op] == nil || (d.gatedOps != nil && d.gatedOps[op]) {
		d.count(rings.StatCmdBadOpcode)
		return rings.StatusBadOpcode, 0
	}
	st, res := cmdHandlers[op](d, ce)
	if checkStatus != nil {
		checkStatus(op, st)
	}
	return st, res
}

func (d *Device) cmdNop(rings.CommandEntry) (rings.Status, uint64) { return rings.StatusOK, 0 }

// cmdStats DMAs the stat block to the host, or with StatsFlagPublish sets
// the counter publication area (statarea.go).
func (d *Device) cmdStats(ce rings.CommandEntry) (rings.Status, uint64) {
	if ce.Flags()&^rings.StatsFlagPublish != 0 {
		return rings.StatusBadParam, 0
	}
	if ce.Flags()&rings.StatsFlagPublish != 0 {
		return d.setStatArea(ce)
	}
	n := min(int(ce.Len()), rings.StatBlockSize)
	if n <= 0 {
		return rings.StatusBadParam, 0
	}
	var blk [rings.StatBlockSize]byte
	d.fillStats(blk[:])
	if err := d.mem.WriteAt(blk[:n], ce.Addr()); err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress, 0
	}
	return rings.StatusOK, uint64(n)
}
