package delegation

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"hash"
	"hash/crc32"
	"math/rand/v2"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// frameULP is a fake upper-layer protocol: it sends a stream of FPDU-like
// frames — len (BE16, the whole frame) | number (BE16) | payload | CRC-32
// (BE32, over the rest) — never splitting one across Transmit calls, and
// reassembles and checks the peer's frames from whatever splits Receive is
// handed. With a limit it takes at most limit bytes until the test "reads"
// them (read), which is how back-pressure is made.
type frameULP struct {
	t    testing.TB
	name string

	// Sending.
	total    int64 // stop making frames once this many bytes were made
	made     int64
	sent     int64 // bytes handed to the engine
	minFrame int
	maxFrame int
	sizes    *rand.Rand
	gen      *rand.ChaCha8
	frame    [1 << 16]byte
	next     []byte // the frame made but not handed over yet
	num      uint16
	bounds   map[int64]bool // stream offsets where frames end (0 included)
	sendHash hash.Hash
	close    bool // WantClose once everything was sent
	calls    int  // Transmit calls

	// Receiving.
	part      [1 << 16]byte
	partN     int
	rxNum     uint16
	recvd     int64 // stream bytes consumed
	frames    int
	recvHash  hash.Hash
	limit     int // >0: at most limit bytes between reads
	unread    int
	refused   int // Receive calls that took less than offered
	llpClosed int
	afterDown int // calls after LLPClosed
}

func newFrameULP(t testing.TB, name string, total int64, minFrame, maxFrame int, seed uint64) *frameULP {
	var s [32]byte
	s[0] = byte(seed)
	copy(s[1:], name)
	return &frameULP{t: t, name: name, total: total, minFrame: minFrame, maxFrame: maxFrame,
		sizes: rand.New(rand.NewPCG(seed, 77)), gen: rand.NewChaCha8(s),
		bounds: map[int64]bool{0: true}, sendHash: sha256.New(), recvHash: sha256.New()}
}

func (u *frameULP) makeFrame() bool {
	if u.made >= u.total {
		return false
	}
	n := u.minFrame + u.sizes.IntN(u.maxFrame-u.minFrame+1)
	f := u.frame[:n]
	be.PutUint16(f[0:], uint16(n))
	be.PutUint16(f[2:], u.num)
	u.num++
	u.gen.Read(f[4 : n-4])
	u.sendHash.Write(f[4 : n-4])
	be.PutUint32(f[n-4:], crc32.ChecksumIEEE(f[:n-4]))
	u.next = f
	u.made += int64(n)
	return true
}

func (u *frameULP) HasOutput() bool {
	if u.llpClosed > 0 {
		u.afterDown++
	}
	return u.next != nil || u.made < u.total
}

func (u *frameULP) Transmit(dst []byte) int {
	if u.llpClosed > 0 {
		u.afterDown++
	}
	u.calls++
	n := 0
	for {
		if u.next == nil && !u.makeFrame() {
			break
		}
		if len(u.next) > len(dst)-n {
			break
		}
		n += copy(dst[n:], u.next)
		u.sent += int64(len(u.next))
		u.bounds[u.sent] = true
		u.next = nil
	}
	return n
}

func (u *frameULP) WantClose() bool { return u.close && u.next == nil && u.made >= u.total }

func (u *frameULP) LLPClosed() { u.llpClosed++ }

func (u *frameULP) Receive(p []byte) int {
	if u.llpClosed > 0 {
		u.afterDown++
	}
	take := len(p)
	if u.limit > 0 {
		take = min(take, u.limit-u.unread)
		if take < len(p) {
			u.refused++
		}
	}
	for _, b := range p[:take] {
		u.part[u.partN] = b
		u.partN++
		if u.partN < 2 {
			continue
		}
		n := int(be.Uint16(u.part[:]))
		if n < 8 {
			u.t.Fatalf("%s: frame %d has length %d", u.name, u.rxNum, n)
		}
		if u.partN < n {
			continue
		}
		f := u.part[:n]
		if be.Uint32(f[n-4:]) != crc32.ChecksumIEEE(f[:n-4]) {
			u.t.Fatalf("%s: frame %d: bad CRC", u.name, u.rxNum)
		}
		if got := be.Uint16(f[2:]); got != u.rxNum {
			u.t.Fatalf("%s: frame %d arrived, expected %d", u.name, got, u.rxNum)
		}
		u.rxNum++
		u.frames++
		u.recvHash.Write(f[4 : n-4])
		u.partN = 0
	}
	u.recvd += int64(take)
	u.unread += take
	return take
}

