package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/tcpstack"
)

// rig is a server on host B exporting a temporary directory and the
// hosts to dial it from.
type rig struct {
	a, b *tcpstack.Host
	dir  string
	srv  *lwio.Server
}

func newRig(t *testing.T, cfg lwio.ServerConfig) *rig { return newRigTB(t, cfg) }

func newRigTB(t testing.TB, cfg lwio.ServerConfig) *rig {
	t.Helper()
	return newRigFor(t, false, func(netip.Addr) lwio.ServerConfig { return cfg })
}

func (r *rig) dial(t *testing.T, cfg lwio.ClientConfig) *lwio.Client { return r.dialTB(t, cfg) }

func (r *rig) dialTB(t testing.TB, cfg lwio.ClientConfig) *lwio.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lwio.Dial(ctx, r.a, r.b.Addr(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func randomBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^7))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

func (r *rig) put(t *testing.T, name string, data []byte) { r.putTB(t, name, data) }

func (r *rig) putTB(t testing.TB, name string, data []byte) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, name), data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestReadWrite(t *testing.T) {
	for _, polling := range []bool{false, true} {
		t.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(t *testing.T) {
			r := newRig(t, lwio.ServerConfig{})
			data := randomBytes(3<<20+123, 1)
			r.put(t, "f", data)
			c := r.dial(t, lwio.ClientConfig{Polling: polling})
			ctx := context.Background()
			if n, err := c.Stat(ctx, "f"); err != nil || n != int64(len(data)) {
				t.Fatalf("Stat = %d, %v; want %d", n, err, len(data))
			}
			f, err := c.Open(ctx, "f", lwio.OpenFlags{})
			if err != nil {
				t.Fatal(err)
			}
			got := make([]byte, len(data)+1000)
			n, err := f.ReadAt(got, 0)
			if n != len(data) || err != io.EOF {
				t.Fatalf("ReadAt = %d, %v; want %d, EOF", n, err, len(data))
			}
			if !bytes.Equal(got[:n], data) {
				t.Fatal("read data differs")
			}
			// Write a new pattern in the middle, read it back from disk.
			patch := randomBytes(1<<20+7, 2)
			if n, err := f.WriteAt(patch, 12345); err != nil || n != len(patch) {
				t.Fatalf("WriteAt = %d, %v", n, err)
			}
			copy(data[12345:], patch)
			disk, _ := os.ReadFile(filepath.Join(r.dir, "f"))
			if !bytes.Equal(disk, data) {
				t.Fatal("file on disk differs after WriteAt")
			}
			// Zero-copy memory.
			mem, err := c.Alloc(256 << 10)
			if err != nil {
				t.Fatal(err)
			}
			if n, err := f.ReadAt(mem, 1000); err != nil || n != len(mem) || !bytes.Equal(mem, data[1000:1000+len(mem)]) {
				t.Fatalf("zero-copy ReadAt = %d, %v", n, err)
			}
			if _, err := f.ReadAt(got[:10], int64(len(data))); err != io.EOF {
				t.Fatalf("ReadAt at EOF: %v", err)
			}
			if err := f.Close(); err != nil {
				t.Fatal(err)
			}
			if _, err := f.ReadAt(got[:10], 0); !errors.Is(err, lwio.ErrFileClosed) {
				t.Fatalf("ReadAt after Close: %v", err)
			}
			st := c.Stats()
			if st.ZeroCopy == 0 || st.Bounced == 0 {
				t.Errorf("stats: %+v", st)
			}
			if polling && st.PolledCompletions == 0 {
				t.Errorf("polling client completed nothing by status block: %+v", st)
			}
			t.Logf("client %+v", st)
			t.Logf("server %+v", r.srv.Stats())
		})
	}
}
