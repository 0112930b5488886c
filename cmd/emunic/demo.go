package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"hash"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/board/lockstep"
	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
	"github.com/emunic/emunic/trace"
)

var demoCmd = &command{
	name:     "demo",
	summary:  "two emulated hosts over an in-memory wire: netstack and delegated TCP side by side",
	synopsis: "[--bytes SIZE] [--path netstack|offload|both|direct|all] [--rdma] [--lwio] [--ipv6] [--split] [--loss PCT] [--reorder PCT] [--seed N] [--pcap FILE] [--mtu N]",
	about: `
Builds two emulated hosts in this process, A (10.0.0.1) and B (10.0.0.2), each
with host memory, an emulated NIC and gVisor netstack, joined by an in-memory
wire. A sends --bytes of pseudo-random data to B over TCP, once on each data
path, one after the other; B checks the SHA-256 of what it received against
what A sent. The data paths (--path, default both):

  netstack  netstack runs the connection on both hosts: every frame crosses
            A's transmit ring, the wire and B's receive ring (and the ACKs
            the other way), and netstack handles each segment
  offload   netstack does the handshake, then each host hands the connection
            to its NIC (the OFFLOAD command): the NICs' delegated TCP engines
            segment, acknowledge and place the data; the hosts only queue
            transmit buffers, post receive buffers and read notifications
  direct    sockets direct (tcpstack/direct): a net.Conn over an RDMA QP
            with the Windows Sockets Direct session protocol: writes of at
            least 64 KiB go by RDMA Read, smaller ones inline (both = netstack
            and offload; all = the three)

Prints one row per path (bytes, time, throughput, the process's CPU time),
what each path cost in ring entries, interrupts and segments, then the ring,
device and delegated-engine counters of both NICs and every drop or error
counter that is not zero. Exits 1 if the data did not arrive intact.

--rdma runs the RDMA path: A dials B's RDMA listener (an iWARP-style queue
pair on a delegated connection, MPA/DDP/RDMAP in the NICs), runs every
opcode once -- Send, Send with Solicited Event, RDMA Write, RDMA Write with
Immediate, RDMA Read, Send with Invalidate -- and checks the data in the
target memory (guard bytes around B's region untouched), then writes
--bytes from a registered buffer at A into a registered region at B in
64 KiB RDMA Writes (32 outstanding; a region of at most 8 MiB, written
again lap after lap) and compares the region with the source. It prints
the opcode checks, the throughput row, both QPs' device statistics and
the hosts' copy counters (DriverStats.HostCopyBytes) over the RDMA part,
which must be 0: the NICs place and fetch the payload by DMA. With --rdma
and no --path only the RDMA path runs; with --path too, those paths run
first, side by side with it. Exits 1 if a check fails or a host copied.

--lwio runs the two file paths: B holds a file of --bytes seeded bytes and
A reads all of it in 64 KiB reads, 16 in flight, first over LWIO (the LWIO
server on B RDMA-writes each piece straight into A's registered memory;
docs/lwio.md), then over a plain-TCP file protocol on netstack
(lwio/tcpfile), each checked by SHA-256. Besides the rows above it prints
each path's client CPU (host A's host side alone: B is labelled apart and
the devices' goroutines are their own) and what the LWIO server and client
counted. With --lwio and no --path only these two paths run.

--ipv6 gives the hosts IPv6 addresses too, A fd00::1 and B fd00::2 (/64),
and runs every path it runs over IPv6: A dials B's IPv6 address, netstack
resolves it by neighbour discovery, and the delegated connections, the RDMA
QPs, sockets direct and LWIO (whose pipe names B's IPv6 address to the
client) carry IPv6 headers; the NICs classify, checksum and segment them
as they do IPv4 ones. The data checks and the report are the same.

--split runs each host's NIC in a device process of its own (this program
started again as the device): host memory is a memfd both processes map,
the doorbell and interrupt vectors are eventfds, the device's frames reach
the wire through a socket, and the report reads every device counter from
the area the device publishes in host memory, as it does in process. The
cpu columns then count this process only, not the device processes.

--loss and --reorder impair both directions of the wire (seeded by --seed, so a
run is repeatable), for every path; netstack's and the engine's
retransmissions must still deliver every byte.
--pcap writes every frame that crosses host A's port to a pcap file for
Wireshark or tshark.`,
	examples: `  emunic demo
  emunic demo --split --bytes 16MiB
  emunic demo --bytes 1GiB --path offload
  emunic demo --path all
  emunic demo --bytes 16MiB --loss 5 --reorder 5 --seed 7
  emunic demo --bytes 4MiB --pcap demo.pcap && tshark -r demo.pcap | head
  emunic demo --mtu 9000
  emunic demo --rdma
  emunic demo --rdma --path offload --bytes 256MiB
  emunic demo --rdma --bytes 1MiB --pcap rdma.pcap && tshark -r rdma.pcap --enable-heuristic iwarp_mpa_tcp -Y iwarp_rdma
  emunic demo --lwio --bytes 256MiB
  emunic demo --ipv6 --path all --rdma --lwio --bytes 16MiB`,
}