// read is the application taking what the ULP received.
func (u *frameULP) read() { u.unread = 0 }

// done reports whether every byte this side sent arrived at peer.
func (u *frameULP) deliveredTo(peer *frameULP) bool {
	return u.made >= u.total && u.next == nil && peer.recvd == u.sent && peer.partN == 0
}

func checkFrames(t testing.TB, from, to *frameULP) {
	t.Helper()
	if to.recvd != from.sent || to.partN != 0 {
		t.Fatalf("%s→%s: %d bytes sent, %d received (%d in a partial frame)", from.name, to.name, from.sent, to.recvd, to.partN)
	}
	if !bytes.Equal(from.sendHash.Sum(nil), to.recvHash.Sum(nil)) {
		t.Fatalf("%s→%s: payload hash differs", from.name, to.name)
	}
}

// ulpSim is two engines over the simulated link with a frameULP attached
// to each end of the connection.
type ulpSim struct {
	*sim
	u          [2]*frameULP
	misaligned [2]int // segments not starting and ending on frame boundaries, per sender
	dataSegs   [2]int
}

func ulpSimOpts(seed uint64) simOpts {
	return simOpts{
		link: linkOpts{delay: 500e3, seed: seed},
		pair: pairOpts{issA: 0xFFFFF000, issB: 0x7FFFFF00, wsA: 7, wsB: 7, sack: true, ts: true,
			tsA: 1000, tsB: 0xFFFFFF00, rcvBufA: 1 << 20, rcvBufB: 1 << 20},
		cfg: Config{MaxConns: 4, TimeWait: 100e6},
	}
}

func newULPSim(t testing.TB, o simOpts, ua, ub *frameULP, sendBuf int) *ulpSim {
	s := &ulpSim{sim: newSim(t, o), u: [2]*frameULP{ua, ub}}
	for i := 0; i < 2; i++ {
		s.host[i].ulp = true
		s.host[i].keepNtfs = true
	}
	s.link.drop = func(to int, f []byte) bool {
		from := 1 - to
		ip := f[hdr.EthernetSize:]
		tcp := ip[netHdrLen:be.Uint16(ip[2:])]
		payload := tcp[int(tcp[12]>>4)*4:]
		if len(payload) == 0 {
			return false
		}
		s.dataSegs[from]++
		off := int64(be.Uint32(tcp[4:]) - s.st[from].SndNxt)
		if b := s.u[from].bounds; !b[off] || !b[off+int64(len(payload))] {
			s.misaligned[from]++
		}
		return false
	}
	for i := 0; i < 2; i++ {
		if st := s.eng[i].AttachULP(0, s.u[i], sendBuf); st != rings.StatusOK {
			t.Fatalf("attach %d: %v", i, st)
		}
	}
	return s
}

func (s *ulpSim) bothDelivered() bool {
	return s.u[0].deliveredTo(s.u[1]) && s.u[1].deliveredTo(s.u[0])
}

func (s *ulpSim) logStats() {
	s.t.(*testing.T).Helper()
	for i := 0; i < 2; i++ {
		c := s.eng[i].Counters()
		s.t.(*testing.T).Logf("%s: sent %d in %d segments (%d misaligned), retrans %d, RTO %d, OOO %d, held %d, zero windows %d, probes %d",
			s.u[i].name, s.u[i].sent, s.dataSegs[i], s.misaligned[i], c.TxRetransSegs, c.RTOExpired, c.OOOSegments,
			c.ULPHeld, c.ZeroWindowsSent, c.PersistProbes)
	}
	s.t.(*testing.T).Logf("link: %d frames, %d lost, %d dup, %d reordered, %d tail drops; %.3f s simulated",
		s.link.frames, s.link.lost, s.link.dups, s.link.reordered, s.link.tailDrops, float64(s.now-1e9)/1e9)
}

func ulpTransferSize() int64 {
	if raceEnabled || testing.Short() {
		return 2 << 20
	}
	return 16 << 20
}

