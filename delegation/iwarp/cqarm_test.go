package iwarp

import (
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestCQArmIfPending: ArmIfPending fires at once (and leaves the CQ
// unarmed) while the host has not consumed every entry, and arms as Arm
// does once it has: the next completion then notifies, once.
func TestCQArmIfPending(t *testing.T) {
	ar, err := rings.NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	l, err := AllocCQ(ar, 8)
	if err != nil {
		t.Fatal(err)
	}
	events := 0
	cq, err := NewCQ(ar, l, func(*CQ) { events++ })
	if err != nil {
		t.Fatal(err)
	}
	host, err := rings.NewConsumer(ar, l, l.Count, nil)
	if err != nil {
		t.Fatal(err)
	}
	complete := func(wrid uint64) {
		if !cq.push(&Completion{WRID: wrid, Opcode: WCRecv, Status: WCSuccess}, false) {
			t.Fatal("CQ full")
		}
		cq.Flush()
	}
	consumeAll := func() {
		for {
			e, err := host.Peek()
			if err != nil {
				t.Fatal(err)
			}
			if e == nil {
				break
			}
			host.Pop()
		}
		host.Release()
	}

	complete(1) // not consumed yet
	if !cq.ArmIfPending(false) {
		t.Fatal("ArmIfPending with an unconsumed entry did not fire")
	}
	if s := cq.Stats(); s.Events != 1 {
		t.Fatalf("events %d, want 1", s.Events)
	}
	complete(2) // the fired arm left the CQ unarmed: no notification
	if events != 0 {
		t.Fatalf("%d notifications from an arm that fired at once", events)
	}
	consumeAll()
	if cq.ArmIfPending(false) {
		t.Fatal("ArmIfPending fired on a CQ the host had emptied")
	}
	complete(3)
	complete(4)
	if events != 1 {
		t.Fatalf("%d notifications after the arm, want 1", events)
	}
	// Solicited-only: an ordinary completion does not fire it.
	consumeAll()
	if cq.ArmIfPending(true) {
		t.Fatal("fired on an empty CQ")
	}
	complete(5)
	if events != 1 {
		t.Fatalf("an unsolicited completion fired a solicited-only arm")
	}
}
