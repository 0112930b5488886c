package nic

import (
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// engineEnv is what the device gives the delegated TCP engine: host memory
// by DMA, the notification ring, the port, the legacy receive buffers and
// the device clock. Every call comes from the unit goroutine.
type engineEnv struct{ d *Device }

func (e engineEnv) DMA() rings.DMA { return e.d.mem }

func (e engineEnv) Notify(n *rings.Notification) bool { return e.d.post(n) }

func (e engineEnv) Transmit(frame []byte) error {
	d := e.d
	frame, ok := d.tag(frame, 0)
	if !ok { // an engine frame over the MTU: the engine's bug, not the wire's
		d.count(rings.StatTxDropBadDesc)
		return port.ErrFrameTooBig
	}
	if err := d.port.WriteFrame(frame); err != nil {
		d.count(rings.StatTxDropPortError)
		return err
	}
	d.count(rings.StatTxFrames)
	d.stats[rings.StatTxBytes].Add(uint64(len(frame)))
	return nil
}

// TSOMax implements delegation.TSOEnv: a port that segments TCP itself
// (a TAP with offloads) takes super-frames of up to 64 KiB.
func (e engineEnv) TSOMax() int {
	// A device on a VLAN tags every frame it sends (vlan.go), which a
	// super-frame left to the port to cut would not be.
	if t, ok := e.d.port.(port.TSOWriter); ok && t.TSO() && e.d.cfg.VLAN == 0 {
		return 65535 - 20 - 60 // an IPv4 datagram's payload after the longest TCP header
	}
	return 0
}

// TransmitTSO implements delegation.TSOEnv.
func (e engineEnv) TransmitTSO(frame []byte, mss int) error {
	d := e.d
	t, ok := d.port.(port.TSOWriter)
	if !ok || d.cfg.VLAN != 0 {
		return e.Transmit(frame)
	}
	if err := t.WriteFrameTSO(frame, mss); err != nil {
		d.count(rings.StatTxDropPortError)
		return err
	}
	d.count(rings.StatTxFrames)
	d.stats[rings.StatTxBytes].Add(uint64(len(frame)))
	return nil
}

func (e engineEnv) TakeLegacyBuffer() (uint32, rings.Addr, uint32, bool) {
	desc, _ := e.d.peekRxBuffer()
	if desc == nil {
		return 0, 0, 0, false
	}
	id, addr, n := desc.BufID(), desc.Addr(), desc.Len()
	e.d.rx.Pop()
	return id, addr, n, true
}

func (e engineEnv) NowNanos() int64 {
	if e.d.traced || e.d.cfg.Manual {
		return e.d.now // the step's clock: a replay reads the same
	}
	return nanotime()
}

func (d *Device) memContains(a rings.Addr, n int) bool {
	return rings.Check(d.mem, a, n) == nil
}

// Engine returns the delegated-connection engine (for counters and tests;
// only the unit goroutine may call its other methods).
func (d *Device) Engine() *delegation.Engine { return d.eng }

// EngineOccupancy returns a snapshot of the engine's occupancy (indices
// taken, TIME_WAIT records, timers), taken by the unit at its last idle
// point.
func (d *Device) EngineOccupancy() delegation.Occupancy {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	return d.engOcc
}

// EngineCounters returns a snapshot of the engine's counters, taken by the
// unit at its last idle point.
func (d *Device) EngineCounters() delegation.Counters {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	return d.engSnap
}

// The TCP offload family's command handlers (cmdtable.go): each hands its
// command to the engine.

func (d *Device) cmdOffload(ce rings.CommandEntry) (rings.Status, uint64) {
	return d.eng.OffloadAt(ce.Conn(), ce.Addr(), ce.Len()), 0
}

func (d *Device) cmdPostBuffers(ce rings.CommandEntry) (rings.Status, uint64) {
	n, st := d.eng.PostBuffers(ce.Conn(), ce.Addr(), ce.Arg0())
	return st, uint64(n)
}

func (d *Device) cmdSetThresholds(ce rings.CommandEntry) (rings.Status, uint64) {
	return d.eng.SetThresholds(ce.Conn(), ce.Arg0(), ce.Arg1(), ce.Flags()&rings.CmdFlagArmSeqThreshold != 0), 0
}

func (d *Device) cmdUpdate(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	var u rings.ConnUpdate
	u.FromCommand(&c)
	return d.eng.Update(c.Conn, &u), 0
}

func (d *Device) cmdClose(ce rings.CommandEntry) (rings.Status, uint64) {
	return d.eng.Close(ce.Conn()), 0
}

func (d *Device) cmdAbort(ce rings.CommandEntry) (rings.Status, uint64) {
	idx := ce.Conn()
	if q := d.rdma.qps[idx]; q != nil {
		// The connection goes, and its QP with it: every work
		// request, posted or under way, completes flushed (as
		// DESTROY_QP does) before the QP is dropped.
		q.qp.LLPClosed()
		q.qp.Poll()
		d.dropQP(idx)
	}
	return d.eng.Abort(idx), 0
}

func (d *Device) cmdRelease(ce rings.CommandEntry) (rings.Status, uint64) {
	idx := ce.Conn()
	if q := d.rdma.qps[idx]; q != nil {
		d.dropQP(idx)
	}
	return d.eng.Release(idx), 0
}

func (d *Device) cmdRxInject(ce rings.CommandEntry) (rings.Status, uint64) {
	return d.rxInject(ce.Conn(), ce.Addr(), ce.Len()), 0
}

// rxInject takes back a frame the unit uploaded to the host before the
// connection of its 4-tuple was delegated (an RDMA listener's host holds
// the peer's MPA request that way) and steers it to that connection as if
// it had just arrived: checked as on receive, and only into connection
// idx. Anything else is dropped (BAD_PARAM, BAD_CONN): never uploaded
// again, so a host cannot loop a frame through the unit.
func (d *Device) rxInject(idx uint32, addr rings.Addr, n uint32) rings.Status {
	if int(n) < EthHeaderLen || int(n) > d.maxFrame {
		return rings.StatusBadParam
	}
	src, err := d.mem.Map(addr, int(n))
	if err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress
	}
	f := append(d.injectBuf[:0], src...) // the host may reuse its copy
	d.injectBuf = f
	var pf parsedFrame
	var t hdr.Tuple
	if classify(f, d.cfg.MAC, d.maxFrame, &pf, false) != rxLegacy {
		return rings.StatusBadParam
	}
	// Either family, as on receive: an IPv6 connection's early bytes
	// come back the same way.
	seg, ok := pf.tcpSegment(f, &t)
	if !ok {
		return rings.StatusBadParam
	}
	if got, ok := d.eng.Lookup(&t); !ok || got != idx {
		return rings.StatusBadConn
	}
	d.eng.InputSegment(idx, &t, seg, pf.engineFlags())
	return rings.StatusOK
}

// sendDelegated hands a transmit descriptor to its connection. A refused
// descriptor is reported to the host with an error notification (Aux = the
// status), so the host never waits for an acknowledgement that cannot come.
// One refused for want of room (NO_RESOURCES) also says where the
// connection's send queue ends (Seq), SND.UNA and the ACK count: the host
// queues the refused bytes again from there (Engine.Send).
func (d *Device) sendDelegated(desc rings.TxDesc) {
	var t rings.Tx
	_ = t.Decode(desc)
	if st := d.eng.Send(t.Conn, &t); st != rings.StatusOK {
		d.count(rings.StatTxDropBadDesc)
		n := rings.Notification{Flags: rings.NtfError, Conn: t.Conn, Aux: uint32(st), Len: t.Len}
		if st == rings.StatusNoResources {
			n.Seq, n.Ack, n.AckCount, _ = d.eng.SendEnd(t.Conn)
		}
		d.post(&n)
	}
}

func (d *Device) cmdPathMTU(ce rings.CommandEntry) (rings.Status, uint64) {
	st, mss := d.eng.PathMTU(ce.Conn(), ce.Arg0(), ce.Arg1())
	return st, uint64(mss)
}
