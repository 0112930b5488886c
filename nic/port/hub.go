package port

import (
	"errors"
	"sync"
	"sync/atomic"
)

// A Hub shares one port (a TAP, say: the kernel's end of a VLAN trunk)
// among several emulated NICs, as a repeater does a segment: every frame
// the shared port receives is copied to every member, and every frame a
// member sends goes out of the shared port and to every other member. The
// hub filters nothing; each NIC takes what is its own by destination MAC
// and, on a VLAN trunk, by VLAN ID (nic.Config.VLAN), so hosts on different
// VLANs behind one TAP stay apart the way they do behind one trunk port of
// a switch.
//
// Each member has a bounded receive FIFO of preallocated buffers: a frame
// that finds a member's FIFO full is dropped for that member alone and
// counted in its RxDropQueueFull, so a slow host never holds up the others.
type Hub struct {
	up       Port
	maxFrame int
	wmu      sync.Mutex // serialises writes to up (one writer at a time)
	members  []*HubPort
	open     atomic.Int32 // members not yet closed
	done     chan struct{}
	closeUp  sync.Once
}

// HubPort is one member of a Hub.
type HubPort struct {
	hub       *Hub
	rx        chan []byte // frames for this member, oldest first
	free      chan []byte // empty buffers of maxFrame bytes
	stats     counters
	closed    atomic.Bool
	closing   chan struct{}
	closeOnce sync.Once
}

// NewHub shares up among n members, each with a receive FIFO of depth
// frames of up to maxFrame bytes. Closing the last member closes up.
func NewHub(up Port, n, maxFrame, depth int) (*Hub, []*HubPort, error) {
	if n < 1 || maxFrame < EthHeaderLen || depth < 1 {
		return nil, nil, errors.New("port: a hub needs at least one member, a frame size and a FIFO depth")
	}
	h := &Hub{up: up, maxFrame: maxFrame, done: make(chan struct{})}
	for range n {
		m := &HubPort{hub: h, rx: make(chan []byte, depth), free: make(chan []byte, depth), closing: make(chan struct{})}
		for range depth {
			m.free <- make([]byte, 0, maxFrame)
		}
		h.members = append(h.members, m)
	}
	h.open.Store(int32(n))
	go h.read()
	return h, h.members, nil
}

// read copies every frame the shared port receives to every member.
func (h *Hub) read() {
	defer close(h.done)
	buf := make([]byte, h.maxFrame)
	for {
		n, err := h.up.ReadFrame(buf)
		if errors.Is(err, ErrFrameTooBig) {
			continue // counted by up
		}
		if err != nil {
			return // closed: every member's ReadFrame now returns ErrClosed
		}
		h.deliver(buf[:n], nil)
	}
}

// deliver puts a copy of f in the FIFO of every open member but from.
func (h *Hub) deliver(f []byte, from *HubPort) {
	for _, m := range h.members {
		if m == from || m.closed.Load() {
			continue
		}
		select {
		case b := <-m.free:
			m.rx <- append(b[:0], f...) // never blocks: rx holds as many as there are buffers
		default:
			m.stats.rxDropQueueFull.Add(1)
		}
	}
}

// Members returns the hub's members.
func (h *Hub) Members() []*HubPort { return h.members }

// WriteFrame sends frame out of the shared port and to the other members.
func (m *HubPort) WriteFrame(frame []byte) error {
	h := m.hub
	if err := m.stats.checkTx(m.closed.Load(), len(frame), h.maxFrame); err != nil {
		return err
	}
	h.wmu.Lock()
	err := h.up.WriteFrame(frame)
	h.deliver(frame, m)
	h.wmu.Unlock()
	if err != nil {
		m.stats.txErrors.Add(1)
		return err
	}
	m.stats.txFrames.Add(1)
	m.stats.txBytes.Add(uint64(len(frame)))
	return nil
}

// ReadFrame returns the member's next frame.
func (m *HubPort) ReadFrame(buf []byte) (int, error) {
	var b []byte
	select {
	case b = <-m.rx:
	case <-m.closing:
		return 0, ErrClosed
	case <-m.hub.done:
		select { // frames received before the shared port closed still count
		case b = <-m.rx:
		default:
			return 0, ErrClosed
		}
	}
	defer func() { m.free <- b }()
	if len(b) > len(buf) {
		m.stats.rxDropTooBig.Add(1)
		return 0, ErrFrameTooBig
	}
	n := copy(buf, b)
	m.stats.rxFrames.Add(1)
	m.stats.rxBytes.Add(uint64(n))
	return n, nil
}

// Close closes the member; the last one closes the shared port.
func (m *HubPort) Close() error {
	var err error
	m.closeOnce.Do(func() {
		m.closed.Store(true)
		close(m.closing)
		if m.hub.open.Add(-1) == 0 {
			err = m.hub.up.Close()
			<-m.hub.done
		}
	})
	return err
}

// Pending is the number of frames waiting in the member's receive FIFO.
func (m *HubPort) Pending() int { return len(m.rx) }

// Stats returns the member's counters.
func (m *HubPort) Stats() Stats { return m.stats.snapshot() }
