package direct

import (
	"net"
	"testing"

	"github.com/emunic/emunic/tcpstack/verbs"
	"golang.org/x/net/nettest"
)

// TestNettest runs golang.org/x/net/nettest's conformance suite on the
// sockets-direct conn in each transfer mode (with the threshold at one
// byte, every write of the RDMA modes goes by RDMA), with the default
// (adaptive) configuration, against providers without RDMA Read (RDMA
// Write only), and on the TCP fallback path.
func TestNettest(t *testing.T) {
	a, b := rig(t)
	wa, wb := rig(t)
	dropExtension(t, wa, verbs.ExtRdmaRead)
	dropExtension(t, wb, verbs.ExtRdmaRead)
	// nettest closes conns with data in flight and wants it all
	// delivered: a closed conn drains in the background, up to the
	// default Config.Linger (5 s). (With a Close that waited at most 200
	// ms, BasicIO of the Write modes failed now and then under -race on a
	// loaded machine, "QP flushed" and data short: a SINK_AVAIL round
	// trip outlasted the linger.)
	for _, c := range []struct {
		name string
		cfg  Config
		path Path
		mode Transfer
	}{
		{"default", Config{}, PathRDMA, TransferRead},
		{"no-rdma-read-provider", Config{Threshold: 1}, PathRDMA, TransferWrite},
		{"inline", Config{Transfer: TransferInline}, PathRDMA, TransferInline},
		{"rdma-read", Config{Transfer: TransferRead, Threshold: 1}, PathRDMA, TransferRead},
		{"rdma-write", Config{Transfer: TransferWrite, Threshold: 1}, PathRDMA, TransferWrite},
		{"fallback", Config{NoRDMA: true}, PathTCP, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
				a, b := a, b
				if c.name == "no-rdma-read-provider" {
					a, b = wa, wb
				}
				c1, c2 = pair(t, a, b, c.cfg, c.cfg)
				if p := PathOf(c1); p.Path != c.path || p.Path == PathRDMA && (p.Send != c.mode || p.Recv != c.mode) {
					t.Fatalf("path %v", p)
				}
				return c1, c2, func() { c1.Close(); c2.Close() }, nil
			})
		})
	}
}
