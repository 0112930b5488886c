package verbs_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// BenchmarkTransferCPU measures the host CPU per GiB of large transfers
// between two emulated hosts, three ways on the same two hosts in the same
// run, for transfers of 64 KiB and 1 MiB:
//
//   - rdma-write: RDMA Writes from A's registered buffer into a region B
//     registered (no host copy on either side), transferWindow
//     outstanding, every transferSignal-th signaled; A waits on its CQ as
//     PollWait does (busy polling off: arm and sleep);
//   - rdma-read: RDMA Reads by A out of B's region into A's buffer, the
//     same way;
//   - delegated: Write of the same size on a delegated TCP connection from
//     A, read on B into a buffer of the same size (the host copies into
//     the send area and out of the receive buffers).
//
// host-cpu-s/GiB-* is everything but the emulated devices on both hosts
// (internal/cpusplit), dev-cpu-s/GiB-* the devices; rdma-*/delegated are
// the host CPU ratios. b.N is 4 MiB rounds per path. Run with:
//
//	go test ./tcpstack/verbs -run '^$' -bench TransferCPU -benchtime 64x -count 3
func BenchmarkTransferCPU(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		b.Run(fmt.Sprintf("%dKiB", size>>10), func(b *testing.B) { benchTransferCPU(b, size) })
	}
}

const (
	transferWindow = 8
	transferSignal = 2
	transferRound  = 4 << 20
)

func benchTransferCPU(b *testing.B, size int) {
	r := hostrig.New(b, hostrig.Config{})
	nc := hostrig.NodeConfig{LocalSize: size}
	a, z := hostrig.NewNode(b, r.A, nc), hostrig.NewNode(b, r.B, nc)
	hostrig.Connect(b, a, z, 4811)
	a.QP.SetAsyncDoorbell(true)
	region := hostrig.Must[*verbs.Buffer](b)(z.V.AllocBuffer(size))
	rmr := hostrig.Must[*verbs.MR](b)(z.V.RegMR(z.PD, region, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))

	l, err := r.B.ListenOffload(4812)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	var recvd atomic.Int64
	got := make(chan struct{}, 1) // a latch: recvd moved
	go func() {
		s, err := l.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		buf := make([]byte, size)
		var n int64
		for {
			k, err := s.Read(buf)
			n += int64(k)
			recvd.Store(n)
			select {
			case got <- struct{}{}:
			default:
			}
			if err != nil {
				close(got)
				return
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := r.A.DialOffload(ctx, netip.AddrPortFrom(r.B.Addr(), 4812))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })

	paths := []struct {
		name string
		move func(n int) error // moves n transfers of size bytes
	}{
		{"rdma-write", rdmaMover(a, rmr, rings.WRRDMAWrite, size)},
		{"rdma-read", rdmaMover(a, rmr, rings.WRRDMARead, size)},
		{"delegated", tcpMover(c, &recvd, got, size)},
	}
	per := transferRound / size
	for _, p := range paths {
		if err := p.move(per); err != nil { // warm up
			b.Fatalf("%s: %v", p.name, err)
		}
	}
	b.SetBytes(int64(transferRound))
	b.ResetTimer()
	host := make([]float64, len(paths))
	for i, p := range paths {
		var merr error
		sp, err := cpusplit.Measure(func() { merr = p.move(b.N * per) })
		if err != nil {
			// Under -cpuprofile, which the split needs for itself: the
			// transfers run all the same, for the profile.
			merr = p.move(b.N * per)
		}
		if merr != nil {
			b.Fatalf("%s: %v", p.name, merr)
		}
		if err != nil {
			continue
		}
		gib := float64(b.N*transferRound) / (1 << 30)
		host[i] = sp.Host.Seconds() / gib
		b.ReportMetric(host[i], "host-cpu-s/GiB-"+p.name)
		b.ReportMetric(sp.Device.Seconds()/gib, "dev-cpu-s/GiB-"+p.name)
		b.ReportMetric(gib*8*(1<<30)/1e9/sp.Wall.Seconds(), "Gb/s-"+p.name)
	}
	b.StopTimer()
	if host[2] > 0 {
		b.ReportMetric(host[0]/host[2], "write/delegated")
		b.ReportMetric(host[1]/host[2], "read/delegated")
	}
}

// rdmaMover returns a function that moves n transfers of size bytes by
// RDMA Write or Read between a's local buffer and the region of mr.
func rdmaMover(a *hostrig.Node, mr *verbs.MR, op rings.WROpcode, size int) func(n int) error {
	wrs := make([]rings.SendWR, 0, transferWindow)
	wc := make([]rings.Completion, 2*transferWindow)
	var next uint64
	return func(n int) error {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		first := next
		end := next + uint64(n)
		done := first
		for done < end {
			wrs = wrs[:0]
			for next < end && next-done < transferWindow {
				w := rings.SendWR{Opcode: op, WRID: next, RemoteAddr: mr.TO(0), RKey: mr.RKey, NumSGE: 1}
				w.SGL[0] = a.LocalMR.SGE(0, size)
				if (next+1)%transferSignal == 0 || next == end-1 {
					w.Flags = rings.WRSignaled
				}
				wrs = append(wrs, w)
				next++
			}
			if len(wrs) > 0 {
				if _, err := a.QP.PostSendList(wrs); err != nil {
					return err
				}
			}
			k, err := a.CQ.PollWait(ctx, wc, false)
			if err != nil {
				return err
			}
			for _, c := range wc[:k] {
				if c.Status != rings.WCSuccess {
					return fmt.Errorf("completion %v", &c)
				}
				done = c.WRID + 1
			}
		}
		return nil
	}
}

// tcpMover returns a function that writes n transfers of size bytes on c
// and waits until the reader counted them.
func tcpMover(c net.Conn, recvd *atomic.Int64, got <-chan struct{}, size int) func(n int) error {
	buf := make([]byte, size)
	var sent int64
	return func(n int) error {
		for range n {
			if _, err := c.Write(buf); err != nil {
				return err
			}
		}
		sent += int64(n * size)
		for recvd.Load() < sent {
			if _, ok := <-got; !ok {
				return io.ErrUnexpectedEOF
			}
		}
		return nil
	}
}
