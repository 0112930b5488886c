package port

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	eventfd "github.com/emunic/emunic/internal/efd"

	"github.com/emunic/emunic/rings"
)

// A shared-memory link: a point-to-point Ethernet link between two
// processes in a memfd both map, one ring of frame slots each way (the
// rings package's mechanism: free-running indices, phase tags, NEED_WAKEUP
// kick suppression), with an eventfd per side as the only doorbell. While
// frames flow neither side makes a system call; a side that goes idle
// parks and is kicked through its eventfd. It is how two device processes
// are cabled to each other without a hop through anyone else (a socket
// costs two system calls and a wake-up per frame).
//
// Ring i carries frames from side i to side 1-i. A slot is a ring entry:
// the control word, a u32 frame length, then the frame.

// ShmLinkCount is the slots per direction.
const ShmLinkCount = 512

// shmBatch is how many frames the writer commits before it publishes
// them by itself; WriteFrame publishes every frame unless its wake-ups are
// deferred (DeferWakeups), and then FlushWakeups publishes the rest. One
// index store per frame was a sixth of a sending device's time: the line
// it lives on goes back and forth to the reader polling it.
const shmBatch = 32

const shmOffLen = 4
const shmHdr = 8

// ShmLinkGeometry returns the entry size for frames up to maxFrame bytes
// and the memory two rings of ShmLinkCount such entries take, or an error
// when a frame cannot fit a ring entry (at most 4096 bytes: MTU 4074).
func ShmLinkGeometry(maxFrame int) (entry uint32, size int, err error) {
	e := (shmHdr + maxFrame + 15) &^ 15
	if maxFrame < EthHeaderLen || e > 4096 {
		return 0, 0, fmt.Errorf("shared-memory link: frames of %d bytes do not fit a ring entry (at most %d)", maxFrame, 4096-shmHdr)
	}
	l := rings.Layout{Count: ShmLinkCount, EntrySize: uint32(e)}
	return uint32(e), 2 * ((l.Size() + rings.CacheLine - 1) &^ (rings.CacheLine - 1)), nil
}

func shmLayouts(entry uint32) [2]rings.Layout {
	l := rings.Layout{Base: rings.ArenaBase, Count: ShmLinkCount, EntrySize: entry}
	step := (l.Size() + rings.CacheLine - 1) &^ (rings.CacheLine - 1)
	l1 := l
	l1.Base += rings.Addr(step)
	return [2]rings.Layout{l, l1}
}

// NewShmLinkMemory makes the link's memory: a zeroed memfd of size bytes.
func NewShmLinkMemory(size int) (*os.File, error) {
	fd, err := unix.MemfdCreate("emunic-link", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("shared-memory link: memfd: %w", err)
	}
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shared-memory link: %w", err)
	}
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("shared-memory link: seal: %w", err)
	}
	return os.NewFile(uintptr(fd), "emunic-link"), nil
}

// efd is an eventfd doorbell.
type efd struct{ f *os.File }

func (e efd) Kick() { eventfd.Kick(e.f) }

// ShmPort is one side of a shared-memory link.
type ShmPort struct {
	mem    []byte
	tx     *rings.Producer
	rx     *rings.Consumer
	wake   *os.File // this side's eventfd: the peer kicks it
	peer   *os.File // the peer's
	rxBell *rings.Bell
	txBell *rings.Bell
	stats  counters
	closed atomic.Bool
	done   chan struct{}
	max    int

	// deferWake (set once, before the first write) makes WriteFrame
	// publish without kicking; owed says a frame was published since the
	// last FlushWakeups. Both belong to the writer goroutine.
	deferWake bool
	owed      bool
	// owedFrames and owedBytes are the frames written since the last
	// flush, counted in stats there.
	owedFrames, owedBytes uint64
	onKick                atomic.Pointer[func()] // a polling reader's wake-up
	blocked               func()                 // SetBlockedFunc's

	// wait bounds a park for a frame or for space (10 ms; 0 for ever). A
	// kick ends it; the bound only limits what a lost kick would cost.
	// Tests set 0 so that a lost kick hangs instead of costing time.
	wait time.Duration
}

