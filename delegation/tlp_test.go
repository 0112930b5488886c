package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/seqnum"
)

// handPeer is a rig's receiver played by the test: it keeps what arrived
// and answers with a cumulative ACK and SACK blocks (RFC 2018).
type handPeer struct {
	r      *rig
	rcvNxt seq
	above  scoreboard // what arrived above rcvNxt
}

// receive takes in the data of the frames the engine sent that drop does
// not lose.
func (p *handPeer) receive(o []outSeg, drop func(outSeg) bool) {
	for _, s := range o {
		if len(s.payload) == 0 || drop != nil && drop(s) {
			continue
		}
		end := s.seq.Add(uint32(len(s.payload)))
		if !end.GreaterThan(p.rcvNxt) {
			continue
		}
		p.above.add(seqnum.Max(s.seq, p.rcvNxt), end)
		for p.above.n > 0 && !p.rcvNxt.LessThan(p.above.r[0].start) {
			p.rcvNxt = seqnum.Max(p.rcvNxt, p.above.r[0].end)
			p.above.trim(p.rcvNxt)
		}
	}
}

// ack sends the engine an ACK of what arrived, with a window of wnd bytes
// past it.
func (p *handPeer) ack(wnd uint32) {
	var blocks []sackBlock
	for i := 0; i < p.above.n && i < 3; i++ {
		blocks = append(blocks, p.above.r[i])
	}
	p.r.in(pseg{seq: 5000, ack: uint32(p.rcvNxt), flags: hdr.TCPFlagACK, wnd: uint16(min(wnd>>2, 0xFFFF)), sack: blocks})
}

// tlpRig is a rig with a flight of 20 segments out, in slow start; at(i)
// is where the flight's segment i starts.
func tlpRig(t *testing.T) (r *rig, p *handPeer, at func(int) seq) {
	t.Helper()
	r, at0, ts, first := rackRig(t, 400)
	p = &handPeer{r: r, rcvNxt: seq(at0(0))}
	// The first flight acknowledged segment by segment: the window grows
	// to 2 × first, all of it sent.
	for i := 1; i <= first; i++ {
		r.in(pseg{seq: 5000, ack: at0(i), flags: hdr.TCPFlagACK, wnd: 0xFFFF, tsEcr: ts})
	}
	p.rcvNxt = seq(at0(first))
	if o := sentSeqs(r.take()); len(o) != 2*first {
		t.Fatalf("second flight: %d segments, want %d", len(o), 2*first)
	}
	return r, p, func(i int) seq { return seq(at0(first + i)) }
}

// TestTLPThenRecoveryCutsOnce: a flight's last 15 segments are lost; the
// tail loss probe's SACK starts a recovery, whose cut is the episode's one
// cut. New data sent in the recovery is acknowledged after it ends, past
// where SND.MAX stood at the probe: that ACK must not count as the probe's
// own verdict and cut again (RFC 8985 §7.4 applies to a probe no recovery
// followed). On a TAP at 2% loss, one recovery in four was followed by such
// a second cut, 0.49 of the window for one loss.
func TestTLPThenRecoveryCutsOnce(t *testing.T) {
	r, p, at := tlpRig(t)
	const mss = 1448
	// Segments 5..19 lost; the window ends at the flight's end, so nothing
	// new goes out and the probe is what finds the loss.
	p.receive([]outSeg{{segment: segment{seq: at(0), payload: make([]byte, 5*mss)}}}, nil)
	p.ack(at(20).Sub(at(5)))
	r.expectNone("new data past the peer's window")
	r.advance(r.e.NextDeadline() - r.now)
	probe := r.take()
	if len(probe) != 1 || probe[0].seq != at(19) || r.e.Counters().TailLossProbes != 1 {
		t.Fatalf("probe: %v, want segment 19 again", sentSeqs(probe))
	}
	r.advance(10e6)
	p.receive(probe, nil)
	p.ack(1 << 20)
	if !r.info().InRecovery {
		t.Fatalf("the probe's SACK started no recovery: %+v", r.info())
	}
	ssthresh := r.info().Ssthresh
	flight := float64(15 * mss)
	if want := uint32(flight * cubicBeta); ssthresh != want {
		t.Fatalf("ssthresh %d after the cut, want %d (β of the 15 segments in flight)", ssthresh, want)
	}
	// Everything from here on arrives, each frame acknowledged, until
	// the peer has 60 segments past the probe point.
	for i := 0; p.rcvNxt.LessThan(at(80)); i++ {
		o := r.take()
		if len(o) == 0 || i > 200 {
			t.Fatalf("stalled at %d (step %d): %+v", p.rcvNxt, i, r.info())
		}
		r.advance(10e6)
		for _, s := range o {
			p.receive([]outSeg{s}, nil)
			p.ack(1 << 20)
		}
	}
	c := r.e.Counters()
	if c.FastRetransmits != 1 || c.RTOExpired != 0 {
		t.Fatalf("%d recoveries, %d RTOs; want 1, 0", c.FastRetransmits, c.RTOExpired)
	}
	if got := r.info().Ssthresh; got != ssthresh {
		t.Errorf("ssthresh %d after the ACKs past the probe point, %d after the recovery's cut: cut twice", got, ssthresh)
	}
}

