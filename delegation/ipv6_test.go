package delegation

import (
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

var (
	ip6A = netip.MustParseAddr("2001:db8:a::1")
	ip6B = netip.MustParseAddr("2001:db8:b::2")
)

// ipv6Bulk is bulkOpts over IPv6, with the MSS an IPv6 host on a
// 1500-byte link gives (1440), and a check on every frame the engines
// send: TCP/IPv6 with the connection's addresses, no longer than the link
// carries.
func ipv6Bulk(t *testing.T, size int64, loss float64, seed uint64) (*sim, *int) {
	o := bulkOpts(size, false, seed)
	o.link.loss, o.link.reorder = loss, loss
	o.pair.mss = 1500 - hdr.IPv6Size - hdr.TCPMinSize
	o.addrs = &[2]netip.Addr{ip6A, ip6B}
	s := newSim(t, o)
	frames := new(int)
	for i := range 2 {
		send, src := s.env[i].transmit, o.addrs[i]
		s.env[i].transmit = func(f []byte) error {
			ip, err := hdr.ParseIPv6(f[hdr.EthernetSize:])
			if hdr.Ethernet(f).Type() != hdr.EtherTypeIPv6 || err != nil || ip.NextHeader() != hdr.ProtoTCP ||
				ip.SourceAddress() != src || len(f) > hdr.EthernetSize+1500 {
				t.Fatalf("engine %d sent a frame that is not its TCP/IPv6 (%d bytes): % x", i, len(f), f[:min(len(f), 74)])
			}
			*frames++
			return send(f)
		}
	}
	return s, frames
}

// TestTransferIPv6: two engines move a stream each way over IPv6
// connections offloaded from version-2 state blocks, on a clean link and
// with 1% loss and reordering: the TCP above the network layer is the same
// code, every frame is TCP/IPv6, and the streams arrive intact.
func TestTransferIPv6(t *testing.T) {
	for _, c := range []struct {
		name string
		loss float64
	}{{"clean", 0}, {"lossy", 0.01}} {
		t.Run(c.name, func(t *testing.T) {
			s, frames := ipv6Bulk(t, transferSize()/4, c.loss, 3)
			s.start()
			s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
			s.checkHashes()
			s.checkClean()
			c0 := s.eng[0].Counters()
			if *frames == 0 || c0.DropBadChecksum != 0 {
				t.Fatalf("%d frames, %d bad checksums", *frames, c0.DropBadChecksum)
			}
			t.Logf("%d frames; link lost %d; A retransmitted %d segments", *frames, s.link.lost, c0.TxRetransSegs)
		})
	}
}

// TestPathMTUIPv6: a Packet Too Big below IPv6's minimum MTU is refused
// (BAD_PARAM: bad input, nothing changes); one at 1280 takes the MSS to
// 1220, and the stream goes on in frames that fit.
func TestPathMTUIPv6(t *testing.T) {
	s, _ := ipv6Bulk(t, 4<<20, 0, 4)
	s.start()
	c := s.eng[0].conns[0]
	s.runUntil(func() bool { return c.sndMax.Sub(c.sndUna) > 64<<10 }, 60e9)
	if st, mss := s.eng[0].PathMTU(0, uint32(c.sndUna), 1279); st != rings.StatusBadParam || mss != 1440 {
		t.Fatalf("Packet Too Big 1279: %v, MSS %d", st, mss)
	}
	if st, mss := s.eng[0].PathMTU(0, uint32(c.sndUna), 1280); st != rings.StatusOK || mss != 1280-60 {
		t.Fatalf("Packet Too Big 1280: %v, MSS %d", st, mss)
	}
	send := s.env[0].transmit
	s.env[0].transmit = func(f []byte) error {
		if len(f) > hdr.EthernetSize+1280 {
			t.Fatalf("a %d-byte frame after the path MTU fell to 1280", len(f))
		}
		return send(f)
	}
	s.runUntil(func() bool { return s.transferred() && s.host[0].closed && s.host[1].closed }, 3600e9)
	s.checkHashes()
}
