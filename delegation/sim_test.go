package delegation

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/rings"
)

// ---- an impaired in-memory link, in simulated time ----------------------

type linkOpts struct {
	loss, dup, reorder float64 // probabilities per frame
	// burst > 1: a frame with data lost takes the next burst-1 frames
	// with data towards the same side with it (a TAP's dropped TCP
	// super-frame) if sent within simBurstSpan, and loss stays about
	// the share of data frames lost (a burst starts with chance
	// loss/burst). ACKs are lost one at a time.
	burst  int
	delay  int64 // one-way propagation, ns
	jitter int64 // extra delay of a reordered frame, up to, ns
	rate   int64 // bottleneck bytes per second (0: unlimited)
	queue  int64 // bottleneck queue, ns of backlog before tail drop
	seed   uint64
}

type frameEv struct {
	at  int64
	n   uint64
	to  int
	buf []byte
}

type simLink struct {
	o         linkOpts
	rng       *rand.Rand
	now       *int64
	q         []frameEv // binary heap by (at, n)
	n         uint64
	busy      [2]int64
	free      [][]byte
	drop      func(to int, f []byte) bool // test hook: true drops the frame
	lost      int
	bursts    int
	burstLeft [2]int
	burstEnd  [2]int64
	dups      int
	reordered int
	tailDrops int
	frames    int
}

// simBurstSpan is the longest a loss burst lasts (port.LossBurstSpan): it
// takes the segments of one super-frame, not those of the timeouts after.
const simBurstSpan = 1e6

// simAckFrame is the longest frame a burst loss leaves alone: an ACK with
// every option (Ethernet, IPv6, TCP with timestamps and four SACK blocks).
const simAckFrame = 14 + 40 + 60

func newSimLink(o linkOpts, now *int64) *simLink {
	return &simLink{o: o, rng: rand.New(rand.NewPCG(o.seed, 0x5eed)), now: now, q: make([]frameEv, 0, 4096)}
}

func (l *simLink) buf(f []byte) []byte {
	var b []byte
	if n := len(l.free); n > 0 {
		b = l.free[n-1][:0]
		l.free = l.free[:n-1]
	} else {
		b = make([]byte, 0, 1600)
	}
	return append(b, f...)
}

// send puts frame f on the wire towards side to.
func (l *simLink) send(to int, f []byte) error {
	l.frames++
	if l.drop != nil && l.drop(to, f) {
		return nil
	}
	now := *l.now
	if l.o.burst > 1 && len(f) > simAckFrame {
		if l.burstLeft[to] > 0 && now <= l.burstEnd[to] {
			l.burstLeft[to]--
			l.lost++
			return nil
		}
		if l.o.loss > 0 && l.rng.Float64() < l.o.loss/float64(l.o.burst) {
			l.burstLeft[to], l.burstEnd[to] = l.o.burst-1, now+simBurstSpan
			l.bursts++
			l.lost++
			return nil
		}
	} else if l.o.loss > 0 && l.rng.Float64() < l.o.loss {
		l.lost++
		return nil
	}
	at := now
	if l.o.rate > 0 {
		start := max(now, l.busy[to])
		if l.o.queue > 0 && start-now > l.o.queue {
			l.tailDrops++
			return nil
		}
		l.busy[to] = start + int64(len(f))*1e9/l.o.rate
		at = l.busy[to]
	}
	at += l.o.delay
	if l.o.reorder > 0 && l.o.jitter > 0 && l.rng.Float64() < l.o.reorder {
		l.reordered++
		at += 1 + l.rng.Int64N(l.o.jitter)
	}
	l.push(frameEv{at: at, to: to, buf: l.buf(f)})
	if l.o.dup > 0 && l.rng.Float64() < l.o.dup {
		l.dups++
		l.push(frameEv{at: at + 1 + l.rng.Int64N(l.o.delay+1), to: to, buf: l.buf(f)})
	}
	return nil
}

func (l *simLink) less(i, j int) bool {
	return l.q[i].at < l.q[j].at || l.q[i].at == l.q[j].at && l.q[i].n < l.q[j].n
}

func (l *simLink) push(ev frameEv) {
	l.n++
	ev.n = l.n
	l.q = append(l.q, ev)
	for i := len(l.q) - 1; i > 0; {
		p := (i - 1) / 2
		if !l.less(i, p) {
			break
		}
		l.q[i], l.q[p] = l.q[p], l.q[i]
		i = p
	}
}

func (l *simLink) pop() frameEv {
	ev := l.q[0]
	last := len(l.q) - 1
	l.q[0] = l.q[last]
	l.q = l.q[:last]
	for i := 0; ; {
		c := 2*i + 1
		if c >= last {
			break
		}
		if c+1 < last && l.less(c+1, c) {
			c++
		}
		if !l.less(c, i) {
			break
		}
		l.q[i], l.q[c] = l.q[c], l.q[i]
		i = c
	}
	return ev
}

func (l *simLink) nextAt() int64 {
	if len(l.q) == 0 {
		return NoDeadline
	}
	return l.q[0].at
}

// ---- two engines over the link ---------------------------------------------

