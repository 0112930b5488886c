package tcpstack

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// fallbackPattern is byte i of the stream the peer sends in the fallback
// tests: every byte names its position, so a lost, repeated or reordered
// byte shows.
func fallbackPattern(from, n int) []byte {
	p := make([]byte, n)
	for i := range p {
		p[i] = byte((from + i) * 7 / 3)
	}
	return p
}

// fallbackCase is one way a delegation can fail, at one step of it.
type fallbackCase struct {
	name string
	// rule is the command gate's (nil: none).
	rule func(rings.Command) gateVerdict
	// cfg is host A's offload configuration.
	cfg OffloadConfig
	// setup runs before the connection under test is delegated (to fill
	// the table, for one).
	setup func(t *testing.T, a, b *Host)
	// held: the rule holds the OFFLOAD; the test sends data while it is
	// held, then answers it with status.
	held   bool
	status rings.Status
	// busySend: host A streams this many bytes to the peer from before
	// the delegation on, so data is always in flight (the quiesce step
	// cannot finish); the peer reads and checks them concurrently.
	busySend int
}

func fallbackCases() []fallbackCase {
	answer := func(st rings.Status) func(rings.Command) gateVerdict {
		return func(c rings.Command) gateVerdict {
			if c.Opcode == rings.OpOffload {
				return gateVerdict{status: st}
			}
			return gateVerdict{}
		}
	}
	return []fallbackCase{
		// Step: the free-index check. Another delegated connection has
		// the only index.
		{name: "table full", cfg: OffloadConfig{MaxConns: 1}, setup: func(t *testing.T, a, b *Host) {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, _ := dialAccepted(t, ctx, a.DialOffload, b, 6100, listenAll(t, b.Listen, 6100))
			t.Cleanup(func() { c.Close() })
		}},
		// Step: the OFFLOAD's answer, at once: the device refuses for
		// lack of resources, for a state it does not take, for an index
		// or tuple it already has.
		{name: "refused NO_RESOURCES", rule: answer(rings.StatusNoResources)},
		{name: "refused BAD_PARAM", rule: answer(rings.StatusBadParam)},
		{name: "refused BAD_STATE", rule: answer(rings.StatusBadState)},
		{name: "refused BAD_CONN", rule: answer(rings.StatusBadConn)},
		// Step: the OFFLOAD's answer after a while, the flow frozen
		// meanwhile (the peer's bytes sent then are dropped by the
		// driver and must be retransmitted to netstack after).
		{name: "refused late", rule: holdFirst(rings.OpOffload), held: true, status: rings.StatusNoResources},
		// Step: the quiesce (nothing may be unacknowledged): our side
		// keeps data in flight past QuiesceTimeout.
		{name: "data in flight", cfg: OffloadConfig{QuiesceTimeout: time.Millisecond}, busySend: 8 << 20},
	}
}

