package tcpstack

import (
	"sync"
	"sync/atomic"

	"github.com/emunic/emunic/nic/hdr"
)

// ackRepair works around a netstack receiver that ignores the ACK field of a
// segment it finds unacceptable while its receive window is zero.
//
// RFC 9293 §3.10.7.4: "If the RCV.WND is zero, no segments will be
// acceptable, but special allowance should be made to accept valid ACKs,
// URGs, and RSTs." netstack (tcp/connect.go, handleSegmentLocked →
// rcv.handleRcvdSegment) drops an unacceptable segment whole: it answers
// with an ACK and never hands the segment's ACK, window or SACK blocks to
// its sender. Linux's pure ACKs carry SEQ = SND.NXT, so once the kernel
// has sent bytes netstack did not take (netstack rounds its window down to
// its scale unit and can refuse the last bytes of an advertisement), every
// ACK the kernel sends is past RCV.NXT and, at a zero window, unacceptable.
// netstack then never learns that its own data was acknowledged: an
// application that writes before it reads (an echo server) blocks in Write
// with a full send buffer, never reads, the window stays zero, and the
// connection stalls for good while both ends retransmit with backoff. Seen
// against the Linux kernel over a TAP in about one 16 MiB full-duplex echo
// in eight.
//
// The driver sees every frame, so it repairs this the way a middlebox
// would, without touching the stream: while netstack's last segment on a
// flow advertised a zero window, an incoming segment that carries an ACK
// and is not itself acceptable at that window (a pure ACK at SEQ = RCV.NXT)
// is preceded by a copy of its headers with the payload and FIN removed and
// SEQ set to netstack's last ACK (its RCV.NXT). That copy is acceptable, so
// netstack takes its ACK, window, SACK blocks and timestamp; the original
// follows and is treated as before (refused, answered with an ACK). Only
// flows at a zero window are in the table, so the fast path costs one load.
type ackRepair struct {
	n       atomic.Int32 // flows in the table: 0 skips every lookup
	mu      sync.Mutex
	zero    map[hdr.Tuple]uint32 // flow -> netstack's ACK (RCV.NXT) when it advertised zero
	repairs atomic.Uint64        // repair copies delivered
	full    atomic.Uint64        // zero-window flows not tracked: table full
	scratch [hdr.EthernetSize + hdr.IPv4MaxSize + hdr.TCPMaxSize]byte
}

// maxZeroWindowFlows bounds the table; a flow past it is not repaired
// (counted). Entries leave when netstack opens its window, resets or
// starts a new connection on the same 4-tuple.
const maxZeroWindowFlows = 4096

// tcpView locates the IPv4 and TCP headers of an Ethernet frame; ok is
// false for anything but an unfragmented IPv4 TCP frame with sane lengths.
func tcpView(frame []byte) (ip hdr.IPv4, tcp hdr.TCP, payload int, ok bool) {
	ip, tcp, err := hdr.ParseTCPFrame(frame)
	if err != nil {
		return nil, nil, 0, false
	}
	return ip, tcp, len(tcp.Payload()), true
}

// outbound notes netstack's advertisement on a frame it sends.
func (a *ackRepair) outbound(frame []byte) {
	ip, tcp, _, ok := tcpView(frame)
	if !ok {
		return
	}
	fl := tcp.Flags()
	zero := tcp.Window() == 0 && fl&hdr.TCPFlagACK != 0 && fl&(hdr.TCPFlagRST|hdr.TCPFlagSYN) == 0
	if !zero && a.n.Load() == 0 {
		return // the fast path: nothing tracked, nothing to track
	}
	k := ip.TxTuple(tcp)
	a.mu.Lock()
	defer a.mu.Unlock()
	if !zero {
		if _, ok := a.zero[k]; ok {
			delete(a.zero, k)
			a.n.Add(-1)
		}
		return
	}
	if _, ok := a.zero[k]; !ok {
		if len(a.zero) >= maxZeroWindowFlows {
			a.full.Add(1)
			return
		}
		if a.zero == nil {
			a.zero = make(map[hdr.Tuple]uint32)
		}
		a.n.Add(1)
	}
	a.zero[k] = tcp.Ack()
}

// inbound returns the repair copy to deliver before frame, or nil. The
// copy lives in a scratch buffer: interrupt goroutine only.
func (a *ackRepair) inbound(frame []byte) []byte {
	if a.n.Load() == 0 {
		return nil
	}
	ip, tcp, payload, ok := tcpView(frame)
	if !ok {
		return nil
	}
	k := ip.RxTuple(tcp)
	fl := tcp.Flags()
	a.mu.Lock()
	rcvNxt, tracked := a.zero[k]
	if tracked && fl&(hdr.TCPFlagRST|hdr.TCPFlagSYN) != 0 {
		// The connection is ending or being replaced: whatever netstack
		// answers next decides, the table forgets the flow.
		delete(a.zero, k)
		a.n.Add(-1)
		tracked = false
	}
	a.mu.Unlock()
	if !tracked || fl&hdr.TCPFlagACK == 0 {
		return nil
	}
	if payload == 0 && fl&hdr.TCPFlagFIN == 0 && tcp.Seq() == rcvNxt {
		return nil // acceptable as it is
	}
	// Headers only: Ethernet, IPv4 (options kept), TCP (options kept: the
	// SACK blocks and the timestamp are what netstack needs).
	ihl := ip.HeaderLen()
	hl := hdr.EthernetSize + ihl + tcp.HeaderLen()
	c := a.scratch[:hl]
	copy(c, frame[:hl])
	cip := hdr.IPv4(c[hdr.EthernetSize:])
	cip.SetTotalLen(uint16(hl - hdr.EthernetSize))
	cip.UpdateChecksum()
	ctcp := hdr.TCP(cip[ihl:])
	ctcp.SetSeq(rcvNxt)
	ctcp.SetFlags(fl &^ (hdr.TCPFlagFIN | hdr.TCPFlagPSH | hdr.TCPFlagURG))
	ctcp.UpdateChecksum(cip.Src(), cip.Dst())
	a.repairs.Add(1)
	return c
}
