package lwio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
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

// ---- client memory -------------------------------------------------------------

// Alloc returns n bytes of host memory registered for the server's RDMA
// Writes. ReadAt into it and WriteAt from it are zero-copy: the NIC places
// read data there and takes write data from there. It lives until Close.
func (c *Client) Alloc(n int) ([]byte, error) {
	b, err := c.v.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	mr, err := c.v.RegMR(c.pd, b, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		_ = b.Free()
		return nil, err
	}
	c.mu.Lock()
	c.regions = append(c.regions, &Memory{buf: b, mr: mr})
	c.mu.Unlock()
	return b.Bytes(), nil
}

// lookupLocked finds p inside memory from Alloc: its MR and offset.
func (c *Client) lookupLocked(p []byte) (*verbs.MR, int, bool) {
	if len(p) == 0 {
		return nil, 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	for _, r := range c.regions {
		b := r.buf.Bytes()
		base := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		if a >= base && a+uintptr(len(p)) <= base+uintptr(len(b)) {
			return r.mr, int(a - base), true
		}
	}
	return c.primaryLookup(p) // a link: the primary's memory (links.go)
}

// bounceLocked takes a staging buffer of the window's size.
func (c *Client) bounceLocked() (*bounce, error) {
	if n := len(c.bounceFree); n > 0 {
		b := c.bounceFree[n-1]
		c.bounceFree = c.bounceFree[:n-1]
		return b, nil
	}
	size := max(c.window, int(c.srv.MaxRecvBufferSize))
	buf, err := c.v.AllocBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("lwio: staging buffer: %w", err)
	}
	mr, err := c.v.RegMR(c.pd, buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		_ = buf.Free()
		return nil, fmt.Errorf("lwio: staging buffer: %w", err)
	}
	b := &bounce{buf: buf, mr: mr}
	c.bounceAll = append(c.bounceAll, b)
	return b, nil
}

// ---- asynchronous I/O --------------------------------------------------------------

func (f *File) check() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return ErrFileClosed
	}
	return nil
}

// ErrFileClosed is I/O on a File after its Close.
var ErrFileClosed = errors.New("lwio: file closed")

// StartRead submits a read of len(p) bytes at off into p (at most the
// negotiated window) and returns at once; the Call goes to done (nil: a
// new channel) when p holds the data.
func (f *File) StartRead(ctx context.Context, p []byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	if len(p) == 0 || len(p) > c.window || off < 0 {
		return nil, fmt.Errorf("%w: read of %d bytes (window %d)", ErrTooLarge, len(p), c.window)
	}
	return c.startIO(ctx, OpRead, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		mr, moff, ok := c.lookupLocked(p)
		if !ok {
			b, err := c.bounceLocked()
			if err != nil {
				return nil, err
			}
			cl.bounce, cl.user, mr, moff = b, p, b.mr, 0
			c.st.bounced.Add(1)
		} else {
			c.st.zeroCopy.Add(1)
		}
		h.Length, h.DataVa, h.DataMh = uint32(len(p)), mr.TO(moff), mr.RKey
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize)}, nil
	})
}

// StartWrite submits a write of p at off (at most the server's
// MaxRecvBufferSize). p must not change until the Call is done.
func (f *File) StartWrite(ctx context.Context, p []byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	if len(p) == 0 || len(p) > int(c.srv.MaxRecvBufferSize) || off < 0 {
		return nil, fmt.Errorf("%w: write of %d bytes (at most %d)", ErrTooLarge, len(p), c.srv.MaxRecvBufferSize)
	}
	return c.startIO(ctx, OpWrite, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		h.Length = uint32(len(p))
		data, err := c.sourceLocked(cl, p)
		if err != nil {
			return nil, err
		}
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize), data}, nil
	})
}

// sourceLocked is the SGE of write data p: p itself when it is in memory
// from Alloc, else a staging buffer p is copied into.
func (c *Client) sourceLocked(cl *Call, p []byte) (rings.SGE, error) {
	if mr, moff, ok := c.lookupLocked(p); ok {
		c.st.zeroCopy.Add(1)
		return mr.SGE(moff, len(p)), nil
	}
	b, err := c.bounceLocked()
	if err != nil {
		return rings.SGE{}, err
	}
	cl.bounce = b
	copy(b.buf.Bytes(), p)
	c.st.bounced.Add(1)
	return b.mr.SGE(0, len(p)), nil
}

func (c *Client) startIO(ctx context.Context, op Opcode, f *File, off int64, done chan *Call, fl fill) (*Call, error) {
	return c.startTo(ctx, op, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		h.Fid, h.Offset, h.Marker = f.fid, uint64(off), IOMarker
		cl.Off = off
		sges, err := fl(cl, h, slot)
		cl.length = int(h.Length)
		return sges, err
	})
}

