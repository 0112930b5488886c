package main

import (
	"path/filepath"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/trace"
)

// TestGoldenIPv6 holds the IPv6 golden trace to what it is for: every TCP
// segment the devices send is IPv6 (none falls back to IPv4), neighbour
// discovery is in it, and the delegated connections (the offload, sockets
// direct and RDMA paths) were handed over with version-2 state blocks and
// all succeeded, QPs made on them included.
func TestGoldenIPv6(t *testing.T) {
	recs := readTrace(t, filepath.Join(goldenDir, "ipv6.trace"))
	var tcp4, tcp6, icmp6, offloads, qps int
	for i := range recs {
		r := &recs[i]
		switch {
		case r.Kind == trace.KindFrameOut && len(r.Data) >= hdr.EthernetSize+hdr.IPv6Size:
			switch hdr.Ethernet(r.Data).Type() {
			case hdr.EtherTypeIPv4:
				if hdr.IPv4(r.Data[hdr.EthernetSize:]).Proto() == hdr.ProtoTCP {
					tcp4++
				}
			case hdr.EtherTypeIPv6:
				switch hdr.IPv6(r.Data[hdr.EthernetSize:]).NextHeader() {
				case hdr.ProtoTCP:
					tcp6++
				case hdr.ProtoICMPv6:
					icmp6++
				}
			}
		case r.Kind == trace.KindComplete && r.Ring == 0:
			var c rings.Command
			c.Decode(rings.CommandEntry(r.Data))
			switch c.Opcode {
			case rings.OpOffload:
				if c.Status != rings.StatusOK || c.Len != rings.ConnStateSizeV2 {
					t.Errorf("OFFLOAD conn %d: status %v, a state block of %d bytes (want OK, version 2's %d)", c.Conn, c.Status, c.Len, rings.ConnStateSizeV2)
				}
				offloads++
			case rings.OpCreateQP:
				if c.Status != rings.StatusOK {
					t.Errorf("CREATE_QP conn %d: %v", c.Conn, c.Status)
				}
				qps++
			}
		}
	}
	t.Logf("TCP frames: %d IPv6, %d IPv4; ICMPv6 %d; OFFLOADs %d; CREATE_QPs %d", tcp6, tcp4, icmp6, offloads, qps)
	switch {
	case tcp4 != 0:
		t.Errorf("%d TCP segments over IPv4 in the IPv6 trace", tcp4)
	case tcp6 == 0 || icmp6 == 0:
		t.Errorf("%d TCP segments and %d ICMPv6 messages over IPv6: want both", tcp6, icmp6)
	case offloads < 6 || qps < 4:
		// Two ends of each of offload, sockets direct and RDMA; a QP at
		// each end of the last two.
		t.Errorf("%d OFFLOADs and %d CREATE_QPs: want at least 6 and 4", offloads, qps)
	}
}
