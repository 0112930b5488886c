package iwarp

import (
	"fmt"
	"testing"

	"github.com/emunic/emunic/rings"
)

// benchQP is a QP on a plain arena (no checking DMA), in RTS.
type benchQP struct {
	arena *rings.Arena
	mem   *MemTable
	qp    *QP
	sqP   *rings.Producer
	rqP   *rings.Producer
	cqC   *rings.Consumer
}

func newBenchQP(tb testing.TB, initiator bool) *benchQP {
	ar, err := rings.NewArena(16 << 20)
	if err != nil {
		tb.Fatal(err)
	}
	mem := NewMemTable(ar, 64, 1)
	sqL, _ := AllocSQ(ar, 256)
	rqL, _ := AllocRQ(ar, 256)
	cqL, _ := AllocCQ(ar, 1024)
	cq, err := NewCQ(ar, cqL, nil)
	if err != nil {
		tb.Fatal(err)
	}
	qp, err := NewQP(ar, mem, Config{QPN: 1, PD: 1, Initiator: initiator, SQ: sqL, RQ: rqL, SendCQ: cq, RecvCQ: cq})
	if err != nil {
		tb.Fatal(err)
	}
	sqP, _ := rings.NewProducer(ar, sqL, 1, nil)
	rqP, _ := rings.NewProducer(ar, rqL, 1, nil)
	cqC, _ := rings.NewConsumer(ar, cqL, 64, nil)
	b := &benchQP{arena: ar, mem: mem, qp: qp, sqP: sqP, rqP: rqP, cqC: cqC}
	if initiator {
		_ = qp.Connect()
		drain(qp)
		rep := MPAFrameFields{Reply: true, CRC: true, Rev: 1}
		buf := make([]byte, rep.Len())
		rep.Encode(buf)
		qp.Receive(buf)
	} else {
		_ = qp.Accept(nil)
		req := MPAFrameFields{CRC: true, Rev: 1}
		buf := make([]byte, req.Len())
		req.Encode(buf)
		qp.Receive(buf)
		drain(qp)
	}
	return b
}

// writeStream returns the FPDUs of one RDMA Write of n bytes to (stag, to),
// framed by an initiator QP at MSS 1460.
func writeStream(tb testing.TB, n int, stag uint32, to uint64) []byte {
	s := newBenchQP(tb, true)
	src, _ := s.arena.Alloc(n, 64)
	sk, _ := s.mem.Register(1, src, uint64(src), uint64(n), 0)
	e := s.sqP.Next()
	(&SendWR{Opcode: WRRDMAWrite, RemoteAddr: to, RKey: stag, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: uint32(n), LKey: sk}}}).Encode(e)
	s.sqP.Commit()
	s.sqP.Publish()
	return drain(s.qp)
}

// BenchmarkReceiveWrite64K measures parse, CRC check and placement of a 64
// KiB RDMA Write arriving as 46 FPDUs of at most 1460 bytes, delivered in
// 1460-byte TCP payloads (aligned) or 1448-byte ones (every FPDU straddles).
func BenchmarkReceiveWrite64K(b *testing.B) {
	for _, c := range []struct {
		name  string
		chunk int
	}{{"aligned-1460", 1460}, {"straddling-1448", 1448}} {
		b.Run(c.name, func(b *testing.B) {
			const n = 64 << 10
			r := newBenchQP(b, false)
			dst, _ := r.arena.Alloc(n, 64)
			stag, _ := r.mem.Register(1, dst, uint64(dst), n, AccessRemoteWrite)
			stream := writeStream(b, n, stag, uint64(dst))
			r.qp.Receive(stream) // first FPDU: RTS
			if r.qp.State() != StateRTS {
				b.Fatalf("state %v", r.qp.State())
			}
			b.SetBytes(n)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				s := stream
				for len(s) > 0 {
					k := min(c.chunk, len(s))
					r.qp.Receive(s[:k])
					s = s[k:]
				}
			}
			b.StopTimer()
			if r.qp.State() != StateRTS || r.qp.Stats().Placed != uint64(b.N+1)*n {
				b.Fatalf("state %v, placed %d", r.qp.State(), r.qp.Stats().Placed)
			}
			b.ReportMetric(float64(len(stream)/1460+1), "FPDUs/op")
		})
	}
}

// BenchmarkTransmitWrite64K measures framing a 64 KiB RDMA Write: DMA reads
// of the source, headers, CRC, into 1460-byte segments.
func BenchmarkTransmitWrite64K(b *testing.B) {
	const n = 64 << 10
	s := newBenchQP(b, true)
	src, _ := s.arena.Alloc(n, 64)
	sk, _ := s.mem.Register(1, src, uint64(src), n, 0)
	seg := make([]byte, 1460)
	b.SetBytes(n)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		e := s.sqP.Next()
		(&SendWR{Opcode: WRRDMAWrite, RemoteAddr: 0x1000, RKey: 0x4242, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: sk}}}).Encode(e)
		s.sqP.Commit()
		s.sqP.Publish()
		for s.qp.Transmit(seg) > 0 {
		}
	}
	b.StopTimer()
	if s.qp.State() != StateRTS || s.qp.Stats().Sourced != uint64(b.N)*n {
		b.Fatalf("state %v sourced %d", s.qp.State(), s.qp.Stats().Sourced)
	}
}

