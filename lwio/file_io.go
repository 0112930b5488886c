package lwio

import (
	"context"
	"errors"
	"fmt"
	"math"

	"github.com/emunic/emunic/rings"
)

// The file's asynchronous I/O: every Start method resolves the caller's
// memory (client_buffers.go) before it takes a credit, builds its request
// in a slot and posts it. The context a request starts with stays tied to
// it: if it ends before the answer, the client sends CANCEL for that one
// request (client_cancel.go).

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
// new channel) when p holds the data. p is used in place when it is memory
// from Alloc, or host memory of at least RegisterMin bytes (registered for
// the read); otherwise the data is copied into it from a staging buffer.
func (f *File) StartRead(ctx context.Context, p []byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	if len(p) == 0 || len(p) > c.window || off < 0 {
		return nil, fmt.Errorf("%w: read of %d bytes (window %d)", ErrTooLarge, len(p), c.window)
	}
	ref, inPlace, err := c.ref(p, accessRead)
	if err != nil {
		return nil, err
	}
	cl, err := c.startIO(ctx, OpRead, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		if !inPlace {
			b, err := c.bounceLocked()
			if err != nil {
				return nil, err
			}
			cl.bounce, cl.user = b, p
			ref = dataRef{mr: b.mr}
			c.st.bounced.Add(1)
		} else {
			c.hold(cl, ref)
		}
		h.Length, h.DataVa, h.DataMh = uint32(len(p)), ref.mr.TO(ref.off), ref.mr.RKey
		return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize)), nil
	})
	if err != nil && inPlace {
		c.putRefs([]dataRef{ref})
	}
	return cl, err
}

// StartWrite submits a write of p at off (at most the server's
// MaxRecvBufferSize). p must not change until the Call is done; it is
// sent from in place under the same rule as StartRead's.
func (f *File) StartWrite(ctx context.Context, p []byte, off int64, done chan *Call) (*Call, error) {
	if err := f.check(); err != nil {
		return nil, err
	}
	f = f.next() // one of the client's connections (links.go)
	c := f.c
	if len(p) == 0 || len(p) > int(c.srv.MaxRecvBufferSize) || off < 0 {
		return nil, fmt.Errorf("%w: write of %d bytes (at most %d)", ErrTooLarge, len(p), c.srv.MaxRecvBufferSize)
	}
	return f.startSend(ctx, OpWrite, p, off, done, func(h *Header) { h.Length = uint32(len(p)) })
}

// startSend starts a request whose data (one buffer) follows the header
// in the send: a write or a collapsed vectored write; hdr sets the fields
// of its kind.
func (f *File) startSend(ctx context.Context, op Opcode, p []byte, off int64, done chan *Call, hdr func(*Header)) (*Call, error) {
	c := f.c
	ref, inPlace, err := c.ref(p, accessWrite)
	if err != nil {
		return nil, err
	}
	cl, err := c.startIO(ctx, op, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		hdr(h)
		if !inPlace {
			b, err := c.bounceLocked()
			if err != nil {
				return nil, err
			}
			cl.bounce = b
			copy(b.buf.Bytes(), p)
			ref = dataRef{mr: b.mr}
			c.st.bounced.Add(1)
		} else {
			c.hold(cl, ref)
		}
		return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize), ref.mr.SGE(ref.off, len(p))), nil
	})
	if err != nil && inPlace {
		c.putRefs([]dataRef{ref})
	}
	return cl, err
}

func (c *Client) startIO(ctx context.Context, op Opcode, f *File, off int64, done chan *Call, fl fill) (*Call, error) {
	return c.startTo(ctx, op, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		h.Fid, h.Offset, h.Marker = f.fid, uint64(off), IOMarker
		cl.Off, cl.fid = off, f.fid
		sges, err := fl(cl, h, slot)
		cl.length = int(h.Length)
		return sges, err
	})
}

// StartReadV submits a vectored read of the file from off into pages:
// every page but the last must be PageSize bytes and the last a multiple of
// the sector size, at most as many pages as the server's
// MaxRecvBufferSize holds regions (4,096 at 64 KiB) and at most the window
// in all; the server writes each page with its own RDMA Write. Pages are
// used in place when every one is memory from Alloc or host memory
// (registered by contiguous stretches of at least RegisterMin bytes);
// otherwise all are copied through a staging buffer.
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
	refs, inPlace, err := c.pagesRef(pages, accessRead)
	if err != nil {
		return nil, err
	}
	cl, err := c.startIO(ctx, OpVecRead, f, off, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
		list := slot[slotPayload:]
		sges := c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize+len(pages)*RegionSize))
		if len(pages) > slotRegions {
			rl, err := c.regionListLocked()
			if err != nil {
				return nil, err
			}
			cl.regionList, list = rl, rl.buf.Bytes()
			sges = c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize), rl.mr.SGE(0, len(pages)*RegionSize))
		}
		if !inPlace {
			b, err := c.bounceLocked()
			if err != nil {
				return nil, err
			}
			cl.bounce, cl.pages = b, pages
			refs = make([]dataRef, len(pages))
			for i, o := 0, 0; i < len(pages); i++ {
				refs[i] = dataRef{mr: b.mr, off: o}
				o += len(pages[i])
			}
			c.st.bounced.Add(1)
		} else {
			c.hold(cl, refs...)
		}
		for i, p := range pages {
			r := Region{DataVa: refs[i].mr.TO(refs[i].off), DataMh: refs[i].mr.RKey, Length: uint32(len(p))}
			r.Encode(list[i*RegionSize:])
		}
		h.Length, h.NumPages, h.PageSize = uint32(total), uint16(len(pages)), uint16(ps)
		return sges, nil
	})
	if err != nil && inPlace {
		c.putRefs(refs)
	}
	return cl, err
}

