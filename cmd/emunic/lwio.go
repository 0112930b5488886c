package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/emunic/emunic/lwio"
)

var lwioCmd = &command{
	name:     "lwio",
	summary:  "LWIO file I/O over RDMA on a TAP: serve a directory; put, get, stat",
	synopsis: "serve|put|get|stat [flags] [arguments]",
	about: `
LWIO is the lightweight file-I/O protocol of docs/lwio.md: a client finds the
server on its pipe (TCP port 4445), authenticates an RDMA connection (port
4446), and then reads by RDMA Writes the server makes into the client's
registered memory and writes by sends. Each subcommand is one emulated host
(host memory, the emulated NIC, gVisor netstack) on a Linux TAP device:

  emunic lwio serve --tap NAME --addr CIDR --export DIR
        serve the files of DIR until SIGINT or SIGTERM, then print the
        server's counters
  emunic lwio put --tap NAME --addr CIDR --server IP LOCAL REMOTE
        copy the local file LOCAL to REMOTE on the server (created or
        truncated)
  emunic lwio get --tap NAME --addr CIDR --server IP REMOTE LOCAL
        copy REMOTE to the local file LOCAL (written to a temporary file
        beside it, renamed when complete)
  emunic lwio stat --tap NAME --addr CIDR --server IP REMOTE
        print REMOTE's size in bytes

REMOTE is a path inside the server's export; the server refuses any path
that leaves it. put and get print the bytes moved and the rate, with a
progress bar on long transfers when stderr is a terminal. Exit status 1 when
the transfer failed or the sizes disagree. Run 'emunic lwio COMMAND --help'
for a subcommand's flags; docs/cli.md (emunic lwio) has a two-host recipe.`,
	examples: `  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export /srv/files
  emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 ./big.bin big.bin
  emunic lwio stat --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin
  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin ./copy.bin`,
}

var lwioSub = map[string]*command{
	"serve": {name: "lwio serve", synopsis: "--tap NAME --addr CIDR --export DIR [--key-file FILE] [--read-only] [--allow CIDR]... [--pipe-port N] [--rdma-port N] [--name NAME] [--arena SIZE] [--mtu N] [--gateway IP] [--pcap FILE]",
		about: `
Attaches an emulated host to the TAP device NAME with the address CIDR and
serves the regular files under DIR over LWIO until SIGINT or SIGTERM; then it
prints the server's counters (connections, requests, bytes, every refusal).
Each RDMA connection is delegated to the NIC's offload unit and runs as an
iWARP QP; the server reads and writes the files with the CPU (O_DIRECT for
files a client registered with no intermediate buffering, where the file
system allows).

With --key-file, a client must prove it holds the same secret (the file's
bytes, less one trailing newline) before it may name any file, and the
secret signs every RDMA connection's authentication; without it, any client
that reaches the pipe port is served, and a client with a key file is
refused. --read-only refuses creates, truncates and writes; --allow (one
or more) serves only clients whose address is in one of the prefixes. Each
client is logged by name, key and address (docs/lwio.md, "Access control").`,
		examples: `  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export /srv/files
  emunic lwio serve --tap lw0 --addr 10.9.1.1/24 --export . --arena 512MiB`},
	"put": {name: "lwio put", synopsis: "--tap NAME --addr CIDR --server IP [--key-file FILE] [--polling] [--arena SIZE] [--mtu N] [--gateway IP] LOCAL REMOTE",
		about: `
Copies the local file LOCAL to REMOTE on the LWIO server at IP (created, or
truncated if it exists), with writes of the server's largest message in
flight up to the credits it grants, then checks the remote size.`,
		examples: `  emunic lwio put --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 ./big.bin big.bin`},
	"get": {name: "lwio get", synopsis: "--tap NAME --addr CIDR --server IP [--key-file FILE] [--polling] [--arena SIZE] [--mtu N] [--gateway IP] REMOTE LOCAL",
		about: `
Copies REMOTE from the LWIO server at IP to the local file LOCAL: reads are
RDMA Writes by the server straight into registered memory, in flight up to
the credits it grants; the data goes to a temporary file beside LOCAL,
renamed to LOCAL only when every byte arrived.`,
		examples: `  emunic lwio get --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin ./copy.bin`},
	"stat": {name: "lwio stat", synopsis: "--tap NAME --addr CIDR --server IP [--key-file FILE] [--arena SIZE] [--mtu N] [--gateway IP] REMOTE",
		about: `
Prints the size in bytes of REMOTE on the LWIO server at IP.`,
		examples: `  emunic lwio stat --tap lw1 --addr 10.9.1.2/24 --server 10.9.1.1 big.bin`},
}

