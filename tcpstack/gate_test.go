package tcpstack

import (
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// gateDevice is a real device (nic.Device) behind a command gate: the
// host's command ring is served by the gate, which forwards each command to
// the device on a ring of its own, unless the test's rule holds it back
// (the device "does not answer") or answers it with an error itself. Held
// commands are handed to the test, which later lets them through or fails
// them: the late answers of a device that was slow.
type gateDevice struct {
	*nic.Device
	mem  *rings.Arena
	rule func(rings.Command) gateVerdict
	held chan heldCmd // every command the rule held

	bell *rings.Bell // the gate's: host doorbell, device completions, test orders
	door fanout
	vec  rings.Vectors
	src  *rings.Ring     // the host's command ring
	dst  *rings.Producer // the device's
	ctl  chan gateOrder
	stop chan struct{}
	wg   sync.WaitGroup

	fwd      map[uint32]uint32 // host index -> device index, forwarded and unanswered
	holdDone map[uint32]bool   // forwarded with holdDone
}

type gateVerdict struct {
	hold     bool
	holdDone bool         // forward, but hold the device's write-back
	status   rings.Status // not OK: answer with it at once
}

type heldCmd struct {
	idx      uint32
	cmd      rings.Command
	executed bool // the device ran it (holdDone): release passes its write-back on
}

type gateOrder struct {
	idx      uint32
	status   rings.Status // OK: forward to the device; else answer with it
	executed bool
}

type fanout []rings.Doorbell

func (f fanout) Kick() {
	for _, d := range f {
		d.Kick()
	}
}

func (g *gateDevice) Doorbell() rings.Doorbell { return g.door }

// release lets a held command through to the device (status OK) or answers
// it with status.
func (g *gateDevice) release(h heldCmd, status rings.Status) {
	g.ctl <- gateOrder{idx: h.idx, status: status, executed: h.executed}
}

func (g *gateDevice) Start(rc rings.RingConfig, vec rings.Vectors) error {
	shadow, err := rings.AllocRing(g.mem, rc.Command.Count, rings.CommandEntrySize)
	if err != nil {
		return err
	}
	src, err := rings.NewConsumer(g.mem, rc.Command, 1, nil)
	if err != nil {
		return err
	}
	g.src = &src.Ring
	if g.dst, err = rings.NewProducer(g.mem, shadow, shadow.Count, g.Device.Doorbell()); err != nil {
		return err
	}
	g.vec = vec
	dev := rc
	dev.Command = shadow
	if err := g.Device.Start(dev, rings.Vectors{Notify: vec.Notify, TxSpace: vec.TxSpace, Command: g.bell}); err != nil {
		return err
	}
	g.wg.Add(1)
	go g.run(rc.Command.Count)
	return nil
}

func (g *gateDevice) Stop() error {
	close(g.stop)
	g.wg.Wait()
	return g.Device.Stop()
}

func (g *gateDevice) run(count uint32) {
	defer g.wg.Done()
	var next, head uint32 // next host index to look at; host CI
	done := map[uint32]bool{}
	// The host and the device kick the gate's bell whenever they
	// publish or release: said once and for all.
	setFlags := func() {
		// Consumer flags of the host's ring (the host kicks after a
		// publish) and producer flags of the device's (the device kicks
		// after a release).
		ringFlag(g.mem, g.src.Layout(), rings.OffConsumerFlags)
		g.dst.SetNeedWakeup(true)
	}
	setFlags()
	answer := func(i uint32, st rings.Status, result uint64) {
		e := g.src.Entry(i)
		rings.CommandEntry(e).SetWriteBack(st, result)
		ctlp := (*uint32)(unsafe.Pointer(&e[0]))
		ctl := atomic.LoadUint32(ctlp)&^(rings.CtlDone|rings.CtlDonePhase) | rings.CtlDone
		if g.src.Phase(i) != 0 {
			ctl |= rings.CtlDonePhase
		}
		atomic.StoreUint32(ctlp, ctl)
		done[i] = true
	}
	forward := func(i uint32, c rings.Command) {
		e := g.dst.Next()
		for e == nil {
			// The device's ring is as big as the host's: it has room
			// once the device has released what it answered.
			<-g.bell.C()
			e = g.dst.Next()
		}
		g.fwd[i] = g.dst.Tail()
		c.Encode(rings.CommandEntry(e))
		g.dst.Commit()
		g.dst.Publish()
	}
	for {
		for pi := g.src.ProducerIndex(); next != pi; next++ {
			var c rings.Command
			_ = c.Decode(rings.CommandEntry(g.src.Entry(next)))
			v := gateVerdict{}
			if g.rule != nil {
				v = g.rule(c)
			}
			switch {
			case v.hold:
				g.held <- heldCmd{idx: next, cmd: c}
			case v.holdDone:
				g.holdDone[next] = true
				forward(next, c)
			case v.status != rings.StatusOK:
				answer(next, v.status, 0)
			default:
				forward(next, c)
			}
		}
		for i, j := range g.fwd {
			if rings.IsDone(&g.dst.Ring, j) {
				e := rings.CommandEntry(g.dst.Entry(j))
				if g.holdDone[i] {
					var c rings.Command
					_ = c.Decode(e)
					g.held <- heldCmd{idx: i, cmd: c, executed: true}
				} else {
					answer(i, e.Status(), e.Result())
				}
				delete(g.fwd, i)
			}
		}
		moved := false
		for done[head] {
			delete(done, head)
			head++
			moved = true
		}
		if moved {
			ringStore(g.mem, g.src.Layout(), rings.OffConsumerIndex, head)
		}
		g.vec.Command.Kick() // the host re-reads: cheap, and never lost
		select {
		case <-g.bell.C():
		case o := <-g.ctl:
			var c rings.Command
			_ = c.Decode(rings.CommandEntry(g.src.Entry(o.idx)))
			if o.executed {
				// The device's write-back, held until now (the
				// test's order carries it).
				answer(o.idx, o.status, 0)
				delete(g.holdDone, o.idx)
			} else if o.status == rings.StatusOK {
				forward(o.idx, c)
			} else {
				answer(o.idx, o.status, 0)
			}
		case <-g.stop:
			return
		}
	}
}

func ringWord(mem *rings.Arena, l rings.Layout, off int) *uint32 {
	b, err := mem.Map(l.Base+rings.Addr(off), 4)
	if err != nil {
		panic(err)
	}
	return (*uint32)(unsafe.Pointer(&b[0]))
}

func ringFlag(mem *rings.Arena, l rings.Layout, off int) {
	atomic.StoreUint32(ringWord(mem, l, off), rings.FlagNeedWakeup)
}

func ringStore(mem *rings.Arena, l rings.Layout, off int, v uint32) {
	atomic.StoreUint32(ringWord(mem, l, off), v)
}

// gateHosts builds hosts A (behind a command gate with rule) and B (plain)
// on one wire.
func gateHosts(t *testing.T, rule func(rings.Command) gateVerdict, cfgA func(*HostConfig)) (a, b *Host, g *gateDevice) {
	t.Helper()
	pa, pb := port.MustNewWire(port.WireConfig{})
	ca := HostConfig{Addr: mustPrefix("10.0.0.1/24")}
	if cfgA != nil {
		cfgA(&ca)
	}
	var err error
	a, g, err = newGatedHost(ca, [6]byte{2, 0, 0, 0, 0, 1}, pa, rule)
	if err != nil {
		t.Fatal(err)
	}
	b, err = testHost(HostConfig{Addr: mustPrefix("10.0.0.2/24")}, [6]byte{2, 0, 0, 0, 0, 2}, pb)
	if err != nil {
		a.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close(); b.Close() })
	return a, b, g
}

