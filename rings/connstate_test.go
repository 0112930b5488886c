package rings

import (
	"bytes"
	"errors"
	"testing"
)

func sampleConnState() ConnState {
	return ConnState{
		Version: ConnStateVersion, Flags: ConnSACKPermitted | ConnTimestamps,
		State: StateEstablished, TTL: 64, TOS: 0x10,
		LocalIP: [4]byte{10, 0, 0, 1}, RemoteIP: [4]byte{10, 0, 0, 2},
		LocalPort: 40000, RemotePort: 80,
		LocalMAC: [6]byte{2, 0, 0, 0, 0, 1}, NextHopMAC: [6]byte{2, 0, 0, 0, 0, 2},
		SndUna: 0x11223344, SndNxt: 0x11223344, RcvNxt: 0xFFFFFFF0,
		SndWnd: 0xFFFF, SndWndScale: 7, RcvWndScale: 9, MSS: 1460, MaxTxBuffers: 64,
		TSRecent: 0xA1B2C3D4, TSVal: 0x01020304, RcvBufSize: 1 << 20, RcvAdvertised: 65535,
		AckThreshold: 4096, SeqThreshold: 0xDEADBEEF,
		KeepaliveIdleMs: 7200000, KeepaliveIntervalMs: 75000, KeepaliveCount: 9,
		SRTTus: 1234, RTTVarUs: 567, Cwnd: 14600, Ssthresh: 0xFFFFFFFF,
	}
}

func TestConnStateRoundTrip(t *testing.T) {
	s := sampleConnState()
	b := make(ConnStateBlock, ConnStateSize)
	for i := range b {
		b[i] = 0xEE // Encode must zero the reserved bytes
	}
	s.Encode(b)
	if !b.ReservedZero() {
		t.Fatalf("reserved bytes not zeroed: % x", b[CsOffReserved:])
	}
	var got ConnState
	if err := got.Decode(b); err != nil {
		t.Fatal(err)
	}
	if got != s {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, s)
	}
}

// TestConnStateOffsets pins the byte layout: a change here is an ABI change.
func TestConnStateOffsets(t *testing.T) {
	s := sampleConnState()
	b := make(ConnStateBlock, ConnStateSize)
	s.Encode(b)
	checks := []struct {
		off  int
		want []byte
	}{
		{0x00, []byte{1, 0}},
		{0x02, []byte{3, 0}},
		{0x04, []byte{1, 64, 0x10, 0}},
		{0x08, []byte{10, 0, 0, 1, 10, 0, 0, 2}},
		{0x10, []byte{0x40, 0x9C, 80, 0}},
		{0x14, []byte{2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2}},
		{0x20, []byte{0x44, 0x33, 0x22, 0x11}},
		{0x28, []byte{0xF0, 0xFF, 0xFF, 0xFF}},
		{0x2C, []byte{0xFF, 0xFF, 7, 9}},
		{0x30, []byte{0xB4, 0x05, 64, 0}},
		{0x34, []byte{0xD4, 0xC3, 0xB2, 0xA1}},
		{0x44, []byte{0, 0x10, 0, 0}},
		{0x48, []byte{0xEF, 0xBE, 0xAD, 0xDE}},
		{0x54, []byte{9, 0, 0, 0}},
		{0x64, []byte{0xFF, 0xFF, 0xFF, 0xFF}},
	}
	for _, c := range checks {
		if got := b[c.off : c.off+len(c.want)]; !bytes.Equal(got, c.want) {
			t.Errorf("offset %#x: got % x want % x", c.off, got, c.want)
		}
	}
}

func TestConnStateTruncated(t *testing.T) {
	s := sampleConnState()
	full := make(ConnStateBlock, ConnStateSize)
	s.Encode(full)
	for n := 0; n < ConnStateSize; n++ {
		var got ConnState
		err := got.Decode(full[:n])
		var se *ShortError
		if !errors.As(err, &se) || se.Got != n || se.Want != ConnStateSize {
			t.Fatalf("len %d: err %v", n, err)
		}
		if ConnStateBlock(full[:n]).ReservedZero() {
			t.Fatalf("len %d: ReservedZero on a short block", n)
		}
	}
	func() {
		defer func() {
			if recover() == nil {
				t.Fatal("Encode into a short block did not panic")
			}
		}()
		s.Encode(make(ConnStateBlock, ConnStateSize-1))
	}()
}

