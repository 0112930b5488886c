package testutil

import (
	"bytes"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

func sampleTCP() hdr.TCPFrameFields {
	return hdr.TCPFrameFields{SrcMAC: hdr.MAC{2, 0, 0, 0, 0, 1}, DstMAC: hdr.MAC{2, 0, 0, 0, 0, 2},
		Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2}, DontFragment: true,
		TCP:     hdr.TCPFields{SrcPort: 40000, DstPort: 80, Seq: 7, Ack: 9, Flags: hdr.TCPFlagACK, Window: 1000},
		Options: []byte{hdr.TCPOptNOP, hdr.TCPOptNOP}, Payload: []byte("payload")}
}

func TestTCPFrameAndPacket(t *testing.T) {
	f := TCPFrame(sampleTCP())
	ip, tcp, err := hdr.ParseTCPFrame(f)
	if err != nil {
		t.Fatal(err)
	}
	if tcp.Seq() != 7 || tcp.HeaderLen() != 24 || !bytes.Equal(tcp.Payload(), []byte("payload")) ||
		!tcp.ChecksumOK(ip.Src(), ip.Dst()) {
		t.Fatalf("frame %x", f)
	}
	pip, ptcp := TCPPacket(sampleTCP())
	if !bytes.Equal(pip, f[hdr.EthernetSize:hdr.EthernetSize+hdr.IPv4MinSize]) ||
		!bytes.Equal(ptcp, f[hdr.EthernetSize+hdr.IPv4MinSize:]) {
		t.Fatal("TCPPacket differs from the frame's IPv4 header and segment")
	}
	if cap(pip) != len(pip) || cap(ptcp) != len(ptcp) {
		t.Fatal("TCPPacket leaves room past an end: an append would overwrite")
	}
}

func TestTSOFrame(t *testing.T) {
	s := sampleTCP()
	s.Payload = make([]byte, 5000)
	f := TSOFrame(s)
	ip := hdr.IPv4(f[hdr.EthernetSize:])
	tcp := hdr.TCP(ip[hdr.IPv4MinSize:])
	if int(ip.TotalLen()) != len(ip) {
		t.Fatalf("IPv4 total length %d, want the whole %d", ip.TotalLen(), len(ip))
	}
	if want := hdr.Fold(hdr.PseudoHeaderSum(hdr.ProtoTCP, s.Src, s.Dst, len(tcp))); tcp.Checksum() != want {
		t.Fatalf("TCP checksum field %#x, want the pseudo-header sum %#x", tcp.Checksum(), want)
	}
}

func TestUDPFrame(t *testing.T) {
	fields := UDPFrameFields{SrcMAC: hdr.MAC{2, 0, 0, 0, 0, 1}, DstMAC: hdr.MAC{2, 0, 0, 0, 0, 2},
		Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2}, SrcPort: 5, DstPort: 6, Payload: []byte("abc")}
	for _, none := range []bool{false, true} {
		fields.NoChecksum = none
		f := UDPFrame(fields)
		ip, err := hdr.ParseIPv4(f[hdr.EthernetSize:])
		if err != nil || ip.Proto() != hdr.ProtoUDP {
			t.Fatalf("IPv4: %v, %x", err, f)
		}
		u, err := hdr.ParseUDP(ip.Payload())
		if err != nil || u.DstPort() != 6 || string(u.Payload()) != "abc" {
			t.Fatalf("UDP: %v, %x", err, f)
		}
		if none && u.Checksum() != 0 || !none && !u.ChecksumOK(ip.Src(), ip.Dst()) {
			t.Fatalf("NoChecksum %v: checksum %#x", none, u.Checksum())
		}
	}
}
