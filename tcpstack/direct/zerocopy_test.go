package direct

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/emunic/emunic/tcpstack"
)

// settled returns h's device counters once they cover everything the
// device did before the call.
func settled(t *testing.T, h *tcpstack.Host) tcpstack.DeviceCounters {
	t.Helper()
	_, gen := h.CountersSettled(0)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, _ := h.CountersSettled(gen)
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the device's counters were not published")
		}
		time.Sleep(time.Millisecond)
	}
	c, err := h.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// copies is a host's CPU copy counters: the switch's own and the driver's
// total (which includes them).
func copies(h *tcpstack.Host) (sw, host uint64) {
	return HostStats(h).CopyBytes, h.Driver.Stats().HostCopyBytes
}

// alloc is Alloc or the test's end.
func alloc(t *testing.T, h *tcpstack.Host, n int) *Buffer {
	t.Helper()
	b, err := Alloc(h, n)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ping sends a few bytes from ca to cb.
func ping(t *testing.T, ca, cb net.Conn) {
	t.Helper()
	if _, err := ca.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 4)
	if _, err := io.ReadFull(cb, got); err != nil || string(got) != "ping" {
		t.Fatalf("ping: %q %v", got, err)
	}
}

func fill(b []byte, seed int) {
	for i := range b {
		b[i] = byte(i*7 + seed + i>>11)
	}
}

// waitFor polls cond until it holds (10 s at most).
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("the condition did not come within 10 s")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// waitPeerWaiting waits until c got its peer's SINK_WAIT (the peer's Read
// is blocked on a registered buffer).
func waitPeerWaiting(t *testing.T, c *Conn) {
	t.Helper()
	waitFor(t, func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.peerWait > 0
	})
}

// TestZeroCopy: a Write from registered memory to a Read blocked on
// registered memory moves every byte by the devices, in both rendezvous:
// the reader's SINK_WAIT makes each transfer an RDMA Write straight from
// the writer's buffer into the reader's; a reader that takes no RDMA Write
// (NoRDMAWrite) RDMA-reads the writer's buffer straight into its own. No
// host copies on either side (the switch's counter and the driver's
// HostCopyBytes), and the devices' QP counters show the bytes fetched
// from and placed into host memory.
func TestZeroCopy(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cfgB  Config
		write bool
	}{{"rdma-write", Config{}, true}, {"rdma-read", Config{NoRDMAWrite: true}, false}} {
		t.Run(tc.name, func(t *testing.T) { testZeroCopy(t, tc.cfgB, tc.write) })
	}
}

func testZeroCopy(t *testing.T, cfgB Config, write bool) {
	a, b := rig(t)
	ca, cb := pair(t, a, b, Config{}, cfgB)
	defer ca.Close()
	defer cb.Close()
	const size = 1 << 20
	src := alloc(t, a, size)
	dst := alloc(t, b, size)
	fill(src.Bytes(), 1)
	// A first exchange so the pair is warm; then measure.
	ping(t, ca, cb)
	swA, hostA := copies(a)
	swB, hostB := copies(b)
	devA, devB := settled(t, a), settled(t, b)
	qa, qb := ca.(*Conn).qp.QPN(), cb.(*Conn).qp.QPN()

	got := make(chan error, 1)
	go func() {
		_, err := io.ReadFull(cb, dst.Bytes())
		got <- err
	}()
	rc := cb.(*Conn)
	waitFor(t, func() bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.usink != nil
	})
	if write {
		waitPeerWaiting(t, ca.(*Conn))
	}
	if _, err := ca.Write(src.Bytes()); err != nil {
		t.Fatal(err)
	}
	if err := <-got; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.Bytes(), src.Bytes()) {
		t.Fatal("the bytes differ")
	}
	sa, ha := copies(a)
	sb, hb := copies(b)
	if sa != swA || sb != swB || ha != hostA || hb != hostB {
		t.Errorf("host copies: switch A +%d B +%d, driver A +%d B +%d; want 0", sa-swA, sb-swB, ha-hostA, hb-hostB)
	}
	pa, pb := PathOf(ca), PathOf(cb)
	t.Logf("writer %v; reader %v", pa, pb)
	if pa.ZeroCopySends == 0 || pb.ZeroCopyRecvs == 0 || write && pa.ReadRendezvous != 0 || !write && pa.WriteRendezvous != 0 {
		t.Errorf("writer %v, reader %v: want zero-copy transfers, RDMA Write %v", pa, pb, write)
	}
	da, db := settled(t, a), settled(t, b)
	sourced := da.QPs[qa].Sourced - devA.QPs[qa].Sourced
	placed := db.QPs[qb].Placed - devB.QPs[qb].Placed
	if sourced < size || placed < size {
		t.Errorf("device: %d bytes fetched by A's QP, %d placed by B's, want at least %d each", sourced, placed, size)
	}
	if err := src.Free(); err != nil {
		t.Fatal(err)
	}
	if err := dst.Free(); err != nil {
		t.Fatal(err)
	}
}

