package tests

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// rdmaTsharkOpts are DESIGN.md's options for the iWARP dissectors: MPA
// found heuristically on any port and tried first, and the RDMA upper
// layers that would claim the Sends' payload off.
var rdmaTsharkOpts = []string{"--enable-heuristic", "iwarp_mpa_tcp", "-o", "tcp.try_heuristic_first:TRUE",
	"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct"}

func rdmaTshark(t *testing.T, tshark, file string, args ...string) string {
	t.Helper()
	cmd := exec.Command(tshark, append(append([]string{"-r", file, "-n"}, rdmaTsharkOpts...), args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.String())
	}
	return string(out)
}

// TestRDMAPcapTshark records, at host A's port, an RDMA session between two
// emulated hosts that uses every RDMAP message the engines send (RDMA
// Write, Read Request and Response, Send, Send with Invalidate, Send with
// SE, Send with SE and Invalidate, Immediate Data, Immediate Data with SE),
// and has Debian's tshark decode it with the iWARP dissectors: the MPA
// request and reply, every opcode, every FPDU's CRC good, nothing
// malformed, no expert warnings or errors.
func TestRDMAPcapTshark(t *testing.T) {
	tshark := needTshark(t)
	file := filepath.Join(t.TempDir(), "rdma.pcap")
	ha, hb, stop := recordedPair(t, port.WireConfig{}, file)
	a, b := newRDMANode(t, ha, 0), newRDMANode(t, hb, 0)
	rdmaConnect(t, a, b, 4930)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const size = 64 << 10
	dst := rdmaMust[*tcpstack.Buffer](t)(hb.AllocBuffer(size))
	mr := rdmaMust[*tcpstack.MR](t)(hb.RegMR(b.pd, dst, tcpstack.AccessLocalWrite|tcpstack.AccessRemoteWrite|tcpstack.AccessRemoteRead))
	inv1 := rdmaMust[*tcpstack.MR](t)(hb.RegMR(b.pd, dst, tcpstack.AccessLocalWrite|tcpstack.AccessRemoteWrite))
	inv2 := rdmaMust[*tcpstack.MR](t)(hb.RegMR(b.pd, dst, tcpstack.AccessLocalWrite|tcpstack.AccessRemoteWrite))
	src := a.local.Bytes()
	rdmaFill(src[:size], 0x21)

	send := func(id uint64, op rings.WROpcode, flags rings.WRFlags, n int) rings.SendWR {
		w := rings.SendWR{Opcode: op, Flags: rings.WRSignaled | flags, WRID: id, NumSGE: 1}
		w.SGL[0] = a.lmr.SGE(0, n)
		return w
	}
	write := func(id uint64, op rings.WROpcode, flags rings.WRFlags, off, n int) rings.SendWR {
		w := rings.SendWR{Opcode: op, Flags: rings.WRSignaled | flags, WRID: id, RemoteAddr: mr.TO(off), RKey: mr.RKey,
			ImmData: 0xABCDEF0123456789, NumSGE: 1}
		w.SGL[0] = a.lmr.SGE(off, n)
		return w
	}
	s1 := send(1, rings.WRSend, 0, 2000) // two FPDUs
	s2 := send(2, rings.WRSend, rings.WRSolicited, 100)
	s3 := send(3, rings.WRSendInv, 0, 200)
	s3.InvSTag = inv1.RKey
	s4 := send(4, rings.WRSendInv, rings.WRSolicited, 10)
	s4.InvSTag = inv2.RKey
	w5 := write(5, rings.WRRDMAWrite, 0, 0, 32<<10)
	w6 := write(6, rings.WRRDMAWriteImm, 0, 32<<10, 16<<10)
	w7 := write(7, rings.WRRDMAWriteImm, rings.WRSolicited, 48<<10, 16<<10)
	rd := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: 8, RemoteAddr: mr.TO(0), RKey: mr.RKey, NumSGE: 1}
	rd.SGL[0] = a.lmr.SGE(1<<20, size)
	wrs := []rings.SendWR{s1, s2, s3, s4, w5, w6, w7, rd}
	if n, err := a.qp.PostSendList(wrs); n != len(wrs) || err != nil {
		t.Fatal(n, err)
	}
	for _, c := range rdmaWaitWC(t, a.cq, len(wrs)) {
		if c.Status != rings.WCSuccess {
			t.Fatalf("A completion %+v", c)
		}
	}
	bc := rdmaWaitWC(t, b.cq, 6) // 4 Sends, 2 Immediate Data
	for _, c := range bc {
		if c.Status != rings.WCSuccess {
			t.Fatalf("B completion %+v", c)
		}
	}
	if !bytes.Equal(dst.Bytes(), src[:size]) || !bytes.Equal(src[1<<20:1<<20+size], src[:size]) {
		t.Fatal("Write/Read data differs")
	}
	// One message the other way, so both directions carry FPDUs.
	bs := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 9, NumSGE: 1}
	bs.SGL[0] = b.lmr.SGE(0, 500)
	if err := b.qp.PostSend(&bs); err != nil {
		t.Fatal(err)
	}
	rdmaWaitWC(t, b.cq, 1)
	rdmaWaitWC(t, a.cq, 1)
	stA := rdmaQPStats(a, func(s iwarp.QPStats) bool { return s.RxMessages >= 2 })
	stB := rdmaQPStats(b, func(s iwarp.QPStats) bool { return s.RxMessages >= 8 })
	sent := int(stA.TxFPDUs + stB.TxFPDUs)
	if err := a.qp.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	stop()

	out := rdmaTshark(t, tshark, file, "-T", "fields", "-E", "separator=/t", "-E", "occurrence=a", "-E", "aggregator=|",
		"-e", "frame.number", "-e", "frame.protocols", "-e", "iwarp_rdma.opcode", "-e", "iwarp_mpa.crc_check",
		"-e", "_ws.expert.severity", "-e", "_ws.expert.message", "-e", "iwarp_mpa.req", "-e", "iwarp_mpa.rep")
	opcodes := map[int]int{}
	var malformed, bad []string
	fpdus, req, rep, frames := 0, 0, 0, 0
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		f := strings.Split(line, "\t")
		for len(f) < 8 {
			f = append(f, "")
		}
		frames++
		if strings.Contains(":"+f[1]+":", ":_ws.malformed:") {
			malformed = append(malformed, line)
		}
		for _, op := range strings.Split(f[2], "|") {
			if v, err := strconv.ParseUint(op, 0, 8); err == nil {
				opcodes[int(v)]++
			}
		}
		if f[3] != "" {
			fpdus += len(strings.Split(f[3], "|"))
		}
		if f[6] != "" {
			req++
		}
		if f[7] != "" {
			rep++
		}
		sev, msg := strings.Split(f[4], "|"), strings.Split(f[5], "|")
		for i, s := range sev {
			// Warnings (0x006...) and errors (0x008...); chats and notes
			// (the TCP handshake's) are fine.
			if v, err := strconv.ParseUint(s, 0, 32); err == nil && v >= 0x00600000 {
				m := ""
				if i < len(msg) {
					m = msg[i]
				}
				bad = append(bad, fmt.Sprintf("frame %s: %s", f[0], m))
			}
		}
	}
	if len(malformed) > 0 {
		t.Errorf("%d malformed frames, first: %s", len(malformed), malformed[0])
	}
	if len(bad) > 0 {
		t.Errorf("%d expert warnings/errors: %s", len(bad), strings.Join(bad[:min(5, len(bad))], "; "))
	}
	if req != 1 || rep != 1 {
		t.Errorf("MPA request/reply frames decoded: %d/%d", req, rep)
	}
	if fpdus < sent {
		t.Errorf("tshark decoded %d FPDUs, the QPs sent %d", fpdus, sent)
	}
	names := map[int]string{0: "RDMA Write", 1: "Read Request", 2: "Read Response", 3: "Send", 4: "Send with Invalidate",
		5: "Send with SE", 6: "Send with SE and Invalidate", 8: "Immediate Data", 9: "Immediate Data with SE"}
	var missing []string
	for op, name := range names {
		if opcodes[op] == 0 {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("opcodes tshark did not decode: %v (decoded %v)", missing, opcodes)
	}
	// Bad CRCs show in the CRC check's text, not in a field value.
	v := rdmaTshark(t, tshark, file, "-V")
	good, badCRC := strings.Count(v, "Good CRC32"), strings.Count(v, "Bad CRC32")
	if good != fpdus || badCRC != 0 {
		t.Errorf("tshark: %d good and %d bad CRCs in %d FPDUs", good, badCRC, fpdus)
	}
	z := rdmaTshark(t, tshark, file, "-q", "-z", "expert,warn")
	if strings.Contains(z, "Warns") || strings.Contains(z, "Errors") {
		t.Errorf("tshark -z expert,warn:\n%s", z)
	}
	t.Logf("%d frames, %d FPDUs (%d sent by the QPs), %d good CRCs; opcodes decoded %v", frames, fpdus, sent, good, opcodes)
}
