package tcpstack

import (
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// zwPeer plays the Linux kernel against a netstack host over the in-memory
// wire, one segment at a time, so the test controls exactly which bytes
// and ACKs netstack sees.
type zwPeer struct {
	t      *testing.T
	w      *port.WirePort
	frames chan []byte
	mac    [6]byte
	hostMA [6]byte
}

var (
	zwHost  = [4]byte{10, 0, 0, 1}
	zwPeer4 = [4]byte{10, 0, 0, 2}
)

func newZWPeer(t *testing.T, w *port.WirePort, hostMAC [6]byte) *zwPeer {
	p := &zwPeer{t: t, w: w, frames: make(chan []byte, 1<<14), mac: [6]byte{2, 0, 0, 0, 0, 2}, hostMA: hostMAC}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, err := w.ReadFrame(buf)
			if err != nil {
				close(p.frames)
				return
			}
			f := append([]byte(nil), buf[:n]...)
			if hdr.Ethernet(f).Type() == hdr.EtherTypeARP {
				p.answerARP(f)
				continue
			}
			p.frames <- f
		}
	}()
	return p
}

func (p *zwPeer) answerARP(f []byte) {
	var req hdr.ARPFields
	if _, err := req.Decode(f[hdr.EthernetSize:]); err != nil || req.Op != hdr.ARPOpRequest {
		return
	}
	r := make([]byte, hdr.EthernetSize+hdr.ARPSize)
	n := (&hdr.EthernetFields{Dst: req.SHA, Src: p.mac, Type: hdr.EtherTypeARP}).Encode(r)
	rep := req
	rep.Op, rep.SHA, rep.SPA, rep.THA, rep.TPA = hdr.ARPOpReply, p.mac, req.TPA, req.SHA, req.SPA
	rep.Encode(r[n:])
	_ = p.w.WriteFrame(r)
}

// send writes one TCP segment from the peer (port 5000) to the host's port 7.
func (p *zwPeer) send(seq, ack uint32, flags uint8, wnd uint16, opts []byte, payload int) {
	f := hdr.TCPFrameFields{SrcMAC: p.mac, DstMAC: p.hostMA, Src: zwPeer4, Dst: zwHost,
		TCP:     hdr.TCPFields{SrcPort: 5000, DstPort: 7, Seq: seq, Ack: ack, Flags: flags, Window: wnd},
		Options: opts, Payload: make([]byte, payload)}
	for i := range f.Payload {
		f.Payload[i] = byte(seq) + byte(i)
	}
	if err := p.w.WriteFrame(f.Append(nil)); err != nil {
		p.t.Fatalf("peer write: %v", err)
	}
}

// recv returns the next TCP segment from the host, or false after d.
func (p *zwPeer) recv(d time.Duration) (header.TCP, int, bool) {
	timer := time.NewTimer(d)
	defer timer.Stop()
	for {
		select {
		case f, ok := <-p.frames:
			if !ok {
				return nil, 0, false
			}
			_, tcp, payload, ok := tcpView(f)
			if ok {
				return header.TCP(tcp), payload, true // gVisor's view: an independent reading
			}
		case <-timer.C:
			return nil, 0, false
		}
	}
}

