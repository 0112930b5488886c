package delegation

import (
	"testing"
)

// BenchmarkEngineToEngine: bulk transfer between two engines over a clean
// in-memory link (no delay), in both directions at once, through user
// buffers. Bytes per op = 64 KiB each way. The hosts neither generate nor
// hash the bytes (the transfer tests do), so this is the engines, the
// simulated link and the test host's bookkeeping.
func BenchmarkEngineToEngine(b *testing.B) {
	benchTransfer(b, false, true)
}

// BenchmarkEngineToEngineLegacy: one direction, legacy buffers (one
// notification and one credit UPDATE per segment).
func BenchmarkEngineToEngineLegacy(b *testing.B) {
	benchTransfer(b, true, false)
}

func benchTransfer(b *testing.B, legacy, both bool) {
	const chunk = 64 << 10
	const warm = 4 << 20
	total := int64(b.N)*chunk + warm
	o := bulkOpts(total, legacy, 7)
	o.link.delay = 10e3 // 10 µs: small, but events stay separate steps
	o.host[0].closeAfter, o.host[1].closeAfter = false, false
	if !both {
		o.host[1].sendBytes = 0
	}
	s := newSim(b, o)
	s.host[0].noData, s.host[1].noData = true, true
	s.noCheck = true
	s.start()
	// Warm the link's frame pool and the hosts' queues.
	for s.host[1].recvd < warm {
		if !s.step() {
			b.Fatal("stalled in warm-up")
		}
	}
	b.SetBytes(chunk)
	b.ReportAllocs()
	b.ResetTimer()
	for !s.transferred() {
		if !s.step() {
			b.Fatalf("stalled\n%v\n%v", s.host[0], s.host[1])
		}
	}
	b.StopTimer()
	s.checkClean()
}
