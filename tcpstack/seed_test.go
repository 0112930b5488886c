package tcpstack

import (
	"io"
	"net/netip"
	"testing"

	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
)

// TestStackSeed: stacks with one seed draw the same random numbers (the
// ones ISNs, ports and netstack's "secure" numbers come from), another
// seed draws others, and no seed draws from the system.
func TestStackSeed(t *testing.T) {
	draw := func(seed uint64) (uint32, []byte) {
		st, err := NewStack(channel.New(16, 1500, ""), StackConfig{Addr: netip.MustParsePrefix("10.0.0.1/24"), Seed: seed})
		if err != nil {
			t.Fatal(err)
		}
		defer st.Close()
		b := make([]byte, 16)
		if _, err := io.ReadFull(st.S.SecureRNG().Reader, b); err != nil {
			t.Fatal(err)
		}
		return st.S.InsecureRNG().Uint32(), b
	}
	a1, s1 := draw(7)
	a2, s2 := draw(7)
	b1, t1 := draw(8)
	if a1 != a2 || string(s1) != string(s2) {
		t.Errorf("seed 7 twice: %d/%x and %d/%x", a1, s1, a2, s2)
	}
	if a1 == b1 && string(s1) == string(t1) {
		t.Errorf("seeds 7 and 8 drew the same numbers")
	}
	u1, v1 := draw(0)
	u2, v2 := draw(0)
	if u1 == u2 && string(v1) == string(v2) {
		t.Errorf("unseeded stacks drew the same numbers")
	}
}
