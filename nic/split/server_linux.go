package split

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/regs"
	"github.com/emunic/emunic/rings"
)

// DefaultIdleYieldMicros is how long, in µs, a device served here goes on
// polling when idle, with sched_yield between passes, before it parks
// (nic.Config's IdleYield, when the host's configuration leaves it 0;
// negative: none).
// The device process shares the machine's CPUs with its host: a park and
// the doorbell that ends it cost a system call and a thread wake-up on
// each side, which the host's next post within these 50 µs no longer
// pays, while a yield gives the CPU to whichever thread wants it.
const DefaultIdleYieldMicros = 50

// ServerConfig configures the device side.
type ServerConfig struct {
	// OpenPort opens the device's port for a session whose host does not
	// supply one with CONFIG (a TAP the device process owns, say). Nil: the
	// host must supply the port.
	OpenPort func() (port.Port, error)
	// Logf, when set, gets one line per session event.
	Logf func(format string, args ...any)
}

// Stats counts what the server saw, over all sessions.
type Stats struct {
	Sessions    uint64 // hosts that connected
	Started     uint64 // enables that started the device (CtrlEnable)
	BadMessages uint64 // malformed messages (refused with BAD_MESSAGE)
	OutOfOrder  uint64 // requests not valid in the session's state
	Refused     uint64 // well-formed requests refused (memory, config, rings, start, features)
	HostsGone   uint64 // sessions ended by the host closing or dying
	BadRegister uint64 // register accesses the register block refused (its own counters say why)
	// BadKickWords counts garbage found in kick words (FeatureKickWords):
	// a count over MaxPendingKicks taken from the doorbell's word, or
	// found in a vector's word by a kick.
	BadKickWords uint64
}

// Server is a NIC in its own process, serving one host at a time.
type Server struct {
	cfg ServerConfig

	sessions, started, bad, order, refused, gone atomic.Uint64
	badWords, badReg                             atomic.Uint64

	// regs is the device's register block: one for the device process's
	// life, so its access counters count across hosts; its backend is the
	// session being served (cur).
	regs  *regs.Model
	serve sync.Mutex // one session at a time
	cur   *session   // the session being served, for the register block's backend

	mu  sync.Mutex
	dev *nic.Device // the running session's device, for the process's own report
}

// NewServer makes a server.
func NewServer(cfg ServerConfig) *Server {
	s := &Server{cfg: cfg}
	s.regs = regs.New(serverBackend{s})
	return s
}

// Stats returns the server's counters.
func (s *Server) Stats() Stats {
	return Stats{Sessions: s.sessions.Load(), Started: s.started.Load(), BadMessages: s.bad.Load(),
		OutOfOrder: s.order.Load(), Refused: s.refused.Load(), HostsGone: s.gone.Load(), BadKickWords: s.badWords.Load(),
		BadRegister: s.badReg.Load()}
}

// Registers is the device's register block, whose access counters
// (rings.RegCounterID) say what hosts did wrong.
func (s *Server) Registers() *regs.Model { return s.regs }

// Device is the running session's device, or nil.
func (s *Server) Device() *nic.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.dev
}

func (s *Server) logf(format string, args ...any) {
	if s.cfg.Logf != nil {
		s.cfg.Logf(format, args...)
	}
}

// Serve accepts hosts on l one after another until l is closed.
func (s *Server) Serve(l *net.UnixListener) error {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		if err := s.ServeConn(c); err != nil {
			s.logf("session ended: %v", err)
		}
	}
}

// session state: which request comes next.
type state int

const (
	stNew     state = iota // HELLO
	stHello                // MEMORY
	stMemory               // CONFIG (or LINK first)
	stConfig               // VECTORS; registers
	stVectors              // registers; RESET
)

type session struct {
	s        *Server
	c        *Conn
	st       state
	features uint64
	mem      []byte
	arena    *rings.Arena
	port     port.Port // the port CONFIG brought, until an enable takes it
	portFD   *os.File  // the host's port descriptor, for a port after the first (an enable after a disable)
	cfg      nic.Config
	// configured: CONFIG succeeded; linked: its port was LINK's, which
	// only one device can have.
	configured, linked bool
	mode               uint32
	poll               time.Duration
	efds               []*EventFD // doorbell, notify, txspace, command
	words              []byte     // the kick words (FeatureKickWords), or nil
	// badWords0 is the server's BadKickWords when the session started
	// with kick words, to report the session's own at its end.
	badWords0 uint64
	dev       *nic.Device // the running device, between an enable and a disable
	link      port.Port   // LINK's port, for CONFIG
	stopPoll  chan struct{}
	wg        sync.WaitGroup // the doorbell's forwarder
	pollWG    sync.WaitGroup // the polling doorbell, while the device runs
}

