package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/ivshmem"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/trace"
)

// ivshmemFlags are 'emunic device --ivshmem”s own flags.
type ivshmemFlags struct {
	IvshmemSocket string
	IvshmemSize   int64
	MAC           [6]byte
	MTU           int
	Trace         string
}

// add defines the flags on fs; the function it returns checks them after
// parsing.
func (c *ivshmemFlags) add(fs *flag.FlagSet) func() error {
	fs.StringVar(&c.IvshmemSocket, "ivshmem", "", "serve QEMU's ivshmem-doorbell at the unix socket `PATH` (instead of --socket): a guest's emunic.ko drives the device (docs/guest.md)")
	size := sizeValue(8 << 20)
	fs.Var(&size, "ivshmem-size", "BAR2's `SIZE`, a power of two: the register window, then the guest driver's rings and buffers")
	mac := "02:e3:00:00:00:01"
	fs.StringVar(&mac, "mac", mac, "with --ivshmem: the device's station address `MAC`")
	mtu := mtuValue(1500)
	fs.Var(&mtu, "mtu", "with --ivshmem: the device's IP MTU `N` (68-65535)")
	fs.StringVar(&c.Trace, "trace", "", "with --ivshmem: record a ring trace of every enable in `FILE` (docs/trace.md; 'emunic trace replay FILE' replays it)")
	return func() error {
		hw, err := net.ParseMAC(mac)
		if err != nil || len(hw) != 6 {
			return usagef("--mac %q: want six bytes such as 02:e3:00:00:00:01", mac)
		}
		copy(c.MAC[:], hw)
		c.MTU = int(mtu)
		c.IvshmemSize = int64(size)
		if c.IvshmemSocket != "" && (c.IvshmemSize < ivshmem.MinMemSize || c.IvshmemSize&(c.IvshmemSize-1) != 0 || c.IvshmemSize > 1<<30) {
			return usagef("--ivshmem-size %s: want a power of two from %s to 1GiB", formatSize(c.IvshmemSize), formatSize(ivshmem.MinMemSize))
		}
		return nil
	}
}

// runIvshmemDevice serves the device to QEMU guests until ctx ends.
func runIvshmemDevice(ctx context.Context, cfg deviceConfig, logger *slog.Logger, stdout io.Writer) error {
	path := cfg.IvshmemSocket
	if fi, err := os.Lstat(path); err == nil {
		if fi.Mode()&os.ModeSocket == 0 {
			return fmt.Errorf("--ivshmem %s: exists and is not a socket", path)
		}
		if c, err := net.Dial("unix", path); err == nil {
			c.Close()
			return fmt.Errorf("--ivshmem %s: another server is listening there", path)
		}
		os.Remove(path)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return fmt.Errorf("--ivshmem %s: %w", path, err)
	}
	defer os.Remove(path)
	logf := printfTo(logger)
	dc := ivshmem.DeviceConfig{
		NIC:      nic.Config{MAC: cfg.MAC, MTU: cfg.MTU},
		OpenPort: tapOpener(cfg.Tap, logger),
		Logf:     logf,
	}
	if cfg.Trace != "" {
		f, err := os.Create(cfg.Trace)
		if err != nil {
			l.Close()
			return err
		}
		args := cfg.traceArgs
		if args == nil {
			args = append([]string{"device"}, os.Args[2:]...)
		}
		w, err := trace.NewWriter(f, trace.Header{Args: args, Clock: "monotonic", FullWrites: cfg.traceFull})
		if err != nil {
			f.Close()
			l.Close()
			return err
		}
		defer func() {
			if err := w.Close(); err != nil {
				logger.Error(fmt.Sprintf("trace %s: %v", cfg.Trace, err))
				return
			}
			fmt.Fprintf(stdout, "trace: %d records in %s\n", w.Records(), cfg.Trace)
		}()
		// A traced unit polls its port, which a TAP cannot be polled
		// as: the device gets one end of an in-memory wire, spliced to
		// the TAP (the trace records the frames at the wire).
		openTAP := dc.OpenPort
		dc.OpenPort = func() (port.Port, error) {
			tap, err := openTAP()
			if err != nil {
				return nil, err
			}
			a, b, err := port.NewWire(port.WireConfig{Name: "guest-tap"})
			if err != nil {
				tap.Close()
				return nil, err
			}
			port.Splice(b, tap)
			return a, nil
		}
		enables := 0
		dc.NewTracer = func() nic.Tracer {
			enables++
			return w.NewDevice(fmt.Sprintf("guest-enable-%d", enables))
		}
	}
	dev := ivshmem.NewDevice(dc)
	srv, err := ivshmem.NewServer(ivshmem.Config{Vectors: ivshmem.DeviceVectors, MemSize: int(cfg.IvshmemSize), Logf: logf}, dev)
	if err != nil {
		l.Close()
		return err
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(l) }()
	logger.Info(fmt.Sprintf("ivshmem server on %s: QEMU -chardev socket,path=%s,id=ivs -device ivshmem-doorbell,chardev=ivs,vectors=%d",
		path, path, ivshmem.DeviceVectors), "socket", path, "tap", cfg.Tap)
	select {
	case <-ctx.Done():
		l.Close()
		err = <-done
	case err = <-done:
	}
	st, ds, m := srv.Stats(), dev.Stats(), dev.Registers()
	fmt.Fprintf(stdout, "device: %d guests (%d gone, %d refused), %d doorbells, %d register-window scans, %d register accesses refused, %d doorbells on unknown vectors\n",
		st.Guests, st.Gone, st.Refused, st.Doorbells, ds.Scans, ds.Refused, ds.BadVectors)
	fmt.Fprintf(stdout, "registers:")
	for id := rings.RegCounterID(0); id < rings.Bar0RegCounters; id++ {
		fmt.Fprintf(stdout, " %s %d", id, m.Counter(id))
	}
	fmt.Fprintln(stdout)
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
