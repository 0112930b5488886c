package direct

// The send side of a connection: control messages out, Write in inline
// DATA or RDMA transfers, the source side of the rendezvous, CloseWrite.

import (
	"errors"
	"fmt"
	"net"
	"os"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// ctlItem is a control message waiting for a credit and a send slot.
type ctlItem struct {
	m Msg
	// inv makes the message a Send with Invalidate of the peer's STag inv
	// (RD_DONE, WR_DONE): the peer's NIC invalidates the region as the
	// message arrives, so the completion message itself ends the
	// region's life.
	inv uint32
	// src is the source chunk whose RDMA Write goes in the same doorbell,
	// before the message (WR_DONE); -1 for none.
	src int
	// reg, if its STag is set, is the transfer's registration, mapped by
	// a REG_MR in the same doorbell, before the message that names it
	// (SRC_AVAIL of an RDMA Read rendezvous, SINK_AVAIL).
	reg regItem
	// rd is the RDMA Read this message (RD_DONE) is fenced behind, posted
	// before it in the same doorbell; nil for none.
	rd *rings.SendWR
}

// postLocked sends one control message (the caller checked the credit and
// that a send slot is free); payload follows the header (DATA,
// SRC_AVAIL). A WR_DONE item posts its chunk's RDMA Write before it.
func (c *Conn) postLocked(it ctlItem, payload []byte) error {
	slot := c.free[len(c.free)-1]
	c.free = c.free[:len(c.free)-1]
	m := it.m
	if m.Type.class() == classData {
		c.dataSent++
	}
	m.Credits = c.cs.send(m.Type.class())
	var wrs [3]rings.SendWR
	k := 0
	if it.reg.f != nil {
		w, err := c.regWRLocked(&it.reg, &m)
		if err != nil {
			c.free = append(c.free, slot)
			c.failLocked(fmt.Errorf("%w: %v", ErrNoBuffers, err), &c.sw.stats.noBuffers)
			return err
		}
		wrs[k] = w
		k++
	}
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: wrSend | c.gen | uint64(slot), NumSGE: 1}
	if it.inv != 0 {
		w.Opcode, w.InvSTag = rings.WRSendInv, it.inv
	}
	if n := HeaderSize + len(payload); m.Type == TypeData && n <= rings.MaxInline && k == 0 && it.src < 0 {
		// A small DATA (a 1-byte request, an urgent byte) goes inline:
		// the device takes it from the send queue entry, so its send
		// buffer is free at once and the send needs no completion (an
		// error still completes it). The driver counts the bytes the
		// CPU put in the entry (HostCopyBytes); the switch its payload.
		m.Encode(w.InlineData[:])
		copy(w.InlineData[HeaderSize:], payload)
		w.Flags, w.InlineLen, w.NumSGE = rings.WRInline, n, 0
		c.sw.stats.copyBytes.Add(uint64(len(payload)))
		c.free = append(c.free, slot)
	} else {
		b := c.sendBuf(slot)
		m.Encode(b)
		copy(b[HeaderSize:], payload)
		c.countCopy(len(payload))
		c.sends[slot].src = it.src
		w.SGL[0] = c.ctrlMR.SGE((c.nRecv+slot)*c.bufSize, HeaderSize+len(payload))
	}
	var err error
	if it.rd != nil {
		// The device starts the message when the Read has completed:
		// the RD_DONE leaves as soon as the data is in, with no trip
		// through the host.
		wrs[k] = *it.rd
		k++
		w.Flags |= rings.WRFence
	}
	if it.src >= 0 {
		ch := &c.src.chunks[it.src]
		rest := ch.n - ch.first
		wrs[k] = rings.SendWR{Opcode: rings.WRRDMAWrite, WRID: wrWrite | c.gen | uint64(it.src),
			RemoteAddr: ch.dst.TO, RKey: ch.dst.STag, NumSGE: 1}
		wrs[k].SGL[0] = ch.lmr.SGE(int(ch.addr-ch.lmr.Addr)+ch.first, rest)
		k++
	}
	if k > 0 {
		wrs[k] = w
		_, err = c.qp.PostSendList(wrs[:k+1])
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

// queueLocked queues a control message behind those already waiting.
func (c *Conn) queueLocked(it ctlItem) { c.ctlQ = append(c.ctlQ, it) }

// flushLocked sends what waits for a credit: queued control messages in
// order, then a credit-only message if one is due.
func (c *Conn) flushLocked() {
	if c.err != nil || c.cs.peerPool == 0 {
		return
	}
	for len(c.ctlQ) > 0 && len(c.free) > 0 && c.cs.canSend(classCtl) {
		it := c.ctlQ[0]
		c.ctlQ = popFront(c.ctlQ)
		if c.postLocked(it, nil) != nil {
			return
		}
	}
	if c.open >= 0 && !c.corkLocked() && c.announceLocked() != nil {
		return
	}
	if len(c.ctlQ) == 0 && c.open < 0 && c.finQ && !c.finSent && !c.writing && len(c.free) > 0 && c.cs.canSend(classCtl) {
		if c.postLocked(ctlItem{m: Msg{Type: TypeFin}, src: -1}, nil) != nil {
			return
		}
	}
	if len(c.free) > 0 && c.cs.canSend(classCredit) {
		_ = c.postLocked(ctlItem{m: Msg{Type: TypeCredit}, src: -1}, nil)
	}
}

// Write implements net.Conn. Bytes below the copy threshold travel inline;
// runs of at least Threshold bytes go by RDMA rendezvous in transfers of up
// to a chunk. Write returns once its bytes are sent or copied into a
// source chunk: the last chunk of a Write may be held for the next Writes
// to fill while transfers are in flight (corkLocked), and goes when they
// are done.
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
// was at least Threshold bytes long, so even its tail goes by RDMA. The
// threshold is per transfer: while the peer's application waits in a read
// of registered memory (SINK_WAIT), anything longer than one DATA goes by
// RDMA Write straight into that memory.
func (c *Conn) writeOnceLocked(b []byte, large bool) (int, error) {
	for {
		if err := c.sendErrLocked(); err != nil {
			return 0, err
		}
		if c.wdl.passed() {
			return 0, os.ErrDeadlineExceeded
		}
		rdma := c.txMode != TransferInline && (large || len(b) >= c.cfg.Threshold || c.open >= 0 ||
			c.peerWait > 0 && len(b) > c.peerIn && c.peerCaps&CapWrite != 0)
		if rdma && len(b) >= c.cfg.Threshold && c.open < 0 {
			if addr, ok := c.sw.registered(b); ok {
				return c.writeZeroCopyLocked(b, addr)
			}
		}
		if rdma {
			// A chunk being filled takes short writes too: they may not
			// overtake its bytes, and joining it costs no message.
			n, done, err := c.writeRDMALocked(b)
			if done || err != nil {
				return n, err
			}
		} else if len(c.free) > 0 && c.cs.canSend(classData) {
			n := min(len(b), c.peerIn)
			err := c.postLocked(ctlItem{m: Msg{Type: TypeData, Len: uint32(n)}, src: -1}, b[:n])
			c.sw.stats.inlineBytes.Add(uint64(n))
			c.nInline++
			c.peerWait = 0
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
	return c.openN < c.openCap && c.inFlight >= corkAt && !c.finQ && !c.closing
}

// writeRDMALocked copies a first part of b into the open source chunk,
// opening one if a chunk is free, and announces the chunk when it is full;
// done false means wait and try again.
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
	c.countCopy(n)
	c.openN += n
	var err error
	if c.openN == c.openCap {
		err = c.announceLocked()
	}
	return n, true, err
}

// openLocked makes a free source chunk the open one and picks its
// rendezvous. For RDMA Read it takes the STag the transfer is registered
// under for remote read (WSPRegisterRdmaMemory, mapped with the SRC_AVAIL;
// deregistered by the RD_DONE), with the conn's lock released if one must
// be allocated. It leaves c.open -1 when no chunk is free.
func (c *Conn) openLocked() error {
	if err := c.srcAreaLocked(); err != nil {
		return err
	}
	if len(c.src.free) == 0 {
		return nil
	}
	ci := c.src.free[len(c.src.free)-1]
	c.src.free = c.src.free[:len(c.src.free)-1]
	ch := &c.src.chunks[ci]
	*ch = chunk{idx: ci, off: ch.off, addr: c.src.buf.Addr + rings.Addr(ch.off), lmr: c.src.mr, busy: true}
	ch.write = c.writeRendezvousLocked()
	if err := c.regSourceLocked(ci); err != nil {
		return err
	}
	c.open, c.openN = ci, 0
	// The first part rides in the SRC_AVAIL, the rest in the peer's sink
	// chunk.
	c.openCap = min(c.cfg.ChunkSize, c.peerIn+c.peerXfer)
	return nil
}

// regSourceLocked takes the STag source chunk ci's transfer will be
// registered under for remote read when it is an RDMA Read rendezvous
// (mapped with its SRC_AVAIL; the conn's lock is released if one must be
// allocated); on failure the chunk is given back.
func (c *Conn) regSourceLocked(ci int) error {
	ch := &c.src.chunks[ci]
	if ch.write {
		return nil
	}
	mr, err := c.takeFastUnlocked()
	if err == nil && c.err != nil {
		// The conn failed while unlocked.
		c.sw.putFast(mr)
		err = c.err
	}
	if err != nil {
		ch.busy = false
		if ch.ext {
			c.src.zfree = append(c.src.zfree, ci)
			c.zcBusy--
		} else {
			c.src.free = append(c.src.free, ci)
		}
		return err
	}
	ch.rmr = mr
	return nil
}

// announceLocked sends the open chunk if a credit and a send slot allow:
// a DATA if it all fits inline, else a SRC_AVAIL.
func (c *Conn) announceLocked() error {
	if c.open < 0 || c.openN == 0 || len(c.free) == 0 || !c.cs.canSend(classData) {
		return nil
	}
	ci, n := c.open, c.openN
	ch := &c.src.chunks[ci]
	c.open, c.openN = -1, 0
	data := c.src.mem[ch.off : ch.off+n]
	waiting := c.peerWait > 0 && c.peerCaps&CapWrite != 0
	if n <= c.peerIn && !waiting {
		// Too little for RDMA: one DATA, and the chunk is free again.
		c.sw.stats.inlineBytes.Add(uint64(n))
		c.nInline++
		err := c.postLocked(ctlItem{m: Msg{Type: TypeData, Len: uint32(n)}, src: -1}, data)
		c.inFlight++
		c.releaseSrcLocked(ci)
		return err
	}
	first := min(c.peerIn, n)
	if waiting {
		// The peer waits in a read of registered memory: all of it by
		// RDMA Write, into that memory.
		first = 0
		if !ch.write {
			c.sw.putFast(ch.rmr) // not mapped yet
			ch.rmr, ch.write = nil, true
		}
	}
	return c.srcAvailSendLocked(ci, n, first, data[:first])
}

// writeRendezvousLocked picks the rendezvous of the next transfer: RDMA
// Write when the peer cannot read, when its application waits in a read
// of registered memory (SINK_WAIT: the sink is then that memory), or when
// this side prefers it; else RDMA Read (the sender was first: the sink
// pulls from it).
func (c *Conn) writeRendezvousLocked() bool {
	if c.peerCaps&CapWrite == 0 {
		return false
	}
	return c.peerCaps&CapRead == 0 || c.peerWait > 0 || c.cfg.Transfer == TransferWrite
}

// srcAvailSendLocked sends the SRC_AVAIL of source chunk ci: n bytes in
// all, the first ones (payload) inline, the rest named by the chunk's
// remote-read region (RDMA Read) or asked a sink for (RDMA Write).
func (c *Conn) srcAvailSendLocked(ci, n, first int, payload []byte) error {
	ch := &c.src.chunks[ci]
	c.inFlight++
	c.txID++
	ch.id, ch.n, ch.first = c.txID, n, first
	if ch.write && first == 0 {
		// It goes into the waiting read's memory, which takes peerWait
		// bytes in all.
		c.peerWait = max(0, c.peerWait-n)
	} else {
		c.peerWait = 0
	}
	c.sw.stats.inlineBytes.Add(uint64(first))
	c.sw.stats.rdmaBytes.Add(uint64(n - first))
	c.sw.stats.rdmaTransfers.Add(1)
	m := Msg{Type: TypeSrcAvail, Total: uint32(n), Len: uint32(first), ID: ch.id}
	if ch.write {
		m.Flags = FlagSinkReq
		ch.state = srcWantSink
		c.sw.stats.writeRendezvous.Add(1)
		c.nWrite++
		return c.postLocked(ctlItem{m: m, src: -1}, payload)
	}
	// The rest is registered for remote read for this transfer: the
	// SRC_AVAIL names the mapping (postLocked sets its STag and TO).
	ch.state = srcWantRdDone
	c.sw.stats.readRendezvous.Add(1)
	c.nRead++
	reg := regItem{f: ch.rmr, addr: ch.addr + rings.Addr(first), n: n - first, access: verbs.AccessRemoteRead}
	return c.postLocked(ctlItem{m: m, src: -1, reg: reg}, payload)
}

// srcAreaLocked makes the source area: Chunks staging chunks, and as many
// slots for transfers straight from registered application buffers.
func (c *Conn) srcAreaLocked() error {
	if c.src != nil {
		return nil
	}
	a, err := c.newArea(verbs.AccessLocalWrite)
	if err != nil {
		c.sw.stats.noBuffers.Add(1)
		return fmt.Errorf("%w: %v", ErrNoBuffers, err)
	}
	n := len(a.chunks)
	for i := range n {
		a.chunks = append(a.chunks, chunk{idx: n + i, ext: true})
		a.zfree = append(a.zfree, n+i)
	}
	c.src = a
	return nil
}

// writeZeroCopyLocked sends b, in registered memory at addr, with no copy:
// each transfer offers b's own memory as the source, registered for
// remote read for the transfer (RDMA Read) or read by the RDMA Write, with
// no first part. The application registration goes through the
// registration cache (WSPRegisterMemory), so a buffer sent again costs no
// command. It returns when every transfer is done: the memory is the
// application's again.
func (c *Conn) writeZeroCopyLocked(b []byte, addr rings.Addr) (int, error) {
	if err := c.srcAreaLocked(); err != nil {
		return 0, err
	}
	// Through the cache when the provider tells its caches of freed
	// memory; else registered for this Write only, since a cached
	// registration would outlive a Free it never hears of.
	c.mu.Unlock()
	var lmr *verbs.MR
	var err error
	if c.sw.cacheCB {
		lmr, err = c.sw.cache.Get(c.sw.pd, addr, len(b), verbs.AccessLocalWrite)
	} else {
		lmr, err = c.sw.v.RegMRAddr(c.sw.pd, addr, len(b), verbs.AccessLocalWrite)
	}
	c.mu.Lock()
	if err != nil {
		c.sw.stats.noBuffers.Add(1)
		return 0, fmt.Errorf("%w: %v", ErrNoBuffers, err)
	}
	defer func() {
		// Writes are serialized: every application-buffer transfer is
		// this Write's. A failed conn's QP is destroyed: nothing moves
		// any more.
		for c.zcBusy > 0 && c.err == nil {
			c.cond.Wait()
		}
		c.mu.Unlock()
		// The buffer is the application's again once no remote
		// registration of it is left.
		c.zcDeregs.Wait()
		if c.sw.cacheCB {
			_ = c.sw.cache.Put(lmr)
		} else {
			_ = lmr.Dereg()
		}
		c.mu.Lock()
	}()
	off := 0
	for off < len(b) {
		if err := c.sendErrLocked(); err != nil {
			return off, err
		}
		if len(c.src.zfree) == 0 || len(c.free) == 0 || !c.cs.canSend(classData) {
			if err := c.waitLocked(&c.wdl, true); err != nil {
				return off, err
			}
			continue
		}
		n := min(len(b)-off, c.peerXfer)
		ci := c.src.zfree[len(c.src.zfree)-1]
		c.src.zfree = c.src.zfree[:len(c.src.zfree)-1]
		ch := &c.src.chunks[ci]
		*ch = chunk{idx: ci, ext: true, addr: addr + rings.Addr(off), lmr: lmr, busy: true, write: c.writeRendezvousLocked()}
		c.zcBusy++
		if err := c.regSourceLocked(ci); err != nil {
			return off, err
		}
		c.zcSends++
		if err := c.srcAvailSendLocked(ci, n, 0, nil); err != nil {
			return off, err
		}
		off += n
	}
	return off, nil
}

// releaseSrcLocked gives a source chunk back: its RDMA Read is done
// (RD_DONE), or its RDMA Write and WR_DONE completed. Its remote
// registration, if any, is deregistered.
func (c *Conn) releaseSrcLocked(ci int) {
	ch := &c.src.chunks[ci]
	if !ch.busy {
		return
	}
	if ch.ext {
		c.dropFast(ch.rmr, &c.zcDeregs)
	} else {
		c.dropFast(ch.rmr, nil)
	}
	ch.rmr = nil
	ch.busy, ch.state = false, 0
	if ch.ext {
		ch.lmr = nil
		c.src.zfree = append(c.src.zfree, ci)
		c.zcBusy--
	} else {
		c.src.free = append(c.src.free, ci)
	}
	c.inFlight--
}

// srcWaitingLocked returns the source chunk of transfer id in state st,
// checking the RDMA length a message claims for it; -1 and why if none.
func (c *Conn) srcWaitingLocked(m *Msg, st chunkState) (int, error) {
	if c.src != nil {
		for i := range c.src.chunks {
			ch := &c.src.chunks[i]
			if !ch.busy || ch.state != st || ch.id != m.ID {
				continue
			}
			if int(m.Len) != ch.n-ch.first {
				return -1, fmt.Errorf("%v of %d bytes for transfer %d of %d", m.Type, m.Len, m.ID, ch.n-ch.first)
			}
			return i, nil
		}
	}
	return -1, fmt.Errorf("%v for transfer %d, which waits for none", m.Type, m.ID)
}

// sinkAvailLocked takes the peer's SINK_AVAIL: the region it registered
// for the rest of source transfer m.ID. The RDMA Write and the WR_DONE (a
// Send with Invalidate of the region's STag) go behind the control
// messages already queued.
func (c *Conn) sinkAvailLocked(m *Msg) error {
	i, err := c.srcWaitingLocked(m, srcWantSink)
	if err != nil {
		return err
	}
	ch := &c.src.chunks[i]
	ch.dst, ch.state = *m, srcWriting
	c.queueLocked(ctlItem{m: Msg{Type: TypeWrDone, Len: m.Len, ID: m.ID}, inv: m.STag, src: i})
	return nil
}

// rdDoneLocked takes the peer's RD_DONE: it must have invalidated the
// transfer's STag (wc says which it did).
func (c *Conn) rdDoneLocked(m *Msg, wc *rings.Completion) error {
	i, err := c.srcWaitingLocked(m, srcWantRdDone)
	if err != nil {
		return err
	}
	ch := &c.src.chunks[i]
	if !c.invalidatedLocked(ch.rmr, wc) {
		return fmt.Errorf("RD_DONE of transfer %d did not invalidate its STag %#x", m.ID, ch.rmr.STag())
	}
	ch.rmr = nil
	c.releaseSrcLocked(i)
	return nil
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
	if c.closed || c.closing {
		return c.opErr("close", net.ErrClosed)
	}
	if !c.finQ {
		c.finQ = true
		c.flushLocked()
	}
	return nil
}
