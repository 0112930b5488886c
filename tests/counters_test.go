package tests

import (
	"testing"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// The tests read the device's counters as a driver does, from the counter
// area the device publishes in host memory, so they run unchanged with
// the device in process or in its own process (EMUNIC_SPLIT=1).

func counters(t testing.TB, h *tcpstack.Host) tcpstack.DeviceCounters {
	t.Helper()
	c, err := h.Counters()
	if err != nil {
		t.Fatalf("device counters: %v", err)
	}
	return c
}

func engineOf(t testing.TB, h *tcpstack.Host) tcpstack.EngineCounters { return counters(t, h).Engine }

func statOf(t testing.TB, h *tcpstack.Host, id rings.StatID) uint64 { return counters(t, h).Stats[id] }

func qpStatsOf(t testing.TB, h *tcpstack.Host, qpn uint32) (tcpstack.QPCounters, bool) {
	st, ok := counters(t, h).QPs[qpn]
	return st, ok
}
