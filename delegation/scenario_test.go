package delegation

import (
	"testing"

	"github.com/emunic/emunic/rings"
)

// The notification ring is 4 entries deep and the hosts only look at it
// every few steps: the engines must hold notifications back, refuse payload
// before they would have to drop one, and still deliver every byte and the
// close.
func TestNotificationRingFull(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		name := "user"
		if legacy {
			name = "legacy"
		}
		t.Run(name, func(t *testing.T) {
			o := impaired(bulkOpts(transferSize()/8, legacy, 11))
			o.ntfDepth = 4
			o.cfg.PendingNotify = 16
			o.host[0].userSize, o.host[1].userSize = 4096, 4096
			s := newSim(t, o)
			s.drainEvery = [2]int{3, 5}
			if !legacy {
				s.drainEvery = [2]int{10, 17}
			}
			s.start()
			s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
			s.checkHashes()
			s.checkClean()
			for i := 0; i < 2; i++ {
				c := s.eng[i].Counters()
				if c.NotifyFull == 0 {
					t.Fatalf("engine %d: the ring never filled", i)
				}
				if s.eng[i].PendingNotifications() != 0 {
					t.Fatal("notifications left behind")
				}
				t.Logf("engine %d: ring full %d times, %d coalesced, %d segments refused for backpressure",
					i, c.NotifyFull, c.NotifyCoalesced, c.DropBackpressure)
			}
		})
	}
}

// Few legacy buffers, a host that consumes them late: payload with nowhere
// to go is dropped (counted) and retransmitted, never corrupted.
func TestLegacyBuffersExhausted(t *testing.T) {
	o := bulkOpts(transferSize()/8, true, 12)
	o.host[0].legacyBufs, o.host[1].legacyBufs = 3, 3
	s := newSim(t, o)
	s.drainEvery = [2]int{4, 7}
	s.start()
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
	s.checkHashes()
	if s.eng[0].Counters().DropNoBuffer == 0 || s.host[0].flags&rings.NtfUserBufReq == 0 {
		t.Fatal("legacy buffers never ran out")
	}
}

// Half-close, both ways round: one side sends and closes; the other keeps
// sending for a while after it received the FIN, then closes.
func TestHalfCloseBulk(t *testing.T) {
	for first := 0; first < 2; first++ {
		t.Run(string(rune('A'+first))+"_closes_first", func(t *testing.T) {
			o := impaired(bulkOpts(0, false, 13+uint64(first)))
			o.host[first].sendBytes = 1 << 20
			o.host[1-first].sendBytes = transferSize() / 8
			s := newSim(t, o)
			late := s.host[1-first]
			want := late.sendTotal
			late.sendTotal, late.closeAfter = 0, false // hold it back
			s.start()
			s.runUntil(func() bool { return late.gotFin }, 600e9)
			if s.eng[first].conns[0].state != rings.StateFinWait2 && s.eng[first].conns[0].state != rings.StateFinWait1 {
				t.Fatalf("closer in %v", s.eng[first].conns[0].state)
			}
			// Now the late side sends its stream, after the FIN.
			late.sendTotal, late.closeAfter = want, true
			late.pump()
			s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
			s.checkHashes()
			if s.host[first].recvd != want {
				t.Fatalf("the closer received %d of %d bytes after its FIN", s.host[first].recvd, want)
			}
			if s.eng[first].Counters().TimeWaitEntered != 1 || s.eng[1-first].Counters().TimeWaitEntered != 0 {
				t.Fatal("the wrong side went through TIME_WAIT")
			}
		})
	}
}

// The peer vanishes mid-transfer: both ends give up with NtfTimeout within
// the bound the RTO backoff sets.
func TestPeerVanishes(t *testing.T) {
	o := bulkOpts(transferSize()/8, false, 15)
	o.cfg.MaxRetries = 6
	s := newSim(t, o)
	var cut int64
	s.link.drop = func(int, []byte) bool { return cut != 0 }
	s.start()
	s.runUntil(func() bool { return s.host[1].recvd > s.host[0].sendTotal/2 }, 60e9)
	cut = s.now
	s.runUntil(func() bool { return s.host[0].closed && s.host[1].closed }, 120e9)
	for i := 0; i < 2; i++ {
		if !s.host[i].timeout || s.host[i].rst {
			t.Fatalf("%v", s.host[i])
		}
	}
	// 200 ms min RTO doubled 6 times: 200·(2^7-1) ms = 25.4 s, plus the
	// RTT-derived part of the first RTO.
	if d := s.now - cut; d > 30e9 {
		t.Fatalf("gave up after %.1f s", float64(d)/1e9)
	} else {
		t.Logf("both ends gave up %.1f s after the link died", float64(d)/1e9)
	}
	for i := 0; i < 2; i++ {
		if st := s.eng[i].Release(0); st != rings.StatusOK {
			t.Fatal(st)
		}
	}
}

// An idle connection with keepalive whose peer vanishes.
func TestKeepaliveVanish(t *testing.T) {
	o := bulkOpts(64<<10, false, 16)
	o.host[0].closeAfter, o.host[1].closeAfter = false, false
	o.pair.keepaliveMs = 2000
	s := newSim(t, o)
	s.start()
	s.runUntil(s.transferred, 60e9)
	// Idle for a while: keepalives are answered.
	end := s.now + 20e9
	s.runUntil(func() bool { return s.now >= end }, 30e9)
	if s.host[0].closed || s.eng[0].Counters().KeepaliveProbes == 0 {
		t.Fatalf("keepalive: %v probes %d", s.host[0], s.eng[0].Counters().KeepaliveProbes)
	}
	cut := s.now
	s.link.drop = func(int, []byte) bool { return true }
	s.runUntil(func() bool { return s.host[0].closed && s.host[1].closed }, 60e9)
	if !s.host[0].timeout || s.now-cut > 2e9+4*500e6+1e9 {
		t.Fatalf("keepalive timeout after %d ns: %v", s.now-cut, s.host[0])
	}
}

// The receiver's application stops reading (no credit returned) for
// seconds at a time: its window closes, the sender probes, the window
// reopens, the stream completes.
func TestZeroWindowBulk(t *testing.T) {
	o := impaired(bulkOpts(transferSize()/8, true, 17))
	o.host[1].sendBytes = 0
	o.pair.rcvBufB = 64 << 10
	o.pair.initialWnd = 512 // 64 KiB at scale 7: what the host advertised
	s := newSim(t, o)
	rx := s.host[1]
	// 20 ms of reading, then 1 s of not reading, over and over.
	s.hook = func() {
		phase := (s.now - 1e9) % 1020e6
		stalled := phase >= 20e6
		if stalled {
			s.hookAt = s.now - phase + 1020e6
		} else {
			s.hookAt = s.now - phase + 20e6
		}
		if stalled && !rx.noCredit {
			rx.noCredit = true
		} else if !stalled && rx.noCredit {
			rx.giveCredit()
		}
	}
	s.start()
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
	s.checkHashes()
	c := s.eng[0].Counters()
	if c.PersistProbes == 0 || s.eng[1].Counters().ZeroWindowsSent == 0 {
		t.Fatalf("no zero window: probes %d zero windows %d", c.PersistProbes, s.eng[1].Counters().ZeroWindowsSent)
	}
	t.Logf("%d persist probes, %d zero windows advertised, %.0f s", c.PersistProbes,
		s.eng[1].Counters().ZeroWindowsSent, float64(s.now)/1e9)
}
