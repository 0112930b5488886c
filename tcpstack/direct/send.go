package direct

// The send side of a connection: control messages out, Write in inline
// DATA or RDMA chunks, the source side of the RDMA transfers, CloseWrite.

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// postLocked sends one control message (the caller checked the credit and
// took a free slot); payload follows the header of a DATA message. extra
// work requests (an RDMA Write) go before it in the same doorbell.
func (c *Conn) postLocked(m Msg, payload []byte, src int, extra *rings.SendWR) error {
	slot := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	m.Credits = c.cs.send(m.Type.class())
	b := c.sendBuf(slot)
	m.Encode(b)
	copy(b[HeaderSize:], payload)
	c.sends[slot].src = src
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: wrSend | c.gen | uint64(slot), NumSGE: 1}
	w.SGL[0] = c.ctrlMR.SGE((c.nRecv+slot)*c.bufSize, HeaderSize+len(payload))
	var err error
	if extra != nil {
		var wrs [2]rings.SendWR
		wrs[0], wrs[1] = *extra, w
		_, err = c.qp.PostSendList(wrs[:])
	} else {
		err = c.qp.PostSend(&w)
	}
	if err != nil {
		c.failLocked(fmt.Errorf("%w: post send: %v", ErrPeerFailed, err), &c.sw.stats.peerFailures)
	}
	if m.Type == TypeFin {
		c.finSent = true
	}
	return err
}

// flushLocked sends what waits for a credit: queued control messages in
// order, then a credit-only message if one is due.
func (c *Conn) flushLocked() {
	if c.err != nil || c.cs.peerPool == 0 {
		return
	}
	for len(c.ctlQ) > 0 && len(c.free) > 0 && c.cs.canSend(classCtl) {
		m := c.ctlQ[0]
		c.ctlQ = popFront(c.ctlQ)
		if c.postLocked(m, nil, -1, nil) != nil {
			return
		}
	}
	if c.open >= 0 && !c.corkLocked() && c.announceLocked() != nil {
		return
	}
	if len(c.ctlQ) == 0 && c.open < 0 && c.finQ && !c.finSent && !c.writing && len(c.free) > 0 && c.cs.canSend(classCtl) {
		if c.postLocked(Msg{Type: TypeFin}, nil, -1, nil) != nil {
			return
		}
	}
	if len(c.free) > 0 && c.cs.canSend(classCredit) {
		_ = c.postLocked(Msg{Type: TypeCredit}, nil, -1, nil)
	}
}

// Write implements net.Conn. Bytes below the copy threshold travel inline;
// runs of at least Threshold bytes go by RDMA Read or Write in chunks.
// Write returns once its bytes are sent or copied into a source chunk: the
// last chunk of a Write may be held for the next Writes to fill while
// transfers are in flight (corkLocked), and goes when they are done.
func (c *Conn) Write(b []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.writing {
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return 0, c.opErr("write", err)
		}
	}
	c.writing = true
	defer func() {
		c.writing = false
		c.flushLocked() // a FIN queued behind this Write
		c.cond.Broadcast()
	}()
	total := 0
	large := len(b) >= c.cfg.Threshold
	for len(b) > 0 {
		n, err := c.writeOnceLocked(b, large)
		total += n
		b = b[n:]
		if err != nil {
			return total, c.opErr("write", err)
		}
	}
	return total, nil
}

// writeOnceLocked sends or stages a first part of b; large says b's Write
// was at least Threshold bytes long, so even its tail goes by RDMA.
func (c *Conn) writeOnceLocked(b []byte, large bool) (int, error) {
	for {
		if err := c.sendErrLocked(); err != nil {
			return 0, err
		}
		if c.wdl.passed() {
			return 0, os.ErrDeadlineExceeded
		}
		if c.txMode != TransferInline && (large || len(b) >= c.cfg.Threshold || c.open >= 0) {
			// A chunk being filled takes short writes too: they may not
			// overtake its bytes, and joining it costs no message.
			n, done, err := c.writeRDMALocked(b)
			if done || err != nil {
				return n, err
			}
		} else if len(c.free) > 0 && c.cs.canSend(classData) {
			n := min(len(b), c.peerIn)
			err := c.postLocked(Msg{Type: TypeData, Len: uint32(n)}, b[:n], -1, nil)
			c.sw.stats.inlineBytes.Add(uint64(n))
			return n, err
		}
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return 0, err
		}
	}
}

// corkAt is how many transfers may be in flight before a chunk that is not
// full is held for later Writes to fill: a stream of writes shorter than a
// chunk then moves in fuller chunks, with fewer control messages and RDMA
// operations per byte, while enough transfers stay queued to keep the
// connection busy; a chunk held goes as soon as fewer are in flight (the
// poller's flushLocked after RD_DONE or the WR_DONE send completed).
const corkAt = 2

// corkLocked says whether the open chunk waits for more bytes: it is not
// full, transfers are in flight, and no FIN waits behind it.
func (c *Conn) corkLocked() bool {
	return c.openN < c.openCap && c.inFlight >= corkAt && !c.finQ && !c.closing && !c.cfg.noCork
}

