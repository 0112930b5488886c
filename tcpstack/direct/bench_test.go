package direct

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/tcpstack"
)

// BenchmarkDirect compares sockets direct with delegated TCP
// (Host.DialOffload/ListenOffload) and netstack TCP between the same two
// emulated hosts, in the same run: one-way throughput with writes of 64 B,
// 4 KiB, 64 KiB and 1 MiB (a discarding reader on the other host; one op
// is 64 KiB of small writes, or one large write), and a
// 1-byte ping-pong (ns/op is one round trip). direct is the default
// configuration (RDMA Read for writes of 64 KiB and more, inline below),
// direct-write prefers RDMA Write. CPU is split with pprof
// labels (internal/cpusplit): host-cpu-s/GiB is everything but the
// emulated devices (applications, netstack, driver, verbs, the switch's
// poller, the runtime). Run with:
//
//	go test ./tcpstack/direct -run '^$' -bench Direct -benchtime 1000x -count 3
func BenchmarkDirect(b *testing.B) {
	paths := []string{"direct", "direct-write", "delegated", "netstack"}
	for _, size := range []int{64, 4 << 10, 64 << 10, 1 << 20} {
		for _, p := range paths {
			b.Run(fmt.Sprintf("stream/%s/%s", sizeName(size), p), func(b *testing.B) { benchStream(b, p, size) })
		}
	}
	for _, p := range paths {
		b.Run("pingpong/"+p, func(b *testing.B) { benchPingPong(b, p) })
	}
}

func sizeName(n int) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%dMiB", n>>20)
	case n >= 1<<10:
		return fmt.Sprintf("%dKiB", n>>10)
	}
	return fmt.Sprintf("%dB", n)
}

var benchPort = uint16(9500)

// benchCfg is the sockets-direct configuration the benchmark uses.
var benchCfg = Config{}

// noSplit says to run without the CPU split: under -cpuprofile, which it
// would conflict with (a profile of one path: go test -run '^$' -bench
// 'Direct/stream/1MiB/direct$' -benchtime 4000x -cpuprofile cpu.prof).
func noSplit() bool {
	f := flag.Lookup("test.cpuprofile")
	return f != nil && f.Value.String() != ""
}

// benchPair connects the two hosts of a fresh rig on path p; serve runs on
// the accepted side.
func benchPair(b *testing.B, path string, serve func(net.Conn)) net.Conn {
	a, h := rig(b)
	benchPort++
	port := benchPort
	var l net.Listener
	var err error
	cfg := benchCfg
	if path == "direct-write" {
		path, cfg.Transfer = "direct", TransferWrite
	}
	switch path {
	case "direct":
		l, err = Listen(h, port, cfg)
	case "delegated":
		l, err = h.ListenOffload(port)
	default:
		l, err = h.Listen(port)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { l.Close() })
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		serve(c)
		c.Close()
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dst := netip.AddrPortFrom(h.Addr(), port)
	var c net.Conn
	switch path {
	case "direct":
		c, err = Dial(ctx, a, dst, cfg)
		if err == nil && PathOf(c).Path != PathRDMA {
			err = fmt.Errorf("direct took %v", PathOf(c))
		}
	case "delegated":
		c, err = a.DialOffload(ctx, dst)
	default:
		c, err = a.Dial(ctx, dst)
	}
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	_ = board.DefaultMinRTO
	return c
}

func benchStream(b *testing.B, path string, size int) {
	c := benchPair(b, path, func(s net.Conn) { io.Copy(io.Discard, s) })
	buf := make([]byte, size)
	for range max(16, (4<<20)/size) { // warm up
		if _, err := c.Write(buf); err != nil {
			b.Fatal(err)
		}
	}
	// One op is at least 64 KiB: small writes go in batches, so that
	// every size moves enough bytes for the CPU profile to mean something.
	batch := max(1, (64<<10)/size)
	b.SetBytes(int64(size * batch))
	b.ResetTimer()
	var werr error
	measure := cpusplit.Measure
	split := !noSplit()
	if !split {
		measure = func(f func()) (cpusplit.Split, error) {
			start := time.Now()
			f()
			return cpusplit.Split{Wall: time.Since(start)}, nil
		}
	}
	sp, err := measure(func() {
		for range b.N * batch {
			if _, werr = c.Write(buf); werr != nil {
				return
			}
		}
	})
	b.StopTimer()
	if werr != nil {
		b.Fatal(werr)
	}
	if err != nil {
		b.Skip(err)
	}
	n := float64(b.N * batch)
	gib := n * float64(size) / (1 << 30)
	b.ReportMetric(sp.Wall.Seconds()*1e9/n, "ns/write")
	if split {
		b.ReportMetric(sp.Host.Seconds()/gib, "host-cpu-s/GiB")
		b.ReportMetric(sp.Device.Seconds()/gib, "dev-cpu-s/GiB")
	}
}

