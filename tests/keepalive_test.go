package tests

import (
	"bytes"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// engineProbes is host h's engine's count of keepalive probes sent.
func engineProbes(t *testing.T, h *tcpstack.Host) uint64 {
	t.Helper()
	c, err := h.Counters()
	if err != nil {
		t.Fatal(err)
	}
	return c.Engine.KeepaliveProbes
}

// TestDelegatedKeepAlive: keepalive set on a delegated connection the way
// net.TCPConn sets it reaches the engine: an idle connection is probed
// (and the live peer's answers keep it up), off stops the probes, and bad
// settings are errors.
func TestDelegatedKeepAlive(t *testing.T) {
	a, b := hostrig.Pair(t)
	ca, cb := delegatedPair(t, a, b, 7400)
	da := ca.(*tcpstack.DelegatedConn)
	if err := da.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 30 * time.Millisecond, Interval: 20 * time.Millisecond, Count: 3}); err != nil {
		t.Fatal(err)
	}
	if got := da.KeepAliveConfig(); !got.Enable || got.Idle != 30*time.Millisecond || got.Count != 3 {
		t.Fatalf("config %+v", got)
	}
	// Probes while idle: wait for the engine to count two (the counters
	// are published when the unit goes idle).
	deadline := time.Now().Add(5 * time.Second)
	for engineProbes(t, a) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("no keepalive probes in 5 s (%d)", engineProbes(t, a))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// The peer answers them: the connection works.
	if _, err := ca.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1)
	cb.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(cb, buf); err != nil {
		t.Fatalf("after probes: %v", err)
	}
	// Off: no more probes (absence can only be watched for a while).
	if err := da.SetKeepAlive(false); err != nil {
		t.Fatal(err)
	}
	n := engineProbes(t, a)
	time.Sleep(150 * time.Millisecond)
	if m := engineProbes(t, a); m != n {
		t.Errorf("%d probes after keepalive was turned off", m-n)
	}
	// On again with the period form, then bad input.
	if err := da.SetKeepAlivePeriod(time.Second); err != nil || da.KeepAliveConfig().Interval != time.Second {
		t.Fatalf("SetKeepAlivePeriod: %v %+v", err, da.KeepAliveConfig())
	}
	if err := da.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: 1 << 62}); err == nil {
		t.Error("an idle time beyond what the engine counts was taken")
	}
	if err := da.SetNoDelay(true); err != nil {
		t.Errorf("SetNoDelay(true): %v", err)
	}
	ca.Close()
	if err := da.SetKeepAlive(true); !errors.Is(err, net.ErrClosed) {
		t.Errorf("on a closed connection: %v", err)
	}
}

// TestDelegatedNagleAndCongestion: Nagle's algorithm and the congestion
// control, set the way net.TCPConn sets them (SetNoDelay, Linux's
// TCP_CONGESTION), reach the engine (its connection table says so when
// the device is in this process), the stream stays intact both ways
// through each change, and an unknown algorithm or a closed connection is
// an error.
func TestDelegatedNagleAndCongestion(t *testing.T) {
	r := hostrig.New(t, hostrig.Config{})
	a, b := r.A, r.B
	ca, cb := delegatedPair(t, a, b, 7401)
	da := ca.(*tcpstack.DelegatedConn)
	engine := func() (delegation.ConnInfo, bool) {
		if r.DevA == nil {
			return delegation.ConnInfo{}, false // split: the table is in the device's process
		}
		return r.DevA.Engine().Info(da.Index())
	}
	exchange := func(what string) {
		t.Helper()
		for _, n := range []int{1, 7, 1500, 100 << 10} {
			echoCheck(t, ca, cb, n, what)
			echoCheck(t, cb, ca, n, what)
		}
	}
	if i, ok := engine(); ok && (i.Nagle || i.Congestion != rings.CCCubic) {
		t.Fatalf("defaults: Nagle %v, %v", i.Nagle, i.Congestion)
	}
	if err := da.SetNoDelay(false); err != nil {
		t.Fatal(err)
	}
	if err := da.SetCongestionControl(rings.CCNewReno); err != nil {
		t.Fatal(err)
	}
	if i, ok := engine(); ok && (!i.Nagle || i.Congestion != rings.CCNewReno) {
		t.Fatalf("after: Nagle %v, %v", i.Nagle, i.Congestion)
	}
	exchange("Nagle on, NewReno")
	if err := da.SetNoDelay(true); err != nil {
		t.Fatal(err)
	}
	if err := da.SetCongestionControl(rings.CCCubic); err != nil {
		t.Fatal(err)
	}
	exchange("Nagle off, CUBIC")
	if err := da.SetCongestionControl(9); err == nil {
		t.Error("an unknown congestion control was taken")
	}
	ca.Close()
	if err := da.SetNoDelay(false); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetNoDelay on a closed connection: %v", err)
	}
	if err := da.SetCongestionControl(rings.CCNewReno); !errors.Is(err, net.ErrClosed) {
		t.Errorf("SetCongestionControl on a closed connection: %v", err)
	}
}

// echoCheck writes n bytes of a pattern on w and reads them back on r.
func echoCheck(t *testing.T, w, r net.Conn, n int, what string) {
	t.Helper()
	want := make([]byte, n)
	for i := range want {
		want[i] = byte(i*7 + n)
	}
	errc := make(chan error, 1)
	go func() { _, err := w.Write(want); errc <- err }()
	got := make([]byte, n)
	r.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r, got); err != nil {
		t.Fatalf("%s: %d bytes: %v", what, n, err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("%s: write: %v", what, err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes altered", what, n)
	}
}
