package ringmodel

import (
	"encoding/binary"
	"fmt"
	"strings"
)

// Options tune Check.
type Options struct {
	// MaxStates bounds the exploration (0: 4,000,000); exceeding it is an
	// error, never a silent pass.
	MaxStates int
	// NoProgress skips the progress check (which keeps every transition).
	NoProgress bool
	// Visit, if set, is called for every reachable state, in breadth-first
	// order (conformance tests replay the real code from them).
	Visit func(s *State)
}

// Result counts what Check explored.
type Result struct {
	States      int // distinct reachable states
	Transitions int // steps explored (edges of the state graph)
	Terminal    int // states in which no agent can move (all with the work done)
	Depth       int // steps on the longest shortest path from the initial state
}

func (r Result) String() string {
	return fmt.Sprintf("%d states, %d transitions, %d terminal, depth %d", r.States, r.Transitions, r.Terminal, r.Depth)
}

// Violation is a broken rule and the interleaving that breaks it.
type Violation struct {
	System string
	// Kind: "invariant" (a rule broken by a step or in a state), "lost
	// wake-up" (no agent can move and the work is not done), or "no
	// progress" (agents can move, but no continuation completes the work).
	Kind  string
	Err   error
	Trace []Event // from the initial state, one event per step
	Final string  // the state the trace ends in
	// Then, for "no progress", continues from Final (taking the agents in
	// turn) until a state repeats: how the agents go round without
	// completing the work.
	Then []Event
}

func (v *Violation) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "ringmodel: %s: %s: %v\ninterleaving (%d steps):\n", v.System, v.Kind, v.Err, len(v.Trace))
	for i, e := range v.Trace {
		fmt.Fprintf(&b, "%4d  %s\n", i+1, e)
	}
	b.WriteString("state:\n  ")
	b.WriteString(strings.ReplaceAll(v.Final, "\n", "\n  "))
	if len(v.Then) > 0 {
		fmt.Fprintf(&b, "\nand then, for example (%d steps, back to a state already seen):", len(v.Then))
		for i, e := range v.Then {
			fmt.Fprintf(&b, "\n%4d  %s", len(v.Trace)+i+1, e)
		}
	}
	return b.String()
}

func (v *Violation) Unwrap() error { return v.Err }

// node is one discovered state: how it was first reached.
type node struct {
	parent int32
	agent  uint8
	choice uint8
}

