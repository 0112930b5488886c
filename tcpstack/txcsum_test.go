package tcpstack

import (
	"bytes"
	"context"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/checksum"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
)

// TestTxChecksumNeeded: the driver flags TCP and UDP frames that are not
// fragments, and nothing else.
func TestTxChecksumNeeded(t *testing.T) {
	tcp4 := testutil.TCPFrame(hdr.TCPFrameFields{Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2},
		TCP: hdr.TCPFields{SrcPort: 1, DstPort: 2, Flags: hdr.TCPFlagACK}, Payload: []byte("x")})
	udp4 := testutil.UDPFrame(testutil.UDPFrameFields{Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2},
		SrcPort: 1, DstPort: 2, Payload: []byte("x")})
	set := func(f []byte, off int, v ...byte) []byte { f = bytes.Clone(f); copy(f[off:], v); return f }
	ip6 := func(next uint8) []byte {
		f := make([]byte, hdr.EthernetSize+hdr.IPv6Size+20)
		(&hdr.EthernetFields{Type: hdr.EtherTypeIPv6}).Encode(f)
		(&hdr.IPv6Fields{PayloadLen: 20, NextHeader: next, HopLimit: 64}).Encode(f[hdr.EthernetSize:])
		return f
	}
	const l3 = hdr.EthernetSize
	for _, c := range []struct {
		name string
		f    []byte
		want bool
	}{
		{"IPv4 TCP", tcp4, true},
		{"IPv4 UDP", udp4, true},
		{"IPv4 ICMP", set(udp4, l3+9, hdr.ProtoICMP), false},
		{"IPv4 first fragment", set(udp4, l3+6, 0x20, 0), false},
		{"IPv4 later fragment", set(udp4, l3+6, 0, 9), false},
		{"IPv4 header cut", udp4[:l3+19], false},
		{"IPv6 TCP", ip6(hdr.ProtoTCP), true},
		{"IPv6 UDP", ip6(hdr.ProtoUDP), true},
		{"IPv6 ICMPv6", ip6(hdr.ProtoICMPv6), false},
		{"IPv6 fragment", ip6(hdr.ProtoIPv6Fragment), false},
		{"IPv6 header cut", ip6(hdr.ProtoTCP)[:l3+39], false},
		{"ARP", set(udp4, 12, 0x08, 0x06), false},
		{"runt", udp4[:10], false},
	} {
		if got := txChecksumNeeded(c.f); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}

// TestTxCsumOffloadHosts: host a's device fills in its transmit checksums
// (the in-process default); host b's refuses TxCsum (FeatTxCsum withheld, as a
// register-transport device whose driver did not enable FeatTxCsum), so
// b's driver offers netstack no offload and netstack computes them. TCP
// and UDP cross both ways over IPv4 and IPv6, and a UDP datagram over the
// MTU (IPv4 fragments: left without a checksum, which is "none"); each
// device drops nothing for a bad checksum, and a's device checksummed
// exactly the frames a's driver flagged.
func TestTxCsumOffloadHosts(t *testing.T) {
	pa, pb := port.MustNewWire(port.WireConfig{})
	mk := func(v4 string, v6 netip.Addr, mac [6]byte, p port.Port, devCfg func(*nic.Config)) *Host {
		h, err := testHostDevice(HostConfig{Addr: mustPrefix(v4),
			Stack: StackConfig{Addrs: []netip.Prefix{netip.PrefixFrom(v6, 64)}}}, mac, p, devCfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Close() })
		return h
	}
	a := mk("10.0.0.1/24", addr6A, [6]byte{2, 0, 0, 0, 0, 1}, pa, nil)
	b := mk("10.0.0.2/24", addr6B, [6]byte{2, 0, 0, 0, 0, 2}, pb, func(c *nic.Config) { c.Withheld = rings.FeatTxCsum })
	if a.Driver.Capabilities()&stack.CapabilityTXChecksumOffload == 0 || b.Driver.Capabilities()&stack.CapabilityTXChecksumOffload != 0 {
		t.Fatalf("transmit checksum offload: a %v, b %v; want a only", a.Driver.txCsum, b.Driver.txCsum)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	lport := uint16(7700)
	for _, dst := range []netip.Addr{netip.MustParseAddr("10.0.0.2"), addr6B} {
		// TCP: a dials b's echo, and b dials a's. Each listener gets a
		// port of its own: the echo end of the last connection on a port
		// may still hold it (closing, or in TIME_WAIT) when the next
		// listener binds, and netstack then refuses the bind.
		for _, pair := range [][2]*Host{{a, b}, {b, a}} {
			from, to := pair[0], pair[1]
			lport++
			port := lport
			l, err := to.Listen(port)
			if err != nil {
				t.Fatal(err)
			}
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					go echoBack(c)
				}
			}()
			addr := dst
			if from == b {
				addr = netip.MustParseAddr("10.0.0.1")
				if dst.Is6() {
					addr = addr6A
				}
			}
			c, err := from.Dial(ctx, netip.AddrPortFrom(addr, port))
			if err != nil {
				t.Fatal(err)
			}
			roundTrip(t, c, 256<<10)
			c.Close()
			l.Close()
		}
		// UDP: a sends b a datagram, b answers it.
		udpEcho(t, a, b, dst, 100)
	}
	// Over the MTU: fragments both ways, whose UDP checksum a's driver
	// fills in over the fragments it held (an IPv6 receiver drops a
	// zero one).
	udpEcho(t, a, b, netip.MustParseAddr("10.0.0.2"), 3000)
	udpEcho(t, a, b, addr6B, 3000)

	s := a.Driver.Stats()
	if s.TxCsumOffload == 0 {
		t.Fatal("a's driver flagged no frame TxCsum")
	}
	if s.TxCsumFragmented < 2 || s.TxFragsAbandoned != 0 {
		t.Errorf("a's driver filled in %d fragmented datagrams' checksums (want 2 or more, one per family), abandoned %d",
			s.TxCsumFragmented, s.TxFragsAbandoned)
	}
	if n := b.Driver.Stats().TxCsumOffload; n != 0 {
		t.Errorf("b's driver flagged %d frames at a device without the feature", n)
	}
	var ca, cb DeviceCounters
	testutil.WaitFor(t, "a's device to count the flagged frames", func() bool {
		var err error
		ca, err = a.Counters()
		return err == nil && ca.Stats[rings.StatTxCsum] >= s.TxCsumOffload
	})
	cb, err := b.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if got := ca.Stats[rings.StatTxCsum]; got != s.TxCsumOffload {
		t.Errorf("a's device checksummed %d frames, its driver flagged %d", got, s.TxCsumOffload)
	}
	for _, c := range []struct {
		name string
		v    uint64
	}{
		{"a tx_drop_csum", ca.Stats[rings.StatTxDropCsum]},
		{"a tx_drop_bad_desc", ca.Stats[rings.StatTxDropBadDesc]},
		{"b tx_drop_bad_desc", cb.Stats[rings.StatTxDropBadDesc]},
		{"b tx_csum", cb.Stats[rings.StatTxCsum]},
		{"a rx_drop_bad_checksum", ca.Stats[rings.StatRxDropBadChecksum]},
		{"b rx_drop_bad_checksum", cb.Stats[rings.StatRxDropBadChecksum]},
	} {
		if c.v != 0 {
			t.Errorf("%s = %d", c.name, c.v)
		}
	}
	t.Logf("a: %d of %d frames sent with TxCsum", s.TxCsumOffload, s.TxFrames)
}

