//go:build linux

package tests

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestTAPHeldBurst holds many echo connections from the Linux kernel
// opened as a load tool opens them: 500 at a time, each dialled at once on
// a goroutine of its own, so SYNs arrive in bursts and data races every
// delegation. Every connection must be delegated (a flow the tracker
// missed is learned from netstack, Host.FlowsLearned, not left on
// netstack) and echo intact. The log says whether netstack's listen queue
// overflowed (the listener takes connections off it as they are
// established and delegates many at once, so on a working host it does
// not; when it did, the kernel's retransmitted handshakes backed off for
// tens of seconds).
//
// Size: EMUNIC_TAP_BURST (default 3,000; -short 1,000).
func TestTAPHeldBurst(t *testing.T) {
	n := envCount(t, "EMUNIC_TAP_BURST", 3000)
	if testing.Short() && n == 3000 {
		n = 1000
	}
	lab := newTAPOffloadLab(t, 71)
	ln, err := lab.host.ListenOffload(services.EchoPort)
	if err != nil {
		t.Fatal(err)
	}
	echo := services.NewEcho(nil)
	go echo.Serve(ln)
	// Cleanups, not defers: the failure report below runs before them
	// (cleanups run last first, after every defer), so it sees the
	// connections still open.
	t.Cleanup(func() { echo.Close() })
	dst := netip.AddrPortFrom(lab.emu.Addr(), services.EchoPort).String()

	conns := make([]net.Conn, n)
	t.Cleanup(func() {
		for _, c := range conns {
			if c != nil {
				c.Close()
			}
		}
	})
	const burst = 500
	start := time.Now()
	for at := 0; at < n; at += burst {
		var wg sync.WaitGroup
		var bad atomic.Value
		for i := at; i < min(n, at+burst); i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := lab.ns.do(func() error {
					c, err := net.DialTimeout("tcp4", dst, 30*time.Second)
					if err != nil {
						return err
					}
					conns[i] = c
					_, err = c.Write(heldMsg(i, 0))
					return err
				})
				if err != nil {
					bad.CompareAndSwap(nil, fmt.Errorf("connection %d: %w", i, err))
				}
			}()
		}
		wg.Wait()
		if e := bad.Load(); e != nil {
			t.Fatal(e)
		}
	}
	opened := time.Since(start)
	tcp := lab.host.S.Stats().TCP
	backlog := func() string {
		return fmt.Sprintf("netstack's listen queue: %d SYNs dropped, %d ACKs dropped, %d SYN cookies sent",
			tcp.ListenOverflowSynDrop.Value(), tcp.ListenOverflowAckDrop.Value(), tcp.ListenOverflowSynCookieSent.Value())
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%d of %d connections accepted; %d fallbacks, %d lost (%v); %+v; %d flows learned; %s",
				echo.Stats().Accepted, n, ln.Fallbacks(), ln.Lost(), ln.FallbackErr(), lab.host.OffloadUsage(), lab.host.FlowsLearned(), backlog())
		}
	})
	testutil.Eventually(t, "every connection accepted", 60*time.Second, func() bool { return echo.Stats().Active == uint64(n) })
	if f, l := ln.Fallbacks(), ln.Lost(); f+l != 0 {
		t.Fatalf("%d of %d connections not delegated (%d lost): %v", f+l, n, l, ln.FallbackErr())
	}
	if u := lab.host.OffloadUsage(); u.Conns != n {
		t.Fatalf("%d delegated connections held, want %d", u.Conns, n)
	}
	var wg sync.WaitGroup
	var bad atomic.Value
	for w := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 16 {
				want := heldMsg(i, 0)
				got := make([]byte, len(want))
				_ = conns[i].SetReadDeadline(time.Now().Add(30 * time.Second))
				if _, err := io.ReadFull(conns[i], got); err != nil || !bytes.Equal(got, want) {
					bad.CompareAndSwap(nil, fmt.Errorf("connection %d: %q (%v), want %q", i, got, err, want))
					return
				}
			}
		}()
	}
	wg.Wait()
	if e := bad.Load(); e != nil {
		t.Fatal(e)
	}
	t.Logf("%d connections from the kernel in bursts of %d, opened in %v, all delegated and intact; %d flows the tracker missed were learned from netstack; %s",
		n, burst, opened.Round(time.Millisecond), lab.host.FlowsLearned(), backlog())
}
