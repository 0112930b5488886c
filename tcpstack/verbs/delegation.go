package verbs

// The RDMA side of delegation: a QP is made with its connection's OFFLOAD
// (tcpstack.RDMAHooks.PrepareDelegation), its CREATE_QP and the peer's
// early bytes go in the OFFLOAD's publish (qpPrep.Publish), and the caller
// adopts it once the delegation returns (adoptQP).

import (
	"errors"
	"sync"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// rawStream reports whether a flow being delegated is an RDMA connection:
// it gets no user buffers.
func (v *Provider) rawStream(key hdr.Tuple) bool {
	a, _ := v.rdmaFlow(key)
	return a != nil
}

// rdmaFlow returns the QP attributes of an RDMA connection being
// delegated, and whether we are its initiator; nil if the flow is not one.
func (v *Provider) rdmaFlow(key hdr.Tuple) (*QPAttr, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if a := v.flows[key]; a != nil {
		return a, true
	}
	return v.listen[listenKey{key.LocalIP, key.LocalPort}], false
}

// markFlow declares (attr) or forgets (nil) a dialled RDMA connection.
func (v *Provider) markFlow(key hdr.Tuple, attr *QPAttr) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if attr != nil {
		v.flows[key] = attr
	} else {
		delete(v.flows, key)
	}
}

// qpPrep is the QP made for an RDMA connection being delegated, and its
// CREATE_QP, which goes in the OFFLOAD's publish.
type qpPrep struct {
	v       *Provider
	qp      *QP
	key     hdr.Tuple
	create  rings.Command
	discard func() // idempotent: see forget
}

// PrepareDelegation implements tcpstack.RDMAHooks: see prepareQP.
func (v *Provider) PrepareDelegation(idx uint32, key hdr.Tuple) (tcpstack.RDMADelegation, error) {
	if h := v.beforePrepare; h != nil {
		h(key)
	}
	p, err := v.prepareQP(idx, key)
	if p == nil {
		return nil, err // a nil interface, not a nil *qpPrep
	}
	return p, nil
}

// ForgetFlow implements tcpstack.RDMAHooks: what is held for the flow is
// dropped.
func (v *Provider) ForgetFlow(key hdr.Tuple) { v.forgetEarly(key) }

// prepareQP makes the QP of connection idx if key is an RDMA connection
// being delegated (nil, nil if not): its rings and control block in host
// memory, registered under the connection index so its events find it.
// The CREATE_QP goes in the OFFLOAD's publish (Publish): the unit then
// attaches the QP in the same pass, before it handles another received
// frame, so no byte of the peer's (its MPA request) can reach the
// connection first.
func (v *Provider) prepareQP(idx uint32, key hdr.Tuple) (*qpPrep, error) {
	attr, initiator := v.rdmaFlow(key)
	if attr == nil {
		return nil, nil
	}
	v.mu.Lock()
	delete(v.prepErr, idx)
	v.mu.Unlock()
	qp, err := v.newQP(attr, idx, initiator)
	if err != nil {
		return nil, err
	}
	qp.adoptable = true
	if err := qp.register(); err != nil {
		qp.freeMem()
		return nil, err
	}
	p := &qpPrep{v: v, qp: qp, key: key,
		create: rings.Command{Opcode: rings.OpCreateQP, Conn: idx, Addr: qp.cfgBase, Len: rings.QPConfigSize}}
	p.discard = sync.OnceFunc(p.forget)
	return p, nil
}

// Publish publishes the OFFLOAD (tcpstack.RDMADelegation) with, behind
// it, the CREATE_QP and the bytes the peer sent before the delegation
// (RX_INJECT, one frame each): the unit steers them to the connection, now
// with its QP, as if they had just arrived. From this publish on, frames
// that still come the legacy way (the unit uploaded them before it ran the
// OFFLOAD) are injected as they come, behind it: v.mu, held across
// publish, orders them after it.
func (p *qpPrep) Publish(publish func(follow []tcpstack.HostCommand) error) error {
	v := p.v
	follow := []tcpstack.HostCommand{{Cmd: p.create}}
	v.mu.Lock()
	defer v.mu.Unlock()
	ef := v.early[p.key]
	if ef == nil && !p.qp.initiator {
		ef = &earlyFlow{}
		v.early[p.key] = ef
	}
	if ef != nil {
		for _, f := range ef.frames {
			follow = append(follow, tcpstack.HostCommand{Cmd: rings.Command{Opcode: rings.OpRxInject, Conn: p.create.Conn}, Param: f})
		}
	}
	if err := publish(follow); err != nil {
		return err
	}
	if ef != nil {
		v.earlyInjected.Add(uint64(len(ef.frames)))
		v.copied(ef.bytes) // the command path copies each into host memory
		ef.frames, ef.bytes, ef.forward, ef.idx = nil, 0, true, p.create.Conn
	}
	return nil
}

// Done takes the CREATE_QP write-back of an OFFLOAD the unit took
// (tcpstack.RDMADelegation): a refusal is kept for adoptQP.
func (p *qpPrep) Done(res rings.Command) {
	if res.Status == rings.StatusOK {
		return
	}
	err := &CommandError{Op: rings.OpCreateQP, Status: res.Status}
	p.discard()
	v := p.v
	v.mu.Lock()
	v.prepErr[p.qp.qpn] = err
	v.mu.Unlock()
}

// Discard says the unit does not have the connection
// (tcpstack.RDMADelegation): the QP goes, once.
func (p *qpPrep) Discard() { p.discard() }

// forget (through discard, once) forgets the QP and frees its memory: the
// unit has none (its CREATE_QP was refused or never ran, or ABORT took it
// down).
func (p *qpPrep) forget() {
	p.qp.unregister()
	p.qp.freeMem()
}

// adoptQP takes the QP made with connection c's OFFLOAD and readies the
// connection for it.
func (v *Provider) adoptQP(c *tcpstack.DelegatedConn) (*QP, error) {
	return v.adopt(c.Index(), c)
}

// adopt is adoptQP for connection index idx (the tests' connections are
// not delegated ones).
func (v *Provider) adopt(idx uint32, c *tcpstack.DelegatedConn) (*QP, error) {
	v.mu.Lock()
	qp := v.qps[idx]
	err := v.prepErr[idx]
	delete(v.prepErr, idx)
	if qp != nil && !qp.adoptable {
		qp = nil
	}
	if qp != nil {
		qp.adoptable = false
	}
	v.mu.Unlock()
	if qp == nil {
		if err == nil {
			err = errors.New("verbs: CREATE_QP: no QP was made with the connection")
		}
		return nil, err
	}
	qp.conn, qp.local, qp.remote = c, c.LocalAddr(), c.RemoteAddr()
	// The host memory of the byte-stream path goes back (an RDMA
	// connection never uses it); bytes the host already holds mean the
	// peer's first bytes did not go to the QP.
	if v.host.TakeStream(c) {
		return qp, ErrEarlyData
	}
	return qp, nil
}
