package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// hostMem returns n bytes of host A's memory that are not registered:
// what an application hands the client when it did not get its buffer
// from Client.Alloc.
func hostMem(t *testing.T, r *rig, n int) ([]byte, *verbs.Buffer) {
	t.Helper()
	v, err := verbs.Open(r.a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := v.AllocBuffer(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Free() })
	return b.Bytes(), b
}

// TestRegisteredBuffers: large transfers from host memory are registered
// for the transfer (once: the cache finds the registration the next
// time) and used in place; small ones, and memory the NIC cannot reach,
// are copied through staging.
func TestRegisteredBuffers(t *testing.T) {
	for _, polling := range []bool{false, true} {
		t.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(t *testing.T) {
			r := newRig(t, lwio.ServerConfig{})
			data := randomBytes(256<<10, 31)
			r.put(t, "f", data)
			c := r.dial(t, lwio.ClientConfig{Polling: polling})
			ctx := context.Background()
			f, err := c.Open(ctx, "f", lwio.OpenFlags{})
			if err != nil {
				t.Fatal(err)
			}
			mem, buf := hostMem(t, r, 256<<10)
			for range 3 {
				clear(mem)
				if n, err := f.ReadAt(mem, 0); err != nil || n != len(mem) || !bytes.Equal(mem, data) {
					t.Fatalf("read into host memory: %d, %v, equal %v", n, err, bytes.Equal(mem, data))
				}
			}
			st := c.Stats()
			if st.Bounced != 0 || st.Registered != 3 || st.RegCache.Misses != 1 || st.RegCache.Hits != 2 {
				t.Fatalf("large reads into host memory: %+v; want 3 registered (1 miss, 2 hits), none bounced", st)
			}
			// A write from host memory: registered too (for local access
			// only: another registration).
			copy(mem, randomBytes(64<<10, 32))
			if _, err := f.WriteAt(mem[:64<<10], 0); err != nil {
				t.Fatal(err)
			}
			if st := c.Stats(); st.Bounced != 0 || st.Registered != 4 {
				t.Fatalf("write from host memory: %+v; want 4 registered", st)
			}
			got, _ := os.ReadFile(filepath.Join(r.dir, "f"))
			if !bytes.Equal(got[:64<<10], mem[:64<<10]) {
				t.Fatal("the write did not land")
			}
			// Under RegisterMin: copied. Outside host memory: copied.
			if _, err := f.ReadAt(mem[:512], 0); err != nil {
				t.Fatal(err)
			}
			heap := make([]byte, 64<<10)
			if _, err := f.ReadAt(heap, 0); err != nil || !bytes.Equal(heap, got[:64<<10]) {
				t.Fatalf("read into Go memory: %v", err)
			}
			if st := c.Stats(); st.Bounced != 2 || st.Registered != 4 {
				t.Fatalf("small and Go-memory reads: %+v; want 2 bounced", st)
			}
			// The cache holds the idle registrations, and lets go of them
			// when the memory is freed: nothing is left registered on it.
			if err := buf.Free(); err != nil {
				t.Fatalf("free of memory the client registered: %v", err)
			}
			if st := c.Stats().RegCache; st.Entries != 0 || st.InUse != 0 {
				t.Fatalf("registration cache after Free: %+v", st)
			}
		})
	}
}

