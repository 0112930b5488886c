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
	"github.com/emunic/emunic/rings"
)

var (
	addr6A = netip.MustParseAddr("fd00:6::1")
	addr6B = netip.MustParseAddr("fd00:6::2")
)

// dualPair is two dual-stack hosts on one in-memory wire (10.0.0.1 and
// fd00:6::1, 10.0.0.2 and fd00:6::2), both with offload on, closed when
// the test ends; wc impairs the wire.
func dualPair(t testing.TB, wc port.WireConfig) (a, b *Host) {
	t.Helper()
	pa, pb := port.MustNewWire(wc)
	mk := func(v4 string, v6 netip.Addr, mac [6]byte, p port.Port) *Host {
		h, err := testHost(HostConfig{Addr: mustPrefix(v4),
			Stack: StackConfig{Addrs: []netip.Prefix{netip.PrefixFrom(v6, 64)}}}, mac, p)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		if err := h.Offload(OffloadConfig{}); err != nil {
			t.Fatal(err)
		}
		return h
	}
	a = mk("10.0.0.1/24", addr6A, macA, pa)
	b = mk("10.0.0.2/24", addr6B, macB, pb)
	return a, b
}

// echoBack copies what c reads back to it until EOF, then closes it.
func echoBack(c net.Conn) {
	_, _ = io.Copy(c, c)
	c.Close()
}

// roundTrip writes n patterned bytes on c and reads them back (an echo
// peer), checking them.
func roundTrip(t *testing.T, c net.Conn, n int) {
	t.Helper()
	want := fallbackPattern(3, n)
	errc := make(chan error, 1)
	go func() { _, err := c.Write(want); errc <- err }()
	got := make([]byte, n)
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("echo of %d bytes: %v (intact %v)", n, err, bytes.Equal(got, want))
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// TestDelegateIPv6 delegates IPv6 connections both ways (DialOffload to a
// netstack listener, and an OffloadListener's accepted ones) on dual-stack
// hosts: each goes to the unit with a version-2 state block, the flow is
// bound, the MSS leaves room for the 40-byte IPv6 header, and data crosses
// intact both ways; an IPv4 connection on the same hosts is delegated as
// before, with a version-1 block.
func TestDelegateIPv6(t *testing.T) {
	a, b := dualPair(t, port.WireConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	// A dials B's netstack echo over IPv6 and delegates it.
	lb, err := b.Listen(7600)
	if err != nil {
		t.Fatal(err)
	}
	defer lb.Close()
	go func() {
		for {
			c, err := lb.Accept()
			if err != nil {
				return
			}
			go echoBack(c)
		}
	}()
	dc, err := a.DialOffload(ctx, netip.AddrPortFrom(addr6B, 7600))
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	if k := dc.key; k.LocalIP != addr6A || k.RemoteIP != addr6B {
		t.Fatalf("delegated connection %v, want %v -> %v", k, addr6A, addr6B)
	}
	if a.Driver.flows.delegatedConn(dc.key) != dc {
		t.Fatal("the delegated IPv6 connection is not bound to its flow")
	}
	if la := dc.LocalAddr().(*net.TCPAddr); !la.IP.Equal(net.IP(addr6A.AsSlice())) {
		t.Fatalf("local address %v", la)
	}
	roundTrip(t, dc, 4<<20)

	// B dials A's offload listener over IPv6 and over IPv4: A delegates
	// both, B's ends stay on netstack.
	la, err := a.ListenOffload(7601)
	if err != nil {
		t.Fatal(err)
	}
	defer la.Close()
	for _, dst := range []netip.Addr{addr6A, a.Addr()} {
		acc := make(chan net.Conn, 1)
		go func() {
			c, err := la.Accept()
			if err != nil {
				t.Error(err)
				close(acc)
				return
			}
			acc <- c
		}()
		bc, err := b.Dial(ctx, netip.AddrPortFrom(dst, 7601))
		if err != nil {
			t.Fatal(err)
		}
		ac := <-acc
		d, ok := ac.(*DelegatedConn)
		if !ok {
			t.Fatalf("%v: accepted %T, not delegated (%v)", dst, ac, la.FallbackErr())
		}
		if d.key.LocalIP != dst {
			t.Fatalf("accepted on %v, want %v", d.key.LocalIP, dst)
		}
		go echoBack(d)
		roundTrip(t, bc, 2<<20)
		bc.Close()
	}
	if la.Fallbacks() != 0 || la.Lost() != 0 {
		t.Fatalf("fallbacks %d, lost %d: %v", la.Fallbacks(), la.Lost(), la.FallbackErr())
	}
	// The engine carried it all (8 MiB received by A's delegated ends).
	testutil.Eventually(t, "the engine's bytes", 10*time.Second, func() bool {
		c, err := a.Counters()
		return err == nil && c.Engine.RxBytes >= 8<<20
	})
	// The IPv6 ones' MSS: the MTU less IPv6 and TCP headers.
	info, err := dc.Info()
	if err != nil {
		t.Fatal(err)
	}
	if want := uint32(1500 - hdr.IPv6Size - hdr.TCPMinSize); info.MSS == 0 || info.MSS > want {
		t.Fatalf("IPv6 MSS %d, want at most %d", info.MSS, want)
	}
}

// TestStateBlockFamilies: the OFFLOAD block of an IPv4 flow is version 1,
// 128 bytes, as before IPv6; an IPv6 flow's is version 2 with the address
// extension, 160 bytes, and decodes back to the flow's addresses.
func TestStateBlockFamilies(t *testing.T) {
	a, _ := dualPair(t, port.WireConfig{})
	o, err := a.offloader()
	if err != nil {
		t.Fatal(err)
	}
	fi := flowInfo{ourWS: -1, peerWS: -1, peerMSS: 9000}
	for _, c := range []struct {
		k       hdr.Tuple
		version uint16
		size    int
		mss     uint16
	}{
		{hdr.Tuple{LocalIP: a.Addr(), RemoteIP: netip.MustParseAddr("10.0.0.2"), LocalPort: 1, RemotePort: 2}, rings.ConnStateVersion, rings.ConnStateSize, 1460},
		{hdr.Tuple{LocalIP: addr6A, RemoteIP: addr6B, LocalPort: 1, RemotePort: 2}, rings.ConnStateVersion2, rings.ConnStateSizeV2, 1440},
	} {
		var blk [rings.ConnStateSizeV2]byte
		b := o.encodeState(blk[:], c.k, &fi)
		var st rings.ConnState
		var x rings.ConnAddrExt
		if err := st.Decode(rings.ConnStateBlock(b)); err != nil {
			t.Fatal(err)
		}
		if len(b) == rings.ConnStateSizeV2 {
			_ = x.Decode(rings.ConnAddrExtBlock(b[rings.ConnStateSize:]))
		}
		l, r, ok := st.Addrs(&x)
		if len(b) != c.size || st.Version != c.version || !ok || l != c.k.LocalIP || r != c.k.RemoteIP ||
			!rings.ConnStateBlock(b).ReservedZero() || st.MSS != c.mss {
			t.Fatalf("%v: %d bytes, version %d, addrs %v %v %v, MSS %d", c.k, len(b), st.Version, l, r, ok, st.MSS)
		}
	}
}
