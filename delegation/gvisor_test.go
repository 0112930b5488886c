package delegation

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/waiter"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// The engine against gVisor's netstack as the real peer, by the delegation
// recipe: netstack A connects to netstack B over link/channel endpoints
// while the test shuttles (and watches) every frame; the connection carries
// data, quiesces; the test builds A's state block from what it saw on the
// wire (cross-checked with A's TCP probe), stops forwarding to A, aborts A's
// endpoint (dropping the RST it emits) and lets the engine continue the
// connection in A's place, against B's gonet conn.

// flowSide is what the shuttle saw one side send.
type flowSide struct {
	synSeen   bool
	mss       uint16
	ws        int // -1: no window scale option
	sackPerm  bool
	tsOK      bool
	sndNxt    uint32 // highest sequence number sent, plus one
	ack       uint32 // last ACK number
	wnd       uint16 // last window field
	tsVal     uint32 // last TSval
	segs      int
	dataBytes int
}

type flowTracker struct {
	mu   sync.Mutex
	side [2]flowSide // 0: A's frames, 1: B's frames
}

func (ft *flowTracker) see(from int, pkt []byte) {
	if len(pkt) < netHdrLen {
		return
	}
	ihl := int(pkt[0]&0xF) * 4
	if pkt[9] != hdr.ProtoTCP || len(pkt) < ihl+hdr.TCPMinSize {
		return
	}
	tcpb := pkt[ihl:]
	var s segment
	if parseTCP(tcpb, &s) != parseOK {
		return
	}
	ft.mu.Lock()
	defer ft.mu.Unlock()
	fs := &ft.side[from]
	fs.segs++
	if s.flags&hdr.TCPFlagSYN != 0 {
		fs.synSeen = true
		fs.ws = -1
		opts := tcpb[hdr.TCPMinSize : int(tcpb[12]>>4)*4]
		for i := 0; i < len(opts); {
			switch opts[i] {
			case hdr.TCPOptEOL:
				i = len(opts)
				continue
			case hdr.TCPOptNOP:
				i++
				continue
			}
			l := int(opts[i+1])
			switch opts[i] {
			case hdr.TCPOptMSS:
				fs.mss = be.Uint16(opts[i+2:])
			case hdr.TCPOptWS:
				fs.ws = int(opts[i+2])
			case hdr.TCPOptSACKPermitted:
				fs.sackPerm = true
			case hdr.TCPOptTimestamp:
				fs.tsOK = true
			}
			i += l
		}
	}
	if end := uint32(s.seq) + s.seqLen(); fs.segs == 1 || int32(end-fs.sndNxt) > 0 {
		fs.sndNxt = end
	}
	if s.flags&hdr.TCPFlagACK != 0 {
		fs.ack = uint32(s.ack)
		fs.wnd = s.wnd
	}
	if s.hasTS {
		fs.tsVal = s.tsVal
	}
	fs.dataBytes += len(s.payload)
}

func (ft *flowTracker) snapshot() [2]flowSide {
	ft.mu.Lock()
	defer ft.mu.Unlock()
	return ft.side
}

var (
	gvAddrA = tcpip.AddrFrom4(ipA)
	gvAddrB = tcpip.AddrFrom4(ipB)
)

func newNetstack(t *testing.T, addr tcpip.Address, probe tcp.TCPProbeFunc) (*stack.Stack, *channel.Endpoint) {
	tp := tcp.NewProtocol
	if probe != nil {
		tp = tcp.NewProtocolProbe(probe)
	}
	s := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tp},
	})
	sack := tcpip.TCPSACKEnabled(true)
	s.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)
	ep := channel.New(4096, 1500, "")
	if err := s.CreateNIC(1, ep); err != nil {
		t.Fatal(err)
	}
	if err := s.AddProtocolAddress(1, tcpip.ProtocolAddress{Protocol: ipv4.ProtocolNumber,
		AddressWithPrefix: addr.WithPrefix()}, stack.AddressProperties{}); err != nil {
		t.Fatal(err)
	}
	s.SetRouteTable([]tcpip.Route{{Destination: header.IPv4EmptySubnet, NIC: 1}})
	t.Cleanup(func() { ep.Close(); s.Close() })
	return s, ep
}

func pktBytes(pkt *stack.PacketBuffer) []byte {
	b := pkt.ToBuffer()
	out := b.Flatten()
	b.Release()
	pkt.DecRef()
	return out
}

func inject(ep *channel.Endpoint, b []byte) {
	pkt := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(b)})
	ep.InjectInbound(ipv4.ProtocolNumber, pkt)
	pkt.DecRef()
}

