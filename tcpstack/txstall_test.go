package tcpstack

import (
	"bytes"
	"io"
	"testing"

	"github.com/emunic/emunic/nic"
)

// TestTxNoResourcesEndToEnd: a device whose engine queues at most 4
// transmit buffers per connection, far fewer than the host's 256. The
// host streams 2 MiB in 1000-byte writes (a descriptor each); the device
// refuses what does not fit, and the host takes it as back-pressure: the
// peer gets every byte, in order, and the connection lives.
func TestTxNoResourcesEndToEnd(t *testing.T) {
	const total = 2 << 20
	a, b := enginePair(t, func(c *nic.Config) { c.Engine.MaxTxBuffers = 4 })
	dc, peer := delegatedPair(t, a, b, 5103)
	got := make(chan []byte, 1)
	go func() {
		p, _ := io.ReadAll(peer)
		got <- p
	}()
	want := make([]byte, total)
	pattern(want, 0)
	for off := 0; off < total; off += 1000 {
		if _, err := dc.Write(want[off:min(off+1000, total)]); err != nil {
			t.Fatalf("Write at %d: %v", off, err)
		}
	}
	if err := dc.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	p := waitRes(t, got, "the peer's read")
	if !bytes.Equal(p, want) {
		t.Fatalf("peer got %d bytes, want %d intact", len(p), total)
	}
	i := dc.HostInfo()
	if i.TxRefused == 0 {
		t.Errorf("no transmit descriptor refused: the test did not test")
	}
	if i.DeviceErrors != 0 {
		t.Errorf("info %+v", i)
	}
	t.Logf("refused %d descriptors; %+v", i.TxRefused, a.Driver.Stats().TxRefusedNoResources)
}

// enginePair is plainHosts with A's device configured by cfg.
func enginePair(t *testing.T, cfg func(*nic.Config)) (a, b *Host) {
	return offloadPair(t, OffloadConfig{}, cfg, nil)
}

// TestPostBuffersPartialEndToEnd: a device that takes at most 3 user
// buffers per connection, while the host posts 8 at once (growRecv). The
// device accepts 3 of each POST_BUFFERS (NO_RESOURCES); the host posts the
// rest again as buffers come back, and 8 MiB arrive intact.
func TestPostBuffersPartialEndToEnd(t *testing.T) {
	const total = 8 << 20
	a, b := enginePair(t, func(c *nic.Config) { c.Engine.MaxUserBufs = 3 })
	dc, peer := delegatedPair(t, a, b, 5106)
	want := make([]byte, total)
	pattern(want, 0)
	go peer.Write(want)
	got := make([]byte, total)
	if _, err := io.ReadFull(dc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatal("stream corrupted")
	}
	s := a.Driver.Stats()
	if s.PostBuffersPartial == 0 || s.PostBuffersOverclaim != 0 || dc.HostInfo().DeviceErrors != 0 {
		t.Fatalf("stats %+v: want partial acceptances and no device error", s)
	}
	t.Logf("%d partial POST_BUFFERS", s.PostBuffersPartial)
}