// ServeConn serves one host on c until it closes (nil) or the socket
// fails. The device is stopped and every resource of the session released
// before it returns, so the next host starts from nothing.
func (s *Server) ServeConn(uc *net.UnixConn) error {
	s.serve.Lock()
	defer s.serve.Unlock()
	s.sessions.Add(1)
	ss := &session{s: s, c: NewConn(uc)}
	s.cur = ss
	defer func() { s.cur = nil }()
	defer ss.teardown(true)
	defer uc.Close()
	for {
		h, body, files, err := ss.c.Recv()
		if err == io.EOF {
			s.gone.Add(1)
			s.logf("host gone")
			return nil
		}
		if err != nil {
			closeAll(files)
			var ne net.Error
			if errors.As(err, &ne) || errors.Is(err, unix.ECONNRESET) {
				s.gone.Add(1)
				return err
			}
			s.bad.Add(1)
			if err := ss.reply(h.Type, h.Seq, Reply{Status: StatusBadMessage, Msg: err.Error()}); err != nil {
				return err
			}
			continue
		}
		r := ss.handle(h, body, files)
		if h.Type == MsgRegPost && r.Status == StatusOK {
			continue // posted: no reply unless refused
		}
		if err := ss.reply(h.Type, h.Seq, r); err != nil {
			return err
		}
	}
}

func (ss *session) reply(t MsgType, seq uint32, r Reply) error {
	return ss.c.Send(t|MsgReplyBit, seq, r.Encode())
}

func (ss *session) refuse(st ReplyStatus, format string, args ...any) Reply {
	if st == StatusOutOfOrder {
		ss.s.order.Add(1)
	} else if st == StatusBadMessage {
		ss.s.bad.Add(1)
	} else {
		ss.s.refused.Add(1)
	}
	return Reply{Status: st, Msg: fmt.Sprintf(format, args...)}
}

// want lists the fds each request carries.
func wantFDs(t MsgType, features uint64, body []byte) (min, max int) {
	switch t {
	case MsgMemory:
		return 1, 1
	case MsgConfig:
		if features&FeaturePortFD != 0 {
			return 0, 1
		}
	case MsgVectors:
		if mode, _, _, err := DecodeVectors(body); err == nil && mode == VectorEventFD {
			return 4, 4
		}
	case MsgLink:
		return 3, 3
	}
	return 0, 0
}

func (ss *session) handle(h Header, body []byte, files []*os.File) Reply {
	lo, hi := wantFDs(h.Type, ss.features, body)
	if len(files) < lo || len(files) > hi {
		closeAll(files)
		return ss.refuse(StatusBadMessage, "%v carries %d file descriptors, want %d to %d", h.Type, len(files), lo, hi)
	}
	next := map[MsgType]state{MsgHello: stNew, MsgMemory: stHello, MsgConfig: stMemory, MsgVectors: stConfig}
	switch h.Type {
	case MsgReset:
		closeAll(files)
		if ss.st == stNew {
			return ss.refuse(StatusOutOfOrder, "RESET before HELLO")
		}
		ss.teardown(false)
		ss.st = stHello
		return Reply{}
	case MsgRegRead, MsgRegWrite, MsgRegPost:
		if ss.st < stConfig {
			return ss.refuse(StatusOutOfOrder, "%v in state %d (after %v): registers come after CONFIG", h.Type, ss.st, stateAfter(ss.st))
		}
		return ss.register(h.Type, body)
	}
	if h.Type == MsgLink {
		if ss.st != stMemory {
			closeAll(files)
			return ss.refuse(StatusOutOfOrder, "LINK in state %d (after %v): it goes between MEMORY and CONFIG", ss.st, stateAfter(ss.st))
		}
		return ss.linkPort(body, files)
	}
	want, ok := next[h.Type]
	if !ok {
		closeAll(files)
		return ss.refuse(StatusBadMessage, "unknown message type %v", h.Type)
	}
	if ss.st != want {
		closeAll(files)
		return ss.refuse(StatusOutOfOrder, "%v in state %d (after %v)", h.Type, ss.st, stateAfter(ss.st))
	}
	var r Reply
	switch h.Type {
	case MsgHello:
		r = ss.hello(body)
	case MsgMemory:
		r = ss.memory(body, files[0])
	case MsgConfig:
		var pf *os.File
		if len(files) == 1 {
			pf = files[0]
		}
		r = ss.config(body, pf)
	case MsgVectors:
		r = ss.vectors(body, files)
	}
	if r.Status == StatusOK {
		ss.st++
	}
	return r
}

func stateAfter(st state) string {
	return [...]string{"nothing", "HELLO", "MEMORY", "CONFIG", "VECTORS"}[st]
}

func (ss *session) hello(body []byte) Reply {
	want, err := DecodeU64(body)
	if err != nil {
		return ss.refuse(StatusBadMessage, "HELLO: %v", err)
	}
	ss.features = want & FeaturesAll
	if ss.s.cfg.OpenPort == nil && ss.features&(FeaturePortFD|FeatureShmLink) == 0 {
		return ss.refuse(StatusUnsupported, "this device has no port of its own: the host must supply one (FeaturePortFD or FeatureShmLink)")
	}
	return Reply{Value: ss.features}
}

