package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"os"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/split"
)

var deviceCmd = &command{
	name:     "device",
	summary:  "the emulated NIC alone, in its own process, for a host that attaches over a socket",
	synopsis: "--socket PATH [--tap NAME]",
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
and prints its counters.`,
	examples: `  emunic device --socket /run/emunic/nic0.sock
  emunic device --socket /run/emunic/nic0.sock --tap emu0`,
}

type deviceConfig struct {
	Socket string
	Tap    string
}

func parseDeviceFlags(args []string, stdout io.Writer) (deviceConfig, error) {
	var cfg deviceConfig
	fs := newFlagSet("device")
	fs.StringVar(&cfg.Socket, "socket", "", "the setup socket's `PATH` (created; a stale socket there is replaced)")
	fs.StringVar(&cfg.Tap, "tap", "", "attach the device's port to the TAP device `NAME` (created if missing)")
	if err := parse(deviceCmd, fs, args, stdout); err != nil {
		return cfg, err
	}
	if cfg.Socket == "" {
		return cfg, usagef("--socket PATH is required (see 'emunic device --help')")
	}
	return cfg, nil
}

func runDeviceCommand(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cfg, err := parseDeviceFlags(args, stdout)
	if err != nil {
		return err
	}
	logger := log.New(stderr, "", log.Ltime)
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
	sc := split.ServerConfig{Logf: logger.Printf}
	if cfg.Tap != "" {
		sc.OpenPort = func() (port.Port, error) {
			tap, err := port.OpenTAP(cfg.Tap)
			if err != nil {
				return nil, err
			}
			if err := tap.SetUp(true); err != nil {
				logger.Printf("warning: %v; bring it up with: ip link set %s up", err, tap.Name())
			}
			return tap, nil
		}
	}
	srv := split.NewServer(sc)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	logger.Printf("device listening on %s", cfg.Socket)
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
