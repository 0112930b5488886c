package tests

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// channelPair is the baseline: the same netstack configuration on gVisor's
// own link/channel endpoints, one goroutine per direction moving packets.
func channelPair(b testing.TB) (a, c *tcpstack.Stack) {
	ea := channel.New(1024, 1500, tcpip.LinkAddress("\x02\x00\x00\x00\x00\x01"))
	ec := channel.New(1024, 1500, tcpip.LinkAddress("\x02\x00\x00\x00\x00\x02"))
	var err error
	if a, err = tcpstack.NewStack(ea, tcpstack.StackConfig{Addr: netip.MustParsePrefix("10.0.0.1/24")}); err != nil {
		b.Fatal(err)
	}
	if c, err = tcpstack.NewStack(ec, tcpstack.StackConfig{Addr: netip.MustParsePrefix("10.0.0.2/24")}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	shuttle := func(from, to *channel.Endpoint) {
		for {
			pkt := from.ReadContext(ctx)
			if pkt == nil {
				return
			}
			np := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: pkt.ToBuffer()})
			to.InjectInbound(pkt.NetworkProtocolNumber, np)
			np.DecRef()
			pkt.DecRef()
		}
	}
	go shuttle(ea, ec)
	go shuttle(ec, ea)
	b.Cleanup(func() { cancel(); a.Close(); c.Close() })
	return a, c
}

// stream opens one connection from a to c and returns the writer; the
// reader side discards.
func stream(b testing.TB, a, c *tcpstack.Stack) net.Conn {
	l, err := c.Listen(5201)
	if err != nil {
		b.Fatal(err)
	}
	sink(l)
	conn, err := a.Dial(context.Background(), netip.AddrPortFrom(c.Addr(), 5201))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close(); l.Close() })
	return conn
}

func benchStream(b *testing.B, conn net.Conn) {
	buf := make([]byte, 1<<20)
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := conn.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkTCPStream compares netstack ↔ netstack through both NICs' rings
// with the same pair over gVisor's link/channel, in the same run.
func BenchmarkTCPStream(b *testing.B) {
	b.Run("nic-rings", func(b *testing.B) {
		ha, hb := hostrig.Pair(b)
		benchStream(b, stream(b, ha.Stack, hb.Stack))
	})
	b.Run("link-channel", func(b *testing.B) {
		a, c := channelPair(b)
		benchStream(b, stream(b, a, c))
	})
}
