package tcpstack

import (
	"bytes"
	"io"
	"testing"
)

// TestDelegationSendsNoRST: netstack's endpoint of a delegated connection
// is handed off (third_party's patch 0002), not aborted. It builds no RST,
// so the frozen flow has none to drop; it no longer counts as
// established; and the connection goes on in the unit, both ways.
func TestDelegationSendsNoRST(t *testing.T) {
	a, b := plainHosts(t, OffloadConfig{})
	tcp := a.S.Stats().TCP
	rsts := tcp.ResetsSent.Value()
	dc, peer := delegatedPair(t, a, b, 5110)
	for _, w := range []struct {
		from io.Writer
		to   io.Reader
	}{{dc, peer}, {peer, dc}} {
		msg := make([]byte, 100_000)
		pattern(msg, 0)
		go func() { _, _ = w.from.Write(msg) }()
		got := make([]byte, len(msg))
		if _, err := io.ReadFull(w.to, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, msg) {
			t.Fatal("the bytes differ")
		}
	}
	if n := tcp.ResetsSent.Value() - rsts; n != 0 {
		t.Errorf("netstack sent %d RSTs for the delegated connection", n)
	}
	if n := a.Driver.Stats().FrozenDropsOut; n != 0 {
		t.Errorf("%d frames of the frozen flow dropped, want none (no RST built)", n)
	}
	if n := tcp.CurrentEstablished.Value(); n != 0 {
		t.Errorf("netstack still counts %d established connections", n)
	}
}
