package delegation

import (
	"testing"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// rig is one engine (side A) with the test playing its peer by hand:
// segments are crafted byte by byte and the engine's frames captured.
type rig struct {
	t   testing.TB
	now int64
	env *testEnv
	e   *Engine
	st  rings.ConnState
	out []outSeg
	h   *hostApp

	peerSeq uint32 // the peer's SND.NXT
	peerTS  uint32

	// deliver is how data hands the engine a segment: in, or the test
	// context's send.
	deliver func(pseg)
}

// outSeg is a frame the engine transmitted, parsed.
type outSeg struct {
	segment
	raw   []byte
	scale uint8
}

func (o outSeg) has(fl uint8) bool { return o.flags&fl == fl }

type rigOpts struct {
	cfg    Config
	pair   pairOpts
	host   hostOpts
	mutate func(*rings.ConnState)
	dma    func(*rings.Arena) rings.DMA
}

func defaultRigOpts() rigOpts {
	return rigOpts{
		cfg:  Config{MaxConns: 8, TimeWait: 500e6},
		pair: pairOpts{issA: 1000, issB: 5000, wsA: 2, wsB: 2, sack: true, ts: true, tsA: 100, tsB: 7000, rcvBufA: 64 << 10},
		host: hostOpts{txBufs: 8, txSize: 16 << 10, userBufs: 8, userSize: 8 << 10, legacyBufs: 64, legacySize: 2048},
	}
}

func newRig(t testing.TB, o rigOpts) *rig {
	r := &rig{t: t, now: 1e9}
	r.deliver = r.in
	r.env = newTestEnv(t, 4<<20, &r.now)
	r.env.transmit = func(f []byte) error {
		raw := append([]byte(nil), f...)
		var s outSeg
		s.raw = raw
		if len(raw) < hdrsLen {
			t.Fatalf("short frame %d", len(raw))
		}
		ip := raw[hdr.EthernetSize:]
		if hdr.Checksum(ip[:netHdrLen], 0) != 0xFFFF {
			t.Fatalf("engine sent a bad IPv4 checksum")
		}
		tcp := ip[netHdrLen:int(be.Uint16(ip[2:]))]
		if !hdr.TCP(tcp).ChecksumOK(hdr.IPv4(ip).Src(), hdr.IPv4(ip).Dst()) {
			t.Fatalf("engine sent a bad TCP checksum")
		}
		if parseTCP(tcp, &s.segment) != parseOK {
			t.Fatalf("engine sent an unparsable segment")
		}
		r.out = append(r.out, s)
		return nil
	}
	a, _ := pairStates(o.pair)
	if o.mutate != nil {
		o.mutate(&a)
	}
	r.st = a
	if o.dma != nil {
		r.env.dma = o.dma(r.env.arena)
	}
	r.e = NewEngine(o.cfg, r.env)
	if st := r.e.Offload(0, &r.st); st != rings.StatusOK {
		t.Fatalf("offload: %v", st)
	}
	o.host.seed = 9
	r.h = newHostApp(t, "A", r.e, r.env, 0, &r.st, o.host)
	r.h.keepNtfs = true
	r.peerSeq = a.RcvNxt
	r.peerTS = a.TSRecent
	return r
}

// pseg is a segment the peer sends.
type pseg struct {
	seq, ack uint32
	flags    uint8
	wnd      uint16
	payload  []byte
	noTS     bool
	tsVal    uint32 // 0: the rig's running TS (advanced by 1 per segment)
	tsEcr    uint32
	sack     []sackBlock
	rawOpts  []byte // replaces the options entirely
}

// build returns the IPv4 header and TCP segment of p.
func (r *rig) build(p pseg) (ipHdr, tcpSeg []byte) {
	var opts []byte
	if p.rawOpts != nil {
		opts = p.rawOpts
	} else {
		if r.st.Flags&rings.ConnTimestamps != 0 && !p.noTS {
			ts := p.tsVal
			if ts == 0 {
				r.peerTS++
				ts = r.peerTS
			}
			ecr := p.tsEcr
			if ecr == 0 {
				ecr = r.lastTSval()
			}
			opts = append(opts, hdr.TCPOptNOP, hdr.TCPOptNOP, hdr.TCPOptTimestamp, 10, 0, 0, 0, 0, 0, 0, 0, 0)
			be.PutUint32(opts[len(opts)-8:], ts)
			be.PutUint32(opts[len(opts)-4:], ecr)
		}
		if len(p.sack) > 0 {
			opts = append(opts, hdr.TCPOptNOP, hdr.TCPOptNOP, hdr.TCPOptSACK, byte(2+8*len(p.sack)))
			for _, b := range p.sack {
				opts = be.AppendUint32(opts, uint32(b.start))
				opts = be.AppendUint32(opts, uint32(b.end))
			}
		}
	}
	// Options are padded with End of Option List to a multiple of 4.
	ip, tcp := testutil.TCPPacket(hdr.TCPFrameFields{Src: r.st.RemoteIP, Dst: r.st.LocalIP, DontFragment: true,
		TCP:     hdr.TCPFields{SrcPort: r.st.RemotePort, DstPort: r.st.LocalPort, Seq: p.seq, Ack: p.ack, Flags: p.flags, Window: p.wnd},
		Options: opts, Payload: p.payload})
	return ip, tcp
}

func (r *rig) lastTSval() uint32 {
	i, _ := r.e.Info(0)
	return i.TSVal
}

// in delivers p to the engine, then lets the host handle notifications.
func (r *rig) in(p pseg) {
	ip, tcp := r.build(p)
	r.e.Input(0, ip, tcp)
	r.h.drain()
}

// data sends payload at the peer's SND.NXT acknowledging ack, and advances
// the peer's SND.NXT.
func (r *rig) data(payload []byte, flags uint8) {
	r.deliver(pseg{seq: r.peerSeq, ack: r.info().SndUna, flags: hdr.TCPFlagACK | flags, wnd: 0xFFFF, payload: payload})
	r.peerSeq += uint32(len(payload))
	if flags&hdr.TCPFlagFIN != 0 {
		r.peerSeq++
	}
}

// advance moves the clock to now+d and runs the engine's timers in order.
func (r *rig) advance(d int64) {
	end := r.now + d
	for i := 0; ; i++ {
		next := r.e.NextDeadline()
		if next > end {
			break
		}
		if i > 100000 {
			r.t.Fatalf("timers do not settle: deadline %d now %d info %+v", next, r.now, r.info())
		}
		if next > r.now {
			r.now = next
		}
		r.e.Tick(r.now)
		r.h.drain()
	}
	r.now = end
}

func (r *rig) info() ConnInfo {
	i, ok := r.e.Info(0)
	if !ok {
		r.t.Fatalf("connection 0 not delegated")
	}
	return i
}

// take returns and clears the captured frames.
func (r *rig) take() []outSeg {
	o := r.out
	r.out = nil
	return o
}

// takeOne expects exactly one frame.
func (r *rig) takeOne(what string) outSeg {
	r.t.Helper()
	o := r.take()
	if len(o) != 1 {
		r.t.Fatalf("%s: %d frames sent, want 1", what, len(o))
	}
	return o[0]
}

func (r *rig) expectNone(what string) {
	r.t.Helper()
	if o := r.take(); len(o) != 0 {
		r.t.Fatalf("%s: %d frames sent, want none (first flags %#x seq %d)", what, len(o), o[0].flags, o[0].seq)
	}
}
