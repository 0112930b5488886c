package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"time"

	"github.com/emunic/emunic/lwio"
)

var lwioCmd = &command{
	name:     "lwio",
	summary:  "LWIO file I/O over RDMA on a TAP: serve a directory; mount it, or put, get, ls, rm, mkdir, mv, stat",
	synopsis: "serve|mount|put|get|ls|stat|mkdir|rm|mv [flags] [arguments]",
	about: `
LWIO is the lightweight file-I/O protocol of docs/lwio.md: a client finds the
server on its pipe (TCP port 4445), authenticates an RDMA connection (port
4446), and then reads by RDMA Writes the server makes into the client's
registered memory and writes by sends; names (list, make, remove, rename)
go over the pipe. Each subcommand is one emulated host (host memory, the
emulated NIC, gVisor netstack) on a Linux TAP device:

  emunic lwio serve --tap NAME --addr CIDR --export DIR
        serve the files of DIR until SIGINT or SIGTERM, logging each client
        as it leaves, then print the server's counters
  emunic lwio mount --tap NAME --addr CIDR --server IP MOUNTPOINT
        mount the export with FUSE until SIGINT or SIGTERM
  emunic lwio put [-r] ... LOCAL REMOTE      copy a file (- for stdin) or tree there
  emunic lwio get [-r] ... REMOTE LOCAL      copy a file or tree here (- for stdout)
  emunic lwio ls ... [REMOTE]                list a directory (the export's root)
  emunic lwio stat ... REMOTE                print the size of a file or directory
  emunic lwio mkdir [-p] ... REMOTE...       make directories
  emunic lwio rm [-r] ... REMOTE...          remove files (and with -r, trees)
  emunic lwio mv ... FROM TO                 rename (into TO when it is a directory)

REMOTE is a path inside the server's export ("." is its root); the server
refuses any path that leaves it. put writes to a temporary name beside the
target, creating missing folders, and renames it into place only when the
server's SHA-256 of it matches what was read: a failed put leaves the old
file. get writes a temporary file and renames it when every byte arrived
and the server's SHA-256 matches. put and get print the bytes moved, the
rate and the digest, with a progress bar on long transfers when stderr is
a terminal. Exit status 1 when a command failed. Run 'emunic lwio COMMAND
--help' for a subcommand's flags; docs/cli.md (emunic lwio) has a two-host
recipe.`,
	examples: `  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export /srv/files
  emunic lwio mount --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 /mnt/lwio
  emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 -r ./photos backup/
  emunic lwio ls --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 backup
  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin ./copy.bin
  tar c src | emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 - src.tar
  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --addr fd00:9::2/64 --server [fd00:9::1]:4445 big.bin ./copy.bin`,
}

// lwioClientSyn is the flags every client subcommand takes.
const lwioClientSyn = "--tap NAME --addr CIDR --server IP [--key-file FILE] [--pipe-port N] [--arena SIZE] [--mtu N] [--gateway IP]"

