package iwarp

import (
	"strings"
	"testing"

	"github.com/emunic/emunic/internal/testutil"
)

// wireEvent is one Write into a pipe: who sent which bytes, in the order the
// two QPs produced them.
type wireEvent struct {
	from int
	data []byte
}

// recordSession runs a session with every opcode between two QPs and returns
// the bytes each side put on the wire, in order.
func recordSession(t *testing.T) []wireEvent {
	var evs []wireEvent
	a := newHost(t, "A", hostOpts{initiator: true, pdata: []byte("emunic initiator")})
	b := newHost(t, "B", hostOpts{})
	l := newLink(t, a, b, 5)
	l.ab.tap = func(p []byte) { evs = append(evs, wireEvent{0, append([]byte(nil), p...)}) }
	l.ba.tap = func(p []byte) { evs = append(evs, wireEvent{1, append([]byte(nil), p...)}) }
	_ = b.qp.Accept([]byte("emunic responder"))
	_ = a.qp.Connect()
	l.run()

	const n = 5000
	src := a.buf(n)
	fill(a.bytesAt(src, n), 1)
	sk := a.reg(src, n, 0)
	sink := a.buf(n)
	sinkK := a.reg(sink, n, AccessLocalWrite)
	tgt := b.buf(n)
	tk := b.reg(tgt, n, AccessRemoteWrite)
	rsrc := b.buf(n)
	fill(b.bytesAt(rsrc, n), 2)
	rk := b.reg(rsrc, n, AccessRemoteRead)
	inv1 := b.reg(b.buf(16), 16, AccessRemoteWrite)
	inv2 := b.reg(b.buf(16), 16, AccessRemoteWrite)
	rb := b.buf(8 * n)
	rbk := b.reg(rb, 8*n, AccessLocalWrite)
	for i := 0; i < 6; i++ {
		b.postRecv(uint64(i), SGE{Addr: uint64(rb) + uint64(i)*n, Length: n, LKey: rbk})
	}
	sge := [4]SGE{{Addr: uint64(src), Length: 3000, LKey: sk}}
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 1, NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 2, RemoteAddr: uint64(tgt), RKey: tk, NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: 3, RemoteAddr: uint64(rsrc), RKey: rk, NumSGE: 1,
		SGL: [4]SGE{{Addr: uint64(sink), Length: 4000, LKey: sinkK}}})
	a.postSend(SendWR{Opcode: WRSend, Flags: WRSolicited, WRID: 4, NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRSendInv, WRID: 5, InvSTag: inv1, NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRSendInv, Flags: WRSolicited, WRID: 6, InvSTag: inv2, NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRRDMAWriteImm, Flags: WRSignaled, WRID: 7, RemoteAddr: uint64(tgt), RKey: tk, ImmData: 0x1122334455667788,
		NumSGE: 1, SGL: sge})
	a.postSend(SendWR{Opcode: WRRDMAWriteImm, Flags: WRSignaled | WRSolicited, WRID: 8, RemoteAddr: uint64(tgt), RKey: tk, ImmData: 9})
	l.run()
	if a.qp.State() != StateRTS || b.qp.State() != StateRTS {
		t.Fatalf("states %v %v", a.qp.State(), b.qp.State())
	}
	// RFC 7306 atomics are framed but not executed by the engine: put a
	// request and a response on the wire by hand.
	evs = append(evs, wireEvent{0, atomicFPDU(true)}, wireEvent{1, atomicFPDU(false)})
	// A Write to an STag B does not have ends the session with a Terminate.
	a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 9, RemoteAddr: 0x1000, RKey: 0xDEAD00, NumSGE: 1, SGL: sge})
	l.run()
	if te, ok := b.qp.LastTermError(); !ok || te != (TermError{LayerDDP, ETypeTaggedBuffer, CodeTInvalidSTag}) {
		t.Fatalf("terminate %v", te)
	}
	return evs
}

