//go:build linux

package tests

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
)

// Delegated IPv6 connections against the Linux kernel over a TAP: the
// kernel's TCP/IPv6 as the client of the emulated host's services, every
// connection delegated (version-2 state block), with the TAP's TSO6 and
// LRO carrying IPv6 super-frames both ways.

// badIPv6Chains are extension-header chains the NIC must refuse, each
// with the drop counter that counts it.
var badIPv6Chains = []struct {
	name string
	next uint8
	ext  []byte
	id   nic.IPv6Drop
}{
	{"routing header type 0", hdr.ProtoIPv6Routing, []byte{hdr.ProtoTCP, 0, hdr.RoutingType0, 1, 0, 0, 0, 0}, nic.IPv6DropRoutingType0},
	{"atomic fragment", hdr.ProtoIPv6Fragment, []byte{hdr.ProtoTCP, 0, 0, 0, 0, 0, 0, 1}, nic.IPv6DropFragment},
	{"jumbogram", hdr.ProtoIPv6HopByHop, []byte{hdr.ProtoTCP, 0, hdr.IPv6OptJumboPayld, 4, 0, 1, 0, 0}, nic.IPv6DropJumbogram},
	{"destination options three times", hdr.ProtoIPv6DstOpts, []byte{
		hdr.ProtoIPv6DstOpts, 0, 1, 4, 0, 0, 0, 0,
		hdr.ProtoIPv6DstOpts, 0, 1, 4, 0, 0, 0, 0,
		hdr.ProtoTCP, 0, 1, 4, 0, 0, 0, 0}, nic.IPv6DropExtChain},
}

// badIPv6Frame is a TCP/IPv6 frame from src to dst carrying the extension
// headers ext (the first of type next) before a TCP header of tf (ports
// set from src and dst), its checksum right: only the chain is wrong.
func badIPv6Frame(dstMAC, srcMAC [6]byte, src, dst netip.AddrPort, next uint8, ext []byte, tf hdr.TCPFields) []byte {
	f := make([]byte, hdr.EthernetSize+hdr.IPv6Size+len(ext)+hdr.TCPMinSize)
	(&hdr.EthernetFields{Dst: dstMAC, Src: srcMAC, Type: hdr.EtherTypeIPv6}).Encode(f)
	ip := hdr.IPv6(f[hdr.EthernetSize:])
	(&hdr.IPv6Fields{PayloadLen: uint16(len(ext) + hdr.TCPMinSize), NextHeader: next, HopLimit: 64,
		Src: src.Addr().As16(), Dst: dst.Addr().As16()}).Encode(ip)
	copy(ip[hdr.IPv6Size:], ext)
	seg := hdr.TCP(ip[hdr.IPv6Size+len(ext):])
	tf.SrcPort, tf.DstPort, tf.HeaderLen = src.Port(), dst.Port(), hdr.TCPMinSize
	tf.Encode(seg)
	seg.SetChecksum(ip.TransportChecksum(hdr.ProtoTCP, seg))
	return f
}

