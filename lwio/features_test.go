package lwio_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/lwio"
)

func statusOf(err error) uint32 {
	var se *lwio.StatusError
	if errors.As(err, &se) {
		return se.Status
	}
	return 0
}

func TestVectored(t *testing.T) {
	for _, polling := range []bool{false, true} {
		t.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(t *testing.T) { testVectored(t, polling) })
	}
}

func testVectored(t *testing.T, polling bool) {
	r := newRig(t, lwio.ServerConfig{})
	data := randomBytes(1<<20, 3)
	r.put(t, "v", data)
	c := r.dial(t, lwio.ClientConfig{Polling: polling})
	ctx := context.Background()
	f, err := c.Open(ctx, "v", lwio.OpenFlags{NoBuffering: true})
	if err != nil {
		t.Fatal(err)
	}
	// Vectored read into registered pages (one RDMA Write each) and into
	// plain memory (bounced), the last region a shorter multiple of 512.
	mem, err := c.Alloc(64 << 10)
	if err != nil {
		t.Fatal(err)
	}
	for _, reg := range []bool{true, false} {
		var pages [][]byte
		for i := range 7 {
			if reg {
				pages = append(pages, mem[i*4096:(i+1)*4096])
			} else {
				pages = append(pages, make([]byte, 4096))
			}
		}
		if reg {
			pages = append(pages, mem[7*4096:7*4096+1024])
		} else {
			pages = append(pages, make([]byte, 1024))
		}
		cl, err := f.StartReadV(ctx, pages, 8192, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Wait(ctx); err != nil || cl.N != 7*4096+1024 {
			t.Fatalf("vectored read (registered %v): %d, %v", reg, cl.N, err)
		}
		if got := bytes.Join(pages, nil); !bytes.Equal(got, data[8192:8192+len(got)]) {
			t.Fatalf("vectored read (registered %v): data differs", reg)
		}
	}
	// Gather write.
	pages := [][]byte{randomBytes(4096, 4), randomBytes(4096, 5), randomBytes(100, 6)}
	cl, err := f.StartWriteV(ctx, pages, 5000, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); err != nil || cl.N != 8292 {
		t.Fatalf("gather write: %d, %v", cl.N, err)
	}
	copy(data[5000:], bytes.Join(pages, nil))
	// Collapsed write: one page stands for 10 pages and a half.
	page := randomBytes(4096, 7)
	cl, err = f.StartWriteCollapsed(ctx, page, 10*4096+2048, 65536, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); err != nil || cl.N != 10*4096+2048 {
		t.Fatalf("collapsed write: %d, %v", cl.N, err)
	}
	for i := range 11 {
		copy(data[65536+i*4096:65536+min((i+1)*4096, 10*4096+2048)], page)
	}
	disk, _ := os.ReadFile(filepath.Join(r.dir, "v"))
	if !bytes.Equal(disk, data) {
		t.Fatal("file differs after the vectored writes")
	}
	// A collapsed write on a file registered with buffering is refused.
	g, err := c.Open(ctx, "v", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	cl, err = g.StartWriteCollapsed(ctx, page, 3*4096, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); statusOf(err) != lwio.StatusInvalidParameter {
		t.Fatalf("collapsed write without NoBuffering: %v", err)
	}
	// Shapes the client refuses before sending.
	if _, err := f.StartReadV(ctx, [][]byte{make([]byte, 4096), make([]byte, 100)}, 0, nil); !errors.Is(err, lwio.ErrVecShape) {
		t.Fatalf("last page not a sector multiple: %v", err)
	}
	if st := r.srv.Stats(); st.VecReads != 2 || st.VecWrites != 2 || st.BadRequests != 1 {
		t.Errorf("server stats %+v", st)
	}
}

func TestImmediateAndDirect(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{ImmediateReads: true})
	data := randomBytes(512<<10, 8)
	r.put(t, "d", data)
	c := r.dial(t, lwio.ClientConfig{})
	f, err := c.Open(context.Background(), "d", lwio.OpenFlags{NoBuffering: true})
	if err != nil {
		t.Fatal(err)
	}
	mem, err := c.Alloc(len(data))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := f.ReadAt(mem, 0); err != nil || n != len(data) || !bytes.Equal(mem, data) {
		t.Fatalf("ReadAt = %d, %v", n, err)
	}
	// A short read at the end is completed by a status response: the
	// immediate data carries no byte count.
	if n, err := f.ReadAt(mem[:8192], int64(len(data)-4096)); n != 4096 || err != io.EOF {
		t.Fatalf("short read = %d, %v", n, err)
	}
	if cs, ss := c.Stats(), r.srv.Stats(); cs.ImmediateCompletions == 0 || cs.ImmediateCompletions != ss.ImmediateCompletions {
		t.Errorf("immediate completions: client %d, server %d", cs.ImmediateCompletions, ss.ImmediateCompletions)
	}
	if r.srv.Stats().DirectIO == 0 {
		if fd, err := os.OpenFile(filepath.Join(r.dir, "d"), os.O_RDONLY|syscall.O_DIRECT, 0); err == nil {
			fd.Close()
			t.Error("the file system takes O_DIRECT, but no aligned read used it")
		}
	}
}

func TestPaths(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "in", []byte("x"))
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "secret"), []byte("s"), 0o644)
	os.Symlink(filepath.Join(outside, "secret"), filepath.Join(r.dir, "link"))
	os.Mkdir(filepath.Join(r.dir, "sub"), 0o755)
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	r.put(t, "x", []byte("x"))
	for _, p := range []string{"../" + filepath.Base(outside) + "/secret", "link", "sub/../../x", "sub/../x",
		filepath.Join(outside, "secret"), "/x", "\\x", "C:\\x", "..\\x"} {
		if _, err := c.Open(ctx, p, lwio.OpenFlags{}); statusOf(err) != lwio.StatusAccessDenied {
			t.Errorf("Open(%q) = %v, want ACCESS_DENIED", p, err)
		}
		if _, err := c.Open(ctx, p, lwio.OpenFlags{Create: true}); statusOf(err) != lwio.StatusAccessDenied {
			t.Errorf("Open(%q, create) = %v, want ACCESS_DENIED", p, err)
		}
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("a create escaped the export")
	}
	if _, err := c.Open(ctx, "link", lwio.OpenFlags{}); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("a symlink out of the export: %v, want ACCESS_DENIED", err)
	}
	if _, err := c.Open(ctx, "missing", lwio.OpenFlags{}); statusOf(err) != lwio.StatusObjectNameNotFound {
		t.Errorf("a missing file: %v", err)
	}
	if _, err := c.Open(ctx, "sub", lwio.OpenFlags{}); statusOf(err) == 0 {
		t.Errorf("a directory: %v", err)
	}
	f, err := c.Open(ctx, "sub/new", lwio.OpenFlags{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("hello"), 0); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(filepath.Join(r.dir, "sub", "new")); string(b) != "hello" {
		t.Fatalf("created file holds %q", b)
	}
	if b, _ := os.ReadFile(filepath.Join(outside, "secret")); string(b) != "s" {
		t.Fatal("the file outside the export changed")
	}
}

