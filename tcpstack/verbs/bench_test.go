package verbs_test

import (
	"context"
	"io"
	"net"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/rings"
)

// BenchmarkSendRTT measures a 1-byte request/response round trip, one
// outstanding, between two emulated hosts, three ways on the same two
// hosts in the same run:
//
//   - rdma-wake: a 1-byte inline RDMA Send each way on a QP; the waiter
//     finds its CQ empty, arms it (ARM_CQ) and sleeps until the CQ event
//     (the interrupt goroutine's notification) wakes it;
//   - rdma-poll: the same on a second QP whose CQs busy-poll
//     (CQ.SetBusyPoll): the waiter spins on the CQ ring in host memory;
//   - delegated: a 1-byte write and read each way on a delegated TCP
//     connection (Host.DialOffload/ListenOffload).
//
// b.N is rounds; each round runs sendRTTBatch round trips of each path in
// turn (the order rotating), so all three see the same machine from one
// moment to the next. It reports each path's median round trip in µs and
// the ratios to delegated TCP (the sockets-direct bar rtt/delegated is
// ≤ 0.7). A second phase then runs sendRTTCPU round trips of each path
// under the CPU split (internal/cpusplit) and reports the host's CPU per
// round trip (host-us/rtt-*; the device's in dev-us/rtt-*): what busy
// polling costs. Run with:
//
//	go test ./tcpstack/verbs -run '^$' -bench SendRTT -benchtime 20x -count 3
func BenchmarkSendRTT(b *testing.B) {
	r := hostrig.New(b, hostrig.Config{})
	nc := hostrig.NodeConfig{CQEntries: 64, SQDepth: 32, RecvN: 8, RecvSize: 64, LocalSize: 4 << 10}
	wakeA, wakeB := hostrig.NewNode(b, r.A, nc), hostrig.NewNode(b, r.B, nc)
	pollA, pollB := hostrig.NewNode(b, r.A, nc), hostrig.NewNode(b, r.B, nc)
	pollA.CQ.SetBusyPoll(sendRTTBusyPoll)
	pollB.CQ.SetBusyPoll(sendRTTBusyPoll)
	hostrig.Connect(b, wakeA, wakeB, 4801)
	hostrig.Connect(b, pollA, pollB, 4802)
	for _, n := range []*hostrig.Node{wakeA, wakeB, pollA, pollB} {
		n.QP.SetAsyncDoorbell(true) // as sockets direct posts
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.Cleanup(cancel)
	go rdmaEcho(ctx, wakeB)
	go rdmaEcho(ctx, pollB)

	l, err := r.B.ListenOffload(4803)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		s, err := l.Accept()
		if err != nil {
			return
		}
		defer s.Close()
		one := make([]byte, 1)
		for {
			if _, err := io.ReadFull(s, one); err != nil {
				return
			}
			if _, err := s.Write(one); err != nil {
				return
			}
		}
	}()
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	c, err := r.A.DialOffload(dctx, netip.AddrPortFrom(r.B.Addr(), 4803))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })

	paths := []struct {
		name string
		rtt  func() error
	}{
		{"rdma-wake", newRDMAPing(ctx, wakeA)},
		{"rdma-poll", newRDMAPing(ctx, pollA)},
		{"delegated", newTCPPing(c)},
	}
	samples := make([][]time.Duration, len(paths))
	run := func(p int, n int, record bool) {
		for range n {
			t0 := time.Now()
			if err := paths[p].rtt(); err != nil {
				b.Fatalf("%s: %v", paths[p].name, err)
			}
			if record {
				samples[p] = append(samples[p], time.Since(t0))
			}
		}
	}
	for p := range paths {
		run(p, 200, false) // warm up: QPs in RTS, windows open
	}
	b.ResetTimer()
	for round := range b.N {
		for k := range paths {
			run((round+k)%len(paths), sendRTTBatch, true)
		}
	}
	b.StopTimer()
	med := make([]float64, len(paths))
	for p := range paths {
		slices.Sort(samples[p])
		med[p] = float64(samples[p][len(samples[p])/2].Nanoseconds()) / 1e3
		b.ReportMetric(med[p], "us/rtt-"+paths[p].name)
	}
	b.ReportMetric(med[0]/med[2], "wake/delegated")
	b.ReportMetric(med[1]/med[2], "poll/delegated")

	// The CPU phase: busy polling is paid for in host CPU.
	for p := range paths {
		sp, err := cpusplit.Measure(func() { run(p, sendRTTCPU, false) })
		if err != nil {
			b.Logf("no CPU split: %v", err)
			break
		}
		b.ReportMetric(sp.Host.Seconds()*1e6/sendRTTCPU, "host-us/rtt-"+paths[p].name)
		b.ReportMetric(sp.Device.Seconds()*1e6/sendRTTCPU, "dev-us/rtt-"+paths[p].name)
	}
	st := pollA.CQ.Stats()
	if st.BusySpins > 0 {
		b.ReportMetric(float64(st.BusySpinHits)/float64(st.BusySpins), "poll-hit-ratio")
	}
}

