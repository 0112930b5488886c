package nic

import (
	"bytes"
	"testing"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/port/porttest"
	"github.com/emunic/emunic/rings"
)

// lroPort is a blocking port that hands the device TCP super-frames whole
// (port.LROReader), as a TAP with offloads does. Writes go to a porttest
// port (Written); reads come from inject.
type lroPort struct {
	port.Port // the porttest port, blocking: writes, Close, Stats
	in        chan lroItem
	closed    chan struct{}
}

type lroItem struct {
	frame []byte
	gso   int // > 0: a super-frame of segments of gso payload bytes
}

func newLROPort() (*lroPort, *porttest.Port) {
	w := porttest.New(porttest.Config{})
	return &lroPort{Port: w.Blocking(), in: make(chan lroItem, 64), closed: make(chan struct{})}, w
}

func (p *lroPort) inject(frame []byte, gso int) { p.in <- lroItem{frame, gso} }

func (p *lroPort) Close() error {
	select {
	case <-p.closed:
	default:
		close(p.closed)
	}
	return p.Port.Close()
}

func (p *lroPort) ReadFrame(buf []byte) (int, error) {
	f, err := p.ReadFrameLRO(buf)
	return f.N, err
}

func (p *lroPort) ReadFrameLRO(buf []byte) (port.LROFrame, error) {
	select {
	case it := <-p.in:
		n := copy(buf, it.frame)
		f := port.LROFrame{N: n, Segs: 1, WireBytes: n, L4Verified: true}
		if it.gso > 0 {
			ip := hdr.IPv4(it.frame[hdr.EthernetSize:])
			hl := hdr.EthernetSize + ip.HeaderLen() + hdr.TCP(ip[ip.HeaderLen():]).HeaderLen()
			payload := n - hl
			f.GSOSize, f.Segs = it.gso, (payload+it.gso-1)/it.gso
			f.WireBytes = f.Segs*hl + payload
		}
		return f, nil
	case <-p.closed:
		return port.LROFrame{}, port.ErrClosed
	}
}