func (ss *session) memory(body []byte, f *os.File) Reply {
	defer f.Close() // the mapping keeps the memory
	size, err := DecodeU64(body)
	if err != nil {
		return ss.refuse(StatusBadMessage, "MEMORY: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return ss.refuse(StatusBadMemory, "fstat: %v", err)
	}
	if size == 0 || size%rings.CacheLine != 0 || size > 1<<40 || uint64(st.Size) < size {
		return ss.refuse(StatusBadMemory, "size %d (the file has %d bytes): want a positive multiple of %d no larger than the file", size, st.Size, rings.CacheLine)
	}
	// A host that shrank the file under the mapping would make the
	// device's next access to it a SIGBUS: the memory must be sealed
	// against shrinking (as vhost-user asks of its memory regions).
	if seals, err := unix.FcntlInt(f.Fd(), unix.F_GET_SEALS, 0); err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return ss.refuse(StatusBadMemory, "the memory file is not sealed against shrinking (memfd_create with MFD_ALLOW_SEALING, then F_ADD_SEALS F_SEAL_SHRINK)")
	}
	mem, err := unix.Mmap(int(f.Fd()), 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return ss.refuse(StatusBadMemory, "mmap %d bytes: %v", size, err)
	}
	a, err := rings.NewArenaOn(mem)
	if err != nil {
		unix.Munmap(mem)
		return ss.refuse(StatusBadMemory, "%v", err)
	}
	ss.mem, ss.arena = mem, a
	ss.s.regs.AttachMemory(regs.Memory{Base: a.Base(), Size: uint64(a.Size())})
	return Reply{}
}

// linkPort opens this device's side of a shared-memory link as its port.
func (ss *session) linkPort(body []byte, files []*os.File) Reply {
	if ss.features&FeatureShmLink == 0 {
		closeAll(files)
		return ss.refuse(StatusUnsupported, "LINK: the shared-memory link was not negotiated in HELLO")
	}
	side, entry, size, err := DecodeLink(body)
	if err != nil {
		closeAll(files)
		return ss.refuse(StatusBadMessage, "%v", err)
	}
	if ss.link != nil {
		ss.link.Close()
		ss.link = nil
	}
	p, err := port.OpenShmPort(files[0], int(size), entry, side, files[1], files[2])
	if err != nil {
		closeAll(files)
		return ss.refuse(StatusBadConfig, "%v", err)
	}
	ss.link = p
	return Reply{}
}

func (ss *session) vectors(body []byte, files []*os.File) Reply {
	mode, us, words, err := DecodeVectors(body)
	if err != nil {
		closeAll(files)
		return ss.refuse(StatusBadMessage, "%v", err)
	}
	if len(body) == VectorsKickBodySize && ss.features&FeatureKickWords == 0 {
		closeAll(files)
		return ss.refuse(StatusUnsupported, "VECTORS with kick words: FeatureKickWords was not negotiated in HELLO")
	}
	var wm []byte
	if words != 0 {
		if mode != VectorEventFD {
			closeAll(files)
			return ss.refuse(StatusBadMessage, "kick words in polling mode: they belong to eventfds")
		}
		if uint64(words)%KickWordsAlign != 0 || !ss.arena.Contains(words, KickWordsSize) {
			closeAll(files)
			return ss.refuse(StatusBadMemory, "kick words at %#x (%d bytes): want a multiple of %d inside the %d bytes of memory at %#x",
				uint64(words), KickWordsSize, KickWordsAlign, ss.arena.Size(), uint64(ss.arena.Base()))
		}
		m, err := ss.arena.Map(words, KickWordsSize)
		if err != nil {
			closeAll(files)
			return ss.refuse(StatusBadMemory, "kick words: %v", err)
		}
		wm = m
	}
	switch mode {
	case VectorEventFD:
		if ss.features&FeatureEventFD == 0 {
			closeAll(files)
			return ss.refuse(StatusUnsupported, "eventfd vectors were not negotiated in HELLO")
		}
		for _, f := range files {
			e, err := EventFDOf(f)
			if err != nil {
				closeAll(files)
				for _, e := range ss.efds {
					e.Close()
				}
				ss.efds = nil
				return ss.refuse(StatusBadMessage, "vector: %v", err)
			}
			ss.efds = append(ss.efds, e)
		}
	case VectorPoll:
		if ss.features&FeaturePoll == 0 {
			return ss.refuse(StatusUnsupported, "polling was not negotiated in HELLO")
		}
		if us == 0 {
			us = DefaultPollMicros
		}
		if us > MaxPollMicros {
			return ss.refuse(StatusBadMessage, "poll interval %d µs: at most %d", us, MaxPollMicros)
		}
		ss.poll = time.Duration(us) * time.Microsecond
	default:
		return ss.refuse(StatusBadMessage, "vector mode %d", mode)
	}
	ss.mode, ss.words, ss.badWords0 = mode, wm, ss.s.badWords.Load()
	ss.attachVectors()
	return Reply{}
}
