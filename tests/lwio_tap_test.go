package tests

import (
	"crypto/sha256"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// TestTAPLWIOCommands is docs/cli.md's LWIO recipe: two emunic processes, each
// one emulated host on its own TAP device, the TAPs joined by a Linux
// bridge; 'emunic lwio serve' in one, 'put', 'stat' and 'get' from the
// other, the file checked by SHA-256 at each step; then the server stops
// with SIGINT and its counters must agree with what moved.
func TestTAPLWIOCommands(t *testing.T) {
	testutil.RequireTAP(t)
	exe := buildEmunic(t)
	tapS, tapC := lwioBridge(t)
	export, work := t.TempDir(), t.TempDir()
	const size = 24<<20 + 12345
	local, want := lwioTestFile(t, work, size)

	srv := startCommand(t, exe, "lwio", "serve", "--tap", tapS, "--addr", "10.79.0.1/24", "--export", export)
	srv.waitLog("Ctrl-C to stop", 1, 30*time.Second)
	client := []string{"--tap", tapC, "--addr", "10.79.0.2/24", "--server", "10.79.0.1"}
	run := lwioRunner(t, exe, client)

	// put makes the missing folder "sub".
	out := run("put", local, "sub/copy.bin")
	if !strings.Contains(out, fmt.Sprintf("%d bytes", size)) || !strings.Contains(out, fmt.Sprintf("SHA-256 %x", want)) {
		t.Errorf("put printed %q", out)
	}
	if got, err := os.ReadFile(filepath.Join(export, "sub", "copy.bin")); err != nil || sha256.Sum256(got) != want {
		t.Fatalf("the server's copy differs (%v)", err)
	}
	if out := strings.TrimSpace(run("stat", "sub/copy.bin")); out != strconv.Itoa(size) {
		t.Errorf("stat printed %q, want %d", out, size)
	}
	back := filepath.Join(work, "back.bin")
	run("get", "sub/copy.bin", back)
	if got, err := os.ReadFile(back); err != nil || sha256.Sum256(got) != want {
		t.Fatalf("the file got back differs (%v)", err)
	}
	// A path outside the export is refused, with exit status 1.
	cmd := exec.Command(exe, append([]string{"lwio", "stat"}, append(append([]string(nil), client...), "../../etc/passwd")...)...)
	if err := cmd.Run(); err == nil {
		t.Error("stat of a path outside the export succeeded")
	} else if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Errorf("stat outside the export: %v, want exit status 1", err)
	}

	if out := run("ls", "sub"); !strings.Contains(out, fmt.Sprintf(" %d ", size)) || !strings.HasSuffix(strings.TrimSpace(out), " copy.bin") {
		t.Errorf("ls sub printed %q", out)
	}
	// Each client is logged as it leaves: five so far.
	srv.waitLog(`msg="lwio: client gone"`, 5, 10*time.Second)
	if !strings.Contains(srv.stderr.String(), fmt.Sprintf("files=1 bytes_read=%d bytes_written=0", size)) {
		t.Errorf("no log line for get's client:\n%s", srv.stderr.String())
	}

	report := srv.interrupt()
	// put and get move 64 KiB a request; OPENs: put's (of its temporary
	// file) and get's. STATs: put's look at its target (refused: missing),
	// stat, the refused stat, get's; LIST: ls. put's MKDIR, HASH and
	// RENAME, get's HASH.
	pieces := (size + 64<<10 - 1) / (64 << 10)
	for name, want := range map[string]int{"bytes written": size, "bytes read": size, "connections": 5, "authenticated": 5,
		"registers": 2, "closes": 2, "reads": pieces, "writes": pieces, "opens": 2, "bad requests": 0, "protocol errors": 0,
		"connections closed by clients": 5, "connections lost": 0, "credit violations": 0,
		"directory stats": 5, "directory lists": 1, "directories made": 1, "hashes": 2, "renames": 1, "bytes hashed": 2 * size,
		"directory ops refused": 2} {
		if got := reportValue(report, name); got != want {
			t.Errorf("server report %q = %d, want %d:\n%s", name, got, want, report)
		}
	}
}

// lwioBridge makes two TAP devices on a Linux bridge, the server's and
// the client's, removed when the test ends. The bridge does no multicast
// snooping: IPv6 neighbour solicitations reach every port whatever MLD
// said (the emulated hosts send no MLD reports).
func lwioBridge(t *testing.T) (tapS, tapC string) {
	t.Helper()
	br := uniqueName("lwbr", 10)
	tapS, tapC = uniqueName("lws", 10), uniqueName("lwc", 10)
	testutil.IP(t, "link", "add", br, "type", "bridge", "mcast_snooping", "0")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })
	for _, tap := range []string{tapS, tapC} {
		testutil.IP(t, "tuntap", "add", "dev", tap, "mode", "tap")
		t.Cleanup(func() { exec.Command("ip", "link", "del", tap).Run() })
		testutil.IP(t, "link", "set", tap, "master", br)
		testutil.IP(t, "link", "set", tap, "up")
	}
	testutil.IP(t, "link", "set", br, "up")
	return tapS, tapC
}

// lwioTestFile writes size seeded bytes to dir/in.bin and returns its
// path and SHA-256.
func lwioTestFile(t *testing.T, dir string, size int) (string, [32]byte) {
	t.Helper()
	data := make([]byte, size)
	r := rand.New(rand.NewPCG(7, 11))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	local := filepath.Join(dir, "in.bin")
	if err := os.WriteFile(local, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return local, sha256.Sum256(data)
}

// lwioRunner returns a function that runs 'emunic lwio SUB' with the
// client flags and the arguments after SUB, and returns its standard
// output; a failure fails the test.
func lwioRunner(t *testing.T, exe string, client []string) func(args ...string) string {
	return func(args ...string) string {
		t.Helper()
		cmd := exec.Command(exe, append([]string{"lwio", args[0]}, append(append([]string(nil), client...), args[1:]...)...)...)
		out, err := cmd.Output()
		if err != nil {
			stderr := ""
			if ee, ok := err.(*exec.ExitError); ok {
				stderr = string(ee.Stderr)
			}
			t.Fatalf("emunic lwio %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
		}
		return string(out)
	}
}

// reportValue is the figure of the row name in the LWIO server's report
// ('NAME   N'), -1 if it has no such row.
func reportValue(report, name string) int {
	got := -1
	for _, line := range strings.Split(report, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && strings.Join(f[:len(f)-1], " ") == name {
			got, _ = strconv.Atoi(f[len(f)-1])
		}
	}
	return got
}
