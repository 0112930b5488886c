package efd

import (
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func eventfd(t *testing.T) *os.File {
	t.Helper()
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fd), "eventfd")
}

// TestPingPong: two eventfds, each forwarded to a channel, kicked back and
// forth 20,000 times. Each side waits for the other's kick before it
// kicks, so a kick whose edge Forward missed (it waits for the next edge
// instead of reading again) stops the game for good.
func TestPingPong(t *testing.T) {
	a, b := eventfd(t), eventfd(t)
	ca, cb := make(chan struct{}, 1), make(chan struct{}, 1)
	fwd := func(f *os.File, c chan struct{}, done *sync.WaitGroup) {
		defer done.Done()
		Forward(f, func(n uint64) {
			for ; n > 0; n-- {
				c <- struct{}{}
			}
		})
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go fwd(a, ca, &wg)
	go fwd(b, cb, &wg)
	const rounds = 20000
	go func() {
		for range rounds {
			<-ca
			Kick(b)
		}
	}()
	timeout := time.After(60 * time.Second)
	for i := range rounds {
		Kick(a)
		select {
		case <-cb:
		case <-timeout:
			t.Fatalf("round %d: a kick was lost", i)
		}
	}
	a.Close()
	b.Close()
	wg.Wait() // Forward returns once its file is closed
}

// TestCount: kicks from several goroutines at once all arrive, counted.
func TestCount(t *testing.T) {
	f := eventfd(t)
	const writers, each = 4, 5000
	all := make(chan struct{})
	var sum uint64
	go Forward(f, func(n uint64) {
		if sum += n; sum == writers*each {
			close(all)
		}
	})
	for range writers {
		go func() {
			for range each {
				Kick(f)
			}
		}()
	}
	select {
	case <-all:
	case <-time.After(60 * time.Second):
		t.Fatal("not every kick was forwarded")
	}
	f.Close()
}
