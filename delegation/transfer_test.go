package delegation

import (
	"testing"
	"time"
)

// transferSize is the bytes sent each way by the bulk tests: 64 MiB, less
// with -short or the race detector.
func transferSize() int64 {
	if raceEnabled {
		return 4 << 20
	}
	if testing.Short() {
		return 16 << 20
	}
	return 64 << 20
}

func bulkOpts(size int64, legacy bool, seed uint64) simOpts {
	h := hostOpts{sendBytes: size, txBufs: 16, txSize: 64 << 10, userBufs: 16, userSize: 64 << 10,
		legacyOnly: legacy, legacyBufs: 512, legacySize: 2048, closeAfter: true, seed: seed}
	return simOpts{
		link: linkOpts{delay: 500e3, seed: seed},
		pair: pairOpts{issA: 0xFFFF0000, issB: 0x7FFFF000, wsA: 7, wsB: 7, sack: true, ts: true,
			tsA: 1000, tsB: 0xFFFFFF00, rcvBufA: 1 << 20, rcvBufB: 1 << 20},
		cfg:  Config{MaxConns: 4, TimeWait: 100e6},
		host: [2]hostOpts{h, h},
	}
}

func runBulk(t *testing.T, o simOpts) *sim {
	start := time.Now()
	s := newSim(t, o)
	s.start()
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
	s.checkHashes()
	s.checkClean()
	for i := 0; i < 2; i++ {
		if !s.host[i].gotFin {
			t.Fatalf("%s: no FIN", s.host[i].name)
		}
	}
	c0, c1 := s.eng[0].Counters(), s.eng[1].Counters()
	t.Logf("%d MiB each way in %.1f s simulated, %v wall; link: %d frames, %d lost, %d dup, %d reordered, %d tail drops",
		o.host[0].sendBytes>>20, float64(s.now-1e9)/1e9, time.Since(start).Round(time.Millisecond),
		s.link.frames, s.link.lost, s.link.dups, s.link.reordered, s.link.tailDrops)
	t.Logf("A: retrans %d segs, fast rtx %d, partial %d, RTO %d, OOO %d, dupacks %d, oow %d, paws %d, acks %d",
		c0.TxRetransSegs, c0.FastRetransmits, c0.PartialAcks, c0.RTOExpired, c0.OOOSegments, c0.DupAcksRx,
		c0.DropOutOfWindow, c0.DropPAWS, c0.AcksSent)
	t.Logf("B: retrans %d segs, fast rtx %d, partial %d, RTO %d, OOO %d, dupacks %d, oow %d, paws %d, acks %d",
		c1.TxRetransSegs, c1.FastRetransmits, c1.PartialAcks, c1.RTOExpired, c1.OOOSegments, c1.DupAcksRx,
		c1.DropOutOfWindow, c1.DropPAWS, c1.AcksSent)
	// Every out-of-order page went back to the slab.
	for i := 0; i < 2; i++ {
		if f := s.eng[i].pool.freePages(); f != len(s.eng[i].pool.mem)/oooPageSize {
			t.Fatalf("engine %d: %d of %d OOO pages free after close", i, f, len(s.eng[i].pool.mem)/oooPageSize)
		}
	}
	return s
}

func TestTransferUserBuffers(t *testing.T) {
	runBulk(t, bulkOpts(transferSize(), false, 1))
}

func TestTransferLegacyBuffers(t *testing.T) {
	runBulk(t, bulkOpts(transferSize(), true, 2))
}

func impaired(o simOpts) simOpts {
	o.link.loss = 0.02
	o.link.dup = 0.01
	o.link.reorder = 0.05
	o.link.jitter = 2e6
	o.link.rate = 125e6 // 1 Gbit/s bottleneck
	o.link.queue = 2e6
	return o
}

func TestTransferImpairedUserBuffers(t *testing.T) {
	runBulk(t, impaired(bulkOpts(transferSize(), false, 3)))
}

func TestTransferImpairedLegacyBuffers(t *testing.T) {
	runBulk(t, impaired(bulkOpts(transferSize(), true, 4)))
}

// Without SACK and timestamps: Karn RTT samples, plain duplicate ACKs.
func TestTransferImpairedNoOptions(t *testing.T) {
	o := impaired(bulkOpts(transferSize()/4, false, 5))
	o.pair.sack, o.pair.ts = false, false
	o.pair.wsA, o.pair.wsB = 0, 0
	o.pair.rcvBufA, o.pair.rcvBufB = 65535, 65535
	runBulk(t, o)
}

// Small MSS, mixed user/legacy, a bottleneck that overflows: congestion
// losses rather than random ones.
func TestTransferCongested(t *testing.T) {
	o := bulkOpts(transferSize()/4, false, 6)
	o.host[1].legacyOnly = true
	o.pair.mss = 536
	o.link.rate = 12.5e6 // 100 Mbit/s
	o.link.queue = 1e6
	o.link.delay = 5e6
	runBulk(t, o)
}

// The Chimney flow: payload lands in legacy buffers until the host, asked
// with NtfUserBufReq, posts user buffers; the stream continues in them.
func TestTransferLegacyThenUser(t *testing.T) {
	o := impaired(bulkOpts(transferSize()/8, false, 8))
	o.host[0].postOnRequest, o.host[1].postOnRequest = true, true
	s := runBulk(t, o)
	for i := 0; i < 2; i++ {
		c := s.eng[i].Counters()
		if c.LegacyUploads == 0 || c.UserBufsDone == 0 {
			t.Fatalf("engine %d: %d legacy uploads, %d user buffers", i, c.LegacyUploads, c.UserBufsDone)
		}
	}
}
