//go:build linux

package tests

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
)

// The tests in this file put a real Linux peer on the other end of the
// emulated NIC: a TAP device whose kernel side lives in a network namespace
// made for the test, so the test changes nothing in the machine's own
// network. The kernel's TCP and ICMP in that namespace talk to the emulated
// host; the test reaches them from a thread that has entered the namespace.

// uniqueName returns prefix followed by random hex digits, n characters in
// all: unique per run, so parallel or leftover runs never collide.
func uniqueName(prefix string, n int) string {
	s := prefix + fmt.Sprintf("%016x", rand.Uint64())
	return s[:n]
}

// netns is a network namespace made for one test.
type netns struct {
	name string
	path string // its bind mount, the handle setns takes
}

// newNetns makes a network namespace with lo up. It is deleted when the test
// ends, whether it passed or not.
func newNetns(t testing.TB) *netns {
	t.Helper()
	ns := &netns{name: uniqueName("emunic-test-", 20)}
	ns.path = filepath.Join("/var/run/netns", ns.name)
	testutil.IP(t, "netns", "add", ns.name)
	t.Cleanup(func() {
		if out, err := exec.Command("ip", "netns", "del", ns.name).CombinedOutput(); err != nil {
			t.Errorf("cleanup: ip netns del %s: %v: %s", ns.name, err, bytes.TrimSpace(out))
		}
	})
	testutil.IP(t, "-n", ns.name, "link", "set", "lo", "up")
	return ns
}

// openTAP opens a TAP named after prefix (uniqueName) for the test. The
// interface is deleted from the namespace when the test ends, after the
// host has closed the TAP (cleanups run last first): it should be gone by
// then, and this catches the case it is not.
func (ns *netns) openTAP(t testing.TB, prefix string) (*port.TAPPort, string) {
	t.Helper()
	name := uniqueName(prefix, 10)
	tap, err := port.OpenTAP(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exec.Command("ip", "-n", ns.name, "link", "del", name).Run() })
	return tap, name
}

// moveTAP moves the interface into the namespace and configures the kernel's
// side there: address kernelAddr, up.
func (ns *netns) moveTAP(t testing.TB, name string, kernelAddr netip.Prefix) {
	t.Helper()
	testutil.IP(t, "link", "set", name, "netns", ns.name)
	testutil.IP(t, "-n", ns.name, "addr", "add", kernelAddr.String(), "dev", name)
	testutil.IP(t, "-n", ns.name, "link", "set", name, "up")
}

// do runs fn on an OS thread that has entered the namespace. Sockets fn
// creates belong to the namespace for their whole life, and can be used from
// any goroutine afterwards. The thread is never returned to the runtime's
// pool: its goroutine exits still locked, and Go then ends the thread.
func (ns *netns) do(fn func() error) error {
	return testutil.InNetns(ns.path, fn)
}

// dial opens a TCP connection from the namespace's kernel stack.
func (ns *netns) dial(addr netip.AddrPort) (net.Conn, error) {
	var c net.Conn
	err := ns.do(func() (err error) {
		c, err = net.DialTimeout(tcpNetwork(addr.Addr()), addr.String(), 10*time.Second)
		return err
	})
	return c, err
}

// tcpNetwork is Go's network name for TCP to a: "tcp4" or "tcp6".
func tcpNetwork(a netip.Addr) string {
	if a.Is4() {
		return "tcp4"
	}
	return "tcp6"
}

// ping sends count ICMP echo requests from the namespace's kernel to dst
// (ICMPv6 ones to an IPv6 address) and waits for each reply.

