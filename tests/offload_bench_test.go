package tests

import (
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
)

// BenchmarkOffload compares a delegated connection with a netstack one
// between the same two emulated hosts over the same wire, in the same run:
// throughput, and CPU per GiB split between the host side (netstack,
// driver, applications, runtime) and the offload units (goroutines labelled
// side=device). Run with:
//
//	go test ./tests/ -run '^$' -bench Offload -benchtime 2000x -count 5
func BenchmarkOffload(b *testing.B) {
	b.Run("netstack", func(b *testing.B) {
		ha, hb := benchHosts(b)
		l, err := hb.Listen(5301)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		sink(l)
		c, err := ha.Dial(context.Background(), netip.AddrPortFrom(hb.Addr(), 5301))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		measureStream(b, c)
	})
	b.Run("delegated", func(b *testing.B) {
		ha, hb := benchHosts(b)
		l, err := hb.ListenOffload(5302)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		sink(l)
		c, err := ha.DialOffload(context.Background(), netip.AddrPortFrom(hb.Addr(), 5302))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		measureStream(b, c)
	})
}

func benchHosts(b *testing.B) (ha, hb *tcpstack.Host) {
	return hostrig.Pair(b)
}

// sink accepts one connection and discards what it reads.
func sink(l net.Listener) {
	go func() {
		s, err := l.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, s)
		s.Close()
	}()
}

func measureStream(b *testing.B, c net.Conn) {
	buf := make([]byte, 1<<20)
	// Warm up: connection windows open, buffers allocated.
	for i := 0; i < 16; i++ {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
	b.ResetTimer()
	var werr error
	split, err := cpusplit.Measure(func() {
		for i := 0; i < b.N; i++ {
			if _, werr = c.Write(buf); werr != nil {
				return
			}
		}
	})
	b.StopTimer()
	if werr != nil {
		b.Fatal(werr)
	}
	if err != nil {
		b.Skip(err)
	}
	gib := float64(b.N) * float64(len(buf)) / (1 << 30)
	b.ReportMetric(float64(b.N)*float64(len(buf))*8/split.Wall.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(split.Host.Seconds()/gib, "host-cpu-s/GiB")
	b.ReportMetric(split.Device.Seconds()/gib, "dev-cpu-s/GiB")
	b.ReportMetric(split.Total().Seconds()/gib, "cpu-s/GiB")
	_ = time.Second
}
