package tests

import (
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
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
	if err := da.SetNoDelay(false); !errors.Is(err, tcpstack.ErrNagle) {
		t.Errorf("SetNoDelay(false): %v", err)
	}
	ca.Close()
	if err := da.SetKeepAlive(true); !errors.Is(err, net.ErrClosed) {
		t.Errorf("on a closed connection: %v", err)
	}
}
