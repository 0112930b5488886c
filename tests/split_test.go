package tests

import (
	"bytes"
	"io"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
)

// splitHosts is the rig with each host's NIC in a process of its own.
func splitHosts(t *testing.T) *hostrig.Rig {
	t.Helper()
	split := func(c *tcpstack.HostConfig) { c.Split = &tcpstack.SplitConfig{} }
	return hostrig.New(t, hostrig.Config{HostA: split, HostB: split})
}

// TestSplitTransfer moves data over TCP between two hosts whose NICs each
// run in a separate device process: host memory shared through a memfd,
// the doorbell and vectors through eventfds, frames through a socket to
// the wire in this process. Both data paths.
func TestSplitTransfer(t *testing.T) {
	r := splitHosts(t)
	if r.A.Device != nil {
		t.Fatal("a split host has an in-process device")
	}
	d := transfer(t, r.A, r.B, 8<<20)
	t.Logf("netstack over split devices: 8 MiB in %v", d)
}

// TestSplitOffload: a delegated connection between split hosts.
func TestSplitOffload(t *testing.T) {
	r := splitHosts(t)
	ca, cb := delegatedPair(t, r.A, r.B, 6301)
	const n = 16 << 20
	type res struct {
		sum [32]byte
		n   int64
		err error
	}
	recvA, recvB := make(chan res, 1), make(chan res, 1)
	go func() { s, m, err := hashAll(ca); recvA <- res{s, m, err} }()
	go func() { s, m, err := hashAll(cb); recvB <- res{s, m, err} }()
	sentB := make(chan [32]byte, 1)
	start := time.Now()
	go func() {
		sentB <- sendRandom(t, cb, n, 5)
		cb.(*tcpstack.DelegatedConn).CloseWrite()
	}()
	wantAB := sendRandom(t, ca, n, 4)
	ca.(*tcpstack.DelegatedConn).CloseWrite()
	wantBA := <-sentB
	for _, c := range []struct {
		name string
		ch   chan res
		want [32]byte
	}{{"A→B", recvB, wantAB}, {"B→A", recvA, wantBA}} {
		got := <-c.ch
		if got.err != nil || got.n != n || got.sum != c.want {
			t.Fatalf("%s: %d bytes (%v), hash match %v", c.name, got.n, got.err, got.sum == c.want)
		}
	}
	t.Logf("delegated over split devices: 16 MiB each way in %v", time.Since(start))
}

// TestSplitLinked: two split hosts whose devices are joined directly by a
// packet socket (SplitConfig.Link), with no port in the host process.
func TestSplitLinked(t *testing.T) {
	r := splitLinked(t)
	d := transfer(t, r.A, r.B, 4<<20)
	ca, cb := delegatedPair(t, r.A, r.B, 6302)
	go func() { io.Copy(cb, cb) }()
	msg := []byte("device to device")
	if _, err := ca.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(ca, got); err != nil || string(got) != string(msg) {
		t.Fatalf("echo %q %v", got, err)
	}
	t.Logf("netstack 4 MiB in %v; delegated echo ok", d)
	// A port and a link at once is refused.
	if _, err := tcpstack.NewHost(tcpstack.HostConfig{MAC: hostrig.MACA, Addr: hostrig.PrefixA, Split: &tcpstack.SplitConfig{}}, nil); err == nil {
		t.Fatal("a split host with neither a port nor a link was made")
	}
}

// TestSplitShmLink: two split hosts cabled device to device by a
// shared-memory link: both paths, data intact.
func TestSplitShmLink(t *testing.T) {
	r := splitShm(t)
	d := transfer(t, r.A, r.B, 8<<20)
	ca, cb := delegatedPair(t, r.A, r.B, 6303)
	go func() { io.Copy(cb, cb) }()
	msg := bytes.Repeat([]byte("shared memory "), 10000)
	go ca.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(ca, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes: %v", len(msg), err)
	}
	t.Logf("netstack 8 MiB in %v; delegated echo of %d bytes intact", d, len(msg))
}

// TestSplitPolling: split devices with no eventfds at all (VECTORS in
// polling mode): the device looks at its rings every interval, the host at
// its vectors; data still arrives intact on both paths.
func TestSplitPolling(t *testing.T) {
	poll := func(c *tcpstack.HostConfig) {
		c.Split = &tcpstack.SplitConfig{Poll: true, PollInterval: 20 * time.Microsecond}
	}
	r := hostrig.New(t, hostrig.Config{HostA: poll, HostB: poll})
	d := transfer(t, r.A, r.B, 2<<20)
	ca, cb := delegatedPair(t, r.A, r.B, 6304)
	go func() { io.Copy(cb, cb) }()
	msg := bytes.Repeat([]byte("polled "), 4096)
	go ca.Write(msg)
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(ca, got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo of %d bytes: %v", len(msg), err)
	}
	t.Logf("netstack 2 MiB in %v; delegated echo intact", d)
}