func TestConnStateReserved(t *testing.T) {
	s := sampleConnState()
	b := make(ConnStateBlock, ConnStateSize)
	s.Encode(b)
	for _, off := range []int{0x07, CsOffReserved, ConnStateSize - 1} {
		c := append(ConnStateBlock(nil), b...)
		c[off] = 1
		if c.ReservedZero() {
			t.Errorf("byte %#x set but ReservedZero", off)
		}
	}
	c := append(ConnStateBlock(nil), b...)
	c[CsOffFlags+1] = 0x80
	if c.ReservedZero() || c.Flags().KnownFlags() {
		t.Error("unknown flag accepted")
	}
}

func TestUserBufDesc(t *testing.T) {
	u := UserBuf{Addr: ArenaBase + 0x1234, Len: 65536, ID: 0xCAFE}
	d := make(UserBufDesc, UserBufDescSize)
	u.Encode(d)
	want := []byte{0x34, 0x12, 0, 0x10, 0, 0, 0, 0, 0, 0, 1, 0, 0xFE, 0xCA, 0, 0}
	if !bytes.Equal(d, want) {
		t.Fatalf("layout % x want % x", []byte(d), want)
	}
	var got UserBuf
	if err := got.Decode(d); err != nil || got != u {
		t.Fatalf("got %+v %v", got, err)
	}
	if err := got.Decode(d[:UserBufDescSize-1]); err == nil {
		t.Fatal("short descriptor accepted")
	}
}

func TestConnUpdateCommand(t *testing.T) {
	u := ConnUpdate{Flags: UpdRcvBufSize | UpdKeepalive | UpdTTLTOS | UpdNextHopMAC | UpdAckNow,
		Credit: 1500, RcvBufSize: 1 << 21, KeepaliveIdleMs: 1000, KeepaliveIntervalMs: 200,
		KeepaliveCount: 5, TTL: 32, TOS: 4, NextHopMAC: [6]byte{1, 2, 3, 4, 5, 6}}
	var c Command
	u.ToCommand(&c)
	e := make(CommandEntry, CommandEntrySize)
	c.Encode(e)
	var c2 Command
	if err := c2.Decode(e); err != nil {
		t.Fatal(err)
	}
	var got ConnUpdate
	got.FromCommand(&c2)
	if got != u || c2.Opcode != OpUpdate {
		t.Fatalf("got %+v want %+v", got, u)
	}
	if !u.Flags.KnownFlags() || UpdateFlags(1<<15).KnownFlags() {
		t.Fatal("KnownFlags")
	}
}

// FuzzConnStateDecode: any bytes decode without panicking, and a decoded
// block re-encodes to the same bytes (except reserved bytes, which Encode
// zeroes).
func FuzzConnStateDecode(f *testing.F) {
	s := sampleConnState()
	b := make(ConnStateBlock, ConnStateSize)
	s.Encode(b)
	f.Add([]byte(b))
	f.Add([]byte(b[:ConnStateSize-1]))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, in []byte) {
		var st ConnState
		if err := st.Decode(in); err != nil {
			if len(in) >= ConnStateSize {
				t.Fatalf("decode of %d bytes failed: %v", len(in), err)
			}
			return
		}
		for n := 0; n < ConnStateSize; n++ { // every truncated prefix is rejected
			var p ConnState
			if p.Decode(in[:n]) == nil {
				t.Fatalf("Decode accepted a %d-byte prefix", n)
			}
		}
		out := make(ConnStateBlock, ConnStateSize)
		st.Encode(out)
		want := append([]byte(nil), in[:ConnStateSize]...)
		want[0x07] = 0
		clear(want[CsOffReserved:])
		if !bytes.Equal(out, want) {
			t.Fatalf("re-encode differs:\n got % x\nwant % x", []byte(out), want)
		}
	})
}

func TestTCPStateString(t *testing.T) {
	if StateTimeWait.String() != "TIME_WAIT" || TCPState(99).String() != "STATE_0063" {
		t.Fatal(StateTimeWait.String(), TCPState(99).String())
	}
}
