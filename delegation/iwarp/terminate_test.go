package iwarp

import (
	"bytes"
	"testing"

	"github.com/emunic/emunic/rings"
)

// remoteFault names a way to break a remote access.
type remoteFault int

const (
	faultDeregistered remoteFault = iota
	faultOutOfBounds
	faultNoRight
	faultOtherPD
	faultWrongKey
	faultTOWrap
)

var faultNames = []string{"deregistered", "out-of-bounds", "no-right", "other-PD", "wrong-key", "TO-wrap"}

// badTarget registers B's n-byte region at a (with the right rights unless
// the fault removes them) and returns the STag and tagged offset to use.
func badTarget(b *host, a uint64, n int, right Access, f remoteFault) (stag uint32, to uint64) {
	pd := b.qp.cfg.PD
	acc := right | AccessLocalWrite
	switch f {
	case faultNoRight:
		acc = AccessLocalWrite | (AccessRemoteRead|AccessRemoteWrite)&^right
	case faultOtherPD:
		pd++
	}
	b.dma.setup = true
	stag, err := b.mem.Register(pd, rings.Addr(a), a, uint64(n), acc)
	b.dma.setup = false
	if err != nil {
		b.t.Fatal(err)
	}
	to = a
	switch f {
	case faultDeregistered:
		_ = b.mem.Deregister(stag)
	case faultOutOfBounds:
		to = a + uint64(n) - 10 // the access runs 10+ bytes past the end
	case faultWrongKey:
		stag ^= 0x01
	case faultTOWrap:
		to = ^uint64(0) - 5
	}
	return stag, to
}

func TestRemoteWriteFaults(t *testing.T) {
	want := map[remoteFault]TermError{
		faultDeregistered: {LayerDDP, ETypeTaggedBuffer, CodeTInvalidSTag},
		faultWrongKey:     {LayerDDP, ETypeTaggedBuffer, CodeTInvalidSTag},
		faultOutOfBounds:  {LayerDDP, ETypeTaggedBuffer, CodeTBaseBounds},
		faultOtherPD:      {LayerDDP, ETypeTaggedBuffer, CodeTNotAssociated},
		faultTOWrap:       {LayerDDP, ETypeTaggedBuffer, CodeTTOWrap},
		faultNoRight:      {LayerRDMAP, ETypeRemoteProtection, CodeAccessRights},
	}
	for f := faultDeregistered; f <= faultTOWrap; f++ {
		t.Run(faultNames[f], func(t *testing.T) {
			a, b, l := pair(t, uint64(f)+10)
			const n = 4096
			tgt := b.buf(n)
			stag, to := badTarget(b, uint64(tgt), n, AccessRemoteWrite, f)
			src := a.buf(n)
			fill(a.bytesAt(src, n), 5)
			srcKey := a.reg(src, n, 0)
			// B has receives posted that must come back flushed.
			rbuf := b.buf(256)
			rkey := b.reg(rbuf, 256, AccessLocalWrite)
			b.postRecv(1, SGE{Addr: uint64(rbuf), Length: 128, LKey: rkey})
			b.postRecv(2, SGE{Addr: uint64(rbuf) + 128, Length: 128, LKey: rkey})
			a.postRecv(3)
			// A: a good Send first (B's first FPDU), then the bad Write, then a Read and a Send.
			rsrc := b.buf(64)
			rsrcKey := b.reg(rsrc, 64, AccessRemoteRead)
			rsink := a.buf(64)
			a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 10, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: 100, LKey: srcKey}}})
			a.postSend(SendWR{Opcode: WRRDMAWrite, Flags: WRSignaled, WRID: 11, RemoteAddr: to, RKey: stag, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: srcKey}}})
			a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: 12, RemoteAddr: uint64(rsrc), RKey: rsrcKey, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(rsink), Length: 64, LKey: a.reg(rsink, 64, AccessLocalWrite)}}})
			a.postSend(SendWR{Opcode: WRSend, WRID: 13, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: 10, LKey: srcKey}}})
			l.run()

			te, ok := b.qp.LastTermError()
			if !ok || te != want[f] {
				t.Fatalf("B sent Terminate %v (%v), want %v", te, ok, want[f])
			}
			if pt, ok := a.qp.PeerTermError(); !ok || pt != want[f] {
				t.Fatalf("A received Terminate %v (%v)", pt, ok)
			}
			if a.qp.State() != StateError || b.qp.State() != StateError {
				t.Fatalf("states A %v B %v", a.qp.State(), b.qp.State())
			}
			if !b.guardsIntact(tgt, n) || !bytes.Equal(b.bytesAt(tgt, n), make([]byte, n)) {
				t.Fatal("bytes placed into or around the refused region")
			}
			if !a.guardsIntact(rsink, 64) || !bytes.Equal(a.bytesAt(rsink, 64), make([]byte, 64)) {
				t.Fatal("read sink touched")
			}
			wantCompletion(t, b.poll(),
				Completion{Opcode: WCRecv, WRID: 1, ByteLen: 100},
				Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 2})
			// The Send and the Write completed when TCP took their bytes
			// (iWARP semantics); the Read the peer never answered is the
			// one refused; what follows is flushed.
			wantCompletion(t, a.poll(),
				Completion{Opcode: WCSend, WRID: 10},
				Completion{Opcode: WCRDMAWrite, WRID: 11},
				Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 3},
				Completion{Opcode: WCRDMARead, Status: WCRemAccessErr, WRID: 12},
				Completion{Opcode: WCSend, Status: WCWRFlushErr, WRID: 13})
			// Work posted after the error is flushed too.
			a.postSend(SendWR{Opcode: WRSend, WRID: 14})
			b.postRecv(4)
			a.qp.Poll()
			b.qp.Poll()
			wantCompletion(t, a.poll(), Completion{Opcode: WCSend, Status: WCWRFlushErr, WRID: 14})
			wantCompletion(t, b.poll(), Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 4})
			if !a.qp.WantClose() || !b.qp.WantClose() || !a.hasEvent(EvTerminate) || !b.hasEvent(EvTerminate) {
				t.Fatal("close not requested")
			}
			if b.qp.Stats().TerminatesSent != 1 || a.qp.Stats().TerminatesRecv != 1 {
				t.Fatal("terminate counters")
			}
		})
	}
}

