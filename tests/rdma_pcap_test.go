package tests

import (
	"bytes"
	"context"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// TestRDMAPcapTshark records, at host A's port, an RDMA session between two
// emulated hosts that uses every RDMAP message the engines send (RDMA
// Write, Read Request and Response, Send, Send with Invalidate, Send with
// SE, Send with SE and Invalidate, Immediate Data, Immediate Data with SE),
// and has Debian's tshark decode it with the iWARP dissectors: the MPA
// request and reply, every opcode, every FPDU's CRC good, nothing
// malformed, no expert warnings or errors.
func TestRDMAPcapTshark(t *testing.T) {
	tshark := testutil.NeedTshark(t)
	file := filepath.Join(t.TempDir(), "rdma.pcap")
	ha, hb, stop := recordedPair(t, port.WireConfig{}, file)
	a, b := newRDMANode(t, ha, 0), newRDMANode(t, hb, 0)
	hostrig.Connect(t, a, b, 4930)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	const size = 64 << 10
	dst := hostrig.Must[*verbs.Buffer](t)(b.V.AllocBuffer(size))
	mr := hostrig.Must[*verbs.MR](t)(b.V.RegMR(b.PD, dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
	inv1 := hostrig.Must[*verbs.MR](t)(b.V.RegMR(b.PD, dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	inv2 := hostrig.Must[*verbs.MR](t)(b.V.RegMR(b.PD, dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite))
	src := a.Local.Bytes()
	rdmaFill(src[:size], 0x21)

	send := func(id uint64, op rings.WROpcode, flags rings.WRFlags, n int) rings.SendWR {
		w := rings.SendWR{Opcode: op, Flags: rings.WRSignaled | flags, WRID: id, NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(0, n)
		return w
	}
	write := func(id uint64, op rings.WROpcode, flags rings.WRFlags, off, n int) rings.SendWR {
		w := rings.SendWR{Opcode: op, Flags: rings.WRSignaled | flags, WRID: id, RemoteAddr: mr.TO(off), RKey: mr.RKey,
			ImmData: 0xABCDEF0123456789, NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(off, n)
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
	rd.SGL[0] = a.LocalMR.SGE(1<<20, size)
	wrs := []rings.SendWR{s1, s2, s3, s4, w5, w6, w7, rd}
	if n, err := a.QP.PostSendList(wrs); n != len(wrs) || err != nil {
		t.Fatal(n, err)
	}
	for _, c := range testutil.WaitCompletions(t, a.CQ, len(wrs)) {
		if c.Status != rings.WCSuccess {
			t.Fatalf("A completion %+v", c)
		}
	}
	bc := testutil.WaitCompletions(t, b.CQ, 6) // 4 Sends, 2 Immediate Data
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
	bs.SGL[0] = b.LocalMR.SGE(0, 500)
	if err := b.QP.PostSend(&bs); err != nil {
		t.Fatal(err)
	}
	testutil.WaitCompletions(t, b.CQ, 1)
	testutil.WaitCompletions(t, a.CQ, 1)
	stA := rdmaQPStats(a, func(s tcpstack.QPCounters) bool { return s.RxMessages >= 2 })
	stB := rdmaQPStats(b, func(s tcpstack.QPCounters) bool { return s.RxMessages >= 8 })
	sent := int(stA.TxFPDUs + stB.TxFPDUs)
	if err := a.QP.Disconnect(ctx); err != nil {
		t.Fatal(err)
	}
	stop()

	d := testutil.DecodeIWARP(t, tshark, file)
	if len(d.Malformed) > 0 {
		t.Errorf("%d malformed frames, first: %s", len(d.Malformed), d.Malformed[0])
	}
	if len(d.Expert) > 0 {
		t.Errorf("%d expert warnings/errors: %s", len(d.Expert), strings.Join(d.Expert[:min(5, len(d.Expert))], "; "))
	}
	if d.MPARequests != 1 || d.MPAReplies != 1 {
		t.Errorf("MPA request/reply frames decoded: %d/%d", d.MPARequests, d.MPAReplies)
	}
	if d.FPDUs < sent {
		t.Errorf("tshark decoded %d FPDUs, the QPs sent %d", d.FPDUs, sent)
	}
	names := map[int]string{0: "RDMA Write", 1: "Read Request", 2: "Read Response", 3: "Send", 4: "Send with Invalidate",
		5: "Send with SE", 6: "Send with SE and Invalidate", 8: "Immediate Data", 9: "Immediate Data with SE"}
	var missing []string
	for op, name := range names {
		if d.Opcodes[op] == 0 {
			missing = append(missing, name)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("opcodes tshark did not decode: %v (decoded %v)", missing, d.Opcodes)
	}
	if d.GoodCRCs != d.FPDUs || d.BadCRCs != 0 {
		t.Errorf("tshark: %d good and %d bad CRCs in %d FPDUs", d.GoodCRCs, d.BadCRCs, d.FPDUs)
	}
	if d.ExpertTable != "" {
		t.Errorf("tshark -z expert,warn:\n%s", d.ExpertTable)
	}
	t.Logf("%d frames, %d FPDUs (%d sent by the QPs), %d good CRCs; opcodes decoded %v", d.Frames, d.FPDUs, sent, d.GoodCRCs, d.Opcodes)
}
