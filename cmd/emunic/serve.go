package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
)

var serveCmd = &command{
	name:     "serve",
	summary:  "one emulated host on a Linux TAP device, running TCP echo (7), discard (9), qotd (17) and source (19)",
	synopsis: "--tap NAME --addr CIDR [--offload] [--max-conns N] [--arena SIZE] [--mtu N] [--vlan N] [--gateway IP] [--pcap FILE] [--metrics ADDR]",
	about: `
Attaches an emulated host (host memory, the emulated NIC and gVisor netstack)
to the Linux TAP device NAME, with the address CIDR, and runs four TCP
services on it until SIGINT (Ctrl-C) or SIGTERM:

  echo     port 7   sends back everything it receives (RFC 862)
  discard  port 9   reads and drops everything (RFC 863)
  qotd     port 17  sends a short quotation and closes (RFC 865; the server
                    closes first, so its end goes through TIME_WAIT)
  source   port 19  sends pseudo-random bytes as fast as the connection takes
                    them until the client closes (discard's opposite: the
                    emulated host's sending measured from Linux)

It also answers ARP and ping. Each connection is served in its own goroutine
and logged to stderr. On exit it prints the services', the rings' and the
device's counters and every drop or error counter that is not zero.

With --offload, netstack still does each connection's handshake, then hands
the connection to the NIC's offload unit (the OFFLOAD command): from there the
delegated TCP engine on the NIC runs it, and the host only posts buffers and
reads notifications. Each accepted connection is logged as "delegated as conn
N" (N is its index on the NIC), or "fallback to netstack" with the reason when
the unit did not take it (it is then served by netstack as usual). The exit
report adds the engine's counters.

The NIC holds --max-conns delegated connections at once (default 10000; 65536
and more work: an unused index costs a few bytes). Their host memory follows
data, not connections: send bytes and receive buffers come from one pool
carved out of host memory (--arena, default 64 MiB for applications plus the
rings), taken while data is in flight and given back after, so ten thousand
idle connections fit in the default. When the pool is exhausted a connection
that needs more waits (back-pressure) or receives through the shared legacy
buffers; it is never refused delegation for memory. A connection ending in
TIME_WAIT leaves only a small record on the NIC (the index and memory are
released at once).

The kernel is the other end of the TAP: give its side of the TAP an address in
the same subnet (or move the TAP into a network namespace and do it there),
then use nc, socat or any TCP program. If NAME does not exist it is created
and disappears when emunic exits; create it with 'ip tuntap add' to keep it.
emunic brings the TAP up and sets its MTU to --mtu. Needs root or
CAP_NET_ADMIN (or a TAP made for this user with 'ip tuntap add ... user').`,
	examples: `  # as root: a persistent TAP, the kernel side at 10.9.0.1
  ip tuntap add dev emu0 mode tap
  ip addr add 10.9.0.1/24 dev emu0
  ip link set emu0 up
  emunic serve --tap emu0 --addr 10.9.0.2/24
  emunic serve --tap emu0 --addr 10.9.0.2/24 --offload
  # in another terminal
  nc 10.9.0.2 7
  ping -c 3 10.9.0.2

  emunic serve --tap emu0 --addr 10.9.0.2/24 --offload --max-conns 65536 --arena 512MiB
  emunic serve --tap emu0 --addr 10.9.0.2/24 --pcap serve.pcap
  emunic serve --tap emu0 --addr 10.9.0.2/24 --gateway 10.9.0.1 --mtu 9000

  # on VLAN 10: the kernel's side is a VLAN interface on the TAP
  ip link add link emu0 name emu0.10 type vlan id 10
  ip addr add 10.10.0.1/24 dev emu0.10; ip link set emu0.10 up
  emunic serve --tap emu0 --addr 10.10.0.2/24 --vlan 10`,
}

