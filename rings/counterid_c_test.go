package rings

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCountersFromC: a C program built against the generated header only
// (c/counters_check.c) reads an area written here and finds every counter
// by ID, and the named IDs it uses are the Go ones: each counter holds a
// value that says which group and ID it is, so a misplaced one shows.
func TestCountersFromC(t *testing.T) {
	gcc := needGCC(t)
	bin := filepath.Join(t.TempDir(), "counters_check")
	cmd := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Ic", "-o", bin, "c/counters_check.c")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	l := CounterAreaLayout
	const qpIdx = 42
	area := make([]byte, l.QPOff(1))
	h := StatAreaHeader{Gen: 2, NumQPs: 1, EngineN: EngineCounterCount, QPCap: 1, RingN: RingCounterCount,
		QPN: QPCounterCount, OccN: OccupancyWords}
	h.Encode(area)
	ringV := func(r AreaRing, id RingCounterID) uint64 { return 1<<32 | uint64(r)<<16 | uint64(id) }
	engV := func(id EngineCounterID) uint64 { return 2<<32 | uint64(id) }
	occV := func(id OccupancyID) uint64 { return 3<<32 | uint64(id) }
	qpV := func(id QPCounterID) uint64 { return 4<<32 | uint64(id) }
	var want []string
	for r := range AreaRing(StatAreaRings) {
		for id := range RingCounterID(RingCounterCount) {
			le.PutUint64(area[l.Ring(r, id):], ringV(r, id))
			want = append(want, fmt.Sprintf("ring %d %d %d", r, id, ringV(r, id)))
		}
	}
	for id := range EngineCounterID(EngineCounterCount) {
		le.PutUint64(area[l.Engine(id):], engV(id))
		want = append(want, fmt.Sprintf("engine %d %d", id, engV(id)))
	}
	for id := range OccupancyID(OccupancyWords) {
		le.PutUint64(area[l.Occupancy(id):], occV(id))
		want = append(want, fmt.Sprintf("occupancy %d %d", id, occV(id)))
	}
	le.PutUint64(area[l.QPOff(0):], qpIdx)
	for id := range QPCounterID(QPCounterCount) {
		le.PutUint64(area[l.QP(0, id):], qpV(id))
		want = append(want, fmt.Sprintf("qp %d %d %d", qpIdx, id, qpV(id)))
	}
	want = append(want,
		fmt.Sprintf("named tx_entries %d", ringV(AreaRingTx, RingCtrEntries)),
		fmt.Sprintf("named tx_bytes %d", engV(EngTxBytes)),
		fmt.Sprintf("named sack_recoveries %d", engV(EngSACKRecoveries)),
		fmt.Sprintf("named ooo_pages_used %d", occV(OccOOOPagesUsed)),
		fmt.Sprintf("named rtrs_recv %d", qpV(QPCtrRTRsRecv)))
	file := filepath.Join(t.TempDir(), "area")
	if err := os.WriteFile(file, area, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, file).Output()
	if err != nil {
		t.Fatalf("counters_check: %v", err)
	}
	got := strings.Split(strings.TrimSpace(string(out)), "\n")
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		for i := range max(len(got), len(want)) {
			var g, w string
			if i < len(got) {
				g = got[i]
			}
			if i < len(want) {
				w = want[i]
			}
			if g != w {
				t.Errorf("line %d: C read %q, want %q", i+1, g, w)
			}
		}
	}
}
