package iwarp

import (
	"bytes"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// tcpSession builds a synthetic TCP conversation between two endpoints as
// Ethernet/IPv4/TCP frames with correct checksums and sequence numbers: a
// three-way handshake, data segments each acknowledged, and a FIN exchange.
type tcpSession struct {
	t    *testing.T
	buf  bytes.Buffer
	w    *pcapgo.Writer
	ts   time.Time
	ends [2]tcpEnd
	ipID uint16
}

type tcpEnd struct {
	mac  net.HardwareAddr
	ip   net.IP
	port uint16
	seq  uint32 // next sequence number to send
}

func newTCPSession(t *testing.T) *tcpSession {
	s := &tcpSession{t: t, ts: time.Unix(1_700_000_000, 0)}
	s.w = pcapgo.NewWriter(&s.buf)
	if err := s.w.WriteFileHeader(65536, layers.LinkTypeEthernet); err != nil {
		t.Fatal(err)
	}
	s.ends[0] = tcpEnd{mac: net.HardwareAddr{2, 0, 0, 0, 0, 1}, ip: net.IPv4(10, 0, 0, 1).To4(), port: 40000, seq: 1000}
	s.ends[1] = tcpEnd{mac: net.HardwareAddr{2, 0, 0, 0, 0, 2}, ip: net.IPv4(10, 0, 0, 2).To4(), port: 5001, seq: 90000}
	s.segment(0, true, false, false, nil)
	s.segment(1, true, true, false, nil)
	s.segment(0, false, true, false, nil)
	return s
}

// segment writes one frame from end `from`.
func (s *tcpSession) segment(from int, syn, ack, fin bool, payload []byte) {
	a, b := &s.ends[from], &s.ends[1-from]
	eth := &layers.Ethernet{SrcMAC: a.mac, DstMAC: b.mac, EthernetType: layers.EthernetTypeIPv4}
	s.ipID++
	ip := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: a.ip, DstIP: b.ip,
		Id: s.ipID, Flags: layers.IPv4DontFragment}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(a.port), DstPort: layers.TCPPort(b.port), Seq: a.seq,
		SYN: syn, ACK: ack || !syn, FIN: fin, PSH: len(payload) > 0, Window: 65535}
	if tcp.ACK {
		tcp.Ack = b.seq
	}
	if syn && !ack {
		tcp.ACK = false
	}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		s.t.Fatal(err)
	}
	sb := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(sb, opts, eth, ip, tcp, gopacket.Payload(payload)); err != nil {
		s.t.Fatal(err)
	}
	a.seq += uint32(len(payload))
	if syn || fin {
		a.seq++
	}
	s.ts = s.ts.Add(100 * time.Microsecond)
	data := sb.Bytes()
	if err := s.w.WritePacket(gopacket.CaptureInfo{Timestamp: s.ts, CaptureLength: len(data), Length: len(data)}, data); err != nil {
		s.t.Fatal(err)
	}
}

// send writes data from end `from` in segments of at most mss bytes, each
// acknowledged by the other end.
func (s *tcpSession) send(from int, data []byte, mss int) {
	for len(data) > 0 {
		n := min(len(data), mss)
		s.segment(from, false, true, false, data[:n])
		s.segment(1-from, false, true, false, nil)
		data = data[n:]
	}
}

func (s *tcpSession) close() []byte {
	s.segment(0, false, true, true, nil)
	s.segment(1, false, true, true, nil)
	s.segment(0, false, true, false, nil)
	return s.buf.Bytes()
}

// pcapFile writes pcap to a file for tshark and returns its path (also
// keeping a copy in $IWARP_PCAP_DIR, when set, to look at by hand).
func pcapFile(t *testing.T, pcap []byte) string {
	t.Helper()
	f := t.TempDir() + "/iwarp.pcap"
	if err := os.WriteFile(f, pcap, 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("IWARP_PCAP_DIR"); dir != "" {
		_ = os.WriteFile(dir+"/"+strings.ReplaceAll(t.Name(), "/", "_")+".pcap", pcap, 0o644)
	}
	return f
}
