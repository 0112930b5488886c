package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emunic/emunic/trace"
)

// recordLockstep records the demo with the given flags in lockstep (a
// deterministic run).
func recordLockstep(t *testing.T, file string, args ...string) {
	t.Helper()
	var out bytes.Buffer
	err := traceRecord(context.Background(), recordOptions{out: file, deterministic: true}, args, &out)
	if err != nil || !strings.Contains(out.String(), "arrived intact") {
		t.Fatalf("trace record %v: %v\n%s", args, err, out.String())
	}
}

// deterministicRuns are the demo's paths, each as 'emunic trace record'
// takes them.
var deterministicRuns = [][]string{
	{"--path", "netstack", "--bytes", "256KiB"},
	{"--path", "offload", "--bytes", "256KiB"},
	{"--path", "offload", "--bytes", "256KiB", "--loss", "2", "--reorder", "1", "--seed", "7"},
	{"--path", "netstack", "--bytes", "256KiB", "--loss", "2", "--reorder", "1", "--seed", "7"},
	{"--rdma", "--bytes", "128KiB"},
	{"--path", "direct", "--bytes", "256KiB"},
	{"--lwio", "--bytes", "256KiB"},
	{"--path", "all", "--rdma", "--bytes", "128KiB", "--loss", "1", "--reorder", "1", "--seed", "3", "--mtu", "9000"},
	// Every path over IPv6: neighbour discovery's timers run on the
	// virtual clock and its random delays come from the seeded stack.
	{"--ipv6", "--path", "all", "--rdma", "--lwio", "--bytes", "128KiB", "--loss", "1", "--reorder", "1", "--seed", "3"},
}

// TestTraceDeterministic records every path of the demo twice in lockstep:
// the two traces must be the same file, byte for byte, step times
// included (on a difference, the first is printed as 'emunic trace diff'
// prints it). The trace replays, like any other. This holds under the race
// detector too, whose scheduler runs the goroutines a host wakes together
// in a random order on purpose: a deterministic run has one processor
// (docs/trace.md).
func TestTraceDeterministic(t *testing.T) {
	runs := deterministicRuns
	if testing.Short() {
		runs = runs[:2]
	}
	for _, args := range runs {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			dir := t.TempDir()
			a, b := filepath.Join(dir, "a.trace"), filepath.Join(dir, "b.trace")
			recordLockstep(t, a, args...)
			recordLockstep(t, b, args...)
			ba, err := os.ReadFile(a)
			if err != nil {
				t.Fatal(err)
			}
			bb, err := os.ReadFile(b)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(ba, bb) {
				var report bytes.Buffer
				derr := traceDiff(a, b, trace.DiffOptions{}, &report)
				t.Fatalf("two deterministic runs differ (%d and %d bytes): %v\n%s", len(ba), len(bb), derr, report.String())
			}
			h, recs, err := trace.ReadAll(bytes.NewReader(ba))
			if err != nil {
				t.Fatal(err)
			}
			if h.Clock != "virtual" {
				t.Errorf("header clock %q, want virtual", h.Clock)
			}
			res, err := trace.ReplayRecords(recs, nil)
			if err != nil || res.Divergence != nil {
				t.Fatalf("replay: %v %+v", err, res.Divergence)
			}
		})
	}
}