// lwioConfig is the command line of an lwio subcommand.
type lwioConfig struct {
	Tap      string
	Addr     netip.Prefix
	MTU      int
	Gateway  netip.Addr
	Pcap     string
	Arena    int64
	Export   string
	Name     string
	PipePort uint16
	RDMAPort uint16
	Server   netip.Addr
	Polling  bool
	Args     []string
	// Access control (lwio_access.go): the secret from --key-file, and
	// serve's --read-only and --allow.
	Secret   []byte
	ReadOnly bool
	Allow    []netip.Prefix
}

// parseLWIOFlags parses the flags of subcommand sub and its positional
// arguments (serve none, stat one, put and get two).
func parseLWIOFlags(sub string, args []string, stdout io.Writer) (lwioConfig, error) {
	cmd := lwioSub[sub]
	cfg := lwioConfig{MTU: 1500}
	fs := newFlagSet(cmd.name)
	var addr prefixValue
	var gw, server addrValue
	mtu := mtuValue(cfg.MTU)
	arena := sizeValue(256 << 20)
	pipe, rdma := uintValue(lwio.DefaultPipePort), uintValue(lwio.DefaultRDMAPort)
	fs.StringVar(&cfg.Tap, "tap", "", "TAP device `NAME` to attach to, created if missing (required)")
	fs.Var(&addr, "addr", "this host's IPv4 address with prefix length, a `CIDR` such as 10.9.1.2/24 (required)")
	fs.Var(&mtu, "mtu", "IP MTU `N` of the NIC and the TAP (68-65535)")
	fs.Var(&gw, "gateway", "default route via `IP`, inside --addr's subnet")
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
		fs.Var(&server, "server", "the LWIO server's `IP` (required)")
		if sub != "stat" {
			fs.BoolVar(&cfg.Polling, "polling", false, "complete I/O by status blocks the server RDMA-writes (polled), not by status responses")
		}
	}
	if err := parseWithArgs(cmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	cfg.Addr, cfg.Gateway, cfg.MTU, cfg.Arena, cfg.Server = addr.p, gw.a, int(mtu), int64(arena), server.a
	cfg.PipePort, cfg.RDMAPort, cfg.Args = uint16(pipe), uint16(rdma), fs.Args()
	cfg.Allow = allow.ps
	var err error
	if cfg.Secret, err = readKeyFile(keyFile); err != nil {
		return cfg, err
	}
	want := map[string]int{"serve": 0, "put": 2, "get": 2, "stat": 1}[sub]
	switch {
	case cfg.Tap == "":
		return cfg, usagef("--tap NAME is required (see 'emunic %s --help')", cmd.name)
	case !cfg.Addr.IsValid():
		return cfg, usagef("--addr CIDR is required, e.g. --addr 10.9.1.2/24 (see 'emunic %s --help')", cmd.name)
	case cfg.Gateway.IsValid() && !cfg.Addr.Contains(cfg.Gateway):
		return cfg, usagef("bad --gateway %v: not inside %v", cfg.Gateway, cfg.Addr.Masked())
	case cfg.Arena < 16<<20 || cfg.Arena > 64<<30:
		return cfg, usagef("bad --arena %s: want 16MiB to 64GiB", formatSize(cfg.Arena))
	case pipe == 0 || pipe > 65535 || rdma == 0 || rdma > 65535:
		return cfg, usagef("bad port: want 1 to 65535")
	case sub == "serve" && cfg.Export == "":
		return cfg, usagef("--export DIR is required (see 'emunic lwio serve --help')")
	case sub != "serve" && !cfg.Server.IsValid():
		return cfg, usagef("--server IP is required (see 'emunic %s --help')", cmd.name)
	case len(cfg.Args) != want:
		return cfg, usagef("'emunic %s' takes %d argument(s) after its flags, got %d: %s", cmd.name, want, len(cfg.Args), cmd.synopsis)
	}
	return cfg, nil
}

func runLWIOCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, _, err := pickSub(lwioCmd, lwioSub, "serve, put, get or stat", args, stdout)
	if err != nil {
		return err
	}
	cfg, err := parseLWIOFlags(sub, args[1:], stdout)
	if err != nil {
		return err
	}
	logger := newLogger(stderr)
	arena := cfg.Arena
	th, err := attachTAP(printfTo(logger), cfg.Tap, cfg.Addr, cfg.MTU, cfg.Gateway, cfg.Pcap, arena, 0)
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
	switch sub {
	case "stat":
		n, err := c.Stat(ctx, cfg.Args[0])
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, n)
		return nil
	case "put":
		return lwioPut(ctx, c, cfg.Args[0], cfg.Args[1], stdout, stderr)
	default:
		return lwioGet(ctx, c, cfg.Args[0], cfg.Args[1], stdout, stderr)
	}
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
		cfg.Addr, th.tap.Name(), cfg.Name, cfg.Export, cfg.PipePort, cfg.RDMAPort, describeAccess(cfg.Secret, cfg.ReadOnly, cfg.Allow)),
		"addr", cfg.Addr, "tap", th.tap.Name(), "export", cfg.Export)
	start := time.Now()
	<-ctx.Done()
	logger.Info("stopping", "after", time.Since(start).Round(time.Second))
	srv.Close()
	printLWIOServerStats(stdout, srv.Stats())
	return nil
}

// printLWIOServerStats prints every counter of the server, the zero ones
// too: a report that drops rows cannot be compared run to run.
func printLWIOServerStats(w io.Writer, s lwio.ServerStats) {
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
	}
	fmt.Fprintln(w, "LWIO server:")
	for _, r := range rows {
		fmt.Fprintf(w, "  %-28s %d\n", r.name, r.v)
	}
}

// lwioWindow is the most requests put and get keep in flight (the
// client also never exceeds the server's credits).
const lwioWindow = 32

func lwioPut(ctx context.Context, c *lwio.Client, local, remote string, stdout, stderr io.Writer) error {
	in, err := os.Open(local)
	if err != nil {
		return err
	}
	defer in.Close()
	st, err := in.Stat()
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", local)
	}
	size := st.Size()
	f, err := c.Open(ctx, remote, lwio.OpenFlags{Create: true, Truncate: true})
	if err != nil {
		return fmt.Errorf("open %s on the server: %w", remote, err)
	}
	defer f.Close()
	start := time.Now()
	moved, err := transfer(c, size, newProgress(stderr, "put "+local, size),
		func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, error) {
			if _, err := io.ReadFull(in, buf); err != nil {
				return nil, fmt.Errorf("%s: %w", local, err)
			}
			return f.StartWrite(ctx, buf, off, done)
		}, nil)
	if err != nil {
		return err
	}
	got, err := c.Stat(ctx, remote)
	if err != nil {
		return err
	}
	if got != size || moved != size {
		return fmt.Errorf("put %s: the server holds %d bytes of %d (%d acknowledged)", remote, got, size, moved)
	}
	fmt.Fprintf(stdout, "put %s -> %s:%s: %d bytes in %v (%s)\n", local, c.ServerName(), remote, size,
		time.Since(start).Round(time.Millisecond), rate(size, time.Since(start)))
	return nil
}

