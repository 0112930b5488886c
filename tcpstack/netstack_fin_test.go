package tcpstack

import (
	"context"
	"encoding/binary"
	"net/netip"
	"sync"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/seqnum"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
)

// scriptedPeer is the far end of one netstack TCP connection over a
// channel endpoint: the test reads every segment netstack sends and
// writes each one it receives, so it can lose exactly the segments it
// chooses.
type scriptedPeer struct {
	t         *testing.T
	ep        *channel.Endpoint
	local     tcpip.Address // netstack's
	remote    tcpip.Address // the peer's
	lport     uint16        // netstack's port
	rport     uint16
	iss, irs  seqnum.Value // the peer's ISN and netstack's
	rcvNxt    seqnum.Value // the peer's next expected byte (its ACK)
	sndNxt    seqnum.Value
	lastState struct {
		sync.Mutex
		s tcp.TCPSenderState
	}
}

// read returns netstack's next segment, or ok false after d.
func (p *scriptedPeer) read(d time.Duration) (header.TCP, bool) {
	p.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	pkt := p.ep.ReadContext(ctx)
	if pkt == nil {
		return nil, false
	}
	b := pkt.ToBuffer()
	raw := b.Flatten()
	b.Release()
	pkt.DecRef()
	ip := header.IPv4(raw)
	if !ip.IsValid(len(raw)) || ip.TransportProtocol() != header.TCPProtocolNumber {
		p.t.Fatalf("netstack sent a frame that is no TCP/IPv4 segment: % x", raw)
	}
	return header.TCP(ip.Payload()), true
}

// send writes a segment from the peer: flags, the peer's ACK, SACK
// blocks and payload, at the peer's sndNxt.
func (p *scriptedPeer) send(flags header.TCPFlags, ack seqnum.Value, opts []byte, payload []byte) {
	tcpLen := header.TCPMinimumSize + len(opts)
	b := make([]byte, header.IPv4MinimumSize+tcpLen+len(payload))
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: uint16(len(b)), TTL: 64, Protocol: uint8(header.TCPProtocolNumber),
		SrcAddr: p.remote, DstAddr: p.local})
	ip.SetChecksum(^ip.CalculateChecksum())
	t := header.TCP(b[header.IPv4MinimumSize:])
	t.Encode(&header.TCPFields{SrcPort: p.rport, DstPort: p.lport, SeqNum: uint32(p.sndNxt), AckNum: uint32(ack),
		DataOffset: uint8(tcpLen), Flags: flags, WindowSize: 65535})
	copy(b[header.IPv4MinimumSize+header.TCPMinimumSize:], opts)
	copy(b[header.IPv4MinimumSize+tcpLen:], payload)
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, p.remote, p.local, uint16(tcpLen+len(payload)))
	xsum = checksum.Checksum(payload, xsum)
	t.SetChecksum(^t.CalculateChecksum(xsum))
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	p.ep.InjectInbound(ipv4.ProtocolNumber, pkt)
	pkt.DecRef()
}

// sackOpts is a SACK option with blocks, behind two NOPs (a multiple of
// 4 bytes).
func sackOpts(blocks ...header.SACKBlock) []byte {
	o := []byte{header.TCPOptionNOP, header.TCPOptionNOP, header.TCPOptionSACK, byte(2 + 8*len(blocks))}
	for _, b := range blocks {
		o = binary.BigEndian.AppendUint32(o, uint32(b.Start))
		o = binary.BigEndian.AppendUint32(o, uint32(b.End))
	}
	return o
}

