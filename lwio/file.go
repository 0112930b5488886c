package lwio

import (
	"context"
	"fmt"
	"io"
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
)

// OpenFlags say how a file is opened.
type OpenFlags struct {
	// Create creates the file if it is missing; Truncate also empties it.
	Create, Truncate bool
	// NoBuffering registers the file with FILE_NO_INTERMEDIATE_BUFFERING:
	// the server uses direct I/O for aligned transfers where its file
	// system allows, and collapsed writes are allowed.
	NoBuffering bool
}

// File is a registered remote file: io.ReaderAt and io.WriterAt over the
// client's RDMA connection, safe for concurrent use.
type File struct {
	c     *Client
	fid   uint16
	name  string
	size  int64
	peers []*File // the same file on the client's links (links.go)
	self  *File   // with peers: this registration alone, as spread and next use it
	rr    atomic.Uint32

	mu     sync.Mutex
	closed bool
}

// pipeOpen runs an OPEN on the pipe.
func (c *Client) pipeOpen(ctx context.Context, o *OpenRequest) (*OpenResponse, error) {
	m, err := o.Append(nil)
	if err != nil {
		return nil, err
	}
	var rsp OpenResponse
	err = c.pipeRoundTrip(ctx, m, func(r []byte, op uint16) error {
		if op != ControlOpOpenResp {
			return fmt.Errorf("%w: OPEN answered with opcode %#x", ErrPipe, op)
		}
		if err := rsp.Decode(r); err != nil {
			return fmt.Errorf("lwio: pipe: %w", err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rsp.Status != StatusSuccess {
		return nil, &StatusError{What: "OPEN " + o.Path, Status: rsp.Status}
	}
	return &rsp, nil
}

// Stat returns the size in bytes of the file at path.
func (c *Client) Stat(ctx context.Context, path string) (int64, error) {
	rsp, err := c.pipeOpen(ctx, &OpenRequest{Disposition: DispOpen, Path: path})
	if err != nil {
		return 0, err
	}
	return int64(rsp.Size), c.release(rsp.Key.Key.ResumeKey)
}

// release gives a resume key back on the pipe (RELEASE): the server drops
// the key's hold on the file.
func (c *Client) release(k uint64) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	if _, err := c.pipe.Write(appendRelease(nil, k)); err != nil {
		return fmt.Errorf("lwio: pipe: %w", err)
	}
	return nil
}

// Open opens the file at path on the server and registers it on the RDMA
// connection.
func (c *Client) Open(ctx context.Context, path string, fl OpenFlags) (*File, error) {
	o := OpenRequest{Disposition: DispOpen, Path: path}
	if fl.Create {
		o.Disposition = DispCreate
	}
	if fl.Truncate {
		o.Disposition = DispTruncate
	}
	if fl.NoBuffering {
		o.FlagsAttrs = FileNoIntermediate
	}
	rsp, err := c.pipeOpen(ctx, &o)
	if err != nil {
		return nil, err
	}
	if err := c.checkContext(rsp.Key.Server); err != nil {
		_ = c.release(rsp.Key.Key.ResumeKey)
		return nil, err
	}
	p := FidParams{ResumeKey: rsp.Key.Key, FlagsAndAttributes: o.FlagsAttrs}
	fid, err := c.register(ctx, p)
	f := &File{c: c, fid: fid, name: path, size: int64(rsp.Size)}
	if err == nil {
		err = c.registerLinks(ctx, f, p)
	}
	// The key has done its work: a registered Fid holds the file on its
	// own, so the file closes on the server with the Fid's CLOSE. (The
	// pipe is in order and REGISTER was answered, or abandoned, first.)
	if rerr := c.release(p.ResumeKey.ResumeKey); err == nil && rerr != nil {
		err = rerr
	}
	if err != nil {
		return nil, fmt.Errorf("lwio: register %s: %w", path, err)
	}
	return f, nil
}

// Name is the path the file was opened with; Size its size when opened.
func (f *File) Name() string { return f.name }

// Size is the file's size in bytes when it was opened.
func (f *File) Size() int64 { return f.size }

// Fid is the file's ID on the connection.
func (f *File) Fid() uint16 { return f.fid }

// ---- synchronous I/O ----------------------------------------------------------------

// ReadAt reads len(p) bytes at off (io.ReaderAt): in window-sized pieces,
// all in flight at once up to the credits. It returns io.EOF with n <
// len(p) at the end of the file.
func (f *File) ReadAt(p []byte, off int64) (int, error) {
	return f.run(p, off, (*File).StartRead, f.c.window)
}

// WriteAt writes p at off (io.WriterAt), in pieces of the server's
// MaxRecvBufferSize, all in flight at once up to the credits.
func (f *File) WriteAt(p []byte, off int64) (int, error) {
	return f.run(p, off, (*File).StartWrite, int(f.c.srv.MaxRecvBufferSize))
}

func (f *File) run(p []byte, off int64, start startFn, piece int) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	var n int
	var err error
	if len(p) <= piece && len(f.peers) == 0 {
		n, err = f.one(p, off, start)
	} else {
		// The pieces go over every connection of the client (links.go).
		var got []int
		got, err = f.spread(p, off, start, piece)
		// The result is the run of whole pieces from the start and the
		// first short one (the end of the file); an error other than
		// io.EOF wins.
		for i, m := range got {
			n += m
			if m < min(piece, len(p)-i*piece) {
				break
			}
		}
	}
	switch {
	case n == len(p):
		return n, nil
	case err == nil:
		return n, io.EOF
	}
	return n, err
}

// one is run for a single piece on a client of one connection, the
// small synchronous read or write: a request with one place to go and
// nothing to retry elsewhere needs none of spread's bookkeeping (a map,
// per-piece slices, a channel of its own).
func (f *File) one(p []byte, off int64, start startFn) (int, error) {
	if err := f.check(); err != nil {
		return 0, err
	}
	if f.link(0) == nil {
		return 0, ErrNoLink
	}
	done, _ := doneChans.Get().(chan *Call)
	if done == nil {
		done = make(chan *Call, 1)
	}
	cl, err := start(f, syncCtx, p, off, done)
	if err != nil {
		doneChans.Put(done)
		return 0, err
	}
	f.c.spin(cl) // a polling caller watches its status block itself
	<-done
	// Empty again, and the Call's one completion has been sent on it:
	// the channel is free for the next synchronous request.
	doneChans.Put(done)
	return cl.N, cl.Err
}

// syncCtx is the context of a synchronous request whose caller watches
// its status block right after posting it (one): the post counts the
// caller as watching (Call.watched) before the completion loop can decide
// it needs waking.
var syncCtx = context.WithValue(context.Background(), syncKey{}, true)

type syncKey struct{}

// doneChans are the completion channels of synchronous requests (one),
// reused: a channel is two allocations.
var doneChans sync.Pool

// Wait waits for a Call from a Start method.
func (cl *Call) Wait(ctx context.Context) error { return cl.c.wait(ctx, cl) }

// ---- close and cancel -----------------------------------------------------------

// Cancel cancels the file's requests the server has not started: they
// complete with a *StatusError of STATUS_CANCELLED.
func (f *File) Cancel(ctx context.Context) error {
	err := f.control(ctx, OpCancel)
	for _, g := range f.peers { // the requests on the other connections too
		if cerr := g.control(ctx, OpCancel); err == nil && g.c.Err() == nil {
			err = cerr
		}
	}
	return err
}

// Close closes the Fid on the server; later I/O on f fails.
func (f *File) Close() error {
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return ErrFileClosed
	}
	f.closed = true
	f.mu.Unlock()
	err := f.control(context.Background(), OpClose)
	for _, g := range f.peers {
		if cerr := g.Close(); err == nil && g.c.Err() == nil {
			err = cerr
		}
	}
	return err
}

func (f *File) control(ctx context.Context, op Opcode) error {
	c := f.c
	cl, err := c.start(ctx, op, func(cl *Call, h *Header, _ []byte) ([]rings.SGE, error) {
		h.Fid, h.Length = f.fid, HeaderSize
		return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize)), nil
	})
	if err != nil {
		return err
	}
	return c.wait(ctx, cl)
}

var _ io.ReaderAt = (*File)(nil)
var _ io.WriterAt = (*File)(nil)