// TestTAPIPv6DelegatedBadInput: while a delegated IPv6 connection echoes
// 32 MiB through the kernel, the kernel's packet socket sends frames
// bearing that connection's addresses and ports with each refused
// extension-header chain, for as long as the echo runs: every one is a
// counted drop (read by StatID from the counter area), none reaches the
// engine, and the stream goes on intact, without a stall.
func TestTAPIPv6DelegatedBadInput(t *testing.T) {
	lab := newTAPOffloadLab6(t, 109, port.TAPOptions{})
	dc, src := lab.dialKernelEcho6(t)
	name := lab.tap.Name()
	kmac := kernelMAC(t, lab.ns, name)
	emuMAC := [6]byte{2, 0, 10, 109, 0, 2}
	dst := netip.AddrPortFrom(lab.emu6.Addr(), uint16(dc.LocalAddr().(*net.TCPAddr).Port))
	before := make([]uint64, len(badIPv6Chains))
	for i, c := range badIPv6Chains {
		before[i] = statOf(t, lab.host.Host, c.id.Stat())
	}
	// Rounds of one frame of each chain, sent for as long as the echo
	// runs (the first before it starts).
	stop, sent := make(chan struct{}), make(chan error, 1)
	rounds := 0
	go func() {
		for k := 0; ; k++ {
			var fs [][]byte
			for _, c := range badIPv6Chains {
				fs = append(fs, badIPv6Frame(emuMAC, kmac, src, dst, c.next, c.ext,
					hdr.TCPFields{Seq: uint32(k) * 1000, Flags: hdr.TCPFlagACK | hdr.TCPFlagPSH, Window: 1000}))
			}
			if err := lab.ns.sendRaw(name, fs...); err != nil {
				sent <- err
				return
			}
			rounds++
			select {
			case <-stop:
				sent <- nil
				return
			default:
			}
		}
	}()
	echoExchange(t, dc, 32<<20)
	close(stop)
	if err := <-sent; err != nil {
		t.Fatal(err)
	}
	for i, c := range badIPv6Chains {
		want := before[i] + uint64(rounds)
		deadline := time.Now().Add(5 * time.Second)
		for statOf(t, lab.host.Host, c.id.Stat()) < want {
			if time.Now().After(deadline) {
				t.Fatalf("%s: %d counted, want %d", c.name, statOf(t, lab.host.Host, c.id.Stat())-before[i], rounds)
			}
			time.Sleep(time.Millisecond)
		}
		if got := statOf(t, lab.host.Host, c.id.Stat()) - before[i]; got != uint64(rounds) {
			t.Errorf("%s: %d counted, %d sent", c.name, got, rounds)
		}
	}
	t.Logf("%d frames of each refused chain sent during the echo, each counted", rounds)
	lab.close()
	if c := lab.engine(); c.DropBadChecksum+c.DropBadOptions+c.DropShort+c.DropTupleMismatch != 0 || c.Timeouts != 0 {
		t.Errorf("the engine saw bad input or timed out: %+v", c)
	}
}

// echoOnce listens in the namespace on addr (any port) and echoes the
// first connection it accepts; the listener closes when the test ends.
func (ns *netns) echoOnce(t *testing.T, addr netip.Addr) net.Listener {
	t.Helper()
	kl := ns.listen(t, netip.AddrPortFrom(addr, 0))
	go func() {
		c, err := kl.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		io.Copy(c, c)
	}()
	return kl
}

// listen opens a kernel listener in the namespace on at (port 0: any),
// closed when the test ends.
func (ns *netns) listen(t testing.TB, at netip.AddrPort) net.Listener {
	t.Helper()
	var kl net.Listener
	if err := ns.do(func() (err error) {
		kl, err = net.Listen(tcpNetwork(at.Addr()), at.String())
		return err
	}); err != nil {
		t.Fatalf("kernel listener in the namespace: %v", err)
	}
	t.Cleanup(func() { kl.Close() })
	return kl
}

// serveAllDelegated serves echo, discard and source on the lab's host
// through offload listeners (both families on a dual-stack lab) until the
// test ends, and returns the listeners, for their fallback counts.
func (l *tapOffloadLab) serveAllDelegated(t testing.TB) []*tcpstack.OffloadListener {
	t.Helper()
	var ls []*tcpstack.OffloadListener
	for _, svc := range []struct {
		srv  *services.Server
		port uint16
	}{{services.NewEcho(nil), services.EchoPort}, {services.NewDiscard(nil), services.DiscardPort}, {services.NewSource(nil), services.SourcePort}} {
		ln, err := l.host.ListenOffload(svc.port)
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, ln)
		go svc.srv.Serve(ln)
		t.Cleanup(func() { svc.srv.Close() })
	}
	return ls
}

