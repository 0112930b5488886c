package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/tcpfile"
	"github.com/emunic/emunic/tcpstack/services"
)

// The LWIO paths of the demo (--lwio): host B serves a file of --bytes
// seeded bytes, and host A reads all of it in 64 KiB reads with 16 in
// flight, over LWIO (the server RDMA-writes each piece into A's registered
// memory) and over a plain-TCP file protocol on netstack (lwio/tcpfile),
// one after the other on the same hosts. Each row's client CPU is host A's
// host side alone: host B is built under the pprof label side=server and
// the devices label their own goroutines.

const (
	demoPortFile  = 5004 // B's tcpfile server
	demoLWIOPiece = 64 << 10
	demoLWIOWin   = 16
)

// lwioDemo is what the two file paths share: the exported directory, its
// file and the file's hash.
type lwioDemo struct {
	dir  string
	sum  [32]byte
	srv  *lwio.Server
	cli  lwio.ClientStats
	stat lwio.ServerStats
}

// lwioFile writes the demo's file into a fresh directory (once per run).
func (lab *demoLab) lwioFile(cfg demoConfig) (*lwioDemo, error) {
	if lab.lw != nil {
		return lab.lw, nil
	}
	dir, err := os.MkdirTemp("", "emunic-demo-lwio-")
	if err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, "demo.bin"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	var key [32]byte
	for i := range 8 {
		key[i] = byte(cfg.Seed >> (8 * i))
	}
	h := sha256.New()
	if _, err := io.CopyN(io.MultiWriter(f, h), rand.NewChaCha8(key), cfg.Bytes); err != nil {
		f.Close()
		os.RemoveAll(dir)
		return nil, err
	}
	if err := f.Close(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	lab.lw = &lwioDemo{dir: dir}
	copy(lab.lw.sum[:], h.Sum(nil))
	return lab.lw, nil
}

// clientCPU runs f and returns the wall time, the process's CPU time, and
// host A's host-side CPU (every sample not labelled device or server); the
// last is 0 when a CPU profile is already running, or when the lab runs
// in lockstep (the profiler's reader sits in a system call the whole time,
// and the lockstep harness waits for every goroutine to block).
func clientCPU(lab *demoLab, f func()) (wall, cpu, client time.Duration) {
	cpu0 := cpusplit.Process()
	var s cpusplit.Split
	err := errLockstepCPU
	if !lab.lockstep {
		s, err = cpusplit.Measure(f)
	}
	cpu = cpusplit.Process() - cpu0
	if err != nil {
		start := time.Now()
		f()
		return time.Since(start), cpusplit.Process() - cpu0, 0
	}
	return s.Wall, cpu, s.Host - s.Server
}

// lwioServerConfig is the demo's LWIO server: the defaults, but in a
// deterministic run seeded and with one file I/O worker per connection
// (several would take requests in whatever order they woke, and post the
// RDMA Writes of their replies in that order).
func (l *demoLab) lwioServerConfig(cfg demoConfig) lwio.ServerConfig {
	if !l.lockstep {
		return lwio.ServerConfig{}
	}
	return lwio.ServerConfig{Seed: l.seed(cfg, 2), Workers: 1}
}

var errLockstepCPU = errors.New("no CPU split in lockstep")

// lwioTransfer reads the file from B over LWIO.
func lwioTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	lw, err := lab.lwioFile(cfg)
	if err != nil {
		return res, err
	}
	exp, err := lwio.OpenExport(lw.dir)
	if err != nil {
		return res, err
	}
	defer exp.Close()
	inB(func() { lw.srv, err = lwio.NewServer(lab.b, exp, lab.lwioServerConfig(cfg)) })
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	defer func() {
		lw.srv.Close()
		lw.stat = lw.srv.Stats()
	}()
	dctx, cancel := context.WithTimeout(ctx, cfg.Idle)
	defer cancel()
	c, err := lwio.Dial(dctx, lab.a, lab.addrB, lwio.ClientConfig{Credits: demoLWIOWin, Seed: lab.seed(cfg, 1)})
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	defer c.Close()
	f, err := c.Open(dctx, "demo.bin", lwio.OpenFlags{})
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	defer f.Close()
	mem, err := c.Alloc(demoLWIOWin * demoLWIOPiece)
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	h := sha256.New()
	var rerr error
	res.elapsed, res.cpu, res.clientCPU = clientCPU(lab, func() {
		// A window of reads, taken in order so the hash runs over the
		// file's bytes in order; each piece's memory is reused once it is
		// hashed.
		calls := make([]*lwio.Call, 0, demoLWIOWin)
		var off int64
		for rerr == nil && (off < cfg.Bytes || len(calls) > 0) {
			if off < cfg.Bytes && len(calls) < demoLWIOWin {
				s := int(off/demoLWIOPiece) % demoLWIOWin
				n := int(min(demoLWIOPiece, cfg.Bytes-off))
				cl, err := f.StartRead(ctx, mem[s*demoLWIOPiece:s*demoLWIOPiece+n], off, nil)
				if err != nil {
					rerr = err
					break
				}
				calls = append(calls, cl)
				off += int64(n)
				continue
			}
			cl := calls[0]
			calls = calls[1:]
			wctx, cancel := context.WithTimeout(ctx, cfg.Idle)
			err := cl.Wait(wctx)
			cancel()
			if err != nil {
				rerr = fmt.Errorf("read at %d: %w", cl.Off, err)
				break
			}
			s := int(cl.Off/demoLWIOPiece) % demoLWIOWin
			h.Write(mem[s*demoLWIOPiece : s*demoLWIOPiece+cl.N])
			res.bytes += int64(cl.N)
		}
	})
	lw.cli = c.Stats()
	res.sent = lw.sum
	copy(res.received[:], h.Sum(nil))
	return res, lwioCheck(res, cfg, rerr)
}

