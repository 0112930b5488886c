package tests

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/tcpfile"
)

// BenchmarkLWIOSmall is small I/O, where an RDMA file protocol earns its
// keep: LWIO against the same plain file protocol (lwio/tcpfile) over
// delegated TCP, both through the same emulated engine and wire, in
// alternating rounds of the same run.
//
//   - 4KiB: 4 KiB reads with 16 outstanding (iops/delegated: LWIO's IOPS ÷
//     the delegated protocol's; bar ≥ 1.5) and one at a time
//     (p50/delegated: LWIO's median latency ÷ the delegated protocol's;
//     bar ≤ 0.8).
//   - 64KiB: the LWIO bar checked beside it: 64 KiB reads with 16
//     outstanding against the protocol on netstack TCP (throughput/tcp ≥ 2
//     at client-cpu/tcp ≤ 0.25).
//
// LWIO reads into registered client memory, in the completion mode
// EMUNIC_LWIO_MODE names (interrupt or polling; polling by default).
//
//	go test ./tests -run '^$' -bench LWIOSmall -benchtime 5x
func BenchmarkLWIOSmall(b *testing.B) {
	polling := os.Getenv("EMUNIC_LWIO_MODE") != "interrupt"
	lb := newLWIOBenchClient(b, lwio.ServerConfig{}, lwio.ClientConfig{Credits: 32, Polling: polling})
	b.Run("4KiB", func(b *testing.B) {
		const size, depth, ops, lat = 4 << 10, 16, 8192, 2048
		lb.lwioRun(b, false, size, depth, size*ops) // warm up both
		lb.tcpRun(b, lb.dtcp, false, size, depth, size*ops)
		var lwIOPS, dtIOPS []float64
		var lwLat, dtLat []time.Duration
		b.ResetTimer()
		for range b.N {
			lwIOPS = append(lwIOPS, opsPerSecond(ops, func() { lb.lwioRun(b, false, size, depth, size*ops) }))
			dtIOPS = append(dtIOPS, opsPerSecond(ops, func() { lb.tcpRun(b, lb.dtcp, false, size, depth, size*ops) }))
			lwLat = append(lwLat, lb.lwioLatency(b, size, lat)...)
			dtLat = append(dtLat, lb.tcpLatency(b, lb.dtcp, size, lat)...)
		}
		b.StopTimer()
		lw, dt := testutil.Median(lwIOPS), testutil.Median(dtIOPS)
		lp, dp := percentile(lwLat, 50), percentile(dtLat, 50)
		b.ReportMetric(lw, "lwio-IOPS")
		b.ReportMetric(dt, "dtcp-IOPS")
		b.ReportMetric(lw/dt, "iops/delegated")
		b.ReportMetric(float64(lp.Nanoseconds())/1e3, "lwio-p50-µs")
		b.ReportMetric(float64(dp.Nanoseconds())/1e3, "dtcp-p50-µs")
		b.ReportMetric(float64(percentile(lwLat, 99).Nanoseconds())/1e3, "lwio-p99-µs")
		b.ReportMetric(float64(percentile(dtLat, 99).Nanoseconds())/1e3, "dtcp-p99-µs")
		b.ReportMetric(float64(lp)/float64(dp), "p50/delegated")
		for i := range lwIOPS {
			b.Logf("round %d: LWIO %.0f IOPS, delegated TCP %.0f IOPS", i, lwIOPS[i], dtIOPS[i])
		}
	})
	b.Run("64KiB", func(b *testing.B) {
		lw, tc := lb.rounds64K(b, 2*benchFile)
		mbs := func(r benchRound) float64 { return r.mbs }
		cpu := func(r benchRound) float64 { return r.cpu }
		b.ReportMetric(median(lw, mbs)/median(tc, mbs), "throughput/tcp")
		b.ReportMetric(median(lw, cpu)/median(tc, cpu), "client-cpu/tcp")
	})
	if st := lb.srv.Stats(); st.BadRequests+st.ConnErrors+st.ProtocolErrors != 0 {
		b.Fatalf("server errors: %+v", st)
	}
}

func opsPerSecond(ops int, f func()) float64 {
	start := time.Now()
	f()
	return float64(ops) / time.Since(start).Seconds()
}

// lwioLatency times n reads of size, one at a time (ReadAt), over LWIO.
func (lb *lwioBench) lwioLatency(b *testing.B, size, n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		off := int64(i*size) % benchFile
		start := time.Now()
		if got, err := lb.lw.ReadAt(lb.mem[:size], off); got != size {
			b.Fatalf("LWIO: %d, %v", got, err)
		}
		d[i] = time.Since(start)
	}
	return d
}

// tcpLatency times n reads of size, one at a time, over a tcpfile
// connection.
func (lb *lwioBench) tcpLatency(b *testing.B, f *tcpfile.File, size, n int) []time.Duration {
	d := make([]time.Duration, n)
	for i := range d {
		off := int64(i*size) % benchFile
		start := time.Now()
		if got, err := f.ReadAtWindow(lb.buf[:size], off, size, 1); got != size {
			b.Fatalf("tcpfile: %d, %v", got, err)
		}
		d[i] = time.Since(start)
	}
	return d
}

// percentile is the p-th percentile of d (sorted in place).
func percentile(d []time.Duration, p int) time.Duration {
	slices.Sort(d)
	return d[min(len(d)-1, len(d)*p/100)]
}
