package delegation

import (
	"math"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// ccConn is a bare connection for the congestion control's arithmetic:
// 1000-byte segments, an RTT of rtt ns, in congestion avoidance at cwnd
// segments.
func ccConn(algo rings.CongestionControl, cwnd uint32, rtt int64) *conn {
	c := &conn{mss: 1000, cwnd: cwnd * 1000, ssthresh: cwnd * 1000, srtt: rtt, hasRTT: true}
	c.setCC(algo)
	return c
}

// afterLoss is ccConn at 100 segments after a loss with 100 in flight:
// ssthresh must be want segments, and cwnd is set to it, as recovery
// leaves it.
func afterLoss(t *testing.T, algo rings.CongestionControl, rtt int64, want uint32) *conn {
	t.Helper()
	c := ccConn(algo, 100, rtt)
	c.ccLoss(100 * 1000)
	if c.ssthresh != want*1000 {
		t.Fatalf("%v: ssthresh %d after a loss at 100 segments, want %d", algo, c.ssthresh, want*1000)
	}
	c.cwnd = c.ssthresh
	return c
}

// ackRounds acknowledges a window's worth of segments per RTT, one ACK per
// segment, for rounds RTTs from now, and returns the window (in segments)
// at the end of each round.
func ackRounds(c *conn, now *int64, rtt int64, rounds int) []float64 {
	var w []float64
	for range rounds {
		n := c.cwnd / c.mss
		for i := uint32(0); i < n; i++ {
			*now += rtt / int64(n)
			c.ccAck(*now, c.mss)
		}
		w = append(w, float64(c.cwnd)/float64(c.mss))
	}
	return w
}

// TestCubicWindow: after a loss at W_max = 100 segments on a path with a
// 100 ms RTT, CUBIC cuts to β = 0.7 of the flight, then follows
// W_cubic(t) = C (t - K)^3 + W_max (RFC 9438 §4.2), K = cbrt(W_max (1 - β)
// / C) = 4.22 s: concave up to W_max, flat around K, convex beyond. Its
// window at each time is the formula's one RTT ahead, or Reno's W_est
// where that is more (just past K, where the cubic is flat), within a
// segment or two.
func TestCubicWindow(t *testing.T) {
	const rtt = 100e6
	c := afterLoss(t, rings.CCCubic, rtt, 70)
	now := int64(1e9)
	start := now
	k := math.Cbrt(100 * (1 - cubicBeta) / cubicC)
	w := ackRounds(c, &now, rtt, 80)
	est := 70.0 // W_est: Reno's window, grown per RTT by α below W_max and by one above
	for i, got := range w {
		if est < 100 {
			est += cubicAlpha
		} else {
			est++
		}
		t2 := float64(int64(i+1)*rtt+rtt)/1e9 - k
		want := max(cubicC*t2*t2*t2+100, est)
		if math.Abs(got-want) > 2.5 {
			t.Errorf("round %d (t %.1f s): window %.1f segments, max(W_cubic(t+RTT), W_est) = %.1f", i, float64(now-start)/1e9, got, want)
		}
	}
	// Concave before K, convex after: the growth per round shrinks, then
	// grows.
	at := func(sec float64) int { return int(sec*1e9/rtt) - 1 }
	if d1, d2 := w[at(1)+1]-w[at(1)], w[at(4)+1]-w[at(4)]; d1 <= d2 {
		t.Errorf("growth %.2f at 1 s, %.2f near K: not concave", d1, d2)
	}
	if d1, d2 := w[at(4.3)+1]-w[at(4.3)], w[at(7.5)+1]-w[at(7.5)]; d2 <= d1 {
		t.Errorf("growth %.2f near K, %.2f at 7.5 s: not convex", d1, d2)
	}
	// A loss below the last W_max: fast convergence (§4.7) lowers W_max
	// to (1 + β)/2 of the window.
	c.ccLoss(90 * 1000)
	if want := 90 * (1 + cubicBeta) / 2 * 1000; math.Abs(c.cc.wMax-want) > 1 {
		t.Errorf("W_max %.0f after a loss at 90 segments below 100, want %.0f", c.cc.wMax, want)
	}
}

// TestCubicRenoFriendly: on a LAN (an RTT of 100 µs) the cubic grows far
// slower than Reno would, and CUBIC grows as W_est does (RFC 9438 §4.3):
// 3 (1 - β) / (1 + β) = 0.53 segments per RTT below W_max, one above.
func TestCubicRenoFriendly(t *testing.T) {
	const rtt = 100e3
	c := afterLoss(t, rings.CCCubic, rtt, 70)
	now := int64(1e9)
	w := ackRounds(c, &now, rtt, 40)
	if per := (w[39] - w[0]) / 39; math.Abs(per-cubicAlpha) > 0.1 {
		t.Errorf("%.2f segments per RTT below W_max, want %.2f", per, cubicAlpha)
	}
	w = ackRounds(c, &now, rtt, 100) // past W_max = 100
	if per := (w[99] - w[80]) / 19; per < 0.9 || per > 1.2 {
		t.Errorf("%.2f segments per RTT above W_max, want 1", per)
	}
}

// TestNewRenoWindow: NewReno, chosen for the connection, halves the flight
// at a loss and adds one segment per RTT (RFC 5681 §3.1).
func TestNewRenoWindow(t *testing.T) {
	const rtt = 100e6
	c := afterLoss(t, rings.CCNewReno, rtt, 50)
	now := int64(1e9)
	w := ackRounds(c, &now, rtt, 20)
	if per := (w[19] - w[0]) / 19; math.Abs(per-1) > 0.05 {
		t.Errorf("%.2f segments per RTT, want 1", per)
	}
}

// prrRig has 20 segments in flight (the initial window set to 20) with
// the connection's algorithm, the first of them lost.
func prrRig(t *testing.T, algo rings.CongestionControl) (*rig, func(int) uint32) {
	o := defaultRigOpts()
	o.pair.cc = algo
	o.pair.cwnd = 20 * 1448
	o.pair.initialWnd = 0xFFFF
	r := newRig(t, o)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	r.h.sendTotal = 60 * 1448
	r.h.txSize = 16 << 10
	r.h.start()
	if n := len(r.take()); n != 20 {
		t.Fatalf("%d segments in the first flight, want 20", n)
	}
	return r, func(i int) uint32 { return 1000 + uint32(i)*1448 }
}

// TestPRR is RFC 6937 §3.1's example: 20 segments in flight, the first
// lost, the other 19 each bringing a duplicate ACK that SACKs it. The
// first two ACKs send a new segment each (limited transmit, RFC 3042), the
// third (three segments SACKed) starts recovery with 22 in flight. With
// NewReno (ssthresh 11 segments) Proportional Rate Reduction then sends
// one segment for every two ACKs, beginning with the retransmission, so
// that the flight comes down to ssthresh evenly over the round trip (RFC
// 6675 sends nothing for half of it, RFC 6582's inflation then bursts);
// with CUBIC (β 0.7), seven for every ten. Recovery ends with cwnd =
// ssthresh.
func TestPRR(t *testing.T) {
	for _, tc := range []struct {
		algo rings.CongestionControl
		want int // segments sent for the 19 ACKs, the retransmission among them
	}{
		{rings.CCNewReno, 2 + 9}, // limited transmit, then ceil(17 × 11/22)
		{rings.CCCubic, 2 + 12},  // then ceil(17 × 15.4/22)
	} {
		t.Run(tc.algo.String(), func(t *testing.T) {
			r, at := prrRig(t, tc.algo)
			sent, most := 0, 0
			high := at(20)
			var perAck []int
			for k := 1; k <= 19; k++ {
				r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(1)), seq(at(1 + k))}}})
				n := 0
				for _, s := range r.take() {
					if len(s.payload) > 0 {
						n++
						high = max(high, uint32(s.seq)+uint32(len(s.payload)))
					}
				}
				sent += n
				most = max(most, n)
				perAck = append(perAck, n)
			}
			t.Logf("segments sent per ACK: %v", perAck)
			if !r.info().InRecovery {
				t.Fatal("not in recovery")
			}
			if sent < tc.want-1 || sent > tc.want+1 {
				t.Errorf("%d segments for 19 ACKs, want %d", sent, tc.want)
			}
			if most > 2 {
				t.Errorf("a burst of %d segments on one ACK", most)
			}
			// Never two ACKs in a row with nothing sent after the
			// retransmission: the ACK clock keeps going (RFC 6675
			// would wait out half the round trip).
			first := 0
			for first < len(perAck) && perAck[first] == 0 {
				first++
			}
			for i := first; i+2 < len(perAck); i++ {
				if perAck[i]+perAck[i+1]+perAck[i+2] == 0 {
					t.Errorf("nothing sent on ACKs %d-%d: %v", i+1, i+3, perAck)
					break
				}
			}
			ss := r.info().Ssthresh
			r.in(pseg{seq: 5000, ack: high, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
			if i := r.info(); i.InRecovery || i.Cwnd != ss {
				t.Errorf("after the full ACK: in recovery %v, cwnd %d, ssthresh %d", i.InRecovery, i.Cwnd, ss)
			}
		})
	}
}