func lwioCheck(res transferResult, cfg demoConfig, err error) error {
	switch {
	case err != nil:
		return err
	case res.bytes != cfg.Bytes:
		return fmt.Errorf("read %d bytes of %d", res.bytes, cfg.Bytes)
	case res.received != res.sent:
		return fmt.Errorf("the bytes read hash to %x, the file to %x", res.received[:8], res.sent[:8])
	}
	return nil
}

// tcpFileTransfer reads the same file from B with the plain-TCP file
// protocol over netstack.
func tcpFileTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	lw, err := lab.lwioFile(cfg)
	if err != nil {
		return res, err
	}
	root, err := os.OpenRoot(lw.dir)
	if err != nil {
		return res, err
	}
	defer root.Close()
	var l interface{ Close() error }
	served := make(chan error, 1)
	inB(func() {
		fl, lerr := lab.b.Listen(demoPortFile)
		if lerr != nil {
			err = lerr
			return
		}
		l = fl
		go func() { served <- tcpfile.Serve(fl, root) }()
	})
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	defer func() {
		l.Close()
		<-served
	}()
	dctx, cancel := context.WithTimeout(ctx, cfg.Idle)
	defer cancel()
	conn, err := lab.a.Dial(dctx, lab.toB(demoPortFile))
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	f, err := tcpfile.Open(conn, "demo.bin")
	if err != nil {
		conn.Close()
		return res, fmt.Errorf("A: %w", err)
	}
	defer f.Close()
	buf := make([]byte, demoLWIOWin*demoLWIOPiece)
	h := sha256.New()
	var rerr error
	res.elapsed, res.cpu, res.clientCPU = clientCPU(lab, func() {
		for off := int64(0); off < cfg.Bytes; {
			conn.SetDeadline(time.Now().Add(cfg.Idle))
			n := int(min(int64(len(buf)), cfg.Bytes-off))
			m, err := f.ReadAtWindow(buf[:n], off, demoLWIOPiece, demoLWIOWin)
			h.Write(buf[:m])
			res.bytes += int64(m)
			off += int64(m)
			if err != nil && !(err == io.EOF && off == cfg.Bytes) {
				rerr = fmt.Errorf("read at %d: %w", off, err)
				return
			}
		}
	})
	res.sent = lw.sum
	copy(res.received[:], h.Sum(nil))
	return res, lwioCheck(res, cfg, rerr)
}

// printLWIOReport prints what the LWIO path's server and client counted,
// and the two file paths' client CPU side by side.
func printLWIOReport(w io.Writer, results []transferResult, lw *lwioDemo) {
	fmt.Fprintln(w, "file reads B -> A, 64 KiB reads, 16 in flight: host A's CPU (host side, the client alone)")
	t := &table{}
	t.row("path", "client cpu", "client cpu/GiB")
	for _, r := range results {
		if r.clientCPU == 0 || r.bytes == 0 {
			continue
		}
		t.row(r.path, r.clientCPU.Round(time.Millisecond).String(), fmt.Sprintf("%.3fs", r.clientCPU.Seconds()*float64(1<<30)/float64(r.bytes)))
	}
	t.write(w)
	if lw == nil || lw.srv == nil {
		return
	}
	s, c := lw.stat, lw.cli
	fmt.Fprintln(w)
	fmt.Fprintln(w, "LWIO")
	t = &table{}
	t.row("", "requests", "reads", "bytes read", "zero-copy", "staged", "credits", "errors")
	t.row("server B", "-", u64(s.Reads), u64(s.BytesRead), "-", "-", "-",
		u64(s.BadRequests+s.ProtocolErrors+s.CreditViolations+s.ConnErrors))
	t.row("client A", u64(c.Requests), "-", u64(c.BytesRead), u64(c.ZeroCopy), u64(c.Bounced), u64(uint64(c.Credits)), "-")
	t.write(w)
	fmt.Fprintf(w, "(%s read by %d RDMA-written pieces; the client's requests include AUTH, REGISTER and CLOSE)\n",
		services.Size(s.BytesRead), s.Reads)
}

// inB runs f with the pprof label side=server, so the goroutines it
// starts on host B count as the server's, not the client's.
func inB(f func()) {
	pprof.Do(context.Background(), pprof.Labels("side", "server"), func(context.Context) { f() })
}
