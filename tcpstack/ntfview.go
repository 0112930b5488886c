package tcpstack

import (
	"context"
	"fmt"
	"runtime/trace"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/rings"
)

// The host's own view of a delegated connection's sequence space, held
// against every notification the device posts for it. The device reports
// SND.UNA (Ack), the ACKs it received (AckCount) and, for data, the
// sequence number of the first byte placed (Seq); the host knows what it
// queued (its send stream) and what it has been given (its receive
// stream), so each of those numbers has a range it must fall in and an
// order it must keep. A notification that breaks them is a device error:
// counted (DriverStats.NtfOutOfSequence, NtfImpossibleSeq) and not
// trusted, never silently applied.

// ntfView is what the host knows of a connection from its notifications
// (DelegatedConn.mu).
type ntfView struct {
	rcvNxt    uint32 // RCV.NXT as the host counts it: the next byte it expects placed
	ackCount  uint32 // the last AckCount taken
	sndNxt    uint32 // SND.NXT in the last ACK event (ACK_THRESHOLD, DUP_ACK)
	sndNxtSet bool
	// fastRecoveries counts DUP_ACK: the engine entered fast recovery.
	fastRecoveries uint64
	// srtt and rttvar are RFC 6298's estimator over the host's samples:
	// a transmit descriptor queued to its last byte acknowledged.
	srtt, rttvar time.Duration
	rttSamples   uint64
	// flightMax is the largest SND.NXT − SND.UNA seen since the last
	// fast recovery (a lower bound of the congestion window).
	flightMax uint32
	devErrors uint64 // notifications of this connection found out of sequence or impossible
	// ulp: an upper-layer protocol in the device (an RDMA QP) has the
	// byte stream; the host queues and receives none of it, so only the
	// ACK count is checked.
	ulp       bool
	txRefused uint64 // transmit descriptors the device refused for want of room
}

// ConnInfo is a delegated connection's state, in the spirit of Linux's
// tcp_info: the host's view from the notifications the device posted for
// it, checked against what the host queued and was given (ntfView), and,
// from Info, the engine's own view (QUERY_CONN, connquery.go), checked the
// same way.
type ConnInfo struct {
	// SndUna and SndNxt are the device's SND.UNA and SND.NXT: in Info,
	// as QUERY_CONN found them; in HostInfo, as the last ACK event
	// reported them. RcvNxt is the next byte the host expects.
	SndUna, SndNxt, RcvNxt uint32
	// BytesInFlight is SndNxt − SndUna (sent, not acknowledged);
	// BytesQueued is what the host queued and the peer has not
	// acknowledged (sent or not).
	BytesInFlight uint32
	BytesQueued   uint64
	// CwndLowerBound is the largest flight the host saw in ACK events
	// since the last fast recovery: the engine's congestion window was at
	// least this (HostInfo's estimate; Info has Cwnd itself).
	CwndLowerBound uint32
	// AcksReceived is the device's count of ACK segments received on the
	// connection (the notifications' AckCount).
	AcksReceived uint32
	// FastRecoveries counts DUP_ACK notifications: the engine entered
	// fast recovery (three duplicate ACKs, or RACK found a loss) and
	// retransmitted.
	FastRecoveries uint64
	// RTT and RTTVar are the host's smoothed round trip (RFC 6298's
	// estimator) from a transmit descriptor queued to its last byte
	// acknowledged: the path's RTT plus the rings' latency. RTTSamples
	// counts the samples.
	RTT, RTTVar time.Duration
	RTTSamples  uint64
	// DeviceErrors counts this connection's notifications the host
	// rejected: out of sequence, or numbers outside what it queued.
	DeviceErrors uint64
	// TxRefused counts transmit descriptors the device refused for want
	// of room (NO_RESOURCES), queued again later.
	TxRefused uint64
	// ReadLowWater and SendLowWater are the armed thresholds
	// (SetReadLowWater, SetSendLowWater).
	ReadLowWater, SendLowWater int

	// The engine's view (QUERY_CONN): set by Info, Device true; HostInfo
	// leaves them zero.
	Device bool
	State  rings.TCPState
	// SndWnd is the peer's window and RcvWnd the window last advertised
	// to it, in bytes; the scales are the negotiated shifts. MSS is the
	// send MSS in effect (a path MTU may have lowered it).
	SndWnd, RcvWnd           uint32
	SndWndScale, RcvWndScale uint8
	MSS                      uint32
	// Cwnd and Ssthresh are the engine's congestion window and slow start
	// threshold, in bytes.
	Cwnd, Ssthresh uint32
	// DeviceRTT and DeviceRTTVar are the engine's RFC 6298 estimator over
	// the path's round trips (the host's RTT adds the rings' latency);
	// MinRTT is its least sample, RTO its retransmission timeout. Zero
	// DeviceRTT: no sample yet.
	DeviceRTT, DeviceRTTVar, MinRTT, RTO time.Duration
	// Retransmits counts segments the engine sent again; RTOs its
	// retransmission timer expirations, TailLossProbes its probes;
	// DeviceFastRecoveries the fast recoveries it entered (FastRecoveries
	// is the host's count of their DUP_ACKs: equal unless notifications
	// were merged or are still in the ring).
	Retransmits, RTOs, TailLossProbes, DeviceFastRecoveries uint64
	// SegsIn and SegsOut count the segments the engine took and sent;
	// BytesAcked, the bytes the peer acknowledged; BytesReceived, the
	// payload received in order; OOOBytes, out-of-order bytes held.
	SegsIn, SegsOut           uint64
	BytesAcked, BytesReceived uint64
	OOOBytes                  uint32
}

