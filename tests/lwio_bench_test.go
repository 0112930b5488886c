package tests

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/tcpfile"
)

// lwioBench is host B serving one directory three ways (LWIO, and the
// plain-TCP file protocol lwio/tcpfile on netstack and on delegated TCP)
// and host A's client of each, with a file of fileSize to read and one to
// write. B is built under the pprof label side=server and A, with its
// clients, under side=client, so a measurement tells A's host CPU (the
// client's: its application, its stack, its interrupt handling) from B's
// and from the runtime's unlabelled work that both cause.
type lwioBench struct {
	ctx         context.Context
	lw          *lwio.File // read file, over LWIO
	lwW         *lwio.File // write file
	mem         []byte     // A's registered memory for LWIO: 16 MiB
	tcp, tcpW   *tcpfile.File
	dtcp, dtcpW *tcpfile.File
	buf         []byte
	srv         *lwio.Server
	rig         *hostrig.Rig
}

const (
	benchFile     = 64 << 20
	benchPortFile = 4460
	benchPortDel  = 4461
)

func newLWIOBench(b *testing.B, srvCfg lwio.ServerConfig) *lwioBench {
	b.Helper()
	return newLWIOBenchClient(b, srvCfg, lwio.ClientConfig{Credits: 16})
}

// newLWIOBenchClient is newLWIOBench with the LWIO client's configuration.
func newLWIOBenchClient(b *testing.B, srvCfg lwio.ServerConfig, cliCfg lwio.ClientConfig) *lwioBench {
	b.Helper()
	big := func(c *board.HostConfig) { c.ArenaSize = 512 << 20 }
	r := hostrig.New(b, hostrig.Config{LabelA: "client", LabelB: "server", HostA: big, HostB: big})
	dir := b.TempDir()
	data := make([]byte, benchFile)
	for i := range data {
		data[i] = byte(i * 7)
	}
	for _, name := range []string{"f", "w"} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	exp, err := lwio.OpenExport(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { exp.Close() })
	root, err := os.OpenRoot(dir)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { root.Close() })
	lb := &lwioBench{buf: make([]byte, benchFile), rig: r}
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) {
		if lb.srv, err = lwio.NewServer(r.B, exp, srvCfg); err != nil {
			return
		}
		b.Cleanup(func() { lb.srv.Close() })
		l, lerr := r.B.Listen(benchPortFile)
		if lerr != nil {
			err = lerr
			return
		}
		b.Cleanup(func() { l.Close() })
		go tcpfile.Serve(l, root)
		ol, lerr := r.B.ListenOffload(benchPortDel)
		if lerr != nil {
			err = lerr
			return
		}
		b.Cleanup(func() { ol.Close() })
		go tcpfile.Serve(ol, root)
	})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	b.Cleanup(cancel)
	lb.ctx = ctx
	// Whatever goroutines the clients start (LWIO's completion loop) are
	// the client's.
	pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
		lb.dial(b, r, cliCfg)
	})
	return lb
}