func (ns *netns) ping(dst netip.Addr, count int) error {
	network, laddr, request, reply := "ip4:icmp", "0.0.0.0", byte(8), byte(0)
	if dst.Is6() {
		// The kernel fills in the checksums of raw ICMPv6 sockets
		// itself, both ways (RFC 3542 3.1).
		network, laddr, request, reply = "ip6:ipv6-icmp", "::", 128, 129
	}
	var pc net.PacketConn
	if err := ns.do(func() (err error) {
		pc, err = net.ListenPacket(network, laddr)
		return err
	}); err != nil {
		return fmt.Errorf("ICMP socket: %w", err)
	}
	defer pc.Close()
	id := uint16(rand.Uint32())
	buf := make([]byte, 1500)
	for seq := range uint16(count) {
		payload := []byte("emunic ping test")
		msg := make([]byte, 8+len(payload))
		msg[0] = request
		binary.BigEndian.PutUint16(msg[4:], id)
		binary.BigEndian.PutUint16(msg[6:], seq)
		copy(msg[8:], payload)
		if dst.Is4() {
			binary.BigEndian.PutUint16(msg[2:], inetChecksum(msg))
		}
		if _, err := pc.WriteTo(msg, &net.IPAddr{IP: dst.AsSlice()}); err != nil {
			return fmt.Errorf("echo request %d: %w", seq, err)
		}
		pc.SetReadDeadline(time.Now().Add(3 * time.Second))
		for {
			n, from, err := pc.ReadFrom(buf)
			if err != nil {
				return fmt.Errorf("no echo reply to request %d: %w", seq, err)
			}
			r := buf[:n] // the kernel strips the IP header of raw sockets in Go
			if n < 8 || r[0] != reply || binary.BigEndian.Uint16(r[4:]) != id || binary.BigEndian.Uint16(r[6:]) != seq {
				continue // someone else's ICMP, or neighbour discovery
			}
			if from.String() != dst.String() {
				return fmt.Errorf("echo reply %d from %v, want %v", seq, from, dst)
			}
			if !bytes.Equal(r[8:], payload) {
				return fmt.Errorf("echo reply %d carries %q, want %q", seq, r[8:], payload)
			}
			if dst.Is4() && inetChecksum(r) != 0 {
				return fmt.Errorf("echo reply %d has a bad ICMP checksum", seq)
			}
			break
		}
	}
	return nil
}

// inetChecksum is the Internet checksum (RFC 1071) of b.
func inetChecksum(b []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return ^uint16(s)
}

// echoExchange sends n pseudo-random bytes to an echo service over c while
// reading the echo back, half-closes, and checks that exactly the same bytes
// came back (SHA-256 of both directions).
func echoExchange(t *testing.T, c net.Conn, n int64) {
	t.Helper()
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	sent := sha256.New()
	werr := make(chan error, 1)
	start := time.Now()
	go func() {
		src := rand.NewChaCha8([32]byte{7, 7})
		buf := make([]byte, 64<<10)
		for left := n; left > 0; {
			k := min(int64(len(buf)), left)
			src.Read(buf[:k])
			sent.Write(buf[:k])
			if _, err := c.Write(buf[:k]); err != nil {
				werr <- err
				return
			}
			left -= k
		}
		werr <- c.(interface{ CloseWrite() error }).CloseWrite()
	}()
	got := sha256.New()
	m, rerr := io.Copy(got, c)
	if err := <-werr; err != nil {
		t.Fatalf("writing to the echo service: %v", err)
	}
	if rerr != nil {
		t.Fatalf("reading the echo after %d of %d bytes: %v", m, n, rerr)
	}
	if m != n || !bytes.Equal(sent.Sum(nil), got.Sum(nil)) {
		t.Fatalf("echo returned %d bytes with SHA-256 %x; sent %d bytes with SHA-256 %x", m, got.Sum(nil), n, sent.Sum(nil))
	}
	el := time.Since(start)
	t.Logf("echoed %d MiB in %v (%.2f Gbit/s each way), SHA-256 %x", n>>20, el.Round(time.Millisecond),
		float64(n)*8/el.Seconds()/1e9, got.Sum(nil)[:8])
}