func benchPingPong(b *testing.B, path string) {
	c := benchPair(b, path, func(s net.Conn) {
		one := make([]byte, 1)
		for {
			if _, err := io.ReadFull(s, one); err != nil {
				return
			}
			if _, err := s.Write(one); err != nil {
				return
			}
		}
	})
	one := make([]byte, 1)
	b.ResetTimer()
	for range b.N {
		if _, err := c.Write(one); err != nil {
			b.Fatal(err)
		}
		if _, err := io.ReadFull(c, one); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkDirectVsDelegated compares a sockets-direct connection with a
// delegated TCP one between the same two hosts, both open, measured in
// turn in every round (b.N rounds), so both see the same machine from one
// moment to the next. Each round, on each path:
//
//   - registered: 512 MiB in 256 KiB Writes from memory of the provider
//     (Alloc) to a reader that Reads 256 KiB at a time into provider
//     memory (sockets direct: zero copy both ends; delegated TCP has no
//     registered memory and moves the same sizes from and into ordinary
//     buffers), timed until the reader has it all, host CPU split off
//     with pprof labels (internal/cpusplit: everything but the emulated
//     devices: both hosts' applications, stacks, drivers, the switch and
//     its poller, the runtime);
//   - plain: 128 MiB in ordinary 64 KiB Writes, read 256 KiB at a time;
//   - rtt: 1-byte request/response, one outstanding, 200 of them.
//
// It reports each ratio, sockets direct over delegated TCP, as the median
// over rounds (cpu/delegated: the ratio of the totals over all rounds, as
// a round's delegated figure is a few profile samples): cpu/delegated
// (host CPU per GiB, registered), tput/delegated
// (registered), tput-plain/delegated, rtt/delegated (median round trip);
// and direct's and delegated's own figures, and the time sockets direct's
// pollers spent busy polling per GiB (poll-s/GiB, registered: an upper
// bound on the CPU polling cost, which is part of direct's host CPU). Run
// with:
//
//	go test ./tcpstack/direct -run '^$' -bench DirectVsDelegated -benchtime 5x -count 3
func BenchmarkDirectVsDelegated(b *testing.B) {
	if noSplit() {
		b.Skip("the CPU split needs the profiler (not under -cpuprofile)")
	}
	a, h := rig(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	benchPort++
	dl, err := Listen(h, benchPort, Config{})
	if err != nil {
		b.Fatal(err)
	}
	defer dl.Close()
	dc, err := Dial(ctx, a, netip.AddrPortFrom(h.Addr(), benchPort), Config{})
	if err != nil || PathOf(dc).Path != PathRDMA {
		b.Fatalf("direct: %v %v", err, PathOf(dc))
	}
	defer dc.Close()
	ds, err := dl.Accept()
	if err != nil {
		b.Fatal(err)
	}
	benchPort++
	ol, err := h.ListenOffload(benchPort + 1000)
	if err != nil {
		b.Fatal(err)
	}
	defer ol.Close()
	oc, err := a.DialOffload(ctx, netip.AddrPortFrom(h.Addr(), benchPort+1000))
	if err != nil {
		b.Fatal(err)
	}
	defer oc.Close()
	os2, err := ol.Accept()
	if err != nil {
		b.Fatal(err)
	}
	// 512 MiB registered: delegated TCP's host CPU is a few profile
	// samples (10 ms each) per round at that.
	const regChunk, plainChunk, regSize = 512 << 20, 128 << 20, 256 << 10
	alloc := func(h *tcpstack.Host) []byte {
		buf, err := Alloc(h, regSize)
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = buf.Free() })
		return buf.Bytes()
	}
	type path struct {
		c, s     net.Conn
		src, dst []byte // registered (direct) or ordinary memory
	}
	paths := []path{
		{dc, ds, alloc(a), alloc(h)},
		{oc, os2, make([]byte, regSize), make([]byte, regSize)},
	}
	// Ordinary memory for the plain transfers, both ends.
	plain, plainDst := make([]byte, 64<<10), make([]byte, regSize)
	// stream writes chunk bytes from src in len(src) writes to a reader
	// reading into dst, and returns the time and its CPU split.
	stream := func(p path, src, dst []byte, chunk int) cpusplit.Split {
		done := make(chan error, 1)
		go func() {
			n := 0
			for n < chunk {
				k, err := p.s.Read(dst)
				n += k
				if err != nil {
					done <- err
					return
				}
			}
			done <- nil
		}()
		var werr error
		sp, err := cpusplit.Measure(func() {
			for range chunk / len(src) {
				if _, werr = p.c.Write(src); werr != nil {
					return
				}
			}
			werr = <-done
		})
		if err != nil {
			b.Skip(err)
		}
		if werr != nil {
			b.Fatal(werr)
		}
		return sp
	}
	// rtt returns the median of n 1-byte round trips.
	rtt := func(p path, n int) time.Duration {
		go func() {
			one := make([]byte, 1)
			for range n {
				if _, err := io.ReadFull(p.s, one); err != nil {
					return
				}
				if _, err := p.s.Write(one); err != nil {
					return
				}
			}
		}()
		one := make([]byte, 1)
		ts := make([]float64, n)
		for i := range n {
			start := time.Now()
			if _, err := p.c.Write(one); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(p.c, one); err != nil {
				b.Fatal(err)
			}
			ts[i] = float64(time.Since(start))
		}
		return time.Duration(testutil.Median(ts))
	}
	for _, p := range paths { // warm up
		stream(p, p.src, p.dst, plainChunk)
		stream(p, plain, plainDst, plainChunk)
		rtt(p, 50)
	}
	gib := float64(regChunk) / (1 << 30)
	var cpu, tput, tputPlain, rt [2][]float64
	var pollPerGiB []float64
	b.ResetTimer()
	for range b.N {
		for i, p := range paths {
			poll0 := HostStats(a).PollSpinTime + HostStats(h).PollSpinTime
			sp := stream(p, p.src, p.dst, regChunk)
			if i == 0 {
				poll := HostStats(a).PollSpinTime + HostStats(h).PollSpinTime - poll0
				pollPerGiB = append(pollPerGiB, poll.Seconds()/gib)
			}
			cpu[i] = append(cpu[i], sp.Host.Seconds()/gib)
			tput[i] = append(tput[i], regChunk/sp.Wall.Seconds()/1e6)
			sp = stream(p, plain, plainDst, plainChunk)
			tputPlain[i] = append(tputPlain[i], plainChunk/sp.Wall.Seconds()/1e6)
			rt[i] = append(rt[i], float64(rtt(p, 200)))
		}
	}
	b.StopTimer()
	ratio := func(x [2][]float64) float64 {
		r := make([]float64, len(x[0]))
		for k := range r {
			r[k] = x[0][k] / x[1][k]
		}
		return testutil.Median(r)
	}
	// CPU: the ratio of the totals over every round (a round's delegated
	// figure is a few profile samples).
	sum := func(x []float64) float64 {
		t := 0.0
		for _, v := range x {
			t += v
		}
		return t
	}
	b.ReportMetric(sum(cpu[0])/sum(cpu[1]), "cpu/delegated")
	b.ReportMetric(ratio(tput), "tput/delegated")
	b.ReportMetric(ratio(tputPlain), "tput-plain/delegated")
	b.ReportMetric(ratio(rt), "rtt/delegated")
	for i, name := range []string{"direct", "delegated"} {
		b.ReportMetric(sum(cpu[i])/float64(len(cpu[i])), name+"-host-cpu-s/GiB")
		b.ReportMetric(testutil.Median(tput[i]), name+"-MB/s")
		b.ReportMetric(testutil.Median(tputPlain[i]), name+"-plain-MB/s")
		b.ReportMetric(testutil.Median(rt[i])/1e3, name+"-rtt-µs")
	}
	b.ReportMetric(testutil.Median(pollPerGiB), "direct-poll-s/GiB")
	if p := PathOf(dc); p.ZeroCopySends == 0 || PathOf(ds).ZeroCopyRecvs == 0 {
		b.Errorf("the registered transfers did not go zero copy: %v; %v", p, PathOf(ds))
	}
}