// TestFallbackLosesNothing forces each way a delegation can fail, at each
// step of delegation, with the peer's data arriving before the delegation
// (netstack holds it unread), while the OFFLOAD is in flight, and after the
// fallback; every byte must be readable from the connection that stays on
// netstack, in order, and the connection must still carry data both ways.
func TestFallbackLosesNothing(t *testing.T) {
	for _, fc := range fallbackCases() {
		t.Run(fc.name, func(t *testing.T) {
			a, b, g := gateHosts(t, fc.rule, nil)
			if fc.cfg.CommandTimeout == 0 {
				fc.cfg.CommandTimeout = time.Minute
			}
			if err := a.Offload(fc.cfg); err != nil {
				t.Fatal(err)
			}
			if fc.setup != nil {
				fc.setup(t, a, b)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			nc, peer := dialAccepted(t, ctx, a.DialTracked, b, 6001, listenAll(t, b.Listen, 6001))
			defer nc.Close()
			// Our own stream, if the case has one: written from before
			// the delegation to after the fallback, checked by the peer.
			ours := make(chan error, 1)
			if fc.busySend > 0 {
				go func() {
					buf := make([]byte, 64<<10)
					for at := 0; at < fc.busySend; at += len(buf) {
						copy(buf, fallbackPattern(at, len(buf)))
						if _, err := nc.Write(buf); err != nil {
							ours <- err
							return
						}
					}
					ours <- nil
				}()
			}
			theirs := make(chan error, 1)
			// The peer reads our stream only once the delegation has
			// failed: until then our data stays in flight (unacknowledged,
			// or unsent behind the peer's closed window) however the
			// goroutines run. (Reading at once, the peer could catch up
			// between two of our writes, and the quiesce find nothing in
			// flight.)
			delegated := make(chan struct{})
			if fc.busySend > 0 {
				go func() {
					<-delegated
					got := make([]byte, fc.busySend)
					_ = peer.SetReadDeadline(time.Now().Add(30 * time.Second))
					if _, err := io.ReadFull(peer, got); err != nil {
						theirs <- err
						return
					}
					if string(got) != string(fallbackPattern(0, fc.busySend)) {
						theirs <- errors.New("the peer received our stream altered")
						return
					}
					theirs <- nil
				}()
				// The peer's window closed: our data stays in flight.
				testutil.WaitFor(t, "our data in flight", func() bool {
					fi, _ := a.Driver.flows.snapshot(nc.key)
					return fi.peerWnd == 0 && nc.written.Load() > uint64(fi.sndNxt-fi.iss-1)
				})
			} else {
				theirs <- nil
				ours <- nil
			}
			sent := 0
			send := func(n int) {
				t.Helper()
				if _, err := peer.Write(fallbackPattern(sent, n)); err != nil {
					t.Fatal(err)
				}
				sent += n
			}
			// Before: bytes netstack receives and nobody reads (some
			// read, some not: the delegation must account for both).
			send(3000)
			got := make([]byte, 0, 1<<20)
			buf := make([]byte, 1000)
			_ = nc.SetReadDeadline(time.Now().Add(10 * time.Second))
			k, err := io.ReadFull(nc, buf)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, buf[:k]...)
			testutil.WaitFor(t, "netstack holding the bytes", func() bool {
				fi, _ := a.Driver.flows.snapshot(nc.key)
				return int(fi.rcvNxt-fi.irs-1) == sent
			})
			res := make(chan error, 1)
			go func() {
				c, err := a.Delegate(nc)
				if c != nil {
					c.Close()
					err = errors.New("delegated: the test wanted a fallback")
				}
				res <- err
			}()
			if fc.held {
				h := heldCommand(t, g)
				// During: the flow is frozen; these bytes reach
				// netstack only as the peer's retransmission.
				send(5000)
				g.release(h, fc.status)
			}
			err = <-res
			close(delegated)
			if !errors.Is(err, ErrNotDelegated) {
				t.Fatalf("Delegate: %v, want a fallback (ErrNotDelegated)", err)
			}
			t.Logf("fallback: %v", err)
			// After.
			send(20000)
			_ = nc.SetReadDeadline(time.Now().Add(15 * time.Second))
			for len(got) < sent {
				k, err := nc.Read(buf)
				got = append(got, buf[:k]...)
				if err != nil {
					t.Fatalf("after %d of %d bytes: %v", len(got), sent, err)
				}
			}
			want := fallbackPattern(0, sent)
			for i := range got {
				if got[i] != want[i] {
					t.Fatalf("byte %d of %d is %#x, want %#x", i, sent, got[i], want[i])
				}
			}
			if len(got) != sent {
				t.Fatalf("%d bytes read, %d sent", len(got), sent)
			}
			if err := <-ours; err != nil {
				t.Fatalf("our stream: %v", err)
			}
			if err := <-theirs; err != nil {
				t.Fatalf("our stream at the peer: %v", err)
			}
			// The connection still works both ways, on netstack.
			transfer(t, nc, peer, 64<<10)
			transfer(t, peer, nc, 64<<10)
			if fi, ok := a.Driver.flows.snapshot(nc.key); !ok || fi.frozen {
				t.Fatalf("flow after the fallback: tracked %v frozen %v", ok, fi.frozen)
			}
			if u := a.OffloadUsage(); u.Quarantined != 0 || u.Pool.InUse != 0 {
				t.Fatalf("usage after the fallback: %+v", u)
			}
		})
	}
}

// TestListenerFallbackLosesNothing: the same through an OffloadListener,
// whose accepted connection falls back to netstack: the bytes the client
// sent before the accept (netstack holds them) come first.
func TestListenerFallbackLosesNothing(t *testing.T) {
	var refused atomic.Int32
	rule := func(c rings.Command) gateVerdict {
		if c.Opcode == rings.OpOffload {
			refused.Add(1)
			return gateVerdict{status: rings.StatusNoResources}
		}
		return gateVerdict{}
	}
	a, b, _ := gateHosts(t, rule, nil)
	l, err := a.ListenOffload(6002)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	release := l.hold() // delegated once netstack holds the bytes
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	peer, err := b.Dial(ctx, netip.AddrPortFrom(a.Addr(), 6002))
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := peer.Write(fallbackPattern(0, 7000)); err != nil {
		t.Fatal(err)
	}
	release()
	c, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, ok := c.(*DelegatedConn); ok || refused.Load() != 1 || l.Fallbacks() != 1 {
		t.Fatalf("accepted %T, %d OFFLOADs refused, %d fallbacks", c, refused.Load(), l.Fallbacks())
	}
	if _, err := peer.Write(fallbackPattern(7000, 9000)); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 16000)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(fallbackPattern(0, 16000)) {
		t.Fatal("the fallback connection's bytes differ from what the client sent")
	}
	transfer(t, c, peer, 32<<10)
}

