//go:build linux

package tests

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime/pprof"
	"strconv"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/tcpstack"
)

// BenchmarkTAPRegisteredRead is tcpstack's BenchmarkRegisteredRead with
// the Linux kernel as the sender, over a TAP: the receiving host's CPU per
// GiB of a delegated connection read with registered buffers
// (ReadRegistered: the device places the bytes in the reader's own
// buffers, EMUNIC_REGREAD_BUFS of 64 KiB kept posted, default 64: 4 MiB,
// what netstack's receive buffer grows to) against ordinary 64 KiB Reads
// (the device places them in pool or legacy buffers and Read copies them
// out), on two connections from the kernel, read in turn in each round.
//
// Why a second benchmark: in the in-process one the sender is netstack on
// a second emulated host in the same process, and it and the devices
// cause most of the runtime's work (garbage collection, scheduling), which
// no pprof label can put on either host.
//
//   - split: the device is 'emunic device --tap' and each sender a bash
//     copying /dev/zero into a /dev/tcp socket in the kernel's namespace,
//     so this process holds the receiving host alone, and its CPU by
//     getrusage (reg/read-process-cpu) is the host's with all the
//     runtime does for it: the bar's measurement (0.5).
//   - inproc: the device in this process, the senders goroutines writing
//     into kernel sockets under side=server; reg/read-host-cpu is the
//     host's labelled goroutines (side=client).
//
// Each round reads EMUNIC_REGREAD_MB MiB (default 256) on each
// connection; b.N is the number of rounds. Root only:
//
//	EMUNIC_REGREAD_MB=1024 go test ./tests -run '^$' -bench TAPRegisteredRead -benchtime 4x
//
// Metrics, registered over ordinary: reg/read-process-cpu, reg/read-host-cpu
// and reg/read-host+rt-cpu (the labelled figure with the runtime's
// unlabelled work added to both); the per-GiB figures of each;
// reg-copied-B/B and read-copied-B/B (bytes the host copied per byte
// read, from the driver's count); each one's throughput; and
// profile/process (the profile's CPU over getrusage's: near 1 means the
// samples saw the CPU there was).
func BenchmarkTAPRegisteredRead(b *testing.B) {
	b.Run("inproc", func(b *testing.B) {
		var lab *tapOffloadLab
		pprof.Do(context.Background(), clientLabel, func(context.Context) {
			lab = newTAPOffloadLab(b, 117)
		})
		tapRegisteredRead(b, lab.host.Host, lab.emu.Addr(), func(dst netip.AddrPort) {
			// The sender writes without end (until the benchmark
			// closes its socket) from a goroutine labelled server.
			k, err := lab.ns.dial(dst)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { k.Close() })
			pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) {
				go func() {
					p := make([]byte, 256<<10)
					for {
						if _, err := k.Write(p); err != nil {
							return
						}
					}
				}()
			})
		})
	})
	b.Run("split", tapRegisteredReadSplit)
}

var clientLabel = pprof.Labels("side", "client")

