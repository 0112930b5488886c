package cpusplit

import (
	"context"
	"runtime/pprof"
	"testing"
	"time"
)

// TestMeasure: a labelled busy loop lands on its side, in samples of the
// profile's period, and the process's CPU by the kernel covers it.
func TestMeasure(t *testing.T) {
	busy := func() {
		pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
			for start := time.Now(); time.Since(start) < 100*time.Millisecond; {
			}
		})
	}
	s, err := Measure(busy)
	if err != nil {
		t.Skip(err)
	}
	if s.Period != SamplePeriod {
		t.Fatalf("period %v, want %v", s.Period, SamplePeriod)
	}
	if s.Samples < 3 || s.Client < 3*SamplePeriod || s.Client > s.Total() {
		t.Fatalf("%d samples, client %v of %v: the busy loop's 100 ms not seen", s.Samples, s.Client, s.Total())
	}
	if s.Process < s.Client/2 {
		t.Fatalf("process CPU %v under the client's %v", s.Process, s.Client)
	}
}
