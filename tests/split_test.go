package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// splitHosts is the rig with each host's NIC in a process of its own.
func splitHosts(t *testing.T) *hostrig.Rig {
	t.Helper()
	split := func(c *board.HostConfig) { c.Split = &board.SplitConfig{} }
	return hostrig.New(t, hostrig.Config{HostA: split, HostB: split})
}

// TestSplitTransfer moves data over TCP between two hosts whose NICs each
// run in a separate device process: host memory shared through a memfd,
// the doorbell and vectors through eventfds, frames through a socket to
// the wire in this process. Both data paths.
func TestSplitTransfer(t *testing.T) {
	r := splitHosts(t)
	if r.DevA != nil {
		t.Fatal("a split host has an in-process device")
	}
	d := transfer(t, r.A, r.B, 8<<20)
	t.Logf("netstack over split devices: 8 MiB in %v", d)
}

// TestSplitOffload: a delegated connection between split hosts.
func TestSplitOffload(t *testing.T) {
	r := splitHosts(t)
	bothWaysOn(t, r.A, r.B, 6301, 16<<20)
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
	if _, err := board.NewHost(board.HostConfig{MAC: hostrig.MACA, Addr: hostrig.PrefixA, Split: &board.SplitConfig{}}, nil); err == nil {
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
	poll := func(c *board.HostConfig) {
		c.Split = &board.SplitConfig{Poll: true, PollInterval: 20 * time.Microsecond}
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

// TestShmLinkDevicesBothWays: two devices in this process cabled by a
// shared-memory link, each unit polling the link and writing it from one
// goroutine, with receive FIFOs of 8 frames so that a unit waiting for room
// on the link finds its own FIFO full. Six delegated connections carry data
// both ways at once, more than the link's rings hold, and all complete
// intact: a unit waiting for room takes in (or, its FIFO full, drops) what
// the other sends, so two units each waiting to send to the other do not
// wait for good.
func TestShmLinkDevicesBothWays(t *testing.T) {
	ea, eb, err := board.NewShmLink(1500)
	if err != nil {
		t.Fatal(err)
	}
	host := func(e *board.ShmLinkEnd, mac [6]byte, addr netip.Prefix) *tcpstack.Host {
		p, err := port.OpenShmPort(e.Mem, e.Size, e.Entry, e.Side, e.Wake, e.Peer)
		if err != nil {
			t.Fatal(err)
		}
		h, err := board.NewHost(board.HostConfig{MAC: mac, Addr: addr, Device: nic.Config{RxFIFODepth: 8}}, p)
		if err != nil {
			p.Close()
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h.Host
	}
	a := host(ea, hostrig.MACA, hostrig.PrefixA)
	b := host(eb, hostrig.MACB, hostrig.PrefixB)
	n := int64(8 << 20)
	if testing.Short() {
		n = 2 << 20
	}
	type result struct {
		name      string
		got, want [32]byte
		n         int64
		err       error
	}
	const conns = 6
	results := make(chan result, 2*conns)
	for i := range conns {
		ca, cb := delegatedPair(t, a, b, uint16(6311+i))
		for _, dir := range []struct {
			name     string
			from, to net.Conn
		}{{fmt.Sprintf("A→B #%d", i), ca, cb}, {fmt.Sprintf("B→A #%d", i), cb, ca}} {
			got := make(chan result, 1)
			go func() { s, m, err := hashAll(dir.to); got <- result{got: s, n: m, err: err} }()
			go func() {
				want := sendRandom(t, dir.from, n, byte(2*i+len(dir.name)))
				dir.from.(*tcpstack.DelegatedConn).CloseWrite()
				r := <-got
				r.name, r.want = dir.name, want
				results <- r
			}()
		}
	}
	for range 2 * conns {
		select {
		case r := <-results:
			if r.err != nil || r.n != n || r.got != r.want {
				t.Fatalf("%s: %d of %d bytes (%v), hash match %v", r.name, r.n, n, r.err, r.got == r.want)
			}
		case <-time.After(2 * time.Minute):
			t.Fatalf("stuck; device A %v; device B %v", stats(a), stats(b))
		}
	}
	t.Logf("device A %v; device B %v", stats(a), stats(b))
}
