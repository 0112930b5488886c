package rings

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestCHeaderFresh fails when c/emunic_abi.h is not what go generate would
// write from the constants and the docs today.
func TestCHeaderFresh(t *testing.T) {
	pkg, err := abidoc.Load(".")
	if err != nil {
		t.Fatal(err)
	}
	want, err := abidoc.CHeader(pkg, abidoc.RingsHeader)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(abidoc.RingsHeaderPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run go generate ./rings", abidoc.RingsHeaderPath)
	}
}

// needGCC returns gcc's path, or skips saying why.
func needGCC(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("gcc")
	if err != nil {
		t.Skip("skipped: gcc is not installed (Debian: apt-get install gcc); .ci/run installs it")
	}
	return p
}

// runC builds c/name.c against the header with warnings as errors, runs
// it and returns its output (skipping without gcc).
func runC(t *testing.T, name string) []byte {
	t.Helper()
	gcc := needGCC(t)
	bin := filepath.Join(t.TempDir(), name)
	cmd := exec.Command(gcc, "-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-Ic", "-o", bin, "c/"+name+".c")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("gcc: %v\n%s", err, out)
	}
	out, err := exec.Command(bin).Output()
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return out
}

// TestCHeaderAgreesWithGo compiles c/abi_check.c against the header (its
// static assertions check every field's offset and every struct's size
// against the generated constants), runs it, and decodes the blocks it
// wrote with the Go decoders: every field the C code set through the
// header's structs must come back in the Go fields.
func TestCHeaderAgreesWithGo(t *testing.T) {
	out := runC(t, "abi_check")
	if len(out) != CommandEntrySize+NotificationEntrySize+SQEntrySize+ConnInfoSize {
		t.Fatalf("abi_check wrote %d bytes", len(out))
	}
	var c Command
	if err := c.Decode(CommandEntry(out[:CommandEntrySize])); err != nil {
		t.Fatal(err)
	}
	want := Command{Opcode: OpOffload, Flags: 0x0102, Conn: 0x03040506, Status: StatusBadState, Result: 0x1112131415161718,
		Tag: 0x2122232425262728, Addr: ArenaBase + 0x40, Len: ConnStateSize, Arg0: 0x31323334, Arg1: 0x41424344,
		Arg2: 0x51525354, Arg3: 0x6162636465666768}
	if c != want {
		t.Errorf("command entry from C: %+v\nwant %+v", c, want)
	}
	out = out[CommandEntrySize:]
	var n Notification
	if err := n.Decode(NotificationEntry(out[:NotificationEntrySize])); err != nil {
		t.Fatal(err)
	}
	if wn := (Notification{Flags: NtfAckThreshold | NtfDupAck, Conn: 7, Seq: 0x01020304, Ack: 0x05060708, AckCount: 9,
		Len: 1460, Aux: 11}); n != wn {
		t.Errorf("notification from C: %+v\nwant %+v", n, wn)
	}
	out = out[NotificationEntrySize:]
	var s SendWR
	if err := s.Decode(SQEntry(out[:SQEntrySize])); err != nil {
		t.Fatal(err)
	}
	ws := SendWR{Opcode: WRRDMAWrite, Flags: WRSignaled, NumSGE: 1, WRID: 0xA1A2A3A4A5A6A7A8, RemoteAddr: 0x1000, RKey: 0x00123456}
	ws.SGL[0] = SGE{Addr: uint64(ArenaBase) + 0x2000, Length: 4096, LKey: 0x00654321}
	if s != ws {
		t.Errorf("send queue entry from C: %+v\nwant %+v", s, ws)
	}
	out = out[SQEntrySize:]
	var ci ConnInfo
	if err := ci.Decode(out); err != nil {
		t.Fatal(err)
	}
	wci := ConnInfo{Version: ConnInfoVersion, State: StateEstablished, SndScale: 7, RcvScale: 9,
		SndUna: 0x01020304, SndNxt: 0x01020404, RcvNxt: 0x05060708, SndWnd: 65535, RcvWnd: 131072, MSS: 1448,
		Cwnd: 28960, Ssthresh: 14480, SRTT: 250, RTTVar: 60, MinRTT: 180, RTO: 200000, OOOBytes: 2896,
		Retrans: 0x1112131415161718, FastRecoveries: 2, RTOs: 3, TLPs: 4, SegsIn: 0x2122232425262728,
		SegsOut: 0x3132333435363738, BytesAcked: 0x4142434445464748, BytesReceived: 0x5152535455565758}
	if ci != wci {
		t.Errorf("connection info block from C: %+v\nwant %+v", ci, wci)
	}
}
