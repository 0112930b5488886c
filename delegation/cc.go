package delegation

import (
	"math"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/seqnum"
)

// Congestion control: the window's growth between losses and its cut at a
// loss are the connection's algorithm (the state block's Congestion byte,
// changed with UPDATE): CUBIC (RFC 9438), the default as in Linux, or
// NewReno (RFC 5681 byte counting, RFC 6582). How the window comes down
// through a recovery is the same for both: Proportional Rate Reduction
// (RFC 6937).
//
// All of it runs per ACK, in floating point where CUBIC's formulas are
// (no allocation, a cube root per loss).

// CUBIC's constants (RFC 9438 §4.1, §5): the multiplicative decrease and
// the cubic's scale in segments per second cubed.
const (
	cubicBeta = 0.7
	cubicC    = 0.4
	// The Reno-friendly region's additive increase per RTT, in segments
	// (RFC 9438 §4.3): what makes CUBIC's average window equal Reno's
	// under the same loss rate, with CUBIC's gentler decrease.
	cubicAlpha = 3 * (1 - cubicBeta) / (1 + cubicBeta)
)

// ccState is a connection's congestion control and recovery state beside
// cwnd and ssthresh.
type ccState struct {
	algo  rings.CongestionControl
	nagle bool // Nagle's algorithm on (output.go)

	// CUBIC (RFC 9438 §4). Windows in bytes.
	wMax     float64 // the window before the last reduction
	epoch    int64   // start of the congestion-avoidance epoch (0: none yet)
	k        float64 // seconds from the epoch until the cubic reaches wMax
	wEst     float64 // the Reno-friendly estimate (§4.3)
	frac     float64 // growth not yet whole bytes of cwnd
	undoWMax float64 // wMax before an RTO that may prove spurious

	// Undoing a fast recovery the peer shows was needless (RFC 2883 §5):
	// the window before it, and the bytes it resent that no D-SACK has
	// yet reported as duplicates. At zero, every retransmission was one:
	// the "loss" was reordering.
	recUndo         bool
	recUndoCwnd     uint32
	recUndoSsthresh uint32
	recUndoWMax     float64
	recUndoLeft     uint32
	recUndoLo       seq // the recovery's sequence space, [SND.UNA, SND.MAX) when it began:
	recUndoHi       seq // only a D-SACK inside it reports one of its retransmissions

	// Proportional Rate Reduction (RFC 6937) through a recovery.
	recoverFS    uint32 // bytes in flight when recovery began
	prrDelivered uint32 // bytes the peer received since (cumulatively or SACKed)
	prrOut       uint32 // bytes sent since
	sndcnt       uint32 // bytes recovery may send now: set per ACK, spent by emit
}

// setCC sets the algorithm; the window goes on from where it is (a CUBIC
// epoch starts afresh at the next ACK, with the present window as wMax).
func (c *conn) setCC(algo rings.CongestionControl) {
	c.cc.algo = algo
	c.cc.epoch = 0
	c.cc.wMax = float64(c.cwnd)
}

// ccLoss is a congestion event: fast retransmit (or SACK evidence of loss)
// or a retransmission timeout. It sets ssthresh from the bytes in flight
// (RFC 5681's FlightSize, which an application-limited sender's cwnd
// would overstate) and starts a new CUBIC epoch at the next increase.
func (c *conn) ccLoss(flight uint32) {
	mss := c.maxPayload()
	if c.cc.algo == rings.CCNewReno {
		c.ssthresh = max(flight/2, 2*mss)
		return
	}
	w := float64(flight)
	if w < c.cc.wMax {
		// Fast convergence (RFC 9438 §4.7): a flow whose window keeps
		// falling short of its last maximum releases bandwidth to a
		// newcomer sooner.
		c.cc.wMax = w * (1 + cubicBeta) / 2
	} else {
		c.cc.wMax = w
	}
	c.ssthresh = max(uint32(w*cubicBeta), 2*mss)
	c.cc.epoch = 0
}

