package nic

import (
	"bytes"
	"testing"
	"time"

	"github.com/emunic/emunic/rings"
)

// TestFrameTooLargeReturnsBuffer: a legacy frame longer than the posted
// receive buffer (but within the MTU) is dropped, counted as
// rx_drop_oversize, and the buffer comes back unwritten with
// FRAME_TOO_LARGE (Aux = its BufID, Len = the frame's length), as
// docs/rings.md says; the next buffer serves the next frame.
func TestFrameTooLargeReturnsBuffer(t *testing.T) {
	h := newHostSide(t, 0)
	post := func(id, n uint32) {
		e := h.rx.Next()
		r := rings.Rx{BufID: id, Addr: h.bufs + rings.Addr(int(id)*h.bufLen), Len: n}
		r.Encode(rings.RxDesc(e))
		h.rx.Commit()
	}
	// Buffer 3 holds 128 bytes: too small for a 300-byte frame. Its
	// memory is marked so that a write into it shows.
	mark, _ := h.mem.Map(h.bufs+rings.Addr(3*h.bufLen), 128)
	for i := range mark {
		mark[i] = 0xA5
	}
	post(3, 128)
	post(4, uint32(h.bufLen))
	h.rx.Publish()

	big, small := frame(devMAC, 300-EthHeaderLen-28), frame(devMAC, 64)
	for _, f := range [][]byte{big, small} {
		if err := h.wire.Inject(f); err != nil {
			t.Fatal(err)
		}
	}
	n, ok := h.notification()
	if !ok || n.Flags != rings.NtfFrameTooLarge || n.Conn != rings.NoConn || n.Aux != 3 || int(n.Len) != len(big) {
		t.Fatalf("first notification %+v (ok %v): want FRAME_TOO_LARGE, NoConn, Aux 3, Len %d", n, ok, len(big))
	}
	if bytes.Count(mark, []byte{0xA5}) != len(mark) {
		t.Error("the device wrote into the buffer it reported too small")
	}
	n, ok = h.notification()
	if !ok || n.Flags != rings.NtfLegacyUpload || n.Aux != 4 || int(n.Len) != len(small) {
		t.Fatalf("second notification %+v (ok %v): want LEGACY_UPLOAD of the small frame into buffer 4", n, ok)
	}
	if got := h.dev.Stat(rings.StatRxDropOversize); got != 1 {
		t.Errorf("rx_drop_oversize = %d, want 1", got)
	}
	// Both descriptors were consumed: the ring is empty.
	if got := h.rx.Outstanding(); got != 0 {
		t.Errorf("%d receive descriptors still outstanding, want 0", got)
	}
}

// TestDoorbellsCountHostKicksOnly: the doorbells counter counts the host's
// writes of the doorbell register that find the unit parked; the MAC's
// wake-ups for received frames (the same bell inside the device) are not
// doorbells.
func TestDoorbellsCountHostKicksOnly(t *testing.T) {
	h := newHostSide(t, 4)
	waitParked := func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for !h.dev.parked.Load() {
			if time.Now().After(deadline) {
				t.Fatal("the unit never parked")
			}
			time.Sleep(100 * time.Microsecond)
		}
	}
	waitParked()
	for range 3 {
		if err := h.wire.Inject(frame(devMAC, 64)); err != nil {
			t.Fatal(err)
		}
		if n, ok := h.notification(); !ok || n.Flags != rings.NtfLegacyUpload {
			t.Fatalf("notification %+v ok=%v", n, ok)
		}
		waitParked()
	}
	if got := h.dev.Stat(rings.StatDoorbells); got != 0 {
		t.Fatalf("doorbells = %d after frames woke the unit, want 0", got)
	}
	h.dev.Doorbell().Kick()
	h.waitStat(rings.StatDoorbells, 1)
	if got := h.dev.Stat(rings.StatDoorbells); got != 1 {
		t.Fatalf("doorbells = %d after one kick, want 1", got)
	}
}

// TestCountersSettled: the published counters are settled while the unit
// is parked, and after it has published them again since a given
// generation.
func TestCountersSettled(t *testing.T) {
	h := newHostSide(t, 4)
	deadline := time.Now().Add(2 * time.Second)
	for !h.dev.parked.Load() {
		if time.Now().After(deadline) {
			t.Fatal("the unit never parked")
		}
		time.Sleep(100 * time.Microsecond)
	}
	ok, gen := h.dev.CountersSettled(^uint64(0))
	if !ok {
		t.Fatal("not settled while parked")
	}
	if err := h.wire.Inject(frame(devMAC, 64)); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.notification(); !ok {
		t.Fatal("no notification")
	}
	for {
		if ok, now := h.dev.CountersSettled(gen); ok {
			if c := h.dev.RingCounters(); c.Rx.Entries != 1 || c.Notify.Entries != 1 {
				t.Fatalf("settled (generation %d, was %d) but the ring counters say %+v", now, gen, c)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("the counters never settled")
		}
		time.Sleep(100 * time.Microsecond)
	}
}

// TestIdleYield: with Config.IdleYield the idle unit goes on serving
// without parking for that long, so commands posted meanwhile need no
// doorbell, and then parks as before, to be rung again.
func TestIdleYield(t *testing.T) {
	t0 := time.Now()
	h := newHostSideConfig(t, 0, Config{IdleYield: time.Second})
	nop := rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}
	for range 3 {
		h.command(nop)
	}
	// Only well inside the window is it certain the unit has not parked
	// (a slow machine may have let it pass).
	if time.Since(t0) < 500*time.Millisecond {
		if p, db := h.dev.Stat(rings.StatParks), h.dev.Stat(rings.StatDoorbells); p != 0 || db != 0 {
			t.Fatalf("inside the yield window: %d parks, %d doorbells, want none", p, db)
		}
	}
	h.waitStat(rings.StatParks, 1)
	h.command(nop)
	h.waitStat(rings.StatDoorbells, 1)
}
