package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
		{[]string{"serve"}, exitUsage, "", "emunic serve: --tap NAME is required"},
		{[]string{"serve", "--tap", "x", "--addr", "1.2.3"}, exitUsage, "", `emunic serve: bad --addr "1.2.3"`},
		{[]string{"version", "extra"}, exitUsage, "", "unexpected argument"},
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

// TestDemoSmall runs the demo in process with 4 MiB and checks its report.
func TestDemoSmall(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--bytes", "4MiB")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"emunic demo: 4.0 MiB over TCP from A 10.0.0.1 to B 10.0.0.2, MTU 1500",
		"netstack, legacy rings",
		"match ",
		"rings (device side)",
		"A 10.0.0.1  tx",
		"B 10.0.0.2  rx",
		"device counters (stat block)",
		"drops and errors",
		"ok: 4.0 MiB arrived intact",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
	t.Logf("\n%s", out)
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
	res, err := exec.Command(tshark, "-r", file, "-Y", "_ws.malformed", "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	if s := strings.TrimSpace(string(res)); s != "" {
		t.Errorf("tshark finds malformed frames: %s", s)
	}
}

func TestDemoBadPcapPath(t *testing.T) {
	code, _, errOut := runCLI(t, "demo", "--bytes", "1KiB", "--pcap", filepath.Join(t.TempDir(), "no", "such", "dir", "x.pcap"))
	if code != exitFail || !strings.HasPrefix(errOut, "emunic demo: pcap: open ") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("exit %d, stderr %q; want exit 1 and one line about the pcap file", code, errOut)
	}
}
