package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"

	"github.com/emunic/emunic/board/lockstep"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/trace"
)

var traceCmd = &command{
	name:     "trace",
	summary:  "ring traces: record a demo run, replay it on a fresh device, diff, show",
	synopsis: "record|replay|diff|show [flags] [arguments]",
	about: `
A ring trace is everything that crossed each device's boundary during a run:
every ring entry the host published as the device first saw it, every entry
and status the device wrote back, every DMA read and write of host memory,
every frame at the port and every interrupt, grouped in the unit's steps, each
step with the device clock (docs/trace.md has the format).

  emunic trace record --out FILE [--deterministic] [-- DEMO FLAGS]
        run 'emunic demo' with its flags (default --bytes 1MiB) and record
        both devices; --deterministic runs devices and hosts in lockstep on
        a virtual clock, so two recordings of one demo are the same file
  emunic trace record --out FILE --device -- --ivshmem PATH --tap NAME ...
        run 'emunic device --ivshmem' (a QEMU guest's emunic.ko drives it)
        until interrupted, and record every enable of the device
  emunic trace replay FILE
        feed each recorded device's inputs, step by step, to a fresh device
        and check that it does exactly what the trace says; exit 1 with the
        first divergence when it does not
  emunic trace diff A B [--ignore-time]
        compare two traces; exit 1 with the first difference
  emunic trace show FILE [--hex] [--idle]
        print a trace decoded: commands, notifications, descriptors, work
        requests, completions, frames

A replay is exact because a traced device runs in steps whose clock is fixed
and keeps NEED_WAKEUP set on every ring it consumes, so what it does in a
step depends only on what it was given.`,
	examples: `  emunic trace record --out offload.trace -- --path offload --bytes 256KiB
  emunic trace record --deterministic --out a.trace -- --path both --seed 7
  emunic trace record --out rdma.trace -- --rdma --bytes 128KiB
  emunic trace record --out guest.trace --device -- --ivshmem /tmp/ivs.sock --tap emu0
  emunic trace show offload.trace | less
  emunic trace replay offload.trace
  emunic trace diff old.trace new.trace`,
}

var traceSub = map[string]*command{
	"record": {name: "trace record", synopsis: "--out FILE [--deterministic] [--full-writes] [-- DEMO FLAGS] | --out FILE --device [--full-writes] -- DEVICE FLAGS", about: `
Runs the demo (see 'emunic demo --help'; --bytes defaults to 1MiB here, since
every byte moved is in the trace) with both devices traced, and writes the
trace to FILE. --pcap and --split are not supported while tracing.

With --device, runs 'emunic device' with DEVICE FLAGS instead: its --ivshmem
mode, the device a QEMU guest's own kernel driver (emunic.ko) programs
through its registers (docs/guest.md). Each enable of the device (a driver's
probe, a reload of the module) is one device of the trace. The recording
ends, and the trace is written, when the command is interrupted (SIGINT or
SIGTERM). 'emunic trace replay FILE' then replays every enable.

--deterministic makes the run repeat exactly: the devices step in turn, each
step once every goroutine of the hosts has blocked, on a virtual clock that
is also netstack's and the hosts' timers', with every random choice seeded
by the demo's --seed. Two recordings with the same demo flags are then the
same file, byte for byte (docs/trace.md, "Deterministic runs"). Such a run
is slower, and its throughput figures are of no use.`},
	"replay": {name: "trace replay", synopsis: "FILE", about: `
Replays every device of the trace on a fresh device and checks each of its
outputs against the trace. Exit status 0 when all agree, 1 at the first
divergence, which is printed with the step, what the trace has and what the
device did.`},
	"diff": {name: "trace diff", synopsis: "[--ignore-time] A B", about: `
Compares two traces record by record. Exit status 0 when they are the same,
1 at the first difference, printed with the records before it.`},
	"show": {name: "trace show", synopsis: "[--hex] [--idle] FILE", about: `
Prints a trace decoded, one step per paragraph: ← what the device was given,
→ what it did.`},
}

func runTraceCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, cmd, err := pickSub(traceCmd, traceSub, "record, replay, diff or show", args, stdout)
	if err != nil {
		return err
	}
	fs := newFlagSet(cmd.name)
	out := fs.String("out", "", "write the trace to `FILE`")
	ignoreTime := fs.Bool("ignore-time", false, "let step times differ (runs on the monotonic clock)")
	hexOut := fs.Bool("hex", false, "print the bytes of entries, reads and frames")
	fullWrites := fs.Bool("full-writes", false, "keep the bytes of every DMA write (by default those over 64 bytes are a SHA-256)")
	idle := fs.Bool("idle", false, "print steps in which nothing happened")
	deterministic := fs.Bool("deterministic", false, "run the devices in lockstep with the hosts on a virtual clock: two recordings of one demo are the same file")
	device := fs.Bool("device", false, "record 'emunic device --ivshmem' (a guest's driver) instead of the demo: the flags after -- are the device's")
	rest := args[1:]
	var demoArgs []string
	if sub == "record" {
		for i, a := range rest {
			if a == "--" {
				rest, demoArgs = rest[:i], rest[i+1:]
				break
			}
		}
	}
	if err := parseWithArgs(cmd, fs, rest, stdout); err != nil {
		return err
	}
	want := map[string]int{"record": 0, "replay": 1, "diff": 2, "show": 1}[sub]
	if fs.NArg() != want {
		return usagef("'emunic %s' takes %d argument(s), got %d: %s", cmd.name, want, fs.NArg(), cmd.synopsis)
	}
	switch sub {
	case "record":
		if *out == "" {
			return usagef("--out FILE is required (see 'emunic trace record --help')")
		}
		if *device {
			if *deterministic {
				return usagef("--device and --deterministic: a guest's kernel runs on its own clock, which the device cannot step")
			}
			return traceRecordDevice(ctx, *out, *fullWrites, demoArgs, stdout, stderr)
		}
		return traceRecord(ctx, recordOptions{out: *out, full: *fullWrites, deterministic: *deterministic}, demoArgs, stdout)
	case "replay":
		return traceReplay(fs.Arg(0), stdout)
	case "diff":
		return traceDiff(fs.Arg(0), fs.Arg(1), trace.DiffOptions{IgnoreTime: *ignoreTime}, stdout)
	default:
		f, err := os.Open(fs.Arg(0))
		if err != nil {
			return err
		}
		defer f.Close()
		bw := bufio.NewWriter(stdout)
		p := trace.NewPrinter()
		p.Hex = *hexOut
		err = trace.Show(bw, f, p, *idle)
		if ferr := bw.Flush(); err == nil {
			err = ferr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", fs.Arg(0), err)
		}
		return nil
	}
}

// recordOptions are 'emunic trace record”s own flags.
type recordOptions struct {
	out  string // the trace file
	full bool   // --full-writes
	// deterministic runs the devices in lockstep with the hosts on a
	// virtual clock (package lockstep).
	deterministic bool
}

func traceRecord(ctx context.Context, opt recordOptions, demoArgs []string, stdout io.Writer) error {
	out := opt.out
	cfg, err := parseDemoFlags(demoArgs, stdout)
	if err != nil {
		return err
	}
	if !hasFlag(demoArgs, "bytes") {
		cfg.Bytes = 1 << 20
	}
	if cfg.Pcap != "" || cfg.Split {
		return usagef("'emunic trace record' does not take --pcap or --split: the trace has every frame, and a traced device runs in this process")
	}
	f, err := os.Create(out)
	if err != nil {
		return err
	}
	clock := "monotonic"
	if opt.deterministic {
		clock = "virtual"
	}
	w, err := trace.NewWriter(f, trace.Header{Args: demoArgs, Clock: clock, FullWrites: opt.full})
	if err != nil {
		f.Close()
		return err
	}
	cfg.trace = w
	if opt.deterministic {
		// One processor: the goroutines a host wakes together then run
		// one after the other, each until it blocks, instead of at once
		// on two processors, where the order in which they met on a
		// connection could change a frame (a receive window; see
		// docs/trace.md). Throughput is of no use in this mode anyway.
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
		cfg.lockstep = lockstep.New()
	}
	derr := runDemo(ctx, cfg, stdout)
	if cfg.lockstep != nil {
		cfg.lockstep.Close()
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("trace %s: %w", out, err)
	}
	if derr != nil {
		return derr
	}
	fmt.Fprintf(stdout, "\ntrace: %d records in %s\n", w.Records(), out)
	return nil
}

