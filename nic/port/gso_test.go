package port

import (
	"bytes"
	"errors"
	"testing"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
)

// superFrame builds a TCP/IPv4 super-frame of payload bytes as the kernel
// hands one to a TAP with offloads: IP length of the whole, the TCP checksum
// field holding the pseudo-header's sum only.
func superFrame(t testing.TB, payload []byte, flags uint8) []byte {
	t.Helper()
	return testutil.TSOFrame(hdr.TCPFrameFields{Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2}, ID: 100,
		TCP: hdr.TCPFields{SrcPort: 1234, DstPort: 9, Seq: 1000, Ack: 5, Flags: flags, Window: 1000}, Payload: payload})
}

func TestGSOSplit(t *testing.T) {
	payload := make([]byte, 10000)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	f := superFrame(t, payload, hdr.TCPFlagACK|hdr.TCPFlagPSH|hdr.TCPFlagFIN|hdr.TCPFlagCWR)
	var s gsoSplitter
	h := VnetHdr{Flags: VnetFlagNeedsCsum, GSOType: VnetGSOTCPv4 | VnetGSOECN, GSOSize: 1448, CsumStart: 34, CsumOffset: 16}
	if err := s.split(&h, f); err != nil {
		t.Fatal(err)
	}
	var got []byte
	buf := make([]byte, 1514)
	for i := 0; s.pending(); i++ {
		n, err := s.pop(buf, true)
		if err != nil {
			t.Fatal(err)
		}
		ip, tcp, err := hdr.ParseTCPFrame(buf[:n])
		if err != nil {
			t.Fatalf("segment %d: %v", i, err)
		}
		if !ip.ChecksumOK() || !tcp.ChecksumOK(ip.Src(), ip.Dst()) {
			t.Fatalf("segment %d: bad checksum", i)
		}
		if tcp.Seq() != 1000+uint32(i*1448) || ip.ID() != 100+uint16(i) {
			t.Fatalf("segment %d: seq %d id %d", i, tcp.Seq(), ip.ID())
		}
		last := len(got)+len(tcp.Payload()) == len(payload)
		fl := tcp.Flags()
		if fl&hdr.TCPFlagFIN != 0 != last || fl&hdr.TCPFlagPSH != 0 != last || fl&hdr.TCPFlagCWR != 0 != (i == 0) || fl&hdr.TCPFlagACK == 0 {
			t.Fatalf("segment %d (last %v): flags %#x", i, last, fl)
		}
		if len(tcp.Payload()) > 1448 {
			t.Fatalf("segment %d: %d bytes", i, len(tcp.Payload()))
		}
		got = append(got, tcp.Payload()...)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("the segments do not carry the payload in order")
	}
	// A short buffer drops the segment, reports it, and the next comes.
	s.split(&h, f)
	if _, err := s.pop(make([]byte, 100), true); !errors.Is(err, ErrFrameTooBig) || !s.pending() {
		t.Fatalf("short buffer: %v", err)
	}
}

func TestFinishCsum(t *testing.T) {
	f := superFrame(t, []byte("hello"), hdr.TCPFlagACK)
	if err := finishCsum(f, 34, 16); err != nil {
		t.Fatal(err)
	}
	ip, tcp, err := hdr.ParseTCPFrame(f)
	if err != nil || !tcp.ChecksumOK(ip.Src(), ip.Dst()) {
		t.Fatalf("checksum not finished: %v", err)
	}
	for _, c := range [][2]int{{-1, 0}, {34, -2}, {len(f) - 1, 0}, {34, 1 << 16}} {
		if err := finishCsum(f, c[0], c[1]); !errors.Is(err, ErrBadGSO) {
			t.Errorf("start %d offset %d: %v", c[0], c[1], err)
		}
	}
}

// TestGSOBad: every super-frame the splitter cannot take apart is
// ErrBadGSO, and every truncation of a good one is refused or split
// without reading past it.
func TestGSOBad(t *testing.T) {
	f := superFrame(t, make([]byte, 3000), hdr.TCPFlagACK)
	h := VnetHdr{GSOType: VnetGSOTCPv4, GSOSize: 1448}
	var s gsoSplitter
	for name, c := range map[string]struct {
		h VnetHdr
		f []byte
	}{
		"udp":      {VnetHdr{GSOType: VnetGSOUDP, GSOSize: 1448}, f},
		"tcpv6":    {VnetHdr{GSOType: VnetGSOTCPv6, GSOSize: 1448}, f},
		"size 0":   {VnetHdr{GSOType: VnetGSOTCPv4}, f},
		"not ipv4": {h, append([]byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x86, 0xdd}, f[14:]...)},
		"runt":     {h, f[:10]},
	} {
		if err := s.split(&c.h, c.f); !errors.Is(err, ErrBadGSO) {
			t.Errorf("%s: %v", name, err)
		}
	}
	for n := 0; n <= len(f); n++ {
		_ = s.split(&h, f[:n]) // must not panic
	}
	var d VnetHdr
	if err := d.Decode(make([]byte, VnetHdrSize-1)); !errors.Is(err, ErrBadGSO) {
		t.Errorf("short header: %v", err)
	}
}

func FuzzGSOSplit(f *testing.F) {
	good := superFrame(f, make([]byte, 3000), hdr.TCPFlagACK)
	var hb [VnetHdrSize]byte
	(&VnetHdr{GSOType: VnetGSOTCPv4, GSOSize: 1448}).Encode(hb[:])
	f.Add(append(hb[:], good...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h VnetHdr
		if h.Decode(b) != nil {
			return
		}
		var s gsoSplitter
		if s.split(&h, b[VnetHdrSize:]) != nil {
			return
		}
		buf := make([]byte, 65536)
		for s.pending() {
			if _, err := s.pop(buf, true); err != nil {
				t.Fatal(err)
			}
		}
	})
}

