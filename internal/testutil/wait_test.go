package testutil

import (
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// fatalTB records a Fatalf instead of ending the test, so a failing wait
// can be checked.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic(f)
}

func TestEventuallySeesAnotherGoroutine(t *testing.T) {
	var n atomic.Int32
	go func() {
		for range 1000 {
			n.Add(1)
		}
	}()
	WaitFor(t, "the counter at 1000", func() bool { return n.Load() == 1000 })
}

func TestEventuallyFailsAfterItsBound(t *testing.T) {
	f := &fatalTB{TB: t}
	start := time.Now()
	func() {
		defer func() {
			if r := recover(); r != f {
				t.Fatalf("Eventually on a condition that never holds: recovered %v, want its Fatalf", r)
			}
		}()
		Eventually(f, "never", 30*time.Millisecond, func() bool { return false })
	}()
	if el := time.Since(start); el < 30*time.Millisecond {
		t.Errorf("gave up after %v, before its 30ms bound", el)
	}
	if !strings.Contains(f.msg, "timed out") {
		t.Errorf("failure message %q does not say it timed out", f.msg)
	}
}

func blockHere(ch chan struct{}) { <-ch }

func TestWaitBlockedSeesAParkedGoroutine(t *testing.T) {
	ch := make(chan struct{})
	defer close(ch)
	go blockHere(ch)
	go blockHere(ch)
	WaitBlocked(t, "github.com/emunic/emunic/internal/testutil.blockHere", 2)
}

func TestBlockedInReadsStates(t *testing.T) {
	dump := "goroutine 1 [running]:\nmain.spin(...)\n\t/x.go:1\n\n" +
		"goroutine 7 [chan receive, 2 minutes]:\npkg.(*T).Read(0x1)\n\t/y.go:2\n\n" +
		"goroutine 8 [runnable]:\npkg.(*T).Write(0x1)\n\t/y.go:3\n"
	for fn, want := range map[string]int{"pkg.(*T).Read": 1, "pkg.(*T).Write": 0, "main.spin": 0, "pkg.(*T).Re": 0} {
		if got := blockedIn([]byte(dump), fn); got != want {
			t.Errorf("blockedIn(%q) = %d, want %d", fn, got, want)
		}
	}
}
