package rdmatool_test

import (
	"bytes"
	"context"
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/tcpstack/verbs"
	"github.com/emunic/emunic/tcpstack/verbs/rdmatool"
)

func providers(t *testing.T) (*verbs.Provider, *verbs.Provider, netip.Addr) {
	r := hostrig.New(t, hostrig.Config{})
	va := hostrig.Must[*verbs.Provider](t)(verbs.Open(r.A))
	vb := hostrig.Must[*verbs.Provider](t)(verbs.Open(r.B))
	return va, vb, hostrig.PrefixB.Addr()
}

func TestPingData(t *testing.T) {
	b := make([]byte, 64)
	rdmatool.PingData(b, 0)
	if want := "rdma-ping-0: ABCDEFGHIJKLMNOPQRSTUVWXYZ[\\]^_`abcdefghijklmnopqrstuvwxyzA"; string(b[:63]) != want[:63] || b[63] != 0 {
		t.Fatalf("ping 0: %q", b)
	}
	rdmatool.PingData(b, 59) // the start letter wraps after 'z'
	if !bytes.HasPrefix(b, []byte("rdma-ping-59: B")) {
		t.Fatalf("ping 59: %q", b)
	}
	var p rdmatool.PingInfo
	in := rdmatool.PingInfo{Buf: 0x1122334455667788, RKey: 0xAABBCCDD, Size: 64}
	in.Encode(b)
	if _, err := p.Decode(b[:16]); err != nil || p != in {
		t.Fatalf("round trip %+v %v", p, err)
	}
	if _, err := p.Decode(b[:15]); err == nil {
		t.Fatal("15 bytes decoded")
	}
}

func TestPingAndEcho(t *testing.T) {
	for _, o := range []rdmatool.Options{{}, {NoCRC: true}, {PeerToPeer: true}} {
		t.Run("", func(t *testing.T) {
			va, vb, addr := providers(t)
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			ready := make(chan struct{})
			var srvOut testutil.SyncBuffer
			done := make(chan error, 1)
			go func() {
				n, err := rdmatool.PingServer(ctx, vb, rdmatool.PingConfig{Count: 3, Size: 100, Out: &srvOut}, func() { close(ready) })
				if err == nil && n != 3 {
					err = errors.New("server verified fewer")
				}
				done <- err
			}()
			<-ready
			var out bytes.Buffer
			n, err := rdmatool.PingClient(ctx, va, netip.AddrPortFrom(addr, rdmatool.PingPort), rdmatool.PingConfig{Count: 3, Size: 100, Out: &out, Options: o})
			if err != nil || n != 3 || strings.Count(out.String(), "ping data: rdma-ping-") != 3 {
				t.Fatalf("client: %d %v\n%s", n, err, out.String())
			}
			if err := <-done; err != nil {
				t.Fatalf("server: %v\n%s", err, srvOut.String())
			}

			ready = make(chan struct{})
			go func() {
				_, err := rdmatool.EchoServer(ctx, vb, rdmatool.EchoConfig{Count: 2}, func() { close(ready) })
				done <- err
			}()
			<-ready
			out.Reset()
			if n, err := rdmatool.EchoClient(ctx, va, netip.AddrPortFrom(addr, rdmatool.EchoPort), rdmatool.EchoConfig{Count: 2, Out: &out, Options: o}); err != nil || n != 2 {
				t.Fatalf("echo client: %d %v", n, err)
			}
			if err := <-done; err != nil {
				t.Fatalf("echo server: %v", err)
			}
		})
	}
}

// TestPingPeerLeaves: the client disconnects after one of the three pings
// the server waits for: the server says so, with the count it verified.
func TestPingPeerLeaves(t *testing.T) {
	va, vb, addr := providers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := make(chan struct{})
	type res struct {
		n   int
		err error
	}
	done := make(chan res, 1)
	go func() {
		n, err := rdmatool.PingServer(ctx, vb, rdmatool.PingConfig{Count: 3, Size: 64}, func() { close(ready) })
		done <- res{n, err}
	}()
	<-ready
	if n, err := rdmatool.PingClient(ctx, va, netip.AddrPortFrom(addr, rdmatool.PingPort), rdmatool.PingConfig{Count: 1, Size: 64}); err != nil || n != 1 {
		t.Fatalf("client: %d %v", n, err)
	}
	r := <-done
	if r.n != 1 || !errors.Is(r.err, rdmatool.ErrPeerGone) {
		t.Fatalf("server: %d verified, %v", r.n, r.err)
	}
	t.Logf("server: %v", r.err)
}

// TestCmatose: ucmatose's exchange between two emulated hosts; without
// peer-to-peer mode the server (which speaks first) waits for the
// client's first FPDU, which ucmatose never sends: only the RTR of
// peer-to-peer mode lets it run (see echo.go).
func TestCmatose(t *testing.T) {
	va, vb, addr := providers(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ready := make(chan struct{})
	done := make(chan error, 1)
	cfg := rdmatool.CmatoseConfig{Count: 3, Size: 64}
	go func() { done <- rdmatool.CmatoseServer(ctx, vb, cfg, func() { close(ready) }) }()
	<-ready
	c := cfg
	c.PeerToPeer = true
	if err := rdmatool.CmatoseClient(ctx, va, netip.AddrPortFrom(addr, rdmatool.CmatosePort), c); err != nil {
		t.Fatalf("client: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatalf("server: %v", err)
	}
}
