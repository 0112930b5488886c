//go:build linux

package tcpstack

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
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
			if !errors.Is(a.DeviceErr(), ErrDeviceGone) {
				t.Errorf("DeviceErr() = %v, want ErrDeviceGone", a.DeviceErr())
			}
			t.Logf("write failed %v after the kill: %v; host: %v", time.Since(killed), err, a.DeviceErr())
		})
	}
}
