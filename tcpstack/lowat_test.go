package tcpstack

import (
	"testing"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// TestReadLowWaterEndToEnd: on a real device, a reader with a receive
// low-water mark of 100,000 bytes gets them in one Read although the peer
// sends them in 10,000-byte writes (each ends with PSH): the host armed the
// sequence threshold (SET_THRESHOLDS) and the device raised SEQ_THRESHOLD.
func TestReadLowWaterEndToEnd(t *testing.T) {
	a, b := plainHosts(t, OffloadConfig{})
	dc, peer := delegatedPair(t, a, b, 5102)
	if err := dc.SetReadLowWater(100_000); err != nil {
		t.Fatal(err)
	}
	res := make(chan readRes, 1)
	go func() {
		buf := make([]byte, 200_000)
		n, err := dc.Read(buf)
		res <- readRes{n, err}
	}()
	// The reader must be waiting (and so have armed the threshold)
	// before the data comes: a Read that finds the 100,000 bytes
	// already in has nothing to arm.
	testutil.WaitBlocked(t, "github.com/emunic/emunic/tcpstack.(*DelegatedConn).Read", 1)
	go func() {
		p := make([]byte, 10_000)
		for i := 0; i < 10; i++ {
			pattern(p, i*len(p))
			if _, err := peer.Write(p); err != nil {
				return
			}
		}
	}()
	got := waitRes(t, res, "Read")
	if got.err != nil || got.n != 100_000 {
		t.Fatalf("Read %d, %v; want the 100,000 bytes at once", got.n, got.err)
	}
	// The legacy upload that completes the 100,000 bytes wakes the
	// reader as well, and the device raises SEQ_THRESHOLD in a
	// notification of its own right after it: the reader can return
	// before the host has taken that one.
	testutil.WaitFor(t, "a SEQ_THRESHOLD notification", func() bool {
		return a.Driver.NotificationCounts().DelegatedFlag(rings.NtfSeqThreshold) > 0
	})
	if i := dc.HostInfo(); i.DeviceErrors != 0 {
		t.Fatalf("info %+v", i)
	}
}