// writeRDMALocked copies a first part of b into the open source chunk,
// opening one if a chunk (and, in Write mode, an advertised sink region)
// is available, and announces the chunk when it is full; done false means
// wait and try again.
func (c *Conn) writeRDMALocked(b []byte) (int, bool, error) {
	if c.open >= 0 && c.openN == c.openCap {
		// Full, waiting for a credit or a send slot.
		if c.announceLocked() != nil || c.open >= 0 {
			return 0, false, nil
		}
	}
	if c.open < 0 {
		if err := c.openLocked(); err != nil || c.open < 0 {
			return 0, err != nil, err
		}
	}
	ch := &c.src.chunks[c.open]
	n := copy(c.src.mem[ch.off+c.openN:ch.off+c.openCap], b)
	c.openN += n
	var err error
	if c.openN == c.openCap {
		err = c.announceLocked()
	}
	return n, true, err
}

// openLocked makes a free source chunk the open one, registered through
// the registration cache (WSPRegisterRdmaMemory; a hit after the first
// transfer of the chunk). It leaves c.open -1 when there is no chunk (or,
// in Write mode, no advertised region) yet.
func (c *Conn) openLocked() error {
	if c.src == nil {
		a, err := c.newArea(0)
		if err != nil {
			c.sw.stats.noBuffers.Add(1)
			return ErrNoBuffers
		}
		c.src = a
	}
	if len(c.src.free) == 0 || c.txMode == TransferWrite && len(c.sinkAdv) == 0 {
		return nil
	}
	ci := c.src.free[len(c.src.free)-1]
	ch := &c.src.chunks[ci]
	access := verbs.AccessLocalWrite
	if c.txMode == TransferRead {
		access |= verbs.AccessRemoteRead
	}
	mr, err := c.sw.cache.Get(c.sw.pd, c.src.buf.Addr+rings.Addr(ch.off), c.cfg.ChunkSize, access)
	if err != nil {
		c.sw.stats.noBuffers.Add(1)
		return fmt.Errorf("%w: %v", ErrNoBuffers, err)
	}
	c.src.free = c.src.free[:len(c.src.free)-1]
	*ch = chunk{idx: ci, off: ch.off, mr: mr, busy: true}
	c.open, c.openN = ci, 0
	// The region the chunk will go to is the oldest advertised one (Write
	// mode): only announcements take regions, in order.
	c.openCap = min(c.cfg.ChunkSize, c.peerXfer)
	if c.txMode == TransferWrite {
		c.openCap = min(c.cfg.ChunkSize, int(c.sinkAdv[0].Len))
	}
	return nil
}

// announceLocked sends the open chunk if a credit and a send slot allow:
// SRC_AVAIL (Read mode), or the RDMA Write and WR_DONE behind it.
func (c *Conn) announceLocked() error {
	if c.open < 0 || c.openN == 0 || len(c.free) == 0 || !c.cs.canSend(classData) {
		return nil
	}
	ci, n := c.open, c.openN
	ch := &c.src.chunks[ci]
	c.open, c.openN = -1, 0
	c.inFlight++
	c.nextID++
	ch.id, ch.n = c.nextID, n
	mr := ch.mr
	to := mr.TO(int(c.src.buf.Addr) + ch.off - int(mr.Addr))
	c.sw.stats.rdmaBytes.Add(uint64(n))
	c.sw.stats.rdmaTransfers.Add(1)
	if c.txMode == TransferRead {
		return c.postLocked(Msg{Type: TypeSrcAvail, Len: uint32(n), ID: ch.id, STag: mr.RKey, TO: to}, nil, -1, nil)
	}
	adv := c.sinkAdv[0]
	c.sinkAdv = popFront(c.sinkAdv)
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, WRID: wrWrite | c.gen | uint64(ci), RemoteAddr: adv.TO, RKey: adv.STag, NumSGE: 1}
	w.SGL[0] = rings.SGE{Addr: to, Length: uint32(n), LKey: mr.LKey}
	return c.postLocked(Msg{Type: TypeWrDone, Len: uint32(n), ID: adv.ID}, nil, ci, &w)
}

// releaseSrcLocked gives a source chunk back (its RDMA Read is done, or
// its RDMA Write and WR_DONE completed): WSPDeregisterRdmaMemory.
func (c *Conn) releaseSrcLocked(ci int) {
	ch := &c.src.chunks[ci]
	if !ch.busy {
		return
	}
	if ch.mr != nil {
		_ = c.sw.cache.Put(ch.mr)
		ch.mr = nil
	}
	ch.busy = false
	c.src.free = append(c.src.free, ci)
	c.inFlight--
}

func (c *Conn) sendErrLocked() error {
	switch {
	case c.closed || c.closing:
		return net.ErrClosed
	case c.err != nil:
		return c.err
	case c.finQ:
		return errors.New("direct: write after CloseWrite")
	}
	return nil
}

// CloseWrite half-closes the connection: FIN goes after every byte
// written; the peer reads EOF after them. The peer may go on sending.
func (c *Conn) CloseWrite() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return c.opErr("close", net.ErrClosed)
	}
	if !c.finQ {
		c.finQ = true
		c.flushLocked()
	}
	return nil
}
