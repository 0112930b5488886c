package tcpstack

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/seqnum"
)

// flowInfo is what the driver learned about a tracked connection from the
// frames that crossed it. The NIC sees every frame of a flow, so it knows a
// connection's state without asking netstack: the delegation state block is
// built from this, not from netstack's internals.
type flowInfo struct {
	frozen bool // every frame of the flow is dropped (delegation in progress or done)

	sawOurSyn, sawPeerSyn bool
	ourMSS, peerMSS       uint16
	ourWS, peerWS         int8 // -1: option absent
	ourSACK, peerSACK     bool
	ourTS, peerTS         bool

	irs        uint32 // peer's initial sequence number
	iss        uint32 // our initial sequence number
	sndNxt     uint32 // highest sequence we sent + 1 (SYN and FIN count)
	sndUna     uint32 // highest ACK the peer sent
	rcvNxt     uint32 // next in-order byte from the peer
	peerWnd    uint16 // the peer's last window field, unscaled
	ourWnd     uint16 // our last window field, unscaled
	ourLastTS  uint32 // TSval of our last segment
	peerLastTS uint32 // TSval of the peer's last segment (TS.Recent)
	peerFin    bool
	ourFin     bool
	localMAC   [6]byte
	nextHopMAC [6]byte
	synAt      int64 // when our SYN (or SYN-ACK) left, for the handshake RTT
	rtt        int64 // handshake round trip in ns (0: not measured)
	droppedIn  uint64
	droppedOut uint64
	// held are the peer's frames that arrived while the flow was frozen
	// for a delegation in progress: not dropped (the peer would have to
	// retransmit them, 10-200 ms for a request sent right after the
	// handshake) but kept, to go to the unit (RX_INJECT) if the delegation
	// succeeds or back to netstack if it falls back. held is closed to new
	// frames (holdOff) once the delegation is decided.
	held        [][]byte
	heldBytes   int
	holdOff     bool
	inSegments  uint64
	outSegments uint64
	// acked, when not nil, is closed at the next ACK that advances
	// SND.UNA (and when the flow is removed): delegation waits on it for
	// the flow to go quiet.
	acked chan struct{}
	// dconn is the delegated connection on the flow, once the unit has
	// it (bind): what an ICMP quoting the flow is about (pmtu.go).
	// pmtuBusy: a PATH_MTU for it is with the device; ICMPs meanwhile
	// are dropped, so a flood of them never floods the command ring.
	dconn    *DelegatedConn
	pmtuBusy bool
	// learned: the tracker missed the flow's handshake and the entry was
	// made from netstack's endpoint (flowlearn.go).
	learned bool
}

// flowTracker is the driver's table of tracked flows. It is consulted for
// every TCP frame only while at least one flow is tracked.
type flowTracker struct {
	n      atomic.Int32
	mu     sync.Mutex
	flows  map[hdr.Tuple]*flowInfo
	listen map[listenKey]int // tracked listening sockets (refcounted)

	// droppedOut and droppedIn count the frames of frozen flows dropped,
	// of every flow (the per-flow counts go with the flow): DriverStats
	// reports them.
	droppedOut, droppedIn atomic.Uint64
	// reopened counts delegated flows ended by a peer's new SYN
	// (observe).
	reopened atomic.Uint64
	// heldIn counts the frames of frozen flows held (not dropped) while
	// their delegation was in progress.
	heldIn atomic.Uint64
	// now, when set, is the clock the handshake's RTT is measured with
	// (DriverConfig.Clock, through Driver.nanos); monotime otherwise.
	now func() int64

	// What learning a missed flow from netstack takes (flowlearn.go), set
	// by the host: the next hop's MAC for a remote address, and
	// netstack's clock (its timestamps count from it).
	nextHop  func(netip.Addr) ([6]byte, bool)
	stackNow func() tcpip.MonotonicTime
	// learnedFlows counts the flows learned so (Host.FlowsLearned).
	learnedFlows atomic.Uint64
	// icmpErr, set by the host (pmtu.go) while the driver already runs,
	// judges every received ICMP frame before netstack does: true means
	// it took the frame.
	icmpErr atomic.Pointer[func([]byte) bool]
}

func (t *flowTracker) clock() int64 {
	if t.now != nil {
		return t.now()
	}
	return monotime()
}

type listenKey struct {
	ip   netip.Addr
	port uint16
}

// maxTrackedFlows bounds the table: SYNs to a tracked listener that never
// complete cannot grow it without limit. Past it, new flows are not tracked
// and cannot be delegated (they stay on netstack).
const maxTrackedFlows = 1 << 16