// ccAck grows the window for acked bytes newly acknowledged outside
// recovery: slow start below ssthresh (RFC 5681 §3.1, ABC with L = 1),
// then the algorithm's congestion avoidance.
func (c *conn) ccAck(now int64, acked uint32) {
	mss := c.maxPayload()
	if c.cwnd < c.ssthresh {
		c.cwnd += min(acked, mss)
	} else if c.cc.algo == rings.CCNewReno {
		c.caAcked += acked // byte counting: one MSS per window acknowledged
		if c.caAcked >= c.cwnd {
			c.caAcked -= c.cwnd
			c.cwnd += mss
		}
	} else {
		c.cubicAck(now, acked)
	}
	c.cwnd = min(c.cwnd, maxWindowBytes)
}

// cubicAck is CUBIC's congestion avoidance (RFC 9438 §4.2-4.4): the window
// follows W_cubic(t) = C (t - K)^3 + W_max, one RTT ahead, and never less
// than the Reno-friendly estimate W_est.
func (c *conn) cubicAck(now int64, acked uint32) {
	cc := &c.cc
	m := float64(c.maxPayload())
	cw := float64(c.cwnd)
	if cc.epoch == 0 {
		cc.epoch = now
		cc.wEst, cc.frac = cw, 0
		if cc.wMax > cw {
			cc.k = math.Cbrt((cc.wMax - cw) / m / cubicC)
		} else {
			cc.k, cc.wMax = 0, cw
		}
	}
	rtt := int64(0)
	if c.hasRTT {
		rtt = c.srtt
	}
	t := float64(now-cc.epoch+rtt)/1e9 - cc.k
	target := cc.wMax + cubicC*t*t*t*m
	target = min(max(target, cw), 1.5*cw) // §4.2: between cwnd and 1.5 cwnd
	alpha := cubicAlpha
	if cc.wEst >= cc.wMax {
		alpha = 1 // past the old maximum, Reno's own increase (§4.3)
	}
	cc.wEst += alpha * m * float64(acked) / cw
	if cc.wEst > target {
		// The Reno-friendly region: at the short RTTs of a LAN the
		// cubic grows slower than Reno would, and CUBIC is Reno.
		cc.frac += cc.wEst - cw
	} else {
		cc.frac += (target - cw) * float64(acked) / cw
	}
	if cc.frac >= 1 {
		n := uint32(min(cc.frac, float64(maxWindowBytes)))
		c.cwnd += n
		cc.frac -= float64(n)
	}
}

// recoveryUndoStart keeps the congestion state before a fast recovery
// (called before ccLoss cuts it), to be put back if D-SACKs show every
// retransmission of the recovery needless.
func (c *conn) recoveryUndoStart() {
	cc := &c.cc
	cc.recUndo = c.sackOK
	cc.recUndoCwnd, cc.recUndoSsthresh, cc.recUndoWMax = c.cwnd, c.ssthresh, cc.wMax
	cc.recUndoLeft = 0
	cc.recUndoLo, cc.recUndoHi = c.sndUna, c.sndMax
}

// recoveryResent counts n bytes a fast recovery resent (emit).
func (c *conn) recoveryResent(n uint32) {
	if c.cc.recUndo {
		c.cc.recUndoLeft += n
	}
}

// dsack takes a D-SACK of [start, end) (RFC 2883 §4: the first block,
// below the cumulative ACK or inside the second block). When the D-SACKs
// have covered everything the last fast recovery resent, the recovery was
// spurious (the segments were reordered, not lost): the window goes back
// to what it was, as Linux's tcp_try_undo_dsack does. A timeout since, or
// another recovery, ends the chance. Only the part of a D-SACK inside the
// recovery's own sequence space counts (Linux: above its undo_marker): one
// for a needless resend of an earlier episode, or for a tail probe before
// it, arriving during this one had counted toward it, and on a path that
// loses 2% in bursts half the recoveries were undone although the wire had
// lost what they resent.
func (c *conn) dsack(start, end seq) {
	cc := &c.cc
	if !cc.recUndo || cc.recUndoLeft == 0 {
		return
	}
	lo, hi := seqnum.Max(start, cc.recUndoLo), seqnum.Min(end, cc.recUndoHi)
	if !lo.LessThan(hi) {
		return
	}
	n := hi.Sub(lo)
	cc.recUndoLeft -= min(n, cc.recUndoLeft)
	if cc.recUndoLeft > 0 {
		return
	}
	cc.recUndo = false
	c.e.ctr.SpuriousRecoveries++
	c.cwnd = max(c.cwnd, cc.recUndoCwnd)
	c.ssthresh = max(c.ssthresh, cc.recUndoSsthresh)
	cc.wMax, cc.epoch = max(cc.wMax, cc.recUndoWMax), 0
	if c.inRecovery {
		// Nothing was lost: recovery ends here.
		c.inRecovery = false
		c.dupAcks = 0
		c.recover = c.sndUna - 1
	}
	// What RACK marked lost was reordered: not to be resent.
	c.setLost(false)
}