// demoConfig is the demo's command line.
type demoConfig struct {
	Bytes   int64   // bytes to move
	Path    string  // "netstack", "offload" or "both"
	Loss    float64 // percent of frames lost on the wire, each direction
	Reorder float64 // percent of frames reordered on the wire, each direction
	Seed    uint64  // seeds the wire's impairments and the data
	Pcap    string  // capture file for the frames at host A's port; "" for none
	MTU     int     // both NICs' MTU
	RDMA    bool    // run the RDMA path (alone unless --path was given)
	LWIO    bool    // run the two file paths, LWIO and TCP (alone unless --path was given)
	Split   bool    // each host's NIC in a device process of its own
	IPv6    bool    // the hosts get IPv6 addresses, and every path runs over IPv6
	// Idle is how long the transfer may make no progress before the demo
	// gives up. Not a flag; tests shorten it.
	Idle time.Duration

	// hooks, when not nil, is for the test that checks the report
	// against independent counts. Not a flag.
	hooks *demoHooks
	// trace, when not nil, records both devices ('emunic trace record').
	trace *trace.Writer
	// lockstep, when not nil, steps both devices in lockstep with the
	// hosts on its clock (a deterministic run).
	lockstep *lockstep.Sched
}

// demoHooks let a test look at the lab from another side than the
// report's.
type demoHooks struct {
	// pcapB records host B's port too.
	pcapB string
	// observe runs at every boundary the per-path figures are taken at
	// (stage 0 before the first path, stage i after path i), with the
	// lab quiet.
	observe func(lab *demoLab, stage int)
	// rdmaExtra runs on the RDMA path between the opcode checks and the
	// Write run, inside the part whose host copies are counted.
	rdmaExtra func(a, b *rdmaEnd) error
}

func defaultDemoConfig() demoConfig {
	return demoConfig{Bytes: 64 << 20, Path: "both", Seed: 1, MTU: 1500, Idle: 30 * time.Second}
}