// TestULPTransfer: both ends stream frames at each other over a clean link;
// every segment carries whole frames, the bytes arrive intact, and the ULPs
// close the connection (FIN after their last frame) and hear LLPClosed once.
func TestULPTransfer(t *testing.T) {
	n := ulpTransferSize()
	ua := newFrameULP(t, "A", n, 9, 1448, 1)
	ub := newFrameULP(t, "B", n, 9, 1448, 2)
	ua.close, ub.close = true, true
	s := newULPSim(t, ulpSimOpts(1), ua, ub, 0)
	s.runUntil(func() bool { return s.bothDelivered() && s.host[0].closed && s.host[1].closed }, 600e9)
	s.logStats()
	checkFrames(t, ua, ub)
	checkFrames(t, ub, ua)
	s.checkClean()
	for i := 0; i < 2; i++ {
		if s.misaligned[i] != 0 {
			t.Fatalf("%s: %d of %d segments do not carry whole frames", s.u[i].name, s.misaligned[i], s.dataSegs[i])
		}
		if s.u[i].llpClosed != 1 || s.u[i].afterDown != 0 {
			t.Fatalf("%s: LLPClosed %d times, %d calls after it", s.u[i].name, s.u[i].llpClosed, s.u[i].afterDown)
		}
		h := s.host[i]
		if !h.gotFin || h.flags&(rings.NtfUserBufReq|rings.NtfLegacyUpload|rings.NtfUserBufDone|rings.NtfRst|rings.NtfTimeout|rings.NtfError) != 0 {
			t.Fatalf("%s: notifications %v (fin %v)", h.name, h.flags, h.gotFin)
		}
		c := s.eng[i].Counters()
		if c.ULPPulled != uint64(s.u[i].sent) || c.RxBytes != uint64(s.u[1-i].sent) || c.ULPHoldFull != 0 || c.LegacyUploads != 0 {
			t.Fatalf("%s: counters %+v", s.u[i].name, c)
		}
	}
	// Full frames make full segments: small frames were packed together.
	if segs := s.dataSegs[0]; int64(segs) > n/1000 {
		t.Fatalf("%d segments for %d bytes: frames not packed", segs, n)
	}
}

// TestULPTransferImpaired: loss, duplication, reordering and a bottleneck;
// the frames still arrive whole and in order, retransmissions re-read the
// engine's buffer.
func TestULPTransferImpaired(t *testing.T) {
	for seed := uint64(1); seed <= 3; seed++ {
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			n := ulpTransferSize() / 2
			ua := newFrameULP(t, "A", n, 9, 1448, seed)
			ub := newFrameULP(t, "B", n, 200, 1448, seed+10)
			ua.close, ub.close = true, true
			o := impaired(ulpSimOpts(seed))
			if seed == 3 {
				o.pair.sack, o.pair.ts = false, false
			}
			s := newULPSim(t, o, ua, ub, 128<<10)
			s.runUntil(func() bool { return s.bothDelivered() && s.host[0].closed && s.host[1].closed }, 3600e9)
			s.logStats()
			checkFrames(t, ua, ub)
			checkFrames(t, ub, ua)
			s.checkClean()
			for i := 0; i < 2; i++ {
				if s.u[i].llpClosed != 1 {
					t.Fatalf("%s: LLPClosed %d times", s.u[i].name, s.u[i].llpClosed)
				}
				if c := s.eng[i].Counters(); c.TxRetransSegs == 0 || c.ULPPulled != uint64(s.u[i].sent) {
					t.Fatalf("%s: counters %+v", s.u[i].name, c)
				}
				// Splitting a frame is allowed only when the window forces it.
				if s.misaligned[i]*100 > s.dataSegs[i] {
					t.Fatalf("%s: %d of %d segments split frames", s.u[i].name, s.misaligned[i], s.dataSegs[i])
				}
			}
		})
	}
}