// prrStart begins a recovery's rate reduction; flight is what was
// outstanding.
func (c *conn) prrStart(flight uint32) {
	c.cc.recoverFS = max(flight, 1)
	c.cc.prrDelivered, c.cc.prrOut, c.cc.sndcnt = 0, 0, 0
}

// prrAck is RFC 6937 §3 on an ACK in recovery that told of delivered
// bytes: while the data in the network (pipe) is above ssthresh, recovery
// sends ssthresh/RecoverFS of what is delivered, so the window comes down
// to ssthresh smoothly over one round trip instead of stopping dead for
// half of it (RFC 6675) or bursting (RFC 6582's inflation); at or below,
// it grows back toward ssthresh no faster than slow start (PRR-SSRB).
//
// Slow start's pace is counted in bytes delivered, not in ACKs. RFC 6937's
// SSRB allows one segment more than an ACK delivered: slow start when a
// receiver acknowledges every segment or two. A receiver with GRO or LRO
// (the Linux kernel behind a TAP, this engine: maxStretch) acknowledges a
// whole super-frame with one ACK, and one segment per ACK made the ramp
// linear: a flight of one 44-segment super-frame lost whole (found by the
// tail probe, pipe 0) took 8-10 round trips to resend, and recoveries were
// up to 13% of a 2%-loss transfer's time on a TAP. Twice what was
// delivered is slow start's pace per segment acknowledged (RFC 3465's byte
// counting), never less than RFC 6937's, and pipe still never passes
// ssthresh. Only with
// SACK: without it what an ACK delivered is a guess (a duplicate ACK
// delivers nothing SND.UNA or the scoreboard can show), and RFC 6937's
// pace stands.
func (c *conn) prrAck(delivered, pipe uint32) {
	cc := &c.cc
	mss := c.maxPayload()
	cc.prrDelivered += delivered
	var sndcnt int64
	if pipe > c.ssthresh {
		want := (uint64(cc.prrDelivered)*uint64(c.ssthresh) + uint64(cc.recoverFS) - 1) / uint64(cc.recoverFS)
		sndcnt = int64(want) - int64(cc.prrOut)
	} else {
		step := int64(mss)
		if c.sackOK {
			step = max(int64(delivered), step)
		}
		limit := max(int64(cc.prrDelivered)-int64(cc.prrOut), int64(delivered)) + step
		sndcnt = min(int64(c.ssthresh-pipe), limit)
	}
	cc.sndcnt = uint32(max(sndcnt, 0))
	c.cwnd = pipe + cc.sndcnt
}

// prrSent counts n bytes recovery sent (emit).
func (c *conn) prrSent(n uint32) {
	c.cc.prrOut += n
	c.cc.sndcnt -= min(n, c.cc.sndcnt)
}

// pipe is RFC 6675's estimate of the bytes in the network during
// recovery. With SACK: the un-SACKed bytes RACK has not marked lost, a
// resent range once (rackPipe). Without: what is outstanding less a
// segment per duplicate ACK.
func (c *conn) pipe() uint32 {
	if c.sackOK {
		return c.rackPipe()
	}
	out := c.sndMax.Sub(c.sndUna)
	return out - min(out, uint32(c.dupAcks)*c.maxPayload()) + c.rtxOut
}
