package testutil

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"
)

// WaitTimeout is how long WaitFor waits: long past anything a passing test
// needs on a loaded machine, short enough that a hang fails in the test
// rather than in the go test timeout.
const WaitTimeout = 5 * time.Second

// WaitFor waits until cond holds, for at most WaitTimeout, and otherwise
// fails the test saying what it waited for. It is for conditions with no
// event to wait on: counters, ring indices, usage figures another
// goroutine publishes.
func WaitFor(t testing.TB, what string, cond func() bool) {
	t.Helper()
	Eventually(t, what, WaitTimeout, cond)
}

// Eventually is WaitFor with its own bound, for waits that scale with the
// test (thousands of connections accepted or released).
//
// It polls at once and then backs off: the first polls only yield the
// processor, so a condition a moment away (a device goroutine answering a
// command) is seen without a sleep's delay, and later ones sleep up to
// 10 ms, so a long wait costs the machine next to nothing.
func Eventually(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(within, cond) {
		t.Fatalf("timed out after %v waiting for %s", within, what)
	}
}

// Poll is Eventually without a test to fail, for a wait that cannot fail
// its test from where it runs (a goroutine inside a network namespace,
// InNewNetns): it reports whether cond came to hold within the bound.
func Poll(within time.Duration, cond func() bool) bool {
	const spins, maxNap = 100, 10 * time.Millisecond
	deadline := time.Now().Add(within)
	nap := 50 * time.Microsecond
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			return false
		}
		if i < spins {
			runtime.Gosched()
			continue
		}
		time.Sleep(nap)
		nap = min(2*nap, maxNap)
	}
	return true
}

// WaitBlocked waits until n goroutines whose stacks run through the
// function fn (as a stack trace names it, package path included:
// "github.com/emunic/emunic/nic/port.(*WirePort).ReadFrame") are blocked:
// parked on a channel, a select, a lock, a condition or the netpoller,
// not running, runnable or in a system call. A test that checks what
// unblocks a blocked call (Close waking a reader) starts the call in a
// goroutine and waits here, where a sleep would only make the blocked
// case likely; on a loaded machine the call might not have started.
func WaitBlocked(t testing.TB, fn string, n int) {
	t.Helper()
	buf := make([]byte, 1<<20)
	WaitFor(t, fmt.Sprintf("%d goroutine(s) blocked in %s", n, fn), func() bool {
		return blockedIn(buf[:runtime.Stack(buf, true)], fn) >= n
	})
}

// BlockedIn counts the goroutines blocked with fn on their stacks now (as
// WaitBlocked judges them), for a wait that cannot fail its test from
// where it runs (a goroutine inside a network namespace, InNewNetns).
func BlockedIn(fn string) int {
	buf := make([]byte, 1<<20)
	return blockedIn(buf[:runtime.Stack(buf, true)], fn)
}

// blockedIn counts the goroutines of the all-goroutine stack dump s that
// are blocked with fn on their stack.
func blockedIn(s []byte, fn string) int {
	n := 0
	for _, g := range strings.Split(string(s), "\n\n") {
		head, _, _ := strings.Cut(g, "\n")
		// "goroutine 7 [chan receive]:" or "goroutine 7 [select, 2 minutes]:"
		i, j := strings.IndexByte(head, '['), strings.IndexByte(head, ']')
		if i < 0 || j < i {
			continue
		}
		state, _, _ := strings.Cut(head[i+1:j], ",")
		switch state {
		case "running", "runnable", "syscall":
			continue
		}
		if strings.Contains(g, "\n"+fn+"(") {
			n++
		}
	}
	return n
}