// Info returns the connection's state: the host's view (HostInfo) with the
// engine's added (QUERY_CONN: the congestion window, the RTT estimator,
// the retransmission counts). It waits for the device up to the
// configured command timeout, one query at a time per connection. On an
// error the host's view is returned with it: ErrConnReleased once the
// connection is released, ErrCommandTimeout, a status the device wrote,
// or a device error (a block outside the connection's sequence space,
// counted in DeviceErrors and DriverStats.ConnQueryBad).
func (c *DelegatedConn) Info() (ConnInfo, error) {
	ci, err := c.queryDevice()
	i := c.HostInfo()
	if err != nil {
		return i, err
	}
	i.mergeDevice(&ci)
	return i, nil
}

// HostInfo returns the connection's state as the host knows it from the
// notifications, without asking the device: cheap enough for any caller,
// but with no congestion window (only CwndLowerBound) and no retransmission
// counts.
func (c *DelegatedConn) HostInfo() ConnInfo {
	c.mu.Lock()
	defer c.mu.Unlock()
	v := &c.nv
	una := c.sndISS + uint32(c.sndHead)
	i := ConnInfo{SndUna: una, SndNxt: una, RcvNxt: v.rcvNxt, BytesQueued: c.sndTail - c.sndHead,
		CwndLowerBound: v.flightMax, AcksReceived: v.ackCount, FastRecoveries: v.fastRecoveries,
		RTT: v.srtt, RTTVar: v.rttvar, RTTSamples: v.rttSamples, DeviceErrors: v.devErrors,
		TxRefused: v.txRefused, ReadLowWater: c.rcvLowat, SendLowWater: c.sndLowat}
	if v.sndNxtSet && int32(v.sndNxt-una) > 0 {
		i.SndNxt = v.sndNxt
		i.BytesInFlight = v.sndNxt - una
	}
	return i
}

// isAckEvent: n is an ACK event whose Seq is SND.NXT. The device merges
// cumulative notifications waiting for room in the ring (the numbers are
// the newest's), so one that also carries a receive-side flag has a Seq of
// the receive side.
func isAckEvent(n *rings.Notification) bool {
	return n.Flags&(rings.NtfAckThreshold|rings.NtfDupAck) != 0 &&
		n.Flags&(rings.NtfSeqThreshold|rings.NtfUserBufReq|rings.NtfFin|rings.NtfLegacyUpload|rings.NtfUserBufDone) == 0
}

// isTxRefusal: the notification the device posts for a transmit
// descriptor it did not take (ERROR alone, Aux = the status, Len = the
// descriptor's length). It carries no sequence numbers.
func isTxRefusal(n *rings.Notification) bool { return n.Flags == rings.NtfError && n.Aux > 1 }

