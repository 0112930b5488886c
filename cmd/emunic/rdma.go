package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/emunic/emunic/internal/cpusplit"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/services"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// The RDMA path of the demo (--rdma): one iWARP-style QP pair on a
// delegated connection between A and B (DialRDMA / ListenRDMA), every
// opcode once with its data checked in the target memory, then a
// throughput run of RDMA Writes of rdmaChunk bytes from a registered source
// at A into a registered region at B. The host CPU never copies payload:
// the NICs fetch and place it by DMA, which the drivers' HostCopyBytes
// counters show (their delta over the RDMA part must be 0).

const (
	demoPortRDMA = 5003
	// rdmaChunk is the size of the throughput run's RDMA Writes.
	rdmaChunk = 64 << 10
	// rdmaWindow bounds the Writes outstanding (posted, not completed);
	// every rdmaSignalEvery-th is signaled (the completions come in SQ
	// order, so one completion retires the unsignaled ones before it).
	rdmaWindow      = 32
	rdmaSignalEvery = 8
	// rdmaRegionMax bounds the throughput run's source and target
	// regions: --bytes beyond it writes the region again, lap after lap.
	rdmaRegionMax = 8 << 20
	rdmaRecvN     = 32
	rdmaRecvSize  = 4096
	rdmaOpRegion  = 64 << 10 // the opcode phase's target region at B
)

// rdmaReport is what the RDMA path prints besides its throughput row.
type rdmaReport struct {
	ops        []rdmaOpResult
	writes     int    // RDMA Writes of the throughput run
	region     int    // bytes of the target region
	regionSTag uint32 // its STag and tagged offset (not printed: a capture's
	regionTO   uint64 // RDMA Writes name the region by them)
	copyA      uint64
	copyB      uint64
	qpA, qpB   tcpstack.QPCounters
	qpnA, qpnB uint32
	haveStats  bool
}

type rdmaOpResult struct {
	name, detail string
	err          error
}

// rdmaEnd is one host's verbs objects.
type rdmaEnd struct {
	h    *tcpstack.Host
	v    *verbs.Provider
	pd   verbs.PD
	cq   *verbs.CQ
	qp   *verbs.QP
	recv *verbs.Buffer
	rmr  *verbs.MR
}

func newRDMAEnd(h *tcpstack.Host) (*rdmaEnd, error) {
	v, err := verbs.Open(h)
	if err != nil {
		return nil, err
	}
	e := &rdmaEnd{h: h, v: v, pd: v.AllocPD()}
	if e.cq, err = v.CreateCQ(1024); err != nil {
		return nil, err
	}
	if e.recv, err = v.AllocBuffer(rdmaRecvN * rdmaRecvSize); err != nil {
		return nil, err
	}
	if e.rmr, err = v.RegMR(e.pd, e.recv, verbs.AccessLocalWrite); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *rdmaEnd) attr() verbs.QPAttr {
	return verbs.QPAttr{PD: e.pd, SendCQ: e.cq, RecvCQ: e.cq, SQDepth: 2 * rdmaWindow, RQDepth: rdmaRecvN,
		Setup: func(qp *verbs.QP) error {
			wrs := make([]rings.RecvWR, rdmaRecvN)
			for i := range wrs {
				wrs[i] = rings.RecvWR{WRID: uint64(i), NumSGE: 1}
				wrs[i].SGL[0] = e.rmr.SGE(i*rdmaRecvSize, rdmaRecvSize)
			}
			_, err := qp.PostRecvList(wrs)
			return err
		}}
}

// recvData is the bytes a receive completion says arrived.
func (e *rdmaEnd) recvData(wc rings.Completion) []byte {
	off := int(wc.WRID) * rdmaRecvSize
	return e.recv.Bytes()[off : off+int(min(wc.ByteLen, rdmaRecvSize))]
}

// waitOne returns the next completion of e's CQ, which must be a success
// of the opcode op.
func (e *rdmaEnd) waitOne(ctx context.Context, op rings.WCOpcode) (rings.Completion, error) {
	var wc [1]rings.Completion
	if _, err := e.cq.PollWait(ctx, wc[:], false); err != nil {
		return wc[0], fmt.Errorf("no completion: %w (QP %v, %v)", err, e.qp.State(), e.qp.Err())
	}
	c := wc[0]
	if c.Status != rings.WCSuccess || c.Opcode != op {
		return c, fmt.Errorf("completion %v %v WRID %d, want %v SUCCESS", c.Opcode, c.Status, c.WRID, op)
	}
	return c, nil
}