func newGatedHost(cfg HostConfig, mac [6]byte, p port.Port, rule func(rings.Command) gateVerdict) (*Host, *gateDevice, error) {
	var g *gateDevice
	h, err := testHostWrapped(cfg, mac, p, func(dev *nic.Device, mem *rings.Arena) Device {
		g = &gateDevice{Device: dev, mem: mem, rule: rule, held: make(chan heldCmd, 64), bell: rings.NewBell(),
			ctl: make(chan gateOrder), stop: make(chan struct{}), fwd: map[uint32]uint32{}, holdDone: map[uint32]bool{}}
		g.door = fanout{g.bell, dev.Doorbell()}
		return g
	})
	return h, g, err
}

func mustPrefix(s string) netip.Prefix { return netip.MustParsePrefix(s) }

// transfer writes n bytes of a pattern on w and checks them on r.
func transfer(t *testing.T, w, r net.Conn, n int) {
	t.Helper()
	errc := make(chan error, 1)
	go func() {
		buf := make([]byte, 32<<10)
		for sent := 0; sent < n; {
			k := min(len(buf), n-sent)
			for i := range buf[:k] {
				buf[i] = byte(sent + i)
			}
			if _, err := w.Write(buf[:k]); err != nil {
				errc <- err
				return
			}
			sent += k
		}
		errc <- nil
	}()
	_ = r.SetReadDeadline(time.Now().Add(20 * time.Second))
	defer r.SetReadDeadline(time.Time{})
	buf := make([]byte, 64<<10)
	for got := 0; got < n; {
		k, err := r.Read(buf[:min(len(buf), n-got)])
		for i := range buf[:k] {
			if buf[i] != byte(got+i) {
				t.Fatalf("byte %d is %#x, want %#x", got+i, buf[i], byte(got+i))
			}
		}
		got += k
		if err != nil {
			t.Fatalf("after %d of %d bytes: %v", got, n, err)
		}
	}
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
}

