// Command emunic runs the emulated TCP-offload NIC.
//
//	emunic demo     two emulated hosts over an in-memory wire, TCP through both NICs' rings
//	emunic serve    one emulated host on a Linux TAP device, with TCP echo and discard
//	emunic device   the emulated NIC alone, in its own process, for a host that attaches over a socket
//	emunic lwio     LWIO file I/O over RDMA: serve, put, get, stat on a TAP
//	emunic rdma     rping / rdma_server / rdma_client compatible tools on a TAP
//	emunic trace    ring traces: record a demo run, replay it on a fresh device, diff, show
//	emunic version  print the version
//	emunic help     show help for a command
//
// Exit status: 0 on success, 1 when the command failed, 2 for a mistake in
// the command line.
package main

import (
	"context"
	"errors"
	"fmt"
	"github.com/emunic/emunic/board"
	"io"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"syscall"
)

// version is set at link time (-ldflags "-X main.version=v1.2.3"); otherwise
// it comes from the build information.
var version = ""

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

type runner func(ctx context.Context, args []string, stdout, stderr io.Writer) error

type entry struct {
	cmd *command
	run runner
}

// commands in the order the usage lists them.
var commands = []entry{
	{demoCmd, runDemoCommand},
	{serveCmd, runServeCommand},
	{deviceCmd, runDeviceCommand},
	{lwioCmd, runLWIOCommand},
	{rdmaToolCmd, runRDMAToolCommand},
	{traceCmd, runTraceCommand},
	{versionCmd, runVersionCommand},
	{helpCmd, nil}, // handled by run, which knows the table
}

func lookup(name string) *entry {
	for i := range commands {
		if commands[i].cmd.name == name {
			return &commands[i]
		}
	}
	return nil
}

func main() {
	// A split host ('emunic demo --split', EMUNIC_SPLIT=1) runs this
	// program again as its NIC's device process: serve as that and exit.
	board.RunSplitChild()
	// The first SIGINT or SIGTERM cancels ctx, so a command can stop
	// cleanly and print its counters; once it has, a second one kills
	// the process as usual.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop()
	}()
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}

// run executes the command line args (without the program name) and returns
// the exit status. Errors are printed to stderr as one line.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		printUsage(stderr)
		return exitUsage
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		printUsage(stdout)
		return exitOK
	case "-version", "--version":
		name = "version"
	case "help":
		return runHelp(rest, stdout, stderr)
	}
	e := lookup(name)
	if e == nil || e.run == nil {
		if len(name) > 0 && name[0] == '-' {
			fmt.Fprintf(stderr, "emunic: unknown flag %s: flags go after the command (run 'emunic help' for the commands)\n", name)
		} else {
			fmt.Fprintf(stderr, "emunic: unknown command %q (run 'emunic help' for the commands)\n", name)
		}
		return exitUsage
	}
	err := e.run(ctx, rest, stdout, stderr)
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, errHelp):
		return exitOK
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "emunic %s: %v\n", name, err)
		return exitUsage
	default:
		fmt.Fprintf(stderr, "emunic %s: %v\n", name, err)
		return exitFail
	}
}

func printUsage(w io.Writer) {
	fmt.Fprint(w, `emunic is an emulated TCP-offload NIC: a device model whose rings live in host
memory, gVisor netstack as the host TCP stack, and ports to an in-memory wire
or a Linux TAP device.

Usage:
  emunic <command> [flags]

Commands:
`)
	for _, e := range commands {
		fmt.Fprintf(w, "  %-8s  %s\n", e.cmd.name, e.cmd.summary)
	}
	fmt.Fprint(w, `
Run 'emunic <command> --help' for a command's flags and examples.
`)
}

var helpCmd = &command{
	name:     "help",
	summary:  "show help for emunic or for one command",
	synopsis: "[command]",
	about:    "Shows the list of commands, or the flags and examples of one command.",
	examples: "  emunic help\n  emunic help demo",
}

func runHelp(args []string, stdout, stderr io.Writer) int {
	switch {
	case len(args) == 0:
		printUsage(stdout)
		return exitOK
	case len(args) > 1:
		fmt.Fprintf(stderr, "emunic help: too many arguments: give one command name\n")
		return exitUsage
	}
	e := lookup(args[0])
	if e == nil {
		fmt.Fprintf(stderr, "emunic help: unknown command %q (run 'emunic help' for the commands)\n", args[0])
		return exitUsage
	}
	if e.run == nil { // help itself
		printCommandHelp(stdout, e.cmd, nil)
		return exitOK
	}
	// Every command prints its own help, from its own FlagSet.
	if err := e.run(context.Background(), []string{"--help"}, stdout, stderr); err != nil && !errors.Is(err, errHelp) {
		fmt.Fprintf(stderr, "emunic help: %v\n", err)
		return exitFail
	}
	return exitOK
}

var versionCmd = &command{
	name:     "version",
	summary:  "print the version",
	synopsis: "",
	about:    "Prints emunic's version, the commit it was built from when known, and the Go version.",
	examples: "  emunic version",
}

func runVersionCommand(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("version")
	if err := parse(versionCmd, fs, args, stdout); err != nil {
		return err
	}
	fmt.Fprintln(stdout, versionString())
	return nil
}

// versionString is "emunic VERSION [(commit REV[, modified])] GOVERSION OS/ARCH".
func versionString() string {
	v, rev, dirty := version, "", false
	if bi, ok := debug.ReadBuildInfo(); ok {
		if v == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.modified":
				dirty = s.Value == "true"
			}
		}
	}
	if v == "" {
		v = "devel"
	}
	s := "emunic " + v
	if rev != "" {
		if len(rev) > 12 {
			rev = rev[:12]
		}
		s += " (commit " + rev
		if dirty {
			s += ", modified"
		}
		s += ")"
	}
	return fmt.Sprintf("%s %s %s/%s", s, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
