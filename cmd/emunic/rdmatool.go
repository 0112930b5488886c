package main

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"time"

	"github.com/emunic/emunic/tcpstack/verbs"
	"github.com/emunic/emunic/tcpstack/verbs/rdmatool"
)

var rdmaToolCmd = &command{
	name:     "rdma",
	summary:  "RDMA tools on a TAP that talk to librdmacm's: ping (rping), echo (rdma_server/rdma_client)",
	synopsis: "ping|echo [flags]",
	about: `
Each subcommand is one emulated host (host memory, the emulated NIC, gVisor
netstack) on a Linux TAP device, running one of librdmacm's example
exchanges over iWARP (MPA revision 2, RFC 6581) on the NIC's RDMA verbs, in
either role, so it interoperates with Linux's own iWARP stack (siw) and its
rping, rdma_client and rdma_server:

  emunic rdma ping --tap NAME --addr CIDR (--listen | --server IP)
        rping's protocol (port 7174): the client advertises its buffers by
        Send, the server RDMA-Reads each ping and RDMA-Writes it back; one
        line per verified ping
  emunic rdma echo --tap NAME --addr CIDR (--listen | --server IP)
        rdma_server / rdma_client (port 7471): one 16-byte Send each way
        per connection

Exit status 0 only when every ping or exchange of --count was verified.
Run 'emunic rdma ping --help' or 'emunic rdma echo --help' for the flags.`,
	examples: `  # a siw VM at 10.77.1.2 on the same bridge as tap emu0
  emunic rdma ping --tap emu0 --addr 10.77.1.5/24 --listen --count 5 --size 64
  emunic rdma ping --tap emu0 --addr 10.77.1.5/24 --server 10.77.1.2 --count 5
  emunic rdma echo --tap emu0 --addr 10.77.1.5/24 --listen --count 1`,
}

var rdmaToolSub = map[string]*command{
	"ping": {name: "rdma ping", synopsis: "--tap NAME --addr CIDR (--listen | --server IP) [--port 7174] [--count N] [--size BYTES] [--pcap FILE] [--no-crc] [--p2p]",
		about: `
rping's protocol (librdmacm/examples/rping.c) on an emulated host attached to
the TAP device NAME with the address CIDR.

With --listen it is 'rping -s': it waits for one client on --port, and for
each ping RDMA-Reads the client's buffer, checks it is rping's pattern
("rdma-ping-K: " and the cycling letters), sends the go-ahead, RDMA-Writes it
to the client's sink buffer and sends the go-ahead again; it prints "server
ping data: ..." for each and exits after --count pings (1 when the client
leaves first).

With --server IP it is 'rping -c': it connects, and for each ping advertises
its source buffer, then its sink buffer, and checks the server wrote back
exactly what it sent; it prints "ping data: ..." for each verified ping.

The connection asks for MPA CRC (--no-crc: not; it is used anyway when the
peer asks) and, with --p2p, for RFC 6581 peer-to-peer mode (as siw's
peer_to_peer=1). IRD and ORD are 1, as rping's.`,
		examples: `  emunic rdma ping --tap emu0 --addr 10.77.1.5/24 --listen --count 5
  emunic rdma ping --tap emu0 --addr 10.77.1.5/24 --server 10.77.1.2 --count 5 --size 64 --pcap ping.pcap`},
	"echo": {name: "rdma echo", synopsis: "--tap NAME --addr CIDR (--listen | --server IP) [--port 7471] [--count N] [--pcap FILE] [--no-crc] [--p2p]",
		about: `
rdma_server / rdma_client's exchange (librdmacm/examples) on an emulated host
attached to the TAP device NAME with the address CIDR: per connection the
client sends 16 bytes and the server answers with 16.

With --listen it is rdma_server for --count clients in turn (it sends back
what it received) and exits 0 after the last. With --server IP it is
rdma_client, --count times: connect, send, receive, disconnect. One line per
completed exchange.`,
		examples: `  emunic rdma echo --tap emu0 --addr 10.77.1.5/24 --listen --count 1
  emunic rdma echo --tap emu0 --addr 10.77.1.5/24 --server 10.77.1.2
  emunic rdma echo --tap emu0 --addr 10.77.1.5/24 --addr fd00:77::5/64 --server [fd00:77::2]:7471`},
}

