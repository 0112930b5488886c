package split

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestCDriver builds c/hostdrv.c, a host driver written in C against the
// generated header rings/c/emunic_abi.h only, and runs it as its own
// process against a device served here: it negotiates, maps the memory,
// brings the device up through its register block (identification,
// reset, features, ring and counter-area registers, enable; a refused
// write's code and counter), posts commands and reads their statuses back, registers the counter
// area and reads counters there by ID (the stat block's, the rings', the
// engine's, the occupancy's), sends a frame through the transmit ring and
// receives one through a legacy buffer and its notification, and resets
// the device on its way out; the second and third time through the kick
// words (FeatureKickWords).
func TestCDriver(t *testing.T) {
	gcc, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("skipped: gcc is not installed (Debian: apt-get install gcc); .ci/run installs it")
	}
	bin := filepath.Join(t.TempDir(), "hostdrv")
	build := exec.Command(gcc, "-std=gnu11", "-O2", "-Wall", "-Wextra", "-Werror", "-I../../rings/c", "-o", bin, "c/hostdrv.c")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	s, path := testServer(t)
	for round := range 3 { // the device serves one C host after another
		args := []string{path}
		if round > 0 {
			args = append(args, "kick-words")
		}
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "ok" {
			t.Fatalf("round %d: hostdrv: %v\n%s", round, err, out)
		}
	}
	st := s.Stats()
	if st.Started != 3 || st.BadMessages != 0 || st.OutOfOrder != 0 || st.Refused != 0 || st.BadKickWords != 0 || st.BadRegister != 3 {
		t.Fatalf("server counters %+v", st)
	}
	if n := s.Registers().Counter(rings.RegCtrHostGone); n != 0 {
		t.Fatalf("%d C hosts counted as gone: each reset the device before it left", n)
	}
}
