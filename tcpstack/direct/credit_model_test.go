package direct

import (
	"fmt"
	"testing"
)

// An exhaustive model of the credit protocol (credit.go), in the manner of
// rings/ringmodel: two sides, each with its creditState (the real type and
// its real decisions), a FIFO of messages in flight towards each side, and
// applications that generate control messages (RDMA Read done, FIN) and
// stream data. Every interleaving is explored for small pools. Checked:
//
//   - safety: no message ever arrives without a credit, no grant exceeds
//     what the peer could owe (creditState.received and granted accept
//     every step);
//   - no deadlock: with applications that never read a byte (the worst
//     case: every data buffer stays held), from every reachable state the
//     control messages waiting to go can all go;
//   - progress: with applications that read, from every reachable state
//     each side can get back to sending data;
//   - no livelock: no cycle made only of credit-only messages.
//
// The faults are departures from the rules; the mutation test checks that
// the checker finds each one.

type modelFault uint8

const (
	faultDataUsesReserve  modelFault = 1 << iota // rule 1 dropped: data may take the last credit
	faultNoStarveUpdate                          // rule 3's second half dropped: updates only at the threshold
	faultNoSlotLimit                             // credit-only messages sent without a free slot at the peer
	faultUpdateWithoutOwe                        // credit-only messages sent with nothing to grant
)

type modelMsg struct {
	class        msgClass
	grant, uAcks uint8
}

const modelMaxQ = 12

type modelSide struct {
	cs   creditState
	pend uint8 // control messages waiting for a credit
	gen  uint8 // control messages generated so far
	q    [modelMaxQ]modelMsg
	qn   uint8 // messages in flight towards this side
}

type modelState [2]modelSide

type modelCfg struct {
	pool, reserve, threshold int
	slots                    int  // credit-only slots
	ctlBudget                int  // control messages each side generates at most
	reads                    bool // applications read data
	fault                    modelFault
}

// step kinds
const (
	stGen = iota
	stData
	stCtl
	stCredit
	stDeliver
	stRead
)

type modelEdge struct {
	to   modelState
	kind int
	u    bool // a credit-only send or delivery
}

func (c *modelCfg) canSend(s *creditState, cl msgClass) bool {
	switch cl {
	case classData:
		if c.fault&faultDataUsesReserve != 0 {
			return s.cred >= 1
		}
	case classCredit:
		if c.fault&faultNoStarveUpdate != 0 {
			return s.owe >= 1 && s.owe >= s.threshold && (s.uOut < s.slots-1 || s.uOut < s.slots && s.uDone > 0)
		}
		if c.fault&faultNoSlotLimit != 0 {
			return s.owe >= 1 && (s.owe >= s.threshold || s.peerAvail() <= s.reserve)
		}
		if c.fault&faultUpdateWithoutOwe != 0 {
			return s.uOut < s.slots-1 || s.uOut < s.slots && s.uDone > 0
		}
	}
	return s.canSend(cl)
}

// next returns the successors of st; err reports a safety violation.
func (c *modelCfg) next(st modelState) ([]modelEdge, error) {
	var out []modelEdge
	for i := 0; i < 2; i++ {
		j := 1 - i
		me := st[i]
		send := func(cl msgClass, kind int) {
			n := st
			a, b := &n[i], &n[j]
			g, u := a.cs.send(cl)
			if cl == classCtl {
				a.pend--
			}
			if b.qn >= modelMaxQ {
				panic("model queue overflow")
			}
			b.q[b.qn] = modelMsg{cl, uint8(g), uint8(u)}
			b.qn++
			out = append(out, modelEdge{n, kind, cl == classCredit})
		}
		if int(me.gen) < c.ctlBudget {
			n := st
			n[i].pend++
			n[i].gen++
			out = append(out, modelEdge{n, stGen, false})
		}
		if c.canSend(&me.cs, classData) {
			send(classData, stData)
		}
		if me.pend > 0 && c.canSend(&me.cs, classCtl) {
			send(classCtl, stCtl)
		}
		if c.canSend(&me.cs, classCredit) {
			send(classCredit, stCredit)
		}
		if me.qn > 0 {
			n := st
			a := &n[i]
			m := a.q[0]
			copy(a.q[:], a.q[1:a.qn])
			a.qn--
			a.q[a.qn] = modelMsg{}
			if !a.cs.granted(uint32(m.grant), uint32(m.uAcks)) {
				return nil, fmt.Errorf("side %d: grant of %d with %d credits held, %d acks with %d out", i, m.grant, me.cs.cred, m.uAcks, me.cs.uOut)
			}
			if !a.cs.received(m.class) {
				return nil, fmt.Errorf("side %d: a message arrived with no buffer free (%+v)", i, me.cs)
			}
			out = append(out, modelEdge{n, stDeliver, m.class == classCredit})
		}
		if c.reads && me.cs.held > 0 {
			n := st
			n[i].cs.consumed()
			out = append(out, modelEdge{n, stRead, false})
		}
	}
	return out, nil
}

type modelResult struct {
	states   int
	deadlock *modelState // a reachable state from which pending control can never all go
	stuck    *modelState // (reads) a reachable state from which a side never sends data again
	livelock bool        // a cycle of credit-only messages
}