// TestDelegateHeldFramesGoToUnit: the peer's bytes that arrive while the
// OFFLOAD is in flight (the flow frozen) are held by the driver, not
// dropped, and go to the unit behind the OFFLOAD (RX_INJECT): the
// delegated connection reads them in order without the peer retransmitting.
func TestDelegateHeldFramesGoToUnit(t *testing.T) {
	var injects atomic.Int32
	var held atomic.Bool
	rule := func(c rings.Command) gateVerdict {
		if c.Opcode == rings.OpRxInject {
			injects.Add(1)
		}
		if c.Opcode == rings.OpOffload && held.CompareAndSwap(false, true) {
			return gateVerdict{hold: true}
		}
		return gateVerdict{}
	}
	a, b, g := gateHosts(t, rule, nil)
	if err := a.Offload(OffloadConfig{CommandTimeout: time.Minute}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, peer := dialAccepted(t, ctx, a.DialTracked, b, 6003, listenAll(t, b.Listen, 6003))
	if _, err := peer.Write(fallbackPattern(0, 1000)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "netstack holding the bytes", func() bool {
		fi, _ := a.Driver.flows.snapshot(nc.key)
		return fi.rcvNxt-fi.irs-1 == 1000
	})
	res := make(chan *DelegatedConn, 1)
	go func() {
		c, err := a.Delegate(nc)
		if err != nil {
			t.Error(err)
		}
		res <- c
	}()
	h := heldCommand(t, g)
	before := a.Driver.flows.heldIn.Load()
	if _, err := peer.Write(fallbackPattern(1000, 3000)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "the driver holding the peer's frames", func() bool { return a.Driver.flows.heldIn.Load() > before })
	g.release(h, rings.StatusOK)
	c := <-res
	if c == nil {
		t.FailNow()
	}
	defer c.Close()
	got := make([]byte, 4000)
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(c, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(fallbackPattern(0, 4000)) {
		t.Fatal("bytes differ")
	}
	// The RX_INJECT goes out without waiting once the delegation returns,
	// and the bytes may reach the reader first (the peer resent what was
	// held): wait for it rather than look once.
	testutil.WaitFor(t, "an RX_INJECT of the held frames", func() bool { return injects.Load() > 0 })
	transfer(t, peer, c, 64<<10)
	transfer(t, c, peer, 64<<10)
}

// TestDelegateWaitsForUnsentData: bytes the application wrote that netstack
// has not sent yet (the peer's window is closed) are not "quiet": the
// delegation waits for them and, with the window still closed at
// QuiesceTimeout, falls back; the peer then reads every byte. (Aborting the
// endpoint with them queued would lose them.)
func TestDelegateWaitsForUnsentData(t *testing.T) {
	a, b, _ := gateHosts(t, nil, nil)
	if err := a.Offload(OffloadConfig{QuiesceTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	nc, peer := dialAccepted(t, ctx, a.DialTracked, b, 6004, listenAll(t, b.Listen, 6004))
	defer nc.Close()
	const total = 8 << 20 // more than the peer's receive buffer and our send buffer
	wrote := make(chan error, 1)
	go func() {
		_, err := nc.Write(fallbackPattern(0, total))
		wrote <- err
	}()
	// The peer reads nothing: its window closes with our bytes queued.
	testutil.WaitFor(t, "unsent bytes queued behind a closed window", func() bool {
		fi, _ := a.Driver.flows.snapshot(nc.key)
		return fi.sndUna == fi.sndNxt && fi.peerWnd == 0
	})
	c, err := a.Delegate(nc)
	if c != nil || !errors.Is(err, ErrNotDelegated) {
		t.Fatalf("Delegate: %v, %v; want a fallback", c, err)
	}
	got := make([]byte, total)
	_ = peer.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	if string(got) != string(fallbackPattern(0, total)) {
		t.Fatal("the peer received our stream altered")
	}
	if err := <-wrote; err != nil {
		t.Fatal(err)
	}
}