// parseDemoFlags parses the demo's command line.
func parseDemoFlags(args []string, stdout io.Writer) (demoConfig, error) {
	cfg := defaultDemoConfig()
	fs := newFlagSet("demo")
	bytes, loss, reorder := sizeValue(cfg.Bytes), percentValue(0), percentValue(0)
	seed, mtu := uintValue(cfg.Seed), mtuValue(cfg.MTU)
	fs.Var(&bytes, "bytes", "amount of data A sends to B, a `SIZE` such as 1000000, 64MiB or 1GiB")
	fs.StringVar(&cfg.Path, "path", cfg.Path, "data `PATH`: netstack, offload (delegated connections), both, direct (sockets direct) or all")
	fs.Var(&loss, "loss", "percentage `PCT` of frames the wire loses, each direction (0-100)")
	fs.Var(&reorder, "reorder", "percentage `PCT` of frames the wire delivers out of order, each direction (0-100)")
	fs.Var(&seed, "seed", "`N` seeds the wire's impairments and the data, so that runs repeat")
	fs.StringVar(&cfg.Pcap, "pcap", "", "record the frames at host A's port in the pcap file `FILE`")
	fs.Var(&mtu, "mtu", "IP MTU `N` of both NICs (68-65535)")
	fs.BoolVar(&cfg.Split, "split", false, "run each host's NIC in a device process of its own (memfd host memory, eventfd vectors; docs/split.md)")
	fs.BoolVar(&cfg.RDMA, "rdma", false, "run the RDMA path: every opcode over a QP pair, then RDMA Write throughput (alone unless --path is given)")
	fs.BoolVar(&cfg.LWIO, "lwio", false, "read a file of --bytes from B over LWIO and over a plain-TCP file protocol (alone unless --path is given)")
	fs.BoolVar(&cfg.IPv6, "ipv6", false, "give the hosts IPv6 addresses too (fd00::1, fd00::2) and run every path over IPv6")
	if err := parse(demoCmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	if cfg.RDMA || cfg.LWIO {
		pathSet := false
		fs.Visit(func(f *flag.Flag) { pathSet = pathSet || f.Name == "path" })
		if !pathSet {
			cfg.Path = "none"
		}
	}
	switch cfg.Path {
	case "netstack", "offload", "both", "direct", "all":
	case "none":
		if !cfg.RDMA && !cfg.LWIO {
			return cfg, usagef("bad --path %q: want netstack, offload, both, direct or all (see 'emunic demo --help')", cfg.Path)
		}
	default:
		return cfg, usagef("bad --path %q: want netstack, offload, both, direct or all (see 'emunic demo --help')", cfg.Path)
	}
	if bytes <= 0 {
		return cfg, usagef("bad --bytes %s: must be at least 1 byte (see 'emunic demo --help')", formatSize(int64(bytes)))
	}
	cfg.Bytes, cfg.Loss, cfg.Reorder = int64(bytes), float64(loss), float64(reorder)
	cfg.Seed, cfg.MTU = uint64(seed), int(mtu)
	if cfg.IPv6 {
		if err := checkIPv6MTU([]netip.Prefix{demoAddr6A}, cfg.MTU); err != nil {
			return cfg, usagef("%v (see 'emunic demo --help')", err)
		}
	}
	return cfg, nil
}

func runDemoCommand(ctx context.Context, args []string, stdout, _ io.Writer) error {
	cfg, err := parseDemoFlags(args, stdout)
	if err != nil {
		return err
	}
	return runDemo(ctx, cfg, stdout)
}

// runDemo is the demo: build the lab, run every data path, report. It
// returns an error if any path failed to deliver the data intact; the
// reports are printed either way, since the counters say what went wrong.
func runDemo(ctx context.Context, cfg demoConfig, w io.Writer) error {
	_, err := runDemoReport(ctx, cfg, w)
	return err
}

// demoReport is every figure the demo prints, as data: runDemoReport reads
// the counters into it once, and the print functions only format it.
type demoReport struct {
	results        []transferResult
	wireAB, wireBA port.Stats   // the wire's counters, each direction (its sending port)
	hosts          []hostReport // A, B: final counters, read after both stopped
	drops          []dropRow
	pcapFrames     uint64 // frames in the capture of host A's port, with --pcap
}

// runDemoReport runs the demo, prints its report to w and returns the
// report's figures (nil if the lab could not be built).
func runDemoReport(ctx context.Context, cfg demoConfig, w io.Writer) (*demoReport, error) {
	lab, err := newDemoLab(cfg)
	if err != nil {
		return nil, err
	}
	defer lab.Close()
	printDemoHeader(w, cfg)

	rep := &demoReport{}
	var failed []string // one line in the end, whatever failed
	before := lab.snapshot()
	if cfg.hooks != nil && cfg.hooks.observe != nil {
		cfg.hooks.observe(lab, 0)
	}
	for i, p := range demoPaths(cfg) {
		r, err := p.run(ctx, lab, cfg)
		after := lab.snapshot()
		if cfg.hooks != nil && cfg.hooks.observe != nil {
			cfg.hooks.observe(lab, i+1)
		}
		r.path, r.before, r.after, r.cost = p.name, before, after, after.sub(before)
		before = after
		if err != nil {
			r.err = err
			failed = append(failed, fmt.Sprintf("%s: %v", p.name, err))
		}
		rep.results = append(rep.results, r)
		if ctx.Err() != nil {
			break
		}
	}

	// Stop both hosts before reading the counters, so they are final and
	// the capture is complete.
	capErr := lab.Close()
	rep.hosts = lab.report()
	rep.wireAB, rep.wireBA = lab.pa.Stats(), lab.pb.Stats()
	rep.drops = collectDrops(rep.hosts)
	if lab.rec != nil {
		// The recorder's own count: the port's counters would include a
		// frame it delivered while the recorder closed, which the file
		// does not hold.
		rep.pcapFrames = lab.rec.Frames()
	}

	fmt.Fprintln(w)
	printThroughput(w, rep.results)
	fmt.Fprintln(w)
	printPathCosts(w, rep.results)
	fmt.Fprintln(w)
	printWire(w, rep.wireAB, rep.wireBA)
	fmt.Fprintln(w)
	printRingStats(w, rep.hosts)
	fmt.Fprintln(w)
	printDeviceCounters(w, rep.hosts)
	fmt.Fprintln(w)
	printEngineCounters(w, rep.hosts)
	fmt.Fprintln(w)
	printDrops(w, rep.drops)
	for _, r := range rep.results {
		if r.rdma != nil {
			fmt.Fprintln(w)
			printRDMAReport(w, r.rdma)
		}
	}
	if cfg.LWIO {
		fmt.Fprintln(w)
		printLWIOReport(w, rep.results, lab.lw)
	}
	if cfg.Pcap != "" {
		if capErr != nil {
			failed = append(failed, fmt.Sprintf("pcap %s: %v", cfg.Pcap, capErr))
		} else {
			fmt.Fprintf(w, "\npcap: %d frames at host A's port written to %s\n", rep.pcapFrames, cfg.Pcap)
		}
	}
	if len(failed) > 0 {
		return rep, errors.New(strings.Join(failed, "; "))
	}
	if len(rep.results) == 1 {
		fmt.Fprintf(w, "\nok: %s arrived intact\n", services.Size(uint64(cfg.Bytes)))
	} else {
		fmt.Fprintf(w, "\nok: %s arrived intact on each of the %d paths\n", services.Size(uint64(cfg.Bytes)), len(rep.results))
	}
	return rep, nil
}

// demoPath is one way of moving the demo's data from A to B. Each path runs
// on the same lab, one after the other, and gets one row in the throughput
// table, so paths are compared side by side in one run (the figures on a
// shared machine drift too much to compare across runs).
type demoPath struct {
	name string
	run  func(ctx context.Context, lab *demoLab, cfg demoConfig) (transferResult, error)
}

// demoPaths lists the data paths the demo runs, as --path and --rdma
// choose.
func demoPaths(cfg demoConfig) []demoPath {
	var paths []demoPath
	if cfg.Path == "netstack" || cfg.Path == "both" || cfg.Path == "all" {
		paths = append(paths, demoPath{name: "netstack, legacy rings", run: netstackTransfer})
	}
	if cfg.Path == "offload" || cfg.Path == "both" || cfg.Path == "all" {
		paths = append(paths, demoPath{name: "delegated, offload engine", run: offloadTransfer})
	}
	if cfg.Path == "direct" || cfg.Path == "all" {
		paths = append(paths, demoPath{name: "sockets direct, RDMA", run: directTransfer})
	}
	if cfg.RDMA {
		paths = append(paths, demoPath{name: "RDMA Write, iWARP QP", run: rdmaTransfer})
	}
	if cfg.LWIO {
		paths = append(paths, demoPath{name: "LWIO file read B->A, RDMA", run: lwioTransfer},
			demoPath{name: "TCP file read B->A, netstack", run: tcpFileTransfer})
	}
	return paths
}

// demoLab is the demo's test bench: two hosts on the two ends of a wire,
// host A's end optionally recorded.
type demoLab struct {
	a, b   *tcpstack.Host
	devA   *nic.Device // A's NIC when it runs in this process (nil split)
	pa, pb *port.WirePort
	rec    *port.Recorder
	recB   *port.Recorder // demoHooks.pcapB

	once     sync.Once
	closeErr error

	lw *lwioDemo // the file paths' file and counters (--lwio)

	lockstep bool // the devices run in lockstep with the hosts (demoConfig.lockstep)

	// addrA and addrB are the addresses the paths run between: the
	// IPv4 ones, or with --ipv6 the IPv6 ones.
	addrA, addrB netip.Addr
}

var (
	demoAddrA = netip.MustParsePrefix("10.0.0.1/24")
	demoAddrB = netip.MustParsePrefix("10.0.0.2/24")
	// With --ipv6, besides (StackConfig.Addrs).
	demoAddr6A = netip.MustParsePrefix("fd00::1/64")
	demoAddr6B = netip.MustParsePrefix("fd00::2/64")
)

// demoAddrs is the addresses the demo's paths run between, A's and B's.
func demoAddrs(cfg demoConfig) (a, b netip.Addr) {
	if cfg.IPv6 {
		return demoAddr6A.Addr(), demoAddr6B.Addr()
	}
	return demoAddrA.Addr(), demoAddrB.Addr()
}

// toB is B's address on port, the way the paths dial it.
func (l *demoLab) toB(port uint16) netip.AddrPort { return netip.AddrPortFrom(l.addrB, port) }

func wireConfig(cfg demoConfig) port.WireConfig {
	imp := port.Impairments{LossPercent: cfg.Loss, ReorderPercent: cfg.Reorder}
	return port.WireConfig{Seed: cfg.Seed, AToB: imp, BToA: imp}
}

func newDemoLab(cfg demoConfig) (*demoLab, error) {
	lab := &demoLab{lockstep: cfg.lockstep != nil}
	lab.addrA, lab.addrB = demoAddrs(cfg)
	var err error
	wc := wireConfig(cfg)
	if cfg.lockstep != nil {
		wc.Clock = cfg.lockstep.Clock().Wire()
	}
	if lab.pa, lab.pb, err = port.NewWire(wc); err != nil {
		return nil, err
	}
	var pa port.Port = lab.pa
	if cfg.Pcap != "" {
		rec, err := port.CreateRecorder(lab.pa, cfg.Pcap)
		if err != nil {
			lab.pa.Close()
			lab.pb.Close()
			return nil, err
		}
		lab.rec, pa = rec, rec
	}
	var split *board.SplitConfig
	if cfg.Split {
		split = &board.SplitConfig{}
	}
	var devA, devB nic.Config
	var stA, stB tcpstack.StackConfig
	if cfg.trace != nil {
		// Seeded STag keys (a replay must draw the same ones) and seeded
		// netstack ISNs and ports, so that two recordings differ only
		// where the hosts' timing made them.
		devA = nic.Config{Tracer: cfg.trace.NewDevice("A"), STagSeed: cfg.Seed*2 + 1}
		devB = nic.Config{Tracer: cfg.trace.NewDevice("B"), STagSeed: cfg.Seed*2 + 2}
		stA.Seed, stB.Seed = cfg.Seed*2+1, cfg.Seed*2+2
	}
	if cfg.IPv6 {
		stA.Addrs, stB.Addrs = []netip.Prefix{demoAddr6A}, []netip.Prefix{demoAddr6B}
	}
	ha, err := board.NewHost(board.HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: demoAddrA, MTU: cfg.MTU, Split: split, Device: devA, Stack: stA, Lockstep: cfg.lockstep}, pa)
	if err != nil {
		pa.Close()
		lab.pb.Close()
		return nil, fmt.Errorf("host A: %w", err)
	}
	lab.a, lab.devA = ha.Host, ha.Device
	var pb port.Port = lab.pb
	if cfg.hooks != nil && cfg.hooks.pcapB != "" {
		if lab.recB, err = port.CreateRecorder(lab.pb, cfg.hooks.pcapB); err != nil {
			lab.a.Close()
			lab.pb.Close()
			return nil, err
		}
		pb = lab.recB
	}
	// B is built under the label side=server (its goroutines inherit it),
	// so the file paths can tell the client's CPU (A) from the server's.
	var hb *board.Host
	inB(func() {
		hb, err = board.NewHost(board.HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addr: demoAddrB, MTU: cfg.MTU, Split: split, Device: devB, Stack: stB, Lockstep: cfg.lockstep}, pb)
	})
	if err != nil {
		lab.a.Close()
		return nil, fmt.Errorf("host B: %w", err)
	}
	lab.b = hb.Host
	return lab, nil
}