// StartReadV submits a vectored read of the file from off into pages:
// every page but the last must be PageSize bytes and the last a multiple of
// the sector size, at most MaxVecRegions pages; the server writes each page
// with its own RDMA Write.
func (f *File) StartReadV(ctx context.Context, pages [][]byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	ps, total, err := c.vecShape(pages)
	if err != nil {
		return nil, err
	}
	if total > c.window {
		return nil, fmt.Errorf("%w: vectored read of %d bytes (window %d)", ErrTooLarge, total, c.window)
	}
	return c.startIO(ctx, OpVecRead, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		var b *bounce
		boff := 0
		for i, p := range pages {
			mr, moff, ok := c.lookupLocked(p)
			if !ok {
				if b == nil {
					var err error
					if b, err = c.bounceLocked(); err != nil {
						return nil, err
					}
					cl.bounce = b
				}
				mr, moff = b.mr, boff
				boff += len(p)
				cl.pages = append(cl.pages, p)
			}
			r := Region{DataVa: mr.TO(moff), DataMh: mr.RKey, Length: uint32(len(p))}
			r.Encode(slot[slotPayload+i*RegionSize:])
		}
		if b != nil && len(cl.pages) != len(pages) {
			// A mix of registered and unregistered pages: the bounced
			// pages are copied back in order, so all must bounce.
			return nil, errors.New("lwio: vectored read: pages must all come from Alloc, or none")
		}
		h.Length, h.NumPages, h.PageSize = uint32(total), uint16(len(pages)), uint16(ps)
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize+len(pages)*RegionSize)}, nil
	})
}

// StartWriteV submits a gather write of pages at off (PageSize pages, the
// last possibly shorter). With collapse, pages holds one page that stands
// for n pages of the same data, length bytes in all: only that page is
// sent (the file must be open with NoBuffering).
func (f *File) StartWriteV(ctx context.Context, pages [][]byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	total, ps := 0, 0
	for i, p := range pages {
		if i == 0 {
			ps = len(p)
		}
		if len(p) == 0 || len(p) > ps || (i < len(pages)-1 && len(p) != ps) {
			return nil, ErrVecShape
		}
		total += len(p)
	}
	if total == 0 || total > int(c.srv.MaxRecvBufferSize) || ps > 0xFFFF || len(pages) > 0xFFFF {
		return nil, fmt.Errorf("%w: vectored write of %d bytes", ErrTooLarge, total)
	}
	return c.startIO(ctx, OpVecWrite, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		b, err := c.bounceLocked()
		if err != nil {
			return nil, err
		}
		cl.bounce = b
		o := 0
		for _, p := range pages {
			o += copy(b.buf.Bytes()[o:], p)
		}
		c.st.bounced.Add(1)
		h.Length, h.NumPages, h.PageSize = uint32(total), uint16(len(pages)), uint16(ps)
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize), b.mr.SGE(0, total)}, nil
	})
}

// StartWriteCollapsed submits a collapsed vectored write: page (PageSize
// bytes, or all of a shorter length) is written over and over to cover
// length bytes at off; only one page crosses the wire.
func (f *File) StartWriteCollapsed(ctx context.Context, page []byte, length int, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	ps := len(page)
	if ps == 0 || ps > 0xFFFF || length <= 0 || (length < ps) || (length+ps-1)/ps > 0xFFFF {
		return nil, ErrVecShape
	}
	// Only the page is sent, so only it must fit the server's receive
	// buffer; length, the span, is bounded by the header's 32 bits.
	if ps > int(c.srv.MaxRecvBufferSize) || uint64(length) > math.MaxUint32 {
		return nil, fmt.Errorf("%w: collapsed write of a %d-byte page over %d bytes (a page of at most %d, at most %d bytes)",
			ErrTooLarge, ps, length, c.srv.MaxRecvBufferSize, uint64(math.MaxUint32))
	}
	return c.startIO(ctx, OpVecWrite, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		data, err := c.sourceLocked(cl, page)
		if err != nil {
			return nil, err
		}
		h.Flags |= FlagCollapseIO
		h.Length, h.NumPages, h.PageSize = uint32(length), uint16((length+ps-1)/ps), uint16(ps)
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize), data}, nil
	})
}

func (c *Client) vecShape(pages [][]byte) (int, int, error) {
	if len(pages) == 0 || len(pages) > MaxVecRegions {
		return 0, 0, ErrVecShape
	}
	ps, total := len(pages[0]), 0
	for i, p := range pages {
		last := i == len(pages)-1
		if len(p) == 0 || (!last && len(p) != ps) || (last && (len(p) > ps || len(p)%SectorSize != 0)) {
			return 0, 0, ErrVecShape
		}
		total += len(p)
	}
	if ps > 0xFFFF {
		return 0, 0, ErrVecShape
	}
	return ps, total, nil
}

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
	// The pieces go over every connection of the client (links.go).
	got, err := f.spread(p, off, start, piece)
	// The result is the run of whole pieces from the start and the first
	// short one (the end of the file); an error other than io.EOF wins.
	n := 0
	for i, m := range got {
		n += m
		if m < min(piece, len(p)-i*piece) {
			break
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
		return []rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize)}, nil
	})
	if err != nil {
		return err
	}
	return c.wait(ctx, cl)
}

var _ io.ReaderAt = (*File)(nil)
var _ io.WriterAt = (*File)(nil)
