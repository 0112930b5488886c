package tests

import (
	"math"
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
		// LWIO's client uses so little CPU that its rounds read 8 times
		// the file for its figure to rest on enough samples.
		lw, tc := lb.rounds64K(b, 8*benchFile, 2*benchFile)
		reportCPU(b, lw, tc)
	})
	if st := lb.srv.Stats(); st.BadRequests+st.ConnErrors+st.ProtocolErrors != 0 {
		b.Fatalf("server errors: %+v", st)
	}
}

// reportCPU reports the 64 KiB bar beside the small reads: throughput/tcp
// and client-cpu/tcp, host A's labelled CPU per GiB (its application, its
// stack, its interrupt handling), with what stands behind that figure:
// each side's CPU per GiB, the same ratio with the runtime's unlabelled
// work counted as the client's (client+rt-cpu/tcp, as the figure was
// before A had a label), how many profile samples LWIO's client figure
// rests on per round, and how much of the process's CPU by the kernel's
// accounting the profile's samples found (profile/process, near 1 when
// the samples can be trusted).
func reportCPU(b *testing.B, lw, tc []benchRound) {
	mbs := func(r benchRound) float64 { return r.mbs }
	b.ReportMetric(median(lw, mbs)/median(tc, mbs), "throughput/tcp")
	lwCPU, lwAll, k, up := pooled(lw)
	tcCPU, tcAll, _, _ := pooled(tc)
	b.ReportMetric(lwCPU/tcCPU, "client-cpu/tcp")
	b.ReportMetric(up/tcCPU, "client-cpu/tcp-95%")
	b.ReportMetric(lwAll/tcAll, "client+rt-cpu/tcp")
	b.ReportMetric(lwCPU, "lwio-client-cpu-s/GiB")
	b.ReportMetric(tcCPU, "tcp-client-cpu-s/GiB")
	b.ReportMetric(float64(k), "lwio-client-samples")
	var prof, proc time.Duration
	for _, r := range append(lw, tc...) {
		prof, proc = prof+r.split.Total(), proc+r.split.Process
	}
	b.ReportMetric(float64(prof)/float64(proc), "profile/process")
	for i := range lw {
		b.Logf("round %d: LWIO %.0f MB/s client %.4f (+runtime %.4f) CPU-s/GiB, %d samples; TCP %.0f MB/s client %.4f (+runtime %.4f)",
			i, lw[i].mbs, lw[i].cpu, lw[i].cpuAll, lw[i].samples, tc[i].mbs, tc[i].cpu, tc[i].cpuAll)
	}
}

// pooled is the client's CPU per GiB over all the rounds together (the
// sum of its CPU over the sum of the bytes: rounds with a sample or two
// each have a median of little meaning), with the runtime's unlabelled
// work (all), the client samples it rests on (k) and an upper bound on
// the figure at about 95% confidence from their count (k + 2√(k+1) + 2
// samples, above the exact Poisson bound for every k).
func pooled(rs []benchRound) (cpu, all float64, k int, up float64) {
	var client, withRT, period time.Duration
	bytes := 0
	for _, r := range rs {
		client, withRT = client+r.split.Client, withRT+r.split.Host-r.split.Server
		bytes += r.bytes
		k += r.samples
		period = r.split.Period
	}
	gib := float64(bytes) / (1 << 30)
	bound := float64(k) + 2*math.Sqrt(float64(k+1)) + 2
	return client.Seconds() / gib, withRT.Seconds() / gib, k, bound * period.Seconds() / gib
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