// checkNtfLocked holds n against the host's view. It returns the counter
// of the error it found (nil: none) and why: the caller then applies none
// of n's numbers (and the connection fails if its data is concerned).
// mu held.
func (c *DelegatedConn) checkNtfLocked(n *rings.Notification) (bad *atomic.Uint64, why string) {
	if isTxRefusal(n) {
		return nil, ""
	}
	v := &c.nv
	s := &c.o.drv.stats
	// AckCount is free-running: it never goes back.
	if int32(n.AckCount-v.ackCount) < 0 {
		return &s.ntfOutOfSeq, fmt.Sprintf("ACK count %d after %d", n.AckCount, v.ackCount)
	}
	if v.ulp {
		return nil, ""
	}
	// Ack is SND.UNA: never back, never past what the host queued (the
	// FIN counts one).
	una := c.sndISS + uint32(c.sndHead)
	top := c.sndISS + uint32(c.sndTail)
	if c.wrClosed {
		top++
	}
	if int32(n.Ack-una) < 0 {
		return &s.ntfOutOfSeq, fmt.Sprintf("SND.UNA %d below %d already acknowledged", n.Ack, una)
	}
	if int32(n.Ack-top) > 0 {
		return &s.ntfImpossible, fmt.Sprintf("SND.UNA %d beyond %d queued", n.Ack, top)
	}
	// An ACK event's Seq is SND.NXT: between SND.UNA and what was queued.
	if isAckEvent(n) {
		if int32(n.Seq-n.Ack) < 0 || int32(n.Seq-top) > 0 {
			return &s.ntfImpossible, fmt.Sprintf("SND.NXT %d outside [%d, %d]", n.Seq, n.Ack, top)
		}
	}
	// Data is placed in order: its first byte is the next the host
	// expects, and the FIN comes right after the last.
	if n.Flags&(rings.NtfUserBufDone|rings.NtfLegacyUpload) != 0 && n.Len > 0 && n.Seq != v.rcvNxt {
		return &s.ntfOutOfSeq, fmt.Sprintf("data at %d, expected %d", n.Seq, v.rcvNxt)
	}
	if n.Flags&rings.NtfFin != 0 {
		end := v.rcvNxt + 1
		if n.Flags&(rings.NtfUserBufDone|rings.NtfLegacyUpload) != 0 {
			end += n.Len
		}
		if n.Seq != end {
			return &s.ntfOutOfSeq, fmt.Sprintf("FIN at %d, expected %d", n.Seq, end)
		}
	}
	return nil, ""
}

// takeNumbersLocked records a checked notification's numbers. mu held.
func (c *DelegatedConn) takeNumbersLocked(n *rings.Notification) {
	if isTxRefusal(n) {
		return
	}
	v := &c.nv
	v.ackCount = n.AckCount
	if n.Flags&(rings.NtfUserBufDone|rings.NtfLegacyUpload) != 0 {
		v.rcvNxt += n.Len
	}
	if n.Flags&rings.NtfFin != 0 {
		v.rcvNxt++
	}
	if isAckEvent(n) {
		v.sndNxt, v.sndNxtSet = n.Seq, true
		if f := n.Seq - n.Ack; f > v.flightMax {
			v.flightMax = f
		}
	}
	if n.Flags&rings.NtfDupAck != 0 {
		// One meaning everywhere: the engine entered fast recovery.
		v.fastRecoveries++
		v.flightMax = 0
		c.o.drv.stats.fastRecoveries.Add(1)
		if trace.IsEnabled() {
			trace.Logf(context.Background(), "emunic", "conn %d: fast recovery entered, SND.UNA %d SND.NXT %d", c.idx, n.Ack, n.Seq)
		}
	}
}

// deviceErrorLocked counts a notification of this connection the host
// rejected. mu held.
func (c *DelegatedConn) deviceErrorLocked(kind *atomic.Uint64, why string) {
	c.nv.devErrors++
	kind.Add(1)
	if trace.IsEnabled() {
		trace.Logf(context.Background(), "emunic", "conn %d: device error: %s", c.idx, why)
	}
}

// rttSampleLocked takes a round-trip sample (RFC 6298 §2). mu held.
func (v *ntfView) rttSampleLocked(r time.Duration) {
	if r <= 0 {
		return
	}
	v.rttSamples++
	if v.srtt == 0 {
		v.srtt, v.rttvar = r, r/2
		return
	}
	d := v.srtt - r
	if d < 0 {
		d = -d
	}
	v.rttvar = (3*v.rttvar + d) / 4
	v.srtt = (7*v.srtt + r) / 8
}