func TestRemoteReadFaults(t *testing.T) {
	want := map[remoteFault]TermError{
		faultDeregistered: {LayerRDMAP, ETypeRemoteProtection, CodeInvalidSTag},
		faultWrongKey:     {LayerRDMAP, ETypeRemoteProtection, CodeInvalidSTag},
		faultOutOfBounds:  {LayerRDMAP, ETypeRemoteProtection, CodeBaseBounds},
		faultNoRight:      {LayerRDMAP, ETypeRemoteProtection, CodeAccessRights},
		faultOtherPD:      {LayerRDMAP, ETypeRemoteProtection, CodeSTagNotAssociated},
		faultTOWrap:       {LayerRDMAP, ETypeRemoteProtection, CodeTOWrap},
	}
	for f := faultDeregistered; f <= faultTOWrap; f++ {
		t.Run(faultNames[f], func(t *testing.T) {
			a, b, l := pair(t, uint64(f)+20)
			const n = 4096
			src := b.buf(n)
			fill(b.bytesAt(src, n), 3)
			stag, to := badTarget(b, uint64(src), n, AccessRemoteRead, f)
			sink := a.buf(n)
			sinkKey := a.reg(sink, n, AccessLocalWrite)
			one := a.buf(8)
			oneKey := a.reg(one, 8, 0)
			b.postRecv(1)
			var term []byte
			l.ba.tap = func(p []byte) { term = append(term, p...) }
			a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 10})
			a.postSend(SendWR{Opcode: WRRDMARead, Flags: WRSignaled, WRID: 11, RemoteAddr: to, RKey: stag, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(sink), Length: n, LKey: sinkKey}}})
			a.postSend(SendWR{Opcode: WRSend, Flags: WRSignaled, WRID: 12, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(one), Length: 8, LKey: oneKey}}})
			l.run()
			if te, ok := b.qp.LastTermError(); !ok || te != want[f] {
				t.Fatalf("B sent %v, want %v", te, want[f])
			}
			if a.qp.State() != StateError || b.qp.State() != StateError {
				t.Fatalf("states A %v B %v", a.qp.State(), b.qp.State())
			}
			if !a.guardsIntact(sink, n) || !bytes.Equal(a.bytesAt(sink, n), make([]byte, n)) || !b.guardsIntact(src, n) {
				t.Fatal("bytes placed into or around the sink")
			}
			wantCompletion(t, a.poll(),
				Completion{Opcode: WCSend, WRID: 10},
				Completion{Opcode: WCRDMARead, Status: WCRemAccessErr, WRID: 11},
				Completion{Opcode: WCSend, Status: WCWRFlushErr, WRID: 12})
			// The Terminate on the wire: QN 2, MSN 1, with the Read
			// Request's DDP header (D, M) and its RDMA header (R).
			var fp FPDUFields
			if _, err := fp.Decode(term); err != nil {
				t.Fatal(err)
			}
			var d DDP
			k, _ := d.Decode(fp.ULPDU)
			if d.Tagged || !d.Last || d.QN != QNTerminate || d.MSN != 1 || d.MO != 0 || Opcode(d.ULPCtrl&15) != OpTerminate {
				t.Fatalf("terminate DDP header %v", &d)
			}
			var tm Terminate
			if _, err := tm.Decode(fp.ULPDU[k:]); err != nil || !tm.M || !tm.D || !tm.R || tm.TermError != want[f] {
				t.Fatalf("terminate %+v %v", tm, err)
			}
			var rr ReadRequest
			_, _ = rr.Decode(tm.RDMAHdr)
			if rr.SrcSTag != stag || rr.SrcTO != to || rr.Size != n || rr.SinkSTag != sinkKey || tm.SegLen != DDPUntaggedHeaderLen+ReadRequestLen {
				t.Fatalf("terminated read request %+v, seg len %d", rr, tm.SegLen)
			}
			if DDPHeader(tm.DDPHeader).QN() != QNReadRequest || DDPHeader(tm.DDPHeader).MSN() != 1 {
				t.Fatal("terminated DDP header")
			}
		})
	}
}

