package tcpstack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"

	"github.com/emunic/emunic/rings"
)

// Registered-buffer reads: the reader's own buffer, in host memory from
// the host's allocator, is the user buffer the device places payload into
// (POST_BUFFERS), so the bytes land where the application reads them and
// the host CPU copies nothing. A reader waiting in ReadRegistered has its
// buffer posted at once; one whose buffer could not be posted then (the
// device refused it for want of room, or pool buffers posted earlier are
// still to come back ahead of it) has it posted when the device asks for
// a user buffer (USER_BUF_REQ) or gives one back.

// RegisteredBuf is receive memory from the host's allocator (the arena
// the device reaches by DMA), for DelegatedConn.ReadRegistered.
type RegisteredBuf struct {
	mem   *rings.Arena
	addr  rings.Addr
	b     []byte
	owner *DelegatedConn // the connection whose device has it (posted), or nil
}

// NewRegisteredBuf allocates size bytes of host memory for registered
// reads (cache-line aligned). Free gives it back.
func (h *Host) NewRegisteredBuf(size int) (*RegisteredBuf, error) {
	if size <= 0 || size > 1<<30 {
		return nil, fmt.Errorf("registered buffer of %d bytes: want 1 byte to 1 GiB", size)
	}
	mem := h.Driver.mem
	a, err := mem.Alloc(size, rings.CacheLine)
	if err != nil {
		return nil, fmt.Errorf("registered buffer: %w", err)
	}
	b, err := mem.Map(a, size)
	if err != nil {
		_ = mem.Free(a)
		return nil, err
	}
	return &RegisteredBuf{mem: mem, addr: a, b: b}, nil
}

// Bytes is the buffer's memory.
func (b *RegisteredBuf) Bytes() []byte { return b.b }

// ErrRegisteredBusy: the buffer is posted to a connection's device, which
// may still write it.
var ErrRegisteredBusy = errors.New("registered buffer is posted to the device")

// Free gives the memory back to the host's allocator; not while a device
// may still write it (until the read it was given to returns it, or its
// connection closes).
func (b *RegisteredBuf) Free() error {
	if c := b.owner; c != nil {
		c.mu.Lock()
		busy := b.owner != nil && c.reg.posted != nil && c.reg.posted == b && !c.released
		c.mu.Unlock()
		if busy {
			return ErrRegisteredBusy
		}
	}
	if b.b == nil {
		return nil
	}
	b.b = nil
	return b.mem.Free(b.addr)
}

// regRead is a connection's registered-reader state (DelegatedConn.mu).
type regRead struct {
	on     bool           // ReadRegistered was used: pool buffers are not posted again
	want   *RegisteredBuf // the buffer of the reader waiting now, or nil
	posted *RegisteredBuf // the buffer with the device (or a POST_BUFFERS of it in flight)
	id     uint32         // posted's user buffer id
	gen    uint32         // ids handed out
	lent   *rxChunk       // a chunk ReadRegistered returned in place, retired on the next read
	lentCh rxChunk
}

// regIDFlag marks user buffer ids of registered buffers (pool buffers'
// ids are their index, below RecvBuffers).
const regIDFlag = 1 << 31

func (r *regRead) isRegID(id uint32) bool { return id&regIDFlag != 0 }

