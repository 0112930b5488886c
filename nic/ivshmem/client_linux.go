package ivshmem

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/efd"
)

// Client is the guest's side of the protocol, as QEMU's ivshmem-doorbell
// speaks it: it takes its peer ID, BAR2's memory and the eventfds from
// the server, rings peers' vectors and waits on its own. The tests use it
// as a guest without QEMU.
type Client struct {
	// ID is this client's peer ID.
	ID uint16
	// Mem is BAR2.
	Mem []byte

	c     *net.UnixConn
	peers map[uint16][]*os.File // the vectors of other peers, to ring
	own   []*os.File            // this client's vectors, to wait on
}

// Dial connects to the server at path and takes the set-up, expecting
// vectors vectors each way, within timeout.
func Dial(path string, vectors int, timeout time.Duration) (*Client, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, err
	}
	cl := &Client{c: c, peers: map[uint16][]*os.File{}}
	if err := cl.setup(vectors, time.Now().Add(timeout)); err != nil {
		cl.Close()
		return nil, err
	}
	return cl, nil
}

// recv reads one message and its descriptor, if any.
func (cl *Client) recv(deadline time.Time) (int64, *os.File, error) {
	cl.c.SetReadDeadline(deadline)
	var b [MessageSize]byte
	oob := make([]byte, unix.CmsgSpace(4*4))
	n, oobn, _, _, err := cl.c.ReadMsgUnix(b[:], oob)
	if err != nil {
		return 0, nil, err
	}
	var f *os.File
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return 0, nil, err
		}
		for _, m := range msgs {
			fds, err := unix.ParseUnixRights(&m)
			if err != nil {
				return 0, nil, err
			}
			for i, fd := range fds {
				if i == 0 && f == nil {
					f = os.NewFile(uintptr(fd), "ivshmem-fd")
				} else {
					unix.Close(fd) // more than one: the protocol sends one
				}
			}
		}
	}
	msg, err := decode(b[:n])
	if err != nil {
		if f != nil {
			f.Close()
		}
		return 0, nil, err
	}
	return msg, f, nil
}

func (cl *Client) setup(vectors int, deadline time.Time) error {
	v, f, err := cl.recv(deadline)
	if err != nil {
		return fmt.Errorf("ivshmem client: version: %w", err)
	}
	if f != nil {
		f.Close()
	}
	if v != ProtocolVersion {
		return fmt.Errorf("ivshmem client: protocol version %d, want %d", v, ProtocolVersion)
	}
	id, f, err := cl.recv(deadline)
	if err != nil {
		return fmt.Errorf("ivshmem client: ID: %w", err)
	}
	if f != nil {
		f.Close()
	}
	if id < 0 || id > MaxPeerID {
		return fmt.Errorf("ivshmem client: peer ID %d out of range", id)
	}
	cl.ID = uint16(id)
	shm, f, err := cl.recv(deadline)
	if err != nil {
		return fmt.Errorf("ivshmem client: shared memory: %w", err)
	}
	if shm != ShmMessage || f == nil {
		if f != nil {
			f.Close()
		}
		return fmt.Errorf("ivshmem client: message %d where the shared memory (-1 with a descriptor) belongs", shm)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return err
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	f.Close()
	if err != nil {
		return fmt.Errorf("ivshmem client: mmap: %w", err)
	}
	cl.Mem = mem
	for len(cl.own) < vectors {
		p, f, err := cl.recv(deadline)
		if err != nil {
			return fmt.Errorf("ivshmem client: vectors: %w", err)
		}
		if f == nil || p < 0 || p > MaxPeerID {
			if f != nil {
				f.Close()
			}
			return fmt.Errorf("ivshmem client: message %d during set-up", p)
		}
		if uint16(p) == cl.ID {
			cl.own = append(cl.own, f)
		} else {
			cl.peers[uint16(p)] = append(cl.peers[uint16(p)], f)
		}
	}
	cl.c.SetReadDeadline(time.Time{})
	return nil
}

// Ring writes the doorbell of peer's vector v, as a guest's write of
// (peer << 16 | v) to the Doorbell register does. A peer or vector that
// is not connected is ignored, as QEMU ignores it; false says so.
func (cl *Client) Ring(peer uint16, v int) bool {
	fs := cl.peers[peer]
	if v < 0 || v >= len(fs) {
		return false
	}
	efd.Kick(fs[v])
	return true
}

// Wait waits up to timeout for an interrupt on the client's vector v and
// returns how many came since the last Wait (0 on timeout).
func (cl *Client) Wait(v int, timeout time.Duration) (uint64, error) {
	if v < 0 || v >= len(cl.own) {
		return 0, fmt.Errorf("ivshmem client: no vector %d", v)
	}
	pfd := []unix.PollFd{{Fd: int32(cl.own[v].Fd()), Events: unix.POLLIN}}
	n, err := unix.Poll(pfd, int(timeout/time.Millisecond))
	if err != nil || n == 0 {
		return 0, err
	}
	var b [8]byte
	if _, err := unix.Read(int(cl.own[v].Fd()), b[:]); err != nil {
		return 0, err
	}
	return binary.NativeEndian.Uint64(b[:]), nil
}

// Close disconnects: the server sees the guest go. Only the first call
// does anything.
func (cl *Client) Close() error {
	if cl.c == nil {
		return nil
	}
	for _, fs := range cl.peers {
		for _, f := range fs {
			f.Close()
		}
	}
	for _, f := range cl.own {
		f.Close()
	}
	if cl.Mem != nil {
		unix.Munmap(cl.Mem)
		cl.Mem = nil
	}
	c := cl.c
	cl.c, cl.peers, cl.own = nil, nil, nil
	return c.Close()
}
