package nic

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// This file drives a delegated connection through the rings only: commands
// with their statuses written back, transmit descriptors, and the
// notifications each event produces, against a raw TCP peer the test plays
// on the far end of the wire. It is the ring protocol's reference scenario.

const (
	fFIN = 0x01
	fSYN = 0x02
	fRST = 0x04
	fPSH = 0x08
	fACK = 0x10
)

var (
	devIP  = [4]byte{10, 0, 0, 1}
	peerIP = [4]byte{10, 0, 0, 2}
)

type seg struct {
	seq, ack uint32
	flags    byte
	wnd      uint16
	payload  []byte
}

// rawPeer is the far end: it builds and parses Ethernet/IPv4/TCP frames
// without options (the state block negotiates none).
type rawPeer struct {
	t        *testing.T
	h        *hostSide
	lport    uint16 // the device's port
	pport    uint16
	seq, ack uint32        // peer's next sequence number, and what it acknowledges
	frames   <-chan []byte // what the device transmitted
}

func newRawPeer(t *testing.T, h *hostSide) *rawPeer {
	return &rawPeer{t: t, h: h, frames: h.wire.Written()}
}

func (p *rawPeer) send(s seg) {
	p.t.Helper()
	if err := p.h.wire.Inject(p.frame(s)); err != nil {
		p.t.Fatal(err)
	}
}

// frame builds the peer's frame for s.
func (p *rawPeer) frame(s seg) []byte {
	f := hdr.TCPFrameFields{SrcMAC: peerMAC, DstMAC: devMAC, Src: peerIP, Dst: devIP,
		TCP:     hdr.TCPFields{SrcPort: p.pport, DstPort: p.lport, Seq: s.seq, Ack: s.ack, Flags: s.flags, Window: s.wnd},
		Payload: s.payload}
	return f.Append(nil)
}

// data sends payload at the peer's sequence and advances it.
func (p *rawPeer) data(payload []byte, flags byte) {
	p.send(seg{seq: p.seq, ack: p.ack, flags: fACK | flags, wnd: 65535, payload: payload})
	p.seq += uint32(len(payload))
	if flags&fFIN != 0 {
		p.seq++
	}
}

// recv returns the next segment of this connection the device sent.
func (p *rawPeer) recv() (seg, bool) {
	p.t.Helper()
	for {
		select {
		case f := <-p.frames:
			var pf parsedFrame
			if classify(f, peerMAC, 65535, &pf, false) != rxLegacy || pf.proto != ProtoTCP {
				continue
			}
			tcp := f[pf.l4Off : pf.l4Off+pf.l4Len]
			if binary.BigEndian.Uint16(tcp[0:]) != p.lport || binary.BigEndian.Uint16(tcp[2:]) != p.pport {
				continue
			}
			off := int(tcp[12]>>4) * 4
			return seg{seq: binary.BigEndian.Uint32(tcp[4:]), ack: binary.BigEndian.Uint32(tcp[8:]), flags: tcp[13],
				wnd: binary.BigEndian.Uint16(tcp[14:]), payload: append([]byte(nil), tcp[off:]...)}, true
		case <-time.After(3 * time.Second):
			return seg{}, false
		}
	}
}

// recvData collects n payload bytes from the device.
func (p *rawPeer) recvData(n int) []byte {
	p.t.Helper()
	var out []byte
	for len(out) < n {
		s, ok := p.recv()
		if !ok {
			p.t.Fatalf("device sent %d of %d bytes", len(out), n)
		}
		if len(s.payload) > 0 {
			out = append(out, s.payload...)
		}
	}
	return out
}

// waitNotify reads notifications until one with all of want's flags
// arrives, and returns it.
func (h *hostSide) waitNotify(want rings.NotifyFlags) rings.Notification {
	h.t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		n, ok := h.notification()
		if ok && n.Flags&want == want {
			return n
		}
	}
	var st []string
	for id := rings.StatID(0); id < rings.NumStats; id++ {
		if v := h.dev.Stat(id); v != 0 {
			st = append(st, fmt.Sprintf("%v=%d", id, v))
		}
	}
	h.t.Fatalf("no notification with %v; device %v; engine %+v", want, st, h.dev.EngineCounters())
	return rings.Notification{}
}