// StartWriteV submits a gather write of pages at off (PageSize pages, the
// last possibly shorter), at most the server's MaxRecvBufferSize in all.
// Pages are sent from in place when every one is memory from Alloc or
// host memory (as StartReadV's); pages that follow one another in memory
// travel as one gather element, and when they make more stretches than a
// send gathers (rings.MaxSendSGE, after the header) the write goes as
// several vectored writes at consecutive offsets, each from its own pages,
// and the Call completes when all have. Otherwise the pages are copied
// into a staging buffer and sent as one.
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
	refs, inPlace, err := c.pagesRef(pages, accessWrite)
	if err != nil {
		return nil, err
	}
	if !inPlace {
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
			return c.sgl(c.smr.SGE(cl.slot*slotSize, HeaderSize), b.mr.SGE(0, total)), nil
		})
	}
	// Split the pages where a part's stretches would outnumber the
	// send's gather list.
	var parts [][2]int // [first, end) pages
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && len(runs(pages[i:j+1], refs[i:j+1])) < rings.MaxSendSGE {
			j++
		}
		parts = append(parts, [2]int{i, j})
		i = j
	}
	whole := len(parts) == 1
	start := func(i, j int, o int64, done chan *Call) (*Call, error) {
		return c.startIO(ctx, OpVecWrite, f, o, done, func(cl *Call, h *Header, slot []byte) ([]rings.SGE, error) {
			n := 0
			for _, p := range pages[i:j] {
				n += len(p)
			}
			h.Length, h.NumPages, h.PageSize = uint32(n), uint16(j-i), uint16(ps)
			if whole {
				c.hold(cl, refs...) // given back when the one request completes
			} else {
				c.st.zeroCopy.Add(1)
			}
			return append([]rings.SGE{c.smr.SGE(cl.slot*slotSize, HeaderSize)}, runs(pages[i:j], refs[i:j])...), nil
		})
	}
	if whole {
		cl, err := start(0, len(pages), off, done)
		if err != nil {
			c.putRefs(refs)
		}
		return cl, err
	}
	return c.startParts(OpVecWrite, off, done, refs, len(parts), func(k int, pdone chan *Call) (*Call, error) {
		o := off + int64(parts[k][0]*ps)
		return start(parts[k][0], parts[k][1], o, pdone)
	})
}

// startParts starts n requests that together are one Call (a vectored
// write split by the gather limit): it completes when all have, with the
// bytes of all and the first error. refs' cached registrations are given
// back then.
func (c *Client) startParts(op Opcode, off int64, done chan *Call, refs []dataRef, n int, start func(k int, done chan *Call) (*Call, error)) (*Call, error) {
	if done == nil {
		done = make(chan *Call, 1)
	}
	parent := &Call{Op: op, Off: off, Done: done, c: c, slot: -1} // no slot: nothing to spin on
	pdone := make(chan *Call, n)
	started := 0
	var startErr error
	for k := range n {
		if _, startErr = start(k, pdone); startErr != nil {
			break
		}
		started++
	}
	if started == 0 {
		c.putRefs(refs)
		return nil, startErr
	}
	go func() {
		for range started {
			cl := <-pdone
			parent.N += cl.N
			if cl.Err != nil && parent.Err == nil {
				parent.Err = cl.Err
			}
		}
		if parent.Err == nil {
			parent.Err = startErr
		}
		c.putRefs(refs)
		parent.Done <- parent
	}()
	return parent, nil
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
	return f.startSend(ctx, OpVecWrite, page, off, done, func(h *Header) {
		h.Flags |= FlagCollapseIO
		h.Length, h.NumPages, h.PageSize = uint32(length), uint16((length+ps-1)/ps), uint16(ps)
	})
}

func (c *Client) vecShape(pages [][]byte) (int, int, error) {
	if len(pages) == 0 || len(pages) > c.maxRegions() {
		return 0, 0, fmt.Errorf("%w: %d pages (at most %d)", ErrVecShape, len(pages), c.maxRegions())
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
