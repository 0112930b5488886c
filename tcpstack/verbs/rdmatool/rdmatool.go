// Package rdmatool is librdmacm's example tools on the verbs API: rping's
// protocol (Ping) and rdma_server/rdma_client's exchange (Echo), in either
// role, so an emulated host interoperates with Linux's (siw) rping,
// rdma_client and rdma_server. `emunic rdma ping` and `emunic rdma echo`
// are these on a TAP; a Go program can call them on any tcpstack.Host.
//
// Everything goes through the public verbs: DialRDMA / ListenRDMA, memory
// regions, Sends, RDMA Reads and Writes, completions.
package rdmatool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// Options are the connection's MPA choices (verbs.QPAttr's).
type Options struct {
	NoCRC      bool // do not ask for MPA CRC (used anyway if the peer asks)
	PeerToPeer bool // as initiator, ask for RFC 6581 peer-to-peer mode
}

// FirstSendDelay is how long a client waits after the connection is
// established before its first Send (and, in peer-to-peer mode, before
// its RTR: QPAttr.RTRDelay). Linux siw as responder sends its MPA
// reply, then hands the socket to the QP; bytes that arrive between the
// two wake nobody (siw_cm_llp_data_ready ignores data in RDMA mode), so a
// first FPDU sent straight after the reply sits unread until more data
// comes, and a protocol where the client speaks first (rping,
// rdma_client) stalls. A real rping client is slow enough not to hit it;
// ours, a fraction of a millisecond after the reply, is not (measured
// under QEMU TCG). MPA itself allows the FPDU at once (RFC 5044 §7.1.3).
var FirstSendDelay = 25 * time.Millisecond

// settle waits FirstSendDelay after the connection came up.
func settle(ctx context.Context) error {
	t := time.NewTimer(FirstSendDelay)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// ErrPeerGone: the connection ended before the exchange was complete.
var ErrPeerGone = errors.New("rdmatool: the peer disconnected")

// session is one QP with one registered buffer and its completion queue.
type session struct {
	v   *verbs.Provider
	pd  verbs.PD
	cq  *verbs.CQ
	buf *verbs.Buffer
	mr  *verbs.MR
	qp  *verbs.QP
	wc  [8]rings.Completion
	// Completions of kinds the caller is not waiting for yet.
	pending []rings.Completion
}

func newSession(v *verbs.Provider, size int) (*session, error) {
	s := &session{v: v, pd: v.AllocPD()}
	var err error
	if s.cq, err = v.CreateCQ(64); err != nil {
		return nil, err
	}
	if s.buf, err = v.AllocBuffer(size); err != nil {
		s.close()
		return nil, err
	}
	if s.mr, err = v.RegMR(s.pd, s.buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead); err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *session) attr(o Options, ird, ord int, setup func(*verbs.QP) error) verbs.QPAttr {
	return verbs.QPAttr{PD: s.pd, SendCQ: s.cq, RecvCQ: s.cq, SQDepth: 16, RQDepth: 16, IRD: ird, ORD: ord,
		NoCRC: o.NoCRC, PeerToPeer: o.PeerToPeer, RTRDelay: FirstSendDelay, Setup: setup}
}

// close disconnects and frees everything.
func (s *session) close() {
	if s.qp != nil {
		_ = s.qp.Close()
	}
	if s.mr != nil {
		_ = s.mr.Dereg()
	}
	if s.buf != nil {
		_ = s.buf.Free()
	}
	if s.cq != nil {
		_ = s.cq.Destroy()
	}
}

// postRecv posts a receive of n bytes at off of the buffer.
func (s *session) postRecv(qp *verbs.QP, wrid uint64, off, n int) error {
	w := rings.RecvWR{WRID: wrid, NumSGE: 1}
	w.SGL[0] = s.mr.SGE(off, n)
	return qp.PostRecv(&w)
}

// post posts a signaled work request on the buffer's bytes [off, off+n).
func (s *session) post(op rings.WROpcode, wrid uint64, off, n int, raddr uint64, rkey uint32) error {
	w := rings.SendWR{Opcode: op, Flags: rings.WRSignaled, WRID: wrid, NumSGE: 1, RemoteAddr: raddr, RKey: rkey}
	w.SGL[0] = s.mr.SGE(off, n)
	return s.qp.PostSend(&w)
}

// send posts a Send of the buffer's bytes [off, off+n) and waits for its
// completion.
func (s *session) send(ctx context.Context, off, n int) error {
	if err := s.post(rings.WRSend, 0, off, n, 0, 0); err != nil {
		return err
	}
	_, err := s.await(ctx, rings.WCSend)
	return err
}

// await returns the next completion of opcode op, keeping others for
// later; a failed completion is an error (a flushed one: the peer left).
func (s *session) await(ctx context.Context, op rings.WCOpcode) (rings.Completion, error) {
	for {
		for i, c := range s.pending {
			if c.Status != rings.WCSuccess {
				s.pending = s.pending[:0]
				return c, s.failed(c)
			}
			if c.Opcode == op {
				s.pending = append(s.pending[:i], s.pending[i+1:]...)
				return c, nil
			}
		}
		n, err := s.cq.PollWait(ctx, s.wc[:], false)
		if err != nil {
			return rings.Completion{}, fmt.Errorf("waiting for %v: %w", op, err)
		}
		s.pending = append(s.pending, s.wc[:n]...)
	}
}

// failed is the error of a completion that did not succeed.
func (s *session) failed(c rings.Completion) error {
	if c.Status == rings.WCWRFlushErr {
		if err := s.qp.Err(); err != nil {
			return fmt.Errorf("%w (%v: %v)", ErrPeerGone, c.Opcode, err)
		}
		return fmt.Errorf("%w (%v flushed)", ErrPeerGone, c.Opcode)
	}
	return fmt.Errorf("%v completed with %v (QP: %v)", c.Opcode, c.Status, s.qp.Err())
}