// devLoop runs the engine and its host in one goroutine, in real time.
type devLoop struct {
	e    *Engine
	env  *testEnv
	h    *hostApp
	in   chan []byte
	cmd  chan func()
	stop chan struct{}
	done chan struct{}
	base time.Time
}

func (d *devLoop) now() int64 { return int64(time.Since(d.base)) + 1e9 }

func (d *devLoop) run() {
	defer close(d.done)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		wait := time.Hour
		if dl := d.e.NextDeadline(); dl != NoDeadline {
			wait = time.Duration(dl - d.now())
			if wait < 0 {
				wait = 0
			}
		}
		timer.Reset(wait)
		select {
		case f := <-d.in:
			inputIP(d.e, f)
		case fn := <-d.cmd:
			fn()
		case <-timer.C:
			d.e.Tick(d.now())
		case <-d.stop:
			return
		}
		if d.h != nil {
			d.h.drain()
		}
	}
}

// do runs fn in the loop and waits for it.
func (d *devLoop) do(fn func()) {
	ch := make(chan struct{})
	d.cmd <- func() { fn(); close(ch) }
	<-ch
}

// gvSetup is a connection netstack A set up with netstack B and then handed
// to the engine, which runs in its device loop with a host application
// (not started).
type gvSetup struct {
	d        *devLoop
	st       rings.ConnState
	connB    net.Conn
	epB      tcpip.Endpoint
	droppedA *atomic.Int64
}