// TestNetstackRetransmitsLostFIN drives netstack's TCP sender (the host
// stack, with third_party/patches/gvisor/0001 applied) into the state
// TestTwoHostsLossy once stalled in: its FIN sent during SACK recovery
// (whose pipe count leaves a FIN out), all data acknowledged after the
// recovery, so that its Outstanding count reads 0 with the FIN still
// unacknowledged, and a tail loss probe that carries the FIN. The peer
// loses every copy of the FIN but the last it waits for: the sender must
// keep retransmitting it on its timer. Unpatched, after the probe it sent
// nothing more, ever.
func TestNetstackRetransmitsLostFIN(t *testing.T) {
	const mss = 1000
	p := &scriptedPeer{t: t,
		local: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), remote: tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), rport: 80}
	p.ep = channel.New(256, 1500, "")
	st, err := NewStack(p.ep, StackConfig{Addr: netip.MustParsePrefix("10.0.0.1/24"), TCPProbe: func(s *tcp.TCPEndpointState) {
		p.lastState.Lock()
		p.lastState.s = s.Sender
		p.lastState.Unlock()
	}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.ep.Close(); st.S.Close() })

	// Handshake: MSS 1000, SACK permitted, no window scaling.
	type dialed struct {
		c   *gonet.TCPConn
		err error
	}
	dc := make(chan dialed, 1)
	go func() {
		c, err := gonet.DialTCP(st.S, tcpip.FullAddress{NIC: 1, Addr: p.remote, Port: p.rport}, ipv4.ProtocolNumber)
		dc <- dialed{c, err}
	}()
	syn, ok := p.read(5 * time.Second)
	if !ok || syn.Flags() != header.TCPFlagSyn {
		t.Fatalf("no SYN: %v", syn)
	}
	p.lport, p.irs = syn.SourcePort(), seqnum.Value(syn.SequenceNumber())
	p.iss, p.rcvNxt = 1000, p.irs+1
	opts := []byte{header.TCPOptionMSS, 4, byte(mss >> 8), byte(mss & 0xff), header.TCPOptionNOP, header.TCPOptionNOP,
		header.TCPOptionSACKPermitted, 2}
	p.sndNxt = p.iss
	p.send(header.TCPFlagSyn|header.TCPFlagAck, p.rcvNxt, opts, nil)
	p.sndNxt++
	d := <-dc
	if d.err != nil {
		t.Fatal(d.err)
	}
	c := d.c
	defer c.Close()
	if ack, ok := p.read(5 * time.Second); !ok || ack.Flags() != header.TCPFlagAck {
		t.Fatalf("no handshake ACK: %v", ack)
	}
	// ends[i] is where segment i ends (1-based; ends[0] where data starts),
	// as netstack cut them (its payload is the MSS less its options).
	ends := []seqnum.Value{p.irs + 1}
	segEnd := func(i int) seqnum.Value { return ends[i] }
	block := func(from, to int) header.SACKBlock { return header.SACKBlock{Start: segEnd(from - 1), End: segEnd(to)} }
	newData := func(s header.TCP) {
		if end := seqnum.Value(s.SequenceNumber()).Add(seqnum.Size(len(s.Payload()))); len(s.Payload()) > 0 && ends[len(ends)-1].LessThan(end) {
			ends = append(ends, end)
		}
	}

	// Ten segments; the first is lost. Three duplicate ACKs SACKing 2-4
	// put the sender in SACK recovery; it retransmits segment 1.
	if _, err := c.Write(make([]byte, 10*mss)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 10; i++ {
		s, ok := p.read(5 * time.Second)
		if !ok {
			t.Fatalf("segment %d of 10 not sent", i+1)
		}
		newData(s)
	}
	if len(ends) != 11 {
		t.Fatalf("10 segments ended at %v", ends)
	}
	for k := 2; k <= 4; k++ {
		p.send(header.TCPFlagAck, p.rcvNxt, sackOpts(block(2, k)), nil)
	}
	rtx, ok := p.read(5 * time.Second)
	if !ok || seqnum.Value(rtx.SequenceNumber()) != p.rcvNxt {
		t.Fatalf("no fast retransmission of segment 1: %v", rtx)
	}
	// The rest of the flight arrives (SACK 2-10): the pipe is down to the
	// retransmission, and the sender may send new data in the recovery.
	p.send(header.TCPFlagAck, p.rcvNxt, sackOpts(block(2, 10)), nil)
	// During the recovery the application writes two more segments' worth
	// and closes: that data (with the rest of the first write) and the FIN
	// go out, and the FIN is lost.
	if _, err := c.Write(make([]byte, 2*mss)); err != nil {
		t.Fatal(err)
	}
	if err := c.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	var fin seqnum.Value
	for sawFIN := false; !sawFIN; {
		s, ok := p.read(5 * time.Second)
		if !ok {
			t.Fatal("the FIN was not sent during the recovery")
		}
		newData(s)
		if sawFIN = s.Flags()&header.TCPFlagFin != 0; sawFIN {
			fin = seqnum.Value(s.SequenceNumber()).Add(seqnum.Size(len(s.Payload())))
		}
	}
	if len(ends) < 12 || fin != ends[len(ends)-1] {
		t.Fatalf("new data and the FIN in the recovery: segments end at %v, the FIN at %d", ends, fin)
	}
	// Segment 1 arrives: the first flight is acknowledged, which ends the
	// recovery; then the data sent in it, not the FIN.
	p.send(header.TCPFlagAck, segEnd(10), nil, nil)
	p.send(header.TCPFlagAck, fin, nil, nil)
	// What follows are the FIN's retransmissions (a tail loss probe
	// first, then the timer's), each lost, until the third.
	for n := 1; n <= 3; n++ {
		s, ok := p.read(5 * time.Second)
		if !ok {
			p.lastState.Lock()
			ss := p.lastState.s
			p.lastState.Unlock()
			t.Fatalf("no retransmission %d of the lost FIN within 5 s; the sender after its last segment: outstanding %d, SACKed %d, SND.UNA %d, SND.NXT %d (the FIN at %d)",
				n, ss.Outstanding, ss.SackedOut, ss.SndUna, ss.SndNxt, fin)
		}
		if s.Flags()&header.TCPFlagFin == 0 || seqnum.Value(s.SequenceNumber()) != fin {
			t.Fatalf("retransmission %d: %v, want the FIN at %d", n, s, fin)
		}
		p.lastState.Lock()
		t.Logf("FIN %d sent again; the sender's state before it: outstanding %d, SACKed %d", n, p.lastState.s.Outstanding, p.lastState.s.SackedOut)
		p.lastState.Unlock()
	}
}
