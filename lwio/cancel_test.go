package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
)

// TestCancelContextInProgress: a read the server is already doing (a
// worker holds it, reading 16 MiB of the file) when its context ends: the
// client sends CANCEL for it, the server abandons it before placing a
// byte, and the Call completes CANCELLED with the context's error. No
// test hook holds the worker: the CANCEL must overtake a real read, so a
// round in which the read wins (it completes normally, which is allowed)
// is run again.
func TestCancelContextInProgress(t *testing.T) {
	const size = 16 << 20
	for _, polling := range []bool{false, true} {
		t.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(t *testing.T) {
			r := newRig(t, lwio.ServerConfig{MaxRdmaWindow: size, Workers: 1})
			data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
			r.put(t, "f", data)
			c := r.dial(t, lwio.ClientConfig{Polling: polling, MaxRdmaWindow: size})
			f, err := c.Open(context.Background(), "f", lwio.OpenFlags{})
			if err != nil {
				t.Fatal(err)
			}
			mem, err := c.Alloc(size)
			if err != nil {
				t.Fatal(err)
			}
			// Each try is a race the CANCEL loses often: with the
			// devices in their own processes on a loaded machine, about
			// one try in twelve wins. A hundred tries fail together once
			// in thousands of runs; twenty did once in six.
			const tries = 100
			abandoned := false
			for try := 0; try < tries && !abandoned; try++ {
				for i := range mem {
					mem[i] = 0xEE
				}
				before := r.srv.Stats()
				ctx, cancel := context.WithCancel(context.Background())
				cl, err := f.StartRead(ctx, mem, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				// The server counts a read when a worker starts it.
				testutil.Eventually(t, "a worker to take the read", 10*time.Second, func() bool { return r.srv.Stats().Reads > before.Reads })
				cancel()
				<-cl.Done
				after := r.srv.Stats()
				if after.Cancels != before.Cancels+1 {
					t.Fatalf("server saw %d CANCELs, want 1", after.Cancels-before.Cancels)
				}
				if cl.Err == nil {
					if cl.N != size || !bytes.Equal(mem, data) {
						t.Fatalf("a read that was not cancelled: %d bytes, equal %v", cl.N, bytes.Equal(mem, data))
					}
					continue // the read was done first
				}
				var se *lwio.StatusError
				if !errors.Is(cl.Err, context.Canceled) || !errors.As(cl.Err, &se) || se.Status != lwio.StatusCancelled || cl.N != 0 {
					t.Fatalf("cancelled read: %d, %v; want CANCELLED wrapping context.Canceled", cl.N, cl.Err)
				}
				if after.Abandoned != before.Abandoned+1 {
					t.Fatalf("server abandoned %d reads, want 1", after.Abandoned-before.Abandoned)
				}
				if !allByte(mem, 0xEE) {
					t.Fatal("an abandoned read placed data")
				}
				abandoned = true
				t.Logf("abandoned at try %d", try+1)
			}
			if !abandoned {
				t.Fatalf("in %d tries the CANCEL never reached the read in progress", tries)
			}
			// The connection goes on: the next read is whole.
			clear(mem)
			if n, err := f.ReadAt(mem[:1<<20], 0); err != nil || n != 1<<20 || !bytes.Equal(mem[:1<<20], data[:1<<20]) {
				t.Fatalf("read after the cancel: %d, %v", n, err)
			}
			if st := c.Stats(); st.Cancels == 0 || c.Err() != nil {
				t.Fatalf("client %+v (%v)", st, c.Err())
			}
		})
	}
}

// TestCancelContextOne: a CANCEL for one request's context leaves the
// Fid's other requests alone: of two queued reads behind a long one, the
// one whose context ends completes CANCELLED and the other is served.
func TestCancelContextOne(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{Workers: 1})
	data := randomBytes(1<<20, 41)
	r.put(t, "f", data)
	c := r.dial(t, lwio.ClientConfig{Credits: 8})
	f, err := c.Open(context.Background(), "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := stall(t)
	first, err := f.StartRead(context.Background(), make([]byte, 4096), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered // the one worker holds the first read; the next two queue
	ctx, cancel := context.WithCancel(context.Background())
	gone, err := f.StartRead(ctx, make([]byte, 4096), 4096, nil)
	if err != nil {
		t.Fatal(err)
	}
	kept, err := f.StartRead(context.Background(), make([]byte, 4096), 8192, nil)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	<-gone.Done
	release()
	<-first.Done
	<-kept.Done
	if !errors.Is(gone.Err, context.Canceled) || first.Err != nil || kept.Err != nil || kept.N != 4096 {
		t.Fatalf("cancelled %v; others %v, %v (%d bytes)", gone.Err, first.Err, kept.Err, kept.N)
	}
	if st := r.srv.Stats(); st.Cancelled != 1 || st.Abandoned != 0 {
		t.Fatalf("server cancelled %d, abandoned %d; want 1 and 0", st.Cancelled, st.Abandoned)
	}
}

func allByte(b []byte, v byte) bool {
	for _, x := range b {
		if x != v {
			return false
		}
	}
	return true
}

// TestCancelContextMany: the requests in flight under one context are
// all cancelled when it ends (one watch on the context for all of them),
// each with its own CANCEL.
func TestCancelContextMany(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{Workers: 1})
	r.put(t, "f", randomBytes(1<<20, 42))
	c := r.dial(t, lwio.ClientConfig{Credits: 16})
	f, err := c.Open(context.Background(), "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := stall(t)
	first, err := f.StartRead(context.Background(), make([]byte, 4096), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	var calls []*lwio.Call
	for i := 1; i <= 5; i++ {
		cl, err := f.StartRead(ctx, make([]byte, 4096), int64(i*4096), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	cancel()
	for _, cl := range calls {
		if <-cl.Done; !errors.Is(cl.Err, context.Canceled) {
			t.Fatalf("read under the ended context: %v", cl.Err)
		}
	}
	release()
	if <-first.Done; first.Err != nil {
		t.Fatal(first.Err)
	}
	if st, cs := r.srv.Stats(), c.Stats(); st.Cancelled != 5 || cs.Cancels != 5 {
		t.Fatalf("server cancelled %d, client sent %d CANCELs; want 5 and 5", st.Cancelled, cs.Cancels)
	}
}