// TestReceiveWriteAllocs pins the fast path at zero allocations.
func TestReceiveWriteAllocs(t *testing.T) {
	const n = 64 << 10
	r := newBenchQP(t, false)
	dst, _ := r.arena.Alloc(n, 64)
	stag, _ := r.mem.Register(1, dst, uint64(dst), n, AccessRemoteWrite)
	stream := writeStream(t, n, stag, uint64(dst))
	r.qp.Receive(stream)
	allocs := testing.AllocsPerRun(20, func() {
		s := stream
		for len(s) > 0 {
			k := min(1000, len(s))
			r.qp.Receive(s[:k])
			s = s[k:]
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 64 KiB Write received", allocs)
	}
	s := newBenchQP(t, true)
	src, _ := s.arena.Alloc(n, 64)
	sk, _ := s.mem.Register(1, src, uint64(src), n, 0)
	seg := make([]byte, 1460)
	allocs = testing.AllocsPerRun(20, func() {
		e := s.sqP.Next()
		(&SendWR{Opcode: WRRDMAWrite, RemoteAddr: 0x1000, RKey: 0x4242, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(src), Length: n, LKey: sk}}}).Encode(e)
		s.sqP.Commit()
		s.sqP.Publish()
		for s.qp.Transmit(seg) > 0 {
		}
	})
	if allocs != 0 {
		t.Fatalf("%v allocations per 64 KiB Write sent", allocs)
	}
}

func (s *benchQP) post(w *SendWR) {
	e := s.sqP.Next()
	w.Encode(e)
	s.sqP.Commit()
	s.sqP.Publish()
}

func (s *benchQP) postRecv(w *RecvWR) {
	e := s.rqP.Next()
	w.Encode(e)
	s.rqP.Commit()
	s.rqP.Publish()
}

// reap consumes every completion and returns how many there were.
func (s *benchQP) reap(tb testing.TB) int {
	n := 0
	for {
		e, _ := s.cqC.Peek()
		if e == nil {
			s.cqC.Release()
			return n
		}
		if CQEntry(e).Status() != WCSuccess {
			tb.Fatalf("completion %v", CQEntry(e).Status())
		}
		s.cqC.Pop()
		n++
	}
}

// benchLink moves bytes between two bench QPs in 1460-byte TCP payloads.
type benchLink struct {
	a, b *benchQP
	seg  []byte
}

func (l *benchLink) step() int {
	moved := 0
	for _, d := range [2][2]*benchQP{{l.a, l.b}, {l.b, l.a}} {
		for {
			n := d[0].qp.Transmit(l.seg)
			if n == 0 {
				break
			}
			d[1].qp.Receive(l.seg[:n])
			moved += n
		}
	}
	return moved
}

func (l *benchLink) run() {
	for l.step() > 0 {
	}
}

func newBenchPair(tb testing.TB) *benchLink {
	a, b := newBenchQP(tb, true), newBenchQP(tb, false)
	l := &benchLink{a: a, b: b, seg: make([]byte, 1460)}
	// The initiator's first FPDU puts the responder in RTS.
	e := b.rqP.Next()
	(&RecvWR{WRID: 1}).Encode(e)
	b.rqP.Commit()
	b.rqP.Publish()
	a.post(&SendWR{Opcode: WRSend})
	l.run()
	b.reap(tb)
	return l
}

// BenchmarkPair measures both engines together (framing, CRC both ways,
// placement) for RDMA Write and RDMA Read at three sizes and a Send
// ping-pong, in 1460-byte segments, on one goroutine.
func BenchmarkPair(b *testing.B) {
	for _, size := range []int{4 << 10, 64 << 10, 1 << 20} {
		for _, op := range []WROpcode{WRRDMAWrite, WRRDMARead} {
			b.Run(fmt.Sprintf("%v-%dK", op, size>>10), func(b *testing.B) {
				l := newBenchPair(b)
				la, _ := l.a.arena.Alloc(size, 64)
				lk, _ := l.a.mem.Register(1, la, uint64(la), uint64(size), AccessLocalWrite)
				ra, _ := l.b.arena.Alloc(size, 64)
				rk, _ := l.b.mem.Register(1, ra, uint64(ra), uint64(size), AccessRemoteWrite|AccessRemoteRead)
				w := SendWR{Opcode: op, Flags: WRSignaled, RemoteAddr: uint64(ra), RKey: rk, NumSGE: 1,
					SGL: [4]SGE{{Addr: uint64(la), Length: uint32(size), LKey: lk}}}
				b.SetBytes(int64(size))
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					l.a.post(&w)
					l.run()
					if l.a.reap(b) != 1 {
						b.Fatal("no completion")
					}
				}
			})
		}
	}
	b.Run("Send-pingpong-64B", func(b *testing.B) {
		l := newBenchPair(b)
		ab, _ := l.a.arena.Alloc(64, 64)
		ak, _ := l.a.mem.Register(1, ab, uint64(ab), 64, AccessLocalWrite)
		bb, _ := l.b.arena.Alloc(64, 64)
		bk, _ := l.b.mem.Register(1, bb, uint64(bb), 64, AccessLocalWrite)
		wa := SendWR{Opcode: WRSend, Flags: WRSignaled, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(ab), Length: 64, LKey: ak}}}
		wb := SendWR{Opcode: WRSend, Flags: WRSignaled, NumSGE: 1, SGL: [4]SGE{{Addr: uint64(bb), Length: 64, LKey: bk}}}
		ra := RecvWR{NumSGE: 1, SGL: [3]SGE{{Addr: uint64(ab), Length: 64, LKey: ak}}}
		rb := RecvWR{NumSGE: 1, SGL: [3]SGE{{Addr: uint64(bb), Length: 64, LKey: bk}}}
		b.ReportAllocs()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			l.b.postRecv(&rb)
			l.a.postRecv(&ra)
			l.a.post(&wa)
			l.step()
			l.b.post(&wb)
			l.run()
			if l.a.reap(b) != 2 || l.b.reap(b) != 2 {
				b.Fatal("completions")
			}
		}
	})
}
