package porttest

import (
	"bytes"
	"runtime"
	"strings"
	"testing"
	"time"
)

// CheckGoroutines records the goroutines running now and, when t's test
// ends (after the cleanups registered later, which run first), fails t if
// goroutines started since are still running a second later, listing their
// stacks. Call it first thing in a test that starts devices or readers.
// It is meaningless in parallel tests.
func CheckGoroutines(t testing.TB) {
	t.Helper()
	before := goroutineIDs()
	t.Cleanup(func() {
		t.Helper()
		var leaked []string
		deadline := time.Now().Add(time.Second)
		for {
			leaked = leaked[:0]
			for id, stack := range goroutineStacks() {
				if _, ok := before[id]; !ok && !benign(stack) {
					leaked = append(leaked, stack)
				}
			}
			if len(leaked) == 0 || time.Now().After(deadline) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if len(leaked) > 0 {
			t.Errorf("porttest: %d goroutine(s) leaked:\n\n%s", len(leaked), strings.Join(leaked, "\n\n"))
		}
	})
}

// benign is a goroutine the runtime or the testing package owns.
func benign(stack string) bool {
	return strings.Contains(stack, "testing.tRunner") || strings.Contains(stack, "testing.(*T).Run") ||
		strings.Contains(stack, "runtime.goexit0") || strings.Contains(stack, "os/signal.")
}

func goroutineIDs() map[string]struct{} {
	ids := map[string]struct{}{}
	for id := range goroutineStacks() {
		ids[id] = struct{}{}
	}
	return ids
}

// goroutineStacks maps each goroutine's id to its stack, the caller's
// excluded.
func goroutineStacks() map[string]string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	out := map[string]string{}
	for i, g := range bytes.Split(buf, []byte("\n\n")) {
		if i == 0 {
			continue // the calling goroutine
		}
		s := string(g)
		id, _, _ := strings.Cut(strings.TrimPrefix(s, "goroutine "), " ")
		out[id] = s
	}
	return out
}