func (h *hostSide) offload(idx uint32, lport uint16, rcvNxt uint32) rings.Status {
	st := rings.ConnState{
		Version: rings.ConnStateVersion, State: rings.StateEstablished,
		LocalIP: devIP, RemoteIP: peerIP, LocalPort: lport, RemotePort: 2000,
		LocalMAC: devMAC, NextHopMAC: peerMAC,
		SndUna: 1000, SndNxt: 1000, RcvNxt: rcvNxt, SndWnd: 65535, MSS: 1460,
		RcvBufSize: 64 << 10, RcvAdvertised: 32 << 10, // what the host stack had advertised
	}
	a, _ := h.mem.Alloc(rings.ConnStateSize, 64)
	b, _ := h.mem.Map(a, rings.ConnStateSize)
	st.Encode(rings.ConnStateBlock(b))
	return h.command(rings.Command{Opcode: rings.OpOffload, Conn: idx, Addr: a, Len: rings.ConnStateSize}).Status
}

func (h *hostSide) txDelegated(idx uint32, a rings.Addr, n uint32, fl rings.TxFlags) {
	e := h.tx.Next()
	t := rings.Tx{Conn: idx, Addr: a, Len: n, Flags: fl}
	t.Encode(rings.TxDesc(e))
	h.tx.Commit()
}

