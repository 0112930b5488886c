package nic

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// tcpTestFrame is an Ethernet/IPv4/TCP frame from the peer to the device
// with a timestamps option, payload bytes of data and every checksum right.
func tcpTestFrame(payload int) []byte {
	opts := make([]byte, 12)
	opts[0], opts[1] = hdr.TCPOptNOP, hdr.TCPOptNOP
	hdr.PutTCPOptTimestamp(opts[2:], 7, 8)
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i)
	}
	f := hdr.TCPFrameFields{SrcMAC: peerMAC, DstMAC: devMAC, Src: hdr.IPv4Addr{10, 0, 0, 2}, Dst: hdr.IPv4Addr{10, 0, 0, 1},
		DontFragment: true, TCP: hdr.TCPFields{SrcPort: 40000, DstPort: 80, Seq: 1, Ack: 2, Flags: hdr.TCPFlagACK, Window: 1000},
		Options: opts, Payload: data}
	return f.Append(nil)
}

func TestClassifyTCP(t *testing.T) {
	var pf parsedFrame
	f := tcpTestFrame(100)
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || !pf.l4CsumOK || pf.proto != ProtoTCP ||
		pf.l4Len != 20+12+100 || pf.engineFlags() == 0 {
		t.Fatalf("verdict %d %+v", v, pf)
	}
	f[len(f)-1] ^= 1
	if v := classify(f, devMAC, 1514, &pf, false); v != rxDropChecksum || pf.engineFlags() != 0 {
		t.Fatalf("corrupt payload: verdict %d", v)
	}
	// A fragment is not summed: the engine is not told it was.
	f = tcpTestFrame(100)
	ip := hdr.IPv4(f[EthHeaderLen:])
	ip.SetFlagsFrag(hdr.IPv4FlagMF)
	ip.UpdateChecksum()
	if v := classify(f, devMAC, 1514, &pf, false); v != rxLegacy || !pf.fragment || pf.engineFlags() != 0 {
		t.Fatalf("fragment: verdict %d %+v", v, pf)
	}
	// A UDP checksum verified is not a TCP one.
	u := frame(devMAC, 10)
	if v := classify(u, devMAC, 1514, &pf, false); v != rxLegacy || !pf.l4CsumOK || pf.engineFlags() != 0 {
		t.Fatalf("UDP: verdict %d %+v", v, pf)
	}
}

func TestClassifyAllocs(t *testing.T) {
	f := tcpTestFrame(1448)
	var pf parsedFrame
	if n := testing.AllocsPerRun(100, func() {
		if classify(f, devMAC, 1514, &pf, false) != rxLegacy {
			t.Fatal("dropped")
		}
	}); n != 0 {
		t.Fatalf("%v allocations per frame", n)
	}
}

// BenchmarkClassify: the receive parser on a pure ACK and on a full-sized
// segment (both checksums summed).
func BenchmarkClassify(b *testing.B) {
	for _, c := range []struct {
		name    string
		payload int
	}{{"ack", 0}, {"1448", 1448}} {
		f := tcpTestFrame(c.payload)
		b.Run(c.name, func(b *testing.B) {
			var pf parsedFrame
			b.SetBytes(int64(len(f)))
			for b.Loop() {
				if classify(f, devMAC, 1514, &pf, false) != rxLegacy {
					b.Fatal("dropped")
				}
			}
		})
	}
}
