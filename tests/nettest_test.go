package tests

import (
	"net"
	"sync/atomic"
	"testing"

	"github.com/emunic/emunic/nic/port"
	"golang.org/x/net/nettest"
)

// TestDelegatedConnNettest runs golang.org/x/net/nettest's conformance suite
// on a pair of delegated connections between two emulated hosts.
func TestDelegatedConnNettest(t *testing.T) {
	a, b := newPair(t, port.WireConfig{})
	var next atomic.Uint32
	next.Store(7000)
	nettest.TestConn(t, func() (c1, c2 net.Conn, stop func(), err error) {
		p := uint16(next.Add(1))
		c1, c2 = delegatedPair(t, a, b, p)
		return c1, c2, func() { c1.Close(); c2.Close() }, nil
	})
}
