package tests

import (
	"os/exec"
	"strings"
	"testing"
)

// TestDeviceNeverImportsHost holds the layering rule (README, "Layout"):
// the device side and the trace package build without any host package,
// so they meet the host only in the rings and host memory.
func TestDeviceNeverImportsHost(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to list imports with: %v", err)
	}
	out, err := exec.Command("go", "list", "-deps", "../nic/...", "../delegation/...", "../trace/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		for _, host := range []string{"/tcpstack", "/lwio", "/cmd/"} {
			if strings.HasPrefix(p, "github.com/emunic/emunic") && strings.Contains(p, host) {
				t.Errorf("the device side imports %s", p)
			}
		}
	}
}
