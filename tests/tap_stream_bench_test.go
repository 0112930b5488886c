package tests

import (
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack/services"
)

// BenchmarkTAPStream measures bulk TCP between the Linux kernel (the
// client, in the namespace on the TAP's far side) and each server variant
// of the scale lab, side by side in one run: the emulated host with its
// connections delegated, the same host on netstack, and the kernel itself
// in a second namespace over a veth pair; and, as the baseline of the TAP
// offloads, a second emulated host, delegated, whose TAP is opened without
// them (delegated-plain: a read and a write per 1,500-byte frame). Each direction: the kernel sends
// to the server's discard service (to-server), and reads from its source
// service (from-server); without loss, then with 2% of TCP packets dropped
// at random each way (nftables in the client's namespace). Each iteration
// moves EMUNIC_TAP_STREAM_MB MiB (default 256); the metric is MB/s.
// EMUNIC_TAP_STREAM_DEBUG=1 logs the delegated engines' recovery counters
// and the TAP's (super-frames, drops) for each run. cpu-s/GiB is the test
// process's CPU time per GiB moved: the emulated host and device, and the
// kernel's socket calls on the process's threads (the client's, and the
// kernel server's), not the kernel's work elsewhere (softirq threads).
// Root only:
//
//	go test ./tests -run '^$' -bench TAPStream -benchtime 1x -count 3
func BenchmarkTAPStream(b *testing.B) {
	s := newScaleBench(b, 88)
	plain := newTAPOffloadLabWith(b, 89, port.TAPOptions{NoOffload: true})
	if plain.tap.Offload() || !s.lab.tap.Offload() {
		b.Fatalf("offloads: %v on the plain TAP, %v on the other", plain.tap.Offload(), s.lab.tap.Offload())
	}
	s.targets["delegated-plain"] = plain.emu.Addr()
	s.plain = plain
	s.listen["delegated-plain"] = func(p uint16) (net.Listener, error) { return plain.host.ListenOffload(p) }
	variants := []string{"delegated", "delegated-plain", "netstack", "kernel"}
	for _, v := range variants {
		for _, svc := range []struct {
			srv  *services.Server
			port uint16
		}{{services.NewDiscard(nil), services.DiscardPort}, {services.NewSource(nil), services.SourcePort}} {
			l, err := s.listen[v](svc.port)
			if err != nil {
				b.Fatal(err)
			}
			go svc.srv.Serve(l)
			b.Cleanup(func() { svc.srv.Close() })
		}
	}
	size := int64(256 << 20)
	if mb, err := strconv.Atoi(os.Getenv("EMUNIC_TAP_STREAM_MB")); err == nil && mb > 0 {
		size = int64(mb) << 20
	}
	for _, loss := range []int{0, 2} {
		if loss > 0 {
			for _, l := range []*tapOffloadLab{s.lab, plain} {
				l.injectLoss(b, loss)
				b.Cleanup(func() {
					exec.Command("ip", "netns", "exec", l.ns.name, "nft", "delete", "table", "inet", "emuloss").Run()
				})
			}
		}
		for _, dir := range []string{"to-server", "from-server"} {
			for _, v := range variants {
				b.Run(fmt.Sprintf("loss=%d%%/%s/%s", loss, dir, v), func(b *testing.B) {
					var total, cpu time.Duration
					lab := s.lab
					if v == "delegated-plain" {
						lab = plain
					}
					e0 := lab.engine()
					for i := 0; i < b.N; i++ {
						c0 := cpusplit.Process()
						total += s.stream(b, v, dir == "to-server", size)
						cpu += cpusplit.Process() - c0
					}
					if os.Getenv("EMUNIC_TAP_STREAM_DEBUG") != "" && strings.HasPrefix(v, "delegated") {
						e := lab.engine()
						b.Logf("engine: %d segs, %d retransmitted, %d fast retransmits, %d partial ACKs, %d dup ACKs, %d RTOs",
							e.TxSegments-e0.TxSegments, e.TxRetransSegs-e0.TxRetransSegs, e.FastRetransmits-e0.FastRetransmits, e.PartialAcks-e0.PartialAcks, e.DupAcksRx-e0.DupAcksRx, e.RTOExpired-e0.RTOExpired)
						b.Logf("port: %v, %d super-frames", lab.tap.Stats(), lab.tap.Stats().RxGSOFrames)
						b.Logf("probes %d, spurious RTOs %d, SACK recoveries %d; legacy uploads %d, user buffers %d, zero windows %d, ACKs %d", e.TailLossProbes-e0.TailLossProbes, e.SpuriousTimeouts-e0.SpuriousTimeouts, e.SACKRecoveries-e0.SACKRecoveries, e.LegacyUploads-e0.LegacyUploads, e.UserBufsDone-e0.UserBufsDone, e.ZeroWindowsSent-e0.ZeroWindowsSent, e.AcksSent-e0.AcksSent)
					}
					b.ReportMetric(float64(size)*float64(b.N)/total.Seconds()/1e6, "MB/s")
					// The test process's CPU (both ends: the kernel's
					// sending or receiving socket runs on its threads
					// too), per GiB moved.
					b.ReportMetric(cpu.Seconds()/(float64(size)*float64(b.N)/(1<<30)), "cpu-s/GiB")
				})
			}
		}
	}
}

// stream moves size bytes between the kernel client and variant v and
// returns how long it took: to the server's discard (until the server has
// read everything and closed), or from its source (until the client has
// read size bytes).
func (s *scaleBench) stream(b *testing.B, v string, toServer bool, size int64) time.Duration {
	port := uint16(services.SourcePort)
	if toServer {
		port = services.DiscardPort
	}
	ns := s.lab.ns
	if v == "delegated-plain" {
		ns = s.plain.ns
	}
	c, err := ns.dial(s.addr(v, port))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	return kernelStream(b, c, toServer, size)
}

// kernelStream moves size bytes on the kernel's connection c: it writes them
// and waits for the server's FIN (toServer), or reads them.
func kernelStream(b *testing.B, c net.Conn, toServer bool, size int64) time.Duration {
	c.SetDeadline(time.Now().Add(10 * time.Minute))
	start := time.Now()
	if toServer {
		buf := make([]byte, 1<<20)
		for left := size; left > 0; left -= int64(len(buf)) {
			if _, err := c.Write(buf[:min(int64(len(buf)), left)]); err != nil {
				b.Fatal(err)
			}
		}
		c.(interface{ CloseWrite() error }).CloseWrite()
		if _, err := io.Copy(io.Discard, c); err != nil { // the server's FIN: it read everything
			b.Fatal(err)
		}
	} else if _, err := io.CopyN(io.Discard, c, size); err != nil {
		b.Fatal(err)
	}
	return time.Since(start)
}
