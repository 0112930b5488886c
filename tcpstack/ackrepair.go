package tcpstack

import (
	"encoding/binary"
	"sync"
	"sync/atomic"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
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
	zero    map[FlowKey]uint32 // flow -> netstack's ACK (RCV.NXT) when it advertised zero
	repairs atomic.Uint64      // repair copies delivered
	full    atomic.Uint64      // zero-window flows not tracked: table full
	scratch [header.EthernetMinimumSize + header.IPv4MaximumHeaderSize + 60]byte
}

// maxZeroWindowFlows bounds the table; a flow past it is not repaired
// (counted). Entries leave when netstack opens its window, resets or
// starts a new connection on the same 4-tuple.
const maxZeroWindowFlows = 4096

// tcpView locates the IPv4 and TCP headers of an Ethernet frame; ok is
// false for anything but an unfragmented IPv4 TCP frame with sane lengths.
func tcpView(frame []byte) (ip header.IPv4, tcp header.TCP, payload int, ok bool) {
	if len(frame) < header.EthernetMinimumSize+header.IPv4MinimumSize+header.TCPMinimumSize ||
		binary.BigEndian.Uint16(frame[12:]) != uint16(header.IPv4ProtocolNumber) {
		return nil, nil, 0, false
	}
	ip = header.IPv4(frame[header.EthernetMinimumSize:])
	ihl := int(ip.HeaderLength())
	total := int(ip.TotalLength())
	if ip.Protocol() != uint8(header.TCPProtocolNumber) || ihl < header.IPv4MinimumSize ||
		total > len(ip) || total < ihl+header.TCPMinimumSize || ip.More() || ip.FragmentOffset() != 0 {
		return nil, nil, 0, false
	}
	tcp = header.TCP(ip[ihl:total])
	doff := int(tcp.DataOffset())
	if doff < header.TCPMinimumSize || doff > len(tcp) {
		return nil, nil, 0, false
	}
	return ip[:total], tcp, len(tcp) - doff, true
}

// outbound notes netstack's advertisement on a frame it sends.
func (a *ackRepair) outbound(frame []byte) {
	ip, tcp, _, ok := tcpView(frame)
	if !ok {
		return
	}
	fl := tcp.Flags()
	zero := tcp.WindowSize() == 0 && fl&header.TCPFlagAck != 0 && fl&(header.TCPFlagRst|header.TCPFlagSyn) == 0
	if !zero && a.n.Load() == 0 {
		return // the fast path: nothing tracked, nothing to track
	}
	k := FlowKey{LocalPort: tcp.SourcePort(), RemotePort: tcp.DestinationPort()}
	copy(k.LocalIP[:], ip[12:16])
	copy(k.RemoteIP[:], ip[16:20])
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
			a.zero = make(map[FlowKey]uint32)
		}
		a.n.Add(1)
	}
	a.zero[k] = tcp.AckNumber()
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
	k := FlowKey{LocalPort: tcp.DestinationPort(), RemotePort: tcp.SourcePort()}
	copy(k.LocalIP[:], ip[16:20])
	copy(k.RemoteIP[:], ip[12:16])
	fl := tcp.Flags()
	a.mu.Lock()
	rcvNxt, tracked := a.zero[k]
	if tracked && fl&(header.TCPFlagRst|header.TCPFlagSyn) != 0 {
		// The connection is ending or being replaced: whatever netstack
		// answers next decides, the table forgets the flow.
		delete(a.zero, k)
		a.n.Add(-1)
		tracked = false
	}
	a.mu.Unlock()
	if !tracked || fl&header.TCPFlagAck == 0 {
		return nil
	}
	if payload == 0 && fl&header.TCPFlagFin == 0 && tcp.SequenceNumber() == rcvNxt {
		return nil // acceptable as it is
	}
	// Headers only: Ethernet, IPv4 (options kept), TCP (options kept: the
	// SACK blocks and the timestamp are what netstack needs).
	ihl := int(ip.HeaderLength())
	hl := header.EthernetMinimumSize + ihl + int(tcp.DataOffset())
	c := a.scratch[:hl]
	copy(c, frame[:hl])
	cip := header.IPv4(c[header.EthernetMinimumSize:])
	cip.SetTotalLength(uint16(hl - header.EthernetMinimumSize))
	cip.SetChecksum(0)
	cip.SetChecksum(^cip.CalculateChecksum())
	ctcp := header.TCP(cip[ihl:])
	ctcp.SetSequenceNumber(rcvNxt)
	ctcp.SetFlags(uint8(fl &^ (header.TCPFlagFin | header.TCPFlagPsh | header.TCPFlagUrg)))
	ctcp.SetChecksum(0)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber,
		tcpip.AddrFrom4Slice(cip.SourceAddressSlice()), tcpip.AddrFrom4Slice(cip.DestinationAddressSlice()),
		uint16(len(ctcp)))
	ctcp.SetChecksum(^checksum.Checksum(ctcp, xsum))
	a.repairs.Add(1)
	return c
}