// TestLRO: a super-frame of a delegated flow reaches the engine whole
// (RxLRO), its payload placed in one pass into the user buffer, counted as
// the wire segments it stands for (the device's RxFrames, the engine's
// RxSegments) and acknowledged once; a super-frame of a flow the engine
// does not own is cut into its wire segments, uploaded one per legacy
// buffer in order, and when the buffers run out midway the rest waits in
// its place and follows once the host posts more.
func TestLRO(t *testing.T) {
	lp, w := newLROPort()
	h := newHostSideOn(t, 8, Config{MAC: devMAC, Engine: delegation.Config{DelayedAck: 1e6}, RxBufferWait: 10 * time.Second}, lp, w)
	if h.dev.lro == nil {
		t.Fatal("the device did not take the port's super-frames (no LRO)")
	}
	p := newRawPeer(t, h)
	p.lport, p.pport, p.seq, p.ack = 1000, 2000, 5000, 1000
	if st := h.offload(0, 1000, 5000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD: %v", st)
	}
	ub, _ := h.mem.Alloc(64<<10, 64)
	descs, _ := h.mem.Alloc(rings.UserBufDescSize, 64)
	db, _ := h.mem.Map(descs, rings.UserBufDescSize)
	(&rings.UserBuf{Addr: ub, Len: 64 << 10, ID: 7}).Encode(rings.UserBufDesc(db))
	if res := h.command(rings.Command{Opcode: rings.OpPostBuffers, Conn: 0, Addr: descs, Arg0: 1}); res.Status != rings.StatusOK {
		t.Fatalf("POST_BUFFERS: %v", res.Status)
	}

	// The delegated flow: 20 segments of 1448 bytes in one super-frame.
	const mss, nseg = 1448, 20
	payload := make([]byte, nseg*mss)
	for i := range payload {
		payload[i] = byte(i * 7)
	}
	lp.inject(p.frame(seg{seq: p.seq, ack: p.ack, flags: fACK | fPSH, wnd: 65535, payload: payload}), mss)
	n := h.waitNotify(rings.NtfUserBufDone)
	if n.Aux != 7 || n.Len != uint32(len(payload)) || n.Seq != 5000 {
		t.Fatalf("user buffer done: %+v", n)
	}
	if got, _ := h.mem.Map(ub, len(payload)); !bytes.Equal(got, payload) {
		t.Fatal("the user buffer does not hold the super-frame's payload")
	}
	ack, ok := p.recv()
	if !ok || ack.ack != 5000+uint32(len(payload)) || len(ack.payload) != 0 {
		t.Fatalf("ACK of the super-frame: %+v (%v)", ack, ok)
	}
	if s, ok := p.recv(); ok {
		t.Errorf("a second segment after one super-frame: %+v (one ACK covers it)", s)
	}
	ec := h.dev.EngineCounters()
	if ec.RxLRO != 1 || ec.RxSegments != nseg {
		t.Errorf("engine: %d super-frames, %d segments; want 1 and %d", ec.RxLRO, ec.RxSegments, nseg)
	}
	if got := h.dev.Stat(rings.StatRxFrames); got != nseg {
		t.Errorf("rx_frames %d, want the %d wire segments", got, nseg)
	}

	// A flow the engine does not own: cut into its segments, one legacy
	// buffer each. Eight buffers are posted; 11 segments come: 8 go up,
	// the rest wait for buffers, then follow in order.
	other := &rawPeer{t: t, h: h, lport: 3000, pport: 4000}
	const seg2, n2 = 1000, 11
	data := make([]byte, n2*seg2-300) // the last segment shorter
	for i := range data {
		data[i] = byte(i * 13)
	}
	lp.inject(other.frame(seg{seq: 777, ack: 1, flags: fACK | fPSH, wnd: 100, payload: data}), seg2)
	var got []byte
	nextSeq := uint32(777)
	take := func(k int) {
		t.Helper()
		for i := 0; i < k; i++ {
			n := h.waitNotify(rings.NtfLegacyUpload)
			if n.Conn != rings.NoConn || n.Aux >= 16 {
				t.Fatalf("legacy upload %d: %+v", i, n)
			}
			f, _ := h.mem.Map(h.bufs+rings.Addr(int(n.Aux)*h.bufLen), int(n.Len))
			var pf parsedFrame
			// The TCP checksum is the super-frame's, as the port's own
			// segments of a kernel super-frame are: the device vouches
			// for it and the driver takes it so.
			if v := classify(f, devMAC, h.dev.maxFrame, &pf, true); v != rxLegacy || pf.proto != ProtoTCP {
				t.Fatalf("segment %d: verdict %v (its IP header is not whole)", len(got)/seg2, v)
			}
			tcp := hdr.TCP(f[pf.l4Off : pf.l4Off+pf.l4Len])
			if tcp.Seq() != nextSeq || tcp.DstPort() != 3000 {
				t.Fatalf("segment %d: seq %d port %d, want %d 3000", len(got)/seg2, tcp.Seq(), tcp.DstPort(), nextSeq)
			}
			last := len(got)+len(tcp.Payload()) == len(data)
			if psh := tcp.Flags()&fPSH != 0; psh != last {
				t.Errorf("segment %d: PSH %v, want it on the last only", len(got)/seg2, psh)
			}
			got = append(got, tcp.Payload()...)
			nextSeq += uint32(len(tcp.Payload()))
		}
	}
	take(8)
	if n, ok := h.notification(); ok {
		t.Fatalf("a notification with no buffer posted: %+v", n)
	}
	for id := uint32(8); id < 11; id++ {
		h.postRx(id)
	}
	take(3)
	if !bytes.Equal(got, data) {
		t.Fatalf("the cut segments carry %d bytes, not the super-frame's %d", len(got), len(data))
	}
	if got := h.dev.Stat(rings.StatRxFrames); got != nseg+n2 {
		t.Errorf("rx_frames %d, want %d", got, nseg+n2)
	}
	if ec := h.dev.EngineCounters(); ec.RxLRO != 1 {
		t.Errorf("the engine took %d super-frames, want 1 (the second is not its flow's)", ec.RxLRO)
	}
}

// TestLROFIFODepth: with LRO the receive FIFO has lroFIFODepth super-frame
// slots (the MAC waits for one, the rest wait in the port), and
// lroDropFIFODepth for a MAC that drops when the FIFO is full.
func TestLROFIFODepth(t *testing.T) {
	for _, drop := range []bool{false, true} {
		lp, w := newLROPort()
		h := newHostSideOn(t, 8, Config{MAC: devMAC, DropWhenFull: drop}, lp, w)
		want := map[bool]int{false: lroFIFODepth, true: lroDropFIFODepth}[drop]
		if h.dev.lro == nil || len(h.dev.fifo.slots) != want || len(h.dev.fifo.slots[0]) != port.LROBufferSize {
			t.Errorf("DropWhenFull %v: LRO %v, %d slots of %d bytes; want %d of %d", drop, h.dev.lro != nil, len(h.dev.fifo.slots), len(h.dev.fifo.slots[0]), want, port.LROBufferSize)
		}
	}
}
