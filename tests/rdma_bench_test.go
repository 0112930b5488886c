package tests

import (
	"context"
	"fmt"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// BenchmarkRDMA measures RDMA between two emulated hosts over the
// in-memory wire, beside a delegated TCP stream between the same kind of
// host pair in the same run:
//
//   - write/SIZE, read/SIZE: RDMA Writes (Reads) of SIZE bytes from A into
//     (out of) a registered region at B, rdmaBenchWindow outstanding, every
//     rdmaBenchSignal-th signaled; throughput from b.SetBytes;
//   - send-rtt: a 64-byte Send from A, B's 64-byte Send back: ns/op is one
//     round trip;
//   - tcp-delegated: 64 KiB writes on a delegated TCP connection (the
//     engines segment and place; the host copies into the send area and
//     out of the receive buffers).
//
// host-copy-B/op is the payload bytes both hosts' CPUs copied per
// operation (tcpstack.DriverStats.HostCopyBytes): 0 for RDMA. Run with:
//
//	go test ./tests/ -run '^$' -bench RDMA -count 3
func BenchmarkRDMA(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run("write/"+rdmaSizeName(size), func(b *testing.B) { rdmaBenchStream(b, rings.WRRDMAWrite, size) })
	}
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		b.Run("read/"+rdmaSizeName(size), func(b *testing.B) { rdmaBenchStream(b, rings.WRRDMARead, size) })
	}
	b.Run("send-rtt", rdmaBenchSendRTT)
	b.Run("tcp-delegated", rdmaBenchDelegatedTCP)
}

const (
	rdmaBenchWindow = 16
	rdmaBenchSignal = 4
	rdmaBenchPort   = 4950
)

func rdmaSizeName(n int) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%dMiB", n>>20)
	}
	return fmt.Sprintf("%dKiB", n>>10)
}

// rdmaBenchPair is two connected nodes.
func rdmaBenchPair(b *testing.B) (a, z *rdmaNode) {
	ha, hb := rdmaHostsOn(b, port.WireConfig{}, nil, nil)
	a, z = newRDMANode(b, ha, 2*rdmaBenchWindow), newRDMANode(b, hb, 2*rdmaBenchWindow)
	hostrig.Connect(b, a, z, rdmaBenchPort)
	// A's first message puts B in RTS.
	s := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: 1 << 40, NumSGE: 1}
	s.SGL[0] = a.LocalMR.SGE(0, 8)
	if err := a.QP.PostSend(&s); err != nil {
		b.Fatal(err)
	}
	testutil.WaitCompletions(b, a.CQ, 1)
	c := testutil.WaitCompletions(b, z.CQ, 1)[0]
	if err := z.PostRecvs(z.QP, z.Slot(c)); err != nil {
		b.Fatal(err)
	}
	return a, z
}

func rdmaCopies(hs ...*tcpstack.Host) uint64 {
	var n uint64
	for _, h := range hs {
		n += h.Driver.Stats().HostCopyBytes
	}
	return n
}