func TestDelegatedRingProtocol(t *testing.T) {
	h := newHostSideConfig(t, 8, Config{Engine: delegation.Config{DelayedAck: 1e6}})
	p := newRawPeer(t, h)
	p.lport, p.pport, p.seq, p.ack = 1000, 2000, 5000, 1000

	if st := h.offload(0, 1000, 5000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD: %v", st)
	}
	if st := h.offload(0, 1000, 5000); st != rings.StatusBadState {
		t.Errorf("OFFLOAD of an index in use: %v, want BAD_STATE", st)
	}
	if st := h.offload(1, 1000, 5000); st != rings.StatusBadState {
		t.Errorf("OFFLOAD of a 4-tuple already delegated: %v, want BAD_STATE", st)
	}

	// POST_BUFFERS: two good descriptors and one outside host memory; the
	// status says why it stopped and the result how many it took.
	ub, _ := h.mem.Alloc(2*4096, 64)
	descs, _ := h.mem.Alloc(3*rings.UserBufDescSize, 64)
	db, _ := h.mem.Map(descs, 3*rings.UserBufDescSize)
	for i, u := range []rings.UserBuf{{Addr: ub, Len: 4096, ID: 7}, {Addr: ub + 4096, Len: 4096, ID: 8}, {Addr: 0x99, Len: 4096, ID: 9}} {
		u.Encode(rings.UserBufDesc(db[i*rings.UserBufDescSize:]))
	}
	res := h.command(rings.Command{Opcode: rings.OpPostBuffers, Conn: 0, Addr: descs, Arg0: 3})
	if res.Status != rings.StatusBadAddress || res.Result != 2 {
		t.Fatalf("POST_BUFFERS: status %v result %d, want BAD_ADDRESS and 2 accepted", res.Status, res.Result)
	}

	// Data with PSH completes user buffer 7.
	p.data(bytes.Repeat([]byte{'a'}, 100), fPSH)
	n := h.waitNotify(rings.NtfUserBufDone)
	if n.Conn != 0 || n.Aux != 7 || n.Len != 100 || n.Seq != 5000 || n.Ack != 1000 {
		t.Fatalf("user buffer done: %+v", n)
	}
	if got, _ := h.mem.Map(ub, 100); !bytes.Equal(got, bytes.Repeat([]byte{'a'}, 100)) {
		t.Fatal("user buffer 7 does not hold the data")
	}

	// Sequence threshold.
	if st := h.command(rings.Command{Opcode: rings.OpSetThresholds, Conn: 0, Arg0: 1, Arg1: 5200, Flags: rings.CmdFlagArmSeqThreshold}).Status; st != rings.StatusOK {
		t.Fatalf("SET_THRESHOLDS: %v", st)
	}
	p.data(bytes.Repeat([]byte{'b'}, 150), fPSH)
	n = h.waitNotify(rings.NtfSeqThreshold)
	if n.Seq != 5250 {
		t.Errorf("sequence threshold: Seq %d, want RCV.NXT 5250", n.Seq)
	}

	// No user buffer left: the payload goes to a legacy buffer, and the
	// unit asks for a user buffer.
	p.data(bytes.Repeat([]byte{'c'}, 200), fPSH)
	n = h.waitNotify(rings.NtfLegacyUpload)
	if n.Len != 200 || n.Seq != 5250 || n.Aux >= 8 {
		t.Fatalf("legacy upload: %+v", n)
	}
	if got, _ := h.mem.Map(h.bufs+rings.Addr(int(n.Aux)*h.bufLen), 200); !bytes.Equal(got, bytes.Repeat([]byte{'c'}, 200)) {
		t.Fatal("legacy buffer does not hold the payload")
	}
	if st := h.command(rings.Command{Opcode: rings.OpUpdate, Conn: 0, Arg0: 200}).Status; st != rings.StatusOK {
		t.Errorf("UPDATE credit: %v", st)
	}

	// Transmit 3000 bytes; the peer acknowledges them: ACK threshold.
	src, _ := h.mem.Alloc(8192, 64)
	sb, _ := h.mem.Map(src, 8192)
	for i := range sb {
		sb[i] = byte(i)
	}
	p.ack = 1000
	h.txDelegated(0, src, 3000, rings.TxPush)
	if got := p.recvData(3000); !bytes.Equal(got, sb[:3000]) {
		t.Fatal("the device sent other bytes than the host's buffer")
	}
	p.ack = 4000
	p.data(nil, 0)
	n = h.waitNotify(rings.NtfAckThreshold)
	if n.Ack != 4000 || n.AckCount == 0 {
		t.Fatalf("ACK threshold: %+v", n)
	}

	// Three duplicate ACKs after more data: duplicate ACK notification.
	h.txDelegated(0, src+3000, 4000, rings.TxPush)
	p.recvData(4000)
	for i := 0; i < 3; i++ {
		p.data(nil, 0)
	}
	n = h.waitNotify(rings.NtfDupAck)
	if n.Ack != 4000 {
		t.Errorf("duplicate ACK: %+v", n)
	}
	p.ack = 8000
	p.data(nil, 0)

	// A transmit descriptor outside host memory: an error notification,
	// the connection carries on.
	h.txDelegated(0, 0x42, 10, 0)
	n = h.waitNotify(rings.NtfError)
	if n.Conn != 0 || rings.Status(n.Aux) != rings.StatusBadAddress {
		t.Errorf("bad transmit descriptor: %+v", n)
	}

	// Peer FIN.
	p.data(nil, fFIN)
	n = h.waitNotify(rings.NtfFin)
	if n.Seq != 5451 {
		t.Errorf("FIN: Seq %d, want 5451", n.Seq)
	}
	// Our FIN (CLOSE command), acknowledged: the connection closes.
	if st := h.command(rings.Command{Opcode: rings.OpClose, Conn: 0}).Status; st != rings.StatusOK {
		t.Fatalf("CLOSE: %v", st)
	}
	for {
		s, ok := p.recv()
		if !ok {
			t.Fatal("no FIN from the device")
		}
		if s.flags&fFIN != 0 {
			p.ack = s.seq + uint32(len(s.payload)) + 1
			break
		}
	}
	p.data(nil, 0)
	h.waitNotify(rings.NtfClosed)
	if st := h.command(rings.Command{Opcode: rings.OpSetThresholds, Conn: 0, Arg0: 1}).Status; st != rings.StatusBadState {
		t.Errorf("thresholds on a closed connection: %v, want BAD_STATE", st)
	}
	if st := h.command(rings.Command{Opcode: rings.OpRelease, Conn: 0}).Status; st != rings.StatusOK {
		t.Errorf("RELEASE: %v", st)
	}
	if st := h.command(rings.Command{Opcode: rings.OpRelease, Conn: 0}).Status; st != rings.StatusBadConn {
		t.Errorf("second RELEASE: %v, want BAD_CONN", st)
	}

	// Another connection: the peer resets it.
	p.lport, p.seq, p.ack = 1001, 9000, 1000
	if st := h.offload(1, 1001, 9000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD 1: %v", st)
	}
	p.send(seg{seq: 9000, flags: fRST})
	n = h.waitNotify(rings.NtfRst | rings.NtfClosed)
	if n.Conn != 1 {
		t.Errorf("RST: %+v", n)
	}
}

