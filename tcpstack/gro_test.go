package tcpstack

import (
	"context"
	"testing"
	"time"
)

// TestGRO: a bulk stream on netstack reaches the receiving host's netstack
// coalesced: the driver's interrupt handler merges the segments of a
// batch of legacy frames into fewer, larger packets (RxGROMerged counts
// the frames merged, RxGROHeaderBytes their headers), every byte intact
// both ways; with DriverConfig.NoGRO nothing is merged.
func TestGRO(t *testing.T) {
	for _, off := range []bool{false, true} {
		a, b, _ := gateHosts(t, nil, func(c *HostConfig) { c.Driver.NoGRO = off })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		nc, peer := dialAccepted(t, ctx, a.Dial, b, 5050, listenAll(t, b.Listen, 5050))
		transfer(t, peer, nc, 8<<20) // b -> a: a's driver coalesces
		transfer(t, nc, peer, 1<<20)
		cancel()
		nc.Close()
		s := a.Driver.Stats()
		t.Logf("GRO %v: %d frames received, %d merged, %d header bytes shed", !off, s.RxFrames, s.RxGROMerged, s.RxGROHeaderBytes)
		switch {
		case off && (s.RxGROMerged != 0 || s.RxGROHeaderBytes != 0):
			t.Errorf("GRO off: %d merged", s.RxGROMerged)
		case !off && s.RxGROMerged < s.RxFrames/4:
			t.Errorf("%d of %d frames merged, want most of a bulk stream's", s.RxGROMerged, s.RxFrames)
		case !off && s.RxGROHeaderBytes < 40*s.RxGROMerged:
			t.Errorf("%d header bytes shed by %d merged frames (at least 40 each)", s.RxGROHeaderBytes, s.RxGROMerged)
		}
	}
}
