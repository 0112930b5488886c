// Package testutil holds the helpers that tests in several packages share:
// running Debian's tshark on a capture and reading what its iWARP
// dissectors made of it, waiting for RDMA completions and for conditions
// (wait.go), the median of benchmark rounds (median.go), TAP devices and
// network namespaces (tap_linux.go), and Ethernet/IPv4/TCP frames built on
// nic/hdr's encoders (frames.go). It is imported by tests only, and
// imports nothing of the project but nic/hdr, the leaf both the host and
// the device share: so any package's internal tests can use it without an
// import cycle, and a device package's tests reach no host package
// through it (nor the other way).
package testutil

import (
	"bytes"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// NeedTshark returns tshark's path, or skips the test saying why.
func NeedTshark(t testing.TB) string {
	t.Helper()
	p, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("skipped: tshark is not installed (Debian: apt-get install tshark); .ci/run installs it")
	}
	return p
}

// IWARPOptions are the tshark options every iWARP capture is decoded with:
// MPA found heuristically on any port and tried first (iWARP has no port
// of its own, and the tests use any), the RDMA upper layers that would
// claim the Sends' payload off (rpcordma, smb_direct), and IP and TCP
// checksums verified. The heuristic finds MPA by its request and reply, so
// a capture must include them.
var IWARPOptions = []string{"--enable-heuristic", "iwarp_mpa_tcp", "-o", "tcp.try_heuristic_first:TRUE",
	"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
	"-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"}

// Tshark runs tshark -r file -n with opts and then args, and returns its
// standard output; a failure fails the test with tshark's standard error.
func Tshark(t testing.TB, tshark, file string, opts []string, args ...string) string {
	t.Helper()
	all := append(append([]string{"-r", file, "-n"}, opts...), args...)
	cmd := exec.Command(tshark, all...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", all, err, stderr.String())
	}
	return string(out)
}

// Fields runs tshark with opts and -T fields for the given fields and
// returns one row per frame: the fields' values in order, padded to
// len(fields). A field with several occurrences in a frame has them joined
// by "|".
func Fields(t testing.TB, tshark, file string, opts []string, fields ...string) [][]string {
	t.Helper()
	args := []string{"-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	var rows [][]string
	for _, line := range strings.Split(Tshark(t, tshark, file, opts, args...), "\n") {
		if line == "" {
			continue
		}
		f := strings.Split(line, "\t")
		for len(f) < len(fields) {
			f = append(f, "")
		}
		rows = append(rows, f)
	}
	return rows
}

// IWARPDecode is what tshark's iWARP dissectors made of a capture.
type IWARPDecode struct {
	Frames      int
	FPDUs       int         // FPDUs with a CRC check (MPA markers and CRC in use)
	MPARequests int         // frames with an MPA request
	MPAReplies  int         // frames with an MPA reply
	Opcodes     map[int]int // RDMAP opcode → FPDUs decoded with it
	Malformed   []string    // tshark's field line of every malformed frame
	Expert      []string    // "frame N: message" of every expert warning or error
	// MPARev2Warnings counts the two warnings tshark (4.0) gives every MPA
	// revision-2 frame, which its dissector does not know (RFC 6581):
	// "Res field is NOT set to zero" (the S flag) and "Rev field is NOT
	// set to one". They are not in Expert.
	MPARev2Warnings int
	GoodCRCs        int
	BadCRCs         int
	// ExpertTable is tshark -z expert,warn's report when it lists
	// warnings or errors, else empty.
	ExpertTable string
}

// DecodeIWARP has tshark decode file with IWARPOptions three ways (the
// fields below, the full tree for the CRC verdicts, and the expert table)
// and returns what it found. Expert chats and notes (a TCP handshake's, a
// retransmission's) are not warnings and are left out.
func DecodeIWARP(t testing.TB, tshark, file string) IWARPDecode {
	t.Helper()
	d := IWARPDecode{Opcodes: map[int]int{}}
	for _, f := range Fields(t, tshark, file, IWARPOptions, "frame.number", "frame.protocols", "iwarp_rdma.opcode",
		"iwarp_mpa.crc_check", "_ws.expert.severity", "_ws.expert.message", "iwarp_mpa.req", "iwarp_mpa.rep") {
		d.Frames++
		if strings.Contains(":"+f[1]+":", ":_ws.malformed:") {
			d.Malformed = append(d.Malformed, strings.Join(f, "\t"))
		}
		for _, op := range strings.Split(f[2], "|") {
			if v, err := strconv.ParseUint(op, 0, 8); err == nil {
				d.Opcodes[int(v)]++
			}
		}
		if f[3] != "" {
			d.FPDUs += len(strings.Split(f[3], "|"))
		}
		if f[6] != "" {
			d.MPARequests++
		}
		if f[7] != "" {
			d.MPAReplies++
		}
		sev, msg := strings.Split(f[4], "|"), strings.Split(f[5], "|")
		for i, s := range sev {
			// Warnings are 0x006..., errors 0x008...; chats and notes less.
			if v, err := strconv.ParseUint(s, 0, 32); err == nil && v >= 0x00600000 {
				m := ""
				if i < len(msg) {
					m = msg[i]
				}
				if mpaRev2Warning(m) {
					d.MPARev2Warnings++
					continue
				}
				d.Expert = append(d.Expert, fmt.Sprintf("frame %s: %s", f[0], m))
			}
		}
	}
	// Bad CRCs show in the CRC check's text, not in a field value.
	v := Tshark(t, tshark, file, IWARPOptions, "-V")
	d.GoodCRCs, d.BadCRCs = strings.Count(v, "Good CRC32"), strings.Count(v, "Bad CRC32")
	if z := Tshark(t, tshark, file, IWARPOptions, "-q", "-z", "expert,warn"); (strings.Contains(z, "Warns") || strings.Contains(z, "Errors")) &&
		(len(d.Expert) > 0 || strings.Contains(z, "Errors")) {
		d.ExpertTable = z
	}
	return d
}

// mpaRev2Warning reports whether an expert message is one tshark gives
// every valid MPA revision-2 request or reply.
func mpaRev2Warning(m string) bool {
	return strings.HasPrefix(m, "Res field is NOT set to zero as required by RFC 5044") ||
		strings.HasPrefix(m, "Rev field is NOT set to one as required by RFC 5044")
}

// Poller is a completion queue: verbs.CQ (tcpstack/verbs), whose C is
// rings.Completion. It is generic so that this package imports nothing of
// the project's: the rings package's own tests can use it.
type Poller[C any] interface {
	Poll(wc []C) int
}

// WaitCompletions busy-polls cq until n completions arrived and returns
// them; after 10 s it fails the test with what did arrive.
func WaitCompletions[C any](t testing.TB, cq Poller[C], n int) []C {
	t.Helper()
	out := make([]C, 0, n)
	wc := make([]C, 64)
	deadline := time.Now().Add(10 * time.Second)
	for len(out) < n {
		k := cq.Poll(wc[:min(len(wc), n-len(out))])
		out = append(out, wc[:k]...)
		if k == 0 {
			if time.Now().After(deadline) {
				t.Fatalf("%d of %d completions after 10 s: %v", len(out), n, out)
			}
			time.Sleep(50 * time.Microsecond)
		}
	}
	return out
}

// SyncBuffer is a bytes.Buffer safe for one writer and concurrent readers:
// a command's or a process's output that a test polls while it runs.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