// listenOn tracks every connection that arrives at ip:port from its SYN on.
func (t *flowTracker) listenOn(ip netip.Addr, port uint16, on bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.listen == nil {
		t.listen = make(map[listenKey]int)
	}
	k := listenKey{ip, port}
	if on {
		t.listen[k]++
		t.n.Add(1)
	} else if t.listen[k] > 0 {
		t.listen[k]--
		if t.listen[k] == 0 {
			delete(t.listen, k)
		}
		t.n.Add(-1)
	}
}

// addNew tracks flow k and reports whether it is new (false: k is
// tracked already, for another connection on the same 4-tuple).
func (t *flowTracker) addNew(k hdr.Tuple) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.flows == nil {
		t.flows = make(map[hdr.Tuple]*flowInfo)
	}
	if _, ok := t.flows[k]; ok {
		return false
	}
	t.flows[k] = &flowInfo{ourWS: -1, peerWS: -1}
	t.n.Add(1)
	return true
}

func (t *flowTracker) remove(k hdr.Tuple) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.removeLocked(k)
}

// removeLocked stops tracking flow k, waking a wait for its ACK. mu held.
func (t *flowTracker) removeLocked(k hdr.Tuple) {
	if f, ok := t.flows[k]; ok {
		if f.acked != nil {
			close(f.acked)
			f.acked = nil
		}
		delete(t.flows, k)
		t.n.Add(-1)
	}
}

// ackedChan returns a channel closed once SND.UNA advances on flow k (at
// once when nothing is unacknowledged), and whether k is tracked.
func (t *flowTracker) ackedChan(k hdr.Tuple) (<-chan struct{}, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok {
		return nil, false
	}
	if f.sndUna == f.sndNxt {
		return closedCh, true
	}
	if f.acked == nil {
		f.acked = make(chan struct{})
	}
	return f.acked, true
}

// bind records c as the delegated connection on flow k.
func (t *flowTracker) bind(k hdr.Tuple, c *DelegatedConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.flows[k]; ok {
		f.dconn = c
	}
}

