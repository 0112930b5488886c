package tcpstack

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"

	"github.com/emunic/emunic/rings"
)

// Registered-buffer reads: the reader's own buffers, in host memory from
// the host's allocator, are the user buffers the device places payload
// into (POST_BUFFERS), so the bytes land where the application reads them
// and the host CPU copies nothing. A buffer given to the connection is
// posted at once (the reader is waiting, or about to); one the device
// refused for want of room is posted again when the device gives a
// buffer back or asks for one (USER_BUF_REQ). Several may be posted at
// once, as a receive queue: the device fills them in the order it took
// them, and ReadRegistered hands them back in stream order.

// RegisteredBuf is receive memory from the host's allocator (the arena
// the device reaches by DMA), for DelegatedConn.ReadRegistered.
type RegisteredBuf struct {
	mem  *rings.Arena
	addr rings.Addr
	b    []byte
	// owner is the connection it was given to, until handed back
	// (written under that connection's mu; Free reads it without).
	owner atomic.Pointer[DelegatedConn]
	id    uint32 // its user buffer id while posted
	state regState
}

// regState is where a registered buffer is.
type regState uint8

const (
	regApp     regState = iota // the application's
	regPosted                  // with the device (or its POST_BUFFERS in flight)
	regRefused                 // refused for want of room: the connection posts it again
	regFilled                  // back from the device with data not yet read
)

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

// ErrRegisteredBusy: the buffer was given to a connection and has not come
// back (the device may still write it).
var ErrRegisteredBusy = errors.New("registered buffer is given to a connection")

// Free gives the memory back to the host's allocator; not while a
// connection holds it (until ReadRegistered hands it back, or its
// connection is released).
func (b *RegisteredBuf) Free() error {
	if c := b.owner.Load(); c != nil {
		c.mu.Lock()
		busy := b.owner.Load() == c && !c.released
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
	on     bool             // ReadRegistered was used: pool buffers are not posted again
	bufs   []*RegisteredBuf // the buffers given to the connection, in the order given
	gen    uint32           // ids handed out
	lent   *rxChunk         // a chunk of connection memory ReadRegistered returned, retired on the next read
	lentCh rxChunk
}

// regIDFlag marks user buffer ids of registered buffers (pool buffers'
// ids are their index, below RecvBuffers).
const regIDFlag = 1 << 31

func (r *regRead) isRegID(id uint32) bool { return id&regIDFlag != 0 }

// find returns the given buffer posted with id, or nil.
func (r *regRead) find(id uint32) *RegisteredBuf {
	for _, b := range r.bufs {
		if b.state == regPosted && b.id == id {
			return b
		}
	}
	return nil
}

// drop forgets b (handed back to the application).
func (r *regRead) drop(b *RegisteredBuf) {
	for i, x := range r.bufs {
		if x == b {
			r.bufs = append(r.bufs[:i], r.bufs[i+1:]...)
			break
		}
	}
	b.owner.Store(nil)
	b.state = regApp
}

// ReadRegistered gives buffer give (from Host.NewRegisteredBuf; nil:
// none) to the connection, and returns the next bytes of the stream and
// the registered buffer they lie in, which is the application's again.
//
// A buffer given is posted to the device at once, and the device places
// the peer's bytes straight into it (no CPU copy: DriverStats.ZeroCopyBytes).
// Bytes that came while no registered buffer was posted (uploaded to
// legacy buffers, or in pool buffers posted before) are returned in the
// connection's own memory (in is nil), valid until the next read. Giving
// back the buffer a read returned, each time, keeps a queue of posted
// buffers:
//
//	c.ReadRegistered(b2)           // (first read: b1 given, b2 given)
//	var back = b1
//	for { p, in, err := c.ReadRegistered(back); use(p); back = in }
//
// A buffer stays with the connection until a read returns it, even if
// that read fails (a deadline, an error); it is the application's again
// once the connection is released. The receive low-water mark does not
// apply: a registered buffer comes back when it is full or the peer
// pushed.
func (c *DelegatedConn) ReadRegistered(give *RegisteredBuf) (p []byte, in *RegisteredBuf, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reg.on = true
	c.returnLentLocked()
	if give != nil {
		if err := c.giveRegLocked(give); err != nil {
			return nil, nil, opErr("read", c, err)
		}
	}
	for {
		if c.closed {
			return nil, nil, opErr("read", c, net.ErrClosed)
		}
		if c.cmdErr != nil {
			return nil, nil, opErr("read", c, c.cmdErr)
		}
		if len(c.chunks) > 0 {
			break
		}
		if c.rxErr != nil {
			return nil, nil, opErr("read", c, c.rxErr)
		}
		if c.peerFin {
			return nil, nil, io.EOF
		}
		if c.readDL.passed() {
			return nil, nil, opErr("read", c, os.ErrDeadlineExceeded)
		}
		c.cond.Wait()
	}
	ch := c.chunks[0]
	c.chunks[0] = rxChunk{}
	c.chunks = c.chunks[1:]
	c.rxAvail -= len(ch.data)
	if ch.reg != nil {
		c.o.drv.stats.zeroCopyBytes.Add(uint64(len(ch.data)))
		c.reg.drop(ch.reg)
		return ch.data, ch.reg, nil
	}
	// Bytes that came another way: lent in place until the next read.
	c.reg.lentCh = ch
	c.reg.lent = &c.reg.lentCh
	return ch.data, nil, nil
}

// PostRegistered gives b to the connection without reading: it is posted
// to the device at once, for a later ReadRegistered to return filled.
func (c *DelegatedConn) PostRegistered(b *RegisteredBuf) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.released {
		return opErr("post registered buffer", c, net.ErrClosed)
	}
	c.reg.on = true
	if err := c.giveRegLocked(b); err != nil {
		return opErr("post registered buffer", c, err)
	}
	return nil
}