// seed is what seeds host n's (1: A, 2: B) random choices above the stack
// in a deterministic run (the LWIO client's and server's keys), or 0 (a
// random seed) in any other.
func (l *demoLab) seed(cfg demoConfig, n uint64) uint64 {
	if !l.lockstep {
		return 0
	}
	return cfg.Seed*2 + n
}

// Close stops both hosts (and so their ports and the recorder) and returns
// the capture's error, if any. Safe to call more than once.
func (l *demoLab) Close() error {
	l.once.Do(func() {
		if l.lw != nil {
			os.RemoveAll(l.lw.dir)
		}
		l.a.Close()
		l.b.Close()
		if l.rec != nil {
			l.closeErr = l.rec.Err()
		}
		if l.recB != nil && l.closeErr == nil {
			l.closeErr = l.recB.Err()
		}
	})
	return l.closeErr
}

// report reads both hosts' counters for the report.
func (l *demoLab) report() []hostReport {
	return []hostReport{
		reportHost("A "+l.addrA.String(), l.a, l.pa),
		reportHost("B "+l.addrB.String(), l.b, l.pb),
	}
}

// transferResult is what one data path achieved.
type transferResult struct {
	path     string
	bytes    int64 // bytes the receiver got
	elapsed  time.Duration
	cpu      time.Duration // CPU time of the whole process during the transfer
	sent     [32]byte      // SHA-256 of what A sent
	received [32]byte      // SHA-256 of what B received
	err      error
	// before and after are the lab's counters around the path (read
	// with the lab quiet); cost is their difference, what the path cost
	// both hosts.
	before, after labSnap
	cost          labDelta
	rdma          *rdmaReport // the RDMA path's own report
	// clientCPU is host A's host-side CPU during the transfer (the file
	// paths: A is the client); 0 when not measured.
	clientCPU time.Duration
}

