package tests

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// BenchmarkSplit compares hosts whose NICs run in their own processes
// (memfd host memory, eventfd doorbell and vectors) with the same hosts'
// NICs in process, in the same run: a NOP command's round trip through
// the command ring, and netstack and delegated TCP throughput. The CPU
// split of the other benchmarks cannot see into a device process, so only
// throughput and latency are compared. Run with:
//
//	go test ./tests/ -run '^$' -bench Split -benchtime 2000x -count 5
func BenchmarkSplit(b *testing.B) {
	for _, mode := range []string{"inproc", "split"} {
		hosts := func(b *testing.B) *hostrig.Rig {
			cfg := hostrig.Config{}
			if mode == "split" {
				s := func(c *tcpstack.HostConfig) { c.Split = &tcpstack.SplitConfig{} }
				cfg.HostA, cfg.HostB = s, s
			}
			return hostrig.New(b, cfg)
		}
		b.Run(mode+"/command-rtt", func(b *testing.B) {
			r := hosts(b)
			nop := rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}
			if _, err := r.A.Driver.Command(nop, 5*time.Second); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for range b.N {
				if _, err := r.A.Driver.Command(nop, 5*time.Second); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/netstack", func(b *testing.B) {
			r := hosts(b)
			l, err := r.B.Listen(5401)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			sink(l)
			c, err := r.A.Dial(context.Background(), netip.AddrPortFrom(hostrig.AddrB, 5401))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			measureStream(b, c)
		})
		b.Run(mode+"/delegated", func(b *testing.B) {
			r := hosts(b)
			l, err := r.B.ListenOffload(5402)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { l.Close() })
			sink(l)
			c, err := r.A.DialOffload(context.Background(), netip.AddrPortFrom(hostrig.AddrB, 5402))
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { c.Close() })
			measureStream(b, c)
		})
	}
}