// TestZeroCopySenderFirst: a Write from registered memory with no reader
// waiting goes by RDMA Read rendezvous from the application's buffer
// itself (no copy on the sender), and the reader, who came later, copies
// out of its staging chunks.
func TestZeroCopySenderFirst(t *testing.T) {
	a, b := rig(t)
	ca, cb := pair(t, a, b, Config{}, Config{})
	defer ca.Close()
	defer cb.Close()
	const size = 512 << 10
	src := alloc(t, a, size)
	defer src.Free()
	fill(src.Bytes(), 2)
	ping(t, ca, cb)
	swA, _ := copies(a)
	swB, _ := copies(b)
	werr := make(chan error, 1)
	go func() { _, err := ca.Write(src.Bytes()); werr <- err }()
	got := make([]byte, size)
	if _, err := io.ReadFull(cb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, src.Bytes()) {
		t.Fatal("the bytes differ")
	}
	sa, _ := copies(a)
	sb, _ := copies(b)
	pa := PathOf(ca)
	t.Logf("writer %v; copies A +%d B +%d", pa, sa-swA, sb-swB)
	if sa != swA || pa.ZeroCopySends == 0 || pa.ReadRendezvous == 0 {
		t.Errorf("writer copied %d bytes, path %v: want RDMA Read from the application's buffer", sa-swA, pa)
	}
	if sb-swB != size {
		t.Errorf("reader copied %d bytes, want %d (out of its staging chunks)", sb-swB, size)
	}
}

// TestFreeInFlight: freeing a registered buffer while a transfer still
// uses it runs the registration cache's callback (the cache's
// Invalidations count it) but does not free the memory: Free fails with
// ErrBufferInUse, the transfer completes with the right bytes, and Free
// then succeeds.
func TestFreeInFlight(t *testing.T) {
	a, b := rig(t)
	// A sink of one small chunk: the second transfer waits for the reader.
	ca, cb := pair(t, a, b, Config{}, Config{ChunkSize: 64 << 10, Chunks: 1})
	defer ca.Close()
	defer cb.Close()
	const size = 256 << 10
	src := alloc(t, a, size)
	fill(src.Bytes(), 3)
	want := bytes.Clone(src.Bytes())
	before := switches[a].cache.Stats().Invalidations
	werr := make(chan error, 1)
	go func() { _, err := ca.Write(src.Bytes()); werr <- err }()
	// The transfers are announced; the reader has not read.
	deadline := time.Now().Add(10 * time.Second)
	for PathOf(ca).ZeroCopySends == 0 {
		if time.Now().After(deadline) {
			t.Fatal("no zero-copy transfer started")
		}
		time.Sleep(100 * time.Microsecond)
	}
	err := src.Free()
	if !errors.Is(err, ErrBufferInUse) {
		t.Fatalf("Free during the transfer: %v, want ErrBufferInUse", err)
	}
	if got := switches[a].cache.Stats().Invalidations; got == before {
		t.Error("the registration cache's callback did not see the Free")
	}
	got := make([]byte, size)
	if _, err := io.ReadFull(cb, got); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("the bytes differ")
	}
	// The Write returned: no registration of the buffer is left.
	if err := src.Free(); err != nil {
		t.Fatalf("Free after the transfer: %v", err)
	}
	ping(t, ca, cb)
}
