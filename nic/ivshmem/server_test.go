package ivshmem

import (
	"errors"
	"net"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// fakeDevice records what the server hands it.
type fakeDevice struct {
	mu        sync.Mutex
	attached  chan *Guest
	rung      chan [2]int // vector, count
	detached  chan uint16
	attachErr error
}

func newFake() *fakeDevice {
	return &fakeDevice{attached: make(chan *Guest, 4), rung: make(chan [2]int, 64), detached: make(chan uint16, 4)}
}

func (d *fakeDevice) Attach(g *Guest) error {
	d.mu.Lock()
	err := d.attachErr
	d.mu.Unlock()
	if err != nil {
		return err
	}
	d.attached <- g
	return nil
}

func (d *fakeDevice) Doorbell(g *Guest, v int, n uint64) { d.rung <- [2]int{v, int(n)} }
func (d *fakeDevice) Detach(g *Guest)                    { d.detached <- g.ID }

const testVectors = 4

func serve(t *testing.T, d *fakeDevice) (*Server, string) {
	t.Helper()
	return serveHandler(t, testVectors, d)
}

// serveHandler serves h with vectors vectors on a socket of the test's
// until the test ends.
func serveHandler(t *testing.T, vectors int, h Handler) (*Server, string) {
	t.Helper()
	s, err := NewServer(Config{Vectors: vectors, MemSize: 1 << 20, Logf: t.Logf}, h)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "ivshmem.sock")
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- s.Serve(l) }()
	t.Cleanup(func() {
		l.Close()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	})
	return s, path
}

