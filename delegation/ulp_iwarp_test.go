package delegation

import (
	"bytes"
	"encoding/binary"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// qpULP is the seam between the engine and an iWARP queue pair: the QP
// consumes every byte it is given (it holds at most one partial FPDU
// itself), writes whole FPDUs no larger than its MSS, and asks for the
// connection to be closed after an orderly close, a Terminate or an MPA
// reject.
type qpULP struct{ qp *iwarp.QP }

func (a qpULP) Receive(p []byte) int    { a.qp.Receive(p); return len(p) }
func (a qpULP) Transmit(dst []byte) int { return a.qp.Transmit(dst) }
func (a qpULP) HasOutput() bool         { return a.qp.HasOutput() }
func (a qpULP) LLPClosed()              { a.qp.LLPClosed() }
func (a qpULP) WantClose() bool         { return a.qp.WantClose() }

var _ ULPCloser = qpULP{}

// rnic is one emulated host's verbs side over its engine's host memory:
// memory table, CQ, QP (device side) and the host's ends of the SQ, RQ and
// CQ rings.
type rnic struct {
	t     testing.TB
	name  string
	arena *rings.Arena
	mem   *iwarp.MemTable
	qp    *iwarp.QP
	sqP   *rings.Producer
	rqP   *rings.Producer
	cqC   *rings.Consumer
	evs   []iwarp.Event
	wcs   []iwarp.Completion
}

func newRNIC(t testing.TB, name string, arena *rings.Arena, initiator bool, mss int, seed uint64) *rnic {
	t.Helper()
	r := &rnic{t: t, name: name, arena: arena}
	r.mem = iwarp.NewMemTable(arena, 64, seed)
	sqL, err := iwarp.AllocSQ(arena, 64)
	if err != nil {
		t.Fatal(err)
	}
	rqL, err := iwarp.AllocRQ(arena, 64)
	if err != nil {
		t.Fatal(err)
	}
	cqL, err := iwarp.AllocCQ(arena, 256)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := iwarp.NewCQ(arena, cqL, nil)
	if err != nil {
		t.Fatal(err)
	}
	r.qp, err = iwarp.NewQP(arena, r.mem, iwarp.Config{QPN: 1, PD: 3, Initiator: initiator, MSS: mss,
		PrivateData: []byte("emunic " + name), SQ: sqL, RQ: rqL, SendCQ: cq, RecvCQ: cq,
		OnEvent: func(_ *iwarp.QP, ev iwarp.Event) { r.evs = append(r.evs, ev) }})
	if err != nil {
		t.Fatal(err)
	}
	if r.sqP, err = rings.NewProducer(arena, sqL, 1, nil); err != nil {
		t.Fatal(err)
	}
	if r.rqP, err = rings.NewProducer(arena, rqL, 1, nil); err != nil {
		t.Fatal(err)
	}
	if r.cqC, err = rings.NewConsumer(arena, cqL, 1, nil); err != nil {
		t.Fatal(err)
	}
	return r
}

// buf allocates n bytes with 64 guard bytes (0xEE) on each side.
func (r *rnic) buf(n int) rings.Addr {
	a, err := r.arena.Alloc(n+128, 64)
	if err != nil {
		r.t.Fatal(err)
	}
	m, _ := r.arena.Map(a, n+128)
	for i := range m {
		m[i] = 0xEE
	}
	clear(m[64 : 64+n])
	return a + 64
}

func (r *rnic) bytesAt(a rings.Addr, n int) []byte {
	m, err := r.arena.Map(a, n)
	if err != nil {
		r.t.Fatal(err)
	}
	return m
}

func (r *rnic) guardsIntact(a rings.Addr, n int) bool {
	m := r.bytesAt(a-64, n+128)
	return bytes.Count(m[:64], []byte{0xEE}) == 64 && bytes.Count(m[64+n:], []byte{0xEE}) == 64
}

func (r *rnic) reg(a rings.Addr, n int, acc iwarp.Access) uint32 {
	stag, err := r.mem.Register(3, a, uint64(a), uint64(n), acc)
	if err != nil {
		r.t.Fatal(err)
	}
	return stag
}

func (r *rnic) postSend(w iwarp.SendWR) {
	e := r.sqP.Next()
	if e == nil {
		r.t.Fatal("SQ full")
	}
	w.Encode(e)
	r.sqP.Commit()
	r.sqP.Publish()
}

func (r *rnic) postRecv(w iwarp.RecvWR) {
	e := r.rqP.Next()
	if e == nil {
		r.t.Fatal("RQ full")
	}
	w.Encode(e)
	r.rqP.Commit()
	r.rqP.Publish()
}

// poll moves new completions to r.wcs.
func (r *rnic) poll() {
	for {
		e, err := r.cqC.Peek()
		if err != nil {
			r.t.Fatalf("%s: CQ: %v", r.name, err)
		}
		if e == nil {
			break
		}
		var c iwarp.Completion
		_ = c.Decode(e)
		r.wcs = append(r.wcs, c)
		r.cqC.Pop()
	}
	r.cqC.Release()
}

func (r *rnic) completion(wrid uint64) (iwarp.Completion, bool) {
	r.poll()
	for _, c := range r.wcs {
		if c.WRID == wrid {
			return c, true
		}
	}
	return iwarp.Completion{}, false
}

func (r *rnic) hasEvent(ev iwarp.Event) bool {
	for _, e := range r.evs {
		if e == ev {
			return true
		}
	}
	return false
}

// iwarpPair is two engines over the simulated link with an iWARP QP
// attached to each end of the connection, MPA negotiated (A initiates).
type iwarpPair struct {
	*sim
	a, b       *rnic
	frames     [][]byte // every frame sent, for the pcap
	misaligned int      // data segments that are not whole MPA frames / FPDUs
	dataSegs   int
}

func newIWARPPair(t *testing.T, o simOpts) *iwarpPair {
	s := &iwarpPair{sim: newSim(t, o)}
	s.host[0].ulp, s.host[1].ulp = true, true
	s.link.drop = func(to int, f []byte) bool {
		s.frames = append(s.frames, append([]byte(nil), f...))
		ip := f[hdr.EthernetSize:]
		tcp := ip[netHdrLen:be.Uint16(ip[2:])]
		if p := tcp[int(tcp[12]>>4)*4:]; len(p) >= 2 {
			s.dataSegs++
			if !fpduAligned(p) {
				s.misaligned++
			}
		}
		return false
	}
	// FPDUs no larger than a segment's payload (RFC 5044 MULPDU).
	seg := int(s.eng[0].conns[0].maxPayload())
	s.a = newRNIC(t, "A", s.env[0].arena, true, seg, 1)
	s.b = newRNIC(t, "B", s.env[1].arena, false, seg, 2)
	if err := s.b.qp.Accept([]byte("emunic B accepts")); err != nil {
		t.Fatal(err)
	}
	if st := s.eng[1].AttachULP(0, qpULP{s.b.qp}, 0); st != rings.StatusOK {
		t.Fatal(st)
	}
	if err := s.a.qp.Connect(); err != nil {
		t.Fatal(err)
	}
	// Attaching pulls the MPA request at once.
	if st := s.eng[0].AttachULP(0, qpULP{s.a.qp}, 0); st != rings.StatusOK {
		t.Fatal(st)
	}
	s.runUntil(func() bool { return s.a.qp.State() == iwarp.StateRTS }, 60e9)
	if string(s.a.qp.PeerPrivateData()) != "emunic B accepts" || string(s.b.qp.PeerPrivateData()) != "emunic A" {
		t.Fatalf("private data %q / %q", s.a.qp.PeerPrivateData(), s.b.qp.PeerPrivateData())
	}
	return s
}

// TestULPIWARP: two engines over the simulated link, each connection
// carrying an iWARP QP attached as the ULP: MPA negotiation, one RDMA Write
// and one Send (many FPDUs each), data checked in the other side's host
// memory, then an orderly close. The clean run is also written as a pcap
// and decoded by tshark's iWARP dissectors when tshark is installed.
func TestULPIWARP(t *testing.T) {
	for _, tc := range []struct {
		name  string
		lossy bool
		seed  uint64
		wn    int
	}{{"clean", false, 1, 200_003}, {"impaired", true, 2, 2<<20 + 3}, {"impaired2", true, 3, 1<<20 + 1}} {
		t.Run(tc.name, func(t *testing.T) {
			o := ulpSimOpts(tc.seed)
			if tc.lossy {
				o = impaired(o)
			}
			s := newIWARPPair(t, o)
			a, b := s.a, s.b

			// A's source, B's write target and receive buffer.
			wn := tc.wn
			const sn = 30_001
			src := a.buf(wn)
			for i, m := 0, a.bytesAt(src, wn); i < wn; i++ {
				m[i] = byte(i*7+i>>8) ^ 0x5A
			}
			srcKey := a.reg(src, wn, 0)
			tgt := b.buf(wn)
			tgtKey := b.reg(tgt, wn, iwarp.AccessLocalWrite|iwarp.AccessRemoteWrite)
			rcv := b.buf(sn)
			rcvKey := b.reg(rcv, sn, iwarp.AccessLocalWrite)
			b.postRecv(iwarp.RecvWR{WRID: 77, NumSGE: 1, SGL: [3]iwarp.SGE{{Addr: uint64(rcv), Length: sn, LKey: rcvKey}}})
			a.postSend(iwarp.SendWR{Opcode: iwarp.WRRDMAWrite, WRID: 1, RemoteAddr: uint64(tgt), RKey: tgtKey,
				NumSGE: 1, SGL: [4]iwarp.SGE{{Addr: uint64(src), Length: uint32(wn), LKey: srcKey}}})
			a.postSend(iwarp.SendWR{Opcode: iwarp.WRSend, Flags: iwarp.WRSignaled, WRID: 2,
				NumSGE: 1, SGL: [4]iwarp.SGE{{Addr: uint64(src) + 1000, Length: sn, LKey: srcKey}}})
			// The host rang the SQ doorbell: the device kicks the engine.
			if st := s.eng[0].ULPKick(0); st != rings.StatusOK {
				t.Fatal(st)
			}
			var recvWC, sendWC iwarp.Completion
			s.runUntil(func() bool {
				var ok1, ok2 bool
				recvWC, ok1 = b.completion(77)
				sendWC, ok2 = a.completion(2)
				return ok1 && ok2
			}, 600e9)
			if recvWC.Status != iwarp.WCSuccess || recvWC.Opcode != iwarp.WCRecv || recvWC.ByteLen != sn ||
				sendWC.Status != iwarp.WCSuccess || sendWC.Opcode != iwarp.WCSend {
				t.Fatalf("completions: recv %v, send %v", &recvWC, &sendWC)
			}
			if len(a.wcs) != 1 || len(b.wcs) != 1 {
				t.Fatalf("completions A %v, B %v", a.wcs, b.wcs)
			}
			want := a.bytesAt(src, wn)
			if !bytes.Equal(b.bytesAt(tgt, wn), want) || !b.guardsIntact(tgt, wn) {
				t.Fatal("RDMA Write data differs in B's memory (or a guard byte changed)")
			}
			if !bytes.Equal(b.bytesAt(rcv, sn), want[1000:1000+sn]) || !b.guardsIntact(rcv, sn) {
				t.Fatal("Send data differs in B's memory (or a guard byte changed)")
			}
			if a.qp.State() != iwarp.StateRTS || b.qp.State() != iwarp.StateRTS {
				t.Fatalf("QP states %v %v", a.qp.State(), b.qp.State())
			}

			// Orderly close: A's QP closes, the engine sends the FIN
			// after its last FPDU; B closes on the FIN.
			a.qp.Close()
			if st := s.eng[0].ULPKick(0); st != rings.StatusOK {
				t.Fatal(st)
			}
			closedB := false
			s.hook = func() {
				if s.host[1].gotFin && !closedB {
					closedB = true
					b.qp.Close()
					if st := s.eng[1].ULPKick(0); st != rings.StatusOK {
						t.Fatal(st)
					}
				}
			}
			s.runUntil(func() bool { return s.host[0].closed && s.host[1].closed }, 600e9)
			for _, r := range []*rnic{a, b} {
				if !r.hasEvent(iwarp.EvEstablished) || !r.hasEvent(iwarp.EvClosed) || r.hasEvent(iwarp.EvError) ||
					r.hasEvent(iwarp.EvTerminate) {
					t.Fatalf("%s: events %v", r.name, r.evs)
				}
				st := r.qp.Stats()
				if st.CRCErrors != 0 || st.TerminatesSent+st.TerminatesRecv != 0 || st.BadHostEntries != 0 {
					t.Fatalf("%s: QP stats %+v", r.name, st)
				}
			}
			s.checkClean()
			ca, cb := s.eng[0].Counters(), s.eng[1].Counters()
			t.Logf("A→B %d stream bytes in %d data segments (%d not FPDU-aligned), %d FPDUs; retrans %d/%d; link lost %d reordered %d",
				ca.ULPPulled, s.dataSegs, s.misaligned, a.qp.Stats().TxFPDUs, ca.TxRetransSegs, cb.TxRetransSegs, s.link.lost, s.link.reordered)
			if tc.lossy && ca.TxRetransSegs == 0 {
				t.Fatal("no retransmissions on the impaired link")
			}
			if !tc.lossy {
				if s.misaligned != 0 {
					t.Fatalf("%d of %d segments are not whole FPDUs", s.misaligned, s.dataSegs)
				}
				checkTshark(t, s.frames, int(a.qp.Stats().TxFPDUs+b.qp.Stats().TxFPDUs))
			}
		})
	}
}

// TestULPIWARPTerminate: an RDMA Write to an STag B never registered. B's
// QP answers with a Terminate and asks for the connection to close: B's
// engine sends the FIN after the Terminate; A's QP, terminated, closes its
// side too; both QPs hear LLPClosed.
func TestULPIWARPTerminate(t *testing.T) {
	s := newIWARPPair(t, ulpSimOpts(4))
	a, b := s.a, s.b
	src := a.buf(5000)
	srcKey := a.reg(src, 5000, 0)
	a.postSend(iwarp.SendWR{Opcode: iwarp.WRRDMAWrite, Flags: iwarp.WRSignaled, WRID: 9, RemoteAddr: 0x1000, RKey: 0xDEAD00,
		NumSGE: 1, SGL: [4]iwarp.SGE{{Addr: uint64(src), Length: 5000, LKey: srcKey}}})
	a.postSend(iwarp.SendWR{Opcode: iwarp.WRSend, Flags: iwarp.WRSignaled, WRID: 10,
		NumSGE: 1, SGL: [4]iwarp.SGE{{Addr: uint64(src), Length: 100, LKey: srcKey}}})
	if st := s.eng[0].ULPKick(0); st != rings.StatusOK {
		t.Fatal(st)
	}
	s.runUntil(func() bool { return s.host[0].closed && s.host[1].closed }, 60e9)
	if te, ok := b.qp.LastTermError(); !ok || te.Layer != iwarp.LayerDDP {
		t.Fatalf("B's terminate: %v %v", te, ok)
	}
	if _, ok := a.qp.PeerTermError(); !ok || !a.hasEvent(iwarp.EvTerminate) || !b.hasEvent(iwarp.EvTerminate) {
		t.Fatalf("events A %v B %v", a.evs, b.evs)
	}
	if a.qp.State() != iwarp.StateError || b.qp.State() != iwarp.StateError {
		t.Fatalf("QP states %v %v", a.qp.State(), b.qp.State())
	}
	a.poll()
	t.Logf("A's completions %v (iwarp completes send work when its bytes are handed to TCP)", a.wcs)
	for i := 0; i < 2; i++ {
		h := s.host[i]
		if !h.gotFin || h.rst || h.timeout {
			t.Fatalf("%s: fin %v rst %v timeout %v", h.name, h.gotFin, h.rst, h.timeout)
		}
	}
	if s.misaligned != 0 {
		t.Fatalf("%d segments are not whole FPDUs", s.misaligned)
	}
}

// fpduAligned reports whether p is whole MPA frames or FPDUs back to back.
func fpduAligned(p []byte) bool {
	if len(p) >= 16 && (string(p[:16]) == iwarp.MPAKeyRequest || string(p[:16]) == iwarp.MPAKeyReply) {
		return len(p) == iwarp.MPAFrameHeaderLen+int(be.Uint16(p[18:]))
	}
	for len(p) > 0 {
		if len(p) < 2 {
			return false
		}
		n := iwarp.FPDULen(int(be.Uint16(p)))
		if n > len(p) {
			return false
		}
		p = p[n:]
	}
	return true
}

// checkTshark writes the frames as a pcap and has tshark decode them: every
// FPDU with a good CRC, nothing malformed, the MPA request and reply seen.
func checkTshark(t *testing.T, frames [][]byte, fpdus int) {
	t.Helper()
	tshark, err := exec.LookPath("tshark")
	if err != nil {
		t.Log("tshark not installed: pcap check skipped")
		return
	}
	var pcap bytes.Buffer
	le := binary.LittleEndian
	hdr := make([]byte, 24)
	le.PutUint32(hdr[0:], 0xA1B2C3D4)
	le.PutUint16(hdr[4:], 2)
	le.PutUint16(hdr[6:], 4)
	le.PutUint32(hdr[16:], 65535)
	le.PutUint32(hdr[20:], 1) // Ethernet
	pcap.Write(hdr)
	for i, f := range frames {
		rec := make([]byte, 16)
		le.PutUint32(rec[0:], uint32(1+i/1000))
		le.PutUint32(rec[4:], uint32(i%1000)*1000)
		le.PutUint32(rec[8:], uint32(len(f)))
		le.PutUint32(rec[12:], uint32(len(f)))
		pcap.Write(rec)
		pcap.Write(f)
	}
	file := t.TempDir() + "/ulp-iwarp.pcap"
	if err := os.WriteFile(file, pcap.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if dir := os.Getenv("ULP_PCAP_DIR"); dir != "" {
		_ = os.WriteFile(dir+"/ulp-iwarp.pcap", pcap.Bytes(), 0o644)
	}
	run := func(extra ...string) string {
		args := append([]string{"-r", file, "-n", "--enable-heuristic", "iwarp_mpa_tcp", "-o", "tcp.try_heuristic_first:TRUE",
			"--disable-protocol", "rpcordma", "--disable-protocol", "smb_direct",
			"-o", "ip.check_checksum:TRUE", "-o", "tcp.check_checksum:TRUE"}, extra...)
		out, err := exec.Command(tshark, args...).Output()
		if err != nil {
			t.Fatalf("tshark %v: %v", args, err)
		}
		return string(out)
	}
	v := run("-V")
	good, bad := strings.Count(v, "Good CRC32"), strings.Count(v, "Bad CRC32")
	sum := run()
	req, rep := strings.Count(sum, "MPA Request Frame"), strings.Count(sum, "MPA Reply Frame")
	malformed := strings.Count(v, "Malformed")
	t.Logf("tshark: %d frames, %d good CRCs (%d FPDUs sent), %d bad, MPA req/rep %d/%d, malformed %d",
		len(frames), good, fpdus, bad, req, rep, malformed)
	if good != fpdus || bad != 0 || malformed != 0 || req != 1 || rep != 1 {
		t.Errorf("tshark decoded %d good CRCs of %d FPDUs, %d bad, %d malformed, MPA req/rep %d/%d",
			good, fpdus, bad, malformed, req, rep)
	}
	if z := run("-q", "-z", "expert,warn"); strings.Contains(z, "Errors") {
		t.Errorf("tshark expert errors:\n%s", z)
	} else if strings.Contains(z, "Warns") {
		t.Logf("tshark expert warnings:\n%s", z)
	}
}