// setupGVisor runs the delegation recipe. lossy drops 1% of the frames in
// each direction once the engine has the connection.
func setupGVisor(t *testing.T, lossy bool, ho hostOpts) *gvSetup {
	var probeMu sync.Mutex
	type probeState struct {
		sndNxt, rcvNxt uint32
		rtt            tcp.TCPRTTState
	}
	var probeA probeState
	probeSeen := false
	sA, epA := newNetstack(t, gvAddrA, func(st *tcp.TCPEndpointState) {
		probeMu.Lock()
		probeA = probeState{uint32(st.Sender.SndNxt), uint32(st.Receiver.RcvNxt), st.Sender.RTTState}
		probeSeen = true
		probeMu.Unlock()
	})
	sB, epB := newNetstack(t, gvAddrB, nil)

	var ft flowTracker
	var offloaded atomic.Bool
	var dev atomic.Pointer[devLoop]
	droppedA := new(atomic.Int64)
	var rngMu sync.Mutex
	rng := rand.New(rand.NewPCG(42, 7))
	lose := func() bool {
		if !lossy || !offloaded.Load() {
			return false
		}
		rngMu.Lock()
		defer rngMu.Unlock()
		return rng.Float64() < 0.01
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Add(2)
	go func() { // A → B
		defer wg.Done()
		for {
			pkt := epA.ReadContext(ctx)
			if pkt == nil {
				return
			}
			b := pktBytes(pkt)
			if offloaded.Load() {
				droppedA.Add(1) // A is gone: its RST (and anything else) never reaches B
				continue
			}
			ft.see(0, b)
			inject(epB, b)
		}
	}()
	go func() { // B → A, or to the engine once delegated
		defer wg.Done()
		for {
			pkt := epB.ReadContext(ctx)
			if pkt == nil {
				return
			}
			b := pktBytes(pkt)
			if d := dev.Load(); d != nil {
				if lose() {
					continue
				}
				select {
				case d.in <- b:
				case <-ctx.Done():
					return
				}
				continue
			}
			ft.see(1, b)
			inject(epA, b)
		}
	}()

	// B listens on a raw endpoint (so the test can abort its side too).
	var wqL waiter.Queue
	lep, tErr := sB.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wqL)
	if tErr != nil {
		t.Fatal(tErr)
	}
	t.Cleanup(lep.Close)
	if tErr := lep.Bind(tcpip.FullAddress{Addr: gvAddrB, Port: portB}); tErr != nil {
		t.Fatal(tErr)
	}
	if tErr := lep.Listen(16); tErr != nil {
		t.Fatal(tErr)
	}
	type accepted struct {
		ep tcpip.Endpoint
		wq *waiter.Queue
	}
	acceptCh := make(chan accepted, 1)
	go func() {
		we, ch := waiter.NewChannelEntry(waiter.ReadableEvents)
		wqL.EventRegister(&we)
		defer wqL.EventUnregister(&we)
		for {
			ep, wq, err := lep.Accept(nil)
			if err == nil {
				acceptCh <- accepted{ep, wq}
				return
			}
			if _, ok := err.(*tcpip.ErrWouldBlock); !ok {
				t.Error(err)
				acceptCh <- accepted{}
				return
			}
			select {
			case <-ch:
			case <-ctx.Done():
				acceptCh <- accepted{}
				return
			}
		}
	}()
	// A connects: the handshake in netstack.
	var wq waiter.Queue
	ep, tErr := sA.NewEndpoint(tcp.ProtocolNumber, ipv4.ProtocolNumber, &wq)
	if tErr != nil {
		t.Fatal(tErr)
	}
	if tErr := ep.Bind(tcpip.FullAddress{Addr: gvAddrA, Port: portA}); tErr != nil {
		t.Fatal(tErr)
	}
	we, ch := waiter.NewChannelEntry(waiter.WritableEvents)
	wq.EventRegister(&we)
	if tErr := ep.Connect(tcpip.FullAddress{Addr: gvAddrB, Port: portB}); tErr != nil {
		if _, ok := tErr.(*tcpip.ErrConnectStarted); !ok {
			t.Fatal(tErr)
		}
		<-ch
	}
	wq.EventUnregister(&we)
	connA := gonet.NewTCPConn(&wq, ep)
	acc := <-acceptCh
	if acc.ep == nil {
		t.Fatal("no accept")
	}
	connB := gonet.NewTCPConn(acc.wq, acc.ep)
	t.Cleanup(func() { connB.Close() })
	// Some traffic both ways in netstack first.
	pre := pattern(200<<10, 3)
	go func() { connA.Write(pre) }()
	got := make([]byte, len(pre))
	if _, err := io.ReadFull(connB, got); err != nil || !bytes.Equal(got, pre) {
		t.Fatalf("pre-offload A→B: %v", err)
	}
	go func() { connB.Write(pre[:100<<10]) }()
	if _, err := io.ReadFull(connA, got[:100<<10]); err != nil || !bytes.Equal(got[:100<<10], pre[:100<<10]) {
		t.Fatalf("pre-offload B→A: %v", err)
	}

	// Quiesce: everything each side sent is acknowledged, nothing moves.
	deadline := time.Now().Add(5 * time.Second)
	var fs [2]flowSide
	for {
		time.Sleep(50 * time.Millisecond)
		before := ft.snapshot()
		time.Sleep(250 * time.Millisecond)
		fs = ft.snapshot()
		if fs == before && fs[0].sndNxt == fs[1].ack && fs[1].sndNxt == fs[0].ack {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no quiescence: %+v", fs)
		}
	}
	a, b := fs[0], fs[1]
	if !a.synSeen || !b.synSeen {
		t.Fatalf("handshake not seen: %+v", fs)
	}
	// The state block, from the wire.
	st := rings.ConnState{
		Version: rings.ConnStateVersion, State: rings.StateEstablished, TTL: 64,
		LocalIP: ipA, RemoteIP: ipB, LocalPort: portA, RemotePort: portB,
		LocalMAC: macA, NextHopMAC: macB,
		SndUna: a.sndNxt, SndNxt: a.sndNxt, RcvNxt: a.ack,
		SndWnd: b.wnd, MSS: min(b.mss, 1460), RcvBufSize: 1 << 20,
		AckThreshold: 0, MaxTxBuffers: 32,
	}
	if a.ws >= 0 && b.ws >= 0 {
		st.SndWndScale, st.RcvWndScale = uint8(b.ws), uint8(a.ws)
	}
	st.RcvAdvertised = uint32(a.wnd) << st.RcvWndScale
	if a.sackPerm && b.sackPerm {
		st.Flags |= rings.ConnSACKPermitted
	}
	if a.tsOK && b.tsOK {
		st.Flags |= rings.ConnTimestamps
		st.TSRecent, st.TSVal = b.tsVal, a.tsVal+1
	}
	probeMu.Lock()
	if !probeSeen || probeA.sndNxt != st.SndNxt || probeA.rcvNxt != st.RcvNxt {
		t.Errorf("wire tracking disagrees with A's TCP probe: snd.nxt %d/%d rcv.nxt %d/%d",
			st.SndNxt, probeA.sndNxt, st.RcvNxt, probeA.rcvNxt)
	}
	if rtt := probeA.rtt; rtt.SRTTInited {
		st.SRTTus, st.RTTVarUs = uint32(rtt.SRTT.Microseconds()), uint32(rtt.RTTVar.Microseconds())
	}
	probeMu.Unlock()
	t.Logf("state from the wire: snd %d rcv %d wnd %d<<%d rcv scale %d mss %d flags %v ts %d/%d",
		st.SndNxt, st.RcvNxt, st.SndWnd, st.SndWndScale, st.RcvWndScale, st.MSS, st.Flags, st.TSVal, st.TSRecent)

	// The device takes over.
	d := &devLoop{in: make(chan []byte, 1024), cmd: make(chan func()), stop: make(chan struct{}),
		done: make(chan struct{}), base: time.Now()}
	var clock int64
	d.env = newTestEnv(t, 32<<20, &clock)
	d.env.clock = d.now
	d.env.transmit = func(f []byte) error {
		if lose() {
			return nil
		}
		inject(epB, append([]byte(nil), f[hdr.EthernetSize:]...))
		return nil
	}
	d.e = NewEngine(Config{MaxConns: 4, TimeWait: 100e6, MinRTO: 50e6}, d.env)
	if s := d.e.Offload(0, &st); s != rings.StatusOK {
		t.Fatalf("offload: %v", s)
	}
	if ho.txBufs == 0 {
		ho = hostOpts{txBufs: 32, txSize: 64 << 10, userBufs: 16, userSize: 64 << 10,
			legacyBufs: 64, legacySize: 2048, seed: 77, sendBytes: ho.sendBytes, closeAfter: ho.closeAfter}
	}
	d.h = newHostApp(t, "engine", d.e, d.env, 0, &st, ho)
	d.h.softFail = true
	offloaded.Store(true)
	dev.Store(d)
	go d.run()
	t.Cleanup(func() { close(d.stop); <-d.done })
	ep.Abort() // its RST is dropped by the A→B shuttle
	return &gvSetup{d: d, st: st, connB: connB, epB: acc.ep, droppedA: droppedA}
}

