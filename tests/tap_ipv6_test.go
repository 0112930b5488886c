//go:build linux

package tests

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
)

// sendRaw writes whole Ethernet frames out of the namespace's interface
// ifname through a packet socket: bad input the kernel's own stack would
// never send.
func (ns *netns) sendRaw(ifname string, frames ...[]byte) error {
	return ns.do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		fd, err := syscall.Socket(syscall.AF_PACKET, syscall.SOCK_RAW, 0)
		if err != nil {
			return err
		}
		defer syscall.Close(fd)
		for _, frame := range frames {
			sa := &syscall.SockaddrLinklayer{Ifindex: ifi.Index, Halen: 6}
			copy(sa.Addr[:], frame[:6])
			if err := syscall.Sendto(fd, frame, 0, sa); err != nil {
				return err
			}
		}
		return nil
	})
}

// TestTAPKernelPeerIPv6 puts a dual-stack emulated host on a TAP whose
// kernel side has an IPv4 and an IPv6 address: the kernel pings the host
// over IPv6 (neighbour discovery both ways), exchanges 4 MiB with its echo
// service over TCP/IPv6 and, on the same listener, over IPv4; the host
// dials the kernel over IPv6. IPv6 bad input the kernel's packet socket
// sends is counted and dropped, and the echo goes on working; a
// fragmented echo request is reassembled and overlapping fragments are not.
func TestTAPKernelPeerIPv6(t *testing.T) {
	testutil.RequireTAP(t)
	ns := newNetns(t)
	tap, name := ns.openTAP(t, "emu6")

	kernel4, emu4 := netip.MustParsePrefix("10.78.0.1/24"), netip.MustParsePrefix("10.78.0.2/24")
	kernel6, emu6 := netip.MustParsePrefix("fd00:78::1/64"), netip.MustParsePrefix("fd00:78::2/64")
	ns.moveTAP(t, name, kernel4)
	// nodad: the kernel's address is usable at once, as the host's is.
	testutil.IP(t, "-n", ns.name, "addr", "add", kernel6.String(), "dev", name, "nodad")
	mac := [6]byte{2, 0, 10, 78, 0, 2}
	host := echoHost(t, board.HostConfig{MAC: mac, Addr: emu4,
		Stack: tcpstack.StackConfig{Addrs: []netip.Prefix{emu6}}}, tap)

	t.Run("ping6", func(t *testing.T) {
		if err := ns.ping(emu6.Addr(), 3); err != nil {
			t.Fatal(err)
		}
	})
	dial6 := func(t *testing.T) net.Conn {
		var c net.Conn
		err := ns.do(func() (err error) {
			c, err = net.DialTimeout("tcp6", netip.AddrPortFrom(emu6.Addr(), services.EchoPort).String(), 10*time.Second)
			return err
		})
		if err != nil {
			t.Fatalf("kernel could not connect to the echo service over IPv6: %v", err)
		}
		return c
	}
	t.Run("echo6", func(t *testing.T) {
		c := dial6(t)
		defer c.Close()
		if a := c.RemoteAddr().(*net.TCPAddr); a.IP.To4() != nil {
			t.Fatalf("connected to %v, not over IPv6", a)
		}
		echoExchange(t, c, 4<<20)
	})
	t.Run("echo4", func(t *testing.T) { // the same listener, the other family
		c, err := ns.dial(netip.AddrPortFrom(emu4.Addr(), services.EchoPort))
		if err != nil {
			t.Fatalf("kernel could not connect over IPv4: %v", err)
		}
		defer c.Close()
		echoExchange(t, c, 1<<20)
	})
	t.Run("dial6", func(t *testing.T) { // the host resolves the kernel by NDP
		kl := ns.echoOnce(t, kernel6.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		c, err := host.Dial(ctx, netip.MustParseAddrPort(kl.Addr().String()))
		if err != nil {
			t.Fatalf("host could not connect to the kernel over IPv6: %v", err)
		}
		defer c.Close()
		echoExchange(t, c, 1<<20)
	})
	t.Run("badInput", func(t *testing.T) {
		kmac := kernelMAC(t, ns, name)
		for _, c := range badIPv6Chains {
			// Read from the counter area by StatID, as a driver does: the
			// same with the device in another process (EMUNIC_SPLIT).
			before := statOf(t, host.Host, c.id.Stat())
			f := badIPv6Frame(mac, kmac, netip.AddrPortFrom(kernel6.Addr(), 40000), netip.AddrPortFrom(emu6.Addr(), services.EchoPort),
				c.next, c.ext, hdr.TCPFields{Flags: hdr.TCPFlagSYN})
			if err := ns.sendRaw(name, f); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(5 * time.Second)
			for statOf(t, host.Host, c.id.Stat()) == before {
				if time.Now().After(deadline) {
					t.Fatalf("%s: not counted as %v", c.name, c.id)
				}
				time.Sleep(time.Millisecond)
			}
		}
		// Nothing else was disturbed: the echo still works.
		c := dial6(t)
		defer c.Close()
		echoExchange(t, c, 64<<10)
	})
	t.Run("udpOverMTU", func(t *testing.T) { // fragments whose checksum the driver filled in
		udpToKernel(t, ns, host.Host, kernel6.Addr(), 3000)
		udpToKernel(t, ns, host.Host, kernel4.Addr(), 3000)
		udpToKernel(t, ns, host.Host, kernel6.Addr(), 100)
		if s := host.Driver.Stats(); s.TxCsumFragmented < 2 {
			t.Errorf("the driver filled in %d fragmented datagrams' checksums, want 2 or more", s.TxCsumFragmented)
		}
	})
	t.Run("fragments", func(t *testing.T) {
		kmac := kernelMAC(t, ns, name)
		// Fragments pass the NIC to the host's reassembler, which
		// delivers a whole echo request and discards overlapping
		// fragments (RFC 5722) as malformed.
		msg := make([]byte, 32)
		msg[0] = 128 // echo request
		copy(msg[8:], "emunic fragmented ping6")
		fragment := func(id uint32, off int, more bool, data []byte) []byte {
			f := make([]byte, hdr.EthernetSize+hdr.IPv6Size+8+len(data))
			(&hdr.EthernetFields{Dst: mac, Src: kmac, Type: hdr.EtherTypeIPv6}).Encode(f)
			ip := hdr.IPv6(f[hdr.EthernetSize:])
			(&hdr.IPv6Fields{PayloadLen: uint16(8 + len(data)), NextHeader: hdr.ProtoIPv6Fragment, HopLimit: 64,
				Src: kernel6.Addr().As16(), Dst: emu6.Addr().As16()}).Encode(ip)
			x := ip[hdr.IPv6Size:]
			x[0] = hdr.ProtoICMPv6
			w := uint16(off)
			if more {
				w |= hdr.IPv6FragMF
			}
			binary.BigEndian.PutUint16(x[hdr.IPv6FragOffOffset:], w)
			binary.BigEndian.PutUint32(x[hdr.IPv6FragOffID:], id)
			copy(x[8:], data)
			return f
		}
		// The checksum over the whole message, as the reassembler sees it.
		sumHdr := make(hdr.IPv6, hdr.IPv6Size)
		(&hdr.IPv6Fields{Src: kernel6.Addr().As16(), Dst: emu6.Addr().As16()}).Encode(sumHdr)
		binary.BigEndian.PutUint16(msg[2:], sumHdr.TransportChecksum(hdr.ProtoICMPv6, msg))
		v6 := host.S.Stats()
		echoes, malformed := v6.ICMP.V6.PacketsReceived.EchoRequest, v6.IP.MalformedFragmentsReceived
		waitFor := func(what string, ctr interface{ Value() uint64 }, want uint64) {
			deadline := time.Now().Add(5 * time.Second)
			for ctr.Value() < want {
				if time.Now().After(deadline) {
					t.Fatalf("%s: counter %d, want %d", what, ctr.Value(), want)
				}
				time.Sleep(time.Millisecond)
			}
		}
		e0, m0 := echoes.Value(), malformed.Value()
		for _, f := range [][]byte{fragment(7, 0, true, msg[:16]), fragment(7, 16, false, msg[16:])} {
			if err := ns.sendRaw(name, f); err != nil {
				t.Fatal(err)
			}
		}
		waitFor("reassembled echo request", echoes, e0+1)
		for _, f := range [][]byte{fragment(8, 0, true, msg[:16]), fragment(8, 8, false, msg[8:])} {
			if err := ns.sendRaw(name, f); err != nil {
				t.Fatal(err)
			}
		}
		waitFor("overlapping fragments", malformed, m0+1)
		if echoes.Value() != e0+1 {
			t.Fatal("an echo request reassembled from overlapping fragments was delivered")
		}
	})
	if statOf(t, host.Host, rings.StatRxDropEtherType) != 0 {
		t.Error("IPv6 frames counted as an unknown EtherType")
	}
	checkTxCsum(t, host.Host)
}

// kernelMAC is the MAC of the namespace's side of the TAP.
func kernelMAC(t *testing.T, ns *netns, ifname string) [6]byte {
	t.Helper()
	var mac [6]byte
	if err := ns.do(func() error {
		ifi, err := net.InterfaceByName(ifname)
		if err != nil {
			return err
		}
		copy(mac[:], ifi.HardwareAddr)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return mac
}

// TestTAPServeCommandIPv6 runs 'emunic serve' with an IPv4 and an IPv6
// --addr, plain and with --offload, and has the kernel ping it over IPv6
// and use its echo service over TCP/IPv6 (delegated by an --offload serve,
// as IPv4 ones are) and over IPv4.
func TestTAPServeCommandIPv6(t *testing.T) {
	testutil.RequireTAP(t)
	exe := buildEmunic(t)
	for _, mode := range [][]string{nil, {"--offload"}} {
		t.Run(fmt.Sprint("mode", mode), func(t *testing.T) {
			ns := newNetns(t)
			name := uniqueName("emus6", 10)
			t.Cleanup(func() { exec.Command("ip", "-n", ns.name, "link", "del", name).Run() })
			kernel4, emu4 := netip.MustParsePrefix("10.79.0.1/24"), netip.MustParsePrefix("10.79.0.2/24")
			kernel6, emu6 := netip.MustParsePrefix("fd00:79::1/64"), netip.MustParsePrefix("fd00:79::2/64")
			srv := startServe(t, exe, append([]string{"--tap", name, "--addr", emu6.String(), "--addr", emu4.String()}, mode...)...)
			srv.waitLog("Ctrl-C to stop", 1, 30*time.Second)
			ns.moveTAP(t, name, kernel4)
			testutil.IP(t, "-n", ns.name, "addr", "add", kernel6.String(), "dev", name, "nodad")
			if err := ns.ping(emu6.Addr(), 2); err != nil {
				t.Errorf("ping6: %v", err)
			}
			var c net.Conn
			if err := ns.do(func() (err error) {
				c, err = net.DialTimeout("tcp6", netip.AddrPortFrom(emu6.Addr(), services.EchoPort).String(), 10*time.Second)
				return err
			}); err != nil {
				t.Fatalf("connect to echo over IPv6: %v", err)
			}
			echoExchange(t, c, 1<<20)
			c.Close()
			c4, err := ns.dial(netip.AddrPortFrom(emu4.Addr(), services.EchoPort))
			if err != nil {
				t.Fatalf("connect to echo over IPv4: %v", err)
			}
			echoExchange(t, c4, 1<<20)
			c4.Close()
			srv.waitLog(" closed after ", 2, 10*time.Second)
			if len(mode) > 0 {
				// Both connections went to the unit, the IPv6 one too.
				srv.waitLog(" delegated as conn ", 2, 10*time.Second)
				if !strings.Contains(srv.stderr.String(), "[fd00:79::1]:") {
					t.Errorf("no IPv6 connection logged as delegated:\n%s", srv.stderr.String())
				}
			}
			out := srv.interrupt()
			if want := fmt.Sprintf("echo 2 %d %d 0", 2<<20, 2<<20); !strings.Contains(strings.Join(strings.Fields(out), " "), want) {
				t.Errorf("serve's services table lacks %q:\n%s", want, out)
			}
		})
	}
}
