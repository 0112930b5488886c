package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

func TestSnapshot(t *testing.T) {
	o := defaultRigOpts()
	o.pair.keepaliveMs = 4000
	r := newRig(t, o)
	r.h.start()
	r.data(pattern(1000, 1), hdr.TCPFlagPSH)
	r.h.sendTotal = 500
	r.h.pump()
	r.in(pseg{seq: r.peerSeq, ack: 1500, flags: hdr.TCPFlagACK, wnd: 300})
	var st rings.ConnState
	if s := r.e.Snapshot(0, &st); s != rings.StatusOK {
		t.Fatal(s)
	}
	i := r.info()
	if st.SndUna != 1500 || st.SndNxt != 1500 || st.RcvNxt != 6000 || st.SndWnd != 300 ||
		st.SndWndScale != 2 || st.RcvWndScale != 2 || st.MSS != 1460 || st.State != rings.StateEstablished ||
		st.TSVal <= i.TSVal || st.TSRecent != r.peerTS || st.LocalIP != ipA || st.NextHopMAC != macB ||
		st.KeepaliveIdleMs != 4000 || st.KeepaliveCount != 3 || st.RcvAdvertised != i.RcvWnd {
		t.Fatalf("snapshot %+v\ninfo %+v", st, i)
	}
	// The snapshot is a valid state block: another engine takes it.
	b := make(rings.ConnStateBlock, rings.ConnStateSize)
	st.Encode(b)
	var back rings.ConnState
	if err := back.Decode(b); err != nil || back != st {
		t.Fatal("encode/decode")
	}
	now := int64(5e9)
	e2 := NewEngine(Config{}, newTestEnv(t, 1<<20, &now))
	if s := e2.Offload(3, &back); s != rings.StatusOK {
		t.Fatalf("re-offload of a snapshot: %v", s)
	}
	if s := r.e.Snapshot(7, &st); s != rings.StatusBadConn {
		t.Fatal(s)
	}
}

// Without timestamps a pure ACK is 54 bytes: padded to the Ethernet minimum.
func TestShortFramePadded(t *testing.T) {
	o := defaultRigOpts()
	o.pair.ts = false
	r := newRig(t, o)
	r.e.Update(0, &rings.ConnUpdate{Flags: rings.UpdAckNow})
	f := r.takeOne("ACK")
	if len(f.raw) != hdr.EthernetMinFrame || be.Uint16(f.raw[hdr.EthernetSize+2:]) != 40 {
		t.Fatalf("frame %d bytes, IP length %d", len(f.raw), be.Uint16(f.raw[hdr.EthernetSize+2:]))
	}
	for _, v := range f.raw[hdr.EthernetSize+40:] {
		if v != 0 {
			t.Fatal("padding not zero")
		}
	}
}

// Sequence numbers and timestamps that wrap during the connection.
func TestWrapAround(t *testing.T) {
	o := bulkOpts(4<<20, false, 21)
	o.pair.issA, o.pair.issB = 0xFFFFFFFF-1000, 0x7FFFFFFF-3000
	o.pair.tsA, o.pair.tsB = 0xFFFFFFFF-2, 0x7FFFFFFF
	o = impaired(o)
	runBulk(t, o)
}

// TSval continues from the offloaded value at 1 ms per tick and never goes
// backwards, even if the device clock does.
func TestTSvalContinues(t *testing.T) {
	o := defaultRigOpts()
	o.pair.tsA = 0xFFFFFFF0 // wraps soon
	r := newRig(t, o)
	ack := func() uint32 {
		r.e.Update(0, &rings.ConnUpdate{Flags: rings.UpdAckNow})
		return r.takeOne("ACK").tsVal
	}
	if v := ack(); v != 0xFFFFFFF0 {
		t.Fatalf("first TSval %#x", v)
	}
	r.now += 5e9
	if v := ack(); v != uint32(0xFFFFFFF0+5000-1<<32) {
		t.Fatalf("after 5 s: %#x", v)
	}
	r.now -= 3e9 // a clock that jumps back
	if v := ack(); v != uint32(0xFFFFFFF0+5000-1<<32) {
		t.Fatalf("TSval went backwards: %#x", v)
	}
}

func TestUpdateReceiveBufferAndKeepalive(t *testing.T) {
	o := defaultRigOpts()
	o.pair.initialWnd = 256 // 1 KiB advertised
	o.pair.rcvBufA = 4096
	r := newRig(t, o)
	// A bigger receive buffer opens the window at once.
	if st := r.e.Update(0, &rings.ConnUpdate{Flags: rings.UpdRcvBufSize, RcvBufSize: 256 << 10}); st != rings.StatusOK {
		t.Fatal(st)
	}
	w := r.takeOne("window update")
	if uint32(w.wnd)<<2 != 0xFFFF<<2 { // 256 KiB, capped by the 16-bit field at scale 2
		t.Fatalf("window %d", uint32(w.wnd)<<2)
	}
	// Keepalive switched on by UPDATE.
	if st := r.e.Update(0, &rings.ConnUpdate{Flags: rings.UpdKeepalive, KeepaliveIdleMs: 100,
		KeepaliveIntervalMs: 50, KeepaliveCount: 2}); st != rings.StatusOK {
		t.Fatal(st)
	}
	r.advance(100e6)
	p := r.takeOne("keepalive")
	if len(p.payload) != 1 || uint32(p.seq) != 999 {
		t.Fatal("not a keepalive probe")
	}
	// And off again.
	r.e.Update(0, &rings.ConnUpdate{Flags: rings.UpdKeepalive})
	r.advance(10e9)
	r.expectNone("keepalive off")
}

// A connection offloaded after the peer's FIN (CLOSE_WAIT): it can only
// send, then close.
func TestOffloadCloseWait(t *testing.T) {
	o := defaultRigOpts()
	o.mutate = func(s *rings.ConnState) { s.State = rings.StateCloseWait }
	r := newRig(t, o)
	if n, st := r.e.PostBuffers(0, r.h.descAddr, 1); n != 0 || st != rings.StatusOK {
		t.Fatalf("PostBuffers after FIN: %d %v, want 0 accepted, OK", n, st)
	}
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 1000})
	r.h.sendTotal, r.h.closeAfter = 3000, true
	r.h.pump()
	out := r.take()
	if len(out) != 3 || !out[2].has(hdr.TCPFlagFIN) || r.info().State != rings.StateLastAck {
		t.Fatalf("%d frames, state %v", len(out), r.info().State)
	}
	// Data from the peer after its FIN is not taken.
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 1000, payload: []byte("late")})
	if r.e.Counters().RxBytes != 0 {
		t.Fatal("data after FIN accepted")
	}
	r.take()
	r.in(pseg{seq: 5000, ack: 4001, flags: hdr.TCPFlagACK, wnd: 1000})
	if !r.h.closed {
		t.Fatal("LAST_ACK did not close")
	}
}