// tapRegisteredRead measures two delegated connections of h to addr,
// each opened by connect (which must start a sender on the far end that
// never stops), read in turn with ordinary Reads and with ReadRegistered.
func tapRegisteredRead(b *testing.B, h *tcpstack.Host, addr netip.Addr, connect func(netip.AddrPort)) {
	const readSize, lport = 64 << 10, 5301
	nbufs := envMiB("EMUNIC_REGREAD_BUFS", 64)
	per := envMiB("EMUNIC_REGREAD_MB", 256) << 20
	var l *tcpstack.OffloadListener
	pprof.Do(context.Background(), clientLabel, func(context.Context) {
		var err error
		if l, err = h.ListenOffload(lport); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { l.Close() })
	accept := func() *tcpstack.DelegatedConn {
		connect(netip.AddrPortFrom(addr, lport))
		c, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { c.Close() })
		dc, ok := c.(*tcpstack.DelegatedConn)
		if !ok {
			b.Fatalf("accepted %T, not a delegated connection", c)
		}
		return dc
	}
	type variant struct {
		dc   *tcpstack.DelegatedConn
		reg  bool
		back *tcpstack.RegisteredBuf
		buf  []byte

		split  cpusplit.Split // summed over the rounds
		bytes  int
		copied uint64
	}
	ord := &variant{dc: accept(), buf: make([]byte, readSize)}
	reg := &variant{dc: accept(), reg: true}
	for range nbufs {
		rb, err := h.NewRegisteredBuf(readSize)
		if err != nil {
			b.Fatal(err)
		}
		if err := reg.dc.PostRegistered(rb); err != nil {
			b.Fatal(err)
		}
	}
	read := func(v *variant, n int) {
		for got := 0; got < n; {
			var k int
			var err error
			if v.reg {
				var p []byte
				p, v.back, err = v.dc.ReadRegistered(v.back)
				k = len(p)
			} else {
				k, err = v.dc.Read(v.buf)
			}
			if err != nil {
				b.Fatal(err)
			}
			got += k
		}
	}
	measure := func(v *variant) {
		copies0 := h.Driver.Stats().HostCopyBytes
		s, err := cpusplit.Measure(func() {
			pprof.Do(context.Background(), clientLabel, func(context.Context) { read(v, per) })
		})
		if err != nil {
			b.Skip(err)
		}
		v.copied += h.Driver.Stats().HostCopyBytes - copies0
		v.bytes += per
		v.split.Client += s.Client
		v.split.Host += s.Host
		v.split.Server += s.Server
		v.split.Device += s.Device
		v.split.Wall += s.Wall
		v.split.Process += s.Process
	}
	// Warm up both: windows open, buffers posted, the pool grown.
	read(ord, 64<<20)
	read(reg, 64<<20)
	b.SetBytes(int64(2 * per))
	b.ResetTimer()
	for i := range b.N {
		// Alternate which goes first, so neither always follows the other.
		if i%2 == 0 {
			measure(ord)
			measure(reg)
		} else {
			measure(reg)
			measure(ord)
		}
	}
	b.StopTimer()
	for _, v := range []*variant{ord, reg} {
		b.Logf("registered %v: %d MiB; CPU: client %v, unlabelled %v, server %v, device %v; process %v; wall %v",
			v.reg, v.bytes>>20, v.split.Client, v.split.Host-v.split.Server-v.split.Client, v.split.Server, v.split.Device, v.split.Process, v.split.Wall)
	}
	perGiB := func(v *variant, d float64) float64 { return d / (float64(v.bytes) / (1 << 30)) }
	oc, rc := perGiB(ord, ord.split.Client.Seconds()), perGiB(reg, reg.split.Client.Seconds())
	oa := perGiB(ord, (ord.split.Host - ord.split.Server).Seconds())
	ra := perGiB(reg, (reg.split.Host - reg.split.Server).Seconds())
	b.ReportMetric(oc, "read-host-cpu-s/GiB")
	b.ReportMetric(rc, "reg-host-cpu-s/GiB")
	b.ReportMetric(oa, "read-host+rt-cpu-s/GiB")
	b.ReportMetric(ra, "reg-host+rt-cpu-s/GiB")
	if oc > 0 && oa > 0 {
		b.ReportMetric(rc/oc, "reg/read-host-cpu")
		b.ReportMetric(ra/oa, "reg/read-host+rt-cpu")
	}
	b.ReportMetric(float64(reg.copied)/float64(reg.bytes), "reg-copied-B/B")
	b.ReportMetric(float64(ord.copied)/float64(ord.bytes), "read-copied-B/B")
	b.ReportMetric(float64(ord.bytes)*8/ord.split.Wall.Seconds()/1e9, "read-Gbit/s")
	b.ReportMetric(float64(reg.bytes)*8/reg.split.Wall.Seconds()/1e9, "reg-Gbit/s")
	if p := ord.split.Process + reg.split.Process; p > 0 {
		b.ReportMetric((ord.split.Total()+reg.split.Total()).Seconds()/p.Seconds(), "profile/process")
		// The whole process's CPU by the kernel's accounting: in split
		// mode, where the device and the sender are other processes,
		// the host's CPU with everything the runtime does for it.
		op, rp := perGiB(ord, ord.split.Process.Seconds()), perGiB(reg, reg.split.Process.Seconds())
		b.ReportMetric(op, "read-process-cpu-s/GiB")
		b.ReportMetric(rp, "reg-process-cpu-s/GiB")
		b.ReportMetric(rp/op, "reg/read-process-cpu")
	}
}

// envMiB is the environment variable name's whole number, or def when it
// is unset or not a positive number.
func envMiB(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// tapRegisteredReadSplit is tapRegisteredRead with the device in its own
// process ('emunic device --tap') and each sender in its own process (bash
// writing /dev/zero into a /dev/tcp socket in the kernel's namespace):
// this process holds the receiving host alone, so its CPU by getrusage
// (reg/read-process-cpu) is the host's with all the runtime's work for it.
func tapRegisteredReadSplit(b *testing.B) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		b.Skip("skipped: no bash for the kernel-side sender")
	}
	ns, name, sock, dev := tapDeviceProcess(b, "emur")
	kernel := netip.MustParsePrefix("10.118.0.1/24")
	emu := netip.MustParsePrefix("10.118.0.2/24")
	var host *board.Host
	pprof.Do(context.Background(), clientLabel, func(context.Context) {
		host, err = board.NewHost(board.HostConfig{MAC: macOf(emu), Addr: emu, Split: &board.SplitConfig{Socket: sock}}, nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := host.Offload(tcpstack.OffloadConfig{}); err != nil {
			b.Fatal(err)
		}
	})
	b.Cleanup(func() { host.Close() })
	dev.waitLog("device started", 1, 10*time.Second)
	ns.moveTAP(b, name, kernel)
	tapRegisteredRead(b, host.Host, emu.Addr(), func(dst netip.AddrPort) {
		script := fmt.Sprintf("exec 3<>/dev/tcp/%s/%d && exec cat /dev/zero >&3", dst.Addr(), dst.Port())
		cmd := exec.Command("ip", "netns", "exec", ns.name, bash, "-c", script)
		if err := cmd.Start(); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	})
}
