package rings

import (
	"sync/atomic"
	"testing"
)

// TestReadStatAreaUnderConstantPublication: a writer republishes the area
// over and over, every counter word the same value each time, with a short
// pause between publications (the device publishes at its idle points,
// never back to back); the reader always gets a consistent copy (never a
// mix of two publications) and never gives up.
func TestReadStatAreaUnderConstantPublication(t *testing.T) {
	lay := StatAreaLayout{EngineN: 56, OccN: 7, QPN: 14}
	area := make([]byte, lay.QPOff(256)) // 8-byte aligned: a Go allocation of this size is
	hdr := StatAreaHeader{EngineN: 56, OccN: 7, QPN: 14, QPCap: 256, RingN: RingCounterCount, NumQPs: 3}
	used := lay.QPOff(3)
	var stop atomic.Bool
	done := make(chan struct{})
	go func() {
		defer close(done)
		for gen := uint64(1); !stop.Load(); gen++ {
			AtomicStore64(area, SaOffGen, 2*gen-1)
			tmp := make([]byte, StatAreaHeaderSize)
			h := hdr
			h.Encode(tmp)
			for off := 8; off < StatAreaHeaderSize; off += 8 {
				AtomicStore64(area, off, le.Uint64(tmp[off:]))
			}
			for off := StatAreaHeaderSize; off < used; off += 8 {
				AtomicStore64(area, off, gen)
			}
			AtomicStore64(area, SaOffGen, 2*gen)
			for j := 0; j < 2000; j++ { // the unit's work between two idle points
				_ = AtomicLoad64(area, SaOffFlags)
			}
		}
	}()
	dst := make([]byte, len(area))
	for i := 0; i < 2000; i++ {
		h, err := ReadStatArea(area, dst)
		if err != nil {
			t.Fatal(err)
		}
		if h.Gen == 0 {
			continue
		}
		want := h.Gen / 2
		for off := StatAreaHeaderSize; off < used; off += 8 {
			if v := le.Uint64(dst[off:]); v != want {
				t.Fatalf("torn copy: word at %#x is %d, the publication %d", off, v, want)
			}
		}
	}
	stop.Store(true)
	<-done
}