// TestTLPCutThenLossRecovers: the probe repairs a lost last segment, and
// the ACK past the probe point says so (RFC 8985 §7.4): one window cut, no
// recovery. A super-frame sent on the probe's ACK is lost in the same
// flight, and SACKs above it show the loss: a recovery resends it at once,
// without a second cut. The cut had set RFC 6582's recover, which barred
// that recovery: the hole waited for the RTO while new data went out and
// was SACKed (stalls of 14-40 ms on a 50 µs TAP).
func TestTLPCutThenLossRecovers(t *testing.T) {
	r, p, at := tlpRig(t)
	const mss = 1448
	// All but the last segment arrive; the window ends at the flight.
	p.receive([]outSeg{{segment: segment{seq: at(0), payload: make([]byte, 19*mss)}}}, nil)
	p.ack(mss)
	r.expectNone("new data past the peer's window")
	r.advance(r.e.NextDeadline() - r.now)
	probe := r.take()
	if len(probe) != 1 || probe[0].seq != at(19) {
		t.Fatalf("probe: %v, want segment 19 again", sentSeqs(probe))
	}
	// The probe repaired it: the ACK reaches the probe point, the window
	// opens, new data goes.
	r.advance(10e6)
	p.receive(probe, nil)
	p.ack(1 << 20)
	next := r.take()
	if len(next) < 8 {
		t.Fatalf("%d segments sent on the probe's ACK, want a flight", len(next))
	}
	// Of those, segment 22 is lost. The ACK for 20 and 21 passes the probe
	// point with no D-SACK: the probe's verdict, a cut.
	r.advance(10e6)
	lost := func(s outSeg) bool { return s.seq == at(22) }
	p.receive(next[:2], lost)
	p.ack(1 << 20)
	ssthresh := r.info().Ssthresh
	if ssthresh >= 1<<20 || r.info().InRecovery {
		t.Fatalf("after the ACK past the probe point: ssthresh %d, in recovery %v; want a cut and no recovery", ssthresh, r.info().InRecovery)
	}
	var resent bool
	for _, s := range next[3:] {
		p.receive([]outSeg{s}, lost)
		p.ack(1 << 20)
		for _, o := range r.take() {
			resent = resent || o.seq == at(22)
		}
	}
	c := r.e.Counters()
	if !resent || c.FastRetransmits != 1 || c.RTOExpired != 0 {
		t.Fatalf("segment 22 resent %v, %d recoveries, %d RTOs; want it resent by one recovery", resent, c.FastRetransmits, c.RTOExpired)
	}
	if got := r.info().Ssthresh; got != ssthresh {
		t.Errorf("ssthresh %d in the recovery, %d after the probe's cut: cut twice for one flight", got, ssthresh)
	}
}
