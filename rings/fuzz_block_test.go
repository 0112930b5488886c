package rings

import (
	"math/rand/v2"
	"testing"

	"github.com/emunic/emunic/internal/fuzzcorpus"
)

// Fuzzers for the blocks and RDMA queue entries that the generic entry
// fuzzers in fuzz_test.go do not cover: receive queue entries, completion
// queue entries, the QP config block and user buffer descriptors. Each is
// seeded from its encoder and checks the same three properties: no panic,
// every truncated prefix of a whole block rejected, and Decode(Encode(x))
// == x with Encode reproducing the decoded bytes (reserved ones zero).
//
// The checked-in seed corpora in testdata/fuzz are written from the
// encoders by
//
//	go test -run TestWriteFuzzCorpus -update-corpus ./rings/

// blockCodec adapts one block type to checkBlock.
type blockCodec[T comparable] struct {
	size     int
	ctrl     int // leading bytes that belong to the ring (control word): Encode leaves them alone
	decode   func(*T, []byte) error
	encode   func(*T, []byte)
	reserved func(i int) bool // bytes Encode writes as zero whatever the fields
	strict   bool             // Decode may refuse a whole block (nonzero reserved bytes)
}

func (c blockCodec[T]) bytes(v T) []byte {
	b := make([]byte, c.size)
	c.encode(&v, b)
	return b
}

func (c blockCodec[T]) seed(f *testing.F, seeds [][]byte) {
	for _, s := range seeds {
		f.Add(s)
	}
	f.Add([]byte{})
	f.Add(make([]byte, c.size-1))
	f.Add(make([]byte, c.size+5))
}

func (c blockCodec[T]) check(t *testing.T, data []byte) {
	var v T
	err := c.decode(&v, data)
	if len(data) < c.size {
		if err == nil {
			t.Fatalf("Decode accepted %d bytes of a %d-byte block", len(data), c.size)
		}
		return
	}
	if err != nil {
		if !c.strict {
			t.Fatalf("Decode of %d bytes: %v", len(data), err)
		}
		return
	}
	for n := 0; n < c.size; n++ {
		var w T
		if err := c.decode(&w, data[:n]); err == nil {
			t.Fatalf("Decode accepted a %d-byte prefix of a %d-byte block", n, c.size)
		}
	}
	checkReencode(t, c.size, c.ctrl, c.encode, c.decode, c.reserved, data, v)
}

var recvWRCodec = blockCodec[RecvWR]{
	size: RQEntrySize, ctrl: 4,
	decode:   func(w *RecvWR, b []byte) error { return w.Decode(b) },
	encode:   func(w *RecvWR, b []byte) { w.Encode(b) },
	reserved: func(i int) bool { return i >= 0x05 && i < 0x08 },
}

func recvWRSeeds() [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, RQEntrySize))
	out := [][]byte{
		recvWRCodec.bytes(RecvWR{}),
		recvWRCodec.bytes(RecvWR{WRID: 77, NumSGE: 2, SGL: [MaxRecvSGE]SGE{{0x10000, 2048, 3}, {0x20000, 4096, 6}}}),
	}
	for range 4 {
		w := RecvWR{WRID: r.Uint64(), NumSGE: r.IntN(MaxRecvSGE + 1)}
		for i := range w.NumSGE {
			w.SGL[i] = SGE{Addr: r.Uint64(), Length: r.Uint32(), LKey: r.Uint32()}
		}
		out = append(out, recvWRCodec.bytes(w))
	}
	return out
}

func FuzzRecvWR(f *testing.F) {
	recvWRCodec.seed(f, recvWRSeeds())
	f.Fuzz(func(t *testing.T, data []byte) {
		recvWRCodec.check(t, data)
		if len(data) >= RQEntrySize {
			e := RQEntry(data)
			_, _ = e.NumSGE(), e.WRID()
		}
	})
}

var completionCodec = blockCodec[Completion]{
	size: CQEntrySize, ctrl: 4,
	decode:   func(c *Completion, b []byte) error { return c.Decode(b) },
	encode:   func(c *Completion, b []byte) { c.Encode(b) },
	reserved: func(i int) bool { return i == 0x07 },
}

