package iwarp

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/emunic/emunic/rings"
)

// checkDMA wraps host memory and fails the test on any access outside what
// the device may touch: writes only inside valid regions that grant a write
// right, reads only inside valid regions, Map only while the rings are set
// up.
type checkDMA struct {
	t     testing.TB
	arena *rings.Arena
	mem   *MemTable
	setup bool

	mu     sync.Mutex
	writes int
	bad    []string
}

func (c *checkDMA) fail(format string, args ...any) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.bad = append(c.bad, fmt.Sprintf(format, args...))
	c.t.Errorf(format, args...)
}

func (c *checkDMA) inRegion(a rings.Addr, n int, need Access) bool {
	ok := false
	c.mem.Regions(func(r Region) {
		if ok || !r.Valid || r.Access&need == 0 && need != 0 {
			return
		}
		if a >= r.Addr && uint64(a-r.Addr) <= r.Length && uint64(n) <= r.Length-uint64(a-r.Addr) {
			ok = true
		}
	})
	return ok
}

func (c *checkDMA) ReadAt(p []byte, a rings.Addr) error {
	if !c.setup && c.mem != nil && !c.inRegion(a, len(p), 0) {
		c.fail("DMA read of %d bytes at %#x outside every registered region", len(p), uint64(a))
	}
	return c.arena.ReadAt(p, a)
}

func (c *checkDMA) WriteAt(p []byte, a rings.Addr) error {
	if !c.setup && c.mem != nil && !c.inRegion(a, len(p), AccessLocalWrite|AccessRemoteWrite) {
		c.fail("DMA write of %d bytes at %#x outside every writable registered region", len(p), uint64(a))
	}
	c.mu.Lock()
	c.writes++
	c.mu.Unlock()
	return c.arena.WriteAt(p, a)
}

func (c *checkDMA) Map(a rings.Addr, n int) ([]byte, error) {
	if !c.setup {
		c.fail("DMA map of %d bytes at %#x after set-up", n, uint64(a))
	}
	return c.arena.Map(a, n)
}

// host is one emulated host: its memory, its verbs rings (host side) and the
// device side (memory table, CQ, QP).
type host struct {
	t     testing.TB
	name  string
	arena *rings.Arena
	dma   *checkDMA
	mem   *MemTable
	cq    *CQ
	qp    *QP

	sqP  *rings.Producer
	rqP  *rings.Producer
	cqC  *rings.Consumer
	cqL  rings.Layout
	evs  []Event
	cqEv int
}

type hostOpts struct {
	initiator bool
	pd        uint32
	mss       int
	ird, ord  int
	pdata     []byte
	sqCount   uint32
	cqCount   uint32
	arenaSize int
	memSize   int
	memSeed   uint64 // 0: random STags
	mpaRev    int    // 0: the default (2)
	noCRC     bool
	p2p       bool
}