func (c *modelCfg) check() (modelResult, error) {
	var init modelState
	for i := range init {
		init[i].cs = newCreditState(c.pool, c.reserve, c.threshold, c.slots)
	}
	succ := map[modelState][]modelEdge{}
	stack := []modelState{init}
	succ[init] = nil
	order := []modelState{init}
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		es, err := c.next(s)
		if err != nil {
			return modelResult{}, err
		}
		succ[s] = es
		for _, e := range es {
			if _, ok := succ[e.to]; !ok {
				succ[e.to] = nil
				order = append(order, e.to)
				stack = append(stack, e.to)
			}
		}
	}
	res := modelResult{states: len(order)}
	// Backward fixpoints: states from which a goal is reachable.
	canReach := func(goal func(*modelState) bool) map[modelState]bool {
		pred := map[modelState][]modelState{}
		for s, es := range succ {
			for _, e := range es {
				pred[e.to] = append(pred[e.to], s)
			}
		}
		ok := map[modelState]bool{}
		var work []modelState
		for _, s := range order {
			if goal(&s) {
				ok[s] = true
				work = append(work, s)
			}
		}
		for len(work) > 0 {
			s := work[len(work)-1]
			work = work[:len(work)-1]
			for _, p := range pred[s] {
				if !ok[p] {
					ok[p] = true
					work = append(work, p)
				}
			}
		}
		return ok
	}
	if !c.reads {
		ok := canReach(func(s *modelState) bool { return s[0].pend == 0 && s[1].pend == 0 })
		for _, s := range order {
			if !ok[s] {
				s := s
				res.deadlock = &s
				break
			}
		}
	} else {
		for i := 0; i < 2; i++ {
			ok := canReach(func(s *modelState) bool { return c.canSend(&s[i].cs, classData) })
			for _, s := range order {
				if !ok[s] {
					s := s
					res.stuck = &s
					break
				}
			}
		}
	}
	// Livelock: a cycle in the subgraph of credit-only sends and
	// deliveries (colour DFS).
	colour := map[modelState]uint8{}
	var dfs func(s modelState) bool
	dfs = func(s modelState) bool {
		colour[s] = 1
		for _, e := range succ[s] {
			if !e.u {
				continue
			}
			switch colour[e.to] {
			case 1:
				return true
			case 0:
				if dfs(e.to) {
					return true
				}
			}
		}
		colour[s] = 2
		return false
	}
	for _, s := range order {
		if colour[s] == 0 && dfs(s) {
			res.livelock = true
			break
		}
	}
	return res, nil
}

func (r modelResult) bad() string {
	switch {
	case r.deadlock != nil:
		return fmt.Sprintf("deadlock: from %+v control messages can never all go", *r.deadlock)
	case r.stuck != nil:
		return fmt.Sprintf("stuck: from %+v a side never sends data again", *r.stuck)
	case r.livelock:
		return "livelock: a cycle of credit-only messages"
	}
	return ""
}

func modelConfigs(short bool) []modelCfg {
	var cs []modelCfg
	maxPool, maxSlots := 3, 3
	if short {
		maxSlots = 2
	}
	for pool := 2; pool <= maxPool; pool++ {
		for reserve := 1; reserve < pool; reserve++ {
			for threshold := 1; threshold <= pool; threshold++ {
				for slots := 2; slots <= maxSlots; slots++ {
					for _, reads := range []bool{false, true} {
						cs = append(cs, modelCfg{pool: pool, reserve: reserve, threshold: threshold, slots: slots,
							ctlBudget: 2, reads: reads})
					}
				}
			}
		}
	}
	return cs
}

// TestCreditModel: the rules hold for every pool of 2 or 3 buffers, every
// reserve, threshold and two or three credit-only slots, with and without reading applications; both
// sides exhaust their credits at once in many of these states.
func TestCreditModel(t *testing.T) {
	total := 0
	for _, c := range modelConfigs(testing.Short()) {
		res, err := c.check()
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if b := res.bad(); b != "" {
			t.Fatalf("%+v: %s", c, b)
		}
		total += res.states
	}
	t.Logf("%d states explored", total)
}

// TestCreditModelBothExhausted: states where both sides hold no credit at
// once are reachable, and the checker found every one of them able to
// finish its control messages (TestCreditModel): this is the "credits
// exhausted on both sides at once" case.
func TestCreditModelBothExhausted(t *testing.T) {
	c := modelCfg{pool: 3, reserve: 1, threshold: 2, slots: 2, ctlBudget: 2}
	var init modelState
	for i := range init {
		init[i].cs = newCreditState(c.pool, c.reserve, c.threshold, c.slots)
	}
	seen := map[modelState]bool{init: true}
	stack := []modelState{init}
	found := 0
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if s[0].cs.cred == 0 && s[1].cs.cred == 0 {
			found++
		}
		es, err := c.next(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if !seen[e.to] {
				seen[e.to] = true
				stack = append(stack, e.to)
			}
		}
	}
	if found == 0 {
		t.Fatal("no reachable state has both sides at zero credits: the model does not exercise the case")
	}
	res, err := c.check()
	if err != nil || res.bad() != "" {
		t.Fatalf("%v %s", err, res.bad())
	}
	t.Logf("%d of %d states have both sides at zero credits; none deadlocks", found, len(seen))
}

// TestCreditModelFindsFaults: each rule, dropped, lets the checker find
// the failure it prevents.
func TestCreditModelFindsFaults(t *testing.T) {
	for _, f := range []struct {
		fault modelFault
		want  string
	}{
		{faultDataUsesReserve, "deadlock"},
		{faultNoStarveUpdate, "deadlock"},
		{faultNoSlotLimit, "safety"},
		{faultUpdateWithoutOwe, "livelock"},
	} {
		found := ""
		for _, c := range modelConfigs(true) {
			c.fault = f.fault
			res, err := c.check()
			if err != nil {
				found = "safety: " + err.Error()
				break
			}
			if b := res.bad(); b != "" {
				found = b
				break
			}
		}
		if len(found) < len(f.want) || found[:len(f.want)] != f.want {
			t.Errorf("fault %d: checker found %q, want %s", f.fault, found, f.want)
		}
	}
}
