package rings

import "testing"

// TestPublishNoKickCounts: a moderated producer (PublishNoKick, then Kicked
// on its own schedule) counts the entries it publishes, exactly as many as
// the consumer takes, and keeps Kicks + Suppressed == Publishes with Kicks
// equal to the kicks it made. PublishNoKick once counted only publishes: a
// device's notification ring reported 0 entries after hundreds of
// publishes.
func TestPublishNoKickCounts(t *testing.T) {
	bp := newBenchPair(t, 16, 16, 16, 1)
	produce := func(n int) {
		for range n {
			if bp.p.Next() == nil {
				t.Fatal("ring full")
			}
			bp.p.Commit()
		}
	}
	consume := func() int {
		n := 0
		for {
			e, err := bp.c.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if e == nil {
				bp.c.Release()
				return n
			}
			bp.c.Pop()
			n++
		}
	}
	produce(3)
	bp.p.PublishNoKick()
	bp.p.PublishNoKick() // nothing new: no publish
	produce(2)
	bp.p.PublishNoKick()
	bp.p.Kicked() // the interrupt for those five
	taken := consume()
	produce(4)
	bp.p.PublishNoKick()
	taken += consume()

	s := bp.p.Stats()
	if s.Entries != 9 || uint64(taken) != s.Entries {
		t.Errorf("producer counted %d entries, the consumer took %d, want 9 both", s.Entries, taken)
	}
	if s.Publishes != 3 || s.Kicks != 1 || s.Suppressed != 2 {
		t.Errorf("publishes %d kicks %d suppressed %d, want 3, 1, 2", s.Publishes, s.Kicks, s.Suppressed)
	}
	if c := bp.c.Stats(); c.Entries != s.Entries {
		t.Errorf("consumer counted %d entries, producer %d", c.Entries, s.Entries)
	}
}