func newHost(t testing.TB, name string, o hostOpts) *host {
	t.Helper()
	if o.arenaSize == 0 {
		o.arenaSize = 8 << 20
	}
	if o.sqCount == 0 {
		o.sqCount = 64
	}
	if o.cqCount == 0 {
		o.cqCount = 256
	}
	if o.memSize == 0 {
		o.memSize = 1024
	}
	if o.pd == 0 {
		o.pd = 7
	}
	ar, err := rings.NewArena(o.arenaSize)
	if err != nil {
		t.Fatal(err)
	}
	h := &host{t: t, name: name, arena: ar}
	h.dma = &checkDMA{t: t, arena: ar, setup: true}
	h.mem = NewMemTable(h.dma, o.memSize, o.memSeed)
	h.dma.mem = h.mem
	sqL, err := AllocSQ(ar, o.sqCount)
	if err != nil {
		t.Fatal(err)
	}
	rqL, err := AllocRQ(ar, o.sqCount)
	if err != nil {
		t.Fatal(err)
	}
	h.cqL, err = AllocCQ(ar, o.cqCount)
	if err != nil {
		t.Fatal(err)
	}
	h.cq, err = NewCQ(h.dma, h.cqL, func(*CQ) { h.cqEv++ })
	if err != nil {
		t.Fatal(err)
	}
	h.qp, err = NewQP(h.dma, h.mem, Config{QPN: 1, PD: o.pd, Initiator: o.initiator, MSS: o.mss, IRD: o.ird, ORD: o.ord,
		PrivateData: o.pdata, MPARev: o.mpaRev, NoCRC: o.noCRC, PeerToPeer: o.p2p, SQ: sqL, RQ: rqL, SendCQ: h.cq, RecvCQ: h.cq,
		OnEvent: func(_ *QP, ev Event) { h.evs = append(h.evs, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	// The host's side of the rings.
	h.sqP, err = rings.NewProducer(ar, sqL, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.rqP, err = rings.NewProducer(ar, rqL, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.cqC, err = rings.NewConsumer(ar, h.cqL, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	h.dma.setup = false
	return h
}

// buf allocates n bytes of host memory surrounded by 64 guard bytes on each
// side (filled with 0xEE) and returns the address of the first usable byte.
func (h *host) buf(n int) rings.Addr {
	h.t.Helper()
	a, err := h.arena.Alloc(n+128, 64)
	if err != nil {
		h.t.Fatal(err)
	}
	m, _ := h.arena.Map(a, n+128)
	for i := range m {
		m[i] = 0xEE
	}
	clear(m[64 : 64+n])
	return a + 64
}

// guardsIntact checks the 64 bytes before and after a buf.
func (h *host) guardsIntact(a rings.Addr, n int) bool {
	m, _ := h.arena.Map(a-64, n+128)
	for i := 0; i < 64; i++ {
		if m[i] != 0xEE || m[64+n+i] != 0xEE {
			return false
		}
	}
	return true
}

func (h *host) bytesAt(a rings.Addr, n int) []byte {
	m, err := h.arena.Map(a, n)
	if err != nil {
		h.t.Fatal(err)
	}
	return m
}

func (h *host) reg(a rings.Addr, n int, acc Access) uint32 {
	h.t.Helper()
	// Register checks the range with a Map: a control-path access.
	h.dma.setup = true
	defer func() { h.dma.setup = false }()
	stag, err := h.mem.Register(h.qp.cfg.PD, a, uint64(a), uint64(n), acc)
	if err != nil {
		h.t.Fatal(err)
	}
	return stag
}

func (h *host) postSend(w SendWR) {
	h.t.Helper()
	e := h.sqP.Next()
	if e == nil {
		h.t.Fatal("SQ full")
	}
	w.Encode(e)
	h.sqP.Commit()
	h.sqP.Publish()
}

func (h *host) postRecv(wrid uint64, sges ...SGE) {
	h.t.Helper()
	e := h.rqP.Next()
	if e == nil {
		h.t.Fatal("RQ full")
	}
	w := RecvWR{WRID: wrid, NumSGE: len(sges)}
	copy(w.SGL[:], sges)
	w.Encode(e)
	h.rqP.Commit()
	h.rqP.Publish()
}

func (h *host) poll() []Completion {
	var out []Completion
	for {
		e, err := h.cqC.Peek()
		if err != nil {
			h.t.Fatalf("%s: CQ: %v", h.name, err)
		}
		if e == nil {
			break
		}
		var c Completion
		_ = c.Decode(e)
		out = append(out, c)
		h.cqC.Pop()
	}
	h.cqC.Release()
	return out
}

func (h *host) hasEvent(ev Event) bool {
	for _, e := range h.evs {
		if e == ev {
			return true
		}
	}
	return false
}

// pipe is one direction of the TCP byte stream: a Stream the sender's QP
// writes into, delivered to the receiver in chunks.
type pipe struct {
	buf   []byte
	cap   int
	total int
	tap   func([]byte) // sees every written chunk (pcap)
}

func (p *pipe) Space() int { return p.cap - len(p.buf) }
func (p *pipe) Write(b []byte) int {
	p.buf = append(p.buf, b...)
	p.total += len(b)
	if p.tap != nil {
		p.tap(b)
	}
	return len(b)
}

// link connects two hosts back to back.
type link struct {
	t      testing.TB
	a, b   *host
	ab, ba pipe
	rnd    *rand.Rand
	// mangle may change bytes in flight (a → b) before delivery.
	mangle func(b []byte)
}

func newLink(t testing.TB, a, b *host, seed uint64) *link {
	return &link{t: t, a: a, b: b, ab: pipe{cap: 256 << 10}, ba: pipe{cap: 256 << 10}, rnd: rand.New(rand.NewPCG(seed, 1))}
}

// deliver hands p's bytes to dst in random chunks (1 byte to 3 KiB).
func (l *link) deliver(p *pipe, dst *host, mangle func([]byte)) int {
	n := len(p.buf)
	if n == 0 {
		return 0
	}
	if mangle != nil {
		mangle(p.buf)
	}
	b := p.buf
	for len(b) > 0 {
		k := 1 + l.rnd.IntN(3072)
		if l.rnd.IntN(8) == 0 {
			k = 1 + l.rnd.IntN(7)
		}
		k = min(k, len(b))
		dst.qp.Receive(b[:k])
		b = b[k:]
	}
	p.buf = p.buf[:0]
	return n
}

// run moves bytes both ways until nothing moves.
func (l *link) run() {
	for i := 0; i < 100000; i++ {
		moved := l.a.qp.Pump(&l.ab)
		moved += l.deliver(&l.ab, l.b, l.mangle)
		moved += l.b.qp.Pump(&l.ba)
		moved += l.deliver(&l.ba, l.a, nil)
		if moved == 0 {
			return
		}
	}
	l.t.Fatal("link never went quiet")
}

// connect runs the MPA exchange (the responder accepts with pd) and returns
// the link.
func connect(t testing.TB, a, b *host, seed uint64) *link {
	t.Helper()
	l := newLink(t, a, b, seed)
	if err := b.qp.Accept([]byte("responder-pd")); err != nil {
		t.Fatal(err)
	}
	if err := a.qp.Connect(); err != nil {
		t.Fatal(err)
	}
	l.run()
	if a.qp.State() != StateRTS || b.qp.State() != StateRTR {
		t.Fatalf("after MPA: initiator %v, responder %v", a.qp.State(), b.qp.State())
	}
	if !bytes.Equal(a.qp.PeerPrivateData(), []byte("responder-pd")) {
		t.Fatalf("initiator got private data %q", a.qp.PeerPrivateData())
	}
	return l
}

func pair(t testing.TB, seed uint64) (*host, *host, *link) {
	a := newHost(t, "A", hostOpts{initiator: true, pdata: []byte("initiator-pd")})
	b := newHost(t, "B", hostOpts{})
	l := connect(t, a, b, seed)
	if !bytes.Equal(b.qp.PeerPrivateData(), []byte("initiator-pd")) {
		t.Fatalf("responder got private data %q", b.qp.PeerPrivateData())
	}
	return a, b, l
}

func fill(b []byte, seed byte) {
	for i := range b {
		b[i] = byte(i*7) + seed
	}
}

func wantCompletion(t testing.TB, got []Completion, want ...Completion) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("completions: got %v, want %v", got, want)
	}
	for i := range want {
		w := want[i]
		g := got[i]
		if w.QPN == 0 {
			w.QPN = g.QPN
		}
		if g != w {
			t.Fatalf("completion %d: got %v, want %v", i, &g, &w)
		}
	}
}
