package tests

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/tcpfile"
)

// BenchmarkLWIO reads one file from host B to host A in 64 KiB reads with
// 16 outstanding, over LWIO (RDMA Writes into the client's registered
// memory) and over the plain-TCP file protocol on netstack (lwio/tcpfile),
// alternating, one round of each per op. It reports each one's MB/s and
// client CPU per GiB (host A's host-side CPU: B's host, built under the
// pprof label side=server, and both devices are excluded), the medians
// over the rounds, and their ratios: the bar is LWIO ≥ 2× the throughput
// at ≤ 25% of the client CPU per GiB.
//
//	go test ./tests -run '^$' -bench LWIO -benchtime 7x
func BenchmarkLWIO(b *testing.B) {
	const (
		size   = 64 << 20
		passes = 4 // reads of the file per round: 256 MiB, so the CPU profile's 10 ms samples resolve
		piece  = 64 << 10
		window = 16
		port   = 4460
	)
	r := hostrig.New(b, hostrig.Config{LabelB: "server"})
	dir := b.TempDir()
	data := make([]byte, size)
	for i := range data {
		data[i] = byte(i * 7)
	}
	if err := os.WriteFile(filepath.Join(dir, "f"), data, 0o644); err != nil {
		b.Fatal(err)
	}
	exp, err := lwio.OpenExport(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer exp.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	defer root.Close()
	var srv *lwio.Server
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) {
		if srv, err = lwio.NewServer(r.B, exp, lwio.ServerConfig{}); err != nil {
			return
		}
		l, lerr := r.B.Listen(port)
		if lerr != nil {
			err = lerr
			return
		}
		b.Cleanup(func() { l.Close() })
		go tcpfile.Serve(l, root)
	})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := lwio.Dial(ctx, r.A, r.B.Addr(), lwio.ClientConfig{Credits: window})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	lf, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		b.Fatal(err)
	}
	mem, err := c.Alloc(window * piece)
	if err != nil {
		b.Fatal(err)
	}
	conn, err := r.A.Dial(ctx, netip.AddrPortFrom(r.B.Addr(), port))
	if err != nil {
		b.Fatal(err)
	}
	tf, err := tcpfile.Open(conn, "f")
	if err != nil {
		b.Fatal(err)
	}
	defer tf.Close()
	tbuf := make([]byte, size)

	readLWIO := func() {
		done := make(chan *lwio.Call, window)
		inflight := 0
		for i := 0; i < size/piece; i++ {
			if inflight == window {
				if cl := <-done; cl.Err != nil || cl.N != piece {
					b.Fatalf("LWIO read: %d, %v", cl.N, cl.Err)
				}
				inflight--
			}
			s := i % window
			if _, err := lf.StartRead(ctx, mem[s*piece:(s+1)*piece], int64(i*piece), done); err != nil {
				b.Fatal(err)
			}
			inflight++
		}
		for ; inflight > 0; inflight-- {
			if cl := <-done; cl.Err != nil {
				b.Fatal(cl.Err)
			}
		}
	}
	readTCP := func() {
		if n, err := tf.ReadAtWindow(tbuf, 0, piece, window); n != size || (err != nil && n != size) {
			b.Fatalf("tcp read: %d, %v", n, err)
		}
	}
	type round struct{ mbs, cpu float64 }
	measure := func(f func()) round {
		s, err := cpusplit.Measure(func() {
			for range passes {
				f()
			}
		})
		if err != nil {
			b.Skip(err)
		}
		client := s.Host - s.Server
		bytes := float64(passes * size)
		return round{mbs: bytes / s.Wall.Seconds() / 1e6, cpu: client.Seconds() / (bytes / (1 << 30))}
	}
	readLWIO() // warm up both paths
	readTCP()
	var lw, tc []round
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		lw = append(lw, measure(readLWIO))
		tc = append(tc, measure(readTCP))
	}
	b.StopTimer()
	med := func(rs []round, f func(round) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	mbs := func(r round) float64 { return r.mbs }
	cpu := func(r round) float64 { return r.cpu }
	b.ReportMetric(med(lw, mbs), "lwio-MB/s")
	b.ReportMetric(med(tc, mbs), "tcp-MB/s")
	b.ReportMetric(med(lw, mbs)/med(tc, mbs), "throughput-x")
	b.ReportMetric(med(lw, cpu), "lwio-client-cpu-s/GiB")
	b.ReportMetric(med(tc, cpu), "tcp-client-cpu-s/GiB")
	b.ReportMetric(med(lw, cpu)/med(tc, cpu), "client-cpu-x")
	for i := range lw {
		b.Logf("round %d: LWIO %.0f MB/s %.3f client CPU-s/GiB; TCP %.0f MB/s %.3f", i, lw[i].mbs, lw[i].cpu, tc[i].mbs, tc[i].cpu)
	}
	if st := srv.Stats(); st.BadRequests+st.ConnErrors+st.ProtocolErrors != 0 {
		b.Fatalf("server errors: %+v", st)
	}
}