func atomicFPDU(request bool) []byte {
	var u []byte
	if request {
		u = make([]byte, DDPUntaggedHeaderLen+AtomicRequestLen)
		(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpAtomicRequest), QN: QNAtomicRequest, MSN: 1}).Encode(u)
		(&AtomicRequest{Op: AtomicFetchAdd, ReqID: 1, STag: 0x1234, TO: 0x10000, Data: 5, Mask: ^uint64(0)}).Encode(u[DDPUntaggedHeaderLen:])
	} else {
		u = make([]byte, DDPUntaggedHeaderLen+AtomicResponseLen)
		(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpAtomicResponse), QN: QNAtomicResponse, MSN: 1}).Encode(u)
		(&AtomicResponse{ReqID: 1, Value: 42}).Encode(u[DDPUntaggedHeaderLen:])
	}
	p := FPDUFields{ULPDU: u}
	b := make([]byte, p.Len())
	p.Encode(b)
	return b
}

// sessionPcap frames the recorded bytes as a TCP conversation: the MPA
// frames in one segment each, then one FPDU per segment, as a TCP engine
// calling Transmit with one MSS of room sends them.
func sessionPcap(t *testing.T, evs []wireEvent) (pcap []byte, fpdus int) {
	s := newTCPSession(t)
	mpaDone := [2]bool{}
	for _, ev := range evs {
		d := ev.data
		if !mpaDone[ev.from] {
			var f MPAFrameFields
			n, err := f.Decode(d)
			if err != nil {
				t.Fatalf("first bytes from %d are not an MPA frame: %v", ev.from, err)
			}
			s.send(ev.from, d[:n], 1460)
			d = d[n:]
			mpaDone[ev.from] = true
		}
		for len(d) > 0 {
			n := FPDU(d).WireLen()
			s.send(ev.from, d[:n], 1460)
			d = d[n:]
			fpdus++
		}
	}
	return s.close(), fpdus
}

// TestTsharkDecodesSession writes a pcap of a session carrying every RDMAP
// opcode and has Debian's tshark decode it with the iWARP dissectors: every
// opcode decoded, every CRC good, nothing malformed, no expert warnings or
// errors.
func TestTsharkDecodesSession(t *testing.T) {
	tshark := testutil.NeedTshark(t)
	pcap, nfpdu := sessionPcap(t, recordSession(t))
	d := testutil.DecodeIWARP(t, tshark, pcapFile(t, pcap))
	if len(d.Malformed) > 0 {
		t.Errorf("malformed frames:\n%s", strings.Join(d.Malformed, "\n"))
	}
	if len(d.Expert) > 0 {
		t.Errorf("expert warnings/errors:\n%s", strings.Join(d.Expert, "\n"))
	}
	if d.MPARequests != 1 || d.MPAReplies != 1 {
		t.Errorf("MPA request/reply frames decoded: %d/%d", d.MPARequests, d.MPAReplies)
	}
	if d.FPDUs != nfpdu {
		t.Errorf("tshark decoded %d FPDUs with a CRC check, the session has %d", d.FPDUs, nfpdu)
	}
	var missing []string
	for op := OpWrite; op <= OpAtomicResponse; op++ {
		if d.Opcodes[int(op)] == 0 {
			missing = append(missing, op.String())
		}
	}
	if len(missing) > 0 {
		t.Errorf("opcodes tshark did not decode: %v (decoded %v)", missing, d.Opcodes)
	}
	if d.GoodCRCs != nfpdu || d.BadCRCs != 0 {
		t.Errorf("tshark: %d good and %d bad CRCs in %d FPDUs", d.GoodCRCs, d.BadCRCs, nfpdu)
	}
	if d.ExpertTable != "" {
		t.Errorf("tshark -z expert,warn:\n%s", d.ExpertTable)
	}
	t.Logf("%d FPDUs; opcodes decoded %v", nfpdu, d.Opcodes)
}
