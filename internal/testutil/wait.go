package testutil

import (
	"runtime"
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
	const spins, maxNap = 100, 10 * time.Millisecond
	deadline := time.Now().Add(within)
	nap := 50 * time.Microsecond
	for i := 0; !cond(); i++ {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", within, what)
		}
		if i < spins {
			runtime.Gosched()
			continue
		}
		time.Sleep(nap)
		nap = min(2*nap, maxNap)
	}
}
