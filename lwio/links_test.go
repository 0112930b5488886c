package lwio_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
)

// TestLinksNegotiated: a client gets as many connections as both sides
// have instances, each authenticated on its own instance.
func TestLinksNegotiated(t *testing.T) {
	for _, tc := range []struct{ server, client, want int }{{1, 4, 1}, {3, 2, 2}, {2, 2, 2}, {4, 1, 1}} {
		r := newRig(t, lwio.ServerConfig{Instances: tc.server})
		c := r.dial(t, lwio.ClientConfig{Connections: tc.client})
		if got := c.Connections(); got != tc.want {
			t.Errorf("server %d, client %d instances: %d connections, want %d", tc.server, tc.client, got, tc.want)
		}
		if st := r.srv.Stats(); st.Authenticated != uint64(tc.want) || st.ConnsOpen != int64(tc.want) {
			t.Errorf("server %d, client %d: Authenticated %d ConnsOpen %d", tc.server, tc.client, st.Authenticated, st.ConnsOpen)
		}
	}
}

// TestLinksSpread: ReadAt and WriteAt spread their pieces over every
// connection; with one dropped mid-transfer, its pieces go again on the
// other and the transfer completes whole: none is lost.
func TestLinksSpread(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{Instances: 2, MaxRdmaWindow: 64 << 10})
	data := randomBytes(4<<20, 41)
	r.put(t, "f", data)
	c := r.dial(t, lwio.ClientConfig{Connections: 2})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data))
	if n, err := f.ReadAt(buf, 0); n != len(data) || err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	for i, s := range c.LinkStats() {
		if s.BytesRead < uint64(len(data))/4 {
			t.Errorf("connection %d read %d of %d bytes: not spread", i, s.BytesRead, len(data))
		}
	}

	// Start calls go round robin too, and memory from Alloc is used in
	// place on every connection.
	mem, err := c.Alloc(8 * 4096)
	if err != nil {
		t.Fatal(err)
	}
	before := c.LinkStats()
	var calls []*lwio.Call
	for i := range 8 {
		cl, err := f.StartRead(ctx, mem[i*4096:(i+1)*4096], int64(i*4096), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	for _, cl := range calls {
		if err := cl.Wait(ctx); err != nil || cl.N != 4096 {
			t.Fatalf("StartRead: %d, %v", cl.N, err)
		}
	}
	if !bytes.Equal(mem, data[:len(mem)]) {
		t.Fatal("StartRead: wrong data")
	}
	for i, s := range c.LinkStats() {
		if d := s.ZeroCopy - before[i].ZeroCopy; d != 4 || s.Bounced != before[i].Bounced {
			t.Errorf("connection %d: %d zero-copy reads (want 4), %d bounced", i, d, s.Bounced-before[i].Bounced)
		}
	}

	for _, write := range []bool{false, true} {
		if write {
			// A fresh client: the first lost a connection.
			c = r.dial(t, lwio.ClientConfig{Connections: 2})
			if f, err = c.Open(ctx, "f", lwio.OpenFlags{}); err != nil {
				t.Fatal(err)
			}
			data = randomBytes(len(data), 43)
		}
		entered, release := stall(t)
		res := make(chan error, 1)
		got := make([]byte, len(data))
		go func() {
			var n int
			var err error
			if write {
				n, err = f.WriteAt(data, 0)
			} else {
				n, err = f.ReadAt(got, 0)
			}
			if err == nil && n != len(data) {
				err = os.ErrInvalid
			}
			res <- err
		}()
		// Both connections' workers hold requests: drop one.
		for range 4 {
			<-entered
		}
		before := r.srv.Stats()
		if r.srv.DropConn() == 0 {
			t.Fatal("no connection to drop")
		}
		testutil.Eventually(t, "the client to see the connection gone", 10*time.Second, func() bool {
			n := 0
			for _, e := range c.LinkErrs() {
				if e != nil {
					n++
				}
			}
			return n == 1
		})
		release()
		if err := <-res; err != nil {
			t.Fatalf("write %v: the transfer failed with a connection dropped: %v", write, err)
		}
		if write {
			disk, _ := os.ReadFile(filepath.Join(r.dir, "f"))
			if !bytes.Equal(disk, data) {
				t.Fatal("the file is not what was written")
			}
		} else if !bytes.Equal(got, data) {
			t.Fatal("the data read is wrong")
		}
		if c.Resent() == 0 {
			t.Error("no piece was sent again: the connection was not dropped mid-transfer")
		}
		testutil.Eventually(t, "the server to forget the dropped connection", 10*time.Second, func() bool {
			return r.srv.Stats().ConnsOpen == before.ConnsOpen-1
		})
		// The client goes on with the connection left.
		if n, err := f.ReadAt(got[:1000], 0); n != 1000 || err != nil || !bytes.Equal(got[:1000], data[:1000]) {
			t.Fatalf("ReadAt on the connection left: %d, %v", n, err)
		}
	}
}
