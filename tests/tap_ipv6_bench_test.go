//go:build linux

package tests

import (
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack/services"
)

// BenchmarkTAPDelegatedIPv6 measures bulk TCP between the Linux kernel and
// the emulated host's delegated services over IPv6 against the same over
// IPv4: one dual-stack host on one TAP (TSO, TSO6 and LRO on), in the same
// run, the two families alternating which goes first in each iteration.
// to-server: the kernel writes to the discard service (until its FIN, so
// it read everything); from-server: the kernel reads from the source
// service. Each stream is EMUNIC_TAP_STREAM_MB MiB (default 128). Reported:
// MB/s of each family and their ratio, v6/v4 (the issue asks for >= 0.95).
// Root only:
//
//	go test ./tests -run '^$' -bench TAPDelegatedIPv6 -benchtime 4x -count 3
func BenchmarkTAPDelegatedIPv6(b *testing.B) {
	lab := newTAPOffloadLab6(b, 108, port.TAPOptions{})
	ls := lab.serveAllDelegated(b)
	size := int64(128 << 20)
	if mb, err := strconv.Atoi(os.Getenv("EMUNIC_TAP_STREAM_MB")); err == nil && mb > 0 {
		size = int64(mb) << 20
	}
	for _, dir := range []string{"to-server", "from-server"} {
		b.Run(dir, func(b *testing.B) {
			toServer := dir == "to-server"
			p := uint16(services.SourcePort)
			if toServer {
				p = services.DiscardPort
			}
			stream := func(dst netip.Addr) time.Duration {
				c, err := lab.ns.dial(netip.AddrPortFrom(dst, p))
				if err != nil {
					b.Fatal(err)
				}
				defer c.Close()
				return kernelStream(b, c, toServer, size)
			}
			var t4, t6 time.Duration
			for i := 0; i < b.N; i++ {
				if i%2 == 0 {
					t4 += stream(lab.emu.Addr())
					t6 += stream(lab.emu6.Addr())
				} else {
					t6 += stream(lab.emu6.Addr())
					t4 += stream(lab.emu.Addr())
				}
			}
			mb4 := float64(size) * float64(b.N) / t4.Seconds() / 1e6
			mb6 := float64(size) * float64(b.N) / t6.Seconds() / 1e6
			b.ReportMetric(mb4, "ipv4_MB/s")
			b.ReportMetric(mb6, "ipv6_MB/s")
			b.ReportMetric(mb6/mb4, "v6/v4")
		})
	}
	for _, l := range ls {
		if n := l.Fallbacks() + l.Lost(); n != 0 {
			b.Fatalf("%v: %d connections not delegated: %v", l.Addr(), n, l.FallbackErr())
		}
	}
}