// TestULPBackpressure: the receiving ULP takes 16 KiB, then nothing until
// its application reads (every 50 ms, followed by ULPKick). The engine
// holds what the ULP refused, the window closes (the sender probes it) and
// reopens, nothing is lost.
func TestULPBackpressure(t *testing.T) {
	n := int64(1 << 20)
	ua := newFrameULP(t, "A", n, 9, 1448, 5)
	ub := newFrameULP(t, "B", 0, 9, 1448, 6)
	ub.limit = 16 << 10
	o := ulpSimOpts(5)
	o.pair.rcvBufB = 64 << 10
	o.pair.wsB = 2
	o.pair.initialWnd = 16 << 10 // 64 KiB advertised at offload
	s := newULPSim(t, o, ua, ub, 0)
	next := s.now + 50e6
	s.hookAt = next
	minWnd := uint32(1 << 30)
	maxHeld := uint32(0)
	s.hook = func() {
		i, _ := s.eng[1].Info(0)
		minWnd = min(minWnd, i.RcvWnd)
		maxHeld = max(maxHeld, i.ULPHeld)
		if s.now >= next {
			ub.read()
			if st := s.eng[1].ULPKick(0); st != rings.StatusOK {
				t.Fatalf("kick: %v", st)
			}
			s.host[1].drain()
			next = s.now + 50e6
			s.hookAt = next
		}
	}
	s.runUntil(func() bool { return ua.deliveredTo(ub) }, 600e9)
	s.logStats()
	checkFrames(t, ua, ub)
	cb := s.eng[1].Counters()
	if ub.refused == 0 || cb.ULPHeld == 0 || maxHeld == 0 || cb.ZeroWindowsSent == 0 || minWnd != 0 || cb.ULPHoldFull != 0 {
		t.Fatalf("no back-pressure seen: refused %d, held %d (max %d), zero windows %d, min window %d, hold full %d",
			ub.refused, cb.ULPHeld, maxHeld, cb.ZeroWindowsSent, minWnd, cb.ULPHoldFull)
	}
	if maxHeld > 64<<10+1<<2 {
		t.Fatalf("held %d bytes, more than the 64 KiB receive buffer and the window's rounding", maxHeld)
	}
	if ca := s.eng[0].Counters(); ca.Timeouts != 0 || s.host[0].closed {
		t.Fatalf("sender gave up: %+v", ca)
	}
	// Elapsed time matches the reader's pace (16 KiB per 50 ms).
	if el, min := s.now-1e9, n/(16<<10)*50e6*9/10; el < min {
		t.Fatalf("%d bytes in %d ns: faster than the reader", n, el)
	}
}

