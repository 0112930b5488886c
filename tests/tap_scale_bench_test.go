package tests

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/tcpstack/services"
)

// scaleBench is the benchmarks' lab: the Linux kernel's TCP as client, in
// the namespace on the TAP's far side, against three servers run by this
// process: the emulated host with its connections delegated, the same host
// on netstack, and the Linux kernel itself in a second namespace joined to
// the client's by a veth pair.
type scaleBench struct {
	lab     *tapOffloadLab
	srvNS   *netns
	targets map[string]netip.Addr // server variant -> address
	// listen opens a listener on a variant (the netstack variant's port
	// moved up by 1000, as addr does).
	listen map[string]func(port uint16) (net.Listener, error)
	plain  *tapOffloadLab // BenchmarkTAPStream's delegated-plain host, in a lab of its own
}

// Ports: the same on every server variant (qotd's own and one for the
// 1-byte service), the netstack variant's moved up by 1000 (it shares the
// emulated host with the delegated one).
const rrPort = 2007

var scaleVariants = []string{"delegated", "netstack", "kernel"}

func (s *scaleBench) addr(variant string, port uint16) netip.AddrPort {
	if variant == "netstack" {
		port += 1000
	}
	return netip.AddrPortFrom(s.targets[variant], port)
}

// rrServe answers each byte with one byte until EOF, then closes: a
// 1-byte request/response service, and with one exchange a connection the
// client closes first.
func rrServe(c net.Conn) {
	defer c.Close()
	var b [1]byte
	for {
		if _, err := io.ReadFull(c, b[:]); err != nil {
			return
		}
		if _, err := c.Write(b[:]); err != nil {
			return
		}
	}
}

func serveEach(l net.Listener, h func(net.Conn)) {
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go h(c)
		}
	}()
}

func newScaleBench(b *testing.B, subnet byte) *scaleBench {
	b.Helper()
	lab := newTAPOffloadLab(b, subnet)
	s := &scaleBench{lab: lab, srvNS: newNetns(b), targets: map[string]netip.Addr{}}
	s.targets["delegated"], s.targets["netstack"] = lab.emu.Addr(), lab.emu.Addr()
	// The kernel server: a veth pair between the client's namespace and
	// the server's.
	va, vb := uniqueName("vea", 10), uniqueName("veb", 10)
	testutil.IP(b, "-n", lab.ns.name, "link", "add", va, "type", "veth", "peer", "name", vb, "netns", s.srvNS.name)
	cli := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, subnet, 1, 1}), 24)
	srv := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, subnet, 1, 2}), 24)
	testutil.IP(b, "-n", lab.ns.name, "addr", "add", cli.String(), "dev", va)
	testutil.IP(b, "-n", lab.ns.name, "link", "set", va, "up")
	testutil.IP(b, "-n", s.srvNS.name, "addr", "add", srv.String(), "dev", vb)
	testutil.IP(b, "-n", s.srvNS.name, "link", "set", vb, "up")
	s.targets["kernel"] = srv.Addr()

	s.listen = map[string]func(port uint16) (net.Listener, error){
		"delegated": func(p uint16) (net.Listener, error) { return lab.host.ListenOffload(p) },
		"netstack":  func(p uint16) (net.Listener, error) { return lab.host.Listen(p + 1000) },
		"kernel": func(p uint16) (l net.Listener, err error) {
			err = s.srvNS.do(func() error {
				l, err = net.Listen("tcp4", netip.AddrPortFrom(srv.Addr(), p).String())
				return err
			})
			return l, err
		},
	}
	for _, v := range scaleVariants {
		lq, err := s.listen[v](services.QOTDPort)
		if err != nil {
			b.Fatal(err)
		}
		q := services.NewQOTD(nil)
		go q.Serve(lq)
		b.Cleanup(func() { q.Close() })
		lr, err := s.listen[v](rrPort)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { lr.Close() })
		serveEach(lr, rrServe)
	}
	return s
}

