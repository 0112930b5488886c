package lwio

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/emunic/emunic/rings"
)

// SetTestHookIO sets the hook every server worker runs before a read or
// write (nil: none) and returns a function that restores the old one.
func SetTestHookIO(f func(Opcode)) func() {
	var p *func(Opcode)
	if f != nil {
		p = &f
	}
	old := testHookIO.Swap(p)
	return func() { testHookIO.Store(old) }
}

// SetTestHookAuth sets a hook that may alter the client's encoded
// AUTH_PARAMS before they are sent.
func SetTestHookAuth(f func([]byte)) func() {
	old := testHookAuth
	testHookAuth = f
	return func() { testHookAuth = old }
}

// SendRaw sends a request built from h (Cookie, ImmCookie, Credits and the
// status block are the client's) with payload after the header; length,
// when not negative, overrides the header's Length. It bypasses the
// client's own checks, to play a broken or hostile client.
func (c *Client) SendRaw(ctx context.Context, h Header, payload []byte, length int) (*Call, error) {
	return c.sendRaw(ctx, h, payload, length, false)
}

// SendRawOrder is SendRaw with h's own Sequence and Tid, to play a client
// that numbers its requests wrong.
func (c *Client) SendRawOrder(ctx context.Context, h Header, payload []byte, length int) (*Call, error) {
	return c.sendRaw(ctx, h, payload, length, true)
}

func (c *Client) sendRaw(ctx context.Context, h Header, payload []byte, length int, order bool) (*Call, error) {
	return c.start(ctx, h.Opcode, func(cl *Call, hh *Header, slot []byte) ([]rings.SGE, error) {
		keep := *hh
		*hh = h
		hh.Cookie, hh.ImmCookie, hh.Credits = keep.Cookie, keep.ImmCookie, keep.Credits
		if !order {
			hh.Sequence, hh.Tid = keep.Sequence, keep.Tid
		}
		if h.Flags&FlagInterrupt == 0 {
			hh.IosVa, hh.IosMh = c.smr.TO(cl.slot*slotSize+slotIOSB), c.smr.RKey
		}
		n := copy(slot[slotPayload:slotIOSB], payload)
		if length >= 0 {
			hh.Length = uint32(length)
		}
		cl.length = int(hh.Length)
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize+n)}, nil
	})
}

// RawWrite sends a WRITE whose data is n bytes of a staging buffer (for
// writes larger than a slot holds).
func (c *Client) RawWrite(ctx context.Context, fid uint16, n int) (*Call, error) {
	return c.start(ctx, OpWrite, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		b, err := c.bounceLocked()
		if err != nil {
			return nil, err
		}
		if len(b.buf.Bytes()) < n {
			return nil, ErrTooLarge
		}
		cl.bounce = b
		h.Fid, h.Marker, h.Length = fid, IOMarker, uint32(n)
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize), b.mr.SGE(0, n)}, nil
	})
}

// Resign recomputes the signature of encoded AUTH_PARAMS p (as Append
// lays them out: the signature option is the last before END).
func Resign(p []byte) { ResignWith(p, nil) }

// ResignWith is Resign under secret.
func ResignWith(p, secret []byte) {
	at := len(p) - 1 - 2 - OptSignatureLen
	sig := signature(secret, p[:at], []byte{OptEnd})
	copy(p[at+2:], sig[:])
}

// Cheat makes the client believe it holds extra more credits than the
// server granted (it posts the receive buffers they would need), to play
// a client that breaks the credit limit.
func (c *Client) Cheat(extra int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.credits += extra
	c.cond.Broadcast()
	return c.postRecv(extra)
}

// DebugState describes the client's request state (tests: a stall report).
func (c *Client) DebugState() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("client credits %d outstanding %d waiting %d posted %d retireNext %d ackGrant %v intrOut %v free slots %d err %v;",
		c.credits, c.outstanding, c.waiting, c.posted, c.retireNext, c.ackGrant, c.intrOut, len(c.freeSlots), c.err)
	for k, cl := range c.byCookie {
		s += fmt.Sprintf(" [%d %v answered %v status %#x]", k, cl.Op, cl.answered, cl.status)
	}
	return s
}

// DebugState describes every connection of the server.
func (s *Server) DebugState() string {
	s.mu.Lock()
	conns := make([]*sconn, 0, len(s.conns))
	for _, c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	out := ""
	for _, c := range conns {
		c.mu.Lock()
		out += fmt.Sprintf("conn %d: credits %d outstanding %d txn %d unposted %d queue %d sqUsed %d inflight %d err %v intr %v/%v\n",
			c.qp.QPN(), c.credits, c.outstanding, c.txn, len(c.unposted), len(c.queue), c.sqUsed, len(c.inflight), c.err, c.intrPending, c.completedIO)
		c.mu.Unlock()
	}
	return out
}

// RawBytes sends b as a whole message, whatever it holds (it must fit a
// request slot).
func (c *Client) RawBytes(ctx context.Context, b []byte) (*Call, error) {
	return c.start(ctx, OpClose, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		*h = Header{Sequence: h.Sequence, Tid: h.Tid}
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize+slotPayload, copy(slot[slotPayload:slotIOSB], b))}, nil
	})
}

// RawRDMA posts an RDMA Write (read false) or RDMA Read of n bytes at the
// server's memory named by stag and to, from or into the client's staging
// memory, as a client that tries to reach into the server would.
func (c *Client) RawRDMA(read bool, stag uint32, to uint64, n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	b, err := c.bounceLocked()
	if err != nil {
		return err
	}
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 1 << 62, RemoteAddr: to, RKey: stag, NumSGE: 1}
	if read {
		w.Opcode = rings.WRRDMARead
	}
	w.SGL[0] = b.mr.SGE(0, n)
	return c.qp.PostSend(&w)
}

// NextSequence is the Sequence the client's next request will carry.
func (c *Client) NextSequence() uint16 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.seq
}

// Tid is the transaction ID the request was sent with.
func (cl *Call) Tid() uint32 { return uint32(cl.cookie) }

// DropConn ends the server's connection with the highest QP number, as a
// lost connection would end, and returns its QP number (0: none).
func (s *Server) DropConn() uint32 {
	s.mu.Lock()
	var c *sconn
	for _, x := range s.conns {
		if c == nil || x.qp.QPN() > c.qp.QPN() {
			c = x
		}
	}
	s.mu.Unlock()
	if c == nil {
		return 0
	}
	c.fail(errors.New("lwio: test: connection dropped"))
	return c.qp.QPN()
}

// LinkErrs is each connection's error (nil while it works), the primary's
// first.
func (c *Client) LinkErrs() []error {
	errs := []error{c.Err()}
	for _, l := range c.links {
		errs = append(errs, l.Err())
	}
	return errs
}

// PipeRaw writes m on the client's file-access channel and returns the
// message that answers it: a client that sends what the API would not.
func (c *Client) PipeRaw(m []byte) ([]byte, error) {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if _, err := c.pipe.Write(m); err != nil {
		return nil, err
	}
	c.pipe.SetReadDeadline(time.Now().Add(10 * time.Second))
	defer c.pipe.SetReadDeadline(time.Time{})
	r, _, err := readControl(c.pipe, nil)
	return r, err
}