// The TCP ports B listens on, one per path, so that a path never meets the
// previous path's connection (in TIME_WAIT) on the same 4-tuple.
const (
	demoPort        = 5001
	demoPortOffload = 5002
)

// netstackTransfer moves cfg.Bytes from A to B over a TCP connection of the
// host stacks: every segment crosses both NICs' legacy rings.
func netstackTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	l, err := lab.b.Listen(demoPort)
	if err != nil {
		return res, err
	}
	defer l.Close()
	dst := lab.toB(demoPort)
	dctx, cancel := context.WithTimeout(ctx, cfg.Idle)
	defer cancel()
	c, err := lab.a.Dial(dctx, dst)
	if err != nil {
		return res, err
	}
	defer c.Close()
	s, err := l.Accept()
	if err != nil {
		return res, err
	}
	defer s.Close()
	return moveData(ctx, c, s, cfg)
}

// offloadTransfer moves cfg.Bytes from A to B over a delegated connection:
// netstack does the handshake, then both hosts hand the connection to their
// NIC's offload unit, whose delegated TCP engines carry the data.
func offloadTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	l, err := lab.b.ListenOffload(demoPortOffload)
	if err != nil {
		return res, err
	}
	defer l.Close()
	c, s, err := dialAccept(ctx, l, cfg, func(ctx context.Context) (net.Conn, error) {
		return lab.a.DialOffload(ctx, lab.toB(demoPortOffload))
	})
	if err != nil {
		return res, err
	}
	defer c.Close()
	defer s.Close()
	if _, ok := s.(*tcpstack.DelegatedConn); !ok {
		why := "the offload unit did not take it"
		if err := l.FallbackErr(); err != nil {
			why = err.Error()
		}
		return res, fmt.Errorf("B: connection stayed on netstack: %s", why)
	}
	return moveData(ctx, c, s, cfg)
}