// serveConfig is serve's command line.
type serveConfig struct {
	Tap  string
	Addr netip.Prefix
	// MoreAddrs are the further --addr addresses (IPv6 ones: a dual-stack host).
	MoreAddrs []netip.Prefix
	MTU       int
	Gateway   netip.Addr // default route's next hop; invalid for none
	Pcap      string
	Offload   bool // delegate every accepted connection to the offload unit
	// MaxConns is the NIC's delegated-connection table (0: the default,
	// delegation.DefaultMaxConns).
	MaxConns int
	// Arena is host memory in bytes (0: rings and buffers plus 64 MiB).
	Arena int64
	// Metrics is where to serve the counters (--metrics), or "".
	Metrics string
	// Congestion is the delegated connections' congestion control.
	Congestion rings.CongestionControl
	// VLAN is the NIC's 802.1Q VLAN ID, 1-4094 (0: untagged).
	VLAN uint16
	// BusyPoll is the TAP port's busy poll (port.TAPOptions.BusyPoll:
	// negative is off).
	BusyPoll time.Duration
}

func parseServeFlags(args []string, stdout io.Writer) (serveConfig, error) {
	cfg := serveConfig{MTU: 1500}
	fs := newFlagSet("serve")
	var addr prefixValue
	var gw addrValue
	mtu := mtuValue(cfg.MTU)
	fs.StringVar(&cfg.Tap, "tap", "", "TAP device `NAME` to attach to, created if missing (required)")
	fs.Var(&addr, "addr", "the emulated host's address with prefix length, a `CIDR` such as 10.9.0.2/24 (required); repeat it for more, IPv6 ones too (--addr fd00:9::2/64): the first IPv4 one is the primary")
	fs.Var(&mtu, "mtu", "IP MTU `N` of the NIC and the TAP (68-65535)")
	fs.Var(&gw, "gateway", "default route via `IP`, IPv4 or IPv6, inside the subnet of an --addr of its family (or an IPv6 link-local address)")
	fs.StringVar(&cfg.Pcap, "pcap", "", "record every frame at the TAP port in the pcap file `FILE`")
	fs.BoolVar(&cfg.Offload, "offload", false, "delegate every accepted connection to the NIC's offload unit after the handshake")
	maxConns := uintValue(delegation.DefaultMaxConns)
	fs.Var(&maxConns, "max-conns", "delegated connections the NIC holds at once, `N` (1-1048576)")
	arena := sizeValue(0)
	fs.Var(&arena, "arena", "host memory, `SIZE` such as 256MiB (default: the rings and buffers plus 64 MiB)")
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve the counters at `ADDR` (host:port): Prometheus text at /metrics, expvar JSON at /debug/vars")
	vlan := uintValue(0)
	fs.Var(&vlan, "vlan", "put the host on 802.1Q VLAN `N` (1-4094): the NIC takes only frames tagged N, strips and inserts the tag; the kernel side needs a VLAN interface on the TAP")
	var cc congestionValue
	fs.Var(&cc, "congestion", "congestion control `NAME` of delegated connections (with --offload): cubic or newreno")
	busyPoll := fs.Duration("busy-poll", port.DefaultTAPBusyPoll, "how long the TAP port polls for the next frame before it sleeps, a `DURATION` up to 10ms (0: never polls): lower round trips for the CPU it polls with")
	if err := parse(serveCmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	switch {
	case *busyPoll < 0 || *busyPoll > 10*time.Millisecond:
		return cfg, usagef("bad --busy-poll %v: want 0 to 10ms", *busyPoll)
	case *busyPoll == 0:
		cfg.BusyPoll = -1
	default:
		cfg.BusyPoll = *busyPoll
	}
	cfg.Congestion = rings.CongestionControl(cc)
	cfg.Addr, cfg.MoreAddrs, cfg.Gateway, cfg.MTU = addr.p, addr.more, gw.a, int(mtu)
	if err := addr.check(); err != nil {
		return cfg, usagef("%v", err)
	}
	if err := checkIPv6MTU(cfg.MoreAddrs, cfg.MTU); err != nil {
		return cfg, usagef("%v", err)
	}
	cfg.MaxConns, cfg.Arena = int(maxConns), int64(arena)
	if vlan > 4094 {
		return cfg, usagef("bad --vlan %d: want 1 to 4094 (0 and 4095 are reserved by 802.1Q)", vlan)
	}
	cfg.VLAN = uint16(vlan)
	switch {
	case cfg.MaxConns < 1 || cfg.MaxConns > 1<<20:
		return cfg, usagef("bad --max-conns %d: want 1 to 1048576", cfg.MaxConns)
	case cfg.Arena != 0 && (cfg.Arena < 16<<20 || cfg.Arena > 64<<30):
		return cfg, usagef("bad --arena %s: want 16MiB to 64GiB", formatSize(cfg.Arena))
	case cfg.Tap == "":
		return cfg, usagef("--tap NAME is required (see 'emunic serve --help')")
	case !cfg.Addr.IsValid():
		return cfg, usagef("--addr CIDR is required, e.g. --addr 10.9.0.2/24 (see 'emunic serve --help')")
	case cfg.Gateway.IsValid() && !onLink(cfg.Gateway, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --gateway %v: not inside %v, so it cannot be reached", cfg.Gateway, subnets(cfg.Addr, cfg.MoreAddrs))
	case ownAddr(cfg.Gateway, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --gateway %v: that is the host's own address", cfg.Gateway)
	}
	return cfg, nil
}

func runServeCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseServeFlags(args, stdout)
	if err != nil {
		return err
	}
	return runServe(ctx, cfg, stdout, stderr)
}

// macFor derives the emulated NIC's MAC from its IPv4 address: locally
// administered, unicast, 02:00:a.b.c.d, so it is stable across runs and
// recognizable in a capture.
func macFor(a netip.Addr) [6]byte {
	b := a.As4()
	return [6]byte{0x02, 0x00, b[0], b[1], b[2], b[3]}
}

// tapHost is what attachTAP builds: the TAP, the port the host uses (the
// TAP, or a recorder in front of it) and the host.
type tapHost struct {
	tap  *port.TAPPort
	rec  *port.Recorder
	host *tcpstack.Host
	mac  [6]byte
}

// attachTAP opens (creating if missing) the TAP device name, brings it up
// with the MTU, and builds an emulated host on it with addr, the gateway,
// the further addresses more (IPv6 ones make it dual-stack), arena bytes of host memory (0: the default) and the NIC's table of
// maxConns delegated connections (0: the default); with pcap, every frame
// at the port is recorded there.
func attachTAP(warnf func(format string, args ...any), name string, addr netip.Prefix, more []netip.Prefix, mtu int, gw netip.Addr, pcap string, arena int64, maxConns int) (*tapHost, error) {
	return attachTAPVLAN(warnf, name, addr, more, mtu, gw, pcap, arena, maxConns, 0, 0)
}

// attachTAPVLAN is attachTAP with the NIC on 802.1Q VLAN vlan (0: none):
// the TAP is then a trunk, and the kernel reaches the host through a VLAN
// interface on it (ip link add link NAME name NAME.N type vlan id N), and
// the port's busy poll busyPoll (port.TAPOptions.BusyPoll: 0, the
// default).
func attachTAPVLAN(warnf func(format string, args ...any), name string, addr netip.Prefix, more []netip.Prefix, mtu int, gw netip.Addr, pcap string, arena int64, maxConns int, vlan uint16, busyPoll time.Duration) (*tapHost, error) {
	tap, err := port.OpenTAPWith(name, port.TAPOptions{BusyPoll: busyPoll})
	if err != nil {
		return nil, err // a *port.TAPError: one line naming the device and the reason
	}
	name = tap.Name()
	if cur, err := tap.MTU(); err == nil && cur != mtu {
		if err := tap.SetMTU(mtu); err != nil {
			warnf("warning: %v; frames longer than %d bytes from the kernel will be dropped", err, mtu+port.EthHeaderLen)
		}
	}
	if err := tap.SetUp(true); err != nil {
		warnf("warning: %v; bring it up with: ip link set %s up", err, name)
	}
	th := &tapHost{tap: tap, mac: macFor(addr.Addr())}
	var p port.Port = tap
	if pcap != "" {
		if th.rec, err = port.CreateRecorder(tap, pcap); err != nil {
			tap.Close()
			return nil, err
		}
		p = th.rec
	}
	h, err := board.NewHost(board.HostConfig{
		MAC: th.mac, Addr: addr, MTU: mtu, ArenaSize: int(arena),
		Stack:  tcpstack.StackConfig{Gateway: gw, Addrs: more},
		Device: nic.Config{Engine: delegation.Config{MaxConns: maxConns}, VLAN: vlan},
	}, p)
	if err != nil {
		p.Close()
		return nil, err
	}
	th.host = h.Host
	return th, nil
}

// runServe attaches a host to the TAP and serves until ctx is done.
func runServe(ctx context.Context, cfg serveConfig, stdout, stderr io.Writer) error {
	logger := newLogger(stderr)
	th, err := attachTAPVLAN(printfTo(logger), cfg.Tap, cfg.Addr, cfg.MoreAddrs, cfg.MTU, cfg.Gateway, cfg.Pcap, cfg.Arena, cfg.MaxConns, cfg.VLAN, cfg.BusyPoll)
	if err != nil {
		return err
	}
	tap, rec, host, mac, name := th.tap, th.rec, th.host, th.mac, th.tap.Name()
	hostClosed := false
	defer func() {
		if !hostClosed {
			host.Close()
		}
	}()

	logf := printfTo(logger)
	echo, discard, qotd, source := services.NewEcho(logf), services.NewDiscard(logf), services.NewQOTD(logf), services.NewSource(logf)
	type served struct {
		srv *services.Server
		l   net.Listener
	}
	var all []served
	var offl []*offloadListener
	if cfg.Offload {
		if err := host.Offload(tcpstack.OffloadConfig{Congestion: cfg.Congestion}); err != nil {
			return err
		}
	}
	for _, s := range []struct {
		srv  *services.Server
		port uint16
	}{{echo, services.EchoPort}, {discard, services.DiscardPort}, {qotd, services.QOTDPort}, {source, services.SourcePort}} {
		var l net.Listener
		if cfg.Offload {
			ol, err := host.ListenOffload(s.port)
			if err != nil {
				return err
			}
			// On a dual-stack host it listens on both families and
			// delegates IPv6 connections as IPv4 ones.
			o := &offloadListener{OffloadListener: ol, service: s.srv.Name(), logf: logf}
			offl = append(offl, o)
			l = o
		} else if l, err = host.Listen(s.port); err != nil {
			return err
		}
		all = append(all, served{s.srv, l})
	}
	failed := make(chan error, len(all))
	for _, s := range all {
		go func() {
			if err := s.srv.Serve(s.l); err != nil && !errors.Is(err, services.ErrServerClosed) {
				failed <- err
			}
		}()
	}
	mode := "netstack"
	if cfg.Offload {
		mode = "delegated to the offload unit"
	}
	addrs := cfg.Addr.String()
	for _, p := range cfg.MoreAddrs {
		addrs += ", " + p.String()
	}
	var metrics *metricsServer
	if cfg.Metrics != "" {
		if metrics, err = startMetrics(cfg.Metrics, func() []metric { return hostMetrics(host) }, logger); err != nil {
			return err
		}
	}
	logger.Info(fmt.Sprintf("%v on tap %s (MAC %s, MTU %d): echo on port %d, discard on port %d, qotd on port %d, source on port %d, connections %s; Ctrl-C to stop",
		addrs, name, net.HardwareAddr(mac[:]), cfg.MTU, services.EchoPort, services.DiscardPort, services.QOTDPort, services.SourcePort, mode),
		"addr", addrs, "tap", name, "mac", net.HardwareAddr(mac[:]).String(), "mtu", cfg.MTU, "mode", mode)

	var runErr error
	start := time.Now()
	select {
	case <-ctx.Done():
		logger.Info("stopping", "after", time.Since(start).Round(time.Second))
	case runErr = <-failed:
	}
	if metrics != nil {
		metrics.Close()
	}
	echo.Close()
	discard.Close()
	qotd.Close()
	source.Close()
	host.Close()
	hostClosed = true

	hosts := []hostReport{reportHost(name, host, tap)}
	printServices(stdout, echo, discard, qotd, source)
	if cfg.Offload {
		fmt.Fprintln(stdout)
		printOffloadListeners(stdout, offl)
		ps := host.OffloadUsage().Pool
		fmt.Fprintf(stdout, "delegated connections' host memory: pool %s reserved (its high-water mark), %s in use at exit, %d times found empty\n",
			formatSize(ps.Reserved), formatSize(ps.InUse), ps.Misses)
	}
	fmt.Fprintln(stdout)
	printRingStats(stdout, hosts)
	fmt.Fprintln(stdout)
	printDeviceCounters(stdout, hosts)
	if cfg.Offload {
		fmt.Fprintln(stdout)
		printEngineCounters(stdout, hosts)
	}
	fmt.Fprintln(stdout)
	printDrops(stdout, collectDrops(hosts))
	if rec != nil {
		if err := rec.Err(); err != nil {
			if runErr == nil {
				runErr = fmt.Errorf("pcap %s: %w", cfg.Pcap, err)
			} else {
				runErr = fmt.Errorf("%w; pcap %s: %v", runErr, cfg.Pcap, err)
			}
		} else {
			fmt.Fprintf(stdout, "\npcap: %d frames written to %s\n", rec.Frames(), cfg.Pcap)
		}
	}
	return runErr
}

func printServices(w io.Writer, servers ...*services.Server) {
	fmt.Fprintln(w, "services")
	t := &table{}
	t.row("", "connections", "bytes in", "bytes out", "errors")
	for _, s := range servers {
		st := s.Stats()
		t.row(s.Name(), u64(st.Accepted), u64(st.BytesIn), u64(st.BytesOut), u64(st.Errors))
	}
	t.write(w)
}

// offloadListener is a service's offload listener: it logs, for every
// connection it accepts, whether the offload unit took it (and its index on
// the NIC) or why it stayed on netstack, and counts both.
type offloadListener struct {
	*tcpstack.OffloadListener
	service string
	logf    func(format string, args ...any)

	delegated, fallbacks atomic.Uint64
}

// Accept accepts and delegates the next connection. A connection the unit
// did not take is still returned, served by netstack.
func (l *offloadListener) Accept() (net.Conn, error) {
	c, err := l.OffloadListener.Accept()
	if err != nil {
		return nil, err
	}
	if dc, ok := c.(*tcpstack.DelegatedConn); ok {
		l.delegated.Add(1)
		l.logf("%s: %v delegated as conn %d", l.service, c.RemoteAddr(), dc.Index())
		return c, nil
	}
	l.fallbacks.Add(1)
	reason := "the offload unit did not take it"
	if err := l.FallbackErr(); err != nil {
		reason = err.Error()
	}
	l.logf("%s: %v fallback to netstack: %s", l.service, c.RemoteAddr(), reason)
	return c, nil
}

// printOffloadListeners prints how many connections each service's listener
// delegated and how many stayed on netstack.
func printOffloadListeners(w io.Writer, ls []*offloadListener) {
	fmt.Fprintln(w, "offload")
	t := &table{}
	t.row("", "delegated", "fallback to netstack")
	for _, l := range ls {
		t.row(l.service, u64(l.delegated.Load()), u64(l.fallbacks.Load()))
	}
	t.write(w)
}