// udpEcho sends an n-byte datagram from a to b's dst and b's answer back,
// checking both.
func udpEcho(t *testing.T, a, b *Host, dst netip.Addr, n int) {
	t.Helper()
	proto := header.IPv4ProtocolNumber
	if dst.Is6() {
		proto = header.IPv6ProtocolNumber
	}
	srv, err := gonet.DialUDP(b.S, &tcpip.FullAddress{Port: 7701}, nil, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	cli, err := gonet.DialUDP(a.S, nil, &tcpip.FullAddress{Addr: tcpip.AddrFromSlice(dst.AsSlice()), Port: 7701}, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	msg := fallbackPattern(7, n)
	buf := make([]byte, n+1)
	deadline := time.Now().Add(5 * time.Second)
	_ = srv.SetReadDeadline(deadline)
	_ = cli.SetReadDeadline(deadline)
	// The first datagram may wait on neighbour resolution: resend until
	// one arrives (UDP promises no more).
	var from net.Addr
	for got := 0; got != n; {
		if _, err := cli.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = srv.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		got, from, err = srv.ReadFrom(buf)
		if err != nil && time.Now().After(deadline) {
			t.Fatalf("%v, %d bytes: no datagram reached b: %v", dst, n, err)
		}
		if err == nil && !bytes.Equal(buf[:got], msg) {
			t.Fatalf("%v: b got a different datagram", dst)
		}
	}
	if _, err := srv.WriteTo(msg, from); err != nil {
		t.Fatal(err)
	}
	got, err := cli.Read(buf)
	if err != nil || !bytes.Equal(buf[:got], msg) {
		t.Fatalf("%v, %d bytes: b's answer: %v (intact %v)", dst, n, err, bytes.Equal(buf[:got], msg))
	}
}

// udpFragments is a UDP datagram of n payload bytes from 10.0.0.1 (or
// fd00:6::1) to 10.0.0.2 (fd00:6::2), its checksum field 0, fragmented at
// mtu as netstack does, as Ethernet frames.
func udpFragments(v6 bool, n, mtu int, id uint32) [][]byte {
	udp := make([]byte, header.UDPMinimumSize+n)
	header.UDP(udp).Encode(&header.UDPFields{SrcPort: 5000, DstPort: 6000, Length: uint16(len(udp))})
	for i := header.UDPMinimumSize; i < len(udp); i++ {
		udp[i] = byte(i*13 + 1)
	}
	var frames [][]byte
	step := (mtu - header.IPv4MinimumSize) &^ 7
	if v6 {
		step = (mtu - header.IPv6MinimumSize - header.IPv6FragmentHeaderSize) &^ 7
	}
	for off := 0; off < len(udp); off += step {
		end := min(off+step, len(udp))
		more := end < len(udp)
		data := udp[off:end]
		var ip []byte
		if v6 {
			ip = make([]byte, header.IPv6MinimumSize+header.IPv6FragmentHeaderSize+len(data))
			header.IPv6(ip).Encode(&header.IPv6Fields{PayloadLength: uint16(len(ip) - header.IPv6MinimumSize),
				TransportProtocol: header.IPv6FragmentHeader, HopLimit: 64,
				SrcAddr: tcpip.AddrFrom16(addr6A.As16()), DstAddr: tcpip.AddrFrom16(addr6B.As16())})
			fh := ip[header.IPv6MinimumSize:]
			fh[0] = uint8(header.UDPProtocolNumber)
			w := uint16(off)
			if more {
				w |= 1
			}
			binary.BigEndian.PutUint16(fh[2:], w)
			binary.BigEndian.PutUint32(fh[4:], id)
			copy(fh[header.IPv6FragmentHeaderSize:], data)
		} else {
			ip = make([]byte, header.IPv4MinimumSize+len(data))
			var fl uint8
			if more {
				fl = header.IPv4FlagMoreFragments
			}
			header.IPv4(ip).Encode(&header.IPv4Fields{TotalLength: uint16(len(ip)), ID: uint16(id), Flags: fl,
				FragmentOffset: uint16(off), TTL: 64, Protocol: uint8(header.UDPProtocolNumber),
				SrcAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), DstAddr: tcpip.AddrFrom4([4]byte{10, 0, 0, 2})})
			header.IPv4(ip).SetChecksum(^header.IPv4(ip).CalculateChecksum())
			copy(ip[header.IPv4MinimumSize:], data)
		}
		typ := header.IPv4ProtocolNumber
		if v6 {
			typ = header.IPv6ProtocolNumber
		}
		f := make([]byte, header.EthernetMinimumSize+len(ip))
		header.Ethernet(f).Encode(&header.EthernetFields{Type: typ})
		copy(f[header.EthernetMinimumSize:], ip)
		frames = append(frames, f)
	}
	return frames
}

// TestTxFragmentsChecksum: the fragments of a UDP datagram whose checksum
// netstack left to the device are held until the last, which comes back
// with the datagram's checksum right by gVisor's reckoning; other frames
// pass, and a datagram cut short by the next one's first fragment is
// abandoned (counted).
func TestTxFragmentsChecksum(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		var x txFragments
		frames := udpFragments(v6, 4000, 1500, 77)
		tcp := testutil.TCPFrame(hdr.TCPFrameFields{Src: hdr.IPv4Addr{10, 0, 0, 1}, Dst: hdr.IPv4Addr{10, 0, 0, 2},
			TCP: hdr.TCPFields{SrcPort: 1, DstPort: 2, Flags: hdr.TCPFlagACK}})
		for i, f := range frames {
			if held, _ := x.hold(tcp); held {
				t.Fatal("a TCP frame was held")
			}
			if i == 1 {
				// Another datagram's later fragment passes.
				g := udpFragments(v6, 4000, 1500, 78)[1]
				if held, _ := x.hold(g); held {
					t.Fatal("another datagram's fragment was held")
				}
			}
			held, complete := x.hold(f)
			if !held || complete != (i == len(frames)-1) {
				t.Fatalf("v6=%v fragment %d: held %v complete %v", v6, i, held, complete)
			}
		}
		// Reassemble what would go out and check it with gVisor.
		var udp []byte
		for _, fr := range x.frames {
			udp = append(udp, x.buf[fr[1]:fr[2]]...)
		}
		if len(x.frames) != len(frames) || len(udp) != header.UDPMinimumSize+4000 {
			t.Fatalf("v6=%v: %d fragments, %d bytes held", v6, len(x.frames), len(udp))
		}
		src, dst := tcpip.AddrFrom4([4]byte{10, 0, 0, 1}), tcpip.AddrFrom4([4]byte{10, 0, 0, 2})
		if v6 {
			src, dst = tcpip.AddrFrom16(addr6A.As16()), tcpip.AddrFrom16(addr6B.As16())
		}
		if sum := checksum.Checksum(udp, header.PseudoHeaderChecksum(header.UDPProtocolNumber, src, dst, uint16(len(udp)))); sum != 0xFFFF || header.UDP(udp).Checksum() == 0 {
			t.Errorf("v6=%v: the datagram sums to %#04x with checksum %#04x", v6, sum, header.UDP(udp).Checksum())
		}
		x.release()
		// A datagram cut short: the next one's first fragment abandons it.
		x.hold(frames[0])
		if held, _ := x.hold(frames[0]); !held || x.abandoned.Load() != 1 {
			t.Errorf("v6=%v: a first fragment over a held datagram: held %v, abandoned %d", v6, held, x.abandoned.Load())
		}
	}
}