var lwioSub = map[string]*command{
	"serve": {name: "lwio serve", synopsis: "--tap NAME --addr CIDR --export DIR [--key-file FILE] [--read-only] [--allow CIDR]... [--pipe-port N] [--rdma-port N] [--name NAME] [--arena SIZE] [--mtu N] [--gateway IP] [--pcap FILE]",
		about: `
Attaches an emulated host to the TAP device NAME with the address CIDR and
serves the files under DIR over LWIO until SIGINT or SIGTERM; then it prints
the server's counters (connections, requests, bytes, directory operations,
every refusal). Each RDMA connection is delegated to the NIC's offload unit and runs as
an iWARP QP; the server reads and writes the files with the CPU (O_DIRECT
for files a client registered with no intermediate buffering, where the
file system allows).

With --key-file, a client must prove it holds the same secret (the file's
bytes, less one trailing newline) before it may name any file, and the
secret signs every RDMA connection's authentication; without it, any client
that reaches the pipe port is served, and a client with a key file is
refused. --read-only refuses creates, truncates, writes and changes to
names; --allow (one or more) serves only clients whose address is in one of
the prefixes. Each client is logged by name, key and address, and when it
goes with the files it opened and its bytes each way (docs/lwio.md,
"Access control").`,
		examples: `  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export /srv/files
  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export . --arena 512MiB`},
	"mount": {name: "lwio mount", synopsis: lwioClientSyn + " [--polling] [--debug] MOUNTPOINT",
		about: `
Mounts the export of the LWIO server at IP on the directory MOUNTPOINT with
FUSE, so that any program can use its files (ls, cp -r, cat, dd, rsync,
fio), until SIGINT or SIGTERM; then it unmounts (lazily, if a program still
has the mount busy) and exits. Names go over the pipe, file data over the
RDMA connection: each open file is registered with the server. Needs
/dev/fuse, and root or fusermount3. Times: the server keeps one, the
modification time; owners are the mounting user's; hard and symbolic links
cannot be made.`,
		examples: `  sudo emunic lwio mount --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 /mnt/lwio`},
	"put": {name: "lwio put", synopsis: lwioClientSyn + " [--polling] [-r] LOCAL REMOTE",
		about: `
Copies the local file LOCAL ("-": standard input) to REMOTE on the LWIO
server at IP, or into REMOTE when it is a directory (an existing one, "."
or a path ending in "/"); with -r, LOCAL may be a directory, copied with
everything under it. Missing folders of REMOTE are made. Each file goes to
a temporary name beside its target, with writes of 64 KiB from registered
memory in flight up to the credits the server grants; the server's SHA-256
of what it holds is compared with the one of what was read, and only then
is the file renamed into place (with LOCAL's permissions). A failed put
removes the temporary file and leaves the old one as it was.`,
		examples: `  emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 ./big.bin big.bin
  emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 -r ./photos backup/
  tar c src | emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 - src.tar`},
	"get": {name: "lwio get", synopsis: lwioClientSyn + " [--polling] [-r] REMOTE LOCAL",
		about: `
Copies REMOTE from the LWIO server at IP to the local file LOCAL ("-":
standard output), or into LOCAL when it is a directory; with -r, REMOTE may
be a directory, copied with everything under it. Reads are RDMA Writes by
the server straight into registered memory, in flight up to the credits it
grants; the data goes to a temporary file beside LOCAL, renamed to LOCAL
only when every byte arrived and the server's SHA-256 of REMOTE matches the
one of the bytes received. With "-", the report goes to standard error.`,
		examples: `  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin ./copy.bin
  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 -r backup ./restored
  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 src.tar - | tar x`},
	"stat": {name: "lwio stat", synopsis: lwioClientSyn + " REMOTE",
		about: `
Prints the size in bytes of REMOTE, a file or a directory, on the LWIO
server at IP.`,
		examples: `  emunic lwio stat --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin`},
	"ls": {name: "lwio ls", synopsis: lwioClientSyn + " [REMOTE]",
		about: `
Lists the directory REMOTE (the export's root if none) on the LWIO server at
IP, one entry a line, sorted by name: permissions, size in bytes, the
modification time and the name (a directory's with a trailing "/"). A file
is listed on its own.`,
		examples: `  emunic lwio ls --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1
  emunic lwio ls --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 backup/photos`},
	"mkdir": {name: "lwio mkdir", synopsis: lwioClientSyn + " [-p] REMOTE...",
		about: `
Makes each directory REMOTE on the LWIO server at IP; with -p, its missing
parents too, and an existing directory is no error.`,
		examples: `  emunic lwio mkdir --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 -p backup/2026/11`},
	"rm": {name: "lwio rm", synopsis: lwioClientSyn + " [-r] REMOTE...",
		about: `
Removes each file REMOTE on the LWIO server at IP; with -r, a directory and
everything under it.`,
		examples: `  emunic lwio rm --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin
  emunic lwio rm --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 -r backup/old`},
	"mv": {name: "lwio mv", synopsis: lwioClientSyn + " FROM TO",
		about: `
Renames FROM to TO on the LWIO server at IP, replacing a file at TO; when
TO is a directory, FROM moves into it. The server renames in one step
(renameat2): no copy is made.`,
		examples: `  emunic lwio mv --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin backup/big.bin`},
}

// lwioArgs is how many positional arguments each subcommand takes: at
// least min, at most max (-1: no limit).
var lwioArgs = map[string][2]int{"serve": {0, 0}, "mount": {1, 1}, "put": {2, 2}, "get": {2, 2}, "stat": {1, 1},
	"ls": {0, 1}, "mkdir": {1, -1}, "rm": {1, -1}, "mv": {2, 2}}