// discardSource writes n bytes to the lab's discard service at dst and
// reads n bytes of its source service, checking them against the source's
// stream for its conn'th connection.
func discardSource(t *testing.T, l *tapOffloadLab, dst netip.Addr, n int, conn uint64) {
	t.Helper()
	d, err := l.ns.dial(netip.AddrPortFrom(dst, services.DiscardPort))
	if err != nil {
		t.Fatal(err)
	}
	d.SetDeadline(time.Now().Add(2 * time.Minute))
	if _, err := d.Write(make([]byte, n)); err != nil {
		t.Fatalf("discard: %v", err)
	}
	d.(interface{ CloseWrite() error }).CloseWrite()
	if _, err := io.Copy(io.Discard, d); err != nil {
		t.Fatalf("discard: waiting for its close: %v", err)
	}
	d.Close()
	s, err := l.ns.dial(netip.AddrPortFrom(dst, services.SourcePort))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.SetDeadline(time.Now().Add(2 * time.Minute))
	got, want := make([]byte, n), make([]byte, n)
	if _, err := io.ReadFull(s, got); err != nil {
		t.Fatalf("source: %v", err)
	}
	io.ReadFull(services.SourceStream(conn), want)
	if !bytes.Equal(got, want) {
		i := 0
		for i < n && got[i] == want[i] {
			i++
		}
		t.Fatalf("%v: the source's bytes arrived wrong from byte %d on", dst, i)
	}
}

// TestTAPIPv6DelegatedLossy: the kernel uses echo, discard and source over
// TCP/IPv6, every connection delegated, on a TAP that loses 2% of frames
// each way, both losses real (the kernel's super-frames lost at the port,
// the engine's on the kernel's nftables input: see tap_loss_test.go for
// why the two directions differ). Everything arrives intact, both sides
// retransmit, the NIC drops nothing as bad IPv6 input, and an IPv4
// connection on the same host is delegated alike.
func TestTAPIPv6DelegatedLossy(t *testing.T) {
	lab := newTAPOffloadLab6(t, 104, port.TAPOptions{RxLossPercent: 2, LossSeed: 3})
	lab.injectLossOn(t, 2, "input")
	ls := lab.serveAllDelegated(t)
	n := 32 << 20
	if testing.Short() {
		n = 8 << 20
	}
	k0 := lab.kernelTCP(t, "TcpRetransSegs")
	for i, dst := range []netip.Addr{lab.emu6.Addr(), lab.emu.Addr()} {
		c, err := lab.ns.dial(netip.AddrPortFrom(dst, services.EchoPort))
		if err != nil {
			t.Fatalf("echo at %v: %v", dst, err)
		}
		echoExchange(t, c, int64(n))
		c.Close()
		discardSource(t, lab, dst, n, uint64(i))
	}
	k1 := lab.kernelTCP(t, "TcpRetransSegs")
	for _, l := range ls {
		if l.Fallbacks()+l.Lost() != 0 {
			t.Errorf("%v: %d connections not delegated: %v", l.Addr(), l.Fallbacks()+l.Lost(), l.FallbackErr())
		}
	}
	ps := lab.tap.Stats()
	in, _ := lab.nftInputDrops(t)
	drops := ipv6Drops(t, lab.host.Host)
	lab.close()
	c := lab.engine()
	t.Logf("%d MiB each way per service and family; the port lost %d of the kernel's reads (%d super-frames in, %d out), nftables %d of the engine's; kernel retransmitted %d, engine %d (%d recoveries, %d RTOs); LRO %d, TSO %d",
		n>>20, ps.RxDropLoss, ps.RxGSOFrames, ps.TxGSOFrames, in, k1["TcpRetransSegs"]-k0["TcpRetransSegs"], c.TxRetransSegs, c.FastRetransmits, c.RTOExpired, c.RxLRO, c.TSOFrames)
	if ps.RxDropLoss == 0 || in == 0 {
		t.Fatalf("the port dropped %d reads and nftables %d packets: the loss was not injected", ps.RxDropLoss, in)
	}
	if c.TxRetransSegs == 0 {
		t.Errorf("the engine retransmitted nothing after %d of its packets were dropped", in)
	}
	if c.DropBadChecksum != 0 || c.DMAErrors != 0 || c.Timeouts != 0 || drops != 0 || ps.RxDropBadGSO != 0 {
		t.Errorf("engine: DropBadChecksum %d, DMAErrors %d, Timeouts %d; IPv6 bad input %d; bad super-frames %d; want 0",
			c.DropBadChecksum, c.DMAErrors, c.Timeouts, drops, ps.RxDropBadGSO)
	}
}

