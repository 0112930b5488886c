//go:build linux

package board

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/split"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

func splitPair(t *testing.T) (a, b *Host) {
	t.Helper()
	pa, pb := port.MustNewWire(port.WireConfig{})
	var err error
	cfg := func(mac byte, addr string) HostConfig {
		return HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, mac}, Addr: netip.MustParsePrefix(addr), Split: &SplitConfig{}}
	}
	if a, err = NewHost(cfg(1, "10.0.0.1/24"), pa); err != nil {
		t.Fatal(err)
	}
	if b, err = NewHost(cfg(2, "10.0.0.2/24"), pb); err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b
}

// TestSplitDeviceKilled: the device process killed mid-transfer gives the
// host's application an error within a second, and the host says why.
func TestSplitDeviceKilled(t *testing.T) {
	for _, path := range []string{"netstack", "offload"} {
		t.Run(path, func(t *testing.T) {
			a, b := splitPair(t)
			var l interface {
				Accept() (net.Conn, error)
				Close() error
			}
			var err error
			if path == "offload" {
				l, err = b.ListenOffload(7)
			} else {
				l, err = b.Listen(7)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			go func() {
				c, err := l.Accept()
				if err != nil {
					return
				}
				buf := make([]byte, 64<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			dst := netip.MustParseAddrPort("10.0.0.2:7")
			var c interface {
				Write([]byte) (int, error)
				SetDeadline(time.Time) error
			}
			if path == "offload" {
				c, err = a.DialOffload(ctx, dst)
			} else {
				c, err = a.Dial(ctx, dst)
			}
			if err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64<<10)
			for range 32 {
				if _, err := c.Write(buf); err != nil {
					t.Fatal(err)
				}
			}
			c.SetDeadline(time.Now().Add(20 * time.Second)) // a hang fails below, not the test run
			killed := time.Now()
			if err := a.split.child.Process.Kill(); err != nil {
				t.Fatal(err)
			}
			for {
				if _, err = c.Write(buf); err != nil {
					break
				}
			}
			if d := time.Since(killed); d > time.Second {
				t.Errorf("the application saw the device's death after %v (%v)", d, err)
			}
			if !errors.Is(a.DeviceErr(), tcpstack.ErrDeviceGone) {
				t.Errorf("DeviceErr() = %v, want ErrDeviceGone", a.DeviceErr())
			}
			t.Logf("write failed %v after the kill: %v; host: %v", time.Since(killed), err, a.DeviceErr())
		})
	}
}

// TestSplitKickWords: a delegated transfer with the kick words
// (split.FeatureKickWords, the default) and without (the protocol's older
// path), every byte through, and the interrupts the devices raised are the
// ones the drivers received, as without the words.
func TestSplitKickWords(t *testing.T) {
	for _, noKick := range []bool{false, true} {
		t.Run(map[bool]string{false: "words", true: "eventfds"}[noKick], func(t *testing.T) {
			pa, pb := port.MustNewWire(port.WireConfig{})
			cfg := func(mac byte, addr string) HostConfig {
				return HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, mac}, Addr: netip.MustParsePrefix(addr),
					Split: &SplitConfig{NoKickWords: noKick}}
			}
			a, err := NewHost(cfg(1, "10.0.0.1/24"), pa)
			if err != nil {
				t.Fatal(err)
			}
			defer a.Close()
			b, err := NewHost(cfg(2, "10.0.0.2/24"), pb)
			if err != nil {
				t.Fatal(err)
			}
			defer b.Close()
			for _, h := range []*Host{a, b} {
				if got := h.split.features&split.FeatureKickWords != 0; got == noKick {
					t.Fatalf("kick words in use: %v, want %v", got, !noKick)
				}
			}
			l, err := b.ListenOffload(9)
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			const total = 16 << 20
			got := make(chan int64, 1)
			go func() {
				c, err := l.Accept()
				if err != nil {
					got <- -1
					return
				}
				n, _ := io.Copy(io.Discard, c)
				got <- n
			}()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := a.DialOffload(ctx, netip.MustParseAddrPort("10.0.0.2:9"))
			if err != nil {
				t.Fatal(err)
			}
			c.SetDeadline(time.Now().Add(30 * time.Second))
			buf := make([]byte, 1<<20)
			for range total / len(buf) {
				if _, err := c.Write(buf); err != nil {
					t.Fatal(err)
				}
			}
			c.Close()
			if n := <-got; n != total {
				t.Fatalf("received %d bytes, want %d", n, total)
			}
			for _, h := range []*Host{a, b} {
				var dc tcpstack.DeviceCounters
				deadline := time.Now().Add(5 * time.Second)
				for {
					if dc, err = h.Counters(); err != nil {
						t.Fatal(err)
					}
					if dc.Parked && dc.Stat(rings.StatInterrupts) == h.Driver.Stats().Interrupts {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the device raised %d interrupts, the driver received %d", dc.Stat(rings.StatInterrupts), h.Driver.Stats().Interrupts)
					}
					runtime.Gosched()
				}
				ds := h.Driver.Stats()
				t.Logf("interrupts %d, doorbells written %d, received while parked %d", ds.Interrupts, ds.DoorbellKicks, dc.Stat(rings.StatDoorbells))
			}
		})
	}
}