// TestCorruptedByte flips one byte of the third FPDU of a Write: CRC error,
// Terminate (LLP/MPA/CRC), ERROR on both sides, the first two FPDUs placed
// and nothing from the third on.
func TestCorruptedByte(t *testing.T) {
	for _, where := range []string{"length", "header", "payload", "pad+crc"} {
		t.Run(where, func(t *testing.T) {
			a, b, l := pair(t, 30)
			const n = 10_000
			src := a.buf(n)
			fill(a.bytesAt(src, n), 8)
			tgt := b.buf(n)
			b.postRecv(1)
			rkey := b.reg(tgt, n, AccessRemoteWrite)
			a.postSend(SendWR{Opcode: WRSend, WRID: 1})
			l.run()
			a.postSend(SendWR{Opcode: WRRDMAWrite, WRID: 2, RemoteAddr: uint64(tgt), RKey: rkey, NumSGE: 1,
				SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: a.reg(src, n, 0)}}})
			per := a.qp.MULPDU() - DDPTaggedHeaderLen
			l.mangle = func(p []byte) {
				off := 0
				for i := 0; i < 2; i++ {
					off += FPDU(p[off:]).WireLen()
				}
				f := p[off : off+FPDU(p[off:]).WireLen()]
				switch where {
				case "length":
					f[1] ^= 0x04 // shorter: the CRC lands elsewhere
				case "header":
					f[2+6] ^= 0x01 // the TO
				case "payload":
					f[len(f)/2] ^= 0x80
				case "pad+crc":
					f[len(f)-1] ^= 0x01
				}
				l.mangle = nil
			}
			l.run()
			if te, ok := b.qp.LastTermError(); !ok || te != (TermError{LayerLLP, ETypeMPA, CodeMPACRC}) {
				t.Fatalf("B sent %v %v", te, ok)
			}
			if b.qp.Stats().CRCErrors != 1 || a.qp.State() != StateError || b.qp.State() != StateError {
				t.Fatalf("CRC errors %d, states %v %v", b.qp.Stats().CRCErrors, a.qp.State(), b.qp.State())
			}
			got, want := b.bytesAt(tgt, n), a.bytesAt(src, n)
			if !bytes.Equal(got[:2*per], want[:2*per]) {
				t.Fatal("the good FPDUs were not placed")
			}
			if !bytes.Equal(got[2*per:], make([]byte, n-2*per)) || !b.guardsIntact(tgt, n) {
				t.Fatal("bytes placed from the corrupted FPDU or after it")
			}
		})
	}
}
