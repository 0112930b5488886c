package lwio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"sync"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// Several RDMA connections per client: when the negotiate response offers
// more than one instance and ClientConfig.Connections allows, Dial
// connects one to each ("links"), every one authenticated with the
// server's key on its own instance. Each link is a Client of its own
// (credits, slots, completion loop) that shares the primary's pipe, keys,
// verbs provider and protection domain; a file is registered on every
// link (one REGISTER per link with the same resume key, each with that
// link's SessionId), and ReadAt and WriteAt spread their pieces over the
// links round robin. A piece whose link is lost goes again on a live one:
// reads and writes at an offset are idempotent, so none is lost and none
// is done twice to a different effect.

// newClient is a client with no connection yet, on verbs provider v and
// protection domain pd (v nil: a new provider and PD).
func newClient(h *tcpstack.Host, v *verbs.Provider, pd verbs.PD, cfg ClientConfig) (*Client, error) {
	if v == nil {
		var err error
		if v, err = verbs.Open(h); err != nil {
			return nil, fmt.Errorf("lwio: %w", err)
		}
		pd = v.AllocPD()
	}
	c := &Client{cfg: cfg, h: h, v: v, pd: pd, byCookie: map[uint64]*Call{},
		done: make(chan struct{}), loopDone: make(chan struct{})}
	c.cond = sync.NewCond(&c.mu)
	return c, nil
}

// dialLinks connects and authenticates a link to each of dsts.
func (c *Client) dialLinks(ctx context.Context, dsts []netip.AddrPort) error {
	for _, d := range dsts {
		l, _ := newClient(c.h, c.v, c.pd, c.cfg)
		l.key, l.skey, l.srvName, l.pipeAt, l.primary = c.key, c.skey, c.srvName, c.pipeAt, c
		if err := l.connect(ctx, d); err != nil {
			return fmt.Errorf("lwio: link %d: %w", len(c.links)+1, err)
		}
		c.links = append(c.links, l)
	}
	return nil
}

// Connections is the RDMA connections the client has: 1 and its links.
func (c *Client) Connections() int { return 1 + len(c.links) }

// Resent is the pieces of ReadAt and WriteAt sent again on another
// connection after theirs was lost.
func (c *Client) Resent() uint64 { return c.resent.Load() }

// LinkStats are the counters of each connection, the primary's first.
func (c *Client) LinkStats() []ClientStats {
	s := []ClientStats{c.Stats()}
	for _, l := range c.links {
		s = append(s, l.Stats())
	}
	return s
}

// register sends REGISTER of p on c (p's SessionID is c's own) and returns
// the Fid.
func (c *Client) register(ctx context.Context, p FidParams) (uint16, error) {
	p.SessionID = c.sessionID
	cl, err := c.start(ctx, OpRegister, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		p.Encode(slot[slotPayload:])
		h.Length = HeaderSize + FidParamsSize
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize+FidParamsSize)}, nil
	})
	if err != nil {
		return 0, err
	}
	if err := c.wait(ctx, cl); err != nil {
		return 0, err
	}
	if cl.N == 0 || cl.N > 0xFFFF {
		return 0, fmt.Errorf("lwio: REGISTER answered Fid %d", cl.N)
	}
	return uint16(cl.N), nil
}

// registerLinks registers the file f (registered on the primary) on every
// link, with the same resume key, before the client releases it.
func (c *Client) registerLinks(ctx context.Context, f *File, p FidParams) error {
	for _, l := range c.links {
		fid, err := l.register(ctx, p)
		if err != nil {
			_ = f.Close() // and the peers registered so far
			return err
		}
		f.peers = append(f.peers, &File{c: l, fid: fid, name: f.name, size: f.size})
	}
	if len(f.peers) > 0 {
		f.self = &File{c: f.c, fid: f.fid, name: f.name, size: f.size}
	}
	return nil
}

// next is the registration a Start call goes on: with links, the client's
// connections round robin, skipping failed ones (the first when all
// failed: its error is the answer); without, f itself.
func (f *File) next() *File {
	if len(f.peers) == 0 {
		return f
	}
	if g := f.link(int(f.rr.Add(1))); g != nil {
		return g
	}
	return f.self
}

// closeLinks closes every link (Client.Close).
func (c *Client) closeLinks() {
	for _, l := range c.links {
		_ = l.Close()
	}
}

// link returns the file's registration on link i of its client (0: the
// primary), round robin, skipping links that have failed; nil when none
// works.
func (f *File) link(i int) *File {
	n := 1 + len(f.peers)
	for k := range n {
		g := f.self
		if j := (i + k) % n; j > 0 {
			g = f.peers[j-1]
		} else if g == nil {
			g = f
		}
		if g.c.Err() == nil {
			return g
		}
	}
	return nil
}

// lostLink reports whether err is a request lost with its connection
// (not a status the server gave, not the end of the file).
func lostLink(g *File, err error) bool {
	var se *StatusError
	return err != nil && err != io.EOF && !errors.As(err, &se) && g.c.Err() != nil && !errors.Is(g.c.Err(), ErrClosed)
}

// ErrNoLink is a request that could go on no connection: every link of
// the client has failed.
var ErrNoLink = errors.New("lwio: every connection of the client has failed")

// startFn is a File's Start method as a function of the File.
type startFn func(g *File, ctx context.Context, p []byte, off int64, done chan *Call) (*Call, error)

// spread runs the pieces of p at off, each at most piece bytes, over the
// file's links round robin, all in flight at once up to each link's
// credits; a piece lost with its link goes again on the next live one. It
// returns, per piece in order, the bytes done and the first error.
func (f *File) spread(p []byte, off int64, start startFn, piece int) ([]int, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	ctx := context.Background()
	npieces := (len(p) + piece - 1) / piece
	done := make(chan *Call, npieces)
	got := make([]int, npieces)
	where := make(map[*Call]*File, npieces)
	submit := func(i, try int) error {
		o := i * piece
		for k := range 1 + len(f.peers) {
			g := f.link(i + try + k)
			if g == nil {
				break
			}
			cl, err := start(g, ctx, p[o:min(o+piece, len(p))], off+int64(o), done)
			if err == nil {
				where[cl] = g
				return nil
			}
			if g.c.Err() == nil || errors.Is(g.c.Err(), ErrClosed) {
				return err // refused for itself, not for its link
			}
		}
		return ErrNoLink
	}
	var first error
	inflight := 0
	for i := range npieces {
		if first = submit(i, 0); first != nil {
			break
		}
		inflight++
	}
	if inflight == 1 {
		for cl, g := range where {
			g.c.spin(cl) // one request: a polling caller watches it itself
		}
	}
	tries := make([]int, npieces)
	for ; inflight > 0; inflight-- {
		cl := <-done
		g := where[cl]
		delete(where, cl)
		i := int(cl.Off-off) / piece
		if lostLink(g, cl.Err) && tries[i] < len(f.peers) && first == nil {
			tries[i]++
			if err := submit(i, tries[i]); err == nil {
				f.c.resent.Add(1)
				inflight++
				continue
			}
		}
		got[i] = cl.N
		if cl.Err != nil && (first == nil || first == io.EOF) {
			first = cl.Err
		}
	}
	return got, first
}
