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
	if Process() == 0 {
		t.Skip("no process CPU clock on this system")
	}
	busy := func() {
		pprof.Do(context.Background(), pprof.Labels("side", "client"), func(context.Context) {
			// 100 ms of CPU, however long a loaded machine takes to give it.
			for start := Process(); Process()-start < 100*time.Millisecond; {
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
		t.Fatalf("%d samples, client %v of %v: the busy loop's 100 ms of CPU not seen", s.Samples, s.Client, s.Total())
	}
	if s.Process < s.Client/2 {
		t.Fatalf("process CPU %v under the client's %v", s.Process, s.Client)
	}
}
