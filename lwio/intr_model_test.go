package lwio

import (
	"fmt"
	"testing"
)

// An exhaustive model of the polling client's sleep: the client scans its
// status blocks, asks for an interrupt when it found none done, and sleeps
// on its completion queue; the server answers the interrupt at its next
// completion, or at once when an I/O completed since its last answer
// (docs/lwio.md, "Interrupt request"). Every interleaving of the client's
// steps, the server's steps and the two directions of the connection (each
// in order: the status block's RDMA Write is placed before the send that
// follows it) is explored; the properties are that the client never sleeps
// for good with a request unfinished (a lost wake-up) and never has two
// interrupt requests outstanding. The model's client submits only while
// its loop is awake: in the code a request submitted while the loop
// sleeps wakes it with its own send completion, so the model is the
// stricter case.
//
// Credits: the client holds a number of credits; every request and the
// INTERRUPT takes one until its completion is taken, and a polling client
// keeps one back for INTERRUPT from two credits up (limitLocked). With one
// credit and the request outstanding there is none for INTERRUPT: the
// client then must not sleep (no completion comes for a status block) but
// go on scanning its status blocks, a timed sleep that wakes by itself
// (client_completion.go, run).

type intrMsg uint8

const (
	mReq intrMsg = iota + 1
	mIntr
	mIOSB
	mIntrResp
)

type intrState struct {
	// client
	issued, consumed, done int // requests sent; completions taken; status blocks written
	intrOut, asleep        bool
	events                 int // receive completions in the CQ (interrupt answers)
	// server
	pending, intrPending, completed int // requests held; an interrupt held; completedIO
	// the wire, each direction in order
	c2s, s2c string
}

func (s intrState) key() string { return fmt.Sprintf("%+v", s) }

// intrModel explores every state from the start with n requests and the
// given credits. With answerAtOnce false the server lacks the rule that
// answers an interrupt at once after an unseen completion; with timedPoll
// false a client without a credit for INTERRUPT sleeps anyway (the two
// mutants the model must catch).
func intrModel(n, credits int, answerAtOnce, timedPoll bool) (states int, bad string) {
	limit := credits
	if credits >= 2 {
		limit--
	}
	used := func(s intrState) int {
		u := s.issued - s.consumed
		if s.intrOut {
			u++
		}
		return u
	}
	start := intrState{}
	seen := map[string]bool{start.key(): true}
	queue := []intrState{start}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		var next []intrState
		// Client: issue the next request (the application submits).
		if s.issued < n && !s.asleep && used(s) < limit {
			t := s
			t.issued++
			t.c2s += string(rune(mReq))
			next = append(next, t)
		}
		// Client: one pass of its loop — take CQ events, scan the status
		// blocks; with no progress and requests unfinished, ask for an
		// interrupt (once) and sleep unless an event is already there.
		if !s.asleep {
			t := s
			progress := false
			if t.events > 0 {
				t.events--
				t.intrOut = false
				progress = true
			}
			if t.done > t.consumed {
				t.consumed = t.done
				progress = true
			}
			if !progress && t.consumed < t.issued {
				switch {
				case t.intrOut:
					t.asleep = t.events == 0
				case used(t) < credits:
					t.intrOut = true
					t.c2s += string(rune(mIntr))
					t.asleep = t.events == 0
				case !timedPoll:
					t.asleep = t.events == 0
				}
				// Else a timed sleep: the client wakes by itself and
				// scans again, the state it is in.
			}
			if t != s {
				next = append(next, t)
			}
		}
		// Client: a receive completion wakes it.
		if s.asleep && s.events > 0 {
			t := s
			t.asleep = false
			next = append(next, t)
		}
		// Wire, client to server: the server takes the next message.
		if len(s.c2s) > 0 {
			t := s
			m := intrMsg(t.c2s[0])
			t.c2s = t.c2s[1:]
			switch m {
			case mReq:
				t.pending++
			case mIntr:
				if t.intrPending == 1 {
					return len(seen), "two interrupt requests outstanding: " + s.key()
				}
				if answerAtOnce && t.completed == 1 {
					t.completed = 0
					t.s2c += string(rune(mIntrResp))
				} else {
					t.intrPending = 1
				}
			}
			next = append(next, t)
		}
		// Server: complete a held request (status block, then a held
		// interrupt's answer).
		if s.pending > 0 {
			t := s
			t.pending--
			t.s2c += string(rune(mIOSB))
			if t.intrPending == 1 {
				t.intrPending = 0
				t.s2c += string(rune(mIntrResp))
			} else {
				t.completed = 1
			}
			next = append(next, t)
		}
		// Wire, server to client: placement or a receive completion.
		if len(s.s2c) > 0 {
			t := s
			m := intrMsg(t.s2c[0])
			t.s2c = t.s2c[1:]
			if m == mIOSB {
				t.done++
			} else {
				t.events++
			}
			next = append(next, t)
		}
		if len(next) == 0 && s.consumed < n {
			return len(seen), "lost wake-up: nothing can move and the client waits: " + s.key()
		}
		for _, t := range next {
			if k := t.key(); !seen[k] {
				seen[k] = true
				queue = append(queue, t)
			}
		}
	}
	return len(seen), ""
}

func TestInterruptModel(t *testing.T) {
	for credits := 1; credits <= 5; credits++ {
		for n := 1; n <= 4; n++ {
			states, bad := intrModel(n, credits, true, true)
			if bad != "" {
				t.Fatalf("%d requests, %d credits: %s", n, credits, bad)
			}
			t.Logf("%d requests, %d credits: %d states, no lost wake-up", n, credits, states)
		}
	}
	// The model must catch the server that only answers at the next
	// completion: a completion that raced the client's scan leaves it
	// asleep.
	if _, bad := intrModel(2, 5, false, true); bad == "" {
		t.Fatal("the model did not catch the server without the answer-at-once rule")
	} else {
		t.Logf("mutant caught: %s", bad)
	}
	// And the client that sleeps with one credit and no INTERRUPT sent.
	if _, bad := intrModel(1, 1, true, false); bad == "" {
		t.Fatal("the model did not catch the one-credit client that sleeps")
	} else {
		t.Logf("mutant caught: %s", bad)
	}
}