// moveData sends cfg.Bytes of seeded data from c (A's end) to s (B's end),
// half-closes, and checks that B received exactly that (length and
// SHA-256).
func moveData(ctx context.Context, c, s net.Conn, cfg demoConfig) (res transferResult, err error) {
	// Interrupted (Ctrl-C): unblock both ends.
	stop := context.AfterFunc(ctx, func() { c.Close(); s.Close() })
	defer stop()

	type recvResult struct {
		n   int64
		sum [32]byte
		err error
	}
	done := make(chan recvResult, 1)
	start, cpu0 := time.Now(), cpusplit.Process()
	go func() {
		h := sha256.New()
		n, err := copyIdle(h, s, cfg.Idle)
		var r recvResult
		r.n, r.err = n, err
		copy(r.sum[:], h.Sum(nil))
		s.Close() // B's FIN
		done <- r
	}()

	sendSum, sendErr := sendRandom(c, cfg.Bytes, cfg.Seed, cfg.Idle)
	if sendErr == nil {
		// Half-close: B reads EOF after the last byte.
		if cw, ok := c.(interface{ CloseWrite() error }); ok {
			sendErr = cw.CloseWrite()
		} else {
			sendErr = c.Close()
		}
	} else {
		s.Close() // the receiver would otherwise wait for the idle timeout
	}
	r := <-done
	res.elapsed, res.cpu = time.Since(start), cpusplit.Process()-cpu0
	if sendErr == nil && r.err == nil {
		// Wait for B's FIN, so that the connection closes the ordinary way
		// before the hosts are stopped (and a capture ends cleanly).
		_, _ = copyIdle(sha256.New(), c, cfg.Idle)
	}
	res.bytes, res.sent, res.received = r.n, sendSum, r.sum
	switch {
	case ctx.Err() != nil:
		return res, fmt.Errorf("interrupted after %s of %s", services.Size(uint64(r.n)), services.Size(uint64(cfg.Bytes)))
	case sendErr != nil:
		return res, fmt.Errorf("send: %w", sendErr)
	case r.err != nil:
		return res, fmt.Errorf("receive after %s of %s: %w", services.Size(uint64(r.n)), services.Size(uint64(cfg.Bytes)), r.err)
	case r.n != cfg.Bytes:
		return res, fmt.Errorf("received %d bytes, sent %d", r.n, cfg.Bytes)
	case r.sum != sendSum:
		return res, fmt.Errorf("data corrupted: SHA-256 of the received data %x differs from the sent %x", r.sum[:8], sendSum[:8])
	}
	return res, nil
}