// OpenShmPort opens side (0 or 1) of the link in mem (size bytes, entry as
// ShmLinkGeometry gave): wake is this side's eventfd, peer the other's. The
// port owns the three files from then on.
func OpenShmPort(mem *os.File, size int, entry uint32, side int, wake, peer *os.File) (*ShmPort, error) {
	if side != 0 && side != 1 {
		return nil, fmt.Errorf("shared-memory link: side %d", side)
	}
	_, want, err := ShmLinkGeometry(int(entry) - shmHdr)
	if err != nil || want != size {
		return nil, fmt.Errorf("shared-memory link: %d bytes for %d-byte entries, want %d", size, entry, want)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(mem.Fd()), &st); err != nil || st.Size < int64(size) {
		return nil, fmt.Errorf("shared-memory link: the memory file is smaller than %d bytes", size)
	}
	if seals, err := unix.FcntlInt(mem.Fd(), unix.F_GET_SEALS, 0); err != nil || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, fmt.Errorf("shared-memory link: the memory file is not sealed against shrinking")
	}
	b, err := unix.Mmap(int(mem.Fd()), 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("shared-memory link: mmap: %w", err)
	}
	mem.Close()
	a, err := rings.NewArenaOn(b)
	if err != nil {
		unix.Munmap(b)
		return nil, err
	}
	for _, f := range []*os.File{wake, peer} {
		if err := unix.SetNonblock(int(f.Fd()), true); err != nil {
			unix.Munmap(b)
			return nil, err
		}
	}
	// Re-wrap the eventfds so the runtime poller owns them.
	rewrap := func(f *os.File) (*os.File, error) {
		fd, err := unix.Dup(int(f.Fd()))
		f.Close()
		if err != nil {
			return nil, err
		}
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), "eventfd"), nil
	}
	if wake, err = rewrap(wake); err != nil {
		return nil, err
	}
	if peer, err = rewrap(peer); err != nil {
		return nil, err
	}
	ls := shmLayouts(entry)
	p := &ShmPort{mem: b, wake: wake, peer: peer, rxBell: rings.NewBell(), txBell: rings.NewBell(), done: make(chan struct{}),
		max: int(entry) - shmHdr, wait: 10 * time.Millisecond}
	if p.tx, err = rings.NewProducer(a, ls[side], shmBatch, efd{peer}); err != nil {
		return nil, err
	}
	if p.rx, err = rings.NewConsumer(a, ls[1-side], 32, efd{peer}); err != nil {
		return nil, err
	}
	go p.forward()
	return p, nil
}

// forward turns kicks on this side's eventfd into wake-ups of both
// waiters (a kick means "entries published" or "space released"; a
// spurious wake-up only makes a waiter look again).
func (p *ShmPort) forward() {
	defer close(p.done)
	kick := func(uint64) {
		p.rxBell.Kick()
		p.txBell.Kick()
		if fn := p.onKick.Load(); fn != nil {
			(*fn)()
		}
	}
	eventfd.Forward(p.wake, kick)
	kick(0) // closed: the waiters look and find it so
}

// WriteFrame puts frame in the next slot of the transmit ring (waiting for
// space while the peer is behind: the link's flow control) and publishes
// it. One writer goroutine at a time.
func (p *ShmPort) WriteFrame(frame []byte) error {
	if err := p.stats.checkTx(p.closed.Load(), len(frame), p.max); err != nil {
		return err
	}
	for {
		if e := p.tx.Next(); e != nil {
			le32put(e[shmOffLen:], uint32(len(frame)))
			copy(e[shmHdr:], frame)
			p.tx.Commit()
			if p.deferWake {
				// Counted at the flush: an atomic add here waits for
				// the frame's stores into the far end's lines to drain.
				p.owed = true
				p.owedFrames++
				p.owedBytes += uint64(len(frame))
			} else {
				p.tx.Publish()
				p.stats.txFrames.Add(1)
				p.stats.txBytes.Add(uint64(len(frame)))
			}
			return nil
		}
		if p.closed.Load() {
			p.stats.txDropClosed.Add(1)
			return ErrClosed
		}
		// The reader must see what is published before we wait for it
		// to make room.
		p.FlushWakeups()
		if p.blocked != nil {
			// A polling reader on this goroutine takes what came in,
			// and the far end gets the slots back at once: it may be
			// waiting for them to send to us as we wait to send to it.
			p.blocked()
			p.rx.Release()
			if p.tx.Free() > 0 {
				continue
			}
		}
		p.tx.WaitSpace(p.txBell, p.wait)
	}
}

// DeferWakeups implements BurstWriter: from now on WriteFrame publishes
// frames only every shmBatch of them (waking a parked reader then, so that
// it starts on a long burst early) and leaves the rest, and the wake-up for
// them, to FlushWakeups. A burst of frames then costs the far end one
// wake-up (an eventfd write and a thread wake-up in another process), not
// one for every frame that finds it parked. The frames are counted in the
// port's counters at the flush too. Call it before the first WriteFrame,
// from the writer goroutine.
func (p *ShmPort) DeferWakeups() { p.deferWake = true }