// acceptAll accepts on l into a channel until l closes.
func acceptAll(t *testing.T, l net.Listener) <-chan net.Conn {
	ch := make(chan net.Conn, 16)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() { l.Close() })
	return ch
}

func recvConn(t *testing.T, ch <-chan net.Conn) net.Conn {
	t.Helper()
	select {
	case c := <-ch:
		t.Cleanup(func() { c.Close() })
		return c
	case <-time.After(10 * time.Second):
		t.Fatal("no connection accepted")
		return nil
	}
}

// listenAll listens with listen on port and accepts into a channel
// (acceptAll).
func listenAll[L net.Listener](t *testing.T, listen func(uint16) (L, error), port uint16) <-chan net.Conn {
	t.Helper()
	l, err := listen(port)
	if err != nil {
		t.Fatal(err)
	}
	return acceptAll(t, l)
}

// dialAccepted dials b's port with dial and returns the connection and
// the peer's end of it, accepted on acc.
func dialAccepted[C any](t *testing.T, ctx context.Context, dial func(context.Context, netip.AddrPort) (C, error), b *Host, port uint16, acc <-chan net.Conn) (C, net.Conn) {
	t.Helper()
	c, err := dial(ctx, netip.AddrPortFrom(b.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	return c, recvConn(t, acc)
}

// holdFirst is a gate rule holding the first command with opcode op.
func holdFirst(op rings.Opcode) func(rings.Command) gateVerdict {
	var once atomic.Bool
	return func(c rings.Command) gateVerdict {
		if c.Opcode == op && once.CompareAndSwap(false, true) {
			return gateVerdict{hold: true}
		}
		return gateVerdict{}
	}
}

func heldCommand(t *testing.T, g *gateDevice) heldCmd {
	t.Helper()
	select {
	case h := <-g.held:
		return h
	case <-time.After(10 * time.Second):
		t.Fatal("the gate held no command")
		return heldCmd{}
	}
}

// abandoned is a delegation the host gave up on: a's connection nc to
// b's port 5001, whose OFFLOAD (h) the gate holds, and b's end of it.
type abandoned struct {
	a, b *Host
	g    *gateDevice
	acc  <-chan net.Conn // b's offload listener on port 5001
	nc   *TrackedConn
	h    heldCmd
	peer net.Conn
}

// abandonedDelegation dials from a to b and delegates the connection while
// the gate holds its OFFLOAD past the command timeout: the delegation is
// abandoned, and the index, memory and frozen flow are quarantined.
func abandonedDelegation(t *testing.T) *abandoned {
	t.Helper()
	x := &abandoned{}
	x.a, x.b, x.g = gateHosts(t, holdFirst(rings.OpOffload), nil)
	a := x.a
	if err := a.Offload(OffloadConfig{CommandTimeout: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	x.acc = listenAll(t, x.b.ListenOffload, 5001)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, peer := dialAccepted(t, ctx, a.DialTracked, x.b, 5001, x.acc)
	x.nc, x.peer = nc, peer
	if _, ok := peer.(*DelegatedConn); !ok {
		t.Fatalf("B did not delegate its end: %T", peer)
	}
	_, err := a.Delegate(nc)
	if !errors.Is(err, ErrDelegationAbandoned) || !errors.Is(err, ErrCommandTimeout) || errors.Is(err, ErrNotDelegated) {
		t.Fatalf("Delegate: %v, want an abandoned delegation", err)
	}
	h := heldCommand(t, x.g)
	x.h = h
	o := a.off
	o.mu.Lock()
	_, q := o.quarantined[h.cmd.Conn]
	free := slicesContains(o.freeIdx, h.cmd.Conn)
	o.mu.Unlock()
	if !q || free {
		t.Fatalf("index %d: quarantined %v, free %v", h.cmd.Conn, q, free)
	}
	if fi, ok := a.Driver.flows.snapshot(nc.key); !ok || !fi.frozen {
		t.Fatal("the flow of the abandoned delegation is not frozen")
	}
	if s := a.Driver.Stats(); s.CmdTimeouts != 1 || s.CmdQuarantined != 1 {
		t.Fatalf("stats %+v", s)
	}
	if err := nc.Close(); err != nil {
		t.Fatal(err)
	}
	if _, ok := a.Driver.flows.snapshot(nc.key); !ok {
		t.Fatal("Close of the lost connection untracked its flow")
	}
	return x
}

// answer releases the held OFFLOAD with status, late: the host reaps it,
// frees the quarantined index and flow, and b's end sees a reset.
func (x *abandoned) answer(t *testing.T, status rings.Status) {
	t.Helper()
	x.g.release(x.h, status)
	quarantineResolved(t, x.a, x.h.cmd.Conn, x.nc.key)
	_ = x.peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := x.peer.Read(make([]byte, 1)); !errors.Is(err, ErrConnReset) {
		t.Fatalf("B's end of the abandoned connection: %v, want a reset", err)
	}
}

func slicesContains(s []uint32, v uint32) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// quarantineResolved waits until a's index idx is free again and the flow
// is gone.
func quarantineResolved(t *testing.T, a *Host, idx uint32, key hdr.Tuple) {
	t.Helper()
	o := a.off
	testutil.WaitFor(t, "the quarantine resolved", func() bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		_, q := o.quarantined[idx]
		_, tracked := a.Driver.flows.snapshot(key)
		return !q && slicesContains(o.freeIdx, idx) && !tracked
	})
	if s := a.Driver.Stats(); s.CmdQuarantined != 0 || s.CmdLate != 1 || s.CmdInFlight != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestOffloadTimeoutQuarantines: the device does not answer an OFFLOAD in
// time. The delegation is abandoned (the caller loses the connection, which
// stays frozen), its index and memory are quarantined, other connections
// are delegated and move data meanwhile; when the device finally installs
// the connection, the host reaps the late answer, takes the connection
// down with ABORT (the peer sees the reset) and frees everything.
func TestOffloadTimeoutQuarantines(t *testing.T) {
	x := abandonedDelegation(t)

	// Another connection, meanwhile: delegated on another index, and
	// moving data both ways.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c2, p2 := dialAccepted(t, ctx, x.a.DialOffload, x.b, 5001, x.acc)
	defer c2.Close()
	if c2.Index() == x.h.cmd.Conn {
		t.Fatal("the quarantined index was reused")
	}
	transfer(t, c2, p2, 1<<20)
	transfer(t, p2, c2, 1<<20)

	// The late answer: the device installs the abandoned connection.
	x.answer(t, rings.StatusOK)
	// And the rest goes on.
	transfer(t, c2, p2, 256<<10)
}

// TestOffloadRefusedLate: the late answer is a refusal: the unit never had
// the connection, so netstack resets it (the flow unfrozen first) and the
// host frees everything.
func TestOffloadRefusedLate(t *testing.T) {
	abandonedDelegation(t).answer(t, rings.StatusNoResources)
}

// TestInterruptsNeverWaitForCommands: the device sits on a delegated
// connection's buffer reposts (the command timeout is a minute) while a
// netstack connection moves 4 MiB through the same interrupt handler; then
// the reposts go through and the delegated connection carries on.
func TestInterruptsNeverWaitForCommands(t *testing.T) {
	var hold atomic.Bool
	hold.Store(true)
	rule := func(c rings.Command) gateVerdict {
		// Reposts (one buffer each); the first post (growRecv) has
		// several.
		if c.Opcode == rings.OpPostBuffers && c.Arg0 == 1 && hold.Load() {
			return gateVerdict{hold: true}
		}
		return gateVerdict{}
	}
	a, b, g := gateHosts(t, rule, nil)
	if err := a.Offload(OffloadConfig{CommandTimeout: time.Minute, RecvBuffers: 4, RecvBufSize: 16 << 10}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dc, peer := dialAccepted(t, ctx, a.DialOffload, b, 5001, listenAll(t, b.ListenOffload, 5001))
	defer dc.Close()
	// Fill and drain user buffers: every drained one is a repost the
	// device holds. (The connection's first bytes come through legacy
	// buffers; it gets user buffers once it keeps receiving.)
	transfer(t, peer, dc, 512<<10)
	held := heldCommand(t, g)

	// netstack's own traffic meanwhile.
	nc, np := dialAccepted(t, ctx, a.Dial, b, 5002, listenAll(t, b.Listen, 5002))
	defer nc.Close()
	transfer(t, np, nc, 4<<20)
	transfer(t, nc, np, 1<<20)

	// The device answers; the delegated connection goes on.
	hold.Store(false)
	g.release(held, rings.StatusOK)
	for {
		select {
		case h := <-g.held:
			g.release(h, rings.StatusOK)
			continue
		default:
		}
		break
	}
	transfer(t, peer, dc, 1<<20)
	if s := a.Driver.Stats(); s.CmdTimeouts != 0 || s.CmdFailed != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestDelegateWithDataArriving: netstack still holds unread bytes when the
// connection is delegated, and the peer's next bytes reach the unit (into
// a legacy buffer: no user buffer is posted before it streams) before the host has seen the
// OFFLOAD complete (the gate holds its write-back meanwhile). The bytes
// netstack held still come first.
func TestDelegateWithDataArriving(t *testing.T) {
	rule := func(c rings.Command) gateVerdict {
		return gateVerdict{holdDone: c.Opcode == rings.OpOffload}
	}
	a, b, g := gateHosts(t, rule, nil)
	if err := a.Offload(OffloadConfig{}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nc, peer := dialAccepted(t, ctx, a.DialTracked, b, 5003, listenAll(t, b.Listen, 5003))
	pattern := func(from, n int) []byte {
		p := make([]byte, n)
		for i := range p {
			p[i] = byte((from + i) / 7)
		}
		return p
	}
	// 1000 bytes netstack receives and nobody reads.
	if _, err := peer.Write(pattern(0, 1000)); err != nil {
		t.Fatal(err)
	}
	testutil.WaitFor(t, "netstack holding 1000 bytes", func() bool {
		fi, _ := a.Driver.flows.snapshot(nc.key)
		return fi.rcvNxt-fi.irs-1 == 1000
	})
	type result struct {
		c   *DelegatedConn
		err error
	}
	res := make(chan result, 1)
	go func() {
		c, err := a.Delegate(nc)
		res <- result{c, err}
	}()
	h := heldCommand(t, g) // the device ran the OFFLOAD; the host does not know yet
	if !h.executed || h.cmd.Status != rings.StatusOK {
		t.Fatalf("OFFLOAD %+v", h)
	}
	if _, err := peer.Write(pattern(1000, 2000)); err != nil {
		t.Fatal(err)
	}
	o := a.off
	testutil.WaitFor(t, "the unit's bytes handed to the connection", func() bool {
		o.mu.Lock()
		c := o.conns[h.cmd.Conn]
		o.mu.Unlock()
		if c == nil {
			return false
		}
		c.mu.Lock()
		defer c.mu.Unlock()
		return len(c.chunks) > 1 // netstack's bytes, then the unit's
	})
	g.release(h, h.cmd.Status)
	r := <-res
	if r.err != nil {
		t.Fatal(r.err)
	}
	defer r.c.Close()
	got := make([]byte, 3000)
	_ = r.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(r.c, got); err != nil {
		t.Fatal(err)
	}
	if want := pattern(0, 3000); string(got) != string(want) {
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("byte %d is %#x, want %#x: netstack's bytes are not first", i, got[i], want[i])
			}
		}
	}
}
