package tcpstack

import (
	"sync/atomic"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/stack/gro"
)

// countingDispatcher counts the packets GRO hands up, per source port.
type countingDispatcher struct {
	stack.NetworkDispatcher
	out   atomic.Uint64
	ports map[uint16]int
}

func (c *countingDispatcher) DeliverNetworkPacket(_ tcpip.NetworkProtocolNumber, pkt *stack.PacketBuffer) {
	c.out.Add(1)
	v := pkt.Data().AsRange().ToView()
	defer v.Release()
	c.ports[header.TCP(v.AsSlice()[header.IPv4MinimumSize:]).SourcePort()]++
}

// TestFlushAllGRO: data segments of several flows that hash to one of the
// coalescer's buckets all reach netstack when a batch ends. gVisor's own
// Flush hands up only the first of them (the rest waited for the next
// batch, or for good); flushAllGRO hands up every one.
func TestFlushAllGRO(t *testing.T) {
	// The bucket is the sum of the address bytes and ports, mod 8: source
	// ports 8 apart land in the same one.
	ports := []uint16{40000, 40008, 40016, 40024, 40032, 40040, 40048, 40056, 40064}
	for _, fixed := range []bool{false, true} {
		d := &countingDispatcher{ports: map[uint16]int{}}
		var g gro.GRO
		g.Init(true)
		g.Dispatcher = d
		for _, p := range ports {
			g.Enqueue(groSegment(t, p))
		}
		if fixed {
			flushAllGRO(&g, &d.out)
		} else {
			g.Flush()
		}
		got := int(d.out.Load())
		switch {
		case fixed && got != len(ports):
			t.Errorf("flushAllGRO handed up %d of %d flows' segments: %v", got, len(ports), d.ports)
		case !fixed && got == len(ports):
			t.Logf("gVisor's GRO.Flush now empties its buckets itself (flushAllGRO's loop is harmless)")
		case !fixed:
			t.Logf("gVisor's GRO.Flush handed up %d of %d (the bug flushAllGRO works around)", got, len(ports))
		}
		for _, p := range ports {
			if fixed && d.ports[p] != 1 {
				t.Errorf("flow from port %d: %d packets handed up, want 1", p, d.ports[p])
			}
		}
	}
}

// groSegment is a 100-byte data segment without PSH (GRO keeps it for
// merging) from port src to 10.0.0.2:80, as the driver hands it to GRO.
func groSegment(t *testing.T, src uint16) *stack.PacketBuffer {
	f := hdr.TCPFrameFields{
		Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2},
		TCP:     hdr.TCPFields{SrcPort: src, DstPort: 80, Seq: 1000, Ack: 1, Flags: hdr.TCPFlagACK, Window: 1000},
		Payload: make([]byte, 100),
	}
	frame := f.Append(nil)
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(frame[header.EthernetMinimumSize:])})
	pkt.NetworkProtocolNumber = header.IPv4ProtocolNumber
	pkt.RXChecksumValidated = true
	t.Cleanup(pkt.DecRef)
	return pkt
}