// TestNagle: with Nagle's algorithm on (ConnNagle), a short piece of new
// data waits while anything is unacknowledged and goes with the ACK; full
// segments are not held, nor is the FIN's. UPDATE turns it off, and what
// it held goes at once.
func TestNagle(t *testing.T) {
	o := defaultRigOpts()
	o.pair.nagle = true
	r := newRig(t, o)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if !r.info().Nagle {
		t.Fatal("ConnNagle not taken")
	}
	queue := func(n int) {
		r.h.txSize = uint32(n)
		r.h.sendTotal += int64(n)
		r.h.pump()
	}
	payloads := func() (n []int) {
		for _, s := range r.take() {
			if len(s.payload) > 0 {
				n = append(n, len(s.payload))
			}
		}
		return n
	}
	queue(5) // nothing in flight: goes
	if got := payloads(); len(got) != 1 || got[0] != 5 {
		t.Fatalf("first write sent %v", got)
	}
	queue(6) // the first 5 bytes unacknowledged: held
	queue(5)
	if got := payloads(); len(got) != 0 {
		t.Fatalf("sent %v with data unacknowledged", got)
	}
	r.in(pseg{seq: 5000, ack: 1005, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if got := payloads(); len(got) != 1 || got[0] != 11 {
		t.Fatalf("the ACK released %v, want one segment of both writes", got)
	}
	// A full segment is not held.
	queue(3000)
	if got := payloads(); len(got) == 0 || got[0] != int(r.info().SegPayload) {
		t.Fatalf("full segments held: sent %v", got)
	}
	// Off: the held remainder goes.
	u := rings.ConnUpdate{Flags: rings.UpdNagle}
	if st := r.e.Update(0, &u); st != rings.StatusOK {
		t.Fatal(st)
	}
	if got := payloads(); len(got) != 1 {
		t.Fatalf("Nagle off sent %v, want the held remainder", got)
	}
	if r.info().Nagle {
		t.Fatal("still on")
	}
}

// TestUpdateCongestion: UPDATE changes a connection's algorithm; an
// unknown one, at OFFLOAD or UPDATE, is BAD_PARAM and changes nothing; a
// snapshot carries the choice and Nagle.
func TestUpdateCongestion(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	if got := r.info().Congestion; got != rings.CCCubic {
		t.Fatalf("default %v, want cubic", got)
	}
	u := rings.ConnUpdate{Flags: rings.UpdCongestion | rings.UpdNagle, Congestion: rings.CCNewReno, Nagle: true}
	if st := r.e.Update(0, &u); st != rings.StatusOK {
		t.Fatal(st)
	}
	var snap rings.ConnState
	if st := r.e.Snapshot(0, &snap); st != rings.StatusOK || snap.Congestion != rings.CCNewReno || snap.Flags&rings.ConnNagle == 0 {
		t.Fatalf("snapshot %v: congestion %v, flags %v", st, snap.Congestion, snap.Flags)
	}
	u = rings.ConnUpdate{Flags: rings.UpdCongestion, Congestion: 7}
	if st := r.e.Update(0, &u); st != rings.StatusBadParam {
		t.Fatalf("unknown algorithm: %v", st)
	}
	if got := r.info().Congestion; got != rings.CCNewReno {
		t.Fatalf("a refused UPDATE changed the algorithm to %v", got)
	}
	st := r.st
	st.Congestion = 2
	st.LocalPort++
	if got := r.e.Offload(1, &st); got != rings.StatusBadParam {
		t.Fatalf("OFFLOAD with an unknown algorithm: %v", got)
	}
	if name, ok := rings.ParseCongestionControl("newreno"); !ok || name != rings.CCNewReno {
		t.Fatal("ParseCongestionControl")
	}
	if _, ok := rings.ParseCongestionControl("bbr"); ok {
		t.Fatal("bbr parsed")
	}
}

// TestSpuriousRecoveryUndo: the first segment of a flight is reordered,
// not lost. Three segments SACKed above it start a fast recovery, which
// resends it and cuts the window; then the original arrives (the full ACK)
// and so does the copy, which the peer reports with a D-SACK below its
// cumulative ACK (RFC 2883 §4). Every byte the recovery resent was
// D-SACKed: the window goes back to what it was (RFC 2883 §5). A D-SACK
// for only part of what was resent undoes nothing.
func TestSpuriousRecoveryUndo(t *testing.T) {
	for _, partial := range []bool{false, true} {
		r, at := prrRig(t, rings.CCCubic)
		before := r.info().Cwnd
		for k := 1; k <= 3; k++ {
			r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(1)), seq(at(1 + k))}}})
		}
		if !r.info().InRecovery {
			t.Fatal("no recovery")
		}
		high := at(0)
		resent := 0
		for _, s := range r.take() {
			if len(s.payload) > 0 {
				if uint32(s.seq) == at(0) {
					resent++
				}
				high = max(high, uint32(s.seq)+uint32(len(s.payload)))
			}
		}
		if resent != 1 {
			t.Fatalf("head resent %d times", resent)
		}
		if partial {
			// A second hole resent too (the peer SACKs around it),
			// which no D-SACK will report.
			r.in(pseg{seq: 5000, ack: at(0), flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(6)), seq(at(12))}, {seq(at(1)), seq(at(5))}}})
			for _, s := range r.take() {
				if len(s.payload) > 0 {
					high = max(high, uint32(s.seq)+uint32(len(s.payload)))
				}
			}
		}
		cut := r.info().Cwnd
		r.in(pseg{seq: 5000, ack: high, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
		r.in(pseg{seq: 5000, ack: high, flags: hdr.TCPFlagACK, wnd: 0xFFFF, sack: []sackBlock{{seq(at(0)), seq(at(1))}}})
		i, c := r.info(), r.e.Counters()
		if partial {
			if c.SpuriousRecoveries != 0 || i.Cwnd >= before {
				t.Errorf("partial D-SACK: %d undone, window %d (before %d)", c.SpuriousRecoveries, i.Cwnd, before)
			}
			continue
		}
		if c.SpuriousRecoveries != 1 || i.Cwnd < before || i.InRecovery {
			t.Errorf("undone %d, window %d after the D-SACK, %d before the recovery, %d in it; in recovery %v", c.SpuriousRecoveries, i.Cwnd, before, cut, i.InRecovery)
		}
	}
}

