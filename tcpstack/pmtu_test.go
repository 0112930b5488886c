package tcpstack

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/netip"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
)

// pmtuLab is two hosts on a wire: A, whose connections the ICMPs quote,
// and B, their peer, which can stop acknowledging (its flow frozen, as a
// delegation freezes one: its frames are held, its ACKs dropped) so that
// what A sent stays in flight while the ICMP arrives.
type pmtuLab struct {
	t    *testing.T
	a, b *Host
}

var macA, macB = [6]byte{2, 0, 0, 0, 0, 1}, [6]byte{2, 0, 0, 0, 0, 2}

func newPMTULab(t *testing.T) *pmtuLab {
	a, b, _ := gateHosts(t, nil, nil)
	if err := a.Offload(OffloadConfig{CommandTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	return &pmtuLab{t: t, a: a, b: b}
}

// key is A's name of the connection whose peer end is bConn.
func (l *pmtuLab) key(bConn net.Conn) hdr.Tuple {
	ra := bConn.RemoteAddr().(*net.TCPAddr)
	return hdr.Tuple{LocalIP: l.a.Addr(), RemoteIP: l.b.Addr(), LocalPort: uint16(ra.Port), RemotePort: uint16(bConn.LocalAddr().(*net.TCPAddr).Port)}
}

// stall makes B stop acknowledging connection k (A's name of it) and
// returns what resumes it: B then gets what it held, in order.
func (l *pmtuLab) stall(k hdr.Tuple) (resume func()) {
	bk := hdr.Tuple{LocalIP: k.RemoteIP, RemoteIP: k.LocalIP, LocalPort: k.RemotePort, RemotePort: k.LocalPort}
	t := &l.b.Driver.flows
	t.addNew(bk)
	t.freeze(bk, true)
	return func() {
		fi, _ := t.freeze(bk, false)
		t.remove(bk)
		l.b.Driver.redeliver(fi.held)
	}
}

// held returns the segments B holds on k, in arrival order.
func (l *pmtuLab) held(k hdr.Tuple) []tcpSeg {
	bk := hdr.Tuple{LocalIP: k.RemoteIP, RemoteIP: k.LocalIP, LocalPort: k.RemotePort, RemotePort: k.LocalPort}
	fi, _ := l.b.Driver.flows.snapshot(bk)
	var segs []tcpSeg
	for _, f := range fi.held {
		var s tcpSeg
		if parseTCPFrame(f, &s) {
			segs = append(segs, s)
		}
	}
	return segs
}

// resentFrom returns the segments held on k from the first one that starts
// at sq with n bytes on (nil: none yet).
func (l *pmtuLab) resentFrom(k hdr.Tuple, sq uint32, n int) []tcpSeg {
	h := l.held(k)
	for i, s := range h {
		if s.seq == sq && s.payload == n {
			return h[i:]
		}
	}
	return nil
}

// icmp hands A an ICMP "fragmentation needed" from B quoting a segment of
// k at sequence number sq, reporting mtu; corrupt spoils its checksum.
func (l *pmtuLab) icmp(k hdr.Tuple, sq uint32, mtu uint16, corrupt bool) {
	seg := testutil.TCPFrame(hdr.TCPFrameFields{Src: k.LocalIP.As4(), Dst: k.RemoteIP.As4(), DontFragment: true,
		TCP:     hdr.TCPFields{SrcPort: k.LocalPort, DstPort: k.RemotePort, Seq: sq, Flags: hdr.TCPFlagACK, Window: 1000},
		Payload: make([]byte, 1400)})
	f := testutil.ICMPFragNeededFrame(macB, macA, l.b.Addr().As4(), l.a.Addr().As4(), seg[hdr.EthernetSize:], mtu)
	if corrupt {
		f[len(f)-1] ^= 0xFF
	}
	l.a.Driver.redeliver([][]byte{f}) // off the interrupt goroutine: never through its GRO
}

// netstackState is A's netstack endpoint state for k.
func (l *pmtuLab) netstackState(k hdr.Tuple) epState {
	l.t.Helper()
	ep := l.a.S.FindTransportEndpoint(ipv4.ProtocolNumber, tcp.ProtocolNumber, stack.TransportEndpointID{
		LocalPort: k.LocalPort, LocalAddress: tcpip.AddrFrom4(k.LocalIP.As4()),
		RemotePort: k.RemotePort, RemoteAddress: tcpip.AddrFrom4(k.RemoteIP.As4())}, nicID)
	st, err := readEndpointState(ep.(tcpip.Endpoint), l.a.S.Clock().NowMonotonic())
	if err != nil {
		l.t.Fatal(err)
	}
	return st
}

func (l *pmtuLab) wantStats(what string, want PathMTUStats) {
	l.t.Helper()
	testutil.Eventually(l.t, what, 10*time.Second, func() bool { return l.a.PathMTUStats() == want })
}

// pmtuStream writes n patterned bytes on w and checks r reads them intact.
func pmtuStream(t *testing.T, w io.Writer, r io.Reader, n int) {
	t.Helper()
	want := fallbackPattern(0, n)
	done := make(chan error, 1)
	go func() { _, err := w.Write(want); done <- err }()
	got := make([]byte, n)
	if c, ok := r.(net.Conn); ok {
		_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	}
	if _, err := io.ReadFull(r, got); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("stream of %d bytes: %v (intact %v)", n, err, bytes.Equal(got, want))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// pmtuConns opens two connections from A to B's port with dial: the one
// the ICMPs quote and another, which must not notice them.
func pmtuConns[C net.Conn](t *testing.T, l *pmtuLab, dial func(context.Context, netip.AddrPort) (C, error), port uint16) (ours C, theirs net.Conn, other C, otherPeer net.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	acc := listenAll(t, l.b.Listen, port)
	ours, theirs = dialAccepted(t, ctx, dial, l.b, port, acc)
	other, otherPeer = dialAccepted(t, ctx, dial, l.b, port, acc)
	t.Cleanup(func() { ours.Close(); other.Close() })
	return ours, theirs, other, otherPeer
}

// TestPathMTUNetstack: an ICMP quoting a netstack connection is checked
// against netstack's own state. Forged, stale, malformed and unknown ones
// change nothing; a valid one lowers the MSS; one reporting MTU 68 lowers
// it only to the floor's, and the connection carries on (it used to stall,
// sending nothing while the peer backed off).
func TestPathMTUNetstack(t *testing.T) {
	l := newPMTULab(t)
	ours, theirs, other, otherPeer := pmtuConns(t, l, l.a.Dial, 7100)
	k, ko := l.key(theirs), l.key(otherPeer)
	full := l.netstackState(k).maxPayload

	resume := l.stall(k)
	if _, err := ours.Write(make([]byte, 16<<10)); err != nil {
		t.Fatal(err)
	}
	var st epState
	testutil.Eventually(t, "8 KiB in flight", 10*time.Second, func() bool {
		st = l.netstackState(k)
		return st.sndNxt-st.sndUna >= 8<<10
	})
	// The bad ones: nothing changes, each counted.
	l.icmp(k, st.sndNxt+100_000, 1000, false) // forged: never sent
	l.icmp(k, st.sndUna-1, 1000, false)       // stale: acknowledged
	l.icmp(k, st.sndUna, 1000, true)          // bad checksum
	l.icmp(k, st.sndUna, 60, false)           // below any IPv4 MTU
	nk := k
	nk.RemotePort++
	l.icmp(nk, st.sndUna, 1000, false) // no such connection
	l.wantStats("bad ICMPs counted", PathMTUStats{Stale: 2, Malformed: 2, NoConn: 1})
	if p := l.netstackState(k).maxPayload; p != full {
		t.Fatalf("max payload %d after bad ICMPs, want %d", p, full)
	}

	// Valid: quoting the second segment in flight.
	l.icmp(k, st.sndUna+uint32(full), 1000, false)
	l.wantStats("a valid ICMP applied", PathMTUStats{Applied: 1, Stale: 2, Malformed: 2, NoConn: 1})
	room := 1460 - full      // netstack's option room: what it takes off the peer's MSS
	want := 1000 - 40 - room // the MTU less the headers and that room
	testutil.Eventually(t, "the MSS lowered", 10*time.Second, func() bool { return l.netstackState(k).maxPayload == want })
	// Tiny: to the floor's, not below.
	l.icmp(k, st.sndUna, 68, false)
	l.wantStats("a tiny ICMP floored", PathMTUStats{Applied: 2, Floored: 1, Stale: 2, Malformed: 2, NoConn: 1})
	floor := PathMTUFloor - 40 - room
	testutil.Eventually(t, "the MSS at the floor", 10*time.Second, func() bool { return l.netstackState(k).maxPayload == floor })
	resume()
	first := make([]byte, 16<<10)
	_ = theirs.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(theirs, first); err != nil {
		t.Fatalf("what was in flight: %v", err)
	}

	// The connection carries on, in segments of the floor's size, both
	// ways; the other connection never noticed.
	pmtuStream(t, ours, theirs, 256<<10)
	pmtuStream(t, theirs, ours, 64<<10)
	if p := l.netstackState(ko).maxPayload; p != full {
		t.Fatalf("the other connection's max payload %d, want %d", p, full)
	}
	pmtuStream(t, other, otherPeer, 64<<10)
}

// TestPathMTUDelegated: the same on a delegated connection, where the
// engine judges the quote (PATH_MTU) and resends what was in flight in
// the new size.
func TestPathMTUDelegated(t *testing.T) {
	l := newPMTULab(t)
	ours, theirs, other, otherPeer := pmtuConns(t, l, l.a.DialOffload, 7200)
	k := l.key(theirs)
	if l.a.Driver.flows.delegatedConn(k) != ours {
		t.Fatal("the delegated connection is not bound to its flow")
	}
	una := ours.sndISS // nothing sent since the delegation

	resume := l.stall(k)
	const n = 16 << 10
	if _, err := ours.Write(fallbackPattern(0, n)); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, "the first flight held by the peer", 10*time.Second, func() bool { return len(l.held(k)) >= 10 })
	// One at a time: each PATH_MTU is answered before the next ICMP.
	l.icmp(k, una+n+100_000, 1000, false) // forged
	l.wantStats("a forged ICMP counted", PathMTUStats{Stale: 1})
	l.icmp(k, una-1, 1000, false) // stale
	l.wantStats("a stale ICMP counted", PathMTUStats{Stale: 2})
	l.icmp(k, una, 1000, true) // bad checksum
	l.wantStats("bad ICMPs counted", PathMTUStats{Stale: 2, Malformed: 1})
	l.icmp(k, una+1448, 1000, false)
	l.wantStats("a valid ICMP applied", PathMTUStats{Applied: 1, Stale: 2, Malformed: 1})
	// What was in flight comes again, in segments of at most 1000-40-12.
	// What was in flight comes again from SND.UNA, in segments of at
	// most 1000-40-12 (a tail loss probe may have resent a full one
	// before).
	testutil.Eventually(t, "the resend held by the peer", 10*time.Second, func() bool { return l.resentFrom(k, una, 948) != nil })
	for _, s := range l.resentFrom(k, una, 948) {
		if s.payload > 948 {
			t.Fatalf("segment at %d carries %d bytes after the path MTU dropped to 1000", s.seq, s.payload)
		}
	}
	l.icmp(k, una, 68, false)
	l.wantStats("a tiny ICMP floored", PathMTUStats{Applied: 2, Floored: 1, Stale: 2, Malformed: 1})
	// A flood of forged ones: each dropped, by the engine or (while one
	// is with it) by the host, all counted; nothing else moves.
	const flood = 500
	for i := range flood {
		l.icmp(k, una+n+uint32(i)*1000, 600, false)
	}
	testutil.Eventually(t, "the flood counted", 10*time.Second, func() bool {
		s := l.a.PathMTUStats()
		return s.Stale+s.Busy == 2+flood
	})
	if s := l.a.PathMTUStats(); s.Applied != 2 || s.Errors != 0 {
		t.Fatalf("after the flood: %+v", s)
	} else {
		t.Logf("after a flood of %d forged ICMPs: %+v", flood, s)
	}
	resume()

	got := make([]byte, n)
	_ = theirs.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(theirs, got); err != nil || !bytes.Equal(got, fallbackPattern(0, n)) {
		t.Fatalf("the stream across the MSS change: %v", err)
	}
	pmtuStream(t, ours, theirs, 256<<10)
	pmtuStream(t, theirs, ours, 64<<10)
	pmtuStream(t, other, otherPeer, 64<<10)
	if s := l.a.PathMTUStats(); s.Errors != 0 || s.NoConn != 0 {
		t.Fatalf("%+v", s)
	}
}
