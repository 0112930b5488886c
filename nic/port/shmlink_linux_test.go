package port

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
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

// waitAll takes k results from errs, failing at the first error, or after
// 60 s without all of them: the sides park without a time bound, so a
// wake-up lost hangs them.
func waitAll(t *testing.T, errs <-chan error, k int) {
	t.Helper()
	deadline := time.After(60 * time.Second)
	for range k {
		select {
		case err := <-errs:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("no progress for 60 s: a wake-up was lost")
		}
	}
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
	testutil.WaitBlocked(t, "github.com/emunic/emunic/nic/port.(*ShmPort).ReadFrame", 1)
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
// once per burst, per shmBatch frames (a long burst's early publishes) and
// per wait for space.
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
	waitAll(t, errs, 4)
	for i, p := range []*ShmPort{a, b} {
		st := p.tx.Stats()
		if max := uint64(bursts[i]+n/shmBatch) + st.Full; st.Kicks > max {
			t.Errorf("side %d: %d kicks for %d bursts of %d frames and %d full rings: want at most %d", i, st.Kicks, bursts[i], n, st.Full, max)
		}
		t.Logf("side %d: %d frames in %d bursts, %d kicks, %d parks of the reader, ring full %d times", i, n, bursts[i], st.Kicks, p.rx.Stats().Parks, st.Full)
	}
}

// TestShmLinkPolled: the reader polls the link as a device's unit does
// (TryReadFrame, then SetNeedWakeup, a last look at Pending, and a sleep
// until the readable function kicks it, with no time bound), while the
// writer defers its wake-ups to the end of each burst. A wake-up lost
// between the writer's publish and the reader's announcement would hang
// the test. Both directions at once; each side's writer is also its
// reader, on one goroutine, taking what came in while it waits for room
// (SetBlockedFunc), so two sides that fill each other's rings still make
// progress.
func TestShmLinkPolled(t *testing.T) {
	a, b := shmPair(t, 1514)
	n := 200000
	if testing.Short() {
		n = 50000
	}
	side := func(p *ShmPort, tag, peerTag byte) error {
		p.wait = 0
		p.DeferWakeups()
		bell := make(chan struct{}, 1)
		var parked atomic.Bool
		p.SetReadableFunc(func() {
			if parked.Load() {
				select {
				case bell <- struct{}{}:
				default:
				}
			}
		})
		buf := make([]byte, 2048)
		got, parks := 0, 0
		var bad error
		take := func() {
			for {
				m, ok, err := p.TryReadFrame(buf)
				if !ok || err != nil {
					if err != nil && bad == nil {
						bad = err
					}
					return
				}
				if m != 60+got%1455 || buf[0] != peerTag || binary.BigEndian.Uint32(buf[14:]) != uint32(got) {
					if bad == nil {
						bad = fmt.Errorf("frame %d out of order or damaged", got)
					}
				}
				got++
			}
		}
		p.SetBlockedFunc(take)
		f := make([]byte, 1514)
		rng := uint32(tag) * 2654435761
		for sent := 0; sent < n || got < n; {
			if sent < n {
				rng = rng*1664525 + 1013904223
				for k := min(1+int(rng>>26), n-sent); k > 0; k-- {
					binary.BigEndian.PutUint32(f[14:], uint32(sent))
					f[0] = tag
					if err := p.WriteFrame(f[:60+sent%1455]); err != nil {
						return err
					}
					sent++
				}
				p.FlushWakeups()
			}
			take()
			if bad != nil {
				return bad
			}
			if sent < n && rng&0x300 == 0 {
				runtime.Gosched() // let the other side catch up and park
			}
			// Side 2 also pretends to be idle now and then while it has
			// frames to send (side 1 sends until it has sent all, so
			// side 2's frames still come); side 1 parks only when idle.
			if got < n && (sent == n || tag == 2 && rng&0x700 == 0) {
				// Announce the park, look once more, then sleep until
				// kicked.
				parks++
				parked.Store(true)
				p.SetNeedWakeup(true)
				if p.Pending() == 0 {
					<-bell
				}
				p.SetNeedWakeup(false)
				parked.Store(false)
			}
		}
		t.Logf("side %d: %d parks, %d kicks sent", tag, parks, p.tx.Stats().Kicks)
		return nil
	}
	errs := make(chan error, 2)
	go func() { errs <- side(a, 1, 2) }()
	go func() { errs <- side(b, 2, 1) }()
	waitAll(t, errs, 2)
	if sa, sb := a.Stats(), b.Stats(); sa.TxFrames != uint64(n) || sb.RxFrames != uint64(n) || sb.TxFrames != uint64(n) || sa.RxFrames != uint64(n) {
		t.Fatalf("counters %v / %v", sa, sb)
	}
}

// TestShmLinkPolledBadSlot: a peer that publishes a slot it never wrote
// (the producer index moved, the phase tag not) gives a polling reader
// nothing to read and nothing pending, so it parks (its park's time bound
// paces the next look) instead of looping over the slot.
func TestShmLinkPolledBadSlot(t *testing.T) {
	a, b := shmPair(t, 1514)
	// Side 0's ring is the first in the link's memory: publish one entry
	// by hand, as a broken peer would.
	binary.LittleEndian.PutUint32(a.mem[rings.OffProducerIndex:], 1)
	if n := b.Pending(); n != 0 {
		t.Fatalf("Pending %d with only a bad slot published", n)
	}
	if _, ok, err := b.TryReadFrame(make([]byte, 2048)); ok || err != nil {
		t.Fatalf("TryReadFrame of a bad slot: ok %v, %v", ok, err)
	}
	if b.rx.Stats().PhaseErrs == 0 {
		t.Fatal("the bad slot was not counted")
	}
}
