package services

import (
	"bytes"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"testing"
	"time"
)

func listen(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Skipf("no loopback TCP: %v", err)
	}
	return l
}

func TestEchoDiscard(t *testing.T) {
	var mu sync.Mutex
	var logs []string
	logf := func(f string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		logs = append(logs, f)
	}
	echo, discard := NewEcho(logf), NewDiscard(logf)
	le, ld := listen(t), listen(t)
	errs := make(chan error, 2)
	go func() { errs <- echo.Serve(le) }()
	go func() { errs <- discard.Serve(ld) }()

	data := make([]byte, 3<<20)
	rand.NewChaCha8([32]byte{9}).Read(data)

	c, err := net.Dial("tcp4", le.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c.Write(data)
		c.(*net.TCPConn).CloseWrite()
	}()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	got, err := io.ReadAll(c)
	c.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Fatalf("echo returned %d bytes (err %v), want the %d sent", len(got), err, len(data))
	}

	d, err := net.Dial("tcp4", ld.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	d.Write(data)
	d.(*net.TCPConn).CloseWrite()
	d.SetDeadline(time.Now().Add(10 * time.Second))
	if rest, err := io.ReadAll(d); err != nil || len(rest) != 0 {
		t.Fatalf("discard sent %d bytes back (err %v)", len(rest), err)
	}
	d.Close()

	// A connection still open when the server closes is closed with it.
	idle, err := net.Dial("tcp4", le.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer idle.Close()
	for echo.Stats().Active == 0 {
		time.Sleep(time.Millisecond)
	}
	echo.Close()
	discard.Close()
	for range 2 {
		if err := <-errs; !errors.Is(err, ErrServerClosed) {
			t.Errorf("Serve returned %v, want ErrServerClosed", err)
		}
	}
	idle.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := idle.Read(make([]byte, 1)); err == nil {
		t.Error("connection open at Close was not closed")
	}

	es, ds := echo.Stats(), discard.Stats()
	if es.Accepted != 2 || es.Active != 0 || es.BytesIn != uint64(len(data)) || es.BytesOut != uint64(len(data)) || es.Errors != 0 {
		t.Errorf("echo stats %+v", es)
	}
	if ds.Accepted != 1 || ds.BytesIn != uint64(len(data)) || ds.BytesOut != 0 || ds.Errors != 0 {
		t.Errorf("discard stats %+v", ds)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(logs) != 6 { // connected + closed for each of the three connections
		t.Errorf("%d log lines, want 6: %q", len(logs), logs)
	}
	if err := echo.Serve(listen(t)); !errors.Is(err, ErrServerClosed) {
		t.Errorf("Serve after Close: %v", err)
	}
}

func TestSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 1536: "1.5 KiB", 64 << 20: "64.0 MiB", 1 << 30: "1.0 GiB"} {
		if got := Size(n); got != want {
			t.Errorf("Size(%d) = %q, want %q", n, got, want)
		}
	}
}
