package tests

import (
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// spyPort wraps a port and keeps the last TCP frame written through it, so
// a test can forge segments that look like they came from that host.
type spyPort struct {
	port.Port
	mu   sync.Mutex
	last []byte
}

func (s *spyPort) WriteFrame(f []byte) error {
	if len(f) >= 14+20+20 && f[12] == 0x08 && f[13] == 0 && f[14+9] == 6 {
		s.mu.Lock()
		s.last = append(s.last[:0], f...)
		s.mu.Unlock()
	}
	return s.Port.WriteFrame(f)
}

func (s *spyPort) lastTCP() []byte {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]byte(nil), s.last...)
}

// edgeHosts makes two hosts; A's port is spied. Engine timers are short so
// a vanished peer is detected in seconds.
func edgeHosts(t *testing.T) (a, b *tcpstack.Host, spy *spyPort, wa *port.WirePort) {
	t.Helper()
	timers := func(c *board.HostConfig) {
		c.Device.Engine = delegation.Config{MinRTO: 50e6, InitialRTO: 200e6, MaxRetries: 5}
	}
	r := hostrig.New(t, hostrig.Config{HostA: timers, HostB: timers,
		WrapA: func(p *port.WirePort) (port.Port, error) { spy = &spyPort{Port: p}; return spy, nil }})
	return r.A, r.B, spy, r.PortA
}

// waitAcked waits until the engine has everything c sent acknowledged
// (QUERY_CONN's SND.UNA = SND.NXT).
func waitAcked(t *testing.T, c net.Conn) {
	t.Helper()
	dc := c.(*tcpstack.DelegatedConn)
	testutil.WaitFor(t, "the peer's ACK of everything sent", func() bool {
		in, err := dc.Info()
		return err == nil && in.SndUna == in.SndNxt
	})
}

func readAllTimeout(t *testing.T, c net.Conn, d time.Duration) ([]byte, error) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	defer c.SetReadDeadline(time.Time{})
	return io.ReadAll(c)
}

func TestDelegatedHalfClose(t *testing.T) {
	a, b, _, _ := edgeHosts(t)
	ca, cb := delegatedPair(t, a, b, 6101)
	da := ca.(*tcpstack.DelegatedConn)
	db := cb.(*tcpstack.DelegatedConn)

	// A → B half-close: B sees EOF after A's data, and B can still send.
	if _, err := da.Write([]byte("request")); err != nil {
		t.Fatal(err)
	}
	if err := da.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := readAllTimeout(t, db, 5*time.Second)
	if err != nil || string(got) != "request" {
		t.Fatalf("B read %q, %v; want the request then EOF", got, err)
	}
	if _, err := da.Write([]byte("x")); err == nil {
		t.Fatal("write after CloseWrite succeeded")
	}
	reply := make([]byte, 3<<20)
	for i := range reply {
		reply[i] = byte(i * 7)
	}
	go func() {
		db.Write(reply)
		db.CloseWrite() // and now B → A
	}()
	got, err = readAllTimeout(t, da, 10*time.Second)
	if err != nil || len(got) != len(reply) || string(got) != string(reply) {
		t.Fatalf("A read %d bytes (%v) after its half-close, want %d", len(got), err, len(reply))
	}
	da.Close()
	db.Close()
}

func TestDelegatedPeerReset(t *testing.T) {
	a, b, _, _ := edgeHosts(t)
	ca, cb := delegatedPair(t, a, b, 6102)
	if _, err := ca.Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(cb, buf); err != nil {
		t.Fatal(err)
	}
	if err := cb.(*tcpstack.DelegatedConn).Abort(); err != nil {
		t.Fatal(err)
	}
	ca.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, err := ca.Read(buf)
	if !errors.Is(err, tcpstack.ErrConnReset) {
		t.Fatalf("read after the peer's RST: %v, want ErrConnReset", err)
	}
	if _, err := ca.Write([]byte("more")); err == nil {
		t.Fatal("write after RST succeeded")
	}
}