func completionSeeds() [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, CQEntrySize))
	out := [][]byte{
		completionCodec.bytes(Completion{}),
		completionCodec.bytes(Completion{Opcode: WCRecvRDMAWithImm, Status: WCRemAccessErr, Flags: WCWithImm,
			WRID: 5, ByteLen: 6, QPN: 7, ImmData: 8}),
		completionCodec.bytes(Completion{Opcode: WCRecv, Status: WCWRFlushErr, WRID: 1 << 63, QPN: 1}),
	}
	for range 4 {
		out = append(out, completionCodec.bytes(Completion{Opcode: WCOpcode(r.Uint32()), Status: WCStatus(r.Uint32()),
			Flags: WCFlags(r.Uint32()), WRID: r.Uint64(), ByteLen: r.Uint32(), QPN: r.Uint32(), ImmData: r.Uint64()}))
	}
	return out
}

func FuzzCompletion(f *testing.F) {
	completionCodec.seed(f, completionSeeds())
	f.Fuzz(func(t *testing.T, data []byte) {
		completionCodec.check(t, data)
		var c Completion
		if c.Decode(data) == nil {
			_, _, _ = c.String(), c.Opcode.String(), c.Status.String()
		}
	})
}

var qpConfigCodec = blockCodec[QPConfig]{
	size:   QPConfigSize,
	decode: func(q *QPConfig, b []byte) error { return q.Decode(b) },
	encode: func(q *QPConfig, b []byte) { q.Encode(b) },
	strict: true,
}

func qpConfigSeeds() [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, QPConfigSize))
	out := [][]byte{
		qpConfigCodec.bytes(QPConfig{}),
		qpConfigCodec.bytes(QPConfig{PD: 1, IRD: 8, ORD: 8, SendCQ: 1, RecvCQ: 2, SQBase: ArenaBase + 0x1000, SQCount: 64,
			RQBase: ArenaBase + 0x9000, RQCount: 64, PrivAddr: ArenaBase + 0x20000, PrivLen: 16, PeerPrivAddr: ArenaBase + 0x21000}),
	}
	for range 4 {
		out = append(out, qpConfigCodec.bytes(QPConfig{PD: r.Uint32(), Flags: r.Uint32(), IRD: uint16(r.Uint32()),
			ORD: uint16(r.Uint32()), SendCQ: r.Uint32(), RecvCQ: r.Uint32(), SQBase: Addr(r.Uint64()), SQCount: r.Uint32(),
			RQBase: Addr(r.Uint64()), RQCount: r.Uint32(), PrivAddr: Addr(r.Uint64()), PrivLen: r.Uint32(),
			PeerPrivAddr: Addr(r.Uint64())}))
	}
	bad := qpConfigCodec.bytes(QPConfig{PD: 1})
	bad[0x50] = 1 // a reserved byte set: refused
	return append(out, bad)
}

func FuzzQPConfig(f *testing.F) {
	qpConfigCodec.seed(f, qpConfigSeeds())
	f.Fuzz(func(t *testing.T, data []byte) { qpConfigCodec.check(t, data) })
}

var userBufCodec = blockCodec[UserBuf]{
	size:   UserBufDescSize,
	decode: func(u *UserBuf, b []byte) error { return u.Decode(b) },
	encode: func(u *UserBuf, b []byte) { u.Encode(b) },
}

func userBufSeeds() [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, UserBufDescSize))
	out := [][]byte{
		userBufCodec.bytes(UserBuf{}),
		userBufCodec.bytes(UserBuf{Addr: ArenaBase + 0x4000, Len: 16 << 10, ID: 3}),
	}
	for range 4 {
		out = append(out, userBufCodec.bytes(UserBuf{Addr: Addr(r.Uint64()), Len: r.Uint32(), ID: r.Uint32()}))
	}
	return out
}

func FuzzUserBuf(f *testing.F) {
	userBufCodec.seed(f, userBufSeeds())
	f.Fuzz(func(t *testing.T, data []byte) { userBufCodec.check(t, data) })
}

