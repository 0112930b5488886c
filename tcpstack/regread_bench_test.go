package tcpstack

import (
	"context"
	"net"
	"net/netip"
	"runtime/pprof"
	"testing"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/nic/port"
)

// BenchmarkRegisteredRead compares, in the same run, the receiving host's
// CPU per GiB of a delegated connection read with 64 KiB ordinary Reads
// (the bytes land in pool buffers or legacy buffers and Read copies them
// out) and with 64 KiB registered-buffer reads (ReadRegistered: the device
// places them in the reader's own buffers, 16 kept posted). The sender is
// netstack on the other host, built under the pprof label side=server so
// that its CPU is left out (cpusplit: host CPU less the server's); the
// devices' CPU (side=device) is apart too. Each iteration reads 1 MiB.
//
//	go test ./tcpstack/ -run '^$' -bench RegisteredRead -benchtime 300x -count 5
//
// Metrics: read-host-cpu-s/GiB and reg-host-cpu-s/GiB (the receiving
// host's CPU), reg/read-host-cpu (their ratio; the bar is 0.5),
// read-Gbit/s and reg-Gbit/s, and reg-copied-B/B (bytes the host copied
// per byte read with registered buffers: what came while none was posted).
func BenchmarkRegisteredRead(b *testing.B) {
	const readSize, nbufs, per = 64 << 10, 16, 1 << 20
	type result struct {
		cpu    float64 // receiving host CPU s/GiB: its own goroutines (side=client)
		all    float64 // the same with the runtime's unlabelled work (scheduler, GC) added
		gbit   float64
		copied float64 // host bytes copied per byte read
	}
	run := func(registered bool) result {
		a, dc := benchPair(b)
		var back *RegisteredBuf
		if registered {
			for range nbufs {
				rb, err := a.NewRegisteredBuf(readSize)
				if err != nil {
					b.Fatal(err)
				}
				if err := dc.PostRegistered(rb); err != nil {
					b.Fatal(err)
				}
			}
		}
		buf := make([]byte, readSize)
		read := func(n int) {
			for got := 0; got < n; {
				var k int
				var err error
				if registered {
					var p []byte
					p, back, err = dc.ReadRegistered(back)
					k = len(p)
				} else {
					k, err = dc.Read(buf)
				}
				if err != nil {
					b.Fatal(err)
				}
				got += k
			}
		}
		read(16 * per) // warm up: windows open, buffers posted
		copies0 := a.Driver.Stats().HostCopyBytes
		total := b.N * per
		split, err := cpusplit.Measure(func() {
			pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) { read(total) })
		})
		if err != nil {
			b.Skip(err)
		}
		gib := float64(total) / (1 << 30)
		return result{cpu: split.Client.Seconds() / gib, all: (split.Host - split.Server).Seconds() / gib,
			gbit:   float64(total) * 8 / split.Wall.Seconds() / 1e9,
			copied: float64(a.Driver.Stats().HostCopyBytes-copies0) / float64(total)}
	}
	b.SetBytes(per)
	b.ResetTimer()
	ord := run(false)
	reg := run(true)
	b.StopTimer()
	b.ReportMetric(ord.cpu, "read-host-cpu-s/GiB")
	b.ReportMetric(reg.cpu, "reg-host-cpu-s/GiB")
	if ord.cpu > 0 {
		b.ReportMetric(reg.cpu/ord.cpu, "reg/read-host-cpu")
	}
	b.ReportMetric(ord.all, "read-host+rt-cpu-s/GiB")
	b.ReportMetric(reg.all, "reg-host+rt-cpu-s/GiB")
	b.ReportMetric(ord.gbit, "read-Gbit/s")
	b.ReportMetric(reg.gbit, "reg-Gbit/s")
	b.ReportMetric(reg.copied, "reg-copied-B/B")
	b.ReportMetric(ord.copied, "read-copied-B/B")
}

// benchPair builds host A (delegating) and host B, B and everything it
// starts under the label side=server, and returns a delegated connection
// of A whose peer on B sends without end.
func benchPair(b *testing.B) (*Host, *DelegatedConn) {
	pa, pb := port.MustNewWire(port.WireConfig{})
	var a *Host
	pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
		var err error
		if a, err = testHost(HostConfig{Addr: mustPrefix("10.0.0.1/24")}, [6]byte{2, 0, 0, 0, 0, 1}, pa); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { a.Close() })
	var l net.Listener
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) {
		hb, err := testHost(HostConfig{Addr: mustPrefix("10.0.0.2/24")}, [6]byte{2, 0, 0, 0, 0, 2}, pb)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { hb.Close() })
		if l, err = hb.Listen(5201); err != nil {
			b.Fatal(err)
		}
		go func() {
			s, err := l.Accept()
			if err != nil {
				return
			}
			p := make([]byte, 256<<10)
			for {
				if _, err := s.Write(p); err != nil {
					s.Close()
					return
				}
			}
		}()
	})
	b.Cleanup(func() { l.Close() })
	dc, err := a.DialOffload(context.Background(), netip.AddrPortFrom(netip.MustParseAddr("10.0.0.2"), 5201))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { dc.Close() })
	return a, dc
}
