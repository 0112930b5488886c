package tcpstack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

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

// icmp6 hands A an ICMPv6 Packet Too Big from B quoting a segment of k (an
// IPv6 flow, A's name of it) at sequence number sq, reporting mtu; corrupt
// spoils its checksum.
func (l *pmtuLab) icmp6(k hdr.Tuple, sq, mtu uint32, corrupt bool) {
	seg := testutil.TCPFrame6(hdr.TCPFrameFields{
		TCP:     hdr.TCPFields{SrcPort: k.LocalPort, DstPort: k.RemotePort, Seq: sq, Flags: hdr.TCPFlagACK, Window: 1000},
		Payload: make([]byte, 1400)}, k.LocalIP.As16(), k.RemoteIP.As16())
	f := testutil.ICMPv6PacketTooBigFrame(macB, macA, k.RemoteIP.As16(), k.LocalIP.As16(), seg[hdr.EthernetSize:], mtu)
	if corrupt {
		f[len(f)-1] ^= 0xFF
	}
	l.a.Driver.redeliver([][]byte{f})
}

// TestPathMTUIPv6 is TestPathMTUDelegated and TestPathMTUNetstack over
// IPv6: a Packet Too Big quoting a delegated connection becomes PATH_MTU;
// forged, stale, corrupt ones, one quoting no connection and one reporting
// less than 1280 are dropped and counted, a flood of them included, and
// neither connection stalls; a valid one takes the MSS to 1280's.
func TestPathMTUIPv6(t *testing.T) {
	a, b := dualPair(t, port.WireConfig{})
	l := &pmtuLab{t: t, a: a, b: b}
	for _, delegated := range []bool{true, false} {
		port := uint16(7300)
		if !delegated {
			port++
		}
		acc := listenAll(t, b.Listen, port)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		var ours net.Conn
		var err error
		if delegated {
			ours, err = a.DialOffload(ctx, netip.AddrPortFrom(addr6B, port))
		} else {
			ours, err = a.Dial(ctx, netip.AddrPortFrom(addr6B, port))
		}
		cancel()
		if err != nil {
			t.Fatal(err)
		}
		theirs := <-acc
		lp := uint16(ours.LocalAddr().(*net.TCPAddr).Port)
		k := hdr.Tuple{LocalIP: addr6A, RemoteIP: addr6B, LocalPort: lp, RemotePort: port}
		base := a.PathMTUStats()
		want := func(what string, d PathMTUStats) {
			t.Helper()
			w := base
			w.Applied += d.Applied
			w.Stale += d.Stale
			w.Malformed += d.Malformed
			w.NoConn += d.NoConn
			w.BelowMinimum += d.BelowMinimum
			l.wantStats(what, w)
		}
		var una uint32
		if delegated {
			una = ours.(*DelegatedConn).sndISS
		}
		resume := l.stall(k)
		const n = 16 << 10
		if _, err := ours.Write(fallbackPattern(0, n)); err != nil {
			t.Fatal(err)
		}
		testutil.Eventually(t, "the first flight held by the peer", 10*time.Second, func() bool { return len(l.held(k)) >= 5 })
		if !delegated {
			una = l.held(k)[0].seq
		}
		l.icmp6(k, una+n+100_000, 1400, false) // forged
		want("a forged PTB", PathMTUStats{Stale: 1})
		l.icmp6(k, una-1, 1400, false) // stale
		want("a stale PTB", PathMTUStats{Stale: 2})
		l.icmp6(k, una, 1400, true) // bad checksum
		want("a corrupt PTB", PathMTUStats{Stale: 2, Malformed: 1})
		l.icmp6(k, una, 1279, false) // below IPv6's minimum
		l.icmp6(k, una, 68, false)
		want("PTBs below 1280", PathMTUStats{Stale: 2, Malformed: 1, BelowMinimum: 2})
		nk := k
		nk.RemotePort++
		l.icmp6(nk, una, 1400, false) // no such connection
		want("a PTB quoting no connection", PathMTUStats{Stale: 2, Malformed: 1, BelowMinimum: 2, NoConn: 1})
		l.icmp6(k, una, 1280, false)
		want("a valid PTB", PathMTUStats{Applied: 1, Stale: 2, Malformed: 1, BelowMinimum: 2, NoConn: 1})
		if delegated {
			// What was in flight comes again in segments for 1280:
			// 1280 less the IPv6 and TCP headers and the timestamps.
			const seg = 1280 - 40 - 20 - 12
			testutil.Eventually(t, "the resend held by the peer", 10*time.Second, func() bool { return l.resentFrom(k, una, seg) != nil })
			for _, s := range l.resentFrom(k, una, seg) {
				if s.payload > seg {
					t.Fatalf("segment at %d carries %d bytes after a PTB of 1280", s.seq, s.payload)
				}
			}
			// A flood of forged ones: each dropped and counted.
			const flood = 300
			for i := range flood {
				l.icmp6(k, una+n+uint32(i)*1000, 1300, false)
			}
			testutil.Eventually(t, "the flood counted", 10*time.Second, func() bool {
				s := a.PathMTUStats()
				return s.Stale+s.Busy-base.Stale-base.Busy == 2+flood
			})
		} else {
			// netstack took it: its segments shrink to 1280's.
			ep := a.S.FindTransportEndpoint(ipv6.ProtocolNumber, tcp.ProtocolNumber, stack.TransportEndpointID{
				LocalPort: k.LocalPort, LocalAddress: tcpipAddr(k.LocalIP),
				RemotePort: k.RemotePort, RemoteAddress: tcpipAddr(k.RemoteIP)}, nicID)
			testutil.Eventually(t, "netstack's MSS lowered", 10*time.Second, func() bool {
				st, err := readEndpointState(ep.(tcpip.Endpoint), a.S.Clock().NowMonotonic())
				return err == nil && st.maxPayload <= 1280-40-20
			})
		}
		resume()
		got := make([]byte, n)
		_ = theirs.SetReadDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(theirs, got); err != nil || !bytes.Equal(got, fallbackPattern(0, n)) {
			t.Fatalf("delegated %v: the stream across the PTBs: %v", delegated, err)
		}
		pmtuStream(t, ours, theirs, 256<<10)
		pmtuStream(t, theirs, ours, 64<<10)
		if s := a.PathMTUStats(); s.Errors != 0 || s.Applied != base.Applied+1 {
			t.Fatalf("delegated %v: %+v", delegated, s)
		}
		ours.Close()
		theirs.Close()
	}
}