// chunk is the size of the demo's writes and reads.
const chunk = 64 << 10

// sendRandom writes n bytes of seeded pseudo-random data to c and returns
// their SHA-256. A write that makes no progress for idle fails.
func sendRandom(c net.Conn, n int64, seed uint64, idle time.Duration) ([32]byte, error) {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	src := rand.NewChaCha8(key)
	h := sha256.New()
	buf := make([]byte, chunk)
	var sum [32]byte
	for sent := int64(0); sent < n; {
		k := int(min(int64(len(buf)), n-sent))
		src.Read(buf[:k])
		h.Write(buf[:k])
		c.SetWriteDeadline(time.Now().Add(idle))
		m, err := c.Write(buf[:k])
		sent += int64(m)
		if err != nil {
			if errors.Is(err, errDeadline) {
				err = fmt.Errorf("no progress for %v after %d of %d bytes", idle, sent, n)
			}
			return sum, err
		}
	}
	copy(sum[:], h.Sum(nil))
	return sum, nil
}

// copyIdle copies r into h until EOF; a read that waits longer than idle
// fails.
func copyIdle(h hash.Hash, c net.Conn, idle time.Duration) (int64, error) {
	buf := make([]byte, chunk)
	var n int64
	for {
		c.SetReadDeadline(time.Now().Add(idle))
		m, err := c.Read(buf)
		h.Write(buf[:m])
		n += int64(m)
		switch {
		case err == io.EOF:
			return n, nil
		case errors.Is(err, errDeadline):
			return n, fmt.Errorf("no data for %v", idle)
		case err != nil:
			return n, err
		}
	}
}