// FlushWakeups implements BurstWriter: it publishes the frames written
// since the last flush and kicks the reader if it is parked. The index
// store and the flag load of PublishNoKick pair with the reader's flag
// store and index re-check before it parks (Park, or a polling reader's
// SetNeedWakeup and Pending), as Publish's do: a reader that parked after
// the store saw the frames; one that parked before it is kicked.
func (p *ShmPort) FlushWakeups() {
	if !p.owed {
		return
	}
	p.owed = false
	p.stats.txFrames.Add(p.owedFrames)
	p.stats.txBytes.Add(p.owedBytes)
	p.owedFrames, p.owedBytes = 0, 0
	if p.tx.PublishNoKick() {
		p.tx.Kicked()
		efd{p.peer}.Kick()
	}
}

// ReadFrame takes the next frame from the receive ring, parking (until the
// peer's kick) when it is empty. One reader goroutine at a time.
func (p *ShmPort) ReadFrame(buf []byte) (int, error) {
	for {
		n, ok, err := p.TryReadFrame(buf)
		if ok || err != nil {
			return n, err
		}
		if p.rx.Available() > 0 {
			// A phase error: the peer published before writing. Look again
			// after a pause; the entry becomes valid or stays counted.
			p.rx.Park(p.rxBell, 0, time.Millisecond)
			continue
		}
		p.rx.Park(p.rxBell, 64, p.wait)
	}
}

// TryReadFrame is ReadFrame without waiting (nic.PollPort): ok is false
// when no frame is ready. A device polls the link from its own loop this
// way, and parks with the link's NEED_WAKEUP announced (SetNeedWakeup), so
// that the frames of a burst cost it no hand-off from a reader goroutine.
func (p *ShmPort) TryReadFrame(buf []byte) (n int, ok bool, err error) {
	if p.closed.Load() {
		return 0, false, ErrClosed
	}
	e, err := p.rx.Peek()
	if err != nil || e == nil {
		return 0, false, nil // a phase error is looked at again later
	}
	n = int(le32(e[shmOffLen:]))
	if n > len(e)-shmHdr {
		p.rx.Pop()
		p.stats.rxDropTooBig.Add(1)
		return 0, true, fmt.Errorf("shared-memory link: a slot says %d bytes, more than it holds", n)
	}
	if n > len(buf) {
		p.rx.Pop()
		p.stats.rxDropTooBig.Add(1)
		return 0, true, ErrFrameTooBig
	}
	copy(buf, e[shmHdr:shmHdr+n])
	p.rx.Pop()
	p.stats.rxFrames.Add(1)
	p.stats.rxBytes.Add(uint64(n))
	return n, true, nil
}

// SetReadableFunc installs fn, called when the peer kicks this side (nil
// removes it); fn must not block.
func (p *ShmPort) SetReadableFunc(fn func()) { storeFunc(&p.onKick, fn) }

// SetBlockedFunc installs fn, which WriteFrame calls on the writer's
// goroutine each time it finds the transmit ring full, before it waits for
// room (nic.BlockingPort): a device that both writes the link and polls it
// from one goroutine reads what came in meanwhile. Set it before the first
// WriteFrame.
func (p *ShmPort) SetBlockedFunc(fn func()) { p.blocked = fn }

// Pending is how many frames are published and not yet read, or 0 when
// the next one is not readable (a peer that published a slot before
// writing it): the reader then parks, and its park's time bound (the
// unit's 5 ms for a polled port) paces the next look instead of a busy
// loop over the broken slot.
func (p *ShmPort) Pending() int {
	n := p.rx.Available()
	if n > 0 {
		if _, err := p.rx.Peek(); err != nil {
			return 0
		}
	}
	return n
}

// SetNeedWakeup announces (on) that the polling reader is about to park,
// after giving back the slots it read, or withdraws it. After announcing,
// the reader must look at Pending again before it sleeps: a frame published
// before the writer saw the flag came with no kick.
func (p *ShmPort) SetNeedWakeup(on bool) {
	if on {
		p.rx.Release()
	}
	p.rx.SetNeedWakeup(on)
}

// Close stops the port (a blocked reader or writer returns ErrClosed) and
// unmaps the link's memory once both have gone. Twice is harmless.
func (p *ShmPort) Close() error {
	if !p.closed.CompareAndSwap(false, true) {
		return nil
	}
	p.wake.Close()
	<-p.done
	p.peer.Close()
	// The memory stays mapped: the reader or writer may still be inside
	// WriteFrame or ReadFrame on another goroutine; it goes with the process.
	return nil
}

// Stats returns a snapshot of the port's counters.
func (p *ShmPort) Stats() Stats { return p.stats.snapshot() }

func le32(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

func le32put(b []byte, v uint32) {
	b[0], b[1], b[2], b[3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
}