// connRate has the kernel make n connections to dst, conc at a time;
// serverFirst: qotd (read the quotation and EOF, then close); otherwise
// one byte each way, then the client closes first.
func (s *scaleBench) connRate(b *testing.B, dst netip.AddrPort, n, conc int, serverFirst bool) {
	per := readQuote
	if !serverFirst {
		per = func(_ int64, c net.Conn, buf []byte) error {
			if _, err := c.Write(buf[:1]); err != nil {
				return err
			}
			_, err := io.ReadFull(c, buf[:1])
			return err
		}
	}
	if err := kernelConns(s.lab.ns, dst, n, conc, per); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkTAPScale measures, with the Linux kernel as client over the TAP
// and each server variant side by side in one run: connections per second
// (connect, accept, delegate, exchange, close; the server closing first
// with qotd, or the client after a 1-byte exchange), 16 at a time, and the
// 1-byte request/response rate on one connection. Root only:
//
//	go test ./tests/ -run '^$' -bench TAPScale -benchtime 4000x -count 5
func BenchmarkTAPScale(b *testing.B) {
	testutil.RequireTAP(b)
	s := newScaleBench(b, 95)
	for _, kind := range []struct {
		name        string
		serverFirst bool
	}{{"conns-server-first", true}, {"conns-client-first", false}} {
		for _, v := range scaleVariants {
			b.Run(kind.name+"/"+v, func(b *testing.B) {
				dst := s.addr(v, services.QOTDPort)
				if !kind.serverFirst {
					dst = s.addr(v, rrPort)
				}
				b.ResetTimer()
				start := time.Now()
				s.connRate(b, dst, b.N, 16, kind.serverFirst)
				b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "conns/s")
			})
		}
	}
	for _, v := range scaleVariants {
		b.Run("rr1/"+v, func(b *testing.B) {
			var c net.Conn
			if err := s.lab.ns.do(func() (err error) {
				c, err = net.DialTimeout("tcp4", s.addr(v, rrPort).String(), 10*time.Second)
				return err
			}); err != nil {
				b.Fatal(err)
			}
			defer c.Close()
			var x [1]byte
			b.ResetTimer()
			start := time.Now()
			for i := 0; i < b.N; i++ {
				x[0] = byte(i)
				if _, err := c.Write(x[:]); err != nil {
					b.Fatal(err)
				}
				if _, err := io.ReadFull(c, x[:]); err != nil || x[0] != byte(i) {
					b.Fatalf("round trip %d: %v", i, err)
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "rr/s")
		})
	}
}

// meminfoKiB reads one field of /proc/meminfo.
func meminfoKiB(field string) int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			v, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
			return v
		}
	}
	return 0
}

// BenchmarkTAPHeld holds EMUNIC_BENCH_HELD (default 5,000) idle connections
// from the kernel on each server variant at once and reports the memory
// the server side holds per connection: for the emulated host the Go heap
// (stack, driver, delegation state; the test's server keeps the
// connections in a slice, no goroutine or buffer of its own) plus host
// memory (arena), for the kernel the growth of the kernel's slab and of the
// test process's heap, less what the client sockets alone cost (measured
// on the delegated run, whose server side holds no kernel sockets). b.N is
// ignored: run with -benchtime 1x.
//
//	go test ./tests/ -run '^$' -bench TAPHeld -benchtime 1x -count 5
func BenchmarkTAPHeld(b *testing.B) {
	testutil.RequireTAP(b)
	// 5,000 a variant by default: the three share the client namespace's
	// ~28,000 ephemeral ports (held in TIME_WAIT after), and the kernel
	// variant needs a descriptor for both ends of each in this process.
	n := envCount(b, "EMUNIC_BENCH_HELD", 5000)
	s := newScaleBench(b, 96)
	var heldPort uint16 = 2100
	heap := func() int64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	var clientSlab int64 // slab per connection for the client sockets alone
	for _, v := range scaleVariants {
		b.Run(v, func(b *testing.B) {
			heldPort++ // a port of its own each run
			var l net.Listener
			var err error
			switch v {
			case "delegated":
				l, err = s.lab.host.ListenOffload(heldPort)
			case "netstack":
				l, err = s.lab.host.Listen(heldPort + 1000)
			case "kernel":
				err = s.srvNS.do(func() (err error) {
					l, err = net.Listen("tcp4", netip.AddrPortFrom(s.targets["kernel"], heldPort).String())
					return err
				})
			}
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			var mu sync.Mutex
			var held []net.Conn
			go func() {
				for {
					c, err := l.Accept()
					if err != nil {
						return
					}
					mu.Lock()
					held = append(held, c)
					mu.Unlock()
				}
			}()
			count := func() int { mu.Lock(); defer mu.Unlock(); return len(held) }
			h0, a0, s0 := heap(), s.lab.host.Mem.InUse(), meminfoKiB("Slab")
			var clients []net.Conn
			if err := s.lab.ns.do(func() error {
				for i := range n {
					c, err := net.DialTimeout("tcp4", s.addr(v, heldPort).String(), 20*time.Second)
					if err != nil {
						return fmt.Errorf("connection %d: %w", i, err)
					}
					clients = append(clients, c)
				}
				return nil
			}); err != nil {
				b.Fatal(err)
			}
			testutil.Eventually(b, "every connection accepted", 60*time.Second, func() bool { return count() == n })
			h1, a1, s1 := heap(), s.lab.host.Mem.InUse(), meminfoKiB("Slab")
			slab := (s1 - s0) << 10 / int64(n)
			perConn := (h1 - h0 + a1 - a0) / int64(n)
			if v == "delegated" {
				clientSlab = slab
			}
			if v == "kernel" {
				perConn = (h1-h0)/int64(n) + slab - clientSlab
			}
			b.ReportMetric(float64(perConn), "server-B/conn")
			b.ReportMetric(float64(h1-h0)/float64(n), "go-heap-B/conn")
			b.ReportMetric(float64(slab), "kernel-slab-B/conn")
			for _, c := range clients {
				c.Close()
			}
			mu.Lock()
			for _, c := range held {
				c.Close()
			}
			mu.Unlock()
		})
	}
}