// lwioConfig is the command line of an lwio subcommand.
type lwioConfig struct {
	Tap  string
	Addr netip.Prefix
	// MoreAddrs are the further --addr addresses (IPv6 ones: a dual-stack host).
	MoreAddrs []netip.Prefix
	MTU       int
	Gateway   netip.Addr
	Pcap      string
	Arena     int64
	Export    string
	Name      string
	PipePort  uint16
	RDMAPort  uint16
	Server    netip.Addr
	Polling   bool
	Args      []string
	// Access control (lwio_access.go): the secret from --key-file, and
	// serve's --read-only and --allow.
	Secret   []byte
	ReadOnly bool
	Allow    []netip.Prefix
	// Recursive is put's, get's and rm's -r; Parents mkdir's -p; Debug
	// mount's --debug.
	Recursive, Parents, Debug bool
}

// parseLWIOFlags parses the flags of subcommand sub and its positional
// arguments (lwioArgs).
func parseLWIOFlags(sub string, args []string, stdout io.Writer) (lwioConfig, error) {
	cmd := lwioSub[sub]
	cfg := lwioConfig{MTU: 1500}
	fs := newFlagSet(cmd.name)
	var addr prefixValue
	var gw addrValue
	var server endpointValue
	mtu := mtuValue(cfg.MTU)
	arena := sizeValue(256 << 20)
	pipe, rdma := uintValue(lwio.DefaultPipePort), uintValue(lwio.DefaultRDMAPort)
	fs.StringVar(&cfg.Tap, "tap", "", "TAP device `NAME` to attach to, created if missing (required)")
	fs.Var(&addr, "addr", "this host's address with prefix length, a `CIDR` such as 10.9.1.2/24 (required); repeat it for IPv6 ones too (fd00:9::2/64), for LWIO over IPv6: the first IPv4 one is the primary")
	fs.Var(&mtu, "mtu", "IP MTU `N` of the NIC and the TAP (68-65535)")
	fs.Var(&gw, "gateway", "default route via `IP`, IPv4 or IPv6, inside the subnet of an --addr of its family (or an IPv6 link-local address)")
	fs.Var(&arena, "arena", "host memory, `SIZE`: LWIO's buffers come from it")
	fs.Var(&pipe, "pipe-port", "the server's pipe TCP `PORT`")
	var keyFile string
	var allow allowValue
	fs.StringVar(&keyFile, "key-file", "", "the secret shared by the server and its clients is the bytes of `FILE` (one trailing newline ignored)")
	switch sub {
	case "serve":
		fs.BoolVar(&cfg.ReadOnly, "read-only", false, "export read-only: refuse creates, truncates and writes")
		fs.Var(&allow, "allow", "serve only clients whose address is in `CIDR` (repeatable; default: any)")
		fs.StringVar(&cfg.Export, "export", "", "the directory `DIR` to serve (required)")
		fs.Var(&rdma, "rdma-port", "the RDMA connections' `PORT` (announced on the pipe)")
		fs.StringVar(&cfg.Name, "name", "EMUNIC", "the server's `NAME` in the negotiate response (at most 15 characters)")
		fs.StringVar(&cfg.Pcap, "pcap", "", "record every frame at the TAP port in the pcap file `FILE`")
	default:
		fs.Var(&server, "server", "the LWIO server, `IP` (IPv4 or IPv6), or IP:PORT or [IPv6]:PORT naming its pipe port too (required)")
		switch sub {
		case "put", "get", "mount":
			fs.BoolVar(&cfg.Polling, "polling", false, "complete I/O by status blocks the server RDMA-writes (polled), not by status responses")
		}
		switch sub {
		case "put", "get":
			fs.BoolVar(&cfg.Recursive, "r", false, "copy a directory and everything under it")
		case "rm":
			fs.BoolVar(&cfg.Recursive, "r", false, "remove directories and everything under them")
		case "mkdir":
			fs.BoolVar(&cfg.Parents, "p", false, "make missing parents too; an existing directory is no error")
		case "mount":
			fs.BoolVar(&cfg.Debug, "debug", false, "log every FUSE request")
		}
	}
	if err := parseWithArgs(cmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	if err := server.merge("pipe-port", (*uint64)(&pipe), flagSet(fs, "pipe-port")); err != nil {
		return cfg, usagef("%v", err)
	}
	cfg.Addr, cfg.Gateway, cfg.MTU, cfg.Arena, cfg.Server = addr.p, gw.a, int(mtu), int64(arena), server.a
	cfg.MoreAddrs = addr.more
	if err := addr.check(); err != nil {
		return cfg, usagef("%v", err)
	}
	if err := checkIPv6MTU(cfg.MoreAddrs, cfg.MTU); err != nil {
		return cfg, usagef("%v", err)
	}
	cfg.PipePort, cfg.RDMAPort, cfg.Args = uint16(pipe), uint16(rdma), fs.Args()
	cfg.Allow = allow.ps
	var err error
	if cfg.Secret, err = readKeyFile(keyFile); err != nil {
		return cfg, err
	}
	want := lwioArgs[sub]
	switch {
	case cfg.Tap == "":
		return cfg, usagef("--tap NAME is required (see 'emunic %s --help')", cmd.name)
	case !cfg.Addr.IsValid():
		return cfg, usagef("--addr CIDR is required, e.g. --addr 10.9.1.2/24 (see 'emunic %s --help')", cmd.name)
	case cfg.Gateway.IsValid() && !onLink(cfg.Gateway, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --gateway %v: not inside %v", cfg.Gateway, subnets(cfg.Addr, cfg.MoreAddrs))
	case ownAddr(cfg.Gateway, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --gateway %v: that is the host's own address", cfg.Gateway)
	case sub != "serve" && ownAddr(cfg.Server, cfg.Addr, cfg.MoreAddrs):
		return cfg, usagef("bad --server %v: that is this host's own address", cfg.Server)
	case cfg.Arena < 16<<20 || cfg.Arena > 64<<30:
		return cfg, usagef("bad --arena %s: want 16MiB to 64GiB", formatSize(cfg.Arena))
	case pipe == 0 || pipe > 65535 || rdma == 0 || rdma > 65535:
		return cfg, usagef("bad port: want 1 to 65535")
	case sub == "serve" && cfg.Export == "":
		return cfg, usagef("--export DIR is required (see 'emunic lwio serve --help')")
	case sub != "serve" && !cfg.Server.IsValid():
		return cfg, usagef("--server IP is required (see 'emunic %s --help')", cmd.name)
	case len(cfg.Args) < want[0] || want[1] >= 0 && len(cfg.Args) > want[1]:
		n := fmt.Sprint(want[0])
		switch {
		case want[1] < 0:
			n += " or more"
		case want[1] != want[0]:
			n += fmt.Sprintf(" to %d", want[1])
		}
		return cfg, usagef("'emunic %s' takes %s argument(s) after its flags, got %d: %s", cmd.name, n, len(cfg.Args), cmd.synopsis)
	}
	for _, a := range cfg.Args {
		if strings.IndexByte(a, 0) >= 0 {
			return cfg, usagef("argument %q holds a NUL byte", a)
		}
	}
	return cfg, nil
}

func runLWIOCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, _, err := pickSub(lwioCmd, lwioSub, "serve, mount, put, get, ls, stat, mkdir, rm or mv", args, stdout)
	if err != nil {
		return err
	}
	cfg, err := parseLWIOFlags(sub, args[1:], stdout)
	if err != nil {
		return err
	}
	if sub == "mount" {
		// Before the host is built: a wrong mount point is a plain error.
		if err := checkMountPoint(cfg.Args[0]); err != nil {
			return err
		}
	}
	logger := newLogger(stderr)
	arena := cfg.Arena
	th, err := attachTAP(printfTo(logger), cfg.Tap, cfg.Addr, cfg.MoreAddrs, cfg.MTU, cfg.Gateway, cfg.Pcap, arena, 0)
	if err != nil {
		return err
	}
	defer th.host.Close()
	if sub == "serve" {
		return runLWIOServe(ctx, th, cfg, stdout, logger)
	}
	dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c, err := lwio.Dial(dctx, th.host, cfg.Server, lwio.ClientConfig{PipePort: cfg.PipePort, Polling: cfg.Polling, Credits: 32, Secret: cfg.Secret})
	if err != nil {
		return err
	}
	defer c.Close()
	if sub == "mount" {
		return runLWIOMount(ctx, c, cfg, logger)
	}
	return runLWIOClient(ctx, c, sub, cfg, os.Stdin, stdout, stderr)
}

// runLWIOClient runs a one-shot client subcommand on a connected client.
func runLWIOClient(ctx context.Context, c *lwio.Client, sub string, cfg lwioConfig, stdin io.Reader, stdout, stderr io.Writer) error {
	x := &lwioSession{ctx: ctx, c: c, stdin: stdin, stdout: stdout, stderr: stderr}
	a := cfg.Args
	var err error
	switch sub {
	case "stat":
		err = x.stat(a[0])
	case "ls":
		err = x.ls(append(a, ".")[0])
	case "put":
		err = x.put(a[0], a[1], cfg.Recursive)
	case "get":
		err = x.get(a[0], a[1], cfg.Recursive)
	case "mv":
		err = x.mv(a[0], a[1])
	case "mkdir", "rm":
		for _, p := range a {
			if sub == "mkdir" {
				err = x.mkdir(p, cfg.Parents)
			} else {
				err = x.rm(p, cfg.Recursive)
			}
			if err != nil {
				break
			}
		}
	}
	if err == nil && cfg.Recursive && (sub == "put" || sub == "get") {
		fmt.Fprintf(stdout, "%s: %d files, %d bytes\n", sub, x.files, x.bytes)
	}
	if err == nil && x.skipped > 0 {
		err = fmt.Errorf("%s: %d entries skipped (not regular files or directories)", sub, x.skipped)
	}
	return err
}

func runLWIOServe(ctx context.Context, th *tapHost, cfg lwioConfig, stdout io.Writer, logger *slog.Logger) error {
	exp, err := lwio.OpenExport(cfg.Export)
	if err != nil {
		return err
	}
	defer exp.Close()
	if cfg.ReadOnly {
		exp.SetReadOnly()
	}
	srv, err := lwio.NewServer(th.host, exp, lwio.ServerConfig{Name: cfg.Name, PipePort: cfg.PipePort, RDMAPort: cfg.RDMAPort,
		Secret: cfg.Secret, Allow: cfg.Allow, Logger: logger})
	if err != nil {
		return err
	}
	logger.Info(fmt.Sprintf("%v on tap %s: LWIO server %q exporting %s, pipe on port %d, RDMA on port %d, %s; Ctrl-C to stop",
		addrList(cfg.Addr, cfg.MoreAddrs), th.tap.Name(), cfg.Name, cfg.Export, cfg.PipePort, cfg.RDMAPort, describeAccess(cfg.Secret, cfg.ReadOnly, cfg.Allow)),
		"addr", addrList(cfg.Addr, cfg.MoreAddrs), "tap", th.tap.Name(), "export", cfg.Export)
	start := time.Now()
	<-ctx.Done()
	logger.Info("stopping", "after", time.Since(start).Round(time.Second))
	srv.Close()
	printLWIOServerStats(stdout, srv.Stats(), srv.DirStats())
	return nil
}

// printLWIOServerStats prints every counter of the server, the zero ones
// too: a report that drops rows cannot be compared run to run.
func printLWIOServerStats(w io.Writer, s lwio.ServerStats, d lwio.DirStats) {
	rows := []struct {
		name string
		v    uint64
	}{
		{"pipes", s.Pipes}, {"negotiates", s.Negotiates}, {"opens", s.Opens}, {"connections", s.Conns},
		{"authenticated", s.Authenticated}, {"authentication failures", s.AuthFailures},
		{"authentication timeouts", s.AuthTimeouts}, {"registers", s.Registers}, {"reads", s.Reads},
		{"writes", s.Writes}, {"vectored reads", s.VecReads}, {"vectored writes", s.VecWrites},
		{"closes", s.Closes}, {"cancels", s.Cancels}, {"cancelled", s.Cancelled}, {"interrupts", s.Interrupts},
		{"credit transactions", s.CreditGrants}, {"credits returned", s.CreditRetires},
		{"bytes read", s.BytesRead}, {"bytes written", s.BytesWritten}, {"O_DIRECT transfers", s.DirectIO},
		{"status responses", s.InterruptCompletions}, {"status blocks written", s.PollingCompletions},
		{"immediate-data completions", s.ImmediateCompletions},
		{"credit violations", s.CreditViolations}, {"bad requests", s.BadRequests},
		{"protocol errors", s.ProtocolErrors}, {"pipe errors", s.PipeErrors}, {"pipe timeouts", s.PipeTimeouts},
		{"connections closed by clients", s.ConnsClosed}, {"connections lost", s.ConnErrors},
		{"directory stats", d.Ops["STAT"]}, {"directory lists", d.Ops["LIST"]}, {"directories made", d.Ops["MKDIR"]},
		{"removes", d.Ops["REMOVE"]}, {"renames", d.Ops["RENAME"]}, {"attribute changes", d.Ops["SETATTR"]},
		{"hashes", d.Ops["HASH"]}, {"syncs", d.Ops["SYNC"]}, {"bytes hashed", d.BytesHashed},
		{"directory ops refused", d.Refused}, {"names not listed", d.Skipped},
	}
	fmt.Fprintln(w, "LWIO server:")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-28s %d\n", r.name, r.v)
	}
}
