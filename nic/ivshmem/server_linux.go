package ivshmem

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/efd"
)

// Config configures a server.
type Config struct {
	// Vectors is the number of interrupt vectors each way: the guest's
	// MSI-X vectors and the device's doorbells. It must equal the vectors=
	// of QEMU's -device ivshmem-doorbell: QEMU leaves vectors past its own
	// count unconnected and refuses more eventfds than it has vectors.
	Vectors int
	// MemSize is BAR2's size in bytes: a power of two (a PCI BAR's size
	// is), at least MinMemSize.
	MemSize int
	// Logf, when set, gets one line per session event.
	Logf func(format string, args ...any)
}

// MinMemSize is the smallest BAR2 a server makes.
const MinMemSize = 64 << 10

// Handler is the device behind the server: what BAR2 and the doorbells
// mean.
type Handler interface {
	// Attach is called when a guest has been sent everything it needs,
	// before any of its doorbells is delivered. An error ends the session.
	Attach(g *Guest) error
	// Doorbell is called when the guest rang vector v n times since the
	// last call for v (the eventfd's counter). Calls for one vector come
	// in order from one goroutine; different vectors' calls may run at
	// once.
	Doorbell(g *Guest, v int, n uint64)
	// Detach is called when the guest has gone, after the last Doorbell
	// call has returned; the memory is unmapped after it returns.
	Detach(g *Guest)
}

// Guest is one attached guest: its peer ID, BAR2's memory, and its
// interrupt vectors.
type Guest struct {
	// ID is the guest's peer ID (its IVPosition register).
	ID uint16
	// Mem is BAR2, mapped shared with QEMU: what the guest sees at BAR2's
	// offset i is Mem[i].
	Mem []byte

	vectors []*os.File // the guest's vectors: the device writes them
	bells   []*os.File // the device's doorbells: QEMU writes them for the guest
	raised  []atomic.Uint64
	rung    []atomic.Uint64
}

// Vectors is the number of vectors each way.
func (g *Guest) Vectors() int { return len(g.vectors) }

// Raise interrupts the guest on vector v (its MSI-X vector v); false when
// there is no vector v.
func (g *Guest) Raise(v int) bool {
	if v < 0 || v >= len(g.vectors) {
		return false
	}
	g.raised[v].Add(1)
	efd.Kick(g.vectors[v])
	return true
}

// Vector is vector v as a doorbell (rings.Doorbell): Kick raises it.
func (g *Guest) Vector(v int) VectorBell { return VectorBell{g, v} }

// VectorBell raises one of a guest's vectors.
type VectorBell struct {
	g *Guest
	v int
}

// Kick raises the vector.
func (b VectorBell) Kick() { b.g.Raise(b.v) }

// Raised is how many times vector v was raised.
func (g *Guest) Raised(v int) uint64 { return g.raised[v].Load() }

// Rung is how many doorbells the guest rang on vector v.
func (g *Guest) Rung(v int) uint64 { return g.rung[v].Load() }

// Stats counts what the server saw, over all sessions.
type Stats struct {
	Guests    uint64 // guests that attached
	Refused   uint64 // connections refused: another guest was attached, or the set-up failed
	Gone      uint64 // guests that went (QEMU closed the socket or died)
	Doorbells uint64 // doorbells rung, over all vectors
	Garbage   uint64 // bytes a guest's QEMU sent on the one-way socket
}

// Server serves one guest at a time.
type Server struct {
	cfg Config
	h   Handler

	guests, refused, gone, doorbells, garbage atomic.Uint64

	mu      sync.Mutex
	idle    *sync.Cond // signalled when a session ends
	busy    bool       // a guest is attached
	leaving bool       // and it has gone: its session is being torn down
	nextID  uint16
}

// NewServer makes a server for the device h.
func NewServer(cfg Config, h Handler) (*Server, error) {
	if cfg.Vectors < 1 || cfg.Vectors > MaxVectors {
		return nil, fmt.Errorf("ivshmem: %d vectors: want 1 to %d", cfg.Vectors, MaxVectors)
	}
	if cfg.MemSize < MinMemSize || cfg.MemSize&(cfg.MemSize-1) != 0 {
		return nil, fmt.Errorf("ivshmem: memory size %d: want a power of two of at least %d", cfg.MemSize, MinMemSize)
	}
	s := &Server{cfg: cfg, h: h, nextID: DevicePeerID + 1}
	s.idle = sync.NewCond(&s.mu)
	return s, nil
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Guests: s.guests.Load(), Refused: s.refused.Load(), Gone: s.gone.Load(),
		Doorbells: s.doorbells.Load(), Garbage: s.garbage.Load()}
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve accepts guests on l until l is closed. A guest that connects
// while another is attached is refused (its connection closed at once:
// QEMU then fails to realize the device) and counted.
func (s *Server) Serve(l *net.UnixListener) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := s.ServeConn(c); err != nil {
				s.logf("ivshmem: %v", err)
			}
		}()
	}
}

