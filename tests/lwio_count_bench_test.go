package tests

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/trace"
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/rings"
)

// BenchmarkLWIOSmallCount counts what one 4 KiB read costs on each path
// of BenchmarkLWIOSmall, per read: frames each device sends, the commands
// it runs (an RDMA post's QP_DOORBELL, a CQ's ARM_CQ), the interrupts it
// raises and the notifications it writes, the doorbells that found its
// unit parked and its parks. Depth 1 is the latency loop (LWIO ReadAt,
// the protocol's one-piece ReadAtWindow), depth 16 the IOPS loop. With
// EMUNIC_COUNT_TRACE set it also counts goroutine wake-ups (a goroutine
// made runnable from waiting) in a runtime trace, which slows the run
// many times over: compare counts, not times, then.
//
//	go test ./tests -run '^$' -bench LWIOSmallCount -benchtime 3x
func BenchmarkLWIOSmallCount(b *testing.B) {
	polling := os.Getenv("EMUNIC_LWIO_MODE") != "interrupt"
	lb := newLWIOBenchClient(b, lwio.ServerConfig{}, lwio.ClientConfig{Credits: 32, Polling: polling})
	const size, ops = 4 << 10, 8192
	lb.lwioRun(b, false, size, 16, size*ops) // warm up both
	lb.tcpRun(b, lb.dtcp, false, size, 16, size*ops)
	ids := []rings.StatID{rings.StatTxFrames, rings.StatCmdCompleted, rings.StatInterrupts,
		rings.StatNotifyPosted, rings.StatDoorbells, rings.StatParks}
	snap := func() []uint64 {
		var v []uint64
		for _, id := range ids {
			v = append(v, lb.rig.DevA.Stat(id), lb.rig.DevB.Stat(id))
		}
		return v
	}
	traced := os.Getenv("EMUNIC_COUNT_TRACE") != ""
	for _, depth := range []int{1, 16} {
		for _, path := range []string{"lwio", "dtcp"} {
			b.Run(fmt.Sprintf("%s/depth%d", path, depth), func(b *testing.B) {
				run := func() {
					switch {
					case path == "lwio" && depth == 1:
						lb.lwioLatency(b, size, ops)
					case path == "lwio":
						lb.lwioRun(b, false, size, depth, size*ops)
					case depth == 1:
						lb.tcpLatency(b, lb.dtcp, size, ops)
					default:
						lb.tcpRun(b, lb.dtcp, false, size, depth, size*ops)
					}
				}
				before, cpu0 := snap(), cpusplit.Process()
				var tb bytes.Buffer
				if traced {
					if err := trace.Start(&tb); err != nil {
						b.Fatal(err)
					}
				}
				for range b.N {
					run()
				}
				if traced {
					trace.Stop()
				}
				after, cpu1 := snap(), cpusplit.Process()
				n := float64(b.N * ops)
				b.ReportMetric(float64((cpu1-cpu0).Nanoseconds())/1e3/n, "cpu-µs/op")
				for i, id := range ids {
					b.ReportMetric(float64(after[2*i]-before[2*i])/n, "A-"+id.String()+"/op")
					b.ReportMetric(float64(after[2*i+1]-before[2*i+1])/n, "B-"+id.String()+"/op")
				}
				if traced {
					b.ReportMetric(float64(wakeups(b, tb.Bytes()))/n, "wakeups/op")
				}
			})
		}
	}
}

// wakeups counts the goroutines a runtime trace shows made runnable from
// waiting (go tool trace -d=parsed prints one transition a line).
func wakeups(b *testing.B, tr []byte) int {
	f := filepath.Join(b.TempDir(), "trace.out")
	if err := os.WriteFile(f, tr, 0o644); err != nil {
		b.Fatal(err)
	}
	out, err := exec.Command("go", "tool", "trace", "-d=parsed", f).Output()
	if err != nil {
		b.Skipf("go tool trace: %v", err)
	}
	return strings.Count(string(out), "Waiting->Runnable")
}