type sim struct {
	t    testing.TB
	now  int64
	link *simLink
	eng  [2]*Engine
	env  [2]*testEnv
	host [2]*hostApp
	st   [2]rings.ConnState

	hook       func() // run at every step
	hookAt     int64  // a step is due then (0: none)
	noCheck    bool   // skip the invariant checks (benchmarks)
	drainEvery [2]int // >0: the host looks at its notifications every n-th step only
	steps      int
}

func (s *sim) drain(i int) {
	if k := s.drainEvery[i]; k > 0 && s.steps%k != 0 {
		return
	}
	s.host[i].drain()
}

type simOpts struct {
	link     linkOpts
	pair     pairOpts
	cfg      Config
	host     [2]hostOpts
	arena    int
	ntfDepth int // notification ring depth (default 4096)
	// addrs, when set, are A's and B's addresses (IPv6 ones: the
	// connection is offloaded with a version-2 state block).
	addrs *[2]netip.Addr
}

func newSim(t testing.TB, o simOpts) *sim {
	s := &sim{t: t, now: 1e9}
	s.link = newSimLink(o.link, &s.now)
	s.st[0], s.st[1] = pairStates(o.pair)
	if o.arena == 0 {
		o.arena = 16 << 20
	}
	for i := 0; i < 2; i++ {
		to := 1 - i
		s.env[i] = newTestEnv(t, o.arena, &s.now)
		if o.ntfDepth > 0 {
			s.env[i].ntfCap = o.ntfDepth
		}
		s.env[i].transmit = func(f []byte) error { return s.link.send(to, f) }
		s.eng[i] = NewEngine(o.cfg, s.env[i])
		var x *rings.ConnAddrExt
		if o.addrs != nil {
			x = new(rings.ConnAddrExt)
			s.st[i].SetAddrs(x, o.addrs[i], o.addrs[to])
		}
		if st := s.eng[i].OffloadAddrs(0, &s.st[i], x); st != rings.StatusOK {
			t.Fatalf("offload %d: %v", i, st)
		}
		s.host[i] = newHostApp(t, string(rune('A'+i)), s.eng[i], s.env[i], 0, &s.st[i], o.host[i])
	}
	return s
}

func (s *sim) start() {
	s.host[0].start()
	s.host[1].start()
}

// step advances to the next event and runs it; false if nothing is left.
func (s *sim) step() bool {
	next := s.link.nextAt()
	if s.hookAt > s.now && s.hookAt < next {
		next = s.hookAt
	}
	for i := 0; i < 2; i++ {
		if d := s.eng[i].NextDeadline(); d < next {
			next = d
		}
	}
	if next == NoDeadline {
		if s.env[0].ntfCount+s.env[1].ntfCount == 0 {
			return false
		}
		// Only the lazy hosts have work: let them look now.
		s.host[0].drain()
		s.host[1].drain()
		return true
	}
	if next > s.now {
		s.now = next
	}
	s.steps++
	if s.hook != nil {
		s.hook()
	}
	for len(s.link.q) > 0 && s.link.q[0].at <= s.now {
		ev := s.link.pop()
		inputFrame(s.eng[ev.to], ev.buf)
		s.link.free = append(s.link.free, ev.buf)
		s.drain(ev.to)
	}
	for i := 0; i < 2; i++ {
		s.eng[i].Tick(s.now)
		s.drain(i)
		if !s.noCheck {
			checkInvariants(s.t, s.eng[i])
		}
	}
	return true
}

// runUntil steps until done() or simulated time limit (ns from now).
func (s *sim) runUntil(done func() bool, limit int64) {
	s.t.Helper()
	end := s.now + limit
	for !done() {
		if !s.step() {
			s.t.Fatalf("simulation stalled at %d ns\n%v\n%v\nA %+v\nB %+v\nlink frames %d lost %d tail %d",
				s.now, s.host[0], s.host[1], s.eng[0].Counters(), s.eng[1].Counters(),
				s.link.frames, s.link.lost, s.link.tailDrops)
		}
		if s.now > end {
			s.t.Fatalf("simulation did not finish in %d s of simulated time\n%v\n%v\nlink %+v",
				limit/1e9, s.host[0], s.host[1], *s.link)
		}
	}
}

// transferred reports whether both streams arrived whole.
func (s *sim) transferred() bool {
	for i := 0; i < 2; i++ {
		if s.host[1-i].recvd < s.host[i].sendTotal {
			return false
		}
	}
	return true
}

func (s *sim) checkHashes() {
	s.t.Helper()
	for i := 0; i < 2; i++ {
		a, b := s.host[i], s.host[1-i]
		if b.recvd != a.sendTotal {
			s.t.Fatalf("%s received %d bytes, %s sent %d", b.name, b.recvd, a.name, a.sendTotal)
		}
		if !bytes.Equal(a.sendHash.Sum(nil), b.recvHash.Sum(nil)) {
			s.t.Fatalf("%s→%s: SHA-256 differs", a.name, b.name)
		}
	}
}

// checkClean fails on counters that a healthy transfer never bumps.
func (s *sim) checkClean() {
	s.t.Helper()
	for i := 0; i < 2; i++ {
		c := s.eng[i].Counters()
		if c.DropBadChecksum+c.DropBadOptions+c.DropBadOffset+c.DropShort+c.DropBadIP+c.DMAErrors+
			c.DropTupleMismatch+c.DropNoConn != 0 {
			s.t.Fatalf("engine %d: unexpected drops %+v", i, c)
		}
	}
}