// TestSplitterMatchesPort: the exported Splitter (the device's cut of a
// super-frame it took whole for a flow the engine does not own) gives the
// same segments as the port's own cut, checksum left to the device's word.
func TestSplitterMatchesPort(t *testing.T) {
	payload := make([]byte, 5000)
	for i := range payload {
		payload[i] = byte(i * 3)
	}
	f := superFrame(t, payload, hdr.TCPFlagACK|hdr.TCPFlagPSH)
	var s gsoSplitter
	h := VnetHdr{Flags: VnetFlagNeedsCsum, GSOType: VnetGSOTCPv4, GSOSize: 1000, CsumStart: 34, CsumOffset: 16}
	if err := s.split(&h, f); err != nil {
		t.Fatal(err)
	}
	var p Splitter
	if err := p.Split(1000, f); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1514)
	for i := 0; s.pending(); i++ {
		n, _ := s.pop(buf, false)
		if got := p.Peek(); !bytes.Equal(got, buf[:n]) {
			t.Fatalf("segment %d differs from the port's", i)
		}
		p.Pop()
	}
	if p.Pending() || p.Peek() != nil {
		t.Fatal("the Splitter has segments the port did not")
	}
	if err := p.Split(0, f); err == nil {
		t.Error("GSO size 0 accepted")
	}
	if err := p.Split(1000, f[:20]); err == nil || p.Pending() {
		t.Error("a truncated super-frame accepted")
	}
}

// TestGSOSplit6: a TCP/IPv6 super-frame (GSO TCPV6) is cut into segments
// with their own payload length, sequence number and flags, and a TCP
// checksum over the IPv6 pseudo-header; an LRO super-frame of either
// family is cut by Splitter by its EtherType.
func TestGSOSplit6(t *testing.T) {
	payload := make([]byte, 10000)
	for i := range payload {
		payload[i] = byte(i * 5)
	}
	src, dst := hdr.IPv6Addr{0xfd, 0, 15: 1}, hdr.IPv6Addr{0xfd, 0, 15: 2}
	f := testutil.TSOFrame6(hdr.TCPFrameFields{TCP: hdr.TCPFields{SrcPort: 1234, DstPort: 9, Seq: 1000, Ack: 5,
		Flags: hdr.TCPFlagACK | hdr.TCPFlagPSH | hdr.TCPFlagFIN, Window: 1000}, Payload: payload}, src, dst)
	for _, how := range []string{"tap", "splitter"} {
		var segs [][]byte
		switch how {
		case "tap":
			var s gsoSplitter
			h := VnetHdr{Flags: VnetFlagNeedsCsum, GSOType: VnetGSOTCPv6, GSOSize: 1428, CsumStart: 54, CsumOffset: 16}
			if err := s.split(&h, f); err != nil {
				t.Fatal(err)
			}
			for s.pending() {
				buf := make([]byte, 1514)
				n, err := s.pop(buf, true)
				if err != nil {
					t.Fatal(err)
				}
				segs = append(segs, buf[:n])
			}
		case "splitter":
			var p Splitter
			if err := p.Split(1428, f); err != nil {
				t.Fatal(err)
			}
			for p.Pending() {
				seg := append([]byte(nil), p.Peek()...)
				ip := hdr.IPv6(seg[hdr.EthernetSize:])
				tcp := hdr.TCP(ip[hdr.IPv6Size:])
				tcp.SetChecksum(0)
				tcp.SetChecksum(ip.TransportChecksum(hdr.ProtoTCP, tcp))
				segs = append(segs, seg)
				p.Pop()
			}
		}
		var got []byte
		for i, seg := range segs {
			var k hdr.Tuple
			tcp, err := hdr.ParseTCPFrameRx(seg, &k)
			if err != nil {
				t.Fatalf("%s segment %d: %v", how, i, err)
			}
			ip := hdr.IPv6(seg[hdr.EthernetSize:])
			if !ip.TransportChecksumOK(hdr.ProtoTCP, tcp) || k.RemoteIP.As16() != src || int(ip.PayloadLen()) != len(tcp) {
				t.Fatalf("%s segment %d: checksum, addresses or length wrong", how, i)
			}
			last := i == len(segs)-1
			if tcp.Seq() != 1000+uint32(i*1428) || tcp.Flags()&hdr.TCPFlagFIN != 0 != last || len(tcp.Payload()) > 1428 {
				t.Fatalf("%s segment %d: seq %d flags %#x, %d bytes", how, i, tcp.Seq(), tcp.Flags(), len(tcp.Payload()))
			}
			got = append(got, tcp.Payload()...)
		}
		if !bytes.Equal(got, payload) {
			t.Fatalf("%s: the segments do not carry the payload in order", how)
		}
	}
	// An IPv6 frame named TCPV4, and the reverse, are refused.
	var s gsoSplitter
	if err := s.split(&VnetHdr{GSOType: VnetGSOTCPv4, GSOSize: 1428}, f); !errors.Is(err, ErrBadGSO) {
		t.Errorf("IPv6 as TCPV4: %v", err)
	}
	for n := 0; n <= len(f); n++ {
		_ = s.split(&VnetHdr{GSOType: VnetGSOTCPv6, GSOSize: 1428}, f[:n]) // must not panic
	}
}
