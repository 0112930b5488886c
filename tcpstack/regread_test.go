package tcpstack

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// plainHosts builds hosts A and B, each on its own in-process NIC, on one
// wire; A delegates with cfg.
func plainHosts(t testing.TB, cfg OffloadConfig) (a, b *Host) {
	return offloadPair(t, cfg, nil, nil)
}

// delegatedPair dials a delegated connection from A to a netstack
// listener of B on port.
func delegatedPair(t testing.TB, a, b *Host, port uint16) (*DelegatedConn, net.Conn) {
	t.Helper()
	acc := make(chan net.Conn, 1)
	l, err := b.Listen(port)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err == nil {
			acc <- c
		}
		l.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dc, err := a.DialOffload(ctx, netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), port))
	if err != nil {
		t.Fatal(err)
	}
	select {
	case peer := <-acc:
		t.Cleanup(func() { dc.Close(); peer.Close() })
		return dc, peer
	case <-ctx.Done():
		t.Fatal("no connection accepted")
	}
	return nil, nil
}

// pattern fills p with the stream's bytes from offset off.
func pattern(p []byte, off int) {
	for i := range p {
		p[i] = byte((off + i) * 7 / 13)
	}
}

// TestRegisteredReadZeroCopy: a reader keeping registered buffers posted
// gets the peer's bytes in them, and the host CPU copies none of them.
// The host's own count of copies (HostCopyBytes) is checked against the
// device's independent count of where it placed the bytes: every byte in
// a user buffer (UserBufsDone, RxBytes), none in a legacy buffer.
//
// The peer sends in rounds of 16 KiB, each after the reader has taken the
// last: a round is at most 12 segments, so even if every one ended a
// buffer (the device completes a user buffer on PSH), the 16 posted
// buffers never run out. (Bytes placed in a user buffer do not close the
// receive window: a reader that lets its posted buffers run out gets the
// rest through legacy buffers, copied, as BenchmarkRegisteredRead
// measures.)
func TestRegisteredReadZeroCopy(t *testing.T) {
	const bufSize, nbufs, round, total = 64 << 10, 16, 16 << 10, 4 << 20
	a, b := plainHosts(t, OffloadConfig{})
	dc, peer := delegatedPair(t, a, b, 5101)
	for range nbufs {
		rb, err := a.NewRegisteredBuf(bufSize)
		if err != nil {
			t.Fatal(err)
		}
		if err := dc.PostRegistered(rb); err != nil {
			t.Fatal(err)
		}
	}
	testutil.WaitFor(t, "the buffers posted", func() bool {
		s := a.Driver.Stats()
		return s.UserBufPosted == nbufs && s.CmdInFlight == 0
	})
	dev0, err := a.Counters()
	if err != nil {
		t.Fatal(err)
	}
	copies0 := a.Driver.Stats().HostCopyBytes

	go func() {
		p, ack := make([]byte, round), make([]byte, 1)
		for off := 0; off < total; off += len(p) {
			pattern(p, off)
			if _, err := peer.Write(p); err != nil {
				return
			}
			if _, err := io.ReadFull(peer, ack); err != nil {
				return
			}
		}
	}()
	want := make([]byte, bufSize)
	var back *RegisteredBuf
	reads, got := 0, 0
	for got < total {
		p, in, err := dc.ReadRegistered(back)
		if err != nil {
			t.Fatalf("after %d bytes: %v", got, err)
		}
		if in == nil {
			t.Fatalf("after %d bytes: %d bytes not in a registered buffer", got, len(p))
		}
		pattern(want[:len(p)], got)
		if !bytes.Equal(p, want[:len(p)]) {
			t.Fatalf("bytes %d..%d wrong", got, got+len(p))
		}
		got += len(p)
		reads++
		back = in
		if got%round == 0 {
			if _, err := dc.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
		}
	}
	s := a.Driver.Stats()
	// The only bytes the host copied are the reader's one-byte
	// acknowledgements, into the send area.
	if d := s.HostCopyBytes - copies0; d != total/round {
		t.Errorf("host copied %d bytes, want the %d acknowledgement bytes", d, total/round)
	}
	if s.ZeroCopyBytes != total {
		t.Errorf("ZeroCopyBytes %d, want %d", s.ZeroCopyBytes, total)
	}
	testutil.WaitFor(t, "the device's counters", func() bool {
		dev, err := a.Counters()
		return err == nil && dev.Engine.RxBytes-dev0.Engine.RxBytes >= total
	})
	dev, _ := a.Counters()
	if d := dev.Engine.LegacyUploads - dev0.Engine.LegacyUploads; d != 0 {
		t.Errorf("device uploaded %d legacy buffers", d)
	}
	if d := dev.Engine.UserBufsDone - dev0.Engine.UserBufsDone; d != uint64(reads) {
		t.Errorf("device completed %d user buffers, the reader read %d", d, reads)
	}
	if dc.HostInfo().DeviceErrors != 0 || s.NtfOutOfSequence+s.NtfImpossibleSeq != 0 {
		t.Errorf("device errors: %+v", s)
	}
	// A buffer the connection holds cannot be freed; the one the last
	// read returned can.
	if err := back.Free(); err != nil {
		t.Errorf("Free of a returned buffer: %v", err)
	}
	dc.mu.Lock()
	held := dc.reg.bufs[0]
	dc.mu.Unlock()
	if err := held.Free(); !errors.Is(err, ErrRegisteredBusy) {
		t.Errorf("Free of a posted buffer: %v", err)
	}
}