// Check explores every interleaving of sys's agents from its initial
// state and returns what it explored, or a *Violation with the shortest
// interleaving that breaks a rule. The search is breadth first and
// deterministic: the same system always gives the same counts and trace.
func Check(sys *System, opt Options) (Result, error) {
	limit := opt.MaxStates
	if limit == 0 {
		limit = 4_000_000
	}
	var res Result
	init := sys.Init()
	seen := map[string]int32{}
	var nodes []node
	var goal []bool
	var from, to []int32
	var buf []byte

	add := func(s *State, parent int32, agent, choice int) (int32, bool) {
		buf = sys.encode(s, buf[:0])
		if id, ok := seen[string(buf)]; ok {
			return id, false
		}
		id := int32(len(nodes))
		seen[string(buf)] = id
		nodes = append(nodes, node{parent: parent, agent: uint8(agent), choice: uint8(choice)})
		if !opt.NoProgress {
			goal = append(goal, sys.goal(s))
		}
		return id, true
	}
	violation := func(kind string, err error, id int32, last *[2]int) *Violation {
		trace, final := sys.replay(nodes, id, last)
		return &Violation{System: sys.Name, Kind: kind, Err: err, Trace: trace, Final: sys.Describe(&final)}
	}

	add(&init, -1, 0, 0)
	level := []State{init}
	base := int32(0) // id of level[0]: ids are assigned in breadth-first order
	for len(level) > 0 {
		var nextLevel []State
		for k := range level {
			s := &level[k]
			id := base + int32(k)
			if err := sys.checkState(s); err != nil {
				return res, violation("invariant", err, id, nil)
			}
			if opt.Visit != nil {
				opt.Visit(s)
			}
			moved := false
			for a := range sys.Agents {
				for ch := 0; ; ch++ {
					next, out, choices, _, err := sys.step(s, a, ch, false)
					if out != Moved {
						break
					}
					moved = true
					res.Transitions++
					if err != nil {
						return res, violation("invariant", err, id, &[2]int{a, ch})
					}
					nid, fresh := add(&next, id, a, ch)
					if fresh {
						if len(nodes) > limit {
							return res, fmt.Errorf("ringmodel: %s: more than %d states", sys.Name, limit)
						}
						nextLevel = append(nextLevel, next)
					}
					if !opt.NoProgress {
						from = append(from, id)
						to = append(to, nid)
					}
					if ch+1 >= choices {
						break
					}
				}
			}
			if !moved {
				res.Terminal++
				if !sys.goal(s) {
					return res, violation("lost wake-up", fmt.Errorf("no agent can move and the work is not done: %s", sys.pending(s)), id, nil)
				}
			}
		}
		base += int32(len(level))
		if len(nextLevel) > 0 {
			res.Depth++
		}
		level = nextLevel
	}
	res.States = len(nodes)
	if opt.NoProgress {
		return res, nil
	}
	// Progress: every reachable state must be able to reach a goal
	// state. Walk the transitions backwards from the goal states; a state
	// never reached can only loop or stop short of the goal.
	start := make([]int32, len(nodes)+1)
	for _, t := range to {
		start[t+1]++
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	preds := make([]int32, len(from))
	fill := append([]int32(nil), start[:len(nodes)]...)
	for i, t := range to {
		preds[fill[t]] = from[i]
		fill[t]++
	}
	ok := make([]bool, len(nodes))
	var queue []int32
	for i, g := range goal {
		if g {
			ok[i] = true
			queue = append(queue, int32(i))
		}
	}
	for len(queue) > 0 {
		n := queue[len(queue)-1]
		queue = queue[:len(queue)-1]
		for _, p := range preds[start[n]:start[n+1]] {
			if !ok[p] {
				ok[p] = true
				queue = append(queue, p)
			}
		}
	}
	for i := range ok {
		if !ok[i] {
			_, st := sys.replay(nodes, int32(i), nil)
			v := violation("no progress", fmt.Errorf("agents can still move, but no interleaving from here completes the work: %s", sys.pending(&st)), int32(i), nil)
			v.Then = sys.loop(st)
			return res, v
		}
	}
	return res, nil
}

// replay rebuilds the trace to node id (and one more step, if last is set)
// by re-running the steps from the initial state.
func (sys *System) replay(nodes []node, id int32, last *[2]int) ([]Event, State) {
	var path []node
	for n := id; n > 0; n = nodes[n].parent {
		path = append(path, nodes[n])
	}
	s := sys.Init()
	var trace []Event
	for i := len(path) - 1; i >= 0; i-- {
		next, _, _, ev, _ := sys.step(&s, int(path[i].agent), int(path[i].choice), true)
		trace = append(trace, ev)
		s = next
	}
	if last != nil {
		next, _, _, ev, _ := sys.step(&s, last[0], last[1], true)
		trace = append(trace, ev)
		s = next
	}
	return trace, s
}

// loop runs the agents in rounds, each taking one step if it can, from s
// until a round starts in a state already seen (or nobody moves): a
// livelock, shown.
func (sys *System) loop(s State) []Event {
	var trace []Event
	seen := map[string]bool{}
	var buf []byte
	for round := 0; round < 100; round++ {
		buf = sys.encode(&s, buf[:0])
		if seen[string(buf)] {
			break
		}
		seen[string(buf)] = true
		moved := false
		for a := range sys.Agents {
			next, out, _, ev, _ := sys.step(&s, a, 0, true)
			if out == Moved {
				trace = append(trace, ev)
				s, moved = next, true
			}
		}
		if !moved {
			break
		}
	}
	return trace
}

// pending says what work is left and who sleeps, for a violation.
func (sys *System) pending(s *State) string {
	var parts []string
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		end := spec.Base + spec.Entries
		if n := m.PI - (spec.Base + uint32(m.Consumed)); n > 0 {
			w := ""
			if m.CFlags&1 != 0 {
				w = ", consumer said NEED_WAKEUP"
			}
			parts = append(parts, fmt.Sprintf("%s: %d published entries not consumed%s", spec.Name, n, w))
		}
		if n := uint32(m.Produced) - (m.PI - spec.Base); n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d written entries not published", spec.Name, n))
		}
		if n := end - (spec.Base + uint32(m.Produced)); n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d entries not yet written (%d slots free by CI)", spec.Name, n, spec.Count-(spec.Base+uint32(m.Produced)-m.CI)))
		}
		if n := uint32(m.Consumed) - (m.CI - spec.Base); n > 0 {
			parts = append(parts, fmt.Sprintf("%s: %d consumed entries not released", spec.Name, n))
		}
		if spec.Command {
			done := 0
			for i := spec.Base + uint32(m.Reaped); i != spec.Base+uint32(m.Produced); i++ {
				if IsDone(spec.Count, i, m.Ctl[i&(spec.Count-1)]) {
					done++
				}
			}
			if done > 0 {
				parts = append(parts, fmt.Sprintf("%s: %d completions written and not read back", spec.Name, done))
			}
		}
	}
	for a, p := range sys.Agents {
		if s.PC[a] == Halted {
			continue
		}
		if _, out, _, _, _ := sys.step(s, a, 0, false); out == Blocked {
			parts = append(parts, fmt.Sprintf("%s asleep at %s with no kick pending", p.Name, p.Label(s.PC[a])))
		} else {
			parts = append(parts, fmt.Sprintf("%s at %s", p.Name, p.Label(s.PC[a])))
		}
	}
	return strings.Join(parts, "; ")
}

// encode appends the parts of s that sys uses: the visited-set key.
func (sys *System) encode(s *State, b []byte) []byte {
	for r, spec := range sys.Rings {
		m := &s.Rings[r]
		b = binary.AppendUvarint(b, uint64(m.PI-spec.Base))
		b = binary.AppendUvarint(b, uint64(m.CI-spec.Base))
		b = append(b, byte(m.CFlags), byte(m.PFlags), m.Produced, m.Consumed, m.Reaped)
		b = append(b, m.Ctl[:spec.Count]...)
		b = append(b, m.Body[:spec.Count]...)
		if spec.Command {
			b = append(b, m.Status[:spec.Count]...)
		}
	}
	for i := range sys.Bells {
		bl := s.Bells[i]
		v := byte(0)
		if bl.Latched {
			v |= 1
		}
		if bl.Waiting {
			v |= 2
		}
		b = append(b, v)
	}
	for a, p := range sys.Agents {
		b = append(b, s.PC[a], s.Ret[a])
		for _, r := range s.Regs[a][:p.Regs] {
			b = binary.AppendUvarint(b, uint64(r))
		}
	}
	return b
}