// traceRecordDevice runs 'emunic device' with args, traced into out.
func traceRecordDevice(ctx context.Context, out string, full bool, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseDeviceFlags(args, stdout)
	if err != nil {
		return err
	}
	if cfg.IvshmemSocket == "" {
		return usagef("'emunic trace record --device' records the --ivshmem device: give -- --ivshmem PATH --tap NAME")
	}
	if cfg.Trace != "" {
		return usagef("--trace %s: with 'emunic trace record --device' the trace is --out", cfg.Trace)
	}
	cfg.Trace, cfg.traceFull = out, full
	cfg.traceArgs = append([]string{"device"}, args...)
	return runIvshmemDevice(ctx, cfg, newLogger(stderr), stdout)
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		a = strings.TrimLeft(a, "-")
		if a == name || strings.HasPrefix(a, name+"=") {
			return true
		}
	}
	return false
}

func traceReplay(file string, stdout io.Writer) error {
	return traceReplayAltered(file, stdout, nil)
}

// traceReplayAltered is replay on devices whose configuration alter
// changes (a test's deliberately different device).
func traceReplayAltered(file string, stdout io.Writer, alter func(*nic.Config)) error {
	f, err := os.Open(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, all, err := trace.ReadAll(bufio.NewReader(f))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	res, err := trace.ReplayRecords(all, alter)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	if d := res.Divergence; d != nil {
		p := trace.NewPrinter()
		for i := range all {
			p.Learn(&all[i])
		}
		fmt.Fprintf(stdout, "DIVERGED: device %s, step %d (t=%.6fs): %s\n", d.Name, d.Step, float64(d.Now)/1e9, d.Why)
		for i := range d.Context {
			fmt.Fprintf(stdout, "  matched  %s\n", strings.TrimSpace(p.Format(&d.Context[i])))
		}
		if d.Want != nil {
			fmt.Fprintf(stdout, "  trace    %s\n", strings.TrimSpace(p.Format(d.Want)))
		}
		if d.Got != nil {
			fmt.Fprintf(stdout, "  device   %s\n", strings.TrimSpace(p.Format(d.Got)))
		}
		return fmt.Errorf("%s: replay diverged at device %s step %d", file, d.Name, d.Step)
	}
	fmt.Fprintf(stdout, "replay of %s: %d device(s), %d steps, %d inputs fed, %d outputs identical\n", file, res.Devices, res.Steps, res.Inputs, res.Outputs)
	return nil
}

func traceDiff(a, b string, opt trace.DiffOptions, stdout io.Writer) error {
	fa, err := os.Open(a)
	if err != nil {
		return err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return err
	}
	defer fb.Close()
	d, err := trace.Diff(bufio.NewReader(fa), bufio.NewReader(fb), opt)
	if err != nil {
		return err
	}
	if d == nil {
		fmt.Fprintf(stdout, "%s and %s are the same\n", a, b)
		return nil
	}
	p := trace.NewPrinter()
	fa.Seek(0, io.SeekStart)
	if tr, err := trace.NewReader(bufio.NewReader(fa)); err == nil {
		for i := 0; i < d.Index; i++ {
			r, err := tr.Next()
			if err != nil {
				break
			}
			p.Learn(r)
		}
	}
	fmt.Fprintf(stdout, "DIFFERENT at record %d: %s\n", d.Index, d.Why)
	if d.StepA != nil {
		fmt.Fprintf(stdout, "  in       %s\n", p.Format(d.StepA))
	}
	for i := range d.Context {
		fmt.Fprintf(stdout, "  same     %s\n", strings.TrimSpace(p.Format(&d.Context[i])))
	}
	for _, x := range []struct {
		name string
		r    *trace.Record
	}{{a, d.A}, {b, d.B}} {
		if x.r == nil {
			fmt.Fprintf(stdout, "  %s: ends here\n", x.name)
		} else {
			fmt.Fprintf(stdout, "  %s: %s\n", x.name, strings.TrimSpace(p.Format(x.r)))
		}
	}
	return fmt.Errorf("%s and %s differ at record %d", a, b, d.Index)
}