// TestVectoredReadMaxRegions: a vectored read carries as many regions as
// the server's receive buffer holds (64 KiB ÷ 16 = 4,096) of 512-byte
// pages, each placed by its own RDMA Write; one more is refused before
// anything is sent.
func TestVectoredReadMaxRegions(t *testing.T) {
	const pages, ps = 4096, 512
	for _, polling := range []bool{false, true} {
		t.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(t *testing.T) {
			r := newRig(t, lwio.ServerConfig{MaxRdmaWindow: pages * ps})
			data := randomBytes(pages*ps, 33)
			r.put(t, "f", data)
			c := r.dial(t, lwio.ClientConfig{Polling: polling, MaxRdmaWindow: pages * ps})
			ctx := context.Background()
			f, err := c.Open(ctx, "f", lwio.OpenFlags{})
			if err != nil {
				t.Fatal(err)
			}
			mem, _ := hostMem(t, r, 2*pages*ps)
			read := func(vec [][]byte) {
				t.Helper()
				clear(mem)
				cl, err := f.StartReadV(ctx, vec, 0, nil)
				if err != nil {
					t.Fatal(err)
				}
				if err := cl.Wait(ctx); err != nil || cl.N != pages*ps {
					t.Fatalf("vectored read of %d regions: %d, %v", pages, cl.N, err)
				}
				for i, p := range vec {
					if !bytes.Equal(p, data[i*ps:(i+1)*ps]) {
						t.Fatalf("page %d wrong", i)
					}
				}
			}
			// Every other page, last first: no two neighbours, so each
			// page is a stretch under RegisterMin, copied.
			vec := make([][]byte, pages)
			for i := range vec {
				o := (2*pages - 2 - 2*i) * ps
				vec[i] = mem[o : o+ps]
			}
			read(vec)
			if st := c.Stats(); st.Bounced != 1 || st.Registered != 0 {
				t.Fatalf("client %+v: want the scattered small pages copied", st)
			}
			// The same pages in order: one stretch, registered once.
			for i := range vec {
				vec[i] = mem[i*ps : (i+1)*ps]
			}
			read(vec)
			read(vec)
			if st := c.Stats(); st.Bounced != 1 || st.Registered != 2 || st.RegCache.Registrations != 1 {
				t.Fatalf("client %+v: want the contiguous pages registered once", st)
			}
			if _, err := f.StartReadV(ctx, append(vec, vec[0]), 0, nil); !errors.Is(err, lwio.ErrVecShape) {
				t.Fatalf("%d regions: %v, want ErrVecShape", pages+1, err)
			}
			if st := r.srv.Stats(); st.VecReads != 3 || st.BadRequests+st.ProtocolErrors+st.ConnErrors != 0 {
				t.Fatalf("server %+v", st)
			}
		})
	}
}

// TestVectoredWriteFromPages: a vectored write is sent from its pages:
// contiguous ones as one gather element in one request; scattered ones,
// more than a send gathers, as several vectored writes; nothing copied.
func TestVectoredWriteFromPages(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "f", make([]byte, 64<<10))
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	const ps = 4096
	mem, _ := hostMem(t, r, 32*ps)
	copy(mem, randomBytes(len(mem), 34))
	check := func(vec [][]byte) {
		t.Helper()
		cl, err := f.StartWriteV(ctx, vec, 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cl.Wait(ctx); err != nil || cl.N != len(vec)*ps {
			t.Fatalf("vectored write: %d, %v", cl.N, err)
		}
		got, _ := os.ReadFile(filepath.Join(r.dir, "f"))
		if !bytes.Equal(got[:len(vec)*ps], bytes.Join(vec, nil)) {
			t.Fatal("file differs from the pages")
		}
	}
	contiguous := make([][]byte, 16)
	for i := range contiguous {
		contiguous[i] = mem[i*ps : (i+1)*ps]
	}
	check(contiguous)
	if st := r.srv.Stats(); st.VecWrites != 1 {
		t.Fatalf("contiguous pages: %d vectored writes, want 1", st.VecWrites)
	}
	scattered := make([][]byte, 16)
	for i := range scattered {
		o := (30 - 2*i) * ps // every other page, last first
		scattered[i] = mem[o : o+ps]
	}
	check(scattered)
	// 16 stretches, three to a send after the header.
	if st := r.srv.Stats(); st.VecWrites != 1+6 || st.BadRequests != 0 {
		t.Fatalf("scattered pages: %d vectored writes, want 1+6", st.VecWrites)
	}
	if st := c.Stats(); st.Bounced != 0 {
		t.Fatalf("client %+v: a page was copied", st)
	}
}
