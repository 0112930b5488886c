package main

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

// TestDemoRDMA runs 'emunic demo --rdma' in process with small sizes:
// every opcode checked, the Write run's data intact, zero host copies.
func TestDemoRDMA(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--rdma", "--bytes", "2MiB")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"emunic demo: 2.0 MiB over RDMA from A 10.0.0.1 to B 10.0.0.2, MTU 1500, on each path: RDMA Write, iWARP QP",
		"RDMA every opcode A -> B",
		"per QP (device statistics)",
		"RDMA Write throughput run: 32 Writes of up to 64.0 KiB",
		"host copies on the RDMA path (DriverStats.HostCopyBytes delta, from connection to the end of the run): A 0 B, B 0 B",
		"ok: 2.0 MiB arrived intact",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	for _, op := range []string{"Send", "Send with Solicited Event", "RDMA Write", "RDMA Write with Immediate", "RDMA Read", "Send with Invalidate"} {
		if row := reportRow(out, op+"  "); !strings.Contains(row, "  ok  ") {
			t.Errorf("opcode row %q is %q:\n%s", op, row, out)
		}
	}
	if row := reportRow(out, "RDMA Write, iWARP QP  "); !strings.Contains(row, "2.0 MiB") || !strings.Contains(row, "match ") {
		t.Errorf("throughput row %q:\n%s", row, out)
	}
	// B placed at least the Write run's bytes; A sourced them; no CRC
	// errors or Terminates either way.
	if a, b := reportCells(t, out, "placed"); b < 2<<20 || a == 0 {
		t.Errorf("placed: A %d, B %d", a, b)
	}
	for _, name := range []string{"crc_errors", "terminates_sent", "terminates_recv", "completions_lost"} {
		if a, b := reportCells(t, out, name); a != 0 || b != 0 {
			t.Errorf("%s: A %d, B %d", name, a, b)
		}
	}
	if errOut != "" {
		t.Errorf("stderr: %q", errOut)
	}
	t.Logf("\n%s", out)
}

// TestDemoRDMAWithPaths: --rdma beside --path offload, an odd --bytes
// (last Write short), and a capture.
func TestDemoRDMAWithPaths(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rdma.pcap")
	code, out, errOut := runCLI(t, "demo", "--rdma", "--path", "offload", "--bytes", "1000000", "--pcap", file)
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{
		"over TCP and RDMA",
		"on each path: delegated, offload engine; RDMA Write, iWARP QP",
		"RDMA Write throughput run: 16 Writes",
		"A 0 B, B 0 B",
		"ok: 976.6 KiB arrived intact on each of the 2 paths",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if st, err := os.Stat(file); err != nil || st.Size() < 1000000 {
		t.Fatalf("capture: %v", err)
	}
	if tshark, err := exec.LookPath("tshark"); err == nil {
		o, err := exec.Command(tshark, "-r", file, "-n", "--enable-heuristic", "iwarp_mpa_tcp",
			"-o", "tcp.try_heuristic_first:TRUE", "--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
			"-Y", "iwarp_rdma.opcode == 0").Output()
		if err != nil || !strings.Contains(string(o), "RDMA") {
			t.Errorf("tshark finds no RDMA Write in the capture: %v %.300q", err, o)
		}
	}
}

func TestDemoRDMABadPath(t *testing.T) {
	code, _, errOut := runCLI(t, "demo", "--path", "none")
	if code != exitUsage || !strings.Contains(errOut, `bad --path "none"`) {
		t.Errorf("--path none without --rdma: exit %d, %q", code, errOut)
	}
}

// TestDemoRDMACountsACopy: the RDMA path's host-copy check counts where a
// copy happens. A 40-byte inline Send in the middle of the RDMA part (the
// CPU copies its bytes into the send queue) makes the demo report 40 bytes
// at A and fail; the registered-buffer RDMA around it adds nothing.
func TestDemoRDMACountsACopy(t *testing.T) {
	cfg := defaultDemoConfig()
	cfg.Path, cfg.RDMA, cfg.Bytes, cfg.Idle = "none", true, 256<<10, 20*time.Second
	cfg.hooks = &demoHooks{rdmaExtra: func(a, b *rdmaEnd) error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled | rings.WRInline, WRID: 99, InlineLen: 40}
		copy(w.InlineData[:], "forty bytes, copied by the CPU: counted!")
		if err := a.qp.PostSend(&w); err != nil {
			return err
		}
		if _, err := a.waitOne(ctx, rings.WCSend); err != nil {
			return err
		}
		rc, err := b.waitOne(ctx, rings.WCRecv)
		if err == nil && !bytes.Equal(b.recvData(rc), w.InlineData[:40]) {
			t.Errorf("B received %q", b.recvData(rc))
		}
		return err
	}}
	var out bytes.Buffer
	rep, err := runDemoReport(context.Background(), cfg, &out)
	if err == nil || !strings.Contains(err.Error(), "the hosts copied 40 payload bytes on the RDMA path") {
		t.Fatalf("demo error %v, want the 40 copied bytes reported:\n%s", err, out.String())
	}
	if rr := rep.results[0].rdma; rr.copyA != 40 || rr.copyB != 0 {
		t.Errorf("host copies A %d B %d, want 40 and 0", rr.copyA, rr.copyB)
	}
	if !strings.Contains(out.String(), "A 40 B, B 0 B") {
		t.Errorf("the report does not show the copy:\n%s", out.String())
	}
}