// ServeConn serves one guest on c until its QEMU closes the connection
// (nil) or the socket fails. Everything of the session is released before
// it returns.
func (s *Server) ServeConn(c *net.UnixConn) error {
	defer c.Close()
	id, ok := s.claim()
	if !ok {
		s.refused.Add(1)
		return fmt.Errorf("refused a second guest: one is attached")
	}
	defer s.release()
	g, memfd, err := s.newGuest(id)
	if err != nil {
		s.refused.Add(1)
		return err
	}
	defer g.close()
	err = s.sendSetup(c, g, memfd)
	memfd.Close() // QEMU has its own descriptor; the mapping keeps ours
	if err != nil {
		s.refused.Add(1)
		return fmt.Errorf("guest %d: set-up: %w", id, err)
	}
	if err := s.h.Attach(g); err != nil {
		s.refused.Add(1)
		return fmt.Errorf("guest %d: %w", id, err)
	}
	s.guests.Add(1)
	s.logf("ivshmem: guest %d attached: %d bytes of BAR2, %d vectors", id, len(g.Mem), len(g.vectors))

	var wg sync.WaitGroup
	for v, bell := range g.bells {
		wg.Add(1)
		go func() {
			defer wg.Done()
			efd.Forward(bell, func(n uint64) {
				g.rung[v].Add(n)
				s.doorbells.Add(n)
				s.h.Doorbell(g, v, n)
			})
		}()
	}
	// The protocol is one-way: QEMU never writes. The read ends when it
	// closes the socket or its process dies; anything it does send is
	// counted and dropped.
	var buf [256]byte
	var rerr error
	for {
		n, err := c.Read(buf[:])
		s.garbage.Add(uint64(n))
		if err != nil {
			if err != io.EOF {
				rerr = err
			}
			break
		}
	}
	s.mu.Lock()
	s.leaving = true
	s.mu.Unlock()
	for _, b := range g.bells {
		b.Close() // ends the Forward above
	}
	wg.Wait()
	s.gone.Add(1)
	s.h.Detach(g)
	s.logf("ivshmem: guest %d gone", id)
	return rerr
}

// claim makes the caller the attached guest, or says another one is. A
// guest that comes while the last one's session is still being torn down
// (a QEMU restarted at once) waits for the teardown instead of being
// refused.
func (s *Server) claim() (uint16, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.busy && s.leaving {
		s.idle.Wait()
	}
	if s.busy {
		return 0, false
	}
	s.busy = true
	id := s.nextID
	// IDs are not reused at once, so a stale doorbell of a guest that
	// went cannot be taken for the next one's; they wrap past MaxPeerID,
	// skipping the device's own.
	if s.nextID == MaxPeerID {
		s.nextID = DevicePeerID + 1
	} else {
		s.nextID++
	}
	return id, true
}

func (s *Server) release() {
	s.mu.Lock()
	s.busy, s.leaving = false, false
	s.idle.Broadcast()
	s.mu.Unlock()
}

// newGuest makes a session's memory (a sealed memfd, mapped here) and its
// eventfds.
func (s *Server) newGuest(id uint16) (*Guest, *os.File, error) {
	fd, err := unix.MemfdCreate("emunic-bar2", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, nil, fmt.Errorf("memfd_create: %w", err)
	}
	memfd := os.NewFile(uintptr(fd), "emunic-bar2")
	fail := func(err error) (*Guest, *os.File, error) {
		memfd.Close()
		return nil, nil, err
	}
	if err := unix.Ftruncate(fd, int64(s.cfg.MemSize)); err != nil {
		return fail(fmt.Errorf("memfd size: %w", err))
	}
	// Neither side may resize the memory under the other's mapping: an
	// access past a shrunk file is a SIGBUS.
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK|unix.F_SEAL_GROW); err != nil {
		return fail(fmt.Errorf("memfd seals: %w", err))
	}
	mem, err := unix.Mmap(fd, 0, s.cfg.MemSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return fail(fmt.Errorf("mmap BAR2: %w", err))
	}
	g := &Guest{ID: id, Mem: mem, raised: make([]atomic.Uint64, s.cfg.Vectors), rung: make([]atomic.Uint64, s.cfg.Vectors)}
	for i := 0; i < 2*s.cfg.Vectors; i++ {
		e, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			g.close()
			return fail(fmt.Errorf("eventfd: %w", err))
		}
		f := os.NewFile(uintptr(e), "ivshmem-vector")
		if i < s.cfg.Vectors {
			g.bells = append(g.bells, f)
		} else {
			g.vectors = append(g.vectors, f)
		}
	}
	return g, memfd, nil
}

// sendSetup sends the messages of a connect, in the protocol's order.
func (s *Server) sendSetup(c *net.UnixConn, g *Guest, memfd *os.File) error {
	if err := send(c, ProtocolVersion, nil); err != nil {
		return err
	}
	if err := send(c, int64(g.ID), nil); err != nil {
		return err
	}
	if err := send(c, ShmMessage, memfd); err != nil {
		return err
	}
	// The device is the one other peer: its doorbells are "peer 0's
	// vectors", which the guest interrupts through its Doorbell register.
	for _, b := range g.bells {
		if err := send(c, DevicePeerID, b); err != nil {
			return err
		}
	}
	for _, v := range g.vectors {
		if err := send(c, int64(g.ID), v); err != nil {
			return err
		}
	}
	return nil
}

// send writes one message, with f's descriptor when f is not nil.
func send(c *net.UnixConn, n int64, f *os.File) error {
	b := encode(n)
	var oob []byte
	if f != nil {
		oob = unix.UnixRights(int(f.Fd()))
	}
	wn, oobn, err := c.WriteMsgUnix(b[:], oob, nil)
	if err != nil {
		return err
	}
	if wn != len(b) || oobn != len(oob) {
		return fmt.Errorf("short write: %d of %d bytes, %d of %d control bytes", wn, len(b), oobn, len(oob))
	}
	return nil
}

// close releases the guest's memory and eventfds.
func (g *Guest) close() {
	for _, f := range g.bells {
		f.Close()
	}
	for _, f := range g.vectors {
		f.Close()
	}
	if g.Mem != nil {
		unix.Munmap(g.Mem)
		g.Mem = nil
	}
}
