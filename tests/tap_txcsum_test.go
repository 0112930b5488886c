//go:build linux

package tests

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/tcpstack"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// udpToKernel sends an n-byte UDP datagram from the host's netstack to a
// socket of the namespace's kernel at dst and waits for it there. Over the
// MTU netstack fragments it after leaving its checksum to the device; the
// driver fills it in over the fragments (tcpstack/txcsum.go), and the
// kernel, which drops a datagram whose checksum is wrong (or, over IPv6,
// zero), taking it intact is the check.
func udpToKernel(t *testing.T, ns *netns, h *tcpstack.Host, dst netip.Addr, n int) {
	t.Helper()
	var kc net.PacketConn
	if err := ns.do(func() (err error) {
		kc, err = net.ListenPacket("udp", netip.AddrPortFrom(dst, 0).String())
		return err
	}); err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	proto := header.IPv4ProtocolNumber
	if dst.Is6() {
		proto = header.IPv6ProtocolNumber
	}
	port := uint16(kc.LocalAddr().(*net.UDPAddr).Port)
	c, err := gonet.DialUDP(h.S, nil, &tcpip.FullAddress{Addr: tcpip.AddrFromSlice(dst.AsSlice()), Port: port}, proto)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	msg := make([]byte, n)
	for i := range msg {
		msg[i] = byte(i*7 + 5)
	}
	buf := make([]byte, n+1)
	// The first may wait on neighbour resolution: resend until one
	// arrives (UDP promises no more).
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := c.Write(msg); err != nil {
			t.Fatal(err)
		}
		_ = kc.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		got, _, err := kc.ReadFrom(buf)
		if err != nil {
			continue
		}
		if !bytes.Equal(buf[:got], msg) {
			t.Fatalf("the kernel got a different %d-byte datagram", got)
		}
		return
	}
	t.Fatalf("no %d-byte UDP datagram to %v reached the kernel (driver: %+v)", n, dst, h.Driver.Stats())
}