func TestDelegatedPeerVanishes(t *testing.T) {
	a, b, _, wa := edgeHosts(t)
	ca, cb := delegatedPair(t, a, b, 6103)
	if _, err := ca.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(cb, make([]byte, 4)); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, ca) // B's ACK of the ping gives A's engine an RTT sample
	// Cut the cable both ways: B is gone without a word.
	cut := port.Impairments{LossPercent: 100}
	if err := wa.SetTxImpairments(cut); err != nil {
		t.Fatal(err)
	}
	if err := wa.Peer().SetTxImpairments(cut); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if _, err := ca.Write(make([]byte, 64<<10)); err != nil {
		t.Fatal(err)
	}
	ca.SetReadDeadline(time.Now().Add(30 * time.Second))
	_, err := ca.Read(make([]byte, 10))
	el := time.Since(start)
	if !errors.Is(err, tcpstack.ErrConnTimeout) {
		t.Fatalf("after the peer vanished: %v after %v, want ErrConnTimeout", err, el)
	}
	// The RTO starts near MinRTO (50 ms) and doubles over 5 retries: a
	// few seconds; the bound leaves room for a loaded machine.
	if el > 15*time.Second {
		t.Fatalf("timeout took %v", el)
	}
	// Counters are the unit's snapshot at its next idle point.
	var c tcpstack.EngineCounters
	testutil.WaitFor(t, "the engine's timeout in its counters", func() bool {
		c = engineOf(t, a)
		return c.Timeouts != 0
	})
	if c.RTOExpired == 0 {
		t.Fatalf("engine counters %+v", c)
	}
	t.Logf("error after %v (%d RTO expirations)", el, c.RTOExpired)
}

// forge rewrites the spied frame into a segment with the given sequence
// offset, flags and payload, with valid checksums.
func forge(last []byte, seqDelta uint32, flags byte, payload []byte) []byte {
	ip := hdr.IPv4(last[hdr.EthernetSize:])
	tcpOff := hdr.EthernetSize + ip.HeaderLen()
	f := append([]byte(nil), last[:tcpOff+hdr.TCP(last[tcpOff:]).HeaderLen()]...)
	f = append(f, payload...)
	ip = hdr.IPv4(f[hdr.EthernetSize:])
	ip.SetTotalLen(uint16(len(ip)))
	ip.UpdateChecksum()
	tcp := hdr.TCP(f[tcpOff:])
	tcp.SetSeq(tcp.Seq() + seqDelta)
	tcp.SetFlags(flags)
	tcp.UpdateChecksum(ip.Src(), ip.Dst())
	return f
}

// TestDelegatedIgnoresBlindAttacks sends B forged segments that look like
// A's: an RST inside the window but not at RCV.NXT (RFC 5961: challenge
// ACK, ignored), an RST far outside the window, and data far outside the
// window. The connection survives and the stream is intact.
func TestDelegatedIgnoresBlindAttacks(t *testing.T) {
	a, b, spy, wa := edgeHosts(t)
	ca, cb := delegatedPair(t, a, b, 6104)
	if _, err := ca.Write([]byte("first")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 5)
	if _, err := io.ReadFull(cb, buf); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, ca) // A sends nothing more, so the spied frame stays current
	last := spy.lastTCP()
	const tcpRST, tcpACK, tcpPSH = 0x04, 0x10, 0x08
	before := engineOf(t, b)
	for _, f := range [][]byte{
		forge(last, 1000, tcpRST, nil),
		forge(last, 1<<30, tcpRST, nil),
		forge(last, 1<<30, tcpACK|tcpPSH, []byte("evil")),
		forge(last, 0x8000_0000, tcpACK|tcpPSH, []byte("evil")),
	} {
		if err := wa.WriteFrame(f); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(2 * time.Second)
	for {
		c := engineOf(t, b)
		if c.ChallengeAcks > before.ChallengeAcks && c.RstOutOfWindow > before.RstOutOfWindow &&
			c.DropOutOfWindow >= before.DropOutOfWindow+2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("counters before %+v after %+v", before, c)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if c := engineOf(t, b); c.RstAccepted != before.RstAccepted {
		t.Fatal("a forged RST was accepted")
	}
	// The connection is alive and the stream has no forged bytes.
	if _, err := ca.Write([]byte("second")); err != nil {
		t.Fatal(err)
	}
	ca.(*tcpstack.DelegatedConn).CloseWrite()
	got, err := readAllTimeout(t, cb, 5*time.Second)
	if err != nil || string(got) != "second" {
		t.Fatalf("after forged segments B read %q, %v", got, err)
	}
}
