package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/split"
	"github.com/emunic/emunic/rings"
)

var deviceCmd = &command{
	name:     "device",
	summary:  "the emulated NIC alone, in its own process, for a host that attaches over a socket",
	synopsis: "--socket PATH [--tap NAME] [--metrics ADDR] | --ivshmem PATH --tap NAME [--mac MAC] [--mtu N] [--ivshmem-size SIZE]",
	about: `
Runs the emulated NIC (the offload unit, its engines and its port) as a
process of its own, in the manner of vhost-user: a host process connects to
the unix socket PATH (SOCK_SEQPACKET) and gives the device its memory (a memfd
both map), the rings' layouts and its doorbell and interrupt vectors
(eventfds), with the setup protocol of docs/split.md. From then on host and
device share nothing but that memory: this is the model a driver written in C
or an RTL simulation attaches to (the C header is rings/c/emunic_abi.h).

The device serves one host at a time; when the host closes or dies, the
device stops, releases the session's memory and waits for the next host.
The port: with --tap the device attaches to the Linux TAP device NAME itself
(hosts then need not bring one); without it the host must send its port with
the configuration (a socket to a wire in the host's process), as the emulated
hosts the tests make with EMUNIC_SPLIT=1 do. On SIGINT or SIGTERM it stops
and prints its counters.

With --ivshmem PATH instead of --socket, the device is an ivshmem server
for QEMU's ivshmem-doorbell device (docs/guest.md): a guest's kernel driver
(emunic.ko) programs it through the register window at the start of BAR2
(docs/bar0.md) and places its rings and buffers in the rest of BAR2, and the
device's interrupts are the ivshmem device's MSI-X vectors. QEMU needs
-chardev socket,path=PATH,id=ivs -device ivshmem-doorbell,chardev=ivs,vectors=5.
The port is the TAP --tap names; one guest at a time.`,
	examples: `  emunic device --socket /run/emunic/nic0.sock
  emunic device --socket /run/emunic/nic0.sock --tap emu0
  emunic device --socket /run/emunic/nic0.sock --metrics 127.0.0.1:9100
  emunic device --ivshmem /run/emunic/ivshmem.sock --tap emu0`,
}

type deviceConfig struct {
	Socket  string
	Tap     string
	Metrics string
	ivshmemFlags
	// traceArgs and traceFull are the trace header's arguments and
	// --full-writes: 'emunic trace record --device' sets them.
	traceArgs []string
	traceFull bool
}

func parseDeviceFlags(args []string, stdout io.Writer) (deviceConfig, error) {
	var cfg deviceConfig
	fs := newFlagSet("device")
	fs.StringVar(&cfg.Socket, "socket", "", "the setup socket's `PATH` (created; a stale socket there is replaced)")
	fs.StringVar(&cfg.Tap, "tap", "", "attach the device's port to the TAP device `NAME` (created if missing)")
	fs.StringVar(&cfg.Metrics, "metrics", "", "serve the counters at `ADDR` (host:port): Prometheus text at /metrics, expvar JSON at /debug/vars")
	iv := cfg.ivshmemFlags.add(fs)
	if err := parse(deviceCmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	if err := iv(); err != nil {
		return cfg, err
	}
	if cfg.IvshmemSocket != "" {
		if cfg.Socket != "" {
			return cfg, usagef("--socket and --ivshmem: one or the other")
		}
		if cfg.Tap == "" {
			return cfg, usagef("--ivshmem needs --tap NAME: the device's port")
		}
		return cfg, nil
	}
	if cfg.Socket == "" {
		return cfg, usagef("--socket PATH is required, or --ivshmem PATH (see 'emunic device --help')")
	}
	return cfg, nil
}

func runDeviceCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseDeviceFlags(args, stdout)
	if err != nil {
		return err
	}
	logger := newLogger(stderr)
	if cfg.IvshmemSocket != "" {
		return runIvshmemDevice(ctx, cfg, logger, stdout)
	}
	if fi, err := os.Lstat(cfg.Socket); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("--socket %s: exists and is not a socket", cfg.Socket)
		}
		// A socket nobody listens on is left over from a process that died:
		// replace it. One that answers belongs to a live device.
		if c, err := net.Dial("unixpacket", cfg.Socket); err == nil {
			c.Close()
			return fmt.Errorf("--socket %s: another device is listening there", cfg.Socket)
		}
		os.Remove(cfg.Socket)
	}
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: cfg.Socket, Net: "unixpacket"})
	if err != nil {
		return fmt.Errorf("--socket %s: %w", cfg.Socket, err)
	}
	defer os.Remove(cfg.Socket)
	sc := split.ServerConfig{Logf: printfTo(logger)}
	if cfg.Tap != "" {
		sc.OpenPort = tapOpener(cfg.Tap, logger)
	}
	srv := split.NewServer(sc)
	if cfg.Metrics != "" {
		ms, err := startMetrics(cfg.Metrics, func() []metric { return deviceMetrics(srv) }, logger)
		if err != nil {
			l.Close()
			return err
		}
		defer ms.Close()
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	logger.Info("device listening on "+cfg.Socket, "socket", cfg.Socket)
	select {
	case <-ctx.Done():
		l.Close()
		err = <-done
	case err = <-done:
	}
	st := srv.Stats()
	fmt.Fprintf(stdout, "device: %d hosts (%d started, %d gone), %d bad messages, %d out of order, %d refused\n",
		st.Sessions, st.Started, st.HostsGone, st.BadMessages, st.OutOfOrder, st.Refused)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}

// deviceMetrics are a device process's counters: its setup server's, and
// the running session's device's (stat block, rings, engine), read in the
// device's own process.
func deviceMetrics(srv *split.Server) []metric {
	out := structMetrics("emunic_split", "", "the device's setup server", srv.Stats())
	for id := rings.RegCounterID(0); id < rings.Bar0RegCounters; id++ {
		out = append(out, metric{name: "emunic_reg_" + id.String() + "_total", help: "the register block's access counters (docs/bar0.md)",
			value: uint64(srv.Registers().Counter(id))})
	}
	d := srv.Device()
	if d == nil {
		return out
	}
	st := d.Stats()
	for id := rings.StatID(0); id < rings.NumStats; id++ {
		out = append(out, metric{name: "emunic_device_" + id.String() + "_total", help: "the device's stat block (docs/rings.md)", value: st.Get(id)})
	}
	rc := d.RingCounters()
	for _, r := range []struct {
		name string
		st   rings.RingStats
	}{{"command", rc.Command}, {"notification", rc.Notify}, {"transmit", rc.Tx}, {"receive", rc.Rx}} {
		out = append(out, structMetrics("emunic_ring", fmt.Sprintf("ring=%q", r.name), "ring mechanics, the device's side", r.st)...)
	}
	return append(out, structMetrics("emunic_engine", "", "the delegated TCP engine", d.EngineCounters())...)
}

// tapOpener opens the TAP name as a device's port, up, each time it is
// called (a device closes its port when it stops).
func tapOpener(name string, logger *slog.Logger) func() (port.Port, error) {
	return func() (port.Port, error) {
		tap, err := port.OpenTAP(name)
		if err != nil {
			return nil, err
		}
		if err := tap.SetUp(true); err != nil {
			logger.Warn(fmt.Sprintf("%v; bring it up with: ip link set %s up", err, tap.Name()), "tap", tap.Name())
		}
		return tap, nil
	}
}