// TestTAPKernelPeerEcho attaches an emulated host to a TAP whose kernel side
// is in a network namespace, runs the echo service on it, and has the
// kernel's TCP exchange 16 MiB with it; also pings it from the kernel.
func TestTAPKernelPeerEcho(t *testing.T) {
	testutil.RequireTAP(t)
	ns := newNetns(t)
	tap, name := ns.openTAP(t, "emut")

	kernel := netip.MustParsePrefix("10.77.0.1/24")
	emu := netip.MustParsePrefix("10.77.0.2/24")
	ns.moveTAP(t, name, kernel)
	host := echoHost(t, board.HostConfig{MAC: [6]byte{2, 0, 10, 77, 0, 2}, Addr: emu}, tap)

	t.Run("ping", func(t *testing.T) {
		if err := ns.ping(emu.Addr(), 3); err != nil {
			t.Fatal(err)
		}
	})
	t.Run("echo16MiB", func(t *testing.T) {
		c, err := ns.dial(netip.AddrPortFrom(emu.Addr(), services.EchoPort))
		if err != nil {
			t.Fatalf("kernel could not connect to the echo service: %v", err)
		}
		defer c.Close()
		echoExchange(t, c, 16<<20)
	})
	if s := statOf(t, host.Host, rings.StatRxFrames); s == 0 {
		t.Error("the device counted no received frames")
	}
	checkTxCsum(t, host.Host)
}

// checkTxCsum: the device filled in the host's TCP checksums (TxCsum; the
// kernel, which drops a frame whose checksum is wrong, took the exchange)
// and refused none of the frames the host flagged.
func checkTxCsum(t *testing.T, h *tcpstack.Host) {
	t.Helper()
	c := counters(t, h)
	if c.Stats[rings.StatTxCsum] == 0 || c.Stats[rings.StatTxDropCsum] != 0 {
		t.Errorf("transmit checksum offload: tx_csum %d, tx_drop_csum %d; the driver flagged %d frames",
			c.Stats[rings.StatTxCsum], c.Stats[rings.StatTxDropCsum], h.Driver.Stats().TxCsumOffload)
	}
}

// echoHost builds an emulated host with cfg on tap and runs the echo
// service on it; both stop when the test ends.
func echoHost(t *testing.T, cfg board.HostConfig, tap *port.TAPPort) *board.Host {
	t.Helper()
	host, err := board.NewHost(cfg, tap)
	if err != nil {
		tap.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		host.Close()
		t.Logf("device counters: %v; TAP port: %v", stats(host.Host), tap.Stats())
	})
	echo := services.NewEcho(t.Logf)
	l, err := host.Listen(services.EchoPort)
	if err != nil {
		t.Fatal(err)
	}
	go echo.Serve(l)
	t.Cleanup(func() { echo.Close() })
	return host
}

// buildEmunic builds the emunic command into a temporary directory.
func buildEmunic(t testing.TB) string {
	t.Helper()
	gobin, err := exec.LookPath("go")
	if err != nil {
		gobin = filepath.Join(runtime.GOROOT(), "bin", "go")
		if _, err := os.Stat(gobin); err != nil {
			t.Skip("skipped: no go command to build emunic with")
		}
	}
	exe := filepath.Join(t.TempDir(), "emunic")
	cmd := exec.Command(gobin, "build", "-o", exe, "../cmd/emunic")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build ../cmd/emunic: %v\n%s", err, out)
	}
	return exe
}

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer = testutil.SyncBuffer

// serveProc is an 'emunic serve' process under test. Its output is kept and
// logged at cleanup, where it is killed unless interrupt stopped it.
type serveProc struct {
	t              testing.TB
	cmd            *exec.Cmd
	stdout, stderr syncBuffer
	exited         chan error
	stopped        bool
}

func startServe(t *testing.T, exe string, args ...string) *serveProc {
	t.Helper()
	return startCommand(t, exe, "serve", args...)
}

// startCommand starts 'emunic NAME args...' as a process; it is killed at
// the end of the test unless it was stopped, and its output logged.
func startCommand(t testing.TB, exe, name string, args ...string) *serveProc {
	t.Helper()
	p := &serveProc{t: t, cmd: exec.Command(exe, append([]string{name}, args...)...), exited: make(chan error, 1)}
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	// Wait also waits for the copies of its output, which a process it
	// started (a split device child) may hold open after it was killed:
	// a test that failed must end, not hang in its cleanup.
	p.cmd.WaitDelay = 10 * time.Second
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.exited <- p.cmd.Wait() }()
	t.Cleanup(func() {
		if !p.stopped {
			p.cmd.Process.Kill()
			<-p.exited
		}
		t.Logf("emunic %s %s stderr:\n%s\nstdout:\n%s", name, strings.Join(args, " "), p.stderr.String(), p.stdout.String())
	})
	return p
}

