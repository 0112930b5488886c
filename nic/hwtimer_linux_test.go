package nic

import (
	"testing"
	"time"
)

// TestFineTimer: an armed timer rings once at its deadline; arming again
// replaces the deadline rather than adding one.
func TestFineTimer(t *testing.T) {
	kicks := make(chan time.Time, 8)
	ft := newFineTimer(func() { kicks <- time.Now() })
	if ft == nil {
		t.Skip("no timerfd on this kernel")
	}
	start := time.Now()
	ft.arm(200 * time.Microsecond)
	select {
	case at := <-kicks:
		if at.Sub(start) < 200*time.Microsecond {
			t.Fatalf("rang after %v, before its 200µs deadline", at.Sub(start))
		}
	case <-time.After(5 * time.Second):
		t.Fatal("an armed timer never rang")
	}
	// Re-arming before expiry: one deadline, the later one.
	start = time.Now()
	ft.arm(time.Hour)
	ft.arm(2 * time.Millisecond)
	at := <-kicks
	if d := at.Sub(start); d < 2*time.Millisecond {
		t.Fatalf("rang after %v, before the replacing deadline", d)
	}
	ft.arm(time.Millisecond)
	<-kicks
	ft.close()
}