func hostCopies(h *tcpstack.Host) uint64 { return h.Driver.Stats().HostCopyBytes }

// rdmaConnect makes the QP pair: B listens, A dials B at address to, B
// accepts.
func rdmaConnect(ctx context.Context, a, b *rdmaEnd, to netip.Addr) (closeListener func(), err error) {
	l, err := b.v.ListenRDMA(demoPortRDMA, b.attr())
	if err != nil {
		return nil, fmt.Errorf("B: listen: %w", err)
	}
	type accepted struct {
		qp  *verbs.QP
		err error
	}
	acc := make(chan accepted, 1)
	go func() {
		qp, err := l.Accept(ctx)
		acc <- accepted{qp, err}
	}()
	a.qp, err = a.v.DialRDMA(ctx, netip.AddrPortFrom(to, demoPortRDMA), a.attr())
	if err != nil {
		l.Close()
		return nil, fmt.Errorf("A: DialRDMA: %w (listener: %d failed, last %v)", err, l.Failed(), l.LastError())
	}
	r := <-acc
	if r.err != nil {
		a.qp.Destroy()
		l.Close()
		return nil, fmt.Errorf("B: accept: %w", r.err)
	}
	b.qp = r.qp
	return func() { l.Close() }, nil
}

// rdmaTransfer is the demo path of --rdma.
func rdmaTransfer(ctx context.Context, lab *demoLab, cfg demoConfig) (res transferResult, err error) {
	rep := &rdmaReport{}
	res.rdma = rep
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	a, err := newRDMAEnd(lab.a)
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	b, err := newRDMAEnd(lab.b)
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	cctx, ccancel := context.WithTimeout(ctx, cfg.Idle)
	closeL, err := rdmaConnect(cctx, a, b, lab.addrB)
	ccancel()
	if err != nil {
		return res, err
	}
	defer closeL()
	defer func() {
		// Orderly close from A; B follows the FIN. Then both QPs go.
		dctx, dcancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = a.qp.Disconnect(dctx)
		dcancel()
		_ = a.qp.Destroy()
		_ = b.qp.Destroy()
	}()
	rep.qpnA, rep.qpnB = a.qp.QPN(), b.qp.QPN()
	copy0A, copy0B := hostCopies(lab.a), hostCopies(lab.b)

	octx, ocancel := context.WithTimeout(ctx, cfg.Idle)
	rep.ops = rdmaEveryOpcode(octx, a, b, cfg.Seed)
	ocancel()
	var opErr error
	for _, o := range rep.ops {
		if o.err != nil {
			opErr = fmt.Errorf("%s: %w", o.name, o.err)
			break
		}
	}
	if opErr == nil && cfg.hooks != nil && cfg.hooks.rdmaExtra != nil {
		opErr = cfg.hooks.rdmaExtra(a, b)
	}
	if opErr == nil {
		res, err = rdmaWriteRun(ctx, a, b, cfg, rep)
		res.rdma = rep
	} else {
		err = opErr
	}
	rep.copyA, rep.copyB = hostCopies(lab.a)-copy0A, hostCopies(lab.b)-copy0B
	rep.qpA, rep.qpB, rep.haveStats = settledQPStats(lab, rep.qpnA, rep.qpnB)
	if err == nil && rep.copyA+rep.copyB != 0 {
		err = fmt.Errorf("the hosts copied %d payload bytes on the RDMA path (want 0)", rep.copyA+rep.copyB)
	}
	return res, err
}

// settledQPStats reads both QPs' device statistics once two reads agree
// and each unit has published them since the last change (the units
// publish them in the hosts' counter areas when they go idle; see
// tcpstack.Host.CountersSettled).
func settledQPStats(lab *demoLab, qa, qb uint32) (sa, sb tcpstack.QPCounters, ok bool) {
	qpStats := func(h *tcpstack.Host, idx uint32) (tcpstack.QPCounters, bool) {
		c, err := h.Counters()
		st, ok := c.QPs[idx]
		return st, ok && err == nil
	}
	prevA, okA := qpStats(lab.a, qa)
	prevB, okB := qpStats(lab.b, qb)
	if lab.lockstep {
		// The devices published whenever they went idle, and a wait on
		// the real clock would let the run's virtual clock go on by
		// however much it can meanwhile.
		return prevA, prevB, okA && okB
	}
	_, genA := lab.a.CountersSettled(0)
	_, genB := lab.b.CountersSettled(0)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); {
		time.Sleep(2 * time.Millisecond)
		// ok is the latest read's: a unit that had not published the QP
		// at the first read (it had not gone idle yet) has by now.
		curA, curOKA := qpStats(lab.a, qa)
		curB, curOKB := qpStats(lab.b, qb)
		setA, nowA := lab.a.CountersSettled(genA)
		setB, nowB := lab.b.CountersSettled(genB)
		same := curA == prevA && curB == prevB && curOKA == okA && curOKB == okB
		if same && setA && setB {
			break
		}
		if !same {
			genA, genB = nowA, nowB
		}
		prevA, prevB, okA, okB = curA, curB, curOKA, curOKB
	}
	return prevA, prevB, okA && okB
}