// ReadRegistered reads the next bytes of the stream into b, a buffer from
// Host.NewRegisteredBuf, and returns them: a slice of b the device placed
// them in (no CPU copy, DriverStats.ZeroCopyBytes), or, for bytes that
// came before b could be posted (uploaded to legacy buffers, or placed in
// pool buffers posted earlier), a slice of the connection's own memory,
// valid until the next read. b is posted to the device while the reader
// waits; if the read returns early (deadline, error), b stays with the
// device and the next ReadRegistered must pass it again. The receive
// low-water mark does not apply: a registered buffer completes when it is
// full or the peer pushes.
func (c *DelegatedConn) ReadRegistered(b *RegisteredBuf) ([]byte, error) {
	if b == nil || len(b.b) == 0 {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reg.on = true
	c.returnLentLocked()
	if p := c.reg.posted; p != nil && p != b {
		return nil, opErr("read", c, ErrRegisteredBusy)
	}
	if b.owner != nil && b.owner != c {
		return nil, opErr("read", c, ErrRegisteredBusy)
	}
	for {
		if c.closed {
			return nil, opErr("read", c, net.ErrClosed)
		}
		if c.cmdErr != nil {
			return nil, opErr("read", c, c.cmdErr)
		}
		if len(c.chunks) > 0 {
			break
		}
		if c.rxErr != nil {
			return nil, opErr("read", c, c.rxErr)
		}
		if c.peerFin {
			return nil, io.EOF
		}
		if c.readDL.passed() {
			return nil, opErr("read", c, os.ErrDeadlineExceeded)
		}
		c.reg.want = b
		c.postRegLocked()
		c.cond.Wait()
	}
	c.reg.want = nil
	ch := c.chunks[0]
	c.chunks[0] = rxChunk{}
	c.chunks = c.chunks[1:]
	c.rxAvail -= len(ch.data)
	if ch.reg {
		c.o.drv.stats.zeroCopyBytes.Add(uint64(len(ch.data)))
		return ch.data, nil
	}
	// Bytes that came another way: lent in place until the next read.
	c.reg.lentCh = ch
	c.reg.lent = &c.reg.lentCh
	return ch.data, nil
}

// returnLentLocked retires the chunk the last ReadRegistered lent. mu held.
func (c *DelegatedConn) returnLentLocked() {
	if c.reg.lent != nil {
		c.retire(c.reg.lent)
		c.reg.lent, c.reg.lentCh = nil, rxChunk{}
	}
}

// postRegLocked posts the waiting reader's buffer, unless one is posted
// already or pool buffers posted before it are still to come back (their
// bytes come first in the stream, and a registered buffer must follow them
// only). mu held.
func (c *DelegatedConn) postRegLocked() {
	b := c.reg.want
	if b == nil || c.reg.posted != nil || c.released || c.peerFin || c.cmdErr != nil || c.rxErr != nil {
		return
	}
	for i := range c.rxBufs {
		if c.rxBufs[i].posted {
			return
		}
	}
	c.reg.gen++
	c.reg.id = regIDFlag | c.reg.gen&^regIDFlag
	c.reg.posted, b.owner = b, c
	ub := rings.UserBuf{Addr: b.addr, Len: uint32(len(b.b)), ID: c.reg.id}
	c.o.drv.stats.userBufPosted.Add(1)
	c.o.postBufs(c, []rings.UserBuf{ub})
}

// regDoneLocked takes USER_BUF_DONE for a registered buffer: the bytes
// are the reader's, in its buffer. It reports whether a reader should
// wake. mu held.
func (c *DelegatedConn) regDoneLocked(n *rings.Notification) bool {
	b := c.reg.posted
	if b == nil || n.Aux != c.reg.id || int(n.Len) > len(b.b) {
		// Not the buffer the host posted: a device error, and nothing
		// of the host's is concerned.
		c.deviceErrorLocked(&c.o.drv.stats.ntfImpossible, fmt.Sprintf("USER_BUF_DONE for buffer %#x, not posted", n.Aux))
		return false
	}
	c.reg.posted, b.owner = nil, nil
	if n.Len == 0 {
		c.postRegLocked() // given back unused: post it again if the reader still waits
		return false
	}
	c.pushChunk(rxChunk{data: b.b[:n.Len], userID: -1, reg: true})
	return true
}

// bufReturnedLocked: the device gave user buffer id back (USER_BUF_DONE)
// in a notification the host rejected; the buffer is the host's again,
// its bytes are not taken. mu held.
func (c *DelegatedConn) bufReturnedLocked(id uint32) {
	if c.reg.isRegID(id) {
		if b := c.reg.posted; b != nil && id == c.reg.id {
			c.reg.posted, b.owner = nil, nil
		}
		return
	}
	if int(id) < len(c.rxBufs) {
		c.rxBufs[id].posted = false
	}
}

// userBufReqLocked takes USER_BUF_REQ: payload is waiting in the device
// with no user buffer. A registered reader's buffer not yet posted is
// posted now, and so are pool buffers the device refused before. mu held.
func (c *DelegatedConn) userBufReqLocked() {
	c.postRegLocked()
	c.o.repostRefused(c)
}
