package nic

import (
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/rings"
)

// RDMA on delegated connections: the unit keeps one memory table (STags),
// the completion queues and the queue pairs. A QP is attached to a delegated
// connection as its upper-layer protocol: the engine hands it the in-order
// byte stream and pulls FPDUs from it, and the QP places data straight into
// registered host memory.

const (
	maxCQs        = 256
	memTableSlots = 1 << 14
)

type rdmaState struct {
	mem     *iwarp.MemTable
	cqs     map[uint32]*iwarp.CQ
	cqNums  map[*iwarp.CQ]uint32
	qps     map[uint32]*qpLink
	pending []rings.Notification // events that found the notification ring full
}

// qpLink adapts an iwarp.QP to the engine's ULP seam.
type qpLink struct {
	idx      uint32
	qp       *iwarp.QP
	scq, rcq *iwarp.CQ
}

// Receive takes every byte: the QP holds at most one partial FPDU itself.
func (l *qpLink) Receive(p []byte) int  { l.qp.Receive(p); return len(p) }
func (l *qpLink) Transmit(d []byte) int { return l.qp.Transmit(d) }
func (l *qpLink) HasOutput() bool       { return l.qp.HasOutput() }
func (l *qpLink) LLPClosed()            { l.qp.LLPClosed() }
func (l *qpLink) WantClose() bool       { return l.qp.WantClose() }

func (d *Device) rdmaInit() {
	d.rdma = rdmaState{
		mem: iwarp.NewMemTable(d.mem, memTableSlots, d.cfg.STagSeed),
		cqs: map[uint32]*iwarp.CQ{}, cqNums: map[*iwarp.CQ]uint32{}, qps: map[uint32]*qpLink{},
	}
	d.bells.init(connTableSize(d.cfg.Engine))
}

// QPStats returns the counters of the QP on connection idx, as of the
// unit's last idle point.

var _ delegation.ULP = (*qpLink)(nil)

// postEvent posts an RDMA event notification, keeping it for a retry when
// the ring is full: an event is never lost.
func (d *Device) postEvent(n rings.Notification) {
	if len(d.rdma.pending) > 0 || !d.post(&n) {
		d.rdma.pending = append(d.rdma.pending, n)
	}
}

func (d *Device) retryEvents() {
	for len(d.rdma.pending) > 0 && d.post(&d.rdma.pending[0]) {
		d.rdma.pending = d.rdma.pending[1:]
	}
}

// The RDMA family's command handlers (cmdtable.go). Each decodes the
// whole entry: the RDMA commands read most of its fields.

func (d *Device) cmdRegMR(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	return d.rdma.mem.RegMRCommand(&c)
}

func (d *Device) cmdDeregMR(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	return d.rdma.mem.DeregMRCommand(&c), 0
}

func (d *Device) cmdCreateCQ(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	r := &d.rdma
	if c.Conn >= maxCQs {
		return rings.StatusBadParam, 0
	}
	if r.cqs[c.Conn] != nil {
		return rings.StatusBadState, 0
	}
	l := rings.Layout{Base: c.Addr, Count: c.Arg0, EntrySize: rings.CQEntrySize}
	if l.Validate() != nil {
		return rings.StatusBadParam, 0
	}
	num := c.Conn
	cq, err := iwarp.NewCQ(d.mem, l, func(*iwarp.CQ) {
		d.postEvent(rings.Notification{Flags: rings.NtfCQEvent, Conn: num})
	})
	if err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress, 0
	}
	r.cqs[num], r.cqNums[cq] = cq, num
	d.setCQLive(num, true)
	return rings.StatusOK, 0
}

func (d *Device) cmdDestroyCQ(ce rings.CommandEntry) (rings.Status, uint64) {
	r := &d.rdma
	num := ce.Conn()
	cq := r.cqs[num]
	if cq == nil {
		return rings.StatusBadParam, 0
	}
	for _, q := range r.qps {
		if q.scq == cq || q.rcq == cq {
			return rings.StatusBadState, 0
		}
	}
	delete(r.cqs, num)
	delete(r.cqNums, cq)
	d.setCQLive(num, false)
	return rings.StatusOK, 0
}

func (d *Device) cmdArmCQ(ce rings.CommandEntry) (rings.Status, uint64) {
	cq := d.rdma.cqs[ce.Conn()]
	if cq == nil {
		return rings.StatusBadParam, 0
	}
	arg := ce.Arg0()
	if arg&rings.ArmIfPending != 0 {
		if cq.ArmIfPending(arg&rings.ArmSolicited != 0) {
			d.postEvent(rings.Notification{Flags: rings.NtfCQEvent, Conn: ce.Conn()})
		}
		return rings.StatusOK, 0
	}
	cq.Arm(arg&rings.ArmSolicited != 0)
	return rings.StatusOK, 0
}

func (d *Device) cmdCreateQP(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	return d.createQP(&c), 0
}

func (d *Device) cmdModifyQP(ce rings.CommandEntry) (rings.Status, uint64) {
	var c rings.Command
	_ = c.Decode(ce)
	return d.modifyQP(&c), 0
}

func (d *Device) cmdDestroyQP(ce rings.CommandEntry) (rings.Status, uint64) {
	r := &d.rdma
	idx := ce.Conn()
	q := r.qps[idx]
	if q == nil {
		return rings.StatusBadConn, 0
	}
	q.qp.Close()
	q.qp.LLPClosed()
	q.qp.Poll() // flush what is left
	d.dropQP(idx)
	return d.eng.Abort(idx), 0
}