// rdmaEveryOpcode runs each RDMAP message once from A to B and checks
// what arrived: the receive completions, and the bytes in B's target
// region (with guard bytes around it) or in A's Read sink.
func rdmaEveryOpcode(ctx context.Context, a, b *rdmaEnd, seed uint64) []rdmaOpResult {
	var out []rdmaOpResult
	step := func(name string, f func() (string, error)) bool {
		detail, err := f()
		out = append(out, rdmaOpResult{name, detail, err})
		return err == nil
	}
	fail := func(name string, err error) []rdmaOpResult {
		return append(out, rdmaOpResult{name: name, err: err})
	}
	// A's source and sink, B's target region with 64 guard bytes on
	// each side, and a small region at B for Send with Invalidate.
	src, err := a.v.AllocBuffer(2 * rdmaOpRegion)
	if err != nil {
		return fail("setup", err)
	}
	defer src.Free()
	smr, err := a.v.RegMR(a.pd, src, verbs.AccessLocalWrite)
	if err != nil {
		return fail("setup", err)
	}
	defer smr.Dereg()
	const guard = 64
	tb, err := b.v.AllocBuffer(rdmaOpRegion + 2*guard)
	if err != nil {
		return fail("setup", err)
	}
	defer tb.Free()
	tmr, err := b.v.RegMRAddr(b.pd, tb.Addr+guard, rdmaOpRegion,
		verbs.AccessLocalWrite|verbs.AccessRemoteWrite|verbs.AccessRemoteRead)
	if err != nil {
		return fail("setup", err)
	}
	defer tmr.Dereg()
	ib, err := b.v.AllocBuffer(4096)
	if err != nil {
		return fail("setup", err)
	}
	defer ib.Free()
	imr, err := b.v.RegMR(b.pd, ib, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return fail("setup", err)
	}
	defer imr.Dereg()

	sb, g := src.Bytes(), tb.Bytes()
	region := g[guard : guard+rdmaOpRegion]
	fillSeeded(sb, seed^0x5eed)
	for i := range g {
		g[i] = 0xEE
	}
	guardsOK := func() error {
		for i := range guard {
			if g[i] != 0xEE || g[len(g)-1-i] != 0xEE {
				return errors.New("a guard byte around B's region changed")
			}
		}
		return nil
	}
	post := func(wr rings.SendWR) error { return a.qp.PostSend(&wr) }
	sendWR := func(id uint64, off, n int, flags rings.WRFlags) rings.SendWR {
		w := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled | flags, WRID: id, NumSGE: 1}
		w.SGL[0] = smr.SGE(off, n)
		return w
	}
	// recvSend waits for A's send completion and B's receive, and checks
	// the bytes B received.
	recvSend := func(id uint64, off, n int) (rings.Completion, error) {
		if _, err := a.waitOne(ctx, rings.WCSend); err != nil {
			return rings.Completion{}, fmt.Errorf("A: %w", err)
		}
		rc, err := b.waitOne(ctx, rings.WCRecv)
		if err != nil {
			return rc, fmt.Errorf("B: %w", err)
		}
		if int(rc.ByteLen) != n || !bytes.Equal(b.recvData(rc), sb[off:off+n]) {
			return rc, fmt.Errorf("B received %d bytes that differ from the %d sent", rc.ByteLen, n)
		}
		return rc, nil
	}

	if !step("Send", func() (string, error) {
		if err := post(sendWR(1, 0, 1000, 0)); err != nil {
			return "", err
		}
		if _, err := recvSend(1, 0, 1000); err != nil {
			return "", err
		}
		// A's first message puts B in RTS.
		return "1000 B into B's receive buffer", b.qp.WaitEstablished(ctx)
	}) {
		return out
	}
	if !step("Send with Solicited Event", func() (string, error) {
		if err := b.cq.ReqNotify(true); err != nil {
			return "", err
		}
		if err := post(sendWR(2, 1000, 2000, rings.WRSolicited)); err != nil {
			return "", err
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		err := b.cq.Wait(wctx)
		cancel()
		if err != nil {
			return "", fmt.Errorf("B's CQ, armed solicited-only, got no event: %w", err)
		}
		rc, err := recvSend(2, 1000, 2000)
		if err != nil {
			return "", err
		}
		if rc.Flags&rings.WCSolicitedF == 0 {
			return "", errors.New("B's receive completion lacks the solicited flag")
		}
		return "2000 B, solicited-only CQ event at B", nil
	}) {
		return out
	}
	if !step("RDMA Write", func() (string, error) {
		w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 3,
			RemoteAddr: tmr.TO(0), RKey: tmr.RKey, NumSGE: 1}
		w.SGL[0] = smr.SGE(4096, rdmaOpRegion)
		if err := post(w); err != nil {
			return "", err
		}
		if _, err := a.waitOne(ctx, rings.WCRDMAWrite); err != nil {
			return "", fmt.Errorf("A: %w", err)
		}
		// A Send after the Write: its arrival means the Write was placed.
		if err := post(sendWR(4, 0, 8, 0)); err != nil {
			return "", err
		}
		if _, err := recvSend(4, 0, 8); err != nil {
			return "", err
		}
		if !bytes.Equal(region, sb[4096:4096+rdmaOpRegion]) {
			return "", errors.New("the data in B's region differs from A's source")
		}
		return fmt.Sprintf("%d B into B's region, guard bytes intact", rdmaOpRegion), guardsOK()
	}) {
		return out
	}
	if !step("RDMA Write with Immediate", func() (string, error) {
		const imm = 0x1122334455667788
		w := rings.SendWR{Opcode: rings.WRRDMAWriteImm, Flags: rings.WRSignaled, WRID: 5,
			RemoteAddr: tmr.TO(8192), RKey: tmr.RKey, ImmData: imm, NumSGE: 1}
		w.SGL[0] = smr.SGE(rdmaOpRegion, 8192)
		if err := post(w); err != nil {
			return "", err
		}
		if _, err := a.waitOne(ctx, rings.WCRDMAWrite); err != nil {
			return "", fmt.Errorf("A: %w", err)
		}
		rc, err := b.waitOne(ctx, rings.WCRecvRDMAWithImm)
		if err != nil {
			return "", fmt.Errorf("B: %w", err)
		}
		if rc.Flags&rings.WCWithImm == 0 || rc.ImmData != imm || rc.ByteLen != 0 {
			return "", fmt.Errorf("B's completion: flags %#x imm %#x len %d", rc.Flags, rc.ImmData, rc.ByteLen)
		}
		if !bytes.Equal(region[8192:16384], sb[rdmaOpRegion:rdmaOpRegion+8192]) {
			return "", errors.New("the data in B's region differs from A's source")
		}
		return fmt.Sprintf("8192 B, immediate %#x at B", uint64(imm)), guardsOK()
	}) {
		return out
	}
	if !step("RDMA Read", func() (string, error) {
		// B's region now: fresh data, read back into A's buffer.
		fillSeeded(region, seed^0xbeef)
		const off, n = 512, 32 << 10
		sink := sb[rdmaOpRegion : rdmaOpRegion+n]
		clear(sink)
		w := rings.SendWR{Opcode: rings.WRRDMARead, Flags: rings.WRSignaled, WRID: 6,
			RemoteAddr: tmr.TO(off), RKey: tmr.RKey, NumSGE: 1}
		w.SGL[0] = smr.SGE(rdmaOpRegion, n)
		if err := post(w); err != nil {
			return "", err
		}
		c, err := a.waitOne(ctx, rings.WCRDMARead)
		if err != nil {
			return "", fmt.Errorf("A: %w", err)
		}
		if c.ByteLen != n || !bytes.Equal(sink, region[off:off+n]) {
			return "", fmt.Errorf("A read %d bytes that differ from B's region", c.ByteLen)
		}
		return fmt.Sprintf("%d B from B's region into A's buffer", n), guardsOK()
	}) {
		return out
	}
	step("Send with Invalidate", func() (string, error) {
		w := sendWR(7, 3000, 500, 0)
		w.Opcode, w.InvSTag = rings.WRSendInv, imr.RKey
		if err := post(w); err != nil {
			return "", err
		}
		rc, err := recvSend(7, 3000, 500)
		if err != nil {
			return "", err
		}
		if rc.Flags&rings.WCWithInv == 0 || uint32(rc.ImmData) != imr.RKey {
			return "", fmt.Errorf("B's completion: flags %#x, invalidated STag %#x, want %#x", rc.Flags, uint32(rc.ImmData), imr.RKey)
		}
		return fmt.Sprintf("500 B, B's STag %#x invalidated", imr.RKey), nil
	})
	return out
}

