package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/trace"
)

// readTrace reads every record of the trace file.
func readTrace(t *testing.T, file string) []trace.Record {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, recs, err := trace.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return recs
}

// recordDemo records a demo run with the given demo flags into a file.
func recordDemo(t *testing.T, file string, args ...string) {
	t.Helper()
	code, out, errOut := runCLI(t, append([]string{"trace", "record", "--out", file, "--"}, args...)...)
	if code != 0 {
		t.Fatalf("trace record %v: exit %d\n%s\n%s", args, code, out, errOut)
	}
	if !strings.Contains(out, "arrived intact") {
		t.Fatalf("trace record %v: the demo did not report its data intact:\n%s", args, out)
	}
}

// TestTraceRecordReplay records the demo's every path and replays each
// trace: the fresh devices must do exactly what the recorded ones did.
func TestTraceRecordReplay(t *testing.T) {
	runs := [][]string{
		{"--path", "both", "--bytes", "256KiB"},
		{"--path", "offload", "--bytes", "256KiB", "--loss", "2", "--reorder", "1", "--seed", "7"},
		{"--rdma", "--bytes", "128KiB"},
		{"--path", "direct", "--bytes", "256KiB"},
		{"--lwio", "--bytes", "256KiB"},
	}
	if testing.Short() {
		runs = runs[:2]
	}
	dir := t.TempDir()
	for i, args := range runs {
		file := filepath.Join(dir, "run.trace")
		recordDemo(t, file, args...)
		code, out, errOut := runCLI(t, "trace", "replay", file)
		if code != 0 || !strings.Contains(out, "outputs identical") {
			t.Fatalf("run %d %v: replay exit %d\n%s%s", i, args, code, out, errOut)
		}
		// The replay's counts against the file's own.
		recs := readTrace(t, file)
		var steps, outs, ins uint64
		for _, r := range recs {
			switch {
			case r.Kind == trace.KindStep:
				steps++
			case r.Kind.IsOutput():
				outs++
			case r.Kind != trace.KindDevice:
				ins++
			}
		}
		res, err := trace.ReplayRecords(recs, nil)
		if err != nil || res.Divergence != nil {
			t.Fatalf("run %d: %v %v", i, err, res.Divergence)
		}
		if res.Steps != steps || res.Outputs != outs || res.Inputs != ins || res.Devices != 2 {
			t.Errorf("run %d: replay counted %d steps, %d outputs, %d inputs, %d devices; the file has %d, %d, %d and 2",
				i, res.Steps, res.Outputs, res.Inputs, res.Devices, steps, outs, ins)
		}
	}
}

// TestTraceAlteredDevice replays a trace on devices that moderate
// interrupts differently: the replay must fail, naming the step and the
// first entry that differs, and the command must say so and exit 1.
func TestTraceAlteredDevice(t *testing.T) {
	file := filepath.Join(t.TempDir(), "offload.trace")
	recordDemo(t, file, "--path", "offload", "--bytes", "64KiB")
	res, err := trace.ReplayRecords(readTrace(t, file), func(c *nic.Config) { c.Burst = 1 })
	if err != nil {
		t.Fatal(err)
	}
	d := res.Divergence
	if d == nil {
		t.Fatal("a device that takes one entry per pass replayed a trace of one that takes 64")
	}
	if d.Step == 0 || d.Want == nil && d.Got == nil || d.Why == "" {
		t.Errorf("divergence without its place: %+v", d)
	}
	t.Logf("first divergence: device %s step %d: %s", d.Name, d.Step, d.Why)

	// The command names the same step.
	var stdout bytes.Buffer
	err = traceReplayAltered(file, &stdout, func(c *nic.Config) { c.Burst = 1 })
	if err == nil || !strings.Contains(stdout.String(), "DIVERGED: device "+d.Name) || !strings.Contains(stdout.String(), "step ") {
		t.Errorf("replay of an altered device: %v\n%s", err, stdout.String())
	}
}

// TestTraceBadFiles: a truncated or corrupted trace, or not a trace at all,
// is a one-line error and exit status 1 from replay, show and diff.
func TestTraceBadFiles(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.trace")
	recordDemo(t, good, "--path", "netstack", "--bytes", "16KiB")
	b, err := os.ReadFile(good)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(dir, "cut.trace")
	os.WriteFile(cut, b[:len(b)/2], 0o644)
	bad := filepath.Join(dir, "bad.trace")
	c := bytes.Clone(b)
	c[len(c)/3] ^= 0x10
	os.WriteFile(bad, c, 0o644)
	junk := filepath.Join(dir, "junk.trace")
	os.WriteFile(junk, []byte("this is not a trace file at all\n"), 0o644)
	for _, tc := range []struct{ file, want string }{{cut, "truncated"}, {bad, "corrupt"}, {junk, "not a trace"}} {
		for _, cmd := range [][]string{{"trace", "replay", tc.file}, {"trace", "show", tc.file}, {"trace", "diff", good, tc.file}} {
			code, _, errOut := runCLI(t, cmd...)
			if code != exitFail || !strings.Contains(errOut, tc.want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("%v: exit %d, stderr %q; want 1 and one line saying %q", cmd, code, errOut, tc.want)
			}
		}
	}
	// The same file twice is the same; show decodes it.
	if code, out, _ := runCLI(t, "trace", "diff", good, good); code != 0 || !strings.Contains(out, "are the same") {
		t.Errorf("diff of a file with itself: exit %d\n%s", code, out)
	}
	code, out, _ := runCLI(t, "trace", "show", good)
	if code != 0 || !strings.Contains(out, "frame out") || !strings.Contains(out, "TCP 10.0.0.1:") || !strings.Contains(out, "LEGACY_UPLOAD") {
		t.Errorf("show: exit %d, output without frames or notifications:\n%.2000s", code, out)
	}
	// Usage mistakes are exit 2.
	for _, args := range [][]string{{"trace"}, {"trace", "frob"}, {"trace", "record"}, {"trace", "replay"}, {"trace", "diff", good},
		// --device records the ivshmem device, on its own clock, into --out.
		{"trace", "record", "--out", "x.trace", "--device"},
		{"trace", "record", "--out", "x.trace", "--device", "--", "--socket", "/tmp/x.sock"},
		{"trace", "record", "--out", "x.trace", "--device", "--deterministic", "--", "--ivshmem", "/tmp/x.sock", "--tap", "x"},
		{"trace", "record", "--out", "x.trace", "--device", "--", "--ivshmem", "/tmp/x.sock", "--tap", "x", "--trace", "y.trace"},
		{"trace", "record", "--out", "x.trace", "--device", "--", "--ivshmem", "/tmp/x.sock"}} {
		if code, _, _ := runCLI(t, args...); code != exitUsage {
			t.Errorf("%v: exit %d, want %d", args, code, exitUsage)
		}
	}
}
