package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
)

// TestDemoLWIO runs the demo's file paths and checks the figures it prints
// against counts made apart from it: the file's hash from the seed, the
// number of 64 KiB pieces from the size, and the hosts' own counters.
func TestDemoLWIO(t *testing.T) {
	const size = 3<<20 + 1000
	cfg := defaultDemoConfig()
	cfg.LWIO, cfg.Path, cfg.Bytes, cfg.Idle = true, "none", size, 20*time.Second
	var out bytes.Buffer
	rep, err := runDemoReport(context.Background(), cfg, &out)
	text := out.String()
	if err != nil {
		t.Fatalf("demo --lwio: %v\n%s", err, text)
	}
	var key [32]byte
	key[0] = byte(cfg.Seed)
	h := sha256.New()
	io.CopyN(h, rand.NewChaCha8(key), size)
	want := fmt.Sprintf("match %x", h.Sum(nil)[:6])
	pieces := (size + demoLWIOPiece - 1) / demoLWIOPiece
	if len(rep.results) != 2 {
		t.Fatalf("%d paths ran, want 2", len(rep.results))
	}
	for _, r := range rep.results {
		row := reportRow(text, r.path+"  ")
		if !strings.Contains(row, want) || !strings.Contains(row, "3.0 MiB") {
			t.Errorf("row %q lacks %q and the size", row, want)
		}
		// The client's CPU is a part of the process's (0 when the run was
		// too short for a profile sample). It is counted in profile samples
		// of 10 ms each (pprof's 100 Hz), and the runtime starts each
		// thread's sampling timer at a random point of its first period,
		// so a short run can show a sample or two more than the process's
		// CPU clock (10 ms against 7.6 ms has been seen): allow two.
		if r.clientCPU < 0 || r.clientCPU > r.cpu+2*cpusplit.SamplePeriod {
			t.Errorf("%s: client CPU %v of the process's %v", r.path, r.clientCPU, r.cpu)
		}
	}
	fields := func(prefix string) []string { return strings.Fields(reportRow(text, prefix)) }
	srv, cli := fields("server B"), fields("client A")
	if len(srv) != 9 || len(cli) != 9 {
		t.Fatalf("LWIO rows %q %q", srv, cli)
	}
	if srv[3] != fmt.Sprint(pieces) || srv[4] != fmt.Sprint(size) || srv[8] != "0" {
		t.Errorf("server row %q: want %d reads of %d bytes, no errors", srv, pieces, size)
	}
	// The client's requests: AUTH, REGISTER, the reads, CLOSE and the
	// credit acknowledgements; every read went straight to registered
	// memory.
	if cli[4] != fmt.Sprint(size) || cli[5] != fmt.Sprint(pieces) || cli[6] != "0" {
		t.Errorf("client row %q: want %d bytes, %d zero-copy reads, none staged", cli, size, pieces)
	}
	// The LWIO path's data went by the engines (RDMA Writes), the TCP
	// path's through netstack: each frame the engines sent is one more
	// than netstack's on the LWIO path, and none on the TCP path.
	lw, tc := rep.results[0].cost, rep.results[1].cost
	if lw.engSegments < uint64(size/1500) || lw.nsSegments > 64 {
		t.Errorf("LWIO path: %d frames by the engines, %d by netstack; want the data by the engines", lw.engSegments, lw.nsSegments)
	}
	if tc.engSegments != 0 || tc.nsSegments < uint64(size/1500) {
		t.Errorf("TCP path: %d frames by the engines, %d by netstack; want the data by netstack", tc.engSegments, tc.nsSegments)
	}
}