// waitLog waits until the process's log has n lines containing s.
func (p *serveProc) waitLog(s string, n int, within time.Duration) {
	p.t.Helper()
	for deadline := time.Now().Add(within); strings.Count(p.stderr.String(), s) < n; {
		select {
		case err := <-p.exited:
			p.stopped = true
			p.t.Fatalf("emunic serve exited early (%v) before logging %q", err, s)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("emunic serve did not log %q %d times within %v", s, n, within)
		}
	}
}

// interrupt stops the process with SIGINT, requires it to exit with status
// 0 within 30 s, and returns what it printed on stdout.
func (p *serveProc) interrupt() string {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGINT)
	var err error
	select {
	case err = <-p.exited:
		p.stopped = true
	case <-time.After(30 * time.Second):
		p.t.Fatal("emunic serve did not exit within 30s of SIGINT")
	}
	if err != nil {
		p.t.Fatalf("emunic serve exited with %v after SIGINT, want status 0", err)
	}
	return p.stdout.String()
}

// TestTAPServeCommand runs 'emunic serve' as a process on a TAP it creates,
// moves the TAP into a namespace, and checks ping, echo and discard from the
// kernel there; then stops it with SIGINT and checks it exits 0 with its
// counters, and that the TAP went away with it.
func TestTAPServeCommand(t *testing.T) {
	testutil.RequireTAP(t)
	exe := buildEmunic(t)
	ns := newNetns(t)
	name := uniqueName("emus", 10)
	t.Cleanup(func() { exec.Command("ip", "-n", ns.name, "link", "del", name).Run() })
	kernel := netip.MustParsePrefix("10.78.0.1/24")
	emu := netip.MustParsePrefix("10.78.0.2/24")

	srv := startServe(t, exe, "--tap", name, "--addr", emu.String())
	srv.waitLog("Ctrl-C to stop", 1, 30*time.Second)
	ns.moveTAP(t, name, kernel)

	if err := ns.ping(emu.Addr(), 2); err != nil {
		t.Errorf("ping: %v", err)
	}
	c, err := ns.dial(netip.AddrPortFrom(emu.Addr(), services.EchoPort))
	if err != nil {
		t.Fatalf("connect to echo: %v", err)
	}
	echoExchange(t, c, 1<<20)
	c.Close()
	d, err := ns.dial(netip.AddrPortFrom(emu.Addr(), services.DiscardPort))
	if err != nil {
		t.Fatalf("connect to discard: %v", err)
	}
	d.SetDeadline(time.Now().Add(time.Minute))
	if _, err := d.Write(make([]byte, 256<<10)); err != nil {
		t.Fatalf("write to discard: %v", err)
	}
	d.(interface{ CloseWrite() error }).CloseWrite()
	if rest, err := io.ReadAll(d); err != nil || len(rest) != 0 {
		t.Errorf("discard: read %d bytes back, err %v; want EOF and nothing", len(rest), err)
	}
	d.Close()

	// Both connections are logged as closed before the counters are read.
	srv.waitLog(" closed after ", 2, 10*time.Second)

	out := srv.interrupt()
	for _, want := range []string{"services", "rings (device side)", name + "  tx", "device counters (stat block)", "drops and errors"} {
		if !strings.Contains(out, want) {
			t.Errorf("serve's report lacks %q:\n%s", want, out)
		}
	}
	// The services table: name, connections, bytes in, bytes out, errors.
	for svc, want := range map[string]string{
		"echo":    fmt.Sprintf("echo 1 %d %d 0", 1<<20, 1<<20),
		"discard": fmt.Sprintf("discard 1 %d 0 0", 256<<10),
	} {
		got := ""
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && f[0] == svc {
				got = strings.Join(f, " ")
				break
			}
		}
		if got != want {
			t.Errorf("services row %q, want %q", got, want)
		}
	}
	if err := exec.Command("ip", "-n", ns.name, "link", "show", name).Run(); err == nil {
		t.Errorf("TAP %s still exists after emunic serve exited", name)
	}
}