// TestZeroWindowAckRepair reproduces, on a wire the test drives, the stall
// seen against the Linux kernel: the host's application writes and never
// reads (an echo server blocked in Write), so netstack's receive window
// closes; the peer has sent bytes netstack refused, so its ACKs carry a SEQ
// past RCV.NXT. Without the driver's repair netstack never takes those ACKs
// and only retransmits old data; with it, netstack's send side moves on.
func TestZeroWindowAckRepair(t *testing.T) {
	a, b := port.MustNewWire(port.WireConfig{})
	hostMAC := [6]byte{2, 0, 0, 0, 0, 1}
	h, err := testHost(HostConfig{Addr: netip.MustParsePrefix("10.0.0.1/24"),
		Stack: StackConfig{ReceiveBuffer: 64 << 10}}, hostMAC, a)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	l, err := h.Listen(7)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(make([]byte, 8<<20)) // writes, never reads
	}()
	p := newZWPeer(t, b, hostMAC)

	// Handshake: MSS 1460, window scale 7, no SACK, no timestamps.
	const iss = 1000
	p.send(iss, 0, hdr.TCPFlagSYN, 65535, []byte{2, 4, 0x05, 0xb4, 1, 3, 3, 7}, 0)
	synack, _, ok := p.recv(5 * time.Second)
	if !ok || synack.Flags() != header.TCPFlagSyn|header.TCPFlagAck {
		t.Fatalf("no SYN-ACK")
	}
	hostWS := header.ParseSynOptions(synack.Options(), true).WS
	if hostWS < 0 {
		hostWS = 0
	}
	hostSeq := synack.SequenceNumber() + 1 // next byte the host will send
	hostNxt := hostSeq                     // highest byte the host has sent + 1
	seq := uint32(iss + 1)
	// The peer never acknowledges the host's data in this phase, so the
	// host's send side stops after its initial window.
	p.send(seq, hostSeq, hdr.TCPFlagACK, 65535, nil, 0)

	// Let the host's first flight out (its initial congestion window:
	// with no ACK from the peer it then waits).
	for hostNxt-hostSeq < 4*1460 {
		s, n, ok := p.recv(5 * time.Second)
		if !ok {
			t.Fatalf("the host sent %d bytes, want its initial window", hostNxt-hostSeq)
		}
		if end := s.SequenceNumber() + uint32(n); int32(end-hostNxt) > 0 {
			hostNxt = end
		}
	}

	// Fill the host's receive window. The host refuses what does not
	// fit; the peer follows its advertised right edge.
	rcvAck, rcvWnd := synack.AckNumber(), uint32(synack.WindowSize())
	deadline := time.Now().Add(10 * time.Second)
	for rcvWnd != 0 || rcvAck != seq {
		if time.Now().After(deadline) {
			t.Fatalf("the host's window never closed (ack %d wnd %d, peer seq %d)", rcvAck, rcvWnd, seq)
		}
		edge := rcvAck + rcvWnd<<hostWS
		if n := min(int32(edge-seq), 1460); n > 0 && seq == rcvAck {
			p.send(seq, hostSeq, hdr.TCPFlagACK, 65535, nil, int(n))
			seq += uint32(n)
		}
		s, n, ok := p.recv(time.Second)
		if !ok {
			continue
		}
		if end := s.SequenceNumber() + uint32(n); int32(end-hostNxt) > 0 {
			hostNxt = end
		}
		if s.Flags()&header.TCPFlagAck != 0 {
			rcvAck, rcvWnd = s.AckNumber(), uint32(s.WindowSize())
		}
	}
	// Now, as Linux did: bytes past the closed window (refused), then a
	// pure ACK at SEQ = SND.NXT acknowledging everything the host sent.
	p.send(seq, hostSeq, hdr.TCPFlagACK|hdr.TCPFlagPSH, 65535, nil, 32)
	seq += 32
	p.send(seq, hostNxt, hdr.TCPFlagACK, 65535, nil, 0)

	// The host must send new data (beyond hostNxt): it took the ACK.
	deadline = time.Now().Add(3 * time.Second)
	for {
		s, n, ok := p.recv(time.Until(deadline))
		if !ok {
			t.Fatalf("the host never sent past %d: it ignored the ACK at a zero window (repairs %d)",
				hostNxt, h.Driver.Stats().ZeroWindowAckRepairs)
		}
		t.Logf("host: seq %d len %d ack %d wnd %d (hostNxt %d, peer seq %d)", s.SequenceNumber(), n, s.AckNumber(), s.WindowSize(), hostNxt, seq)
		if n > 0 && int32(s.SequenceNumber()+uint32(n)-hostNxt) > 0 {
			break
		}
	}
	if got := h.Driver.Stats().ZeroWindowAckRepairs; got == 0 {
		t.Fatalf("ZeroWindowAckRepairs = 0 although the host took an ACK only the repair makes acceptable")
	}
}