func TestDelegatedRingTimeout(t *testing.T) {
	h := newHostSideConfig(t, 4, Config{Engine: delegation.Config{MinRTO: 10e6, InitialRTO: 20e6, MaxRetries: 3}})
	p := newRawPeer(t, h)
	p.lport, p.pport = 1002, 2000
	if st := h.offload(2, 1002, 7000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD: %v", st)
	}
	src, _ := h.mem.Alloc(4096, 64)
	start := time.Now()
	h.txDelegated(2, src, 100, rings.TxPush)
	// The peer never answers.
	n := h.waitNotify(rings.NtfTimeout | rings.NtfClosed)
	if n.Conn != 2 || n.Ack != 1000 {
		t.Errorf("timeout: %+v", n)
	}
	t.Logf("timeout after %v", time.Since(start))
}

// TestRxInject: RX_INJECT hands the unit a frame the host received before
// the connection was delegated; it reaches that connection as if it had just
// arrived, and anything else is refused, never uploaded again.
func TestRxInject(t *testing.T) {
	h := newHostSide(t, 8)
	p := newRawPeer(t, h)
	p.lport, p.pport, p.seq, p.ack = 1000, 2000, 5000, 1000
	if st := h.offload(1, 1000, 5000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD: %v", st)
	}
	inject := func(conn uint32, f []byte) rings.Status {
		a, _ := h.mem.Alloc(len(f), 64)
		m, _ := h.mem.Map(a, len(f))
		copy(m, f)
		return h.command(rings.Command{Opcode: rings.OpRxInject, Conn: conn, Addr: a, Len: uint32(len(f))}).Status
	}
	good := p.frame(seg{seq: 5000, ack: 1000, flags: fACK | fPSH, wnd: 65535, payload: []byte("early bytes")})
	other := p.frame(seg{seq: 5000, ack: 1000, flags: fACK, wnd: 65535, payload: []byte("x")})
	binary.BigEndian.PutUint16(other[EthHeaderLen+20+2:], 1001) // another port: no connection
	oip := hdr.IPv4(other[EthHeaderLen:])
	hdr.TCP(oip.Payload()).UpdateChecksum(oip.Src(), oip.Dst())
	corrupt := bytes.Clone(good)
	corrupt[len(corrupt)-1] ^= 0xff
	for name, c := range map[string]struct {
		conn uint32
		f    []byte
		want rings.Status
	}{
		"another connection's index": {2, good, rings.StatusBadConn},
		"a flow not delegated":       {1, other, rings.StatusBadConn},
		"a bad checksum":             {1, corrupt, rings.StatusBadParam},
		"too short":                  {1, good[:10], rings.StatusBadParam},
	} {
		if st := inject(c.conn, c.f); st != c.want {
			t.Errorf("%s: %v, want %v", name, st, c.want)
		}
	}
	if st := h.command(rings.Command{Opcode: rings.OpRxInject, Conn: 1, Addr: 8, Len: uint32(len(good))}).Status; st != rings.StatusBadAddress {
		t.Errorf("bad address: %v", st)
	}
	if st := inject(1, good); st != rings.StatusOK {
		t.Fatalf("RX_INJECT: %v", st)
	}
	n := h.waitNotify(rings.NtfLegacyUpload)
	if n.Conn != 1 || n.Seq != 5000 || n.Len != uint32(len("early bytes")) {
		t.Fatalf("upload %+v", n)
	}
	// The unit acknowledges the injected bytes to the peer.
	for {
		s, ok := p.recv()
		if !ok {
			t.Fatal("the injected bytes were never acknowledged")
		}
		if s.flags&fACK != 0 && s.ack == 5000+uint32(len("early bytes")) {
			break
		}
	}
}