// TestManyClients runs clients and files at once, each client writing its
// own files and reading the others', checked by hash.
func TestManyClients(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	const clients, files, size = 4, 3, 768 << 10
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, clients)
	var cls []*lwio.Client
	for ci := range clients {
		c := r.dial(t, lwio.ClientConfig{Polling: ci%2 == 1, Credits: 4 + 4*ci})
		cls = append(cls, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- func() error {
				for fi := range files {
					name := fmt.Sprintf("c%d-f%d", ci, fi)
					f, err := c.Open(ctx, name, lwio.OpenFlags{Create: true, Truncate: true})
					if err != nil {
						return err
					}
					data := randomBytes(size, uint64(ci*10+fi))
					if _, err := f.WriteAt(data, 0); err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
					got := make([]byte, size)
					if n, err := f.ReadAt(got, 0); n != size || err != nil {
						return fmt.Errorf("%s: read %d, %w", name, n, err)
					}
					if sha256.Sum256(got) != sha256.Sum256(data) {
						return fmt.Errorf("%s: data differs", name)
					}
					if err := f.Close(); err != nil {
						return err
					}
				}
				return nil
			}()
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(60 * time.Second):
		msg := r.srv.DebugState()
		for _, c := range cls {
			msg += c.DebugState() + "\n"
		}
		t.Fatalf("stalled:\n%s", msg)
	}
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	st := r.srv.Stats()
	if st.BadRequests+st.ProtocolErrors+st.CreditViolations+st.ConnErrors != 0 {
		t.Errorf("server counted errors: %+v", st)
	}
	if st.BytesWritten != clients*files*size || st.BytesRead != clients*files*size {
		t.Errorf("server moved %d/%d bytes", st.BytesRead, st.BytesWritten)
	}
}

// TestCredits drives the server's credit policy by hand: grants and
// retires happen in the middle of traffic, and the client never has more
// requests in flight than it holds credits.
func TestCredits(t *testing.T) {
	var target atomic.Int64
	target.Store(2)
	r := newRig(t, lwio.ServerConfig{InitialCredits: 2, MaxCredits: 24,
		CreditPolicy: func(credits, hint int) int { return int(target.Load()) }})
	data := randomBytes(4<<20, 9)
	r.put(t, "c", data)
	c := r.dial(t, lwio.ClientConfig{Credits: 2})
	f, err := c.Open(context.Background(), "c", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(data))
	for _, want := range []int{16, 3, 24, 1, 8} {
		target.Store(int64(want))
		// The policy is consulted at each request; reads of 64 KiB make
		// enough of them for the transaction to finish.
		for off := 0; off < len(data); off += 64 << 10 {
			if _, err := f.ReadAt(got[off:off+64<<10], int64(off)); err != nil {
				t.Fatal(err)
			}
		}
		if !bytes.Equal(got, data) {
			t.Fatal("data differs")
		}
		deadline := time.Now().Add(5 * time.Second)
		for c.Credits() != want && time.Now().Before(deadline) {
			f.ReadAt(got[:4096], 0)
		}
		if c.Credits() != want {
			t.Fatalf("credits %d, want %d", c.Credits(), want)
		}
	}
	cs, ss := c.Stats(), r.srv.Stats()
	if cs.CreditRetires != ss.CreditRetires || cs.CreditRetires == 0 {
		t.Errorf("retires: client %d, server %d", cs.CreditRetires, ss.CreditRetires)
	}
	if cs.MaxOutstandingObserved > 24 || ss.CreditViolations != 0 {
		t.Errorf("outstanding %d, violations %d", cs.MaxOutstandingObserved, ss.CreditViolations)
	}
	if ss.CreditsInUse != 8 {
		t.Errorf("server pool holds %d credits, want 8", ss.CreditsInUse)
	}
}
