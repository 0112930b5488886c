package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
)

// TestCollapsedWriteLarge: a collapsed write of 1 MiB from one 4 KiB page,
// far beyond MaxRecvBufferSize: only the page crosses the wire, so the
// server must take it (its Length is the span, not the message).
func TestCollapsedWriteLarge(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	c := r.dial(t, lwio.ClientConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	f, err := c.Open(ctx, "big", lwio.OpenFlags{Create: true, NoBuffering: true})
	if err != nil {
		t.Fatal(err)
	}
	page := randomBytes(4096, 26)
	cl, err := f.StartWriteCollapsed(ctx, page, 1<<20, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); err != nil || cl.N != 1<<20 {
		t.Fatalf("collapsed write of 1 MiB: %d, %v", cl.N, err)
	}
	if err := c.Err(); err != nil {
		t.Fatalf("connection: %v", err)
	}
	want := bytes.Repeat(page, (1<<20)/4096)
	if got, _ := os.ReadFile(filepath.Join(r.dir, "big")); !bytes.Equal(got, want) {
		t.Fatalf("the server's file (%d bytes) is not the page 256 times", len(got))
	}
	// The connection still works.
	buf := make([]byte, 4096)
	if n, err := f.ReadAt(buf, 1<<20-4096); err != nil || n != 4096 || !bytes.Equal(buf, page) {
		t.Fatalf("read after the collapsed write: %d, %v", n, err)
	}
	if st := r.srv.Stats(); st.ProtocolErrors != 0 {
		t.Errorf("server ProtocolErrors %d", st.ProtocolErrors)
	}
	// A page the server's receive buffer cannot hold is refused before
	// it is sent, and the connection lives on.
	r2 := newRig(t, lwio.ServerConfig{MaxRecvBuffer: 8192})
	c2 := r2.dial(t, lwio.ClientConfig{})
	g, err := c2.Open(ctx, "big", lwio.OpenFlags{Create: true, NoBuffering: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.StartWriteCollapsed(ctx, make([]byte, 16384), 1<<20, 0, nil); !errors.Is(err, lwio.ErrTooLarge) {
		t.Fatalf("a collapsed write of a 16 KiB page over an 8 KiB buffer: %v, want ErrTooLarge", err)
	}
	cl, err = g.StartWriteCollapsed(ctx, page, 1<<20, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); err != nil || cl.N != 1<<20 {
		t.Fatalf("collapsed write of 1 MiB over an 8 KiB buffer: %d, %v", cl.N, err)
	}
	if got, _ := os.ReadFile(filepath.Join(r2.dir, "big")); !bytes.Equal(got, want) {
		t.Fatal("the second server's file is not the page 256 times")
	}
}

// TestCloseReleasesFile: after Close the server's file is closed, in both
// completion modes; Stat leaves nothing open either.
func TestCloseReleasesFile(t *testing.T) {
	for _, polling := range []bool{false, true} {
		r := newRig(t, lwio.ServerConfig{})
		r.put(t, "f", randomBytes(8192, 3))
		c := r.dial(t, lwio.ClientConfig{Polling: polling})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		f, err := c.Open(ctx, "f", lwio.OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		if n := r.srv.Stats().FilesOpen; n != 1 {
			t.Errorf("polling %v: %d files open after Open, want 1", polling, n)
		}
		if _, err := f.ReadAt(make([]byte, 4096), 0); err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the file to close on the server", 10*time.Second, func() bool { return r.srv.Stats().FilesOpen == 0 })
		if _, err := c.Stat(ctx, "f"); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "Stat's file to close on the server", 10*time.Second, func() bool { return r.srv.Stats().FilesOpen == 0 })
		cancel()
	}
}

// TestPollingOneCredit: a polling client holding one credit has no credit
// to spare for INTERRUPT, and no completion comes for a status block: it
// must keep polling and finish its I/O rather than sleep for good.
func TestPollingOneCredit(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{InitialCredits: 1, MaxCredits: 1,
		CreditPolicy: func(int, int) int { return 1 }})
	data := randomBytes(256<<10, 11)
	r.put(t, "f", data)
	// SpinPolls 1: the completion loop goes to sleep at its first empty poll.
	c := r.dial(t, lwio.ClientConfig{Polling: true, Credits: 1, SpinPolls: 1})
	if n := c.Credits(); n != 1 {
		t.Fatalf("client holds %d credits, want 1", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4096)
	for i := range 64 {
		off := int64(i) * 4096
		cl, err := f.StartRead(ctx, got, off, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Wait(ctx); err != nil {
			t.Fatalf("read %d: %v (client stats %+v)", i, err, c.Stats())
		}
		if cl.N != 4096 || !bytes.Equal(got, data[off:off+4096]) {
			t.Fatalf("read %d: %d bytes, wrong data", i, cl.N)
		}
	}
	wr := randomBytes(8192, 12)
	cl, err := f.StartWrite(ctx, wr, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); err != nil || cl.N != len(wr) {
		t.Fatalf("write: %d, %v", cl.N, err)
	}
	// One credit leaves none for INTERRUPT: the client polled instead.
	if st := c.Stats(); st.Interrupts != 0 || st.PollBackoffs == 0 {
		t.Errorf("client stats %+v: want no INTERRUPT and some timed polls", st)
	}
}
