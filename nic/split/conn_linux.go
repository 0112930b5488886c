package split

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/efd"
)

// Conn is one end of the setup socket (SOCK_SEQPACKET: one message per
// datagram, so a message and its fds arrive together or not at all).
type Conn struct {
	c   *net.UnixConn
	buf []byte
	oob []byte
}

// NewConn wraps a connected unixpacket socket.
func NewConn(c *net.UnixConn) *Conn {
	return &Conn{c: c, buf: make([]byte, HeaderSize+MaxBody+1), oob: make([]byte, unix.CmsgSpace(4*MaxFDs))}
}

// Close closes the socket.
func (c *Conn) Close() error { return c.c.Close() }

// Send sends one message with fds attached.
func (c *Conn) Send(t MsgType, seq uint32, body []byte, files ...*os.File) error {
	var oob []byte
	if len(files) > 0 {
		fds := make([]int, len(files))
		for i, f := range files {
			fds[i] = int(f.Fd())
		}
		oob = unix.UnixRights(fds...)
	}
	_, _, err := c.c.WriteMsgUnix(Message(t, seq, body), oob, nil)
	return err
}

// SendMessage sends a message already encoded (AppendRegPost), with no
// descriptors: a doorbell's, without Send's copy.
func (c *Conn) SendMessage(m []byte) error {
	_, _, err := c.c.WriteMsgUnix(m, nil, nil)
	return err
}

// Recv reads one message: its header, body and the fds that came with it
// (owned by the caller). A malformed message returns the fds anyway (so
// they can be closed) with the codec's error; io.EOF means the other side
// closed or died.
func (c *Conn) Recv() (Header, []byte, []*os.File, error) {
	var h Header
	n, oobn, flags, _, err := c.c.ReadMsgUnix(c.buf, c.oob)
	if err != nil {
		if errors.Is(err, net.ErrClosed) || errors.Is(err, io.EOF) || errors.Is(err, unix.ECONNRESET) {
			return h, nil, nil, io.EOF
		}
		return h, nil, nil, err
	}
	files, ferr := parseRights(c.oob[:oobn])
	if n == 0 {
		closeAll(files)
		return h, nil, nil, io.EOF
	}
	if flags&(unix.MSG_TRUNC|unix.MSG_CTRUNC) != 0 {
		return h, nil, files, fmt.Errorf("%w (truncated: more than %d bytes or %d fds)", ErrTooLong, MaxBody, MaxFDs)
	}
	if ferr != nil {
		return h, nil, files, ferr
	}
	if err := h.Decode(c.buf[:n]); err != nil {
		return h, nil, files, err
	}
	return h, append([]byte(nil), c.buf[HeaderSize:n]...), files, nil
}

func parseRights(oob []byte) ([]*os.File, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := unix.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, fmt.Errorf("split: control message: %w", err)
	}
	var files []*os.File
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "split-fd"))
		}
	}
	return files, nil
}

func closeAll(files []*os.File) {
	for _, f := range files {
		if f != nil {
			f.Close()
		}
	}
}

// EventFD is an eventfd used as a doorbell or an interrupt vector between
// the processes: Kick adds one (a write), Forward turns its events into
// kicks of a Go doorbell in this process. With a kick word (UseWord,
// FeatureKickWords) a kick writes the eventfd only when the reader has
// taken every kick before it: the word is the in-process doorbell's
// one-deep latch, in memory both sides map.
type EventFD struct {
	f          *os.File
	word       *uint32        // the kick word in host memory, or nil
	bad        *atomic.Uint64 // where garbage found in the word is counted
	kicks      atomic.Uint64
	suppressed atomic.Uint64
	closed     atomic.Bool
}

// NewEventFD makes a non-blocking eventfd.
func NewEventFD() (*EventFD, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &EventFD{f: os.NewFile(uintptr(fd), "eventfd")}, nil
}

// EventFDOf adopts a received eventfd.
func EventFDOf(f *os.File) (*EventFD, error) {
	if err := unix.SetNonblock(int(f.Fd()), true); err != nil {
		return nil, err
	}
	// Re-wrap so the runtime's poller manages it (an os.File made from a
	// received descriptor is in blocking mode).
	fd, err := unix.Dup(int(f.Fd()))
	if err != nil {
		return nil, err
	}
	f.Close()
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		return nil, err
	}
	return &EventFD{f: os.NewFile(uintptr(fd), "eventfd")}, nil
}

// File is the descriptor, to send.
func (e *EventFD) File() *os.File { return e.f }

// UseWord gives the eventfd its kick word (docs/split.md, "Kick words"):
// w, a u32 in memory the other side maps too, and bad, where values of it
// that no well-behaved peer writes are counted. Call it before the first
// Kick or Forward; both sides of one eventfd must use the word, or
// neither.
func (e *EventFD) UseWord(w *uint32, bad *atomic.Uint64) {
	e.word, e.bad = w, bad
}

// Kick implements rings.Doorbell: one write of 1, or with a kick word one
// added to the word and the write only if it was zero. A word that was
// not zero has a write outstanding that the reader has not answered yet;
// the reader takes the word after that read, this kick included. A full
// counter (2^64-2 unread kicks) cannot happen between two live sides;
// errors after Close are ignored.
func (e *EventFD) Kick() {
	e.kicks.Add(1)
	if w := e.word; w != nil {
		old := atomic.AddUint32(w, 1) - 1
		if old != 0 {
			if old <= MaxPendingKicks {
				e.suppressed.Add(1)
				return
			}
			// Garbage (the peer wrote it): the word cannot be trusted
			// to say a write is outstanding, so write.
			e.bad.Add(1)
		}
	}
	efd.Kick(e.f)
}

// Kicks is how many times Kick was called.
func (e *EventFD) Kicks() uint64 { return e.kicks.Load() }

// Suppressed is how many kicks the kick word spared a write.
func (e *EventFD) Suppressed() uint64 { return e.suppressed.Load() }

// Forward reads the eventfd until it is closed and kicks to once for
// every kick the other side made since the last read: the eventfd's
// counter, or with a kick word the word's, which it takes (sets to zero)
// after each read, before it kicks. A doorbell or vector coalesces kicks
// itself, and whoever counts them sees each one, as with an in-process
// device. A word over MaxPendingKicks is garbage: counted, and one kick.
func (e *EventFD) Forward(to interface{ Kick() }) {
	efd.Forward(e.f, func(n uint64) {
		if w := e.word; w != nil {
			// After the read: a writer whose add comes later sees zero
			// and writes again. Before the kick: whatever the kick's
			// waiter then looks at was published before the writer's
			// add, or kicks again.
			k := atomic.SwapUint32(w, 0)
			if k > MaxPendingKicks {
				e.bad.Add(1)
				k = 1
			}
			n = uint64(k)
		}
		if to == nil {
			return
		}
		for ; n > 0; n-- {
			to.Kick()
		}
	})
}

// Close closes the descriptor and ends Forward.
func (e *EventFD) Close() error {
	if !e.closed.CompareAndSwap(false, true) {
		return nil
	}
	return e.f.Close()
}

// PollEvery calls kick every d until stop is closed: the polling mode's
// stand-in for a doorbell or an interrupt vector (VectorPoll), on the
// device's side and the host's.
func PollEvery(d time.Duration, stop <-chan struct{}, kick func()) {
	t := time.NewTicker(d)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			kick()
		case <-stop:
			return
		}
	}
}
