package port

import (
	"encoding/binary"
	"errors"
	"os"
	"runtime"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// shmPair opens both sides of one link in this process, as two device
// processes would.
func shmPair(t *testing.T, maxFrame int) (a, b *ShmPort) {
	t.Helper()
	entry, size, err := ShmLinkGeometry(maxFrame)
	if err != nil {
		t.Fatal(err)
	}
	mem, err := NewShmLinkMemory(size)
	if err != nil {
		t.Fatal(err)
	}
	dupf := func(f *os.File) *os.File {
		fd, err := unix.Dup(int(f.Fd()))
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fd), f.Name())
	}
	ev := func() *os.File {
		fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
		if err != nil {
			t.Fatal(err)
		}
		return os.NewFile(uintptr(fd), "eventfd")
	}
	wa, wb := ev(), ev()
	if a, err = OpenShmPort(dupf(mem), size, entry, 0, dupf(wa), dupf(wb)); err != nil {
		t.Fatal(err)
	}
	if b, err = OpenShmPort(mem, size, entry, 1, wb, wa); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestShmLinkBothWays: 100,000 frames each way at once, every one in
// order and intact, with the readers parking and being kicked.
func TestShmLinkBothWays(t *testing.T) {
	a, b := shmPair(t, 1514)
	const n = 100000
	send := func(p *ShmPort, tag byte) error {
		f := make([]byte, 1514)
		for i := range n {
			size := 60 + i%1455
			binary.BigEndian.PutUint32(f[14:], uint32(i))
			f[0] = tag
			if err := p.WriteFrame(f[:size]); err != nil {
				return err
			}
		}
		return nil
	}
	errs := make(chan error, 4)
	go func() { errs <- send(a, 1) }()
	go func() { errs <- send(b, 2) }()
	go func() { errs <- recvNumbered(b, 1, n) }()
	go func() { errs <- recvNumbered(a, 2, n) }()
	for range 4 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if sa, sb := a.Stats(), b.Stats(); sa.TxFrames != n || sb.RxFrames != n || sb.TxFrames != n || sa.RxFrames != n {
		t.Fatalf("counters %v / %v", sa, sb)
	}
}

// recvNumbered reads n frames as the tests' senders write them (frame i
// is 60+i%1455 bytes, tagged tag, numbered i) and checks each.
func recvNumbered(p *ShmPort, tag byte, n int) error {
	buf := make([]byte, 2048)
	for i := range n {
		m, err := p.ReadFrame(buf)
		if err != nil {
			return err
		}
		if m != 60+i%1455 || buf[0] != tag || binary.BigEndian.Uint32(buf[14:]) != uint32(i) {
			return errors.New("frame out of order or damaged")
		}
	}
	return nil
}

// TestShmLinkCloseWakesReader: a reader parked on an empty ring returns
// ErrClosed when its port closes; oversize frames are refused.
func TestShmLinkCloseWakesReader(t *testing.T) {
	a, b := shmPair(t, 1514)
	if err := a.WriteFrame(make([]byte, 1600)); !errors.Is(err, ErrFrameTooBig) {
		t.Fatalf("oversize frame: %v", err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := b.ReadFrame(make([]byte, 2048))
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it park
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("read after close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a parked reader was not woken by Close")
	}
	if _, _, err := ShmLinkGeometry(5000); err == nil {
		t.Fatal("a 5000-byte frame was given a ring entry")
	}
}

// TestShmLinkBurstWakeups: both sides defer their wake-ups to the end of
// each burst (DeferWakeups, FlushWakeups) and park without a time bound,
// so a wake-up lost between a burst's publish and the reader's park would
// hang the test instead of costing 10 ms. Bursts are of 1 to 64 frames, in
// both directions at once, and the writers also fill the ring and wait for
// space. Every frame arrives in order, and the far end is kicked at most
// once per burst (plus once per wait for space).
func TestShmLinkBurstWakeups(t *testing.T) {
	a, b := shmPair(t, 1514)
	for _, p := range []*ShmPort{a, b} {
		p.wait = 0
		p.DeferWakeups()
	}
	n := 200000
	if testing.Short() {
		n = 50000
	}
	bursts := make([]int, 2)
	send := func(p *ShmPort, tag byte, bursts *int) error {
		f := make([]byte, 1514)
		rng := uint32(tag) * 2654435761
		for i := 0; i < n; {
			rng = rng*1664525 + 1013904223
			k := min(1+int(rng>>26), n-i) // 1 to 64
			for ; k > 0; k-- {
				size := 60 + i%1455
				binary.BigEndian.PutUint32(f[14:], uint32(i))
				f[0] = tag
				if err := p.WriteFrame(f[:size]); err != nil {
					return err
				}
				i++
			}
			p.FlushWakeups()
			*bursts++
			if rng&0x300 == 0 {
				runtime.Gosched() // let the reader catch up and park
			}
		}
		return nil
	}
	errs := make(chan error, 4)
	go func() { errs <- send(a, 1, &bursts[0]) }()
	go func() { errs <- send(b, 2, &bursts[1]) }()
	go func() { errs <- recvNumbered(b, 1, n) }()
	go func() { errs <- recvNumbered(a, 2, n) }()
	deadline := time.After(60 * time.Second)
	for range 4 {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no progress for 60 s: a wake-up was lost")
		}
	}
	for i, p := range []*ShmPort{a, b} {
		st := p.tx.Stats()
		if st.Kicks > uint64(bursts[i])+st.Full {
			t.Errorf("side %d: %d kicks for %d bursts and %d full rings", i, st.Kicks, bursts[i], st.Full)
		}
		t.Logf("side %d: %d frames in %d bursts, %d kicks, %d parks of the reader, ring full %d times", i, n, bursts[i], st.Kicks, p.rx.Stats().Parks, st.Full)
	}
}