func dial(t *testing.T, path string) *Client {
	t.Helper()
	c, err := Dial(path, testVectors, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func recvGuest(t *testing.T, d *fakeDevice) *Guest {
	t.Helper()
	select {
	case g := <-d.attached:
		return g
	case <-time.After(5 * time.Second):
		t.Fatal("no guest attached in 5 s")
		return nil
	}
}

func waitDetach(t *testing.T, d *fakeDevice, id uint16) {
	t.Helper()
	select {
	case got := <-d.detached:
		if got != id {
			t.Fatalf("guest %d detached, want %d", got, id)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("guest %d not detached in 5 s", id)
	}
}

// TestAttachRingRaise: a guest attaches, shares BAR2 with the device,
// rings the device's vectors and takes the interrupts the device raises;
// when it goes, the device is told after its last doorbell.
func TestAttachRingRaise(t *testing.T) {
	d := newFake()
	s, path := serve(t, d)
	c := dial(t, path)
	g := recvGuest(t, d)
	if c.ID != 1 || g.ID != 1 {
		t.Fatalf("peer IDs: client %d, device's guest %d; want 1 (the device is %d)", c.ID, g.ID, DevicePeerID)
	}
	if len(c.Mem) != 1<<20 || len(g.Mem) != 1<<20 || g.Vectors() != testVectors {
		t.Fatalf("BAR2 %d bytes at the client, %d at the device, %d vectors", len(c.Mem), len(g.Mem), g.Vectors())
	}
	// One memory: each side sees the other's writes.
	c.Mem[0x1234] = 0xA5
	g.Mem[0xFFFFF] = 0x5A
	if g.Mem[0x1234] != 0xA5 || c.Mem[0xFFFFF] != 0x5A {
		t.Fatal("BAR2 is not shared")
	}
	// Doorbells: the guest rings the device (peer 0), vector by vector.
	for v := 0; v < testVectors; v++ {
		if !c.Ring(DevicePeerID, v) {
			t.Fatalf("vector %d of the device is not connected", v)
		}
		select {
		case r := <-d.rung:
			if r[0] != v || r[1] != 1 {
				t.Fatalf("doorbell %v, want vector %d once", r, v)
			}
		case <-time.After(5 * time.Second):
			t.Fatalf("doorbell %d not delivered", v)
		}
	}
	if c.Ring(DevicePeerID, testVectors) || c.Ring(7, 0) {
		t.Fatal("a vector past the count, or a peer that does not exist, was connected")
	}
	// Interrupts: the device raises the guest's vectors.
	for v := 0; v < testVectors; v++ {
		if !g.Raise(v) || !g.Raise(v) {
			t.Fatalf("Raise(%d) failed", v)
		}
		n, err := c.Wait(v, 5000*time.Millisecond)
		if err != nil || n != 2 {
			t.Fatalf("vector %d: %d interrupts (%v), want 2", v, n, err)
		}
		if g.Raised(v) != 2 || g.Rung(v) != 1 {
			t.Fatalf("vector %d: raised %d, rung %d", v, g.Raised(v), g.Rung(v))
		}
	}
	if g.Raise(-1) || g.Raise(testVectors) {
		t.Fatal("Raise of a vector that does not exist succeeded")
	}
	c.Close()
	waitDetach(t, d, 1)
	st := s.Stats()
	if st.Guests != 1 || st.Gone != 1 || st.Doorbells != testVectors || st.Refused != 0 {
		t.Fatalf("stats %+v", st)
	}
}

// TestOneGuestAtATime: a second guest is refused while one is attached;
// after the first goes the next one gets a new ID and fresh, zeroed
// memory.
func TestOneGuestAtATime(t *testing.T) {
	d := newFake()
	s, path := serve(t, d)
	c1 := dial(t, path)
	g1 := recvGuest(t, d)
	g1.Mem[64] = 1
	if _, err := Dial(path, testVectors, 2*time.Second); err == nil {
		t.Fatal("a second guest attached beside the first")
	}
	if st := s.Stats(); st.Refused != 1 {
		t.Fatalf("refused %d, want 1", st.Refused)
	}
	c1.Close()
	waitDetach(t, d, 1)
	c2 := dial(t, path)
	defer c2.Close()
	g2 := recvGuest(t, d)
	if c2.ID != 2 || g2.ID != 2 {
		t.Fatalf("the next guest is peer %d/%d, want 2", c2.ID, g2.ID)
	}
	if c2.Mem[64] != 0 {
		t.Fatal("the next guest sees the last one's memory")
	}
}

// TestGarbageAndAttachFailure: bytes a guest sends on the one-way socket
// are counted and change nothing; a device that refuses an attach ends
// that session only.
func TestGarbageAndAttachFailure(t *testing.T) {
	d := newFake()
	s, path := serve(t, d)
	c := dial(t, path)
	recvGuest(t, d)
	if _, err := c.c.Write([]byte("not a message")); err != nil {
		t.Fatal(err)
	}
	c.Ring(DevicePeerID, 1)
	select {
	case <-d.rung:
	case <-time.After(5 * time.Second):
		t.Fatal("the session stopped serving after garbage")
	}
	deadline := time.Now().Add(5 * time.Second)
	for s.Stats().Garbage != 13 && time.Now().Before(deadline) {
		c.Ring(DevicePeerID, 1) // the read and the ring race; wait on the count
		<-d.rung
	}
	if g := s.Stats().Garbage; g != 13 {
		t.Fatalf("garbage %d bytes, want 13", g)
	}
	c.Close()
	waitDetach(t, d, 1)

	d.mu.Lock()
	d.attachErr = errors.New("not now")
	d.mu.Unlock()
	if c, err := Dial(path, testVectors, 2*time.Second); err == nil {
		// The set-up reached the client before the device refused: the
		// server closes the connection, which the client sees as EOF.
		var b [1]byte
		c.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := c.c.Read(b[:]); err == nil {
			t.Fatal("the connection stayed open after the device refused the guest")
		}
		c.Close()
	}
	d.mu.Lock()
	d.attachErr = nil
	d.mu.Unlock()
	c3 := dial(t, path)
	defer c3.Close()
	if g := recvGuest(t, d); g.ID != 3 {
		t.Fatalf("guest after a refused one is %d, want 3", g.ID)
	}
	if st := s.Stats(); st.Refused != 1 || st.Guests != 2 {
		t.Fatalf("stats %+v", st)
	}
}

// TestWireFormat reads the set-up byte by byte, as QEMU does: version 0,
// the ID, -1 with the memory, the device's vectors as peer 0's, then the
// guest's own, each with exactly one descriptor.
func TestWireFormat(t *testing.T) {
	d := newFake()
	_, path := serve(t, d)
	conn, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	type message struct {
		n     int64
		hasFD bool
	}
	want := []message{{0, false}, {1, false}, {-1, true}}
	for i := 0; i < testVectors; i++ {
		want = append(want, message{DevicePeerID, true})
	}
	for i := 0; i < testVectors; i++ {
		want = append(want, message{1, true})
	}
	for i, w := range want {
		var b [8]byte
		oob := make([]byte, unix.CmsgSpace(8))
		n, oobn, _, _, err := conn.ReadMsgUnix(b[:], oob)
		if err != nil || n != 8 {
			t.Fatalf("message %d: %d bytes, %v", i, n, err)
		}
		got, _ := decode(b[:])
		nfd := 0
		if oobn > 0 {
			msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
			for _, m := range msgs {
				fds, _ := unix.ParseUnixRights(&m)
				nfd += len(fds)
				for _, fd := range fds {
					unix.Close(fd)
				}
			}
		}
		if got != w.n || (nfd == 1) != w.hasFD || nfd > 1 {
			t.Fatalf("message %d: %d with %d descriptors, want %d (descriptor: %v)", i, got, nfd, w.n, w.hasFD)
		}
	}
	recvGuest(t, d)
}

func TestConfigRefused(t *testing.T) {
	for _, cfg := range []Config{{Vectors: 0, MemSize: 1 << 20}, {Vectors: MaxVectors + 1, MemSize: 1 << 20},
		{Vectors: 2, MemSize: 3 << 20}, {Vectors: 2, MemSize: MinMemSize / 2}} {
		if _, err := NewServer(cfg, newFake()); err == nil {
			t.Errorf("%+v accepted", cfg)
		}
	}
	if DoorbellValue(3) != 3 {
		t.Errorf("DoorbellValue(3) = %#x", DoorbellValue(3))
	}
}
