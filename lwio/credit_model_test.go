package lwio

import (
	"fmt"
	"testing"
)

// An exhaustive model of LWIO's credits (docs/lwio.md, "Credits"): the
// server's delta credit messages, positive and negative, at any request,
// the client's CREDIT messages (one acknowledgement of a grant, N returns
// of -N … -1, ahead of new requests), and every interleaving of client,
// server and the two in-order directions of the connection. The model
// runs with no slack buffers, so it checks the protocol itself:
//   - a message never arrives at a side with no receive buffer posted;
//   - the server never sees more requests outstanding than it granted;
//   - a CREDIT always matches the transaction under way;
//   - nothing deadlocks: every request finishes.

type cmsg struct {
	kind  byte // 'q' request, 'c' CREDIT, 'r' response, 'n' NOTIFY_CREDIT answer, 'd' delta
	value int  // CREDIT: Offset's upper 32 bits; delta: the signed delta
}

type creditState struct {
	// client
	issued, finished int
	cCredits, cOut   int
	cPosted          int
	retireNext       int
	ackGrant         bool
	// server
	sCredits, sOut, sPosted int
	held                    int // requests taken and not yet answered
	txn                     int
	adjusts                 int
	// the wire, and what each side's device placed and its CPU has not
	// yet taken (its receive completions)
	c2s, s2c, sRecv, cRecv string
}

func enc(ms []cmsg) string {
	b := make([]byte, 0, 2*len(ms))
	for _, m := range ms {
		b = append(b, m.kind, byte(int8(m.value)))
	}
	return string(b)
}

func head(s string) (cmsg, string) {
	return cmsg{kind: s[0], value: int(int8(s[1]))}, s[2:]
}

// place is a device taking the next message off a wire into one of its
// posted receive buffers: it is now a receive completion its CPU has not
// taken.
func place(wire, recv *string, posted *int) {
	*recv += (*wire)[:2]
	*wire = (*wire)[2:]
	*posted--
}

func (s creditState) key() string { return fmt.Sprintf("%+v", s) }

// creditModel explores every state with n requests, credits bounded by
// maxCredits, and at most maxAdjust delta transactions.
// mutant 1 keeps only as many client buffers as credits (no +1 for the
// delta message); mutant 2 has the server post a returned credit's buffer
// again. The model must catch both.
func creditModel(n, maxCredits, maxAdjust, mutant int) (int, string) {
	start := creditState{cCredits: 1, cPosted: 2, sCredits: 1, sPosted: 1}
	if mutant == 1 {
		start.cPosted = 1
	}
	seen := map[string]bool{start.key(): true}
	queue := []creditState{start}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		var next []creditState
		// Client: a new request, when a credit is free and no CREDIT is
		// owed.
		if s.issued < n && s.cOut < s.cCredits && s.retireNext == 0 && !s.ackGrant {
			t := s
			t.issued++
			t.cOut++
			t.c2s += enc([]cmsg{{kind: 'q'}})
			next = append(next, t)
		}
		// Client: a CREDIT owed, when a credit is free.
		if (s.ackGrant || s.retireNext != 0) && s.cOut < s.cCredits {
			t := s
			v := 0
			if t.ackGrant {
				t.ackGrant = false
			} else {
				v = t.retireNext
				t.retireNext++
			}
			t.cOut++
			t.c2s += enc([]cmsg{{kind: 'c', value: v}})
			next = append(next, t)
		}
		// Server's device: a message arrives into a posted buffer.
		if len(s.c2s) > 0 {
			if s.sPosted == 0 {
				return len(seen), "a message reached the server with no buffer posted: " + s.key()
			}
			t := s
			place(&t.c2s, &t.sRecv, &t.sPosted)
			next = append(next, t)
		}
		// Server: take the next received message.
		if len(s.sRecv) > 0 {
			m, rest := head(s.sRecv)
			base := s
			base.sRecv = rest
			base.sOut++
			if base.sOut > base.sCredits {
				return len(seen), "more requests outstanding than credits: " + s.key()
			}
			switch m.kind {
			case 'q':
				// The request is held; the policy may start a transaction.
				t := base
				t.held++
				next = append(next, t)
				if t.txn == 0 && t.adjusts < maxAdjust {
					if t.sCredits < maxCredits {
						g := t
						g.adjusts++
						g.sCredits++
						g.sPosted++ // posted before the delta goes out
						g.txn = 1
						g.s2c += enc([]cmsg{{kind: 'd', value: 1}})
						next = append(next, g)
					}
					for k := 1; k < t.sCredits; k++ {
						r := t
						r.adjusts++
						r.txn = -k
						r.s2c += enc([]cmsg{{kind: 'd', value: -k}})
						next = append(next, r)
					}
				}
			case 'c':
				t := base
				switch {
				case t.txn > 0 && m.value >= 0:
					t.txn = 0
					t.sPosted++
					t.sOut--
					t.s2c += enc([]cmsg{{kind: 'r'}})
				case t.txn < 0 && m.value == t.txn:
					t.txn++
					t.sCredits--
					t.sOut--
					if mutant == 2 {
						t.sPosted++
					}
					t.s2c += enc([]cmsg{{kind: 'n'}})
				default:
					return len(seen), fmt.Sprintf("a CREDIT of %d during transaction %d: %s", m.value, t.txn, s.key())
				}
				next = append(next, t)
			}
		}
		// Server: answer a held request (its buffer posted again first).
		if s.held > 0 {
			t := s
			t.held--
			t.sPosted++
			t.sOut--
			t.s2c += enc([]cmsg{{kind: 'r'}})
			next = append(next, t)
		}
		// Client's device: a message arrives into a posted buffer.
		if len(s.s2c) > 0 {
			if s.cPosted == 0 {
				return len(seen), "a message reached the client with no buffer posted: " + s.key()
			}
			t := s
			place(&t.s2c, &t.cRecv, &t.cPosted)
			next = append(next, t)
		}
		// Client: take the next received message.
		if len(s.cRecv) > 0 {
			m, rest := head(s.cRecv)
			t := s
			t.cRecv = rest
			switch m.kind {
			case 'r':
				t.cPosted++
				t.cOut--
				t.finished++
			case 'n':
				t.cOut--
				t.cCredits--
				t.finished++
			case 'd':
				t.cPosted++
				if m.value > 0 {
					t.cPosted += m.value
					t.cCredits += m.value
					t.ackGrant = true
				} else {
					t.retireNext = m.value
				}
			}
			next = append(next, t)
		}
		if len(next) == 0 {
			if s.issued < n || s.cOut > 0 || s.txn != 0 {
				return len(seen), "deadlock: " + s.key()
			}
			if s.sPosted != s.sCredits || s.cPosted != s.cCredits+1 || s.cCredits != s.sCredits {
				return len(seen), "at rest the buffers posted do not match the credits: " + s.key()
			}
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

func TestCreditModel(t *testing.T) {
	for _, c := range []struct{ n, max, adjust int }{{2, 2, 2}, {3, 3, 3}, {4, 3, 4}, {6, 4, 6}} {
		states, bad := creditModel(c.n, c.max, c.adjust, 0)
		if bad != "" {
			t.Fatalf("%d requests, %d credits, %d transactions: %s", c.n, c.max, c.adjust, bad)
		}
		t.Logf("%d requests, at most %d credits, %d transactions: %d states, all hold", c.n, c.max, c.adjust, states)
	}
	for m := 1; m <= 2; m++ {
		if _, bad := creditModel(3, 3, 3, m); bad == "" {
			t.Errorf("mutant %d not caught", m)
		} else {
			t.Logf("mutant %d caught: %s", m, bad)
		}
	}
}