// TestULPHostClose: the host's CLOSE on a ULP connection sends the FIN after
// the ULP's output; the peer closes on NtfFin; both ULPs hear LLPClosed.
func TestULPHostClose(t *testing.T) {
	ua := newFrameULP(t, "A", 1<<20, 9, 1448, 7)
	ub := newFrameULP(t, "B", 0, 9, 1448, 8)
	s := newULPSim(t, ulpSimOpts(7), ua, ub, 64<<10)
	if st := s.eng[0].Close(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	if st := s.eng[0].Close(0); st != rings.StatusOK {
		t.Fatalf("second close: %v", st)
	}
	if i, _ := s.eng[0].Info(0); i.State != rings.StateEstablished {
		t.Fatalf("FIN queued before the ULP's output: %v", i.State)
	}
	closedB := false
	s.hook = func() {
		if s.host[1].gotFin && !closedB {
			closedB = true
			if ub.recvd != ua.sent || ua.made < ua.total {
				t.Fatalf("FIN before the ULP's data: %d of %d", ub.recvd, ua.total)
			}
			if st := s.eng[1].Close(0); st != rings.StatusOK {
				t.Fatal(st)
			}
		}
	}
	s.runUntil(func() bool { return s.host[0].closed && s.host[1].closed }, 60e9)
	checkFrames(t, ua, ub)
	for i := 0; i < 2; i++ {
		if s.u[i].llpClosed != 1 || s.u[i].afterDown != 0 {
			t.Fatalf("%s: LLPClosed %d, calls after %d", s.u[i].name, s.u[i].llpClosed, s.u[i].afterDown)
		}
		if st := s.eng[i].ULPKick(0); st != rings.StatusBadState {
			t.Fatalf("kick after close: %v", st)
		}
		if st := s.eng[i].Release(0); st != rings.StatusOK {
			t.Fatal(st)
		}
	}
}

// TestULPAbortAndReset: ABORT on one side resets the peer; both ULPs hear
// LLPClosed (the aborting one from ABORT itself).
func TestULPAbortAndReset(t *testing.T) {
	ua := newFrameULP(t, "A", 4<<20, 9, 1448, 9)
	ub := newFrameULP(t, "B", 4<<20, 9, 1448, 10)
	s := newULPSim(t, ulpSimOpts(9), ua, ub, 0)
	s.runUntil(func() bool { return ub.recvd > 256<<10 }, 60e9)
	if st := s.eng[0].Abort(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	if ua.llpClosed != 1 {
		t.Fatalf("A: LLPClosed %d after ABORT", ua.llpClosed)
	}
	s.runUntil(func() bool { return s.host[1].closed }, 60e9)
	if !s.host[1].rst || ub.llpClosed != 1 || ua.afterDown+ub.afterDown != 0 {
		t.Fatalf("B: rst %v LLPClosed %d; calls after: %d %d", s.host[1].rst, ub.llpClosed, ua.afterDown, ub.afterDown)
	}
	if ua.partN == 0 && ub.partN == 0 && ua.recvd == ub.sent && ub.recvd == ua.sent {
		t.Fatal("the transfer finished before the abort")
	}
}

// TestULPTimeout: the peer vanishes; retransmissions give up, the ULP hears
// LLPClosed and the host NtfTimeout.
func TestULPTimeout(t *testing.T) {
	ua := newFrameULP(t, "A", 1<<20, 9, 1448, 11)
	ub := newFrameULP(t, "B", 0, 9, 1448, 12)
	o := ulpSimOpts(11)
	o.cfg.MaxRetries = 4
	o.cfg.MinRTO = 10e6
	o.cfg.MaxRTO = 100e6
	s := newULPSim(t, o, ua, ub, 0)
	s.runUntil(func() bool { return ub.recvd > 64<<10 }, 60e9)
	align := s.link.drop
	s.link.drop = func(to int, f []byte) bool { align(to, f); return true }
	s.runUntil(func() bool { return s.host[0].closed }, 60e9)
	if !s.host[0].timeout || ua.llpClosed != 1 || ub.llpClosed != 0 {
		t.Fatalf("timeout %v, LLPClosed A %d B %d", s.host[0].timeout, ua.llpClosed, ub.llpClosed)
	}
	// The frames B got before the link died are intact (checked as they
	// arrived) and a prefix of A's.
	if ub.recvd == 0 || ub.recvd > ua.sent {
		t.Fatalf("B received %d of %d", ub.recvd, ua.sent)
	}
}

// TestULPCommands: what a ULP connection refuses and when AttachULP may be
// used.
func TestULPCommands(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	u := newFrameULP(t, "A", 0, 9, 1448, 1)
	if st := r.e.ULPKick(0); st != rings.StatusBadState {
		t.Fatalf("kick without a ULP: %v", st)
	}
	if st := r.e.AttachULP(5, u, 0); st != rings.StatusBadConn {
		t.Fatalf("attach on a free slot: %v", st)
	}
	if st := r.e.AttachULP(0, nil, 0); st != rings.StatusBadParam {
		t.Fatalf("attach nil: %v", st)
	}
	if st := r.e.AttachULP(0, u, 100); st != rings.StatusBadParam {
		t.Fatalf("attach with a buffer under one segment: %v", st)
	}
	if st := r.e.AttachULP(0, u, maxULPBuf+1); st != rings.StatusBadParam {
		t.Fatalf("attach with a huge buffer: %v", st)
	}
	// Host data not yet acknowledged: no.
	buf, _ := r.env.arena.Alloc(100, 64)
	if st := r.e.Send(0, &rings.Tx{Addr: buf, Len: 100}); st != rings.StatusOK {
		t.Fatal(st)
	}
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusBadState {
		t.Fatalf("attach with host data in flight: %v", st)
	}
	r.in(pseg{seq: r.peerSeq, ack: r.info().SndNxt, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusOK {
		t.Fatalf("attach: %v", st)
	}
	if i := r.info(); !i.ULP || i.SegPayload != 1448 {
		t.Fatalf("info %+v", i)
	}
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusBadState {
		t.Fatalf("attach twice: %v", st)
	}
	if st := r.e.Send(0, &rings.Tx{Addr: buf, Len: 100}); st != rings.StatusBadState {
		t.Fatalf("host send on a ULP connection: %v", st)
	}
	if n, st := r.e.PostBuffers(0, r.h.descAddr, 1); n != 0 || st != rings.StatusBadState {
		t.Fatalf("post buffers on a ULP connection: %d %v", n, st)
	}
	if st := r.e.ULPKick(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	// Bytes from the peer go to the ULP, not to the host.
	r.h.ntfs = nil
	f := []byte{0, 12, 0, 0, 'a', 'b', 'c', 'd', 0, 0, 0, 0}
	be.PutUint32(f[8:], crc32.ChecksumIEEE(f[:8]))
	r.data(f, hdr.TCPFlagPSH)
	if u.frames != 1 || len(r.h.ntfs) != 0 {
		t.Fatalf("frames %d, host notifications %v", u.frames, r.h.ntfs)
	}
	// ABORT detaches; the slot takes a plain connection again.
	if st := r.e.Abort(0); st != rings.StatusOK || u.llpClosed != 1 {
		t.Fatalf("abort: %v, LLPClosed %d", st, u.llpClosed)
	}
	if st := r.e.Offload(0, &r.st); st != rings.StatusOK {
		t.Fatal(st)
	}
	if i := r.info(); i.ULP {
		t.Fatal("ULP survived ABORT")
	}
	if st := r.e.Send(0, &rings.Tx{Addr: buf, Len: 100}); st != rings.StatusOK {
		t.Fatalf("host send after the ULP left: %v", st)
	}
	if st := r.e.ULPKick(0); st != rings.StatusBadState {
		t.Fatalf("kick: %v", st)
	}
	// Not in CLOSE_WAIT.
	o := defaultRigOpts()
	o.mutate = func(st *rings.ConnState) { st.State = rings.StateCloseWait }
	r2 := newRig(t, o)
	if st := r2.e.AttachULP(0, u, 0); st != rings.StatusBadState {
		t.Fatalf("attach in CLOSE_WAIT: %v", st)
	}
}

// recULP hands out records of a fixed size from a pattern, as many as asked
// (fill: records still to make; -1 without end), and sinks input, taking at
// most take bytes a call when take >= 0.
type recULP struct {
	size  int
	fill  int
	pat   []byte
	take  int
	got   int
	calls int
}

func (u *recULP) Receive(p []byte) int {
	n := len(p)
	if u.take >= 0 {
		n = min(n, u.take)
	}
	u.got += n
	return n
}
func (u *recULP) HasOutput() bool { return u.fill != 0 }
func (u *recULP) Transmit(dst []byte) int {
	u.calls++
	n := 0
	for u.fill != 0 && len(dst)-n >= u.size {
		n += copy(dst[n:n+u.size], u.pat)
		if u.fill > 0 {
			u.fill--
		}
	}
	return n
}
func (u *recULP) LLPClosed() {}

// TestULPSegmentsFollowRecords: small records are packed into segments up
// to the MSS and never split while something is in flight; a window smaller
// than a record with nothing in flight splits it; retransmissions resend
// the same bytes from the engine's buffer, record-aligned.
func TestULPSegmentsFollowRecords(t *testing.T) {
	r := newRig(t, defaultRigOpts())
	u := &recULP{size: 700, fill: 10, pat: pattern(700, 3), take: -1}
	two := append(append([]byte(nil), u.pat...), u.pat...) // one packed record
	// The peer's window is 1000 bytes (scale 2).
	r.in(pseg{seq: r.peerSeq, ack: 1000, flags: hdr.TCPFlagACK, wnd: 250})
	r.take()
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusOK {
		t.Fatal(st)
	}
	if i := r.info(); i.SndEnd-i.SndUna != 7000 {
		t.Fatalf("pulled %d bytes, want all 7000", i.SndEnd-i.SndUna)
	}
	lens := func(o []outSeg) string {
		var l []int
		for _, s := range o {
			l = append(l, len(s.payload))
		}
		return fmt.Sprint(l)
	}
	// Records of 1400 (two of the ULP's 700-byte writes); nothing in
	// flight and a 1000-byte window: the first record is split.
	o := r.take()
	if lens(o) != "[1000]" || !bytes.Equal(o[0].payload, two[:1000]) {
		t.Fatalf("first flight %s", lens(o))
	}
	// The rest of the record goes; the next record waits for room.
	r.in(pseg{seq: r.peerSeq, ack: 2000, flags: hdr.TCPFlagACK, wnd: 250})
	if o = r.take(); lens(o) != "[400]" {
		t.Fatalf("second flight %s", lens(o))
	}
	r.in(pseg{seq: r.peerSeq, ack: 2400, flags: hdr.TCPFlagACK, wnd: 125})
	if o = r.take(); lens(o) != "[500]" {
		t.Fatalf("third flight %s", lens(o))
	}
	// Wide window: the rest of that record, then whole records.
	r.in(pseg{seq: r.peerSeq, ack: 2900, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	if o = r.take(); lens(o) != "[900 1400 1400 1400]" {
		t.Fatalf("fourth flight %s", lens(o))
	}
	// Timeout (no tail loss probe under a ULP): the head is resent from
	// the engine's buffer, whole.
	r.advance(r.info().RTO + 1)
	o = r.take()
	if lens(o) != "[900]" || o[0].seq != 2900 || !bytes.Equal(o[0].payload, two[500:]) {
		t.Fatalf("retransmission %s", lens(o))
	}
	if u.calls > 20 {
		t.Fatalf("%d Transmit calls", u.calls)
	}
}

// TestULPHoldAndKick: a ULP that takes nothing: the engine holds and
// acknowledges within the window, the window closes, a zero-window probe is
// answered, and ULPKick delivers the held bytes and reopens the window.
func TestULPHoldAndKick(t *testing.T) {
	o := defaultRigOpts()
	o.pair.rcvBufA = 8 << 10
	o.pair.initialWnd = 2048 // scale 2: 8 KiB
	r := newRig(t, o)
	u := &recULP{take: 0}
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusOK {
		t.Fatal(st)
	}
	for i := 0; i < 5; i++ {
		r.data(pattern(1448, byte(i)), 0)
	}
	r.advance(100e6)
	i := r.info()
	if i.ULPHeld != 5*1448 || i.RcvNxt != r.peerSeq || i.RcvWnd != 8<<10-5*1448 {
		t.Fatalf("info %+v", i)
	}
	r.take()
	// Fill the window exactly; the ACK advertises zero.
	r.data(pattern(8<<10-5*1448, 9), 0)
	r.advance(100e6)
	if a := r.take(); len(a) == 0 || a[len(a)-1].wnd != 0 || r.info().ULPHeld != 8<<10 {
		t.Fatalf("no zero window: %d ACKs, info %+v", len(a), r.info())
	}
	// Beyond the window: not accepted.
	r.data(pattern(100, 1), 0)
	r.peerSeq -= 100
	if i := r.info(); i.ULPHeld != 8<<10 || i.RcvNxt != r.peerSeq || r.e.Counters().DropOutOfWindow == 0 {
		t.Fatalf("out of window accepted: %+v", i)
	}
	r.take()
	// The ULP still refuses: a kick changes nothing.
	r.e.ULPKick(0)
	r.expectNone("kick while full")
	// The ULP takes 1000 bytes a call.
	u.take = 1000
	r.e.ULPKick(0)
	if i := r.info(); i.ULPHeld != 8<<10-1000 || u.got != 1000 {
		t.Fatalf("after kick: held %d, ULP got %d", i.ULPHeld, u.got)
	}
	r.expectNone("1000 bytes freed: no window update yet (below the SWS threshold)")
	u.take = 1 << 20
	r.e.ULPKick(0)
	if u.got != 8<<10 || r.info().ULPHeld != 0 {
		t.Fatalf("ULP got %d, held %d", u.got, r.info().ULPHeld)
	}
	a := r.takeOne("window update")
	if a.wnd<<2 != 8<<10 {
		t.Fatalf("window update %d", uint32(a.wnd)<<2)
	}
	// Held bytes go to the ULP before newer ones.
	u.take = 0
	r.data(pattern(100, 1), 0)
	u.take = 1 << 20
	r.data(pattern(100, 2), 0)
	if u.got != 8<<10+200 || r.info().ULPHeld != 0 {
		t.Fatalf("ULP got %d, held %d", u.got, r.info().ULPHeld)
	}
	if r.e.Counters().ULPHoldFull != 0 {
		t.Fatal("hold overflowed")
	}
}

// ---- allocations ----------------------------------------------------------

func ulpAllocRig(t *testing.T, u ULP) *rig {
	o := defaultRigOpts()
	r := quietRig(t, o)
	if st := r.e.AttachULP(0, u, 0); st != rings.StatusOK {
		t.Fatal(st)
	}
	return r
}

// TestAllocsULPReceive: in-order segments handed to a ULP, some of them
// refused and held, then offered again.
func TestAllocsULPReceive(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	u := &recULP{take: -1}
	r := ulpAllocRig(t, u)
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(1448, 1)})
	sq := uint32(5000)
	ts := uint32(8000)
	k := 0
	step := func() {
		k++
		u.take = -1
		if k%4 == 0 {
			u.take = 500 // refuse most of this one: held, offered again next time
		}
		be.PutUint32(tcp[4:], sq)
		be.PutUint32(tcp[hdr.TCPMinSize+4:], ts)
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		r.e.Input(0, ip, tcp)
		sq += 1448
		ts++
	}
	for i := 0; i < 100; i++ {
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n != 0 {
		t.Fatalf("%v allocations per received segment", n)
	}
	if c := r.e.Counters(); c.ULPHeld == 0 || c.RxBytes != uint64(sq-5000) || uint64(u.got)+uint64(r.info().ULPHeld) != c.RxBytes {
		t.Fatalf("counters %+v, ULP got %d", c, u.got)
	}
}

// TestAllocsULPSend: ACKs free the retransmission buffer, the engine pulls
// records and sends them.
func TestAllocsULPSend(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates")
	}
	u := &recULP{size: 1000, fill: -1, pat: pattern(1000, 5), take: -1}
	r := ulpAllocRig(t, u)
	ip, tcp := r.build(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	ack := uint32(1000)
	ts := uint32(8000)
	step := func() {
		ack += 2000
		be.PutUint32(tcp[8:], ack)
		be.PutUint32(tcp[hdr.TCPMinSize+4:], ts)
		tcp[16], tcp[17] = 0, 0
		be.PutUint16(tcp[16:], hdr.TransportChecksum(hdr.ProtoTCP, ipB, ipA, tcp))
		before := r.e.Counters().TxSegments
		r.e.Input(0, ip, tcp)
		if r.e.Counters().TxSegments == before {
			t.Fatal("no segment sent")
		}
		ts++
	}
	for i := 0; i < 100; i++ {
		step()
	}
	if n := testing.AllocsPerRun(2000, step); n != 0 {
		t.Fatalf("%v allocations per ACK + pull + send", n)
	}
	// Timers: retransmission from the buffer.
	tick := func() {
		r.now = r.e.NextDeadline()
		r.e.Tick(r.now)
	}
	if n := testing.AllocsPerRun(5, tick); n != 0 {
		t.Fatalf("%v allocations per retransmission timeout", n)
	}
}

// FuzzInputULP is FuzzInput on a ULP connection: records in flight, bytes
// held for a ULP that takes little, arbitrary segments, then the timers.
func FuzzInputULP(f *testing.F) {
	seedRig := newRig(f, defaultRigOpts())
	add := func(p pseg, fixup bool) {
		_, tcp := seedRig.build(p)
		f.Add(tcp, fixup)
	}
	add(pseg{seq: 5300, ack: 1000, flags: hdr.TCPFlagACK, wnd: 100, payload: []byte("data")}, true)
	add(pseg{seq: 5300, ack: 2400, flags: hdr.TCPFlagACK | hdr.TCPFlagFIN | hdr.TCPFlagPSH, wnd: 100, payload: []byte("fin")}, true)
	add(pseg{seq: 5300, flags: hdr.TCPFlagRST}, true)
	add(pseg{seq: 5300, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0, payload: make([]byte, 1500)}, true)
	add(pseg{seq: 5300, ack: 1700, flags: hdr.TCPFlagACK, wnd: 7, sack: []sackBlock{{2400, 3100}, {3800, 4500}}}, true)
	add(pseg{seq: 5300, ack: 1350, flags: hdr.TCPFlagACK, wnd: 0xFFFF}, true)
	add(pseg{seq: 5300, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF}, true)

	f.Fuzz(func(t *testing.T, tcp []byte, fixup bool) {
		o := defaultRigOpts()
		o.cfg.OOOPoolBytes = 64 << 10
		o.cfg.OOOLimit = 16 << 10
		r := quietRig(t, o)
		r.h.ulp = true
		u := &recULP{size: 350, fill: 40, pat: pattern(350, 1), take: 100}
		if st := r.e.AttachULP(0, u, 8<<10); st != rings.StatusOK {
			t.Fatal(st)
		}
		r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(300, 1)})
		r.in(pseg{seq: 5000 + 2000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF, payload: pattern(500, 1)})
		checkInvariants(t, r.e)

		if len(tcp) >= 4 {
			be.PutUint16(tcp[0:], portB)
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
		checkInvariants(t, r.e)
		r.advance(2e9)
		u.take = 1 << 20
		r.e.ULPKick(0)
		r.e.Input(0, ip, tcp)
		checkInvariants(t, r.e)
		r.advance(70e9)
		checkInvariants(t, r.e)
	})
}
