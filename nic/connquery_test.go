package nic

import (
	"bytes"
	"testing"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// TestQueryConn: QUERY_CONN writes the engine's view of a delegated
// connection (its retransmission after a timeout included) into host
// memory, and refuses a bad flag, an index not delegated (never, or
// released), a short length and a block not wholly in host memory with
// the status its row lists, counted, and not a byte written.
func TestQueryConn(t *testing.T) {
	h := newHostSideConfig(t, 8, Config{Engine: delegation.Config{MinRTO: 10e6, InitialRTO: 20e6}})
	p := newRawPeer(t, h)
	p.lport, p.pport, p.seq, p.ack = 1000, 2000, 5000, 1000
	if st := h.offload(0, 1000, 5000); st != rings.StatusOK {
		t.Fatalf("OFFLOAD: %v", st)
	}
	blk, _ := h.mem.Alloc(rings.ConnInfoSize, 64)
	bb, _ := h.mem.Map(blk, rings.ConnInfoSize)
	query := func(c rings.Command) (rings.Command, rings.ConnInfo) {
		t.Helper()
		for i := range bb {
			bb[i] = 0xA5
		}
		c.Opcode = rings.OpQueryConn
		r := h.command(c)
		var ci rings.ConnInfo
		if r.Status == rings.StatusOK {
			if err := ci.Decode(bb); err != nil {
				t.Fatal(err)
			}
			if err := ci.Check(); err != nil {
				t.Fatalf("the device's block: %v", err)
			}
		} else if !bytes.Equal(bb, bytes.Repeat([]byte{0xA5}, rings.ConnInfoSize)) {
			t.Errorf("QUERY_CONN %+v: %v, and the block was written", c, r.Status)
		}
		return r, ci
	}

	// 3000 bytes out; the first transmission is lost (the peer ignores
	// it), the retransmission timer resends, the peer acknowledges.
	src, _ := h.mem.Alloc(4096, 64)
	h.txDelegated(0, src, 3000, rings.TxPush)
	p.recvData(3000)
	if got := p.recvData(1); len(got) == 0 {
		t.Fatal("no retransmission")
	}
	p.ack = 4000
	p.data([]byte("hello"), fPSH)
	h.waitNotify(rings.NtfAckThreshold)

	r, ci := query(rings.Command{Conn: 0, Addr: blk, Len: rings.ConnInfoSize})
	if r.Status != rings.StatusOK || r.Result != rings.ConnInfoSize {
		t.Fatalf("QUERY_CONN: %v, result %d", r.Status, r.Result)
	}
	t.Logf("%+v", ci)
	if ci.State != rings.StateEstablished || ci.SndUna != 4000 || ci.SndNxt != 4000 || ci.RcvNxt != 5005 || ci.MSS != 1460 {
		t.Errorf("sequence state: %+v", ci)
	}
	if ci.Retrans == 0 || ci.RTOs == 0 || ci.BytesAcked != 3000 || ci.BytesReceived != 5 || ci.SegsIn != 1 || ci.SegsOut < 4 {
		t.Errorf("counts: %+v", ci)
	}
	if ci.Cwnd == 0 || ci.Ssthresh >= 1<<30 || ci.RTO == 0 {
		t.Errorf("after a timeout, want a cut ssthresh: %+v", ci)
	}
	// The engine's counters are a snapshot the unit takes when it parks:
	// wait for one taken after the query before comparing.
	var ec delegation.Counters
	testutil.WaitFor(t, "an engine counter snapshot that covers the query", func() bool {
		ec = h.dev.EngineCounters()
		return ec.TxSegments >= ci.SegsOut
	})
	if ci.Retrans != ec.TxRetransSegs || ci.RTOs != ec.RTOExpired || ci.SegsOut != ec.TxSegments {
		t.Errorf("the connection's counts %+v, the engine's (one connection) %+v", ci, ec)
	}

	dma, errs := h.dev.Stat(rings.StatDMAErrors), h.dev.Stat(rings.StatCmdErrors)
	end := h.mem.Base() + rings.Addr(h.mem.Size())
	// A block straddling the end of host memory: its first 64 bytes are
	// in it, and must stay as they are.
	tail, _ := h.mem.Map(end-64, 64)
	for i := range tail {
		tail[i] = 0x5A
	}
	for _, c := range []struct {
		c    rings.Command
		want rings.Status
	}{
		{rings.Command{Conn: 0, Addr: blk, Len: rings.ConnInfoSize, Flags: 1}, rings.StatusBadParam},
		{rings.Command{Conn: 5, Addr: blk, Len: rings.ConnInfoSize}, rings.StatusBadConn},
		{rings.Command{Conn: 1 << 20, Addr: blk, Len: rings.ConnInfoSize}, rings.StatusBadConn},
		{rings.Command{Conn: 0, Addr: blk, Len: rings.ConnInfoSize - 1}, rings.StatusBadParam},
		{rings.Command{Conn: 0, Addr: 0x99, Len: rings.ConnInfoSize}, rings.StatusBadAddress},
		{rings.Command{Conn: 0, Addr: end - 64, Len: rings.ConnInfoSize}, rings.StatusBadAddress},
		{rings.Command{Conn: 0, Addr: ^rings.Addr(0) - 8, Len: rings.ConnInfoSize}, rings.StatusBadAddress},
	} {
		if r, _ := query(c.c); r.Status != c.want {
			t.Errorf("QUERY_CONN %+v: %v, want %v", c.c, r.Status, c.want)
		}
	}
	if !bytes.Equal(tail, bytes.Repeat([]byte{0x5A}, 64)) {
		t.Errorf("a refused block straddling the end of host memory was partly written: % x", tail)
	}
	if got := h.dev.Stat(rings.StatDMAErrors) - dma; got != 3 {
		t.Errorf("DMA errors counted: %d, want 3", got)
	}
	if got := h.dev.Stat(rings.StatCmdErrors) - errs; got != 7 {
		t.Errorf("command errors counted: %d, want 7", got)
	}

	// Released: the index is not delegated any more.
	if st := h.command(rings.Command{Opcode: rings.OpAbort, Conn: 0}).Status; st != rings.StatusOK {
		t.Fatalf("ABORT: %v", st)
	}
	h.command(rings.Command{Opcode: rings.OpRelease, Conn: 0}) // ABORT may have released it already
	if r, _ := query(rings.Command{Conn: 0, Addr: blk, Len: rings.ConnInfoSize}); r.Status != rings.StatusBadConn {
		t.Errorf("QUERY_CONN of a released connection: %v, want BAD_CONN", r.Status)
	}
}