// waitFor polls cond in the device loop.
func (g *gvSetup) waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(limit); ; {
		var ok bool
		g.d.do(func() { ok = cond() })
		if ok {
			return
		}
		if time.Now().After(end) {
			var s string
			g.d.do(func() { s = g.d.h.String() })
			t.Fatalf("%s: timed out\n%s", what, s)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (g *gvSetup) counters() Counters {
	var c Counters
	g.d.do(func() { c = g.d.e.Counters() })
	return c
}

func gvSize() int64 {
	if raceEnabled || testing.Short() {
		return 2 << 20
	}
	return 32 << 20
}

// streamToB writes size pseudo-random bytes from B and returns their hash.
func streamFromB(conn net.Conn, size int64, seed byte) (<-chan []byte, <-chan error) {
	sum := make(chan []byte, 1)
	errc := make(chan error, 1)
	go func() {
		h := sha256.New()
		r := rand.NewChaCha8([32]byte{seed})
		buf := make([]byte, 64<<10)
		for left := size; left > 0; {
			n := min(int64(len(buf)), left)
			r.Read(buf[:n])
			h.Write(buf[:n])
			if _, err := conn.Write(buf[:n]); err != nil {
				errc <- err
				return
			}
			left -= n
		}
		sum <- h.Sum(nil)
		errc <- nil
	}()
	return sum, errc
}

// readAtB reads B's side to EOF and returns the hash and length.
func readAtB(conn net.Conn) <-chan [2]any {
	res := make(chan [2]any, 1)
	go func() {
		h := sha256.New()
		n, err := io.Copy(h, conn)
		if err != nil {
			res <- [2]any{nil, err}
			return
		}
		res <- [2]any{h.Sum(nil), n}
	}()
	return res
}

func TestGVisorPeer(t *testing.T) {
	for _, lossy := range []bool{false, true} {
		name := "clean"
		if lossy {
			name = "lossy"
		}
		t.Run(name, func(t *testing.T) { testGVisorPeer(t, lossy) })
	}
}

// Both directions at once, the engine closes first (TIME_WAIT).
func testGVisorPeer(t *testing.T, lossy bool) {
	size := gvSize()
	g := setupGVisor(t, lossy, hostOpts{sendBytes: size, closeAfter: true})
	d := g.d
	atB := readAtB(g.connB)
	bSum, bErr := streamFromB(g.connB, size, 9)
	start := time.Now()
	d.do(d.h.start)
	if err := <-bErr; err != nil {
		t.Fatalf("B write: %v", err)
	}
	g.waitFor(t, "engine receives", 60*time.Second, func() bool { return d.h.recvd >= size })
	res := <-atB
	if res[0] == nil {
		t.Fatalf("B read (the engine's stream, then its FIN): %v", res[1])
	}
	elapsed := time.Since(start)
	var sendHash, recvHash []byte
	d.do(func() { sendHash, recvHash = d.h.sendHash.Sum(nil), d.h.recvHash.Sum(nil) })
	if res[1].(int64) != size || !bytes.Equal(sendHash, res[0].([]byte)) {
		t.Fatalf("engine → netstack: %d bytes, SHA-256 equal %v", res[1], bytes.Equal(sendHash, res[0].([]byte)))
	}
	if !bytes.Equal(recvHash, <-bSum) {
		t.Fatal("netstack → engine: SHA-256 differs")
	}
	// B closes too: the engine, which closed first, goes through TIME_WAIT.
	g.connB.Close()
	g.waitFor(t, "close", 10*time.Second, func() bool { return d.h.closed })
	ctr := g.counters()
	if ctr.DropBadChecksum+ctr.DropBadOptions+ctr.DropTupleMismatch+ctr.DMAErrors != 0 || d.h.rst || d.h.timeout {
		t.Fatalf("counters %+v", ctr)
	}
	if g.droppedA.Load() == 0 {
		t.Fatal("A's RST was not seen (and dropped)")
	}
	if ctr.TimeWaitEntered != 1 {
		t.Fatal("no TIME_WAIT")
	}
	t.Logf("%d MiB each way with netstack in %v (%.2f Gbit/s each way); retrans %d, fast rtx %d, RTO %d, OOO %d, dupacks %d, PAWS %d, oow %d",
		size>>20, elapsed.Round(time.Millisecond), float64(size*8)/elapsed.Seconds()/1e9,
		ctr.TxRetransSegs, ctr.FastRetransmits, ctr.RTOExpired, ctr.OOOSegments, ctr.DupAcksRx, ctr.DropPAWS, ctr.DropOutOfWindow)
}

// The peer closes first (its FIN reaches the engine in CLOSE_WAIT); the
// engine keeps sending on the half-closed connection, then closes
// (LAST_ACK).
func TestGVisorPeerClosesFirst(t *testing.T) {
	size := gvSize() / 4
	g := setupGVisor(t, false, hostOpts{})
	d := g.d
	atB := readAtB(g.connB)
	bSum, bErr := streamFromB(g.connB, 1<<20, 5)
	d.do(d.h.start)
	if err := <-bErr; err != nil {
		t.Fatal(err)
	}
	if err := g.connB.(*gonet.TCPConn).CloseWrite(); err != nil {
		t.Fatal(err)
	}
	g.waitFor(t, "FIN", 10*time.Second, func() bool { return d.h.gotFin })
	var state rings.TCPState
	d.do(func() { state = d.e.conns[0].state })
	if state != rings.StateCloseWait {
		t.Fatalf("state %v after the peer's FIN", state)
	}
	// Now the engine sends, after the peer's FIN, then closes.
	d.do(func() { d.h.sendTotal, d.h.closeAfter = size, true; d.h.pump() })
	res := <-atB
	if res[0] == nil || res[1].(int64) != size {
		t.Fatalf("B read: %v", res[1])
	}
	var sendHash, recvHash []byte
	d.do(func() { sendHash, recvHash = d.h.sendHash.Sum(nil), d.h.recvHash.Sum(nil) })
	if !bytes.Equal(sendHash, res[0].([]byte)) || !bytes.Equal(recvHash, <-bSum) {
		t.Fatal("SHA-256 differs")
	}
	g.waitFor(t, "close", 10*time.Second, func() bool { return d.h.closed })
	if c := g.counters(); c.TimeWaitEntered != 0 || d.h.rst || d.h.timeout {
		t.Fatalf("passive close went wrong: %+v", c)
	}
}

// The peer aborts: its RST (at exactly RCV.NXT) closes the connection.
func TestGVisorPeerReset(t *testing.T) {
	g := setupGVisor(t, false, hostOpts{})
	d := g.d
	d.do(d.h.start)
	g.epB.Abort()
	g.waitFor(t, "RST", 10*time.Second, func() bool { return d.h.closed })
	if !d.h.rst || d.h.flags&rings.NtfClosed == 0 {
		t.Fatalf("%v", d.h)
	}
	if c := g.counters(); c.RstAccepted != 1 || c.ChallengeAcks != 0 {
		t.Fatalf("%+v", c)
	}
	var st rings.Status
	d.do(func() { st = d.e.Release(0) })
	if st != rings.StatusOK {
		t.Fatal(st)
	}
}
