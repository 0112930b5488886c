package iwarp

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
)

// fuzzTarget is a responder in FPDU mode with regions of every kind
// registered and receives posted, ready to take a hostile stream.
type fuzzTarget struct {
	h     *host
	stags []uint32
}

func newFuzzTarget(t testing.TB) *fuzzTarget {
	h := newHost(t, "B", hostOpts{arenaSize: 1 << 20, sqCount: 16, cqCount: 64, ird: 4, memSize: 16, memSeed: 1})
	_ = h.qp.Accept(nil)
	f := MPAFrameFields{CRC: true, Rev: 1}
	req := make([]byte, f.Len())
	f.Encode(req)
	h.qp.Receive(req)
	drain(h.qp)
	ft := &fuzzTarget{h: h}
	for _, acc := range []Access{AccessRemoteWrite, AccessRemoteRead, AccessLocalWrite, AccessRemoteWrite | AccessRemoteRead | AccessLocalWrite} {
		a := h.buf(4096)
		ft.stags = append(ft.stags, h.reg(a, 4096, acc))
	}
	rb := h.buf(8192)
	rk := h.reg(rb, 8192, AccessLocalWrite)
	for i := 0; i < 8; i++ {
		h.postRecv(uint64(i), SGE{Addr: uint64(rb) + uint64(i)*1024, Length: 1000, LKey: rk})
	}
	return ft
}

// frame turns data into a stream: raw, or (mode bit 0) as ULPDUs given as
// [u16 length][bytes] records wrapped into FPDUs with correct CRCs, so the
// fuzzer reaches DDP and RDMAP validation.
func frameFuzz(data []byte) []byte {
	if len(data) == 0 || data[0]&1 == 0 {
		return data
	}
	var out []byte
	data = data[1:]
	for len(data) >= 2 {
		n := int(binary.BigEndian.Uint16(data)) % 2048
		data = data[2:]
		n = min(n, len(data))
		p := FPDUFields{ULPDU: data[:n]}
		b := make([]byte, p.Len())
		p.Encode(b)
		out = append(out, b...)
		data = data[n:]
	}
	return out
}

func (ft *fuzzTarget) feed(t testing.TB, stream []byte, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 3))
	for len(stream) > 0 {
		k := min(1+r.IntN(1500), len(stream))
		ft.h.qp.Receive(stream[:k])
		stream = stream[k:]
		if r.IntN(4) == 0 {
			drain(ft.h.qp)
		}
	}
	drain(ft.h.qp)
	ft.h.poll()
	if ft.h.dma.bad != nil {
		t.Fatalf("DMA outside registered regions: %v", ft.h.dma.bad)
	}
}

// validULPDUs returns a record stream of plausible segments aimed at the
// target's STags, for seeds.
func (ft *fuzzTarget) validULPDUs() []byte {
	out := []byte{1}
	add := func(u []byte) {
		out = binary.BigEndian.AppendUint16(out, uint16(len(u)))
		out = append(out, u...)
	}
	reg := func(i int) Region { r, _ := ft.h.mem.Lookup(ft.stags[i]); return r }
	u := make([]byte, 14+100)
	(&DDP{Tagged: true, Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpWrite), STag: ft.stags[0], TO: reg(0).VA + 10}).Encode(u)
	add(u)
	u = make([]byte, 18+50)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSend), QN: 0, MSN: 1}).Encode(u)
	add(u)
	u = make([]byte, 18+28)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpReadRequest), QN: 1, MSN: 1}).Encode(u)
	(&ReadRequest{SinkSTag: 0x1234, SinkTO: 0, Size: 3000, SrcSTag: ft.stags[1], SrcTO: reg(1).VA}).Encode(u[18:])
	add(u)
	u = make([]byte, 18+8)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpImmediate), QN: 0, MSN: 2}).Encode(u)
	add(u)
	u = make([]byte, 18+20)
	(&DDP{Version: 1, ULPCtrl: RDMAPCtrl(OpSendSEInv), ULP32: ft.stags[3], QN: 0, MSN: 3}).Encode(u)
	add(u)
	u = make([]byte, 18+20)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpSendSEInv), ULP32: ft.stags[3], QN: 0, MSN: 3, MO: 20}).Encode(u)
	add(u)
	u = make([]byte, 18+6+14)
	(&DDP{Last: true, Version: 1, ULPCtrl: RDMAPCtrl(OpTerminate), QN: 2, MSN: 1}).Encode(u)
	add(u)
	return out
}

func FuzzReceive(f *testing.F) {
	ft := newFuzzTarget(f)
	f.Add(ft.validULPDUs(), uint64(1))
	f.Add([]byte{0, 0, 10, 0xC1, 0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint64(2))
	f.Add([]byte{1, 0, 14, 0xC1, 0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}, uint64(3))
	f.Fuzz(func(t *testing.T, data []byte, seed uint64) {
		ft := newFuzzTarget(t)
		ft.feed(t, frameFuzz(data), seed)
	})
}

// TestReceiveRandomStreams is the fuzzer's regular-test form: mutations of
// valid segments and raw noise, fed in random chunks.
func TestReceiveRandomStreams(t *testing.T) {
	r := rand.New(rand.NewPCG(77, 78))
	var placed, reads uint64
	iters := 400
	if testing.Short() {
		iters = 50
	}
	for i := 0; i < iters; i++ {
		ft := newFuzzTarget(t)
		data := ft.validULPDUs()
		switch i % 3 {
		case 0: // flip bytes of valid segments (CRCs recomputed)
			for k := 0; k < 1+r.IntN(8); k++ {
				data[1+r.IntN(len(data)-1)] ^= byte(1 << r.IntN(8))
			}
		case 1: // splice in random records
			for k := 0; k < 4; k++ {
				n := r.IntN(64)
				rec := binary.BigEndian.AppendUint16(nil, uint16(n))
				for j := 0; j < n; j++ {
					rec = append(rec, byte(r.Uint32()))
				}
				data = append(data, rec...)
			}
		case 2: // raw noise
			data = make([]byte, r.IntN(4096))
			for j := range data {
				data[j] = byte(r.Uint32())
			}
			data[0] &^= 1
		}
		ft.feed(t, frameFuzz(data), r.Uint64())
		placed += ft.h.qp.Stats().Placed
		reads += ft.h.qp.Stats().ReadResponsesSent
	}
	if placed == 0 || reads == 0 {
		t.Fatalf("the streams never got past validation: %d bytes placed, %d read responses", placed, reads)
	}
}