// TestAckRepairTable checks the table's rules frame by frame: which
// frames are repaired, what the copy holds, and when a flow leaves.
func TestAckRepairTable(t *testing.T) {
	var a ackRepair
	const ack = 5000
	// tcpFrame's outbound frames go hostIP:40000 -> peerIP:80.
	a.outbound(tcpFrame(true, 100, ack, 0x10, 0, nil, 0)) // zero window advertised
	if a.n.Load() != 1 {
		t.Fatalf("flow at a zero window not tracked")
	}
	if c := a.inbound(tcpFrame(false, ack, 100, 0x10, 100, nil, 0)); c != nil {
		t.Fatalf("an acceptable pure ACK (SEQ = RCV.NXT) was repaired")
	}
	if c := a.inbound(tcpFrame(false, ack+32, 100, 0x12, 100, nil, 0)); c != nil || a.n.Load() != 0 {
		t.Fatalf("a SYN did not end tracking")
	}
	a.outbound(tcpFrame(true, 100, ack, 0x10, 0, nil, 0))
	in := tcpFrame(false, ack+32, 150, 0x19, 100, tsOpt(7, 8), 64) // data + FIN past the window
	c := a.inbound(in)
	if c == nil {
		t.Fatal("an unacceptable segment at a zero window was not repaired")
	}
	hip, htcp, payload, ok := tcpView(c)
	ip, tcp := header.IPv4(hip), header.TCP(htcp) // checked with gVisor's views, not the driver's
	if !ok || payload != 0 || tcp.SequenceNumber() != ack || tcp.AckNumber() != 150 ||
		tcp.Flags() != header.TCPFlagAck || tcp.WindowSize() != 100 || len(tcp.Options()) != len(tsOpt(7, 8)) {
		t.Fatalf("repair copy: ok %v payload %d seq %d ack %d flags %v wnd %d", ok, payload,
			tcp.SequenceNumber(), tcp.AckNumber(), tcp.Flags(), tcp.WindowSize())
	}
	if !ip.IsChecksumValid() {
		t.Fatal("repair copy: bad IPv4 checksum")
	}
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, ip.SourceAddress(), ip.DestinationAddress(), uint16(len(tcp)))
	if checksum.Checksum(tcp, xsum) != 0xffff {
		t.Fatal("repair copy: bad TCP checksum")
	}
	if a.repairs.Load() != 1 {
		t.Fatalf("repairs = %d, want 1", a.repairs.Load())
	}
	a.outbound(tcpFrame(true, 100, ack, 0x10, 10, nil, 0)) // the window opens
	if a.n.Load() != 0 || a.inbound(in) != nil {
		t.Fatal("a flow whose window opened is still repaired")
	}
	// The table is bounded: flows past it are counted, not tracked.
	for i := range maxZeroWindowFlows + 3 {
		f := tcpFrame(true, 100, ack, 0x10, 0, nil, 0)
		binary.BigEndian.PutUint16(f[14+20:], uint16(i)) // source port
		a.outbound(f)
	}
	if a.n.Load() != maxZeroWindowFlows || a.full.Load() != 3 {
		t.Fatalf("table: %d flows, %d untracked; want %d and 3", a.n.Load(), a.full.Load(), maxZeroWindowFlows)
	}
}

// FuzzAckRepair feeds arbitrary frames both ways: no panic, and a copy is
// always a well-formed header-only segment.
func FuzzAckRepair(f *testing.F) {
	f.Add(tcpFrame(true, 100, 5000, 0x10, 0, nil, 0), tcpFrame(false, 5032, 150, 0x19, 100, tsOpt(7, 8), 64))
	f.Add(tcpFrame(true, 1, 2, 0x10, 0, synOpts, 0), tcpFrame(false, 9, 1, 0x10, 0, nil, 3))
	f.Fuzz(func(t *testing.T, out, in []byte) {
		var a ackRepair
		a.outbound(out)
		if c := a.inbound(in); c != nil {
			if _, _, payload, ok := tcpView(c); !ok || payload != 0 {
				t.Fatalf("malformed repair copy %x", c)
			}
		}
	})
}
