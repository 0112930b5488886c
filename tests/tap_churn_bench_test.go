//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/emunic/emunic/tcpstack/services"
)

// BenchmarkTAPChurn measures connection setup cost as a load tool sees it:
// the Linux kernel, in the namespace on the TAP's far side, opens new
// connections 64 at a time to the emulated host's echo and qotd services,
// as `emunic serve` runs them, with connection offload on (ListenOffload:
// every accepted connection delegated) and off (netstack's own listener),
// both on one host in one run.
//
//   - client-first: connect, send 64 bytes, read the echo, close (the
//     client closes first: its TIME_WAIT is the kernel's);
//   - server-first: connect, read the quotation to EOF, close (the
//     server closes first).
//
// Each round runs b.N connections on each path, alternating which goes
// first, after warmConns untimed ones on each at the start, and each run
// starts from a fresh range of the kernel's ephemeral ports
// (ip_local_port_range in the namespace): once the kernel holds most
// of a range in TIME_WAIT (client first), its connect slows down on both
// paths alike, and the comparison would measure that instead. (A port
// reused while the server holds its 4-tuple in TIME_WAIT, server first,
// costs nothing on either path: TestTAPPortReuseServerFirst.) About 51,000 connections in all
// (b.N × 4 × count, and the warm-up's) fit before ranges are reused.
// Reported: offload-conns/s, netstack-conns/s and their ratio,
// offload/netstack. Root only:
//
//	go test ./tests/ -run '^$' -bench TAPChurn -benchtime 2000x -count 6
func BenchmarkTAPChurn(b *testing.B) {
	lab := newTAPOffloadLab(b, 72)
	const netstackPorts = 1000 // the netstack path's ports: the service's plus this
	for _, v := range []struct {
		port    uint16
		serve   func() *services.Server
		offload bool
	}{
		{services.EchoPort, func() *services.Server { return services.NewEcho(nil) }, true},
		{services.EchoPort + netstackPorts, func() *services.Server { return services.NewEcho(nil) }, false},
		{services.QOTDPort, func() *services.Server { return services.NewQOTD(nil) }, true},
		{services.QOTDPort + netstackPorts, func() *services.Server { return services.NewQOTD(nil) }, false},
	} {
		var l net.Listener
		var err error
		if v.offload {
			l, err = lab.host.ListenOffload(v.port)
		} else {
			l, err = lab.host.Listen(v.port)
		}
		if err != nil {
			b.Fatal(err)
		}
		srv := v.serve()
		go srv.Serve(l)
		b.Cleanup(func() { srv.Close() })
	}
	ports := &portRanges{ns: lab.ns, next: firstPort}
	const conc, warmConns = 64, 256
	for _, mode := range []struct {
		name string
		port uint16
		per  func(int64, net.Conn, []byte) error
	}{
		{"client-first", services.EchoPort, echo64},
		{"server-first", services.QOTDPort, readQuote},
	} {
		round := 0
		b.Run(mode.name, func(b *testing.B) {
			// conns runs n connections on path 0 (offload) or 1
			// (netstack), from a fresh range of ports.
			conns := func(path, n int) {
				ports.fresh(b, n)
				dst := netip.AddrPortFrom(lab.emu.Addr(), mode.port+uint16(path)*netstackPorts)
				if err := kernelConns(lab.ns, dst, n, conc, mode.per); err != nil {
					b.Fatal(err)
				}
			}
			if round == 0 {
				// Warm both paths up before anything is timed: the
				// first connections after the lab starts pay for its
				// neighbour entries, tables and pools growing, and
				// goroutine stacks, which would fall on whichever path
				// went first.
				conns(0, warmConns)
				conns(1, warmConns)
			}
			var took [2]time.Duration // [offload, netstack]
			for i := range 2 {
				path := (i + round) % 2
				start := time.Now()
				conns(path, b.N)
				took[path] = time.Since(start)
			}
			round++
			off, net := float64(b.N)/took[0].Seconds(), float64(b.N)/took[1].Seconds()
			b.ReportMetric(off, "offload-conns/s")
			b.ReportMetric(net, "netstack-conns/s")
			b.ReportMetric(off/net, "offload/netstack")
			b.ReportMetric(0, "ns/op")
		})
	}
}

// echo64 is a client-first churn exchange: 64 bytes each way, then the
// client closes (kernelConns closes it).
func echo64(i int64, c net.Conn, buf []byte) error {
	msg := fmt.Appendf(buf[:0], "%063d\n", i)
	if _, err := c.Write(msg); err != nil {
		return err
	}
	got := buf[64:128]
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, msg) {
		return fmt.Errorf("echo %q (%v), want %q", got, err, msg)
	}
	return nil
}

// portRanges hands out fresh windows of the namespace's ephemeral ports.
type portRanges struct {
	ns   *netns
	next int
}

// firstPort is where the fresh ranges start: the namespace has no
// listeners of its own, so every unprivileged port is the client's.
const firstPort = 1100

// fresh sets the namespace's ephemeral port range to n ports (and a
// quarter more room: the kernel picks ports at random in the range) none
// of which it has used yet, starting over from firstPort when the ports run
// out (by then the first range's TIME_WAITs may be gone; it says so).
func (p *portRanges) fresh(b *testing.B, n int) {
	size := n + n/4 + 64
	if p.next+size > 65535 {
		b.Logf("ephemeral ports used up in this namespace: starting over (TIME_WAITs may remain)")
		p.next = firstPort
	}
	lo := p.next
	p.next += size
	p.set(b, lo, lo+size-1)
}

// set sets the namespace's ephemeral port range to lo-hi.
func (p *portRanges) set(b testing.TB, lo, hi int) {
	err := p.ns.do(func() error {
		// The namespace's own sysctl: /proc/sys/net is per namespace,
		// seen from a thread inside it.
		return os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", fmt.Appendf(nil, "%d %d", lo, hi), 0o644)
	})
	if err != nil {
		b.Fatal(err)
	}
}