// TestDSACKSent: a segment the receiver already has (its ACK was lost, or
// the sender resent it needlessly) is acknowledged with a D-SACK for it as
// the first SACK block (RFC 2883 §4), once; the ACK after has none.
func TestDSACKSent(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.data(make([]byte, 1000), hdr.TCPFlagACK|hdr.TCPFlagPSH)
	r.take()
	// The same 1000 bytes again.
	r.peerSeq -= 1000
	r.data(make([]byte, 1000), hdr.TCPFlagACK|hdr.TCPFlagPSH)
	acks := r.take()
	if len(acks) != 1 || acks[0].nSACK != 1 || uint32(acks[0].sack[0].start) != 5000 || uint32(acks[0].sack[0].end) != 6000 || uint32(acks[0].ack) != 6000 {
		t.Fatalf("ACK of a duplicate: %+v", acks)
	}
	r.data(make([]byte, 100), hdr.TCPFlagACK|hdr.TCPFlagPSH)
	r.advance(r.e.cfg.DelayedAck + 1)
	for _, a := range r.take() {
		if a.nSACK != 0 {
			t.Fatalf("a D-SACK reported twice: %+v", a)
		}
	}
}

// TestPRRStretchAck: below ssthresh, PRR-SSRB lets recovery send twice
// what an ACK delivered when that ACK covers a super-frame (a GRO or LRO
// receiver's one ACK for 44 segments), slow start's pace per segment, not
// one segment more than it delivered; never past ssthresh, and RFC 6937's
// segment more without SACK, where what an ACK delivered is a guess. Above
// ssthresh the proportional share is unchanged.
func TestPRRStretchAck(t *testing.T) {
	const mss = 1000
	recovering := func(sack bool) *conn {
		c := &conn{e: &Engine{}, mss: mss, sackOK: sack, ssthresh: 70 * mss}
		c.prrStart(100 * mss)
		return c
	}
	for _, tc := range []struct {
		name            string
		sack            bool
		delivered, pipe uint32
		want            uint32
	}{
		{"a super-frame delivered, pipe empty", true, 44 * mss, 0, 70 * mss},       // 88 segments allowed, ssthresh caps
		{"a super-frame delivered, pipe half", true, 20 * mss, 35 * mss, 35 * mss}, // 40 allowed, 35 to ssthresh
		{"stretch ACK", true, 10 * mss, 0, 20 * mss},
		{"one segment", true, mss, 0, 2 * mss},
		{"without SACK", false, 10 * mss, 0, 11 * mss},
		{"above ssthresh", true, 10 * mss, 80 * mss, 7 * mss}, // ceil(10 × 70/100)
	} {
		c := recovering(tc.sack)
		c.prrAck(tc.delivered, tc.pipe)
		if c.cc.sndcnt != tc.want || c.cwnd != tc.pipe+tc.want {
			t.Errorf("%s: sndcnt %d, cwnd %d; want %d, %d", tc.name, c.cc.sndcnt, c.cwnd, tc.want, tc.pipe+tc.want)
		}
	}
}
