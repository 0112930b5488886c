package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/seqnum"
)

// TestMalformedSegments: every malformed header is dropped and counted by
// its own counter, and nothing is sent in reply.
func TestMalformedSegments(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	r.h.start()
	good := func() ([]byte, []byte) {
		return r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("hello")})
	}
	fix := func(tcp []byte) {
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
	}
	withOpts := func(opts ...byte) ([]byte, []byte) {
		return r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, rawOpts: opts, payload: []byte("x")})
	}
	cases := []struct {
		name string
		make func() ([]byte, []byte)
		ctr  func(c Counters) uint64
	}{
		{"truncated header", func() ([]byte, []byte) {
			ip, tcp := good()
			be.PutUint16(ip[2:], netHdrLen+19)
			return ip, tcp[:19]
		}, func(c Counters) uint64 { return c.DropShort }},
		{"IP length past the data", func() ([]byte, []byte) {
			ip, tcp := good()
			be.PutUint16(ip[2:], uint16(netHdrLen+len(tcp)+1))
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropShort }},
		{"data offset 4", func() ([]byte, []byte) {
			ip, tcp := good()
			tcp[12] = 4 << 4
			fix(tcp)
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadOffset }},
		{"data offset past the segment", func() ([]byte, []byte) {
			ip, tcp := good()
			tcp[12] = 15 << 4
			fix(tcp)
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadOffset }},
		{"bad checksum", func() ([]byte, []byte) {
			ip, tcp := good()
			tcp[len(tcp)-1] ^= 1
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadChecksum }},
		{"option length 0", func() ([]byte, []byte) { return withOpts(hdr.TCPOptTimestamp, 0, 0, 0) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"option length 1", func() ([]byte, []byte) { return withOpts(99, 1, 0, 0) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"option past the header", func() ([]byte, []byte) { return withOpts(hdr.TCPOptNOP, 99, 8, 0) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"kind without length", func() ([]byte, []byte) { return withOpts(hdr.TCPOptNOP, hdr.TCPOptNOP, hdr.TCPOptNOP, hdr.TCPOptMSS) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"timestamp length 9", func() ([]byte, []byte) {
			return withOpts(hdr.TCPOptTimestamp, 9, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		}, func(c Counters) uint64 { return c.DropBadOptions }},
		{"SACK length 11", func() ([]byte, []byte) {
			return withOpts(hdr.TCPOptSACK, 11, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
		}, func(c Counters) uint64 { return c.DropBadOptions }},
		{"MSS length 3", func() ([]byte, []byte) { return withOpts(hdr.TCPOptMSS, 3, 5, 0) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"window scale length 4", func() ([]byte, []byte) { return withOpts(hdr.TCPOptWS, 4, 5, 0) },
			func(c Counters) uint64 { return c.DropBadOptions }},
		{"not IPv4", func() ([]byte, []byte) {
			ip, tcp := good()
			ip[0] = 0x65
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadIP }},
		{"IHL 4", func() ([]byte, []byte) {
			ip, tcp := good()
			ip[0] = 0x44
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadIP }},
		{"UDP", func() ([]byte, []byte) {
			ip, tcp := good()
			ip[9] = 17
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropBadIP }},
		{"fragment", func() ([]byte, []byte) {
			ip, tcp := good()
			be.PutUint16(ip[6:], 0x2000)
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropFragment }},
		{"wrong port", func() ([]byte, []byte) {
			ip, tcp := good()
			tcp[1]++
			fix(tcp)
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropTupleMismatch }},
		{"wrong source", func() ([]byte, []byte) {
			ip, tcp := good()
			ip[15]++
			return ip, tcp
		}, func(c Counters) uint64 { return c.DropTupleMismatch }},
		{"empty", func() ([]byte, []byte) { return nil, nil }, func(c Counters) uint64 { return c.DropBadIP }},
	}
	for _, c := range cases {
		before := c.ctr(r.e.Counters())
		ip, tcp := c.make()
		r.e.Input(0, ip, tcp)
		if got := c.ctr(r.e.Counters()) - before; got != 1 {
			t.Errorf("%s: counter moved by %d", c.name, got)
		}
		r.expectNone(c.name)
	}
	if r.e.Counters().RxBytes != 0 || r.e.Counters().RxSegments != 0 {
		t.Fatalf("a malformed segment got through: %+v", r.e.Counters())
	}
	// Unknown options are skipped and EOL ends the list: the segment parses
	// (and is then dropped for lacking the negotiated timestamp).
	ip, tcp := withOpts(hdr.TCPOptNOP, 200, 4, 0, 0, hdr.TCPOptEOL, 7, 7)
	r.e.Input(0, ip, tcp)
	if c := r.e.Counters(); c.RxSegments != 1 || c.DropNoTimestamp != 1 {
		t.Fatalf("unknown option not skipped: %+v", c)
	}
	// Ethernet padding after the IP datagram is ignored.
	ip, tcp = good()
	r.e.Input(0, ip, append(tcp, 0, 0, 0, 0))
	if c := r.e.Counters(); c.RxSegments != 2 || c.RxBytes != 5 {
		t.Fatalf("padded segment refused: %+v", c)
	}
}

// FuzzInput feeds arbitrary TCP segments (checksum fixed up or not) to an
// established connection with user buffers, data in flight and
// out-of-order data held, then runs its timers. The engine must neither
// panic nor break its invariants.
func FuzzInput(f *testing.F) {
	seedRig := newRig(f, defaultRigOpts())
	add := func(p pseg, fixup bool) {
		_, tcp := seedRig.build(p)
		f.Add(tcp, fixup)
	}
	add(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("data")}, true)
	add(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN | hdr.TCPFlagPSH, wnd: 100, payload: []byte("fin")}, true)
	add(pseg{seq: 5000, flags: hdr.TCPFlagRST}, true)
	add(pseg{seq: 5010, flags: hdr.TCPFlagRST | hdr.TCPFlagACK}, true)
	add(pseg{seq: 5000, flags: hdr.TCPFlagSYN}, true)
	add(pseg{seq: 6000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0, payload: make([]byte, 1500)}, true)
	add(pseg{seq: 5000, ack: 1400, flags: hdr.TCPFlagACK, wnd: 7, sack: []sackBlock{{1100, 1200}, {1300, 1400}}}, true)
	add(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, rawOpts: []byte{hdr.TCPOptMSS, 4, 5, 180, hdr.TCPOptWS, 3, 7, hdr.TCPOptSACKPermitted, 2, 0, 0, 0}}, true)
	add(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, rawOpts: []byte{hdr.TCPOptSACK, 10, 0, 0, 0, 0, 0, 0, 0}}, false)
	f.Add([]byte{}, true)
	f.Add(make([]byte, 19), true)
	f.Add(make([]byte, 20), true)

	f.Fuzz(func(t *testing.T, tcp []byte, fixup bool) {
		o := defaultRigOpts()
		o.cfg.OOOPoolBytes = 64 << 10
		o.cfg.OOOLimit = 16 << 10
		r := quietRig(t, o)
		r.h.start()
		// Some state: data in flight, one out-of-order segment held.
		buf, _ := r.env.arena.Alloc(8192, 64)
		tx := rings.Tx{Addr: buf, Len: 8192}
		r.e.Send(0, &tx)
		r.in(pseg{seq: 5000 + 2000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(500, 1)})

		if len(tcp) >= 4 {
			be.PutUint16(tcp[0:], portB) // reach the connection most of the time
			be.PutUint16(tcp[2:], portA)
		}
		if fixup && len(tcp) >= hdr.TCPMinSize {
			tcp[16], tcp[17] = 0, 0
			be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		}
		ip, _ := r.build(pseg{})
		be.PutUint16(ip[2:], uint16(netHdrLen+len(tcp)))
		ip[10], ip[11] = 0, 0
		be.PutUint16(ip[10:], ^hdr.Checksum(ip, 0))
		r.e.Input(0, ip, tcp)
		r.h.drain()
		r.advance(2e9)
		r.e.Input(0, ip, tcp) // again, in whatever state it left
		r.advance(70e9)
		checkInvariants(t, r.e)
	})
}

func checkInvariants(t testing.TB, e *Engine) {
	t.Helper()
	used := 0
	for i := range e.conns {
		c := e.conns[i]
		if c == nil || !c.inUse {
			continue
		}
		used += c.ooo.pages
		if c.state == rings.StateClosed {
			continue
		}
		if c.sndNxt.GreaterThan(c.sndMax) || c.sndUna.GreaterThan(c.sndMax) || c.sndMax.GreaterThan(c.sndEnd.Add(1)) {
			t.Fatalf("send sequence space broken: una %d nxt %d max %d end %d", c.sndUna, c.sndNxt, c.sndMax, c.sndEnd)
		}
		for k := 0; k < c.sacked.n; k++ {
			rg := c.sacked.r[k]
			if rg.start.LessThan(c.sndUna) || rg.end.GreaterThan(c.sndMax) || !rg.end.GreaterThan(rg.start) ||
				(k > 0 && rg.start.LessThanEq(c.sacked.r[k-1].end)) {
				t.Fatalf("scoreboard broken at %d: %v (una %d max %d)", k, c.sacked.r[:c.sacked.n], c.sndUna, c.sndMax)
			}
		}
		if c.ooo.bytes > e.cfg.OOOLimit {
			t.Fatalf("holding %d out-of-order bytes, limit %d", c.ooo.bytes, e.cfg.OOOLimit)
		}
		for k := 0; k < c.ooo.n; k++ {
			rg := c.ooo.ranges[k]
			if rg.start.LessThan(c.rcvNxt) || !rg.end.GreaterThan(rg.start) || (k > 0 && !rg.start.GreaterThan(c.ooo.ranges[k-1].end)) {
				t.Fatalf("out-of-order ranges broken at %d: %+v (rcv.nxt %d)", k, c.ooo.ranges[:c.ooo.n], c.rcvNxt)
			}
		}
		if c.ulp.u != nil {
			checkULPInvariants(t, c)
		}
	}
	if total := len(e.pool.mem) / oooPageSize; used+e.pool.freePages() != total {
		t.Fatalf("slab: %d used + %d free != %d", used, e.pool.freePages(), total)
	}
}

// checkULPInvariants: the retransmission buffer holds exactly [SND.UNA,
// SND.END) (less the FIN), every byte of it belongs to a record, records are
// ordered, the window never promises more than the hold can take.
func checkULPInvariants(t testing.TB, c *conn) {
	t.Helper()
	p := &c.ulp
	if p.held < 0 || p.held > len(p.hold) || p.holdHead < 0 || p.holdHead >= len(p.hold) {
		t.Fatalf("ULP hold broken: held %d head %d of %d", p.held, p.holdHead, len(p.hold))
	}
	if c.rcvAdvEdge.GreaterThan(c.rcvNxt) && uint32(p.held)+c.rcvAdvEdge.Sub(c.rcvNxt) > uint32(len(p.hold)) {
		t.Fatalf("ULP window promises more than the hold takes: held %d + window %d > %d",
			p.held, c.rcvAdvEdge.Sub(c.rcvNxt), len(p.hold))
	}
	if p.una != seqnum.Min(c.sndUna, c.sndEnd) || c.sndEnd.Sub(p.una) > uint32(len(p.buf)) {
		t.Fatalf("ULP buffer broken: una %d (SND.UNA %d) end %d size %d", p.una, c.sndUna, c.sndEnd, len(p.buf))
	}
	prev := p.una
	for k := 0; k < p.recN; k++ {
		e := p.recAt(k)
		if !e.GreaterThan(prev) || e.GreaterThan(c.sndEnd) {
			t.Fatalf("ULP record %d ends at %d (previous %d, SND.END %d)", k, e, prev, c.sndEnd)
		}
		prev = e
	}
	if c.sndEnd.GreaterThan(p.una) && prev != c.sndEnd {
		t.Fatalf("ULP bytes [%d, %d) in no record", prev, c.sndEnd)
	}
	if p.recN > 0 && p.lastStart.GreaterThanEq(c.sndEnd) {
		t.Fatalf("newest ULP record starts at %d, SND.END %d", p.lastStart, c.sndEnd)
	}
}
