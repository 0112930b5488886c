package tcpstack

import (
	"errors"
	"strings"
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestInfoQueryConn: Info issues QUERY_CONN and merges the block the
// device wrote with the host's view; a block outside what the host queued
// or had been told, or one breaking the ABI's rules, is a counted device
// error returned with the host's view; a refusal is returned as it is.
// The device is the test.
func TestInfoQueryConn(t *testing.T) {
	r := newOffloadRig(t)
	cs := &cmdSeq{r: r}
	dc := r.conn(1)
	host := dc.HostInfo() // SND.UNA 1000, nothing queued
	inUse := r.c.d.Memory().InUse()
	good := rings.ConnInfo{Version: rings.ConnInfoVersion, State: rings.StateEstablished, SndScale: 7, RcvScale: 7,
		SndUna: host.SndUna, SndNxt: host.SndUna, RcvNxt: host.RcvNxt + 10, SndWnd: 65535, RcvWnd: 4096, MSS: 1460,
		Cwnd: 14600, Ssthresh: 7300, SRTT: 250, RTTVar: 80, MinRTT: 200, RTO: 200000,
		Retrans: 5, FastRecoveries: 1, RTOs: 1, TLPs: 2, SegsIn: 9, SegsOut: 20, BytesAcked: 0, BytesReceived: 10}
	// answer runs Info against a device that answers QUERY_CONN with st
	// and, for OK, the block ci.
	answer := func(st rings.Status, ci rings.ConnInfo) (ConnInfo, error) {
		t.Helper()
		type res struct {
			i   ConnInfo
			err error
		}
		ch := make(chan res, 1)
		go func() { i, err := dc.Info(); ch <- res{i, err} }()
		cmd := r.c.published(cs.next)
		if cmd.Opcode != rings.OpQueryConn || cmd.Conn != 1 || cmd.Len < rings.ConnInfoSize {
			t.Fatalf("command %+v, want QUERY_CONN of connection 1", cmd)
		}
		if st == rings.StatusOK {
			b, err := r.c.d.Memory().Map(cmd.Addr, rings.ConnInfoSize)
			if err != nil {
				t.Fatalf("QUERY_CONN's block: %v", err)
			}
			ci.Encode(b)
		}
		result := uint64(0)
		if st == rings.StatusOK {
			result = rings.ConnInfoSize
		}
		cs.take(rings.OpQueryConn, st, result)
		out := waitRes(t, ch, "Info")
		return out.i, out.err
	}

	i, err := answer(rings.StatusOK, good)
	if err != nil {
		t.Fatalf("Info: %v", err)
	}
	if !i.Device || i.Cwnd != 14600 || i.Ssthresh != 7300 || i.Retransmits != 5 || i.RTOs != 1 || i.TailLossProbes != 2 ||
		i.DeviceRTT.Microseconds() != 250 || i.MinRTT.Microseconds() != 200 || i.RTO.Milliseconds() != 200 ||
		i.MSS != 1460 || i.SndWndScale != 7 || i.SndUna != host.SndUna || i.RcvNxt != host.RcvNxt || i.DeviceErrors != 0 {
		t.Fatalf("Info: %+v", i)
	}

	for _, c := range []struct {
		name string
		bad  func(*rings.ConnInfo)
		why  string
	}{
		{"SND.NXT past what was queued", func(c *rings.ConnInfo) { c.SndNxt = c.SndUna + 1 }, "beyond"},
		{"SND.UNA below what was acknowledged", func(c *rings.ConnInfo) { c.SndUna--; c.SndNxt-- }, "below"},
		{"RCV.NXT below what was placed", func(c *rings.ConnInfo) { c.RcvNxt = host.RcvNxt - 1 }, "RCV.NXT"},
		{"version 2", func(c *rings.ConnInfo) { c.Version = 2 }, "version"},
		{"MSS 0", func(c *rings.ConnInfo) { c.MSS = 0 }, "MSS"},
	} {
		before := r.o.drv.Stats().ConnQueryBad
		ci := good
		c.bad(&ci)
		i, err := answer(rings.StatusOK, ci)
		if err == nil || !strings.Contains(err.Error(), "device error") || !strings.Contains(err.Error(), c.why) {
			t.Errorf("%s: Info error %v", c.name, err)
		}
		if i.Device || i.Cwnd != 0 {
			t.Errorf("%s: the device's numbers were taken: %+v", c.name, i)
		}
		if got := r.o.drv.Stats().ConnQueryBad - before; got != 1 {
			t.Errorf("%s: %d rejections counted", c.name, got)
		}
	}
	if i := dc.HostInfo(); i.DeviceErrors != 5 {
		t.Errorf("the connection's device errors: %d, want 5", i.DeviceErrors)
	}

	// A refusal is the device's answer, not a device error.
	bad := r.o.drv.Stats().ConnQueryBad
	if _, err := answer(rings.StatusBadConn, good); err == nil || !strings.Contains(err.Error(), "BAD_CONN") {
		t.Errorf("BAD_CONN: Info error %v", err)
	}
	if s := r.o.drv.Stats(); s.ConnQueryBad != bad || s.ConnQueries != 7 {
		t.Errorf("driver: %d queries, %d rejected (want 7, %d)", s.ConnQueries, s.ConnQueryBad, bad)
	}

	if got := r.c.d.Memory().InUse(); got != inUse {
		t.Errorf("host memory in use: %d bytes, %d before the queries: a block not given back", got, inUse)
	}

	// Released: no command, the host's view and ErrConnReleased.
	dc.mu.Lock()
	dc.released = true
	dc.mu.Unlock()
	if i, err := dc.Info(); !errors.Is(err, ErrConnReleased) || i.SndUna != host.SndUna {
		t.Errorf("released: %+v, %v", i, err)
	}
}
