package direct

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/tcpstack"
)

// BenchmarkDirect compares sockets direct with delegated TCP
// (Host.DialOffload/ListenOffload) and netstack TCP between the same two
// emulated hosts, in the same run: one-way throughput with writes of 64 B,
// 4 KiB, 64 KiB and 1 MiB (a discarding reader on the other host), and a
// 1-byte ping-pong (ns/op is one round trip). CPU is split with pprof
// labels (internal/cpusplit): host-cpu-s/GiB is everything but the
// emulated devices (applications, netstack, driver, verbs, the switch's
// poller, the runtime). Run with:
//
//	go test ./tcpstack/direct -run '^$' -bench Direct -benchtime 2s -count 5
func BenchmarkDirect(b *testing.B) {
	paths := []string{"direct", "delegated", "netstack"}
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("stream/%s/%s", sizeName(size), p), func(b *testing.B) { benchStream(b, p, size) })
		}
	}
	for _, p := range paths {
		b.Run("pingpong/"+p, func(b *testing.B) { benchPingPong(b, p) })
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

var benchPort = uint16(9500)

// benchCfg is the sockets-direct configuration the benchmark uses.
var benchCfg = Config{}

// noSplit runs without the CPU split (for -cpuprofile, which it would
// conflict with).
var noSplit = false

// benchPair connects the two hosts of a fresh rig on path p; serve runs on
// the accepted side.
func benchPair(b *testing.B, path string, serve func(net.Conn)) net.Conn {
	a, h := rig(b)
	benchPort++
	port := benchPort
	var l net.Listener
	var err error
	switch path {
	case "direct":
		l, err = Listen(h, port, benchCfg)
	case "delegated":
		l, err = h.ListenOffload(port)
	default:
		l, err = h.Listen(port)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		serve(c)
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dst := netip.AddrPortFrom(h.Addr(), port)
	var c net.Conn
	switch path {
	case "direct":
		c, err = Dial(ctx, a, dst, benchCfg)
		if err == nil && PathOf(c).Path != PathRDMA {
			err = fmt.Errorf("direct took %v", PathOf(c))
		}
	case "delegated":
		c, err = a.DialOffload(ctx, dst)
	default:
		c, err = a.Dial(ctx, dst)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	_ = tcpstack.DefaultMinRTO
	return c
}

func benchStream(b *testing.B, path string, size int) {
	c := benchPair(b, path, func(s net.Conn) { io.Copy(io.Discard, s) })
	buf := make([]byte, size)
	for range max(16, (4<<20)/size) { // warm up
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(size))
	b.ResetTimer()
	var werr error
	measure := cpusplit.Measure
	if noSplit {
		measure = func(f func()) (cpusplit.Split, error) { f(); return cpusplit.Split{Wall: 1}, nil }
	}
	split, err := measure(func() {
		for range b.N {
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
	gib := float64(b.N) * float64(size) / (1 << 30)
	b.ReportMetric(float64(b.N)*float64(size)*8/split.Wall.Seconds()/1e9, "Gbit/s")
	b.ReportMetric(split.Host.Seconds()/gib, "host-cpu-s/GiB")
	b.ReportMetric(split.Device.Seconds()/gib, "dev-cpu-s/GiB")
}

func benchPingPong(b *testing.B, path string) {
	c := benchPair(b, path, func(s net.Conn) {
		one := make([]byte, 1)
		for {
			if _, err := io.ReadFull(s, one); err != nil {
				return
			}
			if _, err := s.Write(one); err != nil {
				return
			}
		}
	})
	one := make([]byte, 1)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
	}
}
