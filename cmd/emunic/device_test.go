package main

import (
	"bytes"
	"context"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
)

// syncBuffer is a bytes.Buffer safe for one writer and concurrent readers.
type syncBuffer = testutil.SyncBuffer

// TestDeviceCommand runs two 'emunic device' servers and attaches the
// rig's two hosts to them by socket path: data crosses on both paths, and
// each device reports its one host when stopped.
func TestDeviceCommand(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	outs := make([]*syncBuffer, 2)
	socks := make([]string, 2)
	codes := make([]int, 2)
	for i := range 2 {
		socks[i] = filepath.Join(dir, []string{"a.sock", "b.sock"}[i])
		outs[i] = &syncBuffer{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes[i] = run(ctx, []string{"device", "--socket", socks[i]}, outs[i], outs[i])
		}()
	}
	for i := range socks { // wait until both listen
		for deadline := time.Now().Add(5 * time.Second); !strings.Contains(outs[i].String(), "device listening"); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("device on %s never listened: %s", socks[i], outs[i])
			}
		}
	}
	r := hostrig.New(t, hostrig.Config{
		HostA: func(c *board.HostConfig) { c.Split = &board.SplitConfig{Socket: socks[0]} },
		HostB: func(c *board.HostConfig) { c.Split = &board.SplitConfig{Socket: socks[1]} },
	})
	l, err := r.B.ListenOffload(7)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		buf := make([]byte, 4096)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			c.Write(buf[:n])
		}
	}()
	dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer dcancel()
	c, err := r.A.DialOffload(dctx, netip.AddrPortFrom(hostrig.AddrB, 7))
	if err != nil {
		t.Fatal(err)
	}
	msg := []byte("through two device processes")
	if _, err := c.Write(msg); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, len(msg))
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := c.Read(got); err != nil || !bytes.Equal(got, msg) {
		t.Fatalf("echo %q, %v", got, err)
	}
	c.Close()
	l.Close()
	r.Close()
	// Each device sees its host go; then stop them.
	cancel()
	wg.Wait()
	for i, o := range outs {
		if codes[i] != exitOK || !strings.Contains(o.String(), "device: 1 hosts (1 started, 1 gone), 0 bad messages") ||
			strings.Contains(o.String(), "session ended") {
			t.Errorf("device %d: exit %d, output:\n%s", i, codes[i], o)
		}
	}
}

func TestDeviceCommandUsage(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"device"}, &out, &out); code != exitUsage ||
		!strings.Contains(out.String(), "--socket PATH is required") {
		t.Fatalf("exit %d: %s", code, out.String())
	}
}

// TestDemoSplit: the demo with each host's NIC in a device process of its
// own moves the data intact on both paths and reports the devices'
// counters (read from the areas they publish in host memory).
func TestDemoSplit(t *testing.T) {
	code, out, errOut := runCLI(t, "demo", "--bytes", "4MiB", "--split")
	if code != exitOK {
		t.Fatalf("exit %d; stderr %q; stdout:\n%s", code, errOut, out)
	}
	for _, want := range []string{"netstack, legacy rings", "delegated, offload engine", "ok: 4.0 MiB arrived intact"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}