// TestBlockCodecs runs the fuzzers' checks on random encodings as a plain
// test.
func TestBlockCodecs(t *testing.T) {
	for _, s := range recvWRSeeds() {
		recvWRCodec.check(t, s)
	}
	for _, s := range completionSeeds() {
		completionCodec.check(t, s)
	}
	for _, s := range qpConfigSeeds() {
		qpConfigCodec.check(t, s)
	}
	for _, s := range userBufSeeds() {
		userBufCodec.check(t, s)
	}
}

// entrySeeds is n encodings of random field values plus a truncated one,
// as entryCodec.seed adds them.
func entrySeeds[T comparable](c entryCodec[T], n int, random func(*rand.Rand) T) [][]byte {
	r := rand.New(rand.NewPCG(0x5eed, uint64(c.size)))
	var out [][]byte
	for range n {
		v := random(r)
		b := make([]byte, c.size)
		le.PutUint32(b, r.Uint32())
		c.encode(&v, b)
		out = append(out, b)
	}
	return append(out, out[0][:c.size-1])
}

// TestWriteFuzzCorpus writes the seed corpus of every fuzz target in the
// package from the encoders (with -update-corpus).
func TestWriteFuzzCorpus(t *testing.T) {
	fuzzcorpus.Updating(t)
	fuzzcorpus.Write(t, "FuzzCommandDecode", entrySeeds(commandCodec, 6, randomCommand))
	fuzzcorpus.Write(t, "FuzzNotificationDecode", entrySeeds(notificationCodec, 6, randomNotification))
	fuzzcorpus.Write(t, "FuzzTxDecode", entrySeeds(txCodec, 4, randomTx))
	fuzzcorpus.Write(t, "FuzzRxDecode", entrySeeds(rxCodec, 4, randomRx))

	cs := sampleConnState()
	blk := make(ConnStateBlock, ConnStateSize)
	cs.Encode(blk)
	closed := ConnState{Version: ConnStateVersion, State: StateClosed}
	blk2 := make(ConnStateBlock, ConnStateSize)
	closed.Encode(blk2)
	fuzzcorpus.Write(t, "FuzzConnStateDecode", [][]byte{blk, blk2, blk[:ConnStateSize-1]})

	var sq [][]byte
	for _, w := range sendWRSamples() {
		e := make([]byte, SQEntrySize)
		w.Encode(e)
		sq = append(sq, e)
	}
	fuzzcorpus.Write(t, "FuzzSendWR", append(sq, sq[0][:SQEntrySize-1]))

	fuzzcorpus.Write(t, "FuzzRecvWR", append(recvWRSeeds(), recvWRSeeds()[1][:RQEntrySize-1]))
	fuzzcorpus.Write(t, "FuzzCompletion", append(completionSeeds(), completionSeeds()[1][:CQEntrySize-1]))
	fuzzcorpus.Write(t, "FuzzQPConfig", append(qpConfigSeeds(), qpConfigSeeds()[1][:QPConfigSize-1]))
	fuzzcorpus.Write(t, "FuzzUserBuf", append(userBufSeeds(), userBufSeeds()[1][:UserBufDescSize-1]))
}

// sendWRSamples is one send WR of each kind: SGL, inline, atomic.
func sendWRSamples() []SendWR {
	sgl := SendWR{Opcode: WRRDMAWriteImm, Flags: WRSignaled | WRSolicited, WRID: 0x1122334455667788, RemoteAddr: 0xAABB,
		RKey: 0x1234, InvSTag: 0x5678, ImmData: 0xDEADBEEF, NumSGE: MaxSendSGE}
	for i := range sgl.SGL {
		sgl.SGL[i] = SGE{Addr: uint64(i) << 40, Length: uint32(i + 1), LKey: uint32(0x100 * (i + 1))}
	}
	in := SendWR{Opcode: WRSend, Flags: WRInline | WRSignaled, WRID: 9, InlineLen: 5}
	copy(in.InlineData[:], "hello")
	return []SendWR{
		{Opcode: WRSend, Flags: WRSignaled, NumSGE: 1, SGL: [MaxSendSGE]SGE{{1, 2, 3}}},
		sgl,
		in,
		{Opcode: WRRDMARead, WRID: 3, RemoteAddr: 0x1000, RKey: 7, NumSGE: 1, SGL: [MaxSendSGE]SGE{{0x2000, 512, 8}}},
	}
}