// delegatedConn returns the delegated connection on flow k (nil: none).
func (t *flowTracker) delegatedConn(k hdr.Tuple) *DelegatedConn {
	if t.n.Load() == 0 {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if f, ok := t.flows[k]; ok {
		return f.dconn
	}
	return nil
}

// pmtuStart returns the delegated connection on flow k and its entry,
// marked busy with a PATH_MTU; busy is true (and nothing marked) if one
// already is.
func (t *flowTracker) pmtuStart(k hdr.Tuple) (dc *DelegatedConn, f *flowInfo, busy bool) {
	if t.n.Load() == 0 {
		return nil, nil, false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok || f.dconn == nil {
		return nil, nil, false
	}
	if f.pmtuBusy {
		return f.dconn, f, true
	}
	f.pmtuBusy = true
	return f.dconn, f, false
}

// pmtuDone ends entry f's PATH_MTU.
func (t *flowTracker) pmtuDone(f *flowInfo) {
	t.mu.Lock()
	f.pmtuBusy = false
	t.mu.Unlock()
}

// entry returns flow k's entry (nil if untracked): its identity, for
// removeEntry.
func (t *flowTracker) entry(k hdr.Tuple) *flowInfo {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.flows[k]
}

// removeEntry stops tracking flow k if f is still its entry. A delegated
// connection's flow is removed when its index is released, asynchronously;
// by then the host stack may have opened a new connection on the same
// 4-tuple (its end of the old one is long gone), whose entry must stay.
func (t *flowTracker) removeEntry(k hdr.Tuple, f *flowInfo) {
	t.mu.Lock()
	cur := t.flows[k]
	t.mu.Unlock()
	if cur == f && f != nil {
		t.remove(k)
	}
}

// freeze makes the driver drop every frame of the flow from now on and
// returns a snapshot of what it learned.
func (t *flowTracker) freeze(k hdr.Tuple, on bool) (flowInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok {
		return flowInfo{}, false
	}
	f.frozen = on
	out := *f
	if !on {
		// Thawed: what was held goes back to the caller (for netstack).
		f.held, f.heldBytes = nil, 0
	}
	return out, true
}

// takeHeld ends holding on flow k (frozen from here on for good: it is
// delegated) and returns the frames held so far.
func (t *flowTracker) takeHeld(k hdr.Tuple) [][]byte {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok {
		return nil
	}
	h := f.held
	f.held, f.heldBytes, f.holdOff = nil, 0, true
	return h
}

// Bounds of what a frozen flow holds: a delegation takes a few
// milliseconds, in which a peer sends at most a window; frames past these
// are dropped (and retransmitted by the peer).
const (
	maxHeldFrames = 64
	maxHeldBytes  = 256 << 10
)

func (t *flowTracker) snapshot(k hdr.Tuple) (flowInfo, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if !ok {
		return flowInfo{}, false
	}
	return *f, true
}

// observe updates the flow a frame belongs to and reports whether the frame
// must be dropped (the flow is frozen, or an ICMP the host took). outbound
// is true for frames the host sends.
func (t *flowTracker) observe(frame []byte, outbound bool) (drop bool) {
	if h := t.icmpErr.Load(); h != nil && !outbound && isICMPError(frame) {
		return (*h)(frame)
	}
	if t.n.Load() == 0 {
		return false
	}
	var seg tcpSeg
	if !parseTCPFrame(frame, &seg) {
		return false
	}
	k := seg.rx
	if outbound {
		k = hdr.Tuple{LocalIP: k.RemoteIP, RemoteIP: k.LocalIP, LocalPort: k.RemotePort, RemotePort: k.LocalPort}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	f, ok := t.flows[k]
	if ok && f.frozen && f.holdOff && !outbound && seg.flags&(hdr.TCPFlagSYN|hdr.TCPFlagACK|hdr.TCPFlagRST) == hdr.TCPFlagSYN {
		// A peer's SYN on a delegated flow. The unit takes every frame
		// of a connection it holds (a SYN there gets the engine's
		// challenge ACK), so one it passed up is for a tuple it has let
		// go: the connection closed and its TIME_WAIT record gave way
		// to this newer SYN (RFC 6191). The old entry only waits for
		// the release its close notification starts; dropping the SYN
		// as the old flow's would cost the peer a retransmission (1 s
		// for a SYN), which a client churning through its ports met
		// whenever it came back within that window. The SYN opens a
		// new flow; the old one's release finds it replaced
		// (removeEntry) and leaves it.
		t.removeLocked(k)
		t.reopened.Add(1)
		ok = false
	}
	if !ok {
		if outbound || seg.flags&(hdr.TCPFlagSYN|hdr.TCPFlagACK) != hdr.TCPFlagSYN || t.listen[listenKey{k.LocalIP, k.LocalPort}] == 0 ||
			len(t.flows) >= maxTrackedFlows {
			return false
		}
		if t.flows == nil {
			t.flows = make(map[hdr.Tuple]*flowInfo)
		}
		f = &flowInfo{ourWS: -1, peerWS: -1}
		t.flows[k] = f
		t.n.Add(1)
	}
	if f.frozen {
		if outbound {
			f.droppedOut++
			t.droppedOut.Add(1)
		} else if !f.holdOff && len(f.held) < maxHeldFrames && f.heldBytes+len(frame) <= maxHeldBytes {
			f.held = append(f.held, append([]byte(nil), frame...))
			f.heldBytes += len(frame)
			t.heldIn.Add(1)
		} else {
			f.droppedIn++
			t.droppedIn.Add(1)
		}
		return true
	}
	if outbound {
		f.learnOut(frame, &seg, t.clock)
	} else {
		f.learnIn(frame, &seg, t.clock)
	}
	return false
}

// seqAfter reports a > b in sequence space.
func seqAfter(a, b uint32) bool { return seqnum.Value(a).GreaterThan(seqnum.Value(b)) }

var trackEpoch = time.Now()

func monotime() int64 { return int64(time.Since(trackEpoch)) }

func (f *flowInfo) learnOut(frame []byte, s *tcpSeg, now func() int64) {
	f.outSegments++
	copy(f.localMAC[:], frame[6:12])
	copy(f.nextHopMAC[:], frame[0:6])
	end := s.seq + uint32(s.payload)
	if s.flags&hdr.TCPFlagSYN != 0 {
		f.ourMSS, f.ourWS, f.ourSACK = s.mss, s.ws, s.sackOK
		f.ourTS = s.hasTS
		// A SYN's window is never scaled; keep it in the units of later
		// segments so a passive opener that sent only its SYN-ACK still
		// has the window it advertised.
		f.ourWnd = s.window
		if s.ws > 0 {
			f.ourWnd = s.window >> s.ws
		}
		end++
		if !f.sawOurSyn || s.seq != f.iss {
			f.synAt = now()
			f.iss = s.seq
			f.sndNxt = end
			f.sndUna = s.seq
		} else {
			// A retransmitted SYN leaves SND.UNA alone: netstack's
			// handshake timer can resend the SYN just as the SYN-ACK
			// arrives, after the tracker learned the SYN's ACK from it;
			// moving SND.UNA back left the SYN "unacknowledged" for good
			// (a DialOffload's quiesce then timed out). Nor does its ACK
			// give an RTT sample (Karn).
			f.synAt = 0
		}
		f.sawOurSyn = true
	}
	if s.flags&hdr.TCPFlagFIN != 0 {
		end++
		f.ourFin = true
	}
	if seqAfter(end, f.sndNxt) {
		f.sndNxt = end
	}
	if s.hasTS {
		f.ourLastTS = s.tsVal
	}
	if s.flags&hdr.TCPFlagSYN == 0 {
		f.ourWnd = s.window
	}
}

func (f *flowInfo) learnIn(frame []byte, s *tcpSeg, now func() int64) {
	f.inSegments++
	if f.nextHopMAC == ([6]byte{}) {
		copy(f.nextHopMAC[:], frame[6:12])
	}
	if s.flags&hdr.TCPFlagSYN != 0 {
		f.sawPeerSyn = true
		f.peerMSS, f.peerWS, f.peerSACK = s.mss, s.ws, s.sackOK
		f.peerTS = s.hasTS
		f.irs = s.seq
		f.rcvNxt = s.seq + 1
	}
	if s.flags&hdr.TCPFlagACK != 0 && seqAfter(s.ack, f.sndUna) {
		if f.rtt == 0 && f.synAt != 0 && f.sawOurSyn && s.ack == f.sndUna+1 {
			// The ACK of our SYN (active open: the SYN-ACK; passive: the
			// handshake's last ACK) gives the first RTT sample, so the
			// engine starts from a measured RTO instead of the 1 s default.
			f.rtt = now() - f.synAt
		}
		f.sndUna = s.ack
		if f.acked != nil {
			close(f.acked)
			f.acked = nil
		}
	}
	if s.flags&hdr.TCPFlagRST == 0 {
		f.peerWnd = s.window
	}
	if s.hasTS {
		f.peerLastTS = s.tsVal
	}
	// Advance RCV.NXT over in-order data (and FIN). A segment that starts
	// at or before RCV.NXT and ends after it is in order for netstack too.
	if s.flags&hdr.TCPFlagSYN == 0 {
		start, end := s.seq, s.seq+uint32(s.payload)
		if !seqAfter(start, f.rcvNxt) && seqAfter(end, f.rcvNxt) {
			f.rcvNxt = end
		}
		if s.flags&hdr.TCPFlagFIN != 0 && end == f.rcvNxt {
			f.rcvNxt++
			f.peerFin = true
		}
	}
}

// tcpSeg is the parsed part of a TCP frame (over IPv4 or IPv6) the tracker
// needs.
type tcpSeg struct {
	rx           hdr.Tuple // the receiver's view: local is the destination
	seq, ack     uint32
	flags        uint8
	window       uint16
	payload      int
	mss          uint16
	ws           int8
	sackOK       bool
	hasTS        bool
	tsVal, tsEcr uint32
}

// parseTCPFrame parses an Ethernet frame carrying TCP over IPv4 or IPv6
// (hdr.ParseTCPFrameRx), length-checking every field; anything else (ARP,
// ICMP, fragments, truncated headers, extension chains the NIC would
// refuse) returns false.
// Options are read leniently, unlike the engine: a known option of the
// wrong length is ignored, and a malformed one ends the list with what
// came before it kept. The tracker only learns from what netstack and the
// peer said; it is not the one to refuse a segment.
func parseTCPFrame(b []byte, s *tcpSeg) bool {
	t, err := hdr.ParseTCPFrameRx(b, &s.rx)
	if err != nil {
		return false
	}
	s.seq, s.ack = t.Seq(), t.Ack()
	s.flags = t.Flags()
	s.window = t.Window()
	s.payload = len(t.Payload())
	s.mss, s.ws, s.sackOK, s.hasTS = 0, -1, false, false
	it := t.OptionIter()
	for o, ok := it.Next(); ok; o, ok = it.Next() {
		if !o.WellFormed() {
			continue
		}
		switch o.Kind() {
		case hdr.TCPOptMSS:
			s.mss = o.MSS()
		case hdr.TCPOptWS:
			s.ws = int8(min(o.WindowShift(), hdr.TCPMaxWindowShift))
		case hdr.TCPOptSACKPermitted:
			s.sackOK = true
		case hdr.TCPOptTimestamp:
			s.hasTS = true
			s.tsVal, s.tsEcr = o.TSVal(), o.TSEcr()
		}
	}
	return true
}
