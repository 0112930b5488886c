package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

func TestOffloadValidation(t *testing.T) {
	now := int64(1e9)
	env := newTestEnv(t, 1<<20, &now)
	e := NewEngine(Config{MaxConns: 4}, env)
	good, _ := pairStates(pairOpts{issA: 1, issB: 2, ts: true, sack: true, wsA: 7, wsB: 7})
	bad := []struct {
		name string
		mut  func(*rings.ConnState)
		want rings.Status
	}{
		{"version", func(s *rings.ConnState) { s.Version = 2 }, rings.StatusBadParam},
		{"flags", func(s *rings.ConnState) { s.Flags |= 1 << 12 }, rings.StatusBadParam},
		{"state", func(s *rings.ConnState) { s.State = rings.StateFinWait1 }, rings.StatusBadParam},
		{"closed", func(s *rings.ConnState) { s.State = rings.StateClosed }, rings.StatusBadParam},
		{"snd scale", func(s *rings.ConnState) { s.SndWndScale = 15 }, rings.StatusBadParam},
		{"rcv scale", func(s *rings.ConnState) { s.RcvWndScale = 200 }, rings.StatusBadParam},
		{"mss 0", func(s *rings.ConnState) { s.MSS = 0 }, rings.StatusBadParam},
		{"mss big", func(s *rings.ConnState) { s.MSS = 65496 }, rings.StatusBadParam},
		{"unacked", func(s *rings.ConnState) { s.SndNxt = s.SndUna + 10 }, rings.StatusBadParam},
		{"no ip", func(s *rings.ConnState) { s.RemoteIP = [4]byte{} }, rings.StatusBadParam},
		{"no port", func(s *rings.ConnState) { s.LocalPort = 0 }, rings.StatusBadParam},
		{"rcvbuf", func(s *rings.ConnState) { s.RcvBufSize = 1<<30 + 1 }, rings.StatusBadParam},
		{"keepalive", func(s *rings.ConnState) { s.KeepaliveIdleMs = 10; s.KeepaliveCount = 0 }, rings.StatusBadParam},
	}
	for _, c := range bad {
		st := good
		c.mut(&st)
		if got := e.Offload(0, &st); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
	if got := e.Offload(4, &good); got != rings.StatusBadConn {
		t.Errorf("index out of range: %v", got)
	}
	if got := e.Offload(rings.NoConn, &good); got != rings.StatusBadConn {
		t.Errorf("NoConn: %v", got)
	}
	if got := e.Offload(1, &good); got != rings.StatusOK {
		t.Fatalf("good: %v", got)
	}
	if got := e.Offload(1, &good); got != rings.StatusBadState {
		t.Errorf("index in use: %v", got)
	}
	if got := e.Offload(2, &good); got != rings.StatusBadState {
		t.Errorf("duplicate 4-tuple: %v", got)
	}
	if idx, ok := e.Lookup(rxTuple(ipB, ipA, portB, portA)); !ok || idx != 1 {
		t.Fatalf("lookup: %d %v", idx, ok)
	}
	// The edges that must pass.
	edge := good
	edge.LocalPort++
	edge.MSS, edge.SndWndScale, edge.RcvWndScale = maxMSS, 14, 14
	if got := e.Offload(2, &edge); got != rings.StatusOK {
		t.Fatalf("MSS 65495 / scale 14: %v", got)
	}

	// OffloadAt: from host memory.
	a, _ := env.arena.Alloc(rings.ConnStateSize, 64)
	blk, _ := env.arena.Map(a, rings.ConnStateSize)
	st := good
	st.LocalPort += 2
	st.Encode(blk)
	if got := e.OffloadAt(3, a, rings.ConnStateSize-1); got != rings.StatusBadParam {
		t.Errorf("short: %v", got)
	}
	if got := e.OffloadAt(3, 0x10, rings.ConnStateSize); got != rings.StatusBadAddress {
		t.Errorf("bad address: %v", got)
	}
	if got := e.OffloadAt(3, rings.Addr(uint64(1)<<63), rings.ConnStateSize); got != rings.StatusBadAddress {
		t.Errorf("huge address: %v", got)
	}
	blk[rings.CsOffReserved] = 1
	if got := e.OffloadAt(3, a, rings.ConnStateSize); got != rings.StatusBadParam {
		t.Errorf("reserved bytes: %v", got)
	}
	blk[rings.CsOffReserved] = 0
	if got := e.OffloadAt(3, a, rings.ConnStateSize); got != rings.StatusOK {
		t.Errorf("OffloadAt: %v", got)
	}
}

func TestCommandsValidation(t *testing.T) {
	ro := defaultRigOpts()
	ro.cfg.MaxUserBufs = 8
	r := newRig(t, ro)
	e := r.e
	arena := r.env.arena
	buf, _ := arena.Alloc(4096, 64)

	// Bad indices everywhere.
	for _, idx := range []uint32{5, 8, 1 << 30, rings.NoConn} {
		tx := rings.Tx{Addr: buf, Len: 10}
		if e.Send(idx, &tx) != rings.StatusBadConn || e.Close(idx) != rings.StatusBadConn ||
			e.Abort(idx) != rings.StatusBadConn || e.Release(idx) != rings.StatusBadConn ||
			e.SetThresholds(idx, 1, 1, true) != rings.StatusBadConn ||
			e.Update(idx, &rings.ConnUpdate{}) != rings.StatusBadConn {
			t.Fatalf("index %d accepted", idx)
		}
		if _, st := e.PostBuffers(idx, buf, 1); st != rings.StatusBadConn {
			t.Fatalf("PostBuffers index %d: %v", idx, st)
		}
		e.Input(idx, nil, nil)
	}
	// Send.
	for _, c := range []struct {
		tx   rings.Tx
		want rings.Status
	}{
		{rings.Tx{Addr: buf, Len: 0}, rings.StatusBadParam},
		{rings.Tx{Addr: buf, Len: 10, Flags: 1 << 7}, rings.StatusBadParam},
		{rings.Tx{Addr: buf, Len: 10, Flags: rings.TxCsum}, rings.StatusBadParam}, // legacy only: the engine checksums its own segments
		{rings.Tx{Addr: 0x20, Len: 10}, rings.StatusBadAddress},
		{rings.Tx{Addr: buf, Len: 1 << 31}, rings.StatusBadParam},
		{rings.Tx{Addr: arena.Base() + rings.Addr(arena.Size()) - 5, Len: 10}, rings.StatusBadAddress},
		{rings.Tx{Addr: ^rings.Addr(0) - 3, Len: 10}, rings.StatusBadAddress},
	} {
		if got := e.Send(0, &c.tx); got != c.want {
			t.Errorf("Send %+v: %v, want %v", c.tx, got, c.want)
		}
	}
	// The transmit buffer cap.
	o := defaultRigOpts()
	o.mutate = func(s *rings.ConnState) { s.MaxTxBuffers = 3 }
	r2 := newRig(t, o)
	r2.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0}) // zero window: nothing leaves
	for i := 0; i < 4; i++ {
		tx := rings.Tx{Addr: buf, Len: 100}
		want := rings.StatusOK
		if i == 3 {
			want = rings.StatusNoResources
		}
		if got := r2.e.Send(0, &tx); got != want {
			t.Fatalf("send %d: %v", i, got)
		}
	}

	// PostBuffers: a prefix is accepted, the result says how many.
	descs, _ := arena.Alloc(16*rings.UserBufDescSize, 64)
	d, _ := arena.Map(descs, 16*rings.UserBufDescSize)
	put := func(i int, u rings.UserBuf) { u.Encode(d[i*rings.UserBufDescSize:]) }
	put(0, rings.UserBuf{Addr: buf, Len: 1000, ID: 1})
	put(1, rings.UserBuf{Addr: buf + 1000, Len: 1000, ID: 2})
	put(2, rings.UserBuf{Addr: 0x40, Len: 1000, ID: 3}) // outside host memory
	put(3, rings.UserBuf{Addr: buf, Len: 1000, ID: 4})
	if n, st := e.PostBuffers(0, descs, 4); n != 2 || st != rings.StatusBadAddress {
		t.Fatalf("PostBuffers: %d %v", n, st)
	}
	put(0, rings.UserBuf{Addr: buf, Len: 0, ID: 5})
	if n, st := e.PostBuffers(0, descs, 1); n != 0 || st != rings.StatusBadParam {
		t.Fatalf("zero length: %d %v", n, st)
	}
	if n, st := e.PostBuffers(0, 0x30, 3); n != 0 || st != rings.StatusBadAddress {
		t.Fatalf("descriptor array outside memory: %d %v", n, st)
	}
	if n, st := e.PostBuffers(0, descs, 0); n != 0 || st != rings.StatusOK {
		t.Fatalf("zero count: %d %v", n, st)
	}
	for i := 0; i < 16; i++ {
		put(i, rings.UserBuf{Addr: buf, Len: 64, ID: uint32(i)})
	}
	if n, st := e.PostBuffers(0, descs, 16); n != 6 || st != rings.StatusNoResources { // 8 slots, 2 used
		t.Fatalf("queue full: %d %v", n, st)
	}
	if n, st := e.PostBuffers(0, descs, 0xFFFFFFFF); n != 0 || st != rings.StatusNoResources {
		t.Fatalf("huge count: %d %v", n, st)
	}

	// Update.
	if e.Update(0, &rings.ConnUpdate{Credit: 1}) != rings.StatusBadParam {
		t.Fatal("credit for nothing accepted")
	}
	if e.Update(0, &rings.ConnUpdate{Flags: 1 << 14}) != rings.StatusBadParam {
		t.Fatal("unknown update flag accepted")
	}
	if e.Update(0, &rings.ConnUpdate{Flags: rings.UpdRcvBufSize}) != rings.StatusBadParam {
		t.Fatal("zero receive buffer accepted")
	}
	if e.Update(0, &rings.ConnUpdate{Flags: rings.UpdKeepalive, KeepaliveIdleMs: 5}) != rings.StatusBadParam {
		t.Fatal("keepalive without interval accepted")
	}
	r.take()
	if e.Update(0, &rings.ConnUpdate{Flags: rings.UpdTTLTOS | rings.UpdAckNow | rings.UpdNextHopMAC,
		TTL: 9, TOS: 0x20, NextHopMAC: [6]byte{1, 2, 3, 4, 5, 6}}) != rings.StatusOK {
		t.Fatal("update refused")
	}
	f := r.takeOne("ACK now").raw
	if f[hdr.EthernetSize+8] != 9 || f[hdr.EthernetSize+1] != 0x20 || f[0] != 1 || f[5] != 6 {
		t.Fatalf("TTL/TOS/MAC not applied: % x", f[:hdr.EthernetSize+12])
	}

	// Release only when closed; Close twice is fine; Abort frees at once.
	if e.Release(0) != rings.StatusBadState {
		t.Fatal("release of a live connection")
	}
	if e.Close(0) != rings.StatusOK || e.Close(0) != rings.StatusOK {
		t.Fatal("close")
	}
	r.take()
	if e.Abort(0) != rings.StatusOK {
		t.Fatal("abort")
	}
	rst := r.takeOne("abort")
	if !rst.has(hdr.TCPFlagRST) {
		t.Fatal("no RST on abort")
	}
	if _, ok := e.Info(0); ok {
		t.Fatal("aborted index still delegated")
	}
	if e.Abort(0) != rings.StatusBadConn {
		t.Fatal("double abort")
	}
	// The slot is reusable.
	if st := e.Offload(0, &r.st); st != rings.StatusOK {
		t.Fatalf("re-offload: %v", st)
	}
}