// rdmaToolConfig is the command line of an rdma subcommand.
type rdmaToolConfig struct {
	Tap  string
	Addr netip.Prefix
	// MoreAddrs are the further --addr addresses (IPv6 ones: a dual-stack host).
	MoreAddrs []netip.Prefix
	MTU       int
	Pcap      string
	Listen    bool
	Server    netip.Addr
	Port      uint16
	Count     int
	Size      int
	Timeout   time.Duration
	rdmatool.Options
}

func parseRDMAToolFlags(sub string, args []string, stdout io.Writer) (rdmaToolConfig, error) {
	cmd := rdmaToolSub[sub]
	cfg := rdmaToolConfig{MTU: 1500}
	fs := newFlagSet(cmd.name)
	var addr prefixValue
	var server endpointValue
	mtu := mtuValue(cfg.MTU)
	defPort := uint64(rdmatool.EchoPort)
	if sub == "ping" {
		defPort = rdmatool.PingPort
	}
	port, count, size := uintValue(defPort), uintValue(5), uintValue(64)
	if sub == "echo" {
		count = 1
	}
	fs.StringVar(&cfg.Tap, "tap", "", "TAP device `NAME` to attach to, created if missing (required)")
	fs.Var(&addr, "addr", "this host's address with prefix length, a `CIDR` such as 10.77.1.5/24 (required); repeat it for IPv6 ones too (fd00:77::5/64), for RDMA over IPv6: the first IPv4 one is the primary")
	fs.BoolVar(&cfg.Listen, "listen", false, "be the server: wait for clients on --port")
	fs.Var(&server, "server", "be the client of the server at `IP` (IPv4 or IPv6), or at IP:PORT or [IPv6]:PORT")
	fs.Var(&port, "port", "the TCP `PORT`")
	fs.Var(&count, "count", "pings (ping) or clients / connections (echo), `N`")
	if sub == "ping" {
		fs.Var(&size, "size", "bytes per ping, `BYTES` (26 to 1048576; rping's -S)")
	}
	fs.Var(&mtu, "mtu", "IP MTU `N` of the NIC and the TAP (68-65535)")
	fs.StringVar(&cfg.Pcap, "pcap", "", "record every frame at the TAP port in the pcap file `FILE`")
	fs.BoolVar(&cfg.NoCRC, "no-crc", false, "do not ask for MPA CRC (used anyway when the peer asks)")
	fs.BoolVar(&cfg.PeerToPeer, "p2p", false, "client: ask for RFC 6581 peer-to-peer mode (a zero-length RDMA Write goes first)")
	fs.DurationVar(&cfg.Timeout, "timeout", 2*time.Minute, "give up after `DURATION` (0: never)")
	if err := parseWithArgs(cmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	if err := server.merge("port", (*uint64)(&port), flagSet(fs, "port")); err != nil {
		return cfg, usagef("%v", err)
	}
	cfg.Addr, cfg.MoreAddrs, cfg.Server, cfg.MTU = addr.p, addr.more, server.a, int(mtu)
	if err := addr.check(); err != nil {
		return cfg, usagef("%v", err)
	}
	if err := checkIPv6MTU(cfg.MoreAddrs, cfg.MTU); err != nil {
		return cfg, usagef("%v", err)
	}
	cfg.Count, cfg.Size = int(count), int(size)
	switch {
	case cfg.Tap == "":
		return cfg, usagef("--tap NAME is required (see 'emunic %s --help')", cmd.name)
	case !cfg.Addr.IsValid():
		return cfg, usagef("--addr CIDR is required, e.g. --addr 10.77.1.5/24 (see 'emunic %s --help')", cmd.name)
	case cfg.Listen == cfg.Server.IsValid():
		return cfg, usagef("one of --listen or --server IP is required (see 'emunic %s --help')", cmd.name)
	case cfg.Server.IsValid() && !onLink(cfg.Server, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --server %v: not inside %v (this host has no gateway)", cfg.Server, subnets(cfg.Addr, cfg.MoreAddrs))
	case ownAddr(cfg.Server, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --server %v: that is this host's own address", cfg.Server)
	case port == 0 || port > 65535:
		return cfg, usagef("bad --port %d: want 1 to 65535", port)
	case count < 1 || count > 1<<20:
		return cfg, usagef("bad --count %d: want 1 to 1048576", count)
	case sub == "ping" && (cfg.Size < rdmatool.PingMinSize || cfg.Size > rdmatool.PingMaxSize):
		return cfg, usagef("bad --size %d: want %d to %d", cfg.Size, rdmatool.PingMinSize, rdmatool.PingMaxSize)
	case cfg.Timeout < 0:
		return cfg, usagef("bad --timeout %v: want 0 or more", cfg.Timeout)
	}
	cfg.Port = uint16(port)
	return cfg, nil
}

func runRDMAToolCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, _, err := pickSub(rdmaToolCmd, rdmaToolSub, "ping or echo", args, stdout)
	if err != nil {
		return err
	}
	cfg, err := parseRDMAToolFlags(sub, args[1:], stdout)
	if err != nil {
		return err
	}
	logger := newLogger(stderr)
	th, err := attachTAP(printfTo(logger), cfg.Tap, cfg.Addr, cfg.MoreAddrs, cfg.MTU, netip.Addr{}, cfg.Pcap, 0, 0)
	if err != nil {
		return err
	}
	defer func() {
		th.host.Close()
		if th.rec != nil {
			if err := th.rec.Err(); err != nil {
				fmt.Fprintf(stderr, "emunic rdma: pcap %s: %v\n", cfg.Pcap, err)
			}
		}
	}()
	v, err := verbs.Open(th.host)
	if err != nil {
		return err
	}
	if cfg.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
		defer cancel()
	}
	role := "client of " + cfg.Server.String()
	if cfg.Listen {
		role = fmt.Sprintf("listening on port %d", cfg.Port)
	}
	ready := func() {
		addrs := addrList(cfg.Addr, cfg.MoreAddrs)
		logger.Info(fmt.Sprintf("%s on tap %s: rdma %s %s", addrs, th.tap.Name(), sub, role), "tap", th.tap.Name(), "addr", addrs)
	}
	dst := netip.AddrPortFrom(cfg.Server, cfg.Port)
	var n int
	switch sub {
	case "ping":
		pc := rdmatool.PingConfig{Count: cfg.Count, Size: cfg.Size, Port: cfg.Port, Options: cfg.Options, Out: stdout}
		if cfg.Listen {
			n, err = rdmatool.PingServer(ctx, v, pc, ready)
		} else {
			ready()
			n, err = rdmatool.PingClient(ctx, v, dst, pc)
		}
	default:
		ec := rdmatool.EchoConfig{Count: cfg.Count, Port: cfg.Port, Options: cfg.Options, Out: stdout}
		if cfg.Listen {
			n, err = rdmatool.EchoServer(ctx, v, ec, ready)
		} else {
			ready()
			n, err = rdmatool.EchoClient(ctx, v, dst, ec)
		}
	}
	what := map[string]string{"ping": "pings", "echo": "exchanges"}[sub]
	fmt.Fprintf(stdout, "%d of %d %s verified\n", n, cfg.Count, what)
	if err != nil {
		return fmt.Errorf("%d of %d %s verified: %w", n, cfg.Count, what, err)
	}
	return nil
}
