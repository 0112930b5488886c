package hdr

import (
	"bytes"
	"errors"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

func sampleFrame() TCPFrameFields {
	opts := make([]byte, 12)
	n := PutTCPOptMSS(opts, 1460)
	n += PutTCPOptWS(opts[n:], 7)
	return TCPFrameFields{
		SrcMAC: MAC{2, 0, 0, 0, 0, 1}, DstMAC: MAC{2, 0, 0, 0, 0, 2},
		Src: IPv4Addr{10, 0, 0, 1}, Dst: IPv4Addr{10, 0, 0, 2}, ID: 7, DontFragment: true,
		TCP:     TCPFields{SrcPort: 40000, DstPort: 7, Seq: 1000, Ack: 2000, Flags: TCPFlagACK | TCPFlagPSH, Window: 512},
		Options: opts[:n], Payload: []byte("hello, wire"),
	}
}

// TestTCPFrameRoundTrip: a built frame parses back to what was built, with
// both checksums good and the options padded to a word.
func TestTCPFrameRoundTrip(t *testing.T) {
	f := sampleFrame()
	b := f.Append(nil)
	if len(b) != f.Len() {
		t.Fatalf("Append wrote %d bytes, Len %d", len(b), f.Len())
	}
	ip, tcp, err := ParseTCPFrame(b)
	if err != nil {
		t.Fatal(err)
	}
	if !ip.ChecksumOK() || !tcp.ChecksumOK(ip.Src(), ip.Dst()) {
		t.Fatal("bad checksum")
	}
	if ip.Src() != f.Src || ip.Dst() != f.Dst || ip.ID() != 7 || !ip.DF() || ip.TTL() != IPv4DefaultTTL {
		t.Fatalf("IPv4 fields %v", ip)
	}
	if tcp.SrcPort() != 40000 || tcp.DstPort() != 7 || tcp.Seq() != 1000 || tcp.Ack() != 2000 ||
		tcp.Flags() != TCPFlagACK|TCPFlagPSH || tcp.Window() != 512 || tcp.HeaderLen() != 28 {
		t.Fatalf("TCP fields %v", tcp)
	}
	if !bytes.Equal(tcp.Payload(), f.Payload) {
		t.Fatalf("payload %q", tcp.Payload())
	}
	if o := tcp.Options(); !bytes.Equal(o[:7], f.Options) || o[7] != TCPOptEOL {
		t.Fatalf("options % x", o)
	}
	// Ethernet padding behind the datagram is not part of it.
	padded := append(bytes.Clone(b), make([]byte, 16)...)
	if _, tcp, err := ParseTCPFrame(padded); err != nil || !bytes.Equal(tcp.Payload(), f.Payload) {
		t.Fatalf("padded frame: %v %q", err, tcp.Payload())
	}
}

// TestParseTCPFrameRejects: every truncated prefix, and frames that are not
// unfragmented IPv4 TCP, are refused with a reason.
func TestParseTCPFrameRejects(t *testing.T) {
	f := sampleFrame()
	b := f.Append(nil)
	for n := range len(b) {
		if _, _, err := ParseTCPFrame(b[:n]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
	mut := func(off int, v byte) []byte { c := bytes.Clone(b); c[off] = v; return c }
	for name, c := range map[string]struct {
		frame []byte
		want  Error
	}{
		"arp":      {mut(EthernetOffType+1, 0x06), ErrNotTCP},
		"udp":      {mut(EthernetSize+IPv4OffProto, ProtoUDP), ErrNotTCP},
		"fragment": {mut(EthernetSize+IPv4OffFlagsFrag, 0x20), ErrNotTCP},
		"ipv6":     {mut(EthernetSize, 0x65), ErrVersion},
		"tcp-off":  {mut(EthernetSize+IPv4MinSize+TCPOffDataOff, 0xF0), ErrHeaderLen},
	} {
		if _, _, err := ParseTCPFrame(c.frame); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", name, err, c.want)
		}
	}
}

// FuzzParseTCPFrame: no input panics, and an accepted frame's views lie
// inside it.
func FuzzParseTCPFrame(f *testing.F) {
	s := sampleFrame()
	f.Add(s.Append(nil))
	s.Options, s.Payload = nil, nil
	f.Add(s.Append(nil))
	f.Fuzz(func(t *testing.T, b []byte) {
		ip, tcp, err := ParseTCPFrame(b)
		if err != nil {
			return
		}
		if len(ip) > len(b)-EthernetSize || tcp.HeaderLen() > len(tcp) || len(tcp) > len(ip) {
			t.Fatalf("views outside the frame: ip %d tcp %d frame %d", len(ip), len(tcp), len(b))
		}
	})
}

func TestWriteCorpusTCPFrame(t *testing.T) {
	fuzzcorpus.Updating(t)
	s := sampleFrame()
	b := s.Append(nil)
	fuzzcorpus.Write(t, "FuzzParseTCPFrame", [][]byte{b, b[:EthernetSize+IPv4MinSize+TCPMinSize+3], b[:len(b)-1]})
}