func lwioGet(ctx context.Context, c *lwio.Client, remote, local string, stdout, stderr io.Writer) error {
	f, err := c.Open(ctx, remote, lwio.OpenFlags{})
	if err != nil {
		return fmt.Errorf("open %s on the server: %w", remote, err)
	}
	defer f.Close()
	size := f.Size()
	tmp, err := os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".lwio-*")
	if err != nil {
		return err
	}
	committed := false
	defer func() {
		if !committed {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	start := time.Now()
	moved, err := transfer(c, size, newProgress(stderr, "get "+remote, size),
		func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, error) {
			return f.StartRead(ctx, buf, off, done)
		}, func(cl *lwio.Call, buf []byte) error {
			_, err := tmp.WriteAt(buf[:cl.N], cl.Off)
			return err
		})
	if err != nil {
		return err
	}
	if moved != size {
		return fmt.Errorf("get %s: %d bytes arrived of %d (the file changed on the server?)", remote, moved, size)
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), local); err != nil {
		return err
	}
	committed = true
	fmt.Fprintf(stdout, "get %s:%s -> %s: %d bytes in %v (%s)\n", c.ServerName(), remote, local, size,
		time.Since(start).Round(time.Millisecond), rate(size, time.Since(start)))
	return nil
}

// transfer moves size bytes in 64 KiB requests with up to lwioWindow in
// flight, each with its own slice of registered memory (so the NIC moves
// the data without a copy): issue starts the request for buf at off, its
// completion going to done; finish, if set, takes each completed request
// with its buffer. It returns the bytes the completions account for; the
// first error stops issuing, and what is in flight is still taken.
func transfer(c *lwio.Client, size int64, bar *progress, issue func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, error),
	finish func(cl *lwio.Call, buf []byte) error) (int64, error) {
	const piece = 64 << 10
	mem, err := c.Alloc(lwioWindow * piece)
	if err != nil {
		return 0, err
	}
	done := make(chan *lwio.Call, lwioWindow)
	free := make([]int, 0, lwioWindow)
	for i := range lwioWindow {
		free = append(free, lwioWindow-1-i)
	}
	// One goroutine issues and takes, so a Call is in slotOf before it is
	// taken even when it completed at once.
	slotOf := make(map[*lwio.Call]int, lwioWindow)
	var off, moved int64
	var firstErr error
	take := func() {
		cl := <-done
		s := slotOf[cl]
		delete(slotOf, cl)
		free = append(free, s)
		err := cl.Err
		if err == io.EOF {
			err = nil
		}
		if err == nil && finish != nil && cl.N > 0 {
			err = finish(cl, mem[s*piece:(s+1)*piece])
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		moved += int64(cl.N)
		bar.set(moved)
	}
	for firstErr == nil && off < size {
		if len(free) == 0 {
			take()
			continue
		}
		s := free[len(free)-1]
		n := int(min(piece, size-off))
		cl, err := issue(mem[s*piece:s*piece+n], off, done)
		if err != nil {
			firstErr = err
			break
		}
		free = free[:len(free)-1]
		slotOf[cl] = s
		off += int64(n)
	}
	for len(slotOf) > 0 {
		take()
	}
	bar.finish()
	return moved, firstErr
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/d.Seconds()/1e6)
}

// progress is a one-line progress bar on a terminal (nothing otherwise),
// redrawn at most ten times a second, for transfers of 8 MiB and more.
type progress struct {
	w     io.Writer
	label string
	total int64
	on    bool
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer, label string, total int64) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, label: label, total: total, on: ok && isTerminal(f) && total >= 8<<20, start: time.Now()}
}

func (p *progress) set(n int64) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	done := int(int64(width) * n / max(p.total, 1))
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %s", p.label, strings.Repeat("=", done), strings.Repeat(" ", width-done),
		100*n/max(p.total, 1), rate(n, time.Since(p.start)))
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
