package tests

import (
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// TestTAPLWIOIPv6: LWIO put and get over IPv6 between two emunic
// processes on a bridge, both hosts dual-stack. The client names the
// server by its IPv6 address (bracketed, with the pipe port); the server
// serves only its IPv6 subnet (--allow), so a pipe or an RDMA connection
// that went over IPv4 would be refused. The file is checked by SHA-256
// both ways, and the server's log names the client by its IPv6 address.
func TestTAPLWIOIPv6(t *testing.T) {
	testutil.RequireTAP(t)
	exe := buildEmunic(t)
	tapS, tapC := lwioBridge(t)
	export, work := t.TempDir(), t.TempDir()
	const size = 8<<20 + 4321
	local, want := lwioTestFile(t, work, size)

	srv := startCommand(t, exe, "lwio", "serve", "--tap", tapS, "--addr", "10.79.6.1/24", "--addr", "fd00:79:6::1/64",
		"--export", export, "--allow", "fd00:79:6::/64")
	srv.waitLog("Ctrl-C to stop", 1, 30*time.Second)
	run := lwioRunner(t, exe, []string{"--tap", tapC, "--addr", "10.79.6.2/24", "--addr", "fd00:79:6::2/64", "--server", "[fd00:79:6::1]:4445"})

	out := run("put", local, "v6/copy.bin")
	if !strings.Contains(out, fmt.Sprintf("%d bytes", size)) || !strings.Contains(out, fmt.Sprintf("SHA-256 %x", want)) {
		t.Errorf("put printed %q", out)
	}
	if got, err := os.ReadFile(filepath.Join(export, "v6", "copy.bin")); err != nil || sha256.Sum256(got) != want {
		t.Fatalf("the server's copy differs (%v)", err)
	}
	back := filepath.Join(work, "back.bin")
	run("get", "v6/copy.bin", back)
	if got, err := os.ReadFile(back); err != nil || sha256.Sum256(got) != want {
		t.Fatalf("the file got back differs (%v)", err)
	}
	srv.waitLog(`msg="lwio: client gone"`, 2, 10*time.Second)
	log := srv.stderr.String()
	if !strings.Contains(log, "addr=[fd00:79:6::2]:") || strings.Contains(log, "addr=10.79.6.2:") {
		t.Errorf("the server's log does not name the client by its IPv6 address only:\n%s", log)
	}
	report := srv.interrupt()
	for name, want := range map[string]int{"bytes written": size, "bytes read": size,
		"authenticated": 2, "connections lost": 0, "bad requests": 0, "protocol errors": 0} {
		if got := reportValue(report, name); got != want {
			t.Errorf("server report %q = %d, want %d:\n%s", name, got, want, report)
		}
	}
}
