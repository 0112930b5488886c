package direct

// Urgent (out-of-band) data: one byte at a time, outside the stream, with
// the mark where it was sent, as TCP's urgent data is used by sockets
// (send MSG_OOB, recv MSG_OOB, SIOCATMARK).

import (
	"errors"
	"net"
)

// ErrNoUrgent: ReadOOB found no urgent byte waiting (recv MSG_OOB's
// EWOULDBLOCK).
var ErrNoUrgent = errors.New("direct: no urgent data")

// WriteOOB sends b as urgent data: a DATA control message with
// FlagUrgent, after every byte written before it (a chunk being filled
// goes first), so the peer's mark is there. It takes a data credit like
// any data; the peer gives it back when its application reads the byte or
// reads past the mark.
func (c *Conn) WriteOOB(b byte) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.writing {
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return c.opErr("write", err)
		}
	}
	c.writing = true
	defer func() {
		c.writing = false
		c.flushLocked()
		c.cond.Broadcast()
	}()
	for {
		if err := c.sendErrLocked(); err != nil {
			return c.opErr("write", err)
		}
		if c.open >= 0 {
			if err := c.announceLocked(); err != nil {
				return c.opErr("write", err)
			}
		}
		if c.open < 0 && len(c.free) > 0 && c.cs.canSend(classData) {
			c.nUrgent++
			if err := c.postLocked(ctlItem{m: Msg{Type: TypeData, Flags: FlagUrgent, Len: 1}, src: -1}, []byte{b}); err != nil {
				return c.opErr("write", err)
			}
			return nil
		}
		if err := c.waitLocked(&c.wdl, true); err != nil {
			return c.opErr("write", err)
		}
	}
}

// ReadOOB returns the urgent byte waiting, the last one sent (an earlier
// one not read is lost, as with TCP), or ErrNoUrgent. It does not wait.
func (c *Conn) ReadOOB() (byte, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.closing {
		return 0, c.opErr("read", net.ErrClosed)
	}
	if !c.oobValid {
		if c.err != nil {
			return 0, c.opErr("read", c.err)
		}
		return 0, c.opErr("read", ErrNoUrgent)
	}
	c.oobValid = false
	// The application has the urgent data: every urgent message's
	// buffer is owed back.
	for range c.urgHeld {
		c.cs.consumed()
	}
	c.urgHeld = c.urgHeld[:0]
	c.flushLocked()
	return c.oob, nil
}

// AtMark says whether the next byte Read returns is the one sent right
// after the last urgent byte (SIOCATMARK). Read stops at the mark, so an
// application reading with AtMark in between sees it.
func (c *Conn) AtMark() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.markSet && c.readBytes == c.mark
}

// urgentLocked takes a received urgent byte: kept for ReadOOB, its stream
// position the mark, its buffer's credit held until the application reads
// it or reads past the mark.
func (c *Conn) urgentLocked(b byte) {
	c.oob, c.oobValid = b, true
	c.mark, c.markSet = c.recvBytes, true
	c.urgHeld = append(c.urgHeld, c.recvBytes)
}

// passedMarksLocked gives back the credits of urgent messages whose mark
// the application's reads have passed.
func (c *Conn) passedMarksLocked() {
	k := 0
	for _, m := range c.urgHeld {
		if c.readBytes > m {
			c.cs.consumed()
			continue
		}
		c.urgHeld[k] = m
		k++
	}
	c.urgHeld = c.urgHeld[:k]
}
