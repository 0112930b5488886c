package tcpstack

import (
	"net"

	"github.com/emunic/emunic/rings"
)

// The low-water marks of a delegated connection, and the device
// thresholds that implement them (SET_THRESHOLDS).
//
// Receive: SO_RCVLOWAT's meaning. A reader waits until min(mark, its
// buffer) bytes are readable (or the stream ends, or its deadline passes).
// The bytes still to come are in the device's hands, so the host arms the
// sequence threshold at the sequence number where enough would be in:
// the device raises SEQ_THRESHOLD once RCV.NXT reaches it, and the
// reader is woken by that, not by every segment before it.
//
// Send: a writer that found the send buffer full waits until the mark's
// worth of it is free again. The device raises ACK_THRESHOLD each time
// that many bytes have been acknowledged since the last one; the host arms
// it with what the writer still needs (the mark less what is free) each
// time a writer blocks, so the flag is the writer's wake-up.

// SetReadLowWater sets the receive low-water mark (SO_RCVLOWAT): a Read
// returns once min(n, len(p)) bytes are in. n < 1 is 1, the default.
func (c *DelegatedConn) SetReadLowWater(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.released {
		return opErr("set read low water", c, net.ErrClosed)
	}
	c.rcvLowat = max(n, 1)
	c.signal() // a reader waiting for more may have enough now
	return nil
}

// SetSendLowWater sets the send low-water mark: a Write that found the
// send buffer full goes on once n bytes of it are free. n < 1 is 1; more
// than the send buffer is the send buffer. The default is a quarter of the
// send buffer (OffloadConfig.SendBufSize).
func (c *DelegatedConn) SetSendLowWater(n int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.released {
		return opErr("set send low water", c, net.ErrClosed)
	}
	c.sndLowat = min(max(n, 1), c.o.cfg.SendBufSize)
	c.signal()
	return nil
}

// armSeqLocked arms the sequence threshold for a reader that needs want
// bytes readable: at RCV.NXT plus what is missing. With want 1 nothing is
// armed: any data wakes the reader anyway. mu held.
func (c *DelegatedConn) armSeqLocked(want int) {
	if want <= 1 || c.released || c.peerFin || c.cmdErr != nil {
		return
	}
	at := c.nv.rcvNxt + uint32(want-c.rxAvail)
	if c.seqArmedOn && c.seqArmed == at {
		return
	}
	c.seqArmed, c.seqArmedOn = at, true
	c.thresholdsLocked()
}

// armAckLocked arms the ACK threshold for a writer that waits for the
// send low-water mark: the bytes still to be freed. mu held.
func (c *DelegatedConn) armAckLocked() {
	if c.released || c.cmdErr != nil {
		return
	}
	used := c.sndTail - c.sndHead
	free := uint64(c.o.cfg.SendBufSize) - min(used, uint64(c.o.cfg.SendBufSize))
	want := uint32(1)
	if free < uint64(c.sndLowat) {
		want = uint32(uint64(c.sndLowat) - free)
	}
	if want == c.ackArmed {
		return
	}
	c.ackWant = want
	c.thresholdsLocked()
}

// thresholdsLocked submits SET_THRESHOLDS with the wanted values, one at a
// time: what changes while one is in the command ring goes in the next
// when it completes. A refusal is the connection's error. mu held.
func (c *DelegatedConn) thresholdsLocked() {
	if c.ackBusy || c.released || c.cmdErr != nil {
		return
	}
	if c.ackWant == 0 {
		c.ackWant = c.ackArmed
	}
	cmd := rings.Command{Opcode: rings.OpSetThresholds, Conn: c.idx, Arg0: c.ackWant, Arg1: c.seqArmed}
	if c.seqArmedOn {
		cmd.Flags = rings.CmdFlagArmSeqThreshold
	}
	c.ackArmed, c.ackBusy = c.ackWant, true
	sent := cmd
	c.o.asyncThen(c, cmdReq{c: cmd}, func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		c.ackBusy = false
		if c.ackWant != sent.Arg0 || (c.seqArmedOn && (c.seqArmed != sent.Arg1 || sent.Flags == 0)) {
			c.thresholdsLocked()
		}
	})
}

// seqThresholdLocked takes SEQ_THRESHOLD: the armed threshold fired (the
// device disarms it). mu held.
func (c *DelegatedConn) seqThresholdLocked() { c.seqArmedOn = false }
