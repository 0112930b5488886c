package direct

import (
	"io"
	"testing"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/nic/port/porttest"
)

// TestHostCloseStopsSwitch: a program that only closes its hosts (no
// Shutdown) leaves no switch goroutine behind, and Shutdown after the
// close is harmless.
func TestHostCloseStopsSwitch(t *testing.T) {
	porttest.CheckGoroutines(t)
	r := hostrig.New(t, hostrig.Config{})
	ca, cb := pair(t, r.A, r.B, Config{}, Config{})
	wrote := make(chan error, 1)
	go func() {
		_, err := ca.Write([]byte("hello"))
		if cerr := ca.Close(); err == nil {
			err = cerr
		}
		wrote <- err
	}()
	if b, err := io.ReadAll(cb); err != nil || string(b) != "hello" {
		t.Fatalf("read %q, %v", b, err)
	}
	cb.Close()
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
	r.Close()
	switchesMu.Lock()
	left := len(switches)
	_, hasA := switches[r.A]
	switchesMu.Unlock()
	if hasA {
		t.Fatalf("host A's switch outlived the host (%d switches)", left)
	}
	Shutdown(r.A)
	Shutdown(r.B)
}