// fillSeeded fills b with pseudo-random bytes from seed.
func fillSeeded(b []byte, seed uint64) {
	var key [32]byte
	for i := range 8 {
		key[i] = byte(seed >> (8 * i))
	}
	rand.NewChaCha8(key).Read(b)
}

// rdmaWriteRun writes cfg.Bytes from A into B's region in RDMA Writes of
// rdmaChunk bytes, rdmaWindow outstanding, then checks the region.
func rdmaWriteRun(ctx context.Context, a, b *rdmaEnd, cfg demoConfig, rep *rdmaReport) (res transferResult, err error) {
	size := int(min(cfg.Bytes, rdmaRegionMax))
	src, err := a.v.AllocBuffer(size)
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	defer src.Free()
	smr, err := a.v.RegMR(a.pd, src, verbs.AccessLocalWrite)
	if err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	defer smr.Dereg()
	dst, err := b.v.AllocBuffer(size)
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	defer dst.Free()
	dmr, err := b.v.RegMR(b.pd, dst, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	defer dmr.Dereg()
	fillSeeded(src.Bytes(), cfg.Seed)
	rep.region, rep.regionSTag, rep.regionTO = size, dmr.RKey, dmr.TO(0)

	// The Writes: WR i writes bytes [i*chunk, ...) of the stream, at
	// offset (i*chunk) mod size of the region.
	total := int((cfg.Bytes + rdmaChunk - 1) / rdmaChunk)
	wrAt := func(i int) rings.SendWR {
		pos := int64(i) * rdmaChunk
		n := int(min(rdmaChunk, cfg.Bytes-pos))
		off := int(pos % int64(size))
		n = min(n, size-off)
		w := rings.SendWR{Opcode: rings.WRRDMAWrite, WRID: uint64(i), RemoteAddr: dmr.TO(off), RKey: dmr.RKey, NumSGE: 1}
		w.SGL[0] = smr.SGE(off, n)
		if (i+1)%rdmaSignalEvery == 0 || i == total-1 {
			w.Flags = rings.WRSignaled
		}
		return w
	}
	// Which bytes count: a region smaller than a chunk-multiple lap
	// truncates the chunk at the region's end.
	var sent int64
	for i := range total {
		sent += int64(wrAt(i).SGL[0].Length)
	}

	wrs := make([]rings.SendWR, 0, rdmaWindow)
	wc := make([]rings.Completion, 16)
	posted, done := 0, 0
	start, cpu0 := time.Now(), cpusplit.Process()
	for done < total {
		if ctx.Err() != nil {
			return res, fmt.Errorf("interrupted after %d of %d Writes", done, total)
		}
		wrs = wrs[:0]
		for posted+len(wrs) < total && posted+len(wrs)-done < rdmaWindow {
			wrs = append(wrs, wrAt(posted+len(wrs)))
		}
		if len(wrs) > 0 {
			n, err := a.qp.PostSendList(wrs)
			posted += n
			if err != nil && !errors.Is(err, verbs.ErrQueueFull) {
				return res, fmt.Errorf("A: post: %w", err)
			}
		}
		n := a.cq.Poll(wc)
		if n == 0 {
			wctx, cancel := context.WithTimeout(ctx, cfg.Idle)
			n, err = a.cq.PollWait(wctx, wc, false)
			cancel()
			if err != nil {
				return res, fmt.Errorf("no completion for %v after %d of %d Writes: %w (QP %v, %v)",
					cfg.Idle, done, total, err, a.qp.State(), a.qp.Err())
			}
		}
		for _, c := range wc[:n] {
			if c.Status != rings.WCSuccess || c.Opcode != rings.WCRDMAWrite {
				return res, fmt.Errorf("A: Write %d completed %v %v", c.WRID, c.Opcode, c.Status)
			}
			done = int(c.WRID) + 1
		}
	}
	rep.writes = total
	// A Send after the Writes: its arrival at B means every Write was
	// placed.
	fin := rings.SendWR{Opcode: rings.WRSend, Flags: rings.WRSignaled, WRID: uint64(total), NumSGE: 1}
	fin.SGL[0] = smr.SGE(0, 4)
	if err := a.qp.PostSend(&fin); err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	wctx, cancel := context.WithTimeout(ctx, cfg.Idle)
	defer cancel()
	if _, err := b.waitOne(wctx, rings.WCRecv); err != nil {
		return res, fmt.Errorf("B: %w", err)
	}
	res.elapsed, res.cpu = time.Since(start), cpusplit.Process()-cpu0
	if _, err := a.waitOne(wctx, rings.WCSend); err != nil {
		return res, fmt.Errorf("A: %w", err)
	}
	// The region holds the last lap; with every lap the same source, it
	// equals A's source wherever the run reached.
	covered := int(min(sent, int64(size)))
	res.bytes = sent
	res.sent = sha256.Sum256(src.Bytes()[:covered])
	res.received = sha256.Sum256(dst.Bytes()[:covered])
	if res.sent != res.received {
		return res, fmt.Errorf("data corrupted: SHA-256 of B's region %x differs from A's source %x", res.received[:8], res.sent[:8])
	}
	return res, nil
}

// printRDMAReport prints the RDMA path's opcode checks, its per-QP
// statistics and the host-copy counters.
func printRDMAReport(w io.Writer, rep *rdmaReport) {
	fmt.Fprintln(w, "RDMA every opcode A -> B (data checked in the target memory)")
	t := &table{left: 3}
	for _, o := range rep.ops {
		st, detail := "ok", o.detail
		if o.err != nil {
			st, detail = "FAILED", o.err.Error()
		}
		t.row(o.name, st, detail)
	}
	t.write(w)
	if rep.writes > 0 {
		fmt.Fprintf(w, "\nRDMA Write throughput run: %d Writes of up to %s, %d outstanding, every %d signaled, into a %s region\n",
			rep.writes, services.Size(rdmaChunk), rdmaWindow, rdmaSignalEvery, services.Size(uint64(rep.region)))
	}
	if rep.haveStats {
		fmt.Fprintln(w, "\nper QP (device statistics)")
		t := &table{}
		t.row("", fmt.Sprintf("A QP %d", rep.qpnA), fmt.Sprintf("B QP %d", rep.qpnB))
		for _, f := range []struct {
			name string
			get  func(tcpstack.QPCounters) uint64
		}{
			{"rx_fpdus", func(s tcpstack.QPCounters) uint64 { return s.RxFPDUs }},
			{"tx_fpdus", func(s tcpstack.QPCounters) uint64 { return s.TxFPDUs }},
			{"rx_bytes", func(s tcpstack.QPCounters) uint64 { return s.RxBytes }},
			{"tx_bytes", func(s tcpstack.QPCounters) uint64 { return s.TxBytes }},
			{"placed", func(s tcpstack.QPCounters) uint64 { return s.Placed }},
			{"sourced", func(s tcpstack.QPCounters) uint64 { return s.Sourced }},
			{"rx_messages", func(s tcpstack.QPCounters) uint64 { return s.RxMessages }},
			{"read_requests_recv", func(s tcpstack.QPCounters) uint64 { return s.ReadRequestsRecv }},
			{"read_responses_sent", func(s tcpstack.QPCounters) uint64 { return s.ReadResponsesSent }},
			{"crc_errors", func(s tcpstack.QPCounters) uint64 { return s.CRCErrors }},
			{"terminates_sent", func(s tcpstack.QPCounters) uint64 { return s.TerminatesSent }},
			{"terminates_recv", func(s tcpstack.QPCounters) uint64 { return s.TerminatesRecv }},
			{"flushed_wrs", func(s tcpstack.QPCounters) uint64 { return s.FlushedWRs }},
			{"discarded_bytes", func(s tcpstack.QPCounters) uint64 { return s.DiscardedBytes }},
			{"bad_host_entries", func(s tcpstack.QPCounters) uint64 { return s.BadHostEntries }},
			{"completions_lost", func(s tcpstack.QPCounters) uint64 { return s.CompletionsLost }},
		} {
			t.row(f.name, u64(f.get(rep.qpA)), u64(f.get(rep.qpB)))
		}
		t.write(w)
	}
	fmt.Fprintf(w, "\nhost copies on the RDMA path (DriverStats.HostCopyBytes delta, from connection to the end of the run): A %d B, B %d B\n",
		rep.copyA, rep.copyB)
}
