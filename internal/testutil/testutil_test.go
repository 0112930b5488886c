package testutil

import (
	"testing"

	"github.com/emunic/emunic/rings"
)

// dribble hands out its completions at most two per Poll, with empty polls
// in between, as a CQ being filled by a device does.
type dribble struct {
	left  []rings.Completion
	polls int
}

func (d *dribble) Poll(wc []rings.Completion) int {
	d.polls++
	if d.polls%2 == 1 {
		return 0
	}
	n := copy(wc[:min(len(wc), 2)], d.left)
	d.left = d.left[n:]
	return n
}

func TestWaitCompletionsInOrder(t *testing.T) {
	d := &dribble{}
	for i := range 7 {
		d.left = append(d.left, rings.Completion{WRID: uint64(i)})
	}
	got := WaitCompletions(t, d, 5)
	if len(got) != 5 {
		t.Fatalf("got %d completions, want 5", len(got))
	}
	for i, c := range got {
		if c.WRID != uint64(i) {
			t.Fatalf("completion %d has WRID %d", i, c.WRID)
		}
	}
	if len(d.left) != 2 {
		t.Fatalf("%d completions left in the CQ, want 2 (it must not take more than asked)", len(d.left))
	}
}
