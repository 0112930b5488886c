package port

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// SocketMaxFrameSize is the longest frame a socket port carries (as a TAP).
const SocketMaxFrameSize = TAPMaxFrameSize

// SocketPort is a Port on one end of a unix SOCK_SEQPACKET socket: each
// frame is one message, so frame boundaries survive, and the far end is
// another process (or another port spliced to it). It is how a device in
// its own process reaches a wire that lives in the host's process: the
// host splices its port to one end of a socket pair and hands the device
// the other (see nic/split).
type SocketPort struct {
	name   string
	file   *os.File
	stats  counters
	closed atomic.Bool
}

// NewSocketPort makes a port of fd, which must be a SOCK_SEQPACKET (or
// SOCK_DGRAM) unix socket; the port owns fd from then on.
func NewSocketPort(fd int, name string) (*SocketPort, error) {
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return nil, fmt.Errorf("socket port %s: %w", name, err)
	}
	if typ != unix.SOCK_SEQPACKET && typ != unix.SOCK_DGRAM {
		return nil, fmt.Errorf("socket port %s: socket type %d: want SOCK_SEQPACKET or SOCK_DGRAM (frame boundaries)", name, typ)
	}
	if err := unix.SetNonblock(fd, true); err != nil {
		return nil, fmt.Errorf("socket port %s: %w", name, err)
	}
	// Room for a burst of full-size frames each way, as a NIC's FIFO.
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	return &SocketPort{name: name, file: os.NewFile(uintptr(fd), name)}, nil
}

// SocketPair returns the two ends of a new SOCK_SEQPACKET pair as ports.
func SocketPair() (a, b *SocketPort, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socket pair: %w", err)
	}
	if a, err = NewSocketPort(fds[0], "socketpair-a"); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	if b, err = NewSocketPort(fds[1], "socketpair-b"); err != nil {
		a.Close()
		unix.Close(fds[1])
		return nil, nil, err
	}
	return a, b, nil
}

// File is the socket, for handing it to another process (SCM_RIGHTS).
func (s *SocketPort) File() *os.File { return s.file }

// String returns "socket:<name>".
func (s *SocketPort) String() string { return "socket:" + s.name }

// WriteFrame sends frame as one message. A far end that has gone (closed
// or died) drops the frame, counted as link down, as a cable pulled out.
func (s *SocketPort) WriteFrame(frame []byte) error {
	if err := s.stats.checkTx(s.closed.Load(), len(frame), SocketMaxFrameSize); err != nil {
		return err
	}
	_, err := s.file.Write(frame)
	switch {
	case err == nil:
		s.stats.txFrames.Add(1)
		s.stats.txBytes.Add(uint64(len(frame)))
		return nil
	case s.closed.Load() || errors.Is(err, os.ErrClosed):
		s.stats.txDropClosed.Add(1)
		return ErrClosed
	case errors.Is(err, unix.EPIPE) || errors.Is(err, unix.ECONNRESET) || errors.Is(err, unix.ECONNREFUSED):
		s.stats.txDropLinkDown.Add(1)
		return nil
	default:
		s.stats.txErrors.Add(1)
		return fmt.Errorf("socket port %s: write: %w", s.name, err)
	}
}

// ReadFrame waits for the next message. A message longer than buf is
// dropped and counted (MSG_TRUNC tells its real length).
func (s *SocketPort) ReadFrame(buf []byte) (int, error) {
	if s.closed.Load() {
		return 0, ErrClosed
	}
	rc, err := s.file.SyscallConn()
	if err != nil {
		return 0, ErrClosed
	}
	var n int
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		n, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_TRUNC)
		return rerr != unix.EAGAIN
	})
	if err == nil {
		err = rerr
	}
	switch {
	case err != nil:
		if s.closed.Load() || errors.Is(err, os.ErrClosed) {
			return 0, ErrClosed
		}
		return 0, fmt.Errorf("socket port %s: read: %w", s.name, err)
	case n == 0:
		// The far end closed: the link is down for good.
		return 0, fmt.Errorf("socket port %s: %w", s.name, io.EOF)
	case n > len(buf):
		s.stats.rxDropTooBig.Add(1)
		return 0, ErrFrameTooBig
	}
	s.stats.rxFrames.Add(1)
	s.stats.rxBytes.Add(uint64(n))
	return n, nil
}

// Close closes the socket and wakes a blocked ReadFrame. Twice is harmless.
func (s *SocketPort) Close() error {
	if !s.closed.CompareAndSwap(false, true) {
		return nil
	}
	return s.file.Close()
}

// Stats returns a snapshot of the port's counters.
func (s *SocketPort) Stats() Stats { return s.stats.snapshot() }

// Splice moves frames both ways between a and b until either fails or is
// closed, then closes both. It returns at once; done is closed when both
// directions have stopped.
func Splice(a, b Port) (done <-chan struct{}) {
	d := make(chan struct{})
	var left atomic.Int32
	left.Store(2)
	pump := func(from, to Port) {
		buf := make([]byte, SocketMaxFrameSize)
		for {
			n, err := from.ReadFrame(buf)
			if errors.Is(err, ErrFrameTooBig) {
				continue
			}
			if err != nil {
				break
			}
			if err := to.WriteFrame(buf[:n]); err != nil && !errors.Is(err, ErrFrameTooBig) && !errors.Is(err, ErrRuntFrame) {
				break
			}
		}
		a.Close()
		b.Close()
		if left.Add(-1) == 0 {
			close(d)
		}
	}
	go pump(a, b)
	go pump(b, a)
	return d
}
