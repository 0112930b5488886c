package verbs

// Tests of the provider on two emulated hosts that look at the drivers'
// counters and at delegation's timing (moved here with the verbs from
// tcpstack's counters, gate and command-path tests).

import (
	"testing"
)

// TestAllocPDPerHost: protection domain numbers are per host (per
// provider: a host has one).
func TestAllocPDPerHost(t *testing.T) {
	a, _ := fakeVerbs(t)
	b, _ := fakeVerbs(t)
	if pa, pb := a.AllocPD(), b.AllocPD(); pa != 1 || pb != 1 || a.AllocPD() != 2 {
		t.Fatalf("PDs %d %d", pa, pb)
	}
}
