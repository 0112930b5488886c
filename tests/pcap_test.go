package tests

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// recordedPair is the demo's bench with a capture: two hosts on a wire, the
// pcap recorder on host A's port (as 'emunic demo --pcap' does). close stops
// both hosts, which completes the capture.
func recordedPair(t *testing.T, wc port.WireConfig, file string) (a, b *tcpstack.Host, close func()) {
	t.Helper()
	var rec *port.Recorder
	r := hostrig.New(t, hostrig.Config{Wire: wc, WrapA: func(p *port.WirePort) (port.Port, error) {
		var err error
		rec, err = port.CreateRecorder(p, file)
		return rec, err
	}})
	var once sync.Once
	close = func() {
		once.Do(func() {
			r.Close()
			if err := rec.Err(); err != nil {
				t.Errorf("capture: %v", err)
			}
		})
	}
	t.Cleanup(close)
	return r.A, r.B, close
}

// tsharkReport is what tshark says about a capture.
type tsharkReport struct {
	frames, tcp, tcpData int
	malformed            []string // "frame N: ..." for each malformed frame
	errors               []string // "frame N: message" for each expert info of severity Error
}

// Wireshark's expert severity for errors (PI_ERROR).
const expertError = 0x00800000

// runTshark decodes file with IP and TCP checksum validation on, so a wrong
// checksum is an expert error.
func runTshark(t *testing.T, tshark, file string) tsharkReport {
	t.Helper()
	var r tsharkReport
	checksums := []string{"-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"}
	for _, f := range testutil.Fields(t, tshark, file, checksums,
		"frame.number", "frame.protocols", "tcp.len", "_ws.expert.severity", "_ws.expert.message") {
		r.frames++
		protos := ":" + f[1] + ":"
		if strings.Contains(protos, ":tcp:") {
			r.tcp++
			if n, _ := strconv.Atoi(f[2]); n > 0 {
				r.tcpData++
			}
		}
		if strings.Contains(protos, ":_ws.malformed:") {
			r.malformed = append(r.malformed, fmt.Sprintf("frame %s: %s", f[0], f[1]))
		}
		sev, msg := strings.Split(f[3], "|"), strings.Split(f[4], "|")
		for i, s := range sev {
			if v, err := strconv.ParseUint(s, 0, 32); err == nil && v == expertError {
				m := "?"
				if i < len(msg) {
					m = msg[i]
				}
				r.errors = append(r.errors, fmt.Sprintf("frame %s: %s", f[0], m))
			}
		}
	}
	return r
}

// TestPcapDemoTshark records the demo's transfer on host A's port and has
// tshark decode the capture: TCP frames, none malformed, no expert errors,
// IP and TCP checksums verified. Once on a clean wire and once with loss and
// reordering (retransmissions and out-of-order segments are warnings and
// notes, not errors).
func TestPcapDemoTshark(t *testing.T) {
	tshark := testutil.NeedTshark(t)
	for _, c := range []struct {
		name string
		imp  port.Impairments
	}{
		{"clean", port.Impairments{}},
		{"lossy", port.Impairments{LossPercent: 3, ReorderPercent: 3, ReorderGap: 2}},
	} {
		t.Run(c.name, func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "demo.pcap")
			a, b, stop := recordedPair(t, port.WireConfig{Seed: 5, AToB: c.imp, BToA: c.imp}, file)
			n := int64(4 << 20)
			transfer(t, a, b, n)
			stop()
			r := runTshark(t, tshark, file)
			t.Logf("%s: %d frames, %d TCP, %d with data", file, r.frames, r.tcp, r.tcpData)
			// 4 MiB in segments of at most 1460 bytes: at least 2873 data frames.
			if r.tcpData < int(n/1460) {
				t.Errorf("capture holds %d TCP frames with data, want at least %d", r.tcpData, n/1460)
			}
			if len(r.malformed) > 0 {
				t.Errorf("%d malformed frames, first: %s", len(r.malformed), r.malformed[0])
			}
			if len(r.errors) > 0 {
				t.Errorf("%d expert errors, first: %s", len(r.errors), strings.Join(r.errors[:min(5, len(r.errors))], "; "))
			}
		})
	}
}

// TestPcapTsharkSeesCorruption is the check's own control: with corruption
// on the wire towards A, the capture at A's port holds frames with bad
// checksums, and the same tshark check must report them as errors.
func TestPcapTsharkSeesCorruption(t *testing.T) {
	tshark := testutil.NeedTshark(t)
	file := filepath.Join(t.TempDir(), "corrupt.pcap")
	a, b, stop := recordedPair(t, port.WireConfig{Seed: 9, BToA: port.Impairments{CorruptPercent: 20}}, file)
	// The corrupted frames are B's ACKs, as A receives (and records) them.
	transfer(t, a, b, 2<<20)
	stop()
	r := runTshark(t, tshark, file)
	if len(r.errors) == 0 {
		t.Fatalf("tshark reports no errors in a capture with corrupted frames (%d frames)", r.frames)
	}
	t.Logf("%d frames, %d expert errors, e.g. %s", r.frames, len(r.errors), r.errors[0])
}
