package tcpstack

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/emunic/emunic/rings"
)

// The engine's view of a delegated connection (QUERY_CONN), for Info. The
// notifications tell the host SND.UNA, SND.NXT and the ACK count as they
// change, but not the congestion window, the RTT estimator or the loss
// recovery counts: those only the engine has, and it gives them when asked,
// as a NIC gives a queue's context. The host does not take the device's
// block on trust: the numbers must fall inside what the host queued and
// had been told before it asked (a block outside them is a device error,
// counted like a notification that breaks them).

// connQuery serialises one connection's QUERY_CONNs: one at a time, each
// with a block of host memory of its own.
type connQuery struct{ mu sync.Mutex }

// ErrConnReleased: the connection's index was released; the device's view
// of it is gone (HostInfo still gives the host's).
var ErrConnReleased = fmt.Errorf("tcpstack: connection released: %w", net.ErrClosed)

// queryDevice issues QUERY_CONN for c and returns the device's block,
// checked against the host's view. On a timeout the block's memory stays
// allocated until the device answers (the late function frees it): the
// device may still write it.
func (c *DelegatedConn) queryDevice() (rings.ConnInfo, error) {
	var ci rings.ConnInfo
	c.query.mu.Lock()
	defer c.query.mu.Unlock()
	o := c.o
	s := &o.drv.stats
	// What the host knew before asking: the device's block, written
	// after, cannot be older (a notification taken while the query is in
	// flight may be newer than the block, so the bounds are these).
	c.mu.Lock()
	released := c.released
	una0, rcv0 := c.sndISS+uint32(c.sndHead), c.nv.rcvNxt
	c.mu.Unlock()
	if released {
		return ci, ErrConnReleased
	}
	mem := o.drv.mem
	addr, err := mem.Alloc(rings.ConnInfoSize, rings.CacheLine)
	if err != nil {
		return ci, fmt.Errorf("QUERY_CONN: block: %w", err)
	}
	blk, err := mem.Map(addr, rings.ConnInfoSize)
	if err != nil {
		mem.Free(addr)
		return ci, fmt.Errorf("QUERY_CONN: block: %w", err)
	}
	// A block the device left untouched must not decode as a valid one.
	clear(blk)
	s.connQueries.Add(1)
	res, err := o.drv.command(rings.Command{Opcode: rings.OpQueryConn, Conn: c.idx, Addr: addr, Len: rings.ConnInfoSize},
		o.cfg.CommandTimeout, func(rings.Command, error) { mem.Free(addr) })
	if err != nil {
		if !errors.Is(err, ErrCommandTimeout) {
			mem.Free(addr) // never submitted, or finished: the device writes it no more
		}
		return ci, fmt.Errorf("QUERY_CONN: %w", err)
	}
	defer mem.Free(addr)
	if res.Status != rings.StatusOK {
		return ci, fmt.Errorf("QUERY_CONN: %v", res.Status)
	}
	if res.Result != rings.ConnInfoSize {
		return ci, c.queryBad(fmt.Sprintf("QUERY_CONN result %d, want %d", res.Result, rings.ConnInfoSize))
	}
	if err := ci.Decode(blk); err != nil {
		return ci, c.queryBad(err.Error())
	}
	if err := ci.Check(); err != nil {
		return ci, c.queryBad(err.Error())
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.released {
		return ci, ErrConnReleased // the index may be another connection's by now
	}
	if c.nv.ulp {
		return ci, nil // the ULP's byte stream: the host queued none of it
	}
	top := c.sndISS + uint32(c.sndTail)
	if c.wrClosed {
		top++
	}
	var why string
	switch {
	case int32(ci.SndUna-una0) < 0:
		why = fmt.Sprintf("SND.UNA %d below %d already acknowledged", ci.SndUna, una0)
	case int32(ci.SndNxt-top) > 0:
		why = fmt.Sprintf("SND.NXT %d beyond %d queued", ci.SndNxt, top)
	case int32(ci.RcvNxt-rcv0) < 0:
		why = fmt.Sprintf("RCV.NXT %d below %d already placed", ci.RcvNxt, rcv0)
	}
	if why != "" {
		c.deviceErrorLocked(&s.connQueryBad, "QUERY_CONN: "+why)
		return ci, fmt.Errorf("tcpstack: device error: QUERY_CONN: %s", why)
	}
	return ci, nil
}

// queryBad counts a QUERY_CONN answer no device of this ABI gives.
func (c *DelegatedConn) queryBad(why string) error {
	c.mu.Lock()
	c.deviceErrorLocked(&c.o.drv.stats.connQueryBad, "QUERY_CONN: "+why)
	c.mu.Unlock()
	return fmt.Errorf("tcpstack: device error: %s", why)
}

// mergeDevice adds the device's view to the host's.
func (i *ConnInfo) mergeDevice(ci *rings.ConnInfo) {
	us := func(v uint32) time.Duration { return time.Duration(v) * time.Microsecond }
	i.Device = true
	i.State = ci.State
	i.SndUna, i.SndNxt, i.BytesInFlight = ci.SndUna, ci.SndNxt, ci.SndNxt-ci.SndUna
	i.SndWnd, i.RcvWnd, i.SndWndScale, i.RcvWndScale, i.MSS = ci.SndWnd, ci.RcvWnd, ci.SndScale, ci.RcvScale, ci.MSS
	i.Cwnd, i.Ssthresh = ci.Cwnd, ci.Ssthresh
	i.DeviceRTT, i.DeviceRTTVar, i.MinRTT, i.RTO = us(ci.SRTT), us(ci.RTTVar), us(ci.MinRTT), us(ci.RTO)
	i.Retransmits, i.RTOs, i.TailLossProbes, i.DeviceFastRecoveries = ci.Retrans, ci.RTOs, ci.TLPs, ci.FastRecoveries
	i.SegsIn, i.SegsOut, i.BytesAcked, i.BytesReceived, i.OOOBytes = ci.SegsIn, ci.SegsOut, ci.BytesAcked, ci.BytesReceived, ci.OOOBytes
}
