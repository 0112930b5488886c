package tcpstack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
)

// TestDelegateLearnsMissedFlow: a connection accepted on an offload
// listener whose flow the tracker missed (its entry gone before Accept) is
// delegated all the same, its state learned from netstack's endpoint: the
// bytes netstack held unread come first, then data both ways in amounts
// that need the window scale and the options right; and one the peer had
// half-closed before it was accepted reads its data, then EOF; and one the
// peer keeps sending on while it is learned loses nothing (its frames are
// held while the flow is frozen, then given to the unit).
func TestDelegateLearnsMissedFlow(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		halfClosed, streaming bool
		ipv6                  bool
	}{{"established", false, false, false}, {"close-wait", true, false, false}, {"streaming", false, true, false},
		{"established-ipv6", false, false, true}, {"streaming-ipv6", false, true, true}} {
		halfClosed := tc.halfClosed
		t.Run(tc.name, func(t *testing.T) {
			var a, b *Host
			aAddr, bAddr := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
			if tc.ipv6 {
				// Learned over IPv6: the next hop's MAC comes from
				// neighbour discovery's table.
				a, b = dualPair(t, port.WireConfig{})
				aAddr, bAddr = addr6A, addr6B
			} else {
				a, b, _ = gateHosts(t, nil, nil)
			}
			if err := a.Offload(OffloadConfig{CommandTimeout: time.Minute}); err != nil {
				t.Fatal(err)
			}
			l, err := a.ListenOffload(5070)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			release := l.hold() // accepted only once the tracker lost the flow
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			peer, err := b.Dial(ctx, netip.AddrPortFrom(aAddr, 5070))
			if err != nil {
				t.Fatal(err)
			}
			defer peer.Close()
			// Sent before the accept: netstack holds it unread.
			early := fallbackPattern(0, 3000)
			if _, err := peer.Write(early); err != nil {
				t.Fatal(err)
			}
			if halfClosed {
				if err := peer.(interface{ CloseWrite() error }).CloseWrite(); err != nil {
					t.Fatal(err)
				}
			}
			k := hdr.Tuple{LocalIP: aAddr, RemoteIP: bAddr, LocalPort: 5070, RemotePort: uint16(peer.LocalAddr().(*net.TCPAddr).Port)}
			testutil.Eventually(t, "the early bytes (and FIN) tracked", 10*time.Second, func() bool {
				fi, ok := a.Driver.flows.snapshot(k)
				return ok && fi.rcvNxt-fi.irs-1 == 3000+b2u(halfClosed)
			})
			a.Driver.flows.remove(k) // the tracker missed it
			const streamed = 4 << 20
			sent := make(chan error, 1)
			if tc.streaming {
				go func() { _, err := peer.Write(fallbackPattern(len(early), streamed)); sent <- err }()
			}
			release()

			c, err := l.Accept()
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			dc, ok := c.(*DelegatedConn)
			if !ok || l.Fallbacks() != 0 {
				t.Fatalf("accepted %T, %d fallbacks (%v): want it delegated", c, l.Fallbacks(), l.FallbackErr())
			}
			if n := a.FlowsLearned(); n != 1 {
				t.Fatalf("%d flows learned, want 1", n)
			}
			if fi, ok := a.Driver.flows.snapshot(k); !ok || !fi.learned || !fi.frozen || fi.dconn != dc || fi.nextHopMAC != macB {
				t.Fatalf("the learned flow's entry: %v %+v", ok, fi)
			}
			got := make([]byte, len(early))
			_ = dc.SetReadDeadline(time.Now().Add(20 * time.Second))
			if _, err := io.ReadFull(dc, got); err != nil || !bytes.Equal(got, early) {
				t.Fatalf("the bytes netstack held: %v", err)
			}
			if tc.streaming {
				more := make([]byte, streamed)
				if _, err := io.ReadFull(dc, more); err != nil || !bytes.Equal(more, fallbackPattern(len(early), streamed)) {
					t.Fatalf("what the peer sent while the flow was learned: %v", err)
				}
				if err := <-sent; err != nil {
					t.Fatal(err)
				}
			}
			if halfClosed {
				if n, err := dc.Read(got[:1]); n != 0 || err != io.EOF {
					t.Fatalf("after the peer's FIN: %d, %v; want EOF", n, err)
				}
				pmtuStream(t, dc, peer, 1<<20)
				return
			}
			pmtuStream(t, dc, peer, 1<<20)
			pmtuStream(t, peer, dc, 1<<20)
		})
	}
}

func b2u(b bool) uint32 {
	if b {
		return 1
	}
	return 0
}
