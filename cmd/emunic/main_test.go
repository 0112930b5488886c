package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/emunic/emunic/tcpstack"
)

// runCLI runs the command line in process and returns its exit status and
// output.
func runCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

func TestCLIExitCodes(t *testing.T) {
	for _, c := range []struct {
		args   []string
		code   int
		stdout string // substring expected on stdout
		stderr string // substring expected on stderr, which must then be one line
	}{
		{nil, exitUsage, "", "Usage:"},
		{[]string{"help"}, exitOK, "Commands:", ""},
		{[]string{"--help"}, exitOK, "Commands:", ""},
		{[]string{"-h"}, exitOK, "Commands:", ""},
		{[]string{"help", "demo"}, exitOK, "Usage: emunic demo", ""},
		{[]string{"help", "serve"}, exitOK, "Usage: emunic serve", ""},
		{[]string{"help", "version"}, exitOK, "Usage: emunic version", ""},
		{[]string{"help", "help"}, exitOK, "Usage: emunic help", ""},
		{[]string{"help", "nope"}, exitUsage, "", `unknown command "nope"`},
		{[]string{"demo", "--help"}, exitOK, "Usage: emunic demo", ""},
		{[]string{"serve", "-h"}, exitOK, "Usage: emunic serve", ""},
		{[]string{"version", "--help"}, exitOK, "Usage: emunic version", ""},
		{[]string{"version"}, exitOK, "emunic ", ""},
		{[]string{"--version"}, exitOK, "emunic ", ""},
		{[]string{"nope"}, exitUsage, "", `emunic: unknown command "nope"`},
		{[]string{"--bytes", "1"}, exitUsage, "", "unknown flag --bytes: flags go after the command"},
		{[]string{"demo", "--bytes", "lots"}, exitUsage, "", `emunic demo: bad --bytes "lots"`},
		{[]string{"demo", "--loss", "200"}, exitUsage, "", `emunic demo: bad --loss "200"`},
		{[]string{"demo", "--path", "fast"}, exitUsage, "", `emunic demo: bad --path "fast": want netstack, offload, both, direct or all`},
		{[]string{"serve"}, exitUsage, "", "emunic serve: --tap NAME is required"},
		{[]string{"serve", "--tap", "x", "--addr", "1.2.3"}, exitUsage, "", `emunic serve: bad --addr "1.2.3"`},
		{[]string{"version", "extra"}, exitUsage, "", "unexpected argument"},
		{[]string{"help", "lwio"}, exitOK, "Usage: emunic lwio serve|mount|put|get|ls|stat|mkdir|rm|mv", ""},
		{[]string{"lwio", "--help"}, exitOK, "Usage: emunic lwio serve|mount|put|get|ls|stat|mkdir|rm|mv", ""},
		{[]string{"lwio", "put", "--help"}, exitOK, "Usage: emunic lwio put", ""},
		{[]string{"lwio"}, exitUsage, "", "emunic lwio: which one: serve, mount, put, get, ls, stat, mkdir, rm or mv"},
		{[]string{"lwio", "mount", "--help"}, exitOK, "Usage: emunic lwio mount", ""},
		{[]string{"lwio", "ls", "--help"}, exitOK, "Usage: emunic lwio ls", ""},
		{[]string{"lwio", "rm", "--help"}, exitOK, "  -r                remove directories", ""},
		{[]string{"lwio", "mkdir", "--help"}, exitOK, "  -p                make missing parents", ""},
		{[]string{"lwio", "mv", "--help"}, exitOK, "Usage: emunic lwio mv", ""},
		{[]string{"lwio", "ls", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1", "a", "b"}, exitUsage, "",
			"'emunic lwio ls' takes 0 to 1 argument(s) after its flags, got 2"},
		{[]string{"lwio", "mkdir", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1"}, exitUsage, "",
			"'emunic lwio mkdir' takes 1 or more argument(s) after its flags, got 0"},
		{[]string{"lwio", "rm", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1", "a\x00b"}, exitUsage, "", "holds a NUL byte"},
		{[]string{"lwio", "mount", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1", "/nonexistent/mnt"}, exitFail, "",
			"mount point: stat /nonexistent/mnt: no such file or directory"},
		{[]string{"lwio", "copy"}, exitUsage, "", `emunic lwio: unknown subcommand "copy"`},
		{[]string{"lwio", "serve", "--tap", "x", "--addr", "10.9.0.2/24"}, exitUsage, "", "--export DIR is required"},
		{[]string{"lwio", "stat", "--tap", "x", "--addr", "10.9.0.2/24"}, exitUsage, "", "--server IP is required"},
		{[]string{"lwio", "get", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1", "one"}, exitUsage, "",
			"'emunic lwio get' takes 2 argument(s) after its flags, got 1"},
		{[]string{"lwio", "put", "--bogus"}, exitUsage, "", "unknown flag -bogus (see 'emunic lwio put --help')"},
		{[]string{"lwio", "stat", "--tap", "x", "--addr", "10.9.0.2/24", "--server", "10.9.0.1", "--arena", "1KiB", "f"}, exitUsage, "", "bad --arena"},
		// A TAP that cannot be opened: one line naming the device and why, exit 1.
		{[]string{"serve", "--tap", "this-name-is-too-long", "--addr", "10.9.0.2/24"}, exitFail, "",
			`emunic serve: tap "this-name-is-too-long": interface name is 21 bytes; Linux allows at most 15`},
	} {
		code, out, errOut := runCLI(t, c.args...)
		if code != c.code {
			t.Errorf("emunic %q: exit %d, want %d; stderr %q", c.args, code, c.code, errOut)
		}
		if !strings.Contains(out, c.stdout) {
			t.Errorf("emunic %q: stdout %q lacks %q", c.args, out, c.stdout)
		}
		if c.stderr == "" {
			if errOut != "" {
				t.Errorf("emunic %q: unexpected stderr %q", c.args, errOut)
			}
			continue
		}
		if !strings.Contains(errOut, c.stderr) {
			t.Errorf("emunic %q: stderr %q lacks %q", c.args, errOut, c.stderr)
		}
		// Every error is one line; only the bare "emunic" prints the usage.
		if n := strings.Count(errOut, "\n"); n != 1 && c.args != nil {
			t.Errorf("emunic %q: stderr has %d lines, want 1: %q", c.args, n, errOut)
		}
	}
}

// TestCLIServeTAPErrors checks serve's error line for TAPs that cannot be
// opened, using real devices.
func TestCLIServeTAPErrors(t *testing.T) {
	if os.Geteuid() != 0 {
		// The non-root case is the one that can be checked here.
		if _, err := os.Stat("/dev/net/tun"); err != nil {
			t.Skipf("no /dev/net/tun (%v): nothing to check", err)
		}
		code, _, errOut := runCLI(t, "serve", "--tap", "emucli0", "--addr", "10.9.0.2/24")
		if code != exitFail || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, `tap "emucli0"`) ||
			!strings.Contains(errOut, "not running as root") {
			t.Errorf("as a user: exit %d, stderr %q; want exit 1 and one line saying it needs root", code, errOut)
		}
		return
	}
	// As root: "lo" exists and is not a TAP.
	code, _, errOut := runCLI(t, "serve", "--tap", "lo", "--addr", "10.9.0.2/24")
	want := `emunic serve: tap "lo": an interface with this name already exists and is not a TAP device` + "\n"
	if code != exitFail || errOut != want {
		t.Errorf("serve --tap lo: exit %d, stderr %q; want exit 1 and %q", code, errOut, want)
	}
}

func TestCLIVersion(t *testing.T) {
	_, out, _ := runCLI(t, "version")
	if !regexp.MustCompile(`^emunic \S+( \(commit [0-9a-f]+(, modified)?\))? go\S+ \w+/\w+\n$`).MatchString(out) {
		t.Errorf("version output %q", out)
	}
}

// TestDemoSmall runs the demo in process with 4 MiB on both paths and
// checks its report.
func TestDemoSmall(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--bytes", "4MiB")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"emunic demo: 4.0 MiB over TCP from A 10.0.0.1 to B 10.0.0.2, MTU 1500, on each path: netstack, legacy rings; delegated, offload engine",
		"per path, both hosts together",
		"rings (device side)",
		"A 10.0.0.1  tx",
		"B 10.0.0.2  rx",
		"device counters (stat block)",
		"delegated TCP engine (offload unit)",
		"drops and errors",
		"ok: 4.0 MiB arrived intact on each of the 2 paths",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, path := range []string{"netstack, legacy rings", "delegated, offload engine"} {
		if row := reportRow(out, path+"  "); !strings.Contains(row, "4.0 MiB") || !strings.Contains(row, "match ") {
			t.Errorf("throughput row of %q is %q; want 4.0 MiB and a matching SHA-256:\n%s", path, row, out)
		}
	}
	// The per-path table: the delegated path moves its data without
	// netstack segments and with far fewer transmit ring entries.
	ns, del := reportCells(t, out, "segments sent by netstack")
	if ns < 1000 || del > 20 {
		t.Errorf("segments sent by netstack: %d on the netstack path, %d on the delegated one", ns, del)
	}
	ns, del = reportCells(t, out, "segments sent by the engines")
	if ns != 0 || del < 1000 {
		t.Errorf("segments sent by the engines: %d on the netstack path, %d on the delegated one", ns, del)
	}
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
	t.Logf("\n%s", out)
}

// reportRow returns the first line of out that starts (after indentation)
// with prefix.
func reportRow(out, prefix string) string {
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), prefix) {
			return line
		}
	}
	return ""
}

// reportCells returns the two numbers of a row of the per-path table.
func reportCells(t *testing.T, out, name string) (a, b uint64) {
	t.Helper()
	row := reportRow(out, name+"  ")
	f := strings.Fields(strings.TrimPrefix(strings.TrimSpace(row), name))
	if len(f) != 2 {
		t.Fatalf("row %q: want two numbers:\n%s", row, out)
	}
	var err error
	if a, err = strconv.ParseUint(f[0], 10, 64); err == nil {
		b, err = strconv.ParseUint(f[1], 10, 64)
	}
	if err != nil {
		t.Fatalf("row %q: %v", row, err)
	}
	return a, b
}

// TestDemoPathOffload runs only the delegated path.
func TestDemoPathOffload(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--bytes", "3MiB", "--path", "offload")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	if strings.Contains(out, "netstack, legacy rings") {
		t.Errorf("--path offload ran the netstack path:\n%s", out)
	}
	for _, want := range []string{"delegated, offload engine", "delegated TCP engine (offload unit)", "rx_bytes",
		"user_bufs_done", "ok: 3.0 MiB arrived intact\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	code, out, _ = runCLI(t, "demo", "--bytes", "1MiB", "--path", "netstack")
	if code != exitOK || strings.Contains(out, "delegated, offload engine") ||
		!strings.Contains(out, "delegated TCP engine (offload unit): no delegated traffic") {
		t.Errorf("--path netstack: exit %d:\n%s", code, out)
	}
}

func TestSnakeCase(t *testing.T) {
	for in, want := range map[string]string{
		"TxRetransSegs": "tx_retrans_segs", "OOOSegments": "ooo_segments", "DropPAWS": "drop_paws",
		"DMAErrors": "dma_errors", "RTOExpired": "rto_expired", "AcksSent": "acks_sent", "Rx": "rx",
	} {
		if got := snakeCase(in); got != want {
			t.Errorf("snakeCase(%q) = %q, want %q", in, got, want)
		}
	}
	var drops, all int
	for _, c := range engineCounters(tcpstack.EngineCounters{}) {
		all++
		if c.drop {
			drops++
		}
	}
	if all < 40 || drops < 10 || drops == all {
		t.Errorf("engine counters: %d, of which %d drops or errors", all, drops)
	}
}

// TestDemoLossyPcap runs the demo over an impaired wire with a capture, and
// checks the capture file; if tshark is installed, it must decode it with no
// malformed packets.
func TestDemoLossyPcap(t *testing.T) {
	file := filepath.Join(t.TempDir(), "demo.pcap")
	code, out, errOut := runCLI(t, "demo", "--bytes", "2MiB", "--loss", "2", "--reorder", "2", "--seed", "3", "--pcap", file)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	if !strings.Contains(out, "tx_drop_loss") || !strings.Contains(out, "pcap: ") {
		t.Errorf("report lacks the wire's losses or the capture line:\n%s", out)
	}
	// Both paths lost frames on the same wire and retransmitted.
	if ns, del := reportCells(t, out, "segments retransmitted"); ns == 0 || del == 0 {
		t.Errorf("segments retransmitted: %d on the netstack path, %d on the delegated one; want both > 0", ns, del)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// pcap with nanosecond timestamps, link type Ethernet.
	if len(b) < 24+16 || binary.LittleEndian.Uint32(b) != 0xa1b23c4d || binary.LittleEndian.Uint32(b[20:]) != 1 {
		t.Fatalf("%s is not a nanosecond pcap of Ethernet frames (%d bytes)", file, len(b))
	}
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark not installed (apt-get install tshark): the capture was not decoded")
	}
	// Without TCP reassembly: the payload is random bytes, which a
	// heuristic dissector now and then takes for its protocol (Thrift) and
	// asks tshark to reassemble; a fast retransmission tshark calls
	// "out-of-order" (sent within the initial RTT of the original) then
	// "overlaps old data" in that reassembly and is flagged malformed. Every
	// frame's own headers and options are still decoded and checked.
	noReassembly := []string{"-o", "tcp.desegment_tcp_streams:FALSE"}
	res, err := exec.Command(tshark, append([]string{"-r", file, "-Y", "_ws.malformed", "-T", "fields", "-e", "frame.number"}, noReassembly...)...).Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if s := strings.TrimSpace(string(res)); s != "" {
		// The first one decoded in full, to show which layer tshark
		// objects to.
		first := strings.Fields(s)[0]
		detail, _ := exec.Command(tshark, append([]string{"-r", file, "-Y", "frame.number == " + first, "-V", "-x"}, noReassembly...)...).Output()
		t.Errorf("tshark finds malformed frames: %s\nthe first of them:\n%s", s, detail)
	}
}

func TestDemoBadPcapPath(t *testing.T) {
	code, _, errOut := runCLI(t, "demo", "--bytes", "1KiB", "--pcap", filepath.Join(t.TempDir(), "no", "such", "dir", "x.pcap"))
	if code != exitFail || !strings.HasPrefix(errOut, "emunic demo: pcap: open ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want exit 1 and one line about the pcap file", code, errOut)
	}
}