// TestTAPIPv6OffloadsBothWays: over IPv6 the kernel hands the NIC TCP/IPv6
// super-frames (TSO6 on the TAP), which the engine takes whole (LRO), and
// the engine hands the kernel super-frames (GSO TCPV6); both streams arrive
// intact.
func TestTAPIPv6OffloadsBothWays(t *testing.T) {
	lab := newTAPOffloadLab6(t, 105, port.TAPOptions{})
	lab.serveAllDelegated(t)
	discardSource(t, lab, lab.emu6.Addr(), 16<<20, 0)
	lab.close()
	st, eng := lab.tap.Stats(), lab.engine()
	t.Logf("%d super-frames in (%d taken whole), %d out; engine TSO frames %d, %d segments", st.RxGSOFrames, eng.RxLRO, st.TxGSOFrames, eng.TSOFrames, eng.TxSegments)
	if st.RxGSOFrames == 0 || st.RxDropBadGSO != 0 || st.TxErrors != 0 {
		t.Errorf("super-frames in %d, bad %d; the kernel refused %d frames", st.RxGSOFrames, st.RxDropBadGSO, st.TxErrors)
	}
	// A split device (EMUNIC_SPLIT=1) has no TSO or LRO behind its socket.
	if lab.host.Device != nil {
		if eng.TSOFrames == 0 || st.TxGSOFrames != eng.TSOFrames {
			t.Errorf("the engine handed the port %d super-frames, the port wrote %d", eng.TSOFrames, st.TxGSOFrames)
		}
		if eng.RxLRO == 0 || eng.RxLRO > st.RxGSOFrames {
			t.Errorf("the engine took %d of the port's %d super-frames whole", eng.RxLRO, st.RxGSOFrames)
		}
	}
}

// TestTAPIPv6ScaleEchoHeld is TestTAPScaleEchoHeld over IPv6: ten
// thousand echo connections from the kernel's TCP/IPv6, all delegated and
// held at once, two rounds intact on each.
func TestTAPIPv6ScaleEchoHeld(t *testing.T) {
	lab := newTAPOffloadLab6(t, 106, port.TAPOptions{})
	echoHeld(t, lab, lab.emu6.Addr())
	if d := ipv6Drops(t, lab.host.Host); d != 0 {
		t.Errorf("%d IPv6 frames dropped as bad input", d)
	}
}

// dialKernelEcho6 has the kernel echo one connection on its IPv6 address
// and dials it from the lab's host with DialOffload; it returns the
// delegated connection (closed when the test ends) and the kernel's end.
func (l *tapOffloadLab) dialKernelEcho6(t *testing.T) (*tcpstack.DelegatedConn, netip.AddrPort) {
	t.Helper()
	kl := l.ns.echoOnce(t, l.kernel6.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	kernel := netip.MustParseAddrPort(kl.Addr().String())
	dc, err := l.host.DialOffload(ctx, kernel)
	if err != nil {
		t.Fatalf("DialOffload to the kernel over IPv6: %v", err)
	}
	t.Cleanup(func() { dc.Close() })
	return dc, kernel
}

// TestTAPIPv6DialOffload: the host dials the kernel's IPv6 listener with
// DialOffload (its neighbour found by NDP, the flow tracked from its SYN)
// and echoes 16 MiB through the engine.
func TestTAPIPv6DialOffload(t *testing.T) {
	lab := newTAPOffloadLab6(t, 107, port.TAPOptions{})
	dc, _ := lab.dialKernelEcho6(t)
	echoExchange(t, dc, 16<<20)
	lab.close()
	if c := lab.engine(); c.RxBytes < 16<<20 || c.TxBytes < 16<<20 {
		t.Errorf("the engine carried %d bytes in, %d out; want the whole 16 MiB each way", c.RxBytes, c.TxBytes)
	}
}
