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

// BenchmarkDirectVsDelegated measures the bar's ratio the way the rings'
// RingVsChannel does: sockets-direct and delegated TCP connections between
// the same two hosts, all open, written in turn in chunks of 32 MiB (each
// timed until the reader on B has received the whole chunk), so all see
// the same machine from one moment to the next; it reports the median
// per-round ratio of direct's throughput to delegated's and the medians.
// direct is the default configuration; crc the same with MPA's CRC
// (Config.CRC); before is the sender as it was before MPA CRC went off by
// default and chunks were coalesced (CRC on, every chunk sent at once),
// all in the same rounds. b.N is the number of rounds. Run with:
//
//	go test ./tcpstack/direct -run '^$' -bench DirectVsDelegated -benchtime 9x
func BenchmarkDirectVsDelegated(b *testing.B) {
	for _, size := range []int{64 << 10, 1 << 20} {
		for _, tr := range []Transfer{TransferRead, TransferWrite} {
			b.Run(fmt.Sprintf("%s/%v", sizeName(size), tr), func(b *testing.B) { benchVs(b, size, tr) })
		}
	}
}

// countingSink reads c and reports every byte count it reached on got.
type countingSink struct {
	got chan int64
}

func newCountingSink(c net.Conn) *countingSink {
	s := &countingSink{got: make(chan int64, 1024)}
	go func() {
		buf := make([]byte, 256<<10)
		var n int64
		for {
			k, err := c.Read(buf)
			n += int64(k)
			if k > 0 {
				select {
				case s.got <- n:
				default:
				}
			}
			if err != nil {
				close(s.got)
				return
			}
		}
	}()
	return s
}

// until waits until the sink has counted want bytes.
func (s *countingSink) until(want int64) bool {
	for n := range s.got {
		if n >= want {
			return true
		}
	}
	return false
}

func benchVs(b *testing.B, size int, tr Transfer) {
	a, h := rig(b)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var conns []net.Conn
	var sinks []*countingSink
	accept := func(l net.Listener) {
		s, err := l.Accept()
		if err != nil {
			b.Fatal(err)
		}
		sinks = append(sinks, newCountingSink(s))
	}
	// direct, crc, before, delegated.
	for _, cfg := range []Config{{Transfer: tr}, {Transfer: tr, CRC: true}, {Transfer: tr, CRC: true, noCork: true}} {
		benchPort++
		dl, err := Listen(h, benchPort, cfg)
		if err != nil {
			b.Fatal(err)
		}
		defer dl.Close()
		dc, err := Dial(ctx, a, netip.AddrPortFrom(h.Addr(), benchPort), cfg)
		if err != nil || PathOf(dc).Path != PathRDMA {
			b.Fatalf("direct: %v %v", err, PathOf(dc))
		}
		defer dc.Close()
		conns = append(conns, dc)
		accept(dl)
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
	conns = append(conns, oc)
	accept(ol)
	sent := make([]int64, len(conns))
	buf := make([]byte, size)
	const chunk = 32 << 20
	round := func(i int) time.Duration {
		start := time.Now()
		for k := 0; k < chunk/size; k++ {
			if _, err := conns[i].Write(buf); err != nil {
				b.Fatal(err)
			}
		}
		sent[i] += chunk
		if !sinks[i].until(sent[i]) {
			b.Fatal("the reader stopped")
		}
		return time.Since(start)
	}
	for i := range conns { // warm up
		round(i)
	}
	names := []string{"direct", "crc", "before", "delegated"}
	ratios := make([][]float64, len(conns)) // to delegated's time
	mbs := make([][]float64, len(conns))
	var gain []float64 // direct against before
	b.ResetTimer()
	for range b.N {
		t := make([]time.Duration, len(conns))
		for i := range conns {
			t[i] = round(i)
			mbs[i] = append(mbs[i], chunk/t[i].Seconds()/1e6)
		}
		for i := range conns {
			ratios[i] = append(ratios[i], t[len(t)-1].Seconds()/t[i].Seconds())
		}
		gain = append(gain, t[2].Seconds()/t[0].Seconds())
	}
	b.StopTimer()
	for i, n := range names {
		b.ReportMetric(testutil.Median(mbs[i]), n+"-MB/s")
		if i < len(names)-1 {
			b.ReportMetric(testutil.Median(ratios[i]), n+"/delegated")
		}
	}
	b.ReportMetric(testutil.Median(gain), "direct/before")
}
