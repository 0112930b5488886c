package delegation

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/emunic/emunic/nic/hdr"
)

// tcpContext is the delegation test context, after gVisor's
// transport/tcp/testing/context: one delegated connection (the engine, its
// fake host rings and the application behind them, from rig) and a peer
// that sends segments into the engine as the device does (the tuple the
// network layer read, then the TCP segment) and checks each frame that
// comes out with composable checkers. A new test starts here; the older
// ones use rig directly.
type tcpContext struct {
	*rig
}

// newContext starts a context with the rig's defaults, changed by opts,
// and the host application's buffers posted.
func newContext(t testing.TB, opts ...func(*rigOpts)) *tcpContext {
	o := defaultRigOpts()
	for _, f := range opts {
		f(&o)
	}
	c := &tcpContext{newRig(t, o)}
	c.deliver = c.send // rig.data goes through the tuple input too
	c.h.start()
	return c
}

// send delivers p through the engine's tuple input, as the device's
// receive path does, then lets the host handle its notifications.
func (c *tcpContext) send(p pseg) {
	ip, tcp := c.build(p)
	t := hdr.IPv4(ip).RxTuple(hdr.TCP(tcp))
	idx, ok := c.e.Lookup(&t)
	if !ok {
		c.t.Fatalf("segment to %v matches no connection", t)
	}
	c.e.InputSegment(idx, &t, tcp, 0)
	c.h.drain()
}

// expect takes the one frame the engine sent and applies every check.
func (c *tcpContext) expect(what string, checks ...segCheck) outSeg {
	c.t.Helper()
	s := c.takeOne(what)
	for _, check := range checks {
		if err := check(&s); err != "" {
			c.t.Fatalf("%s: %s (flags %#x seq %d ack %d len %d)", what, err, s.flags, uint32(s.seq), uint32(s.ack), len(s.payload))
		}
	}
	return s
}

// segCheck checks one property of a frame the engine sent; it returns
// what is wrong, or "".
type segCheck func(*outSeg) string

var sprintf = fmt.Sprintf

// flags: exactly these TCP flags.
func flags(f uint8) segCheck {
	return func(s *outSeg) string {
		if s.flags != f {
			return sprintf("flags %#x, want %#x", s.flags, f)
		}
		return ""
	}
}

// seqNum: SEG.SEQ.
func seqNum(n uint32) segCheck {
	return func(s *outSeg) string {
		if uint32(s.seq) != n {
			return sprintf("seq %d, want %d", uint32(s.seq), n)
		}
		return ""
	}
}

// ackNum: SEG.ACK, with the ACK flag set.
func ackNum(n uint32) segCheck {
	return func(s *outSeg) string {
		if s.flags&hdr.TCPFlagACK == 0 || uint32(s.ack) != n {
			return sprintf("ack %d (flags %#x), want ACK %d", uint32(s.ack), s.flags, n)
		}
		return ""
	}
}

// payloadLen: the data bytes carried.
func payloadLen(n int) segCheck {
	return func(s *outSeg) string {
		if len(s.payload) != n {
			return sprintf("%d payload bytes, want %d", len(s.payload), n)
		}
		return ""
	}
}

// tsEcr: a timestamps option echoing v.
func tsEcr(v uint32) segCheck {
	return func(s *outSeg) string {
		if !s.hasTS || s.tsEcr != v {
			return sprintf("timestamps %v echo %d, want echo %d", s.hasTS, s.tsEcr, v)
		}
		return ""
	}
}

// TestInputSegmentTuple: the engine matches a segment by the tuple the
// network layer gives it, not by anything it reads from the frame itself:
// the right tuple is accepted, any other is a tuple mismatch, and the
// checksum is verified over the tuple's pseudo-header.
func TestInputSegmentTuple(t *testing.T) {
	c := newContext(t)
	c.data(pattern(1000, 3), hdr.TCPFlagPSH)
	if got := c.e.Counters().RxSegments; got != 1 {
		t.Fatalf("RxSegments %d after one segment", got)
	}
	ip, tcp := c.build(pseg{seq: c.peerSeq, ack: c.info().SndUna, flags: hdr.TCPFlagACK, wnd: 0xFFFF})
	tu := hdr.IPv4(ip).RxTuple(hdr.TCP(tcp))
	other := tu
	other.RemoteIP = netip.MustParseAddr("10.9.9.9")
	c.e.InputSegment(0, &other, tcp, RxTCPChecksumOK)
	if got := c.e.Counters().DropTupleMismatch; got != 1 {
		t.Fatalf("DropTupleMismatch %d, want 1", got)
	}
	other = tu
	other.LocalPort++
	c.e.InputSegment(0, &other, tcp, 0)
	if got := c.e.Counters().DropTupleMismatch; got != 2 {
		t.Fatalf("DropTupleMismatch %d, want 2", got)
	}
	tcp[len(tcp)-1] ^= 1 // the last option byte: the checksum no longer holds
	c.e.InputSegment(0, &tu, tcp, 0)
	if got := c.e.Counters().DropBadChecksum; got != 1 {
		t.Fatalf("DropBadChecksum %d, want 1", got)
	}
	c.expectNone("dropped segments")
}