// giveRegLocked takes b into the connection's registered buffers and
// posts it. mu held.
func (c *DelegatedConn) giveRegLocked(b *RegisteredBuf) error {
	switch {
	case b.owner.Load() == c:
		return nil // given already (a read that returned early)
	case b.owner.Load() != nil:
		return ErrRegisteredBusy
	case len(b.b) == 0:
		return errors.New("registered buffer freed or empty")
	}
	if !b.owner.CompareAndSwap(nil, c) {
		return ErrRegisteredBusy // given to another connection just now
	}
	b.state = regRefused
	c.reg.bufs = append(c.reg.bufs, b)
	c.postRegLocked()
	return nil
}

// returnLentLocked retires the chunk the last ReadRegistered lent. mu held.
func (c *DelegatedConn) returnLentLocked() {
	if c.reg.lent != nil {
		c.retire(c.reg.lent)
		c.reg.lent, c.reg.lentCh = nil, rxChunk{}
	}
}

// regPostBatch is how many registered buffers a POST_BUFFERS carries once
// the device holds that many already: a reader streaming through a queue
// of buffers gives them back one at a time, and a command per buffer costs
// more host CPU than the copy the buffers save. Measured over a TAP with
// 64 buffers of 64 KiB (BenchmarkTAPRegisteredRead/split, interleaved in
// one sitting): the host's CPU per GiB against ordinary reads was 0.47x
// with batches of 4, 0.43x with 16 and 0.46x with 32. A reader with
// fewer buffers than this posts each at once, as before.
const regPostBatch = 16

// postRegLocked posts the registered buffers given and not yet with the
// device, in the order given: at once while the device holds fewer than
// regPostBatch, else in batches of regPostBatch. mu held.
func (c *DelegatedConn) postRegLocked() { c.postRegNow(false) }

// postRegNow is postRegLocked; all posts every waiting buffer whatever the
// batch (the device asked for one). mu held.
func (c *DelegatedConn) postRegNow(all bool) {
	if c.released || c.peerFin || c.cmdErr != nil || c.rxErr != nil {
		return
	}
	posted, waiting := 0, 0
	for _, b := range c.reg.bufs {
		switch b.state {
		case regPosted:
			posted++
		case regRefused:
			waiting++
		}
	}
	if waiting == 0 || (!all && posted >= regPostBatch && waiting < regPostBatch) {
		return
	}
	room := c.ubRoomLocked()
	var ubs []rings.UserBuf
	for _, b := range c.reg.bufs {
		if b.state != regRefused || len(ubs) == room {
			continue
		}
		c.reg.gen++
		b.id, b.state = regIDFlag|c.reg.gen&^regIDFlag, regPosted
		ubs = append(ubs, rings.UserBuf{Addr: b.addr, Len: uint32(len(b.b)), ID: b.id})
	}
	if len(ubs) > 0 {
		c.o.drv.stats.userBufPosted.Add(uint64(len(ubs)))
		c.o.postBufs(c, ubs)
	}
}

// regDoneLocked takes USER_BUF_DONE for a registered buffer: the bytes
// are in the reader's buffer, queued in stream order. It reports whether a
// reader should wake. mu held.
func (c *DelegatedConn) regDoneLocked(n *rings.Notification) bool {
	b := c.reg.find(n.Aux)
	if b == nil || int(n.Len) > len(b.b) {
		// Not a buffer the host posted: a device error, and nothing
		// of the host's is concerned.
		c.deviceErrorLocked(&c.o.drv.stats.ntfImpossible, fmt.Sprintf("USER_BUF_DONE for buffer %#x, not posted", n.Aux))
		return false
	}
	if n.Len == 0 {
		b.state = regRefused // given back unused: post it again
		c.postRegLocked()
		return false
	}
	b.state = regFilled
	c.pushChunk(rxChunk{data: b.b[:n.Len], userID: -1, reg: b})
	return true
}

// retireRegLocked: an ordinary Read drained a registered buffer's bytes
// (copied them out); the buffer, still given to the connection, is posted
// again. mu held.
func (c *DelegatedConn) retireRegLocked(b *RegisteredBuf) {
	b.state = regRefused
	c.postRegLocked()
}

// regReturnedLocked: the device gave registered buffer id back in a
// notification the host rejected, or refused it: the connection posts it
// again. mu held.
func (c *DelegatedConn) regReturnedLocked(id uint32) {
	if b := c.reg.find(id); b != nil {
		b.state = regRefused
	}
}

// bufReturnedLocked: the device gave user buffer id back (USER_BUF_DONE)
// in a notification the host rejected; the buffer is the host's again,
// its bytes are not taken. mu held.
func (c *DelegatedConn) bufReturnedLocked(id uint32) {
	if c.reg.isRegID(id) {
		c.regReturnedLocked(id)
		return
	}
	if int(id) < len(c.rxBufs) {
		c.rxBufs[id].posted = false
	}
}

// userBufReqLocked takes USER_BUF_REQ: payload is waiting in the device
// with no user buffer. Registered buffers given and not with the device
// are posted now, and so are pool buffers the device refused before.
// mu held.
func (c *DelegatedConn) userBufReqLocked() {
	c.postRegNow(true)
	c.o.repostRefused(c)
}

// releaseRegLocked hands every registered buffer back to the application:
// the device no longer has the connection. mu held.
func (c *DelegatedConn) releaseRegLocked() {
	for _, b := range c.reg.bufs {
		b.owner.Store(nil)
		b.state = regApp
	}
	c.reg.bufs = nil
}