// rdmaPollSome returns at least one completion: it polls, yields a few
// times, then arms the CQ and sleeps on its event.
func rdmaPollSome(b *testing.B, cq *verbs.CQ, wc []rings.Completion) int {
	for range 8 {
		if n := cq.Poll(wc); n > 0 {
			return n
		}
		runtime.Gosched()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	n, err := cq.PollWait(ctx, wc, false)
	if err != nil {
		b.Fatalf("no completion: %v", err)
	}
	return n
}

func rdmaBenchStream(b *testing.B, op rings.WROpcode, size int) {
	a, z := rdmaBenchPair(b)
	buf := hostrig.Must[*verbs.Buffer](b)(z.V.AllocBuffer(size))
	mr := hostrig.Must[*verbs.MR](b)(z.V.RegMR(z.PD, buf, verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead))
	wr := func(i int) rings.SendWR {
		w := rings.SendWR{Opcode: op, WRID: uint64(i), RemoteAddr: mr.TO(0), RKey: mr.RKey, NumSGE: 1}
		w.SGL[0] = a.LocalMR.SGE(0, size)
		return w
	}
	wrs := make([]rings.SendWR, 0, rdmaBenchWindow)
	wc := make([]rings.Completion, 32)
	run := func(n int) {
		posted, done := 0, 0
		for done < n {
			wrs = wrs[:0]
			for posted+len(wrs) < n && posted+len(wrs)-done < rdmaBenchWindow {
				i := posted + len(wrs)
				w := wr(i)
				if (i+1)%rdmaBenchSignal == 0 || i == n-1 {
					w.Flags = rings.WRSignaled
				}
				wrs = append(wrs, w)
			}
			if len(wrs) > 0 {
				k, err := a.QP.PostSendList(wrs)
				posted += k
				if err != nil {
					b.Fatal(err)
				}
			}
			k := rdmaPollSome(b, a.CQ, wc)
			for _, c := range wc[:k] {
				if c.Status != rings.WCSuccess {
					b.Fatalf("completion %+v (QP %v %v)", c, a.QP.State(), a.QP.Err())
				}
				done = int(c.WRID) + 1
			}
		}
	}
	run(2 * rdmaBenchWindow) // warm up
	b.SetBytes(int64(size))
	c0 := rdmaCopies(a.H, z.H)
	b.ResetTimer()
	run(b.N)
	b.StopTimer()
	b.ReportMetric(float64(rdmaCopies(a.H, z.H)-c0)/float64(b.N), "host-copy-B/op")
}

func rdmaBenchSendRTT(b *testing.B) {
	a, z := rdmaBenchPair(b)
	const n = 64
	ping := func(node *rdmaNode, i int) rings.SendWR {
		w := rings.SendWR{Opcode: rings.WRSend, WRID: uint64(i), NumSGE: 1}
		w.SGL[0] = node.LocalMR.SGE(0, n)
		if i%16 == 15 {
			w.Flags = rings.WRSignaled // frees the SQ without a completion each time
		}
		return w
	}
	// waitRecv returns the next receive completion, reposting its buffer.
	waitRecv := func(node *rdmaNode, wc []rings.Completion, pending *[]rings.Completion) bool {
		for {
			for len(*pending) > 0 {
				c := (*pending)[0]
				*pending = (*pending)[1:]
				if c.Status != rings.WCSuccess {
					return false
				}
				if c.Opcode == rings.WCRecv {
					if err := node.PostRecvs(node.QP, node.Slot(c)); err != nil {
						return false
					}
					return true
				}
			}
			k := 0
			for range 8 {
				if k = node.CQ.Poll(wc); k > 0 {
					break
				}
				runtime.Gosched()
			}
			if k == 0 {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				var err error
				k, err = node.CQ.PollWait(ctx, wc, false)
				cancel()
				if err != nil {
					return false
				}
			}
			*pending = append((*pending)[:0], wc[:k]...)
		}
	}
	stop := make(chan struct{})
	echoDone := make(chan struct{})
	go func() { // B echoes every Send
		defer close(echoDone)
		wc := make([]rings.Completion, 16)
		var pending []rings.Completion
		for i := 0; ; i++ {
			if !waitRecv(z, wc, &pending) {
				return
			}
			select {
			case <-stop:
				return
			default:
			}
			w := ping(z, i)
			if err := z.QP.PostSend(&w); err != nil {
				return
			}
		}
	}()
	wc := make([]rings.Completion, 16)
	var pending []rings.Completion
	round := func(i int) {
		w := ping(a, i)
		if err := a.QP.PostSend(&w); err != nil {
			b.Fatal(err)
		}
		if !waitRecv(a, wc, &pending) {
			b.Fatalf("round trip %d failed (QP %v %v)", i, a.QP.State(), a.QP.Err())
		}
	}
	for i := range 100 {
		round(i)
	}
	c0 := rdmaCopies(a.H, z.H)
	b.ResetTimer()
	for i := range b.N {
		round(100 + i)
	}
	b.StopTimer()
	b.ReportMetric(float64(rdmaCopies(a.H, z.H)-c0)/float64(b.N), "host-copy-B/op")
	close(stop)
	a.QP.Destroy()
	z.QP.Destroy()
	<-echoDone
}

func rdmaBenchDelegatedTCP(b *testing.B) {
	ha, hb := rdmaHostsOn(b, port.WireConfig{}, nil, nil)
	l, err := hb.ListenOffload(rdmaBenchPort + 1)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	sink(l)
	c, err := ha.DialOffload(context.Background(), netip.AddrPortFrom(hb.Addr(), rdmaBenchPort+1))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	buf := make([]byte, 64<<10)
	for range 64 {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.SetBytes(int64(len(buf)))
	c0 := rdmaCopies(ha, hb)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64(rdmaCopies(ha, hb)-c0)/float64(b.N), "host-copy-B/op")
}
