// Package cpusplit measures where CPU time goes in a process that runs both
// the host side and the emulated device: it profiles a section of work and
// splits the samples by the pprof label side=device that the device puts on
// its goroutines. Everything else (host stack, driver, applications, and the
// runtime's own work such as garbage collection) is the host's.
//
// With EMUNIC_CPUSPLIT_PROFILES set to a directory, each profile Measure
// takes is kept there (cpusplit-*.pprof), to see where a side's CPU went:
// go tool pprof -top -tagfocus side=client FILE.
package cpusplit

import (
	"bytes"
	"fmt"
	"os"
	"runtime/pprof"
	"time"

	"github.com/google/pprof/profile"
)

// Split is CPU time by side.
type Split struct {
	Device time.Duration
	Host   time.Duration // labelled host work plus unlabelled runtime work
	// Server is the part of Host labelled side=server: a benchmark that
	// builds its server host under that label (goroutines inherit labels)
	// tells its client's CPU (Host - Server) from its server's.
	Server time.Duration
	// Client is the part of Host labelled side=client, for a benchmark
	// that builds the host it measures, and runs its application,
	// under that label: that host's own goroutines, without the
	// runtime's unlabelled work (the scheduler, the garbage collector)
	// that every goroutine of the process causes.
	Client time.Duration
	Wall   time.Duration
	// Process is the process's CPU time over the same section by the
	// kernel's accounting (Process): what the samples above should add up
	// to, a check on them.
	Process time.Duration
	// Samples is how many profile samples the split is made of, and
	// Period what each stands for: a side with few samples is known only
	// to about one Period.
	Samples int
	Period  time.Duration
}

// Total is all CPU time.
func (s Split) Total() time.Duration { return s.Device + s.Host }

// SamplePeriod is what one CPU profile sample stands for: pprof samples at
// 100 Hz, so every split is a multiple of it.
const SamplePeriod = 10 * time.Millisecond

// Measure profiles f and splits its CPU time. It fails if a CPU profile is
// already running (for example go test -cpuprofile).
//
// Faster sampling is no cure for a side too small for 10 ms samples: on a
// virtual machine whose kernel ticks at 250 Hz, a profile at 200 Hz or more
// (runtime.SetCPUProfileRate before the profile starts) found a fifth or
// more less CPU than the process used, where 100 Hz found all of it
// (Split.Process is the check). Measure longer instead.
func Measure(f func()) (Split, error) {
	var buf bytes.Buffer
	if err := pprof.StartCPUProfile(&buf); err != nil {
		return Split{}, fmt.Errorf("cpusplit: %w", err)
	}
	cpu0 := Process()
	start := time.Now()
	f()
	wall := time.Since(start)
	cpu := Process() - cpu0
	pprof.StopCPUProfile()
	if dir := os.Getenv("EMUNIC_CPUSPLIT_PROFILES"); dir != "" {
		// Keep the profile for a look at where a side's CPU went
		// (go tool pprof -tagfocus side=client FILE).
		f, err := os.CreateTemp(dir, "cpusplit-*.pprof")
		if err == nil {
			f.Write(buf.Bytes())
			f.Close()
		}
	}
	p, err := profile.Parse(&buf)
	if err != nil {
		return Split{}, fmt.Errorf("cpusplit: %w", err)
	}
	// Sample values are [samples, cpu nanoseconds].
	vi := len(p.SampleType) - 1
	s := Split{Wall: wall, Process: cpu, Period: time.Duration(p.Period)}
	for _, smp := range p.Sample {
		s.Samples += int(smp.Value[0])
		d := time.Duration(smp.Value[vi])
		side := ""
		if len(smp.Label["side"]) > 0 {
			side = smp.Label["side"][0]
		}
		switch side {
		case "device":
			s.Device += d
		case "server":
			s.Host += d
			s.Server += d
		case "client":
			s.Host += d
			s.Client += d
		default:
			s.Host += d
		}
	}
	return s, nil
}
