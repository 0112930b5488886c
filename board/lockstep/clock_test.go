package lockstep

import (
	"testing"
	"time"
)

// TestClockOrder: timers due together fire in the order they were set (or
// last reset), one per fireOne, only once the clock has reached them; a
// stopped timer never fires; the clock never goes back.
func TestClockOrder(t *testing.T) {
	var c Clock
	fired := make(chan int, 8)
	add := func(d time.Duration, n int) *timer {
		return c.AfterFunc(d, func() { fired <- n }).(*timer)
	}
	add(20, 3)
	again := add(10, 9)
	add(10, 1)
	add(10, 2)
	stopped := add(5, 0)
	if !stopped.Stop() || stopped.Stop() {
		t.Error("Stop of a pending timer, then of a stopped one: want true, false")
	}
	again.Reset(10) // now after 1 and 2
	if c.fireOne() {
		t.Fatal("a timer fired before the clock reached it")
	}
	if next, ok := c.next(); !ok || next != 10 {
		t.Fatalf("next = %d, %v; want 10", next, ok)
	}
	c.advance(10)
	var got []int
	for range 3 {
		if !c.fireOne() {
			t.Fatal("a due timer did not fire")
		}
		got = append(got, <-fired) // each to its end before the next starts
	}
	if c.fireOne() {
		t.Fatal("a timer due at 20 fired at 10")
	}
	c.advance(5)
	if c.Nanos() != 10 {
		t.Fatalf("clock at %d after going back, want 10", c.Nanos())
	}
	c.advance(20)
	if !c.fireOne() {
		t.Fatal("the timer due at 20 did not fire")
	}
	got = append(got, <-fired)
	if want := []int{1, 2, 9, 3}; len(got) != 4 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] || got[3] != want[3] {
		t.Fatalf("fired %v, want %v", got, want)
	}
}