func (d *Device) cmdQPDoorbell(ce rings.CommandEntry) (rings.Status, uint64) {
	idx := ce.Conn()
	q := d.rdma.qps[idx]
	if q == nil {
		return rings.StatusBadConn, 0
	}
	q.qp.Poll()
	d.eng.ULPKick(idx)
	return rings.StatusOK, 0
}

func (d *Device) createQP(c *rings.Command) rings.Status {
	r := &d.rdma
	if r.qps[c.Conn] != nil {
		return rings.StatusBadState
	}
	info, ok := d.eng.Info(c.Conn)
	if !ok {
		return rings.StatusBadConn
	}
	if c.Len < rings.QPConfigSize {
		return rings.StatusBadParam
	}
	blk, err := d.mem.Map(c.Addr, rings.QPConfigSize)
	if err != nil {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress
	}
	var qc rings.QPConfig
	if qc.Decode(blk) != nil || qc.Flags&^validQPFlags != 0 || qc.PrivLen > iwarp.MPAMaxPrivateData {
		return rings.StatusBadParam
	}
	scq, rcq := r.cqs[qc.SendCQ], r.cqs[qc.RecvCQ]
	if scq == nil || rcq == nil {
		return rings.StatusBadParam
	}
	if qc.PeerPrivAddr != 0 && !d.memContains(qc.PeerPrivAddr, iwarp.MPAMaxPrivateData) {
		d.count(rings.StatDMAErrors)
		return rings.StatusBadAddress
	}
	var priv []byte
	if qc.PrivLen > 0 {
		p, err := d.mem.Map(qc.PrivAddr, int(qc.PrivLen))
		if err != nil {
			d.count(rings.StatDMAErrors)
			return rings.StatusBadAddress
		}
		priv = append([]byte(nil), p...)
	}
	idx := c.Conn
	qp, err := iwarp.NewQP(d.mem, r.mem, iwarp.Config{
		QPN: idx, PD: qc.PD, Initiator: qc.Flags&rings.QPFlagInitiator != 0,
		MSS: int(info.SegPayload), IRD: int(qc.IRD), ORD: int(qc.ORD), PrivateData: priv,
		NoCRC: qc.Flags&rings.QPFlagNoCRC != 0, PeerToPeer: qc.Flags&rings.QPFlagPeerToPeer != 0, MPARev: mpaRev(qc.Flags),
		SQ:     rings.Layout{Base: qc.SQBase, Count: qc.SQCount, EntrySize: rings.SQEntrySize},
		RQ:     rings.Layout{Base: qc.RQBase, Count: qc.RQCount, EntrySize: rings.RQEntrySize},
		SendCQ: scq, RecvCQ: rcq,
		OnEvent: func(q *iwarp.QP, ev iwarp.Event) {
			n := rings.Notification{Flags: rings.NtfQPEvent, Conn: idx, Aux: uint32(ev)}
			switch ev {
			case iwarp.EvConnectRequest, iwarp.EvEstablished, iwarp.EvRejected:
				// The upper protocol's private data (LWIO and sockets
				// direct negotiate in it) goes to host memory first.
				if pd := q.PeerPrivateData(); qc.PeerPrivAddr != 0 && len(pd) > 0 {
					if err := d.mem.WriteAt(pd, qc.PeerPrivAddr); err != nil {
						d.count(rings.StatDMAErrors)
					} else {
						n.Len = uint32(len(pd))
					}
				}
			}
			d.postEvent(n)
		},
	})
	if err != nil {
		return rings.StatusBadParam
	}
	link := &qpLink{idx: idx, qp: qp, scq: scq, rcq: rcq}
	if st := d.eng.AttachULP(idx, link, 0); st != rings.StatusOK {
		return st
	}
	r.qps[idx] = link
	// Before the completion: the host rings only a QP it was told of.
	d.setQPLive(idx, true)
	return rings.StatusOK
}

// validQPFlags is every defined QP flag; any other bit is BAD_PARAM.
const validQPFlags = rings.QPFlagInitiator | rings.QPFlagNoCRC | rings.QPFlagPeerToPeer | rings.QPFlagMPARev1

// mpaRev is the MPA revision a QP's flags ask for (0: the engine's default).
func mpaRev(flags uint32) int {
	if flags&rings.QPFlagMPARev1 != 0 {
		return iwarp.MPARevision1
	}
	return 0
}

func (d *Device) modifyQP(c *rings.Command) rings.Status {
	q := d.rdma.qps[c.Conn]
	if q == nil {
		return rings.StatusBadConn
	}
	var err error
	switch rings.QPAction(c.Arg0) {
	case rings.QPConnect:
		err = q.qp.Connect()
	case rings.QPAccept, rings.QPReject:
		var pd []byte
		if c.Len > 0 {
			if c.Len > iwarp.MPAMaxPrivateData {
				return rings.StatusBadParam
			}
			p, merr := d.mem.Map(c.Addr, int(c.Len))
			if merr != nil {
				d.count(rings.StatDMAErrors)
				return rings.StatusBadAddress
			}
			pd = p
		}
		if rings.QPAction(c.Arg0) == rings.QPAccept {
			err = q.qp.Accept(pd)
		} else {
			err = q.qp.Reject(pd)
		}
	case rings.QPClose:
		q.qp.Close()
	default:
		return rings.StatusBadParam
	}
	if err != nil {
		return rings.StatusBadState
	}
	d.eng.ULPKick(c.Conn)
	return rings.StatusOK
}

func (d *Device) QPStats(idx uint32) (iwarp.QPStats, bool) {
	d.snapMu.Lock()
	defer d.snapMu.Unlock()
	s, ok := d.qpSnap[idx]
	return s, ok
}