// errDeadline matches the timeout errors of net.Conn deadlines (gonet's
// included).
var errDeadline = deadlineError{}

type deadlineError struct{}

func (deadlineError) Error() string { return "deadline exceeded" }
func (deadlineError) Is(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

func printDemoHeader(w io.Writer, cfg demoConfig) {
	var names []string
	for _, p := range demoPaths(cfg) {
		names = append(names, p.name)
	}
	over := "over TCP"
	if cfg.RDMA {
		over = "over TCP and RDMA"
		if cfg.Path == "none" {
			over = "over RDMA"
		}
	}
	a, b := demoAddrs(cfg)
	fmt.Fprintf(w, "emunic demo: %s %s from A %v to B %v, MTU %d, on each path: %s\n",
		services.Size(uint64(cfg.Bytes)), over, a, b, cfg.MTU, strings.Join(names, "; "))
	fmt.Fprintf(w, "wire: in-memory, loss %g%%, reorder %g%% each direction, seed %d\n", cfg.Loss, cfg.Reorder, cfg.Seed)
}

// printThroughput prints one row per data path.
func printThroughput(w io.Writer, results []transferResult) {
	fmt.Fprintln(w, "transfers (A -> B unless the path says)")
	t := &table{}
	t.row("path", "bytes", "time", "throughput", "cpu", "cpu/GiB", "sha-256")
	for _, r := range results {
		check := "match " + fmt.Sprintf("%x", r.received[:6])
		switch {
		case r.err != nil:
			check = "FAILED"
		case r.sent != r.received:
			check = "MISMATCH"
		}
		rate, perGiB := "-", "-"
		if r.elapsed > 0 && r.bytes > 0 {
			rate = formatRate(float64(r.bytes) * 8 / r.elapsed.Seconds())
		}
		if r.cpu > 0 && r.bytes > 0 {
			perGiB = fmt.Sprintf("%.2fs", r.cpu.Seconds()*float64(1<<30)/float64(r.bytes))
		}
		t.row(r.path, services.Size(uint64(r.bytes)), r.elapsed.Round(time.Millisecond).String(), rate,
			r.cpu.Round(time.Millisecond).String(), perGiB, check)
	}
	t.write(w)
}

// printWire prints what the wire did in each direction: the counters of
// the sending port.
func printWire(w io.Writer, ab, ba port.Stats) {
	fmt.Fprintln(w, "wire")
	t := &table{}
	t.row("direction", "frames", "bytes", "lost", "reordered", "duplicated", "corrupted")
	for _, d := range []struct {
		name string
		s    port.Stats
	}{{"A -> B", ab}, {"B -> A", ba}} {
		t.row(d.name, u64(d.s.TxFrames), u64(d.s.TxBytes), u64(d.s.TxDropLoss), u64(d.s.Reordered),
			u64(d.s.Duplicated), u64(d.s.Corrupted))
	}
	t.write(w)
}

// formatRate formats bits per second as Gbit/s, or Mbit/s below 1 Gbit/s.
func formatRate(bps float64) string {
	if bps >= 1e9 {
		return fmt.Sprintf("%.2f Gbit/s", bps/1e9)
	}
	return fmt.Sprintf("%.1f Mbit/s", bps/1e6)
}
