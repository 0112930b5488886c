package direct

import (
	"bytes"
	"fmt"
	"io"
	"testing"
)

// TestAdaptiveMix scripts reader-first and writer-first transfers on one
// conn and checks each transfer's choice in PathInfo: the writer first
// sends by RDMA Read rendezvous (from its registered buffer: zero copy);
// a reader waiting on a registered buffer gets RDMA Write into it, even
// for a send below the threshold but longer than one DATA; a short send
// with nobody waiting goes inline.
func TestAdaptiveMix(t *testing.T) {
	a, b := rig(t)
	ca, cb := pair(t, a, b, Config{}, Config{})
	defer ca.Close()
	defer cb.Close()
	src := alloc(t, a, 256<<10)
	defer src.Free()
	dst := alloc(t, b, 256<<10)
	defer dst.Free()
	fill(src.Bytes(), 4)
	plain := make([]byte, 256<<10)
	fill(plain, 5)

	type step struct {
		name        string
		readerFirst bool
		data        []byte
		want        PathInfo // the deltas of the writer's counters; ZeroCopyRecvs the reader's
	}
	steps := []step{
		{"writer first, registered", false, src.Bytes(), PathInfo{ReadRendezvous: 1, ZeroCopySends: 1}},
		{"reader first, plain 256 KiB", true, plain, PathInfo{WriteRendezvous: 1, ZeroCopyRecvs: 1}},
		{"writer first, plain 256 KiB", false, plain, PathInfo{ReadRendezvous: 1}},
		{"reader first, plain 16 KiB", true, plain[:16<<10], PathInfo{WriteRendezvous: 1, ZeroCopyRecvs: 1}},
		{"reader first, registered", true, src.Bytes(), PathInfo{WriteRendezvous: 1, ZeroCopySends: 1, ZeroCopyRecvs: 1}},
		{"writer first, 100 bytes", false, plain[:100], PathInfo{InlineSends: 1}},
	}
	for _, st := range steps {
		w0, r0 := PathOf(ca), PathOf(cb)
		got := make(chan []byte, 1)
		read := func() {
			buf := dst.Bytes()[:len(st.data)]
			if len(st.data) < 64<<10 {
				// A blocked read of a registered buffer is large; the
				// send may be shorter.
				buf = dst.Bytes()
			}
			n, err := io.ReadAtLeast(cb, buf, len(st.data))
			if err != nil {
				t.Error(err)
			}
			got <- bytes.Clone(buf[:n])
		}
		if st.readerFirst {
			go read()
			// The reader blocked on its registered buffer, and the writer
			// has a SINK_WAIT. (The hint alone is not enough: one left from
			// an earlier, shorter transfer into the same read can still be
			// standing, and the writer may act on it before this read
			// blocks.)
			rc := cb.(*Conn)
			waitFor(t, func() bool {
				rc.mu.Lock()
				defer rc.mu.Unlock()
				return rc.usink != nil
			})
			waitPeerWaiting(t, ca.(*Conn))
		}
		werr := make(chan error, 1)
		go func() { _, err := ca.Write(st.data); werr <- err }()
		if !st.readerFirst {
			// The writer's transfer is there before the reader reads.
			waitAnnounced(t, ca, w0)
			rc := cb.(*Conn)
			waitFor(t, func() bool {
				rc.mu.Lock()
				defer rc.mu.Unlock()
				return len(rc.rq) > 0 && rc.rq[0].ready
			})
			go read()
		}
		if err := <-werr; err != nil {
			t.Fatal(err)
		}
		if g := <-got; !bytes.Equal(g, st.data) {
			t.Fatalf("%s: the bytes differ (%d of %d)", st.name, len(g), len(st.data))
		}
		w, r := PathOf(ca), PathOf(cb)
		d := PathInfo{InlineSends: w.InlineSends - w0.InlineSends, ReadRendezvous: w.ReadRendezvous - w0.ReadRendezvous,
			WriteRendezvous: w.WriteRendezvous - w0.WriteRendezvous, ZeroCopySends: w.ZeroCopySends - w0.ZeroCopySends,
			ZeroCopyRecvs: r.ZeroCopyRecvs - r0.ZeroCopyRecvs}
		if d != st.want {
			f := func(p PathInfo) string {
				return fmt.Sprintf("inline %d, read %d, write %d, zero-copy sends %d, zero-copy receives %d",
					p.InlineSends, p.ReadRendezvous, p.WriteRendezvous, p.ZeroCopySends, p.ZeroCopyRecvs)
			}
			t.Errorf("%s: choices %s, want %s", st.name, f(d), f(st.want))
		}
	}
	t.Logf("writer %v", PathOf(ca))
}

// waitAnnounced waits until the writer sent something after w0.
func waitAnnounced(t *testing.T, c any, w0 PathInfo) {
	t.Helper()
	conn := c.(*Conn)
	waitFor(t, func() bool {
		w := conn.PathInfo()
		return w.InlineSends+w.ReadRendezvous+w.WriteRendezvous > w0.InlineSends+w0.ReadRendezvous+w0.WriteRendezvous
	})
}