// dial connects host A's clients: LWIO, and the file protocol on netstack
// and on delegated TCP.
func (lb *lwioBench) dial(b *testing.B, r *hostrig.Rig, cliCfg lwio.ClientConfig) {
	ctx := lb.ctx
	c, err := lwio.Dial(ctx, r.A, r.B.Addr(), cliCfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	if lb.lw, err = c.Open(ctx, "f", lwio.OpenFlags{}); err != nil {
		b.Fatal(err)
	}
	if lb.lwW, err = c.Open(ctx, "w", lwio.OpenFlags{}); err != nil {
		b.Fatal(err)
	}
	if lb.mem, err = c.Alloc(16 << 20); err != nil {
		b.Fatal(err)
	}
	open := func(port uint16, name string, offload bool) *tcpfile.File {
		dst := netip.AddrPortFrom(r.B.Addr(), port)
		var conn net.Conn
		if offload {
			dc, err := r.A.DialOffload(ctx, dst)
			if err != nil {
				b.Fatal(err)
			}
			conn = dc
		} else {
			nc, err := r.A.Dial(ctx, dst)
			if err != nil {
				b.Fatal(err)
			}
			conn = nc
		}
		b.Cleanup(func() { conn.Close() })
		f, err := tcpfile.Open(conn, name)
		if err != nil {
			b.Fatal(err)
		}
		return f
	}
	lb.tcp, lb.tcpW = open(benchPortFile, "f", false), open(benchPortFile, "w", false)
	lb.dtcp, lb.dtcpW = open(benchPortDel, "f", true), open(benchPortDel, "w", true)
}

// lwioRun moves total bytes in requests of size with depth in flight
// over LWIO (reads of the read file, or writes to the write file), from
// and into A's registered memory.
func (lb *lwioBench) lwioRun(b *testing.B, write bool, size, depth, total int) {
	f := lb.lw
	if write {
		f = lb.lwW
	}
	done := make(chan *lwio.Call, depth)
	slots := len(lb.mem) / size
	inflight := 0
	for i := 0; i < total/size; i++ {
		if inflight == depth {
			if cl := <-done; cl.Err != nil || cl.N != size {
				b.Fatalf("LWIO: %d, %v", cl.N, cl.Err)
			}
			inflight--
		}
		s := i % min(slots, depth)
		p := lb.mem[s*size : (s+1)*size]
		off := int64(i*size) % benchFile
		var err error
		if write {
			_, err = f.StartWrite(lb.ctx, p, off, done)
		} else {
			_, err = f.StartRead(lb.ctx, p, off, done)
		}
		if err != nil {
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

// tcpRun does the same over a tcpfile connection.
func (lb *lwioBench) tcpRun(b *testing.B, f *tcpfile.File, write bool, size, depth, total int) {
	for off := 0; off < total; off += benchFile {
		n := min(total-off, benchFile)
		var got int
		var err error
		if write {
			got, err = f.WriteAtWindow(lb.buf[:n], 0, size, depth)
		} else {
			got, err = f.ReadAtWindow(lb.buf[:n], 0, size, depth)
		}
		if got != n {
			b.Fatalf("tcpfile: %d of %d, %v", got, n, err)
		}
	}
}

// benchRound is one measurement: throughput, operations per second and
// the client's CPU per GiB: host A's labelled work (cpu), and with the
// runtime's unlabelled work added (cpuAll: the scheduler and the garbage
// collector, which every side causes), as before the client had a label.
// samples is how many profile samples cpu is made of.
type benchRound struct {
	mbs, iops, cpu, cpuAll float64
	samples                int
	bytes                  int
	split                  cpusplit.Split
}

func measureClient(b *testing.B, bytes, ops int, f func()) benchRound {
	var s cpusplit.Split
	var err error
	pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
		s, err = cpusplit.Measure(f)
	})
	if err != nil {
		b.Skip(err)
	}
	gib := float64(bytes) / (1 << 30)
	return benchRound{mbs: float64(bytes) / s.Wall.Seconds() / 1e6, iops: float64(ops) / s.Wall.Seconds(),
		cpu: s.Client.Seconds() / gib, cpuAll: (s.Host - s.Server).Seconds() / gib,
		samples: int(s.Client / max(s.Period, 1)), bytes: bytes, split: s}
}

// median is the median of f over the rounds.
func median(rs []benchRound, f func(benchRound) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	return testutil.Median(v)
}

// BenchmarkLWIO is the bar: 64 KiB reads with 16 outstanding, LWIO
// against the plain-TCP file protocol on netstack, alternating rounds of
// four passes over the 64 MiB file; the medians and their ratios. The
// bar: LWIO ≥ 2× the throughput at ≤ 25% of the client CPU per GiB.
//
//	go test ./tests -run '^$' -bench 'LWIO$' -benchtime 7x -count 3
func BenchmarkLWIO(b *testing.B) {
	lb := newLWIOBench(b, lwio.ServerConfig{})
	lw, tc := lb.rounds64K(b, 4*benchFile, 4*benchFile)
	mbs := func(r benchRound) float64 { return r.mbs }
	lwCPU, _, _, _ := pooled(lw)
	tcCPU, _, _, _ := pooled(tc)
	b.ReportMetric(median(lw, mbs)/median(tc, mbs), "throughput-x")
	b.ReportMetric(lwCPU, "lwio-client-cpu-s/GiB")
	b.ReportMetric(tcCPU, "tcp-client-cpu-s/GiB")
	b.ReportMetric(lwCPU/tcCPU, "client-cpu-x")
	for i := range lw {
		b.Logf("round %d: LWIO %.0f MB/s %.3f client CPU-s/GiB; TCP %.0f MB/s %.3f", i, lw[i].mbs, lw[i].cpu, tc[i].mbs, tc[i].cpu)
	}
	if st := lb.srv.Stats(); st.BadRequests+st.ConnErrors+st.ProtocolErrors != 0 {
		b.Fatalf("server errors: %+v", st)
	}
}

// rounds64K is b.N alternating rounds of 64 KiB reads with 16
// outstanding, lwTotal bytes over LWIO and tcTotal over the plain-TCP
// file protocol on netstack in each, after a warm-up pass of each; it
// reports both medians in MB/s.
func (lb *lwioBench) rounds64K(b *testing.B, lwTotal, tcTotal int) (lw, tc []benchRound) {
	const size, depth = 64 << 10, 16
	lb.lwioRun(b, false, size, depth, benchFile) // warm up both
	lb.tcpRun(b, lb.tcp, false, size, depth, benchFile)
	b.ResetTimer()
	for range b.N {
		lw = append(lw, measureClient(b, lwTotal, lwTotal/size, func() { lb.lwioRun(b, false, size, depth, lwTotal) }))
		tc = append(tc, measureClient(b, tcTotal, tcTotal/size, func() { lb.tcpRun(b, lb.tcp, false, size, depth, tcTotal) }))
	}
	b.StopTimer()
	mbs := func(r benchRound) float64 { return r.mbs }
	b.ReportMetric(median(lw, mbs), "lwio-MB/s")
	b.ReportMetric(median(tc, mbs), "tcp-MB/s")
	return lw, tc
}

// BenchmarkLWIOMatrix: reads and writes of 4 KiB, 64 KiB and 1 MiB with 1
// and 16 outstanding, each over LWIO, the TCP file protocol on netstack
// and the same protocol on delegated TCP, alternating in each round:
// throughput, operations per second and client CPU per GiB (medians).
//
//	go test ./tests -run '^$' -bench LWIOMatrix -benchtime 3x
func BenchmarkLWIOMatrix(b *testing.B) {
	// A server that takes 1 MiB in one read or write.
	lb := newLWIOBench(b, lwio.ServerConfig{MaxRdmaWindow: 1 << 20, MaxRecvBuffer: 1 << 20, MaxCredits: 24})
	for _, op := range []string{"read", "write"} {
		for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
			for _, depth := range []int{1, 16} {
				write := op == "write"
				// Enough bytes for a steady state, little enough for 4 KiB
				// at depth 1 to take a fraction of a second.
				total := min(size*2048, 64<<20)
				if size == 4<<10 && depth == 1 {
					total = size * 1024
				}
				b.Run(fmt.Sprintf("%s/%dKiB/depth%d", op, size>>10, depth), func(b *testing.B) {
					var lw, tc, dt []benchRound
					for range b.N {
						lw = append(lw, measureClient(b, total, total/size, func() { lb.lwioRun(b, write, size, depth, total) }))
						tf, df := lb.tcp, lb.dtcp
						if write {
							tf, df = lb.tcpW, lb.dtcpW
						}
						tc = append(tc, measureClient(b, total, total/size, func() { lb.tcpRun(b, tf, write, size, depth, total) }))
						dt = append(dt, measureClient(b, total, total/size, func() { lb.tcpRun(b, df, write, size, depth, total) }))
					}
					for _, m := range []struct {
						name string
						rs   []benchRound
					}{{"lwio", lw}, {"tcp", tc}, {"dtcp", dt}} {
						b.ReportMetric(median(m.rs, func(r benchRound) float64 { return r.mbs }), m.name+"-MB/s")
						b.ReportMetric(median(m.rs, func(r benchRound) float64 { return r.iops }), m.name+"-IOPS")
						b.ReportMetric(median(m.rs, func(r benchRound) float64 { return r.cpu }), m.name+"-cpu-s/GiB")
					}
				})
			}
		}
	}
}