const (
	sendRTTBatch    = 100
	sendRTTCPU      = 50000
	sendRTTBusyPoll = 500 * time.Microsecond
	rttRecvWRID     = 1 << 32
)

// rttSend is a 1-byte inline Send; every 8th is signaled (that frees the
// SQ entries of the unsignaled ones before it).
func rttSend(i uint64) rings.SendWR {
	w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRInline, WRID: i, InlineLen: 1}
	w.InlineData[0] = byte(i)
	if i%8 == 7 {
		w.Flags |= rings.WRSignaled
	}
	return w
}

// waitRecv waits for the next receive completion on n's CQ (skipping
// send completions) and returns its slot, which the caller reposts once
// its own Send is on its way (as an RDMA application does: the reply
// first, the bookkeeping after).
func waitRecv(ctx context.Context, n *hostrig.Node, wc []rings.Completion) (int, error) {
	for {
		k, err := n.CQ.PollWait(ctx, wc, false)
		if err != nil {
			return -1, err
		}
		slot := -1
		for _, c := range wc[:k] {
			if c.Status != rings.WCSuccess {
				return -1, &wcError{c}
			}
			if c.Opcode == rings.WCRecv {
				slot = n.Slot(c)
			}
		}
		if slot >= 0 {
			return slot, nil
		}
	}
}

// repost posts receive slot s again (none if s < 0).
func repost(n *hostrig.Node, s int) error {
	if s < 0 {
		return nil
	}
	w := rings.RecvWR{WRID: hostrig.RecvWRID(s), NumSGE: 1}
	w.SGL[0] = n.RecvMR.SGE(s*n.Cfg.RecvSize, n.Cfg.RecvSize)
	return n.QP.PostRecv(&w)
}

type wcError struct{ c rings.Completion }

func (e *wcError) Error() string { return "completion " + e.c.String() }

// newRDMAPing returns one round trip from node a: a Send, then the echo's
// receive completion.
func newRDMAPing(ctx context.Context, a *hostrig.Node) func() error {
	wc := make([]rings.Completion, 8)
	var i uint64
	var w rings.SendWR
	slot := -1 // the last round's receive slot, reposted behind this Send
	return func() error {
		w = rttSend(i)
		i++
		if err := a.QP.PostSend(&w); err != nil {
			return err
		}
		if err := repost(a, slot); err != nil {
			return err
		}
		var err error
		slot, err = waitRecv(ctx, a, wc)
		return err
	}
}

// rdmaEcho answers every message on n's QP with a 1-byte Send until ctx
// ends or the QP fails.
func rdmaEcho(ctx context.Context, n *hostrig.Node) {
	wc := make([]rings.Completion, 8)
	for i := uint64(0); ; i++ {
		slot, err := waitRecv(ctx, n, wc)
		if err != nil {
			return
		}
		w := rttSend(i)
		if n.QP.PostSend(&w) != nil || repost(n, slot) != nil {
			return
		}
	}
}

// newTCPPing returns one round trip on c: a 1-byte write, the 1-byte echo.
func newTCPPing(c net.Conn) func() error {
	one := make([]byte, 1)
	return func() error {
		if _, err := c.Write(one); err != nil {
			return err
		}
		_, err := io.ReadFull(c, one)
		return err
	}
}
