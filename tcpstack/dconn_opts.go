package tcpstack

import (
	"fmt"
	"math"
	"net"
	"time"

	"github.com/emunic/emunic/rings"
)

// The per-connection options a delegated connection's engine runs with,
// set the way net.TCPConn sets them: each is an UPDATE of the connection
// on the NIC (rings.UpdKeepalive, UpdNagle, UpdCongestion), waited for, so
// a refusal is the call's error.

// Keepalive defaults, as Go's net package uses them (net.KeepAliveConfig).
const (
	defaultKeepAliveIdle     = 15 * time.Second
	defaultKeepAliveInterval = 15 * time.Second
	defaultKeepAliveCount    = 9
)

// SetKeepAlive turns keepalive on (with the configuration SetKeepAliveConfig
// or SetKeepAlivePeriod set last, or Go's defaults: 15 s idle, 15 s between
// probes, 9 probes) or off.
func (c *DelegatedConn) SetKeepAlive(on bool) error {
	c.mu.Lock()
	cfg := c.keepalive
	c.mu.Unlock()
	cfg.Enable = on
	return c.SetKeepAliveConfig(cfg)
}

// SetKeepAlivePeriod sets the idle time before the first probe and the time
// between probes, as net.TCPConn does, and turns keepalive on.
func (c *DelegatedConn) SetKeepAlivePeriod(d time.Duration) error {
	c.mu.Lock()
	cfg := c.keepalive
	c.mu.Unlock()
	cfg.Enable, cfg.Idle, cfg.Interval = true, d, d
	return c.SetKeepAliveConfig(cfg)
}

// SetKeepAliveConfig sets keepalive as net.TCPConn.SetKeepAliveConfig
// does: a zero Idle, Interval or Count takes Go's default, a negative one
// keeps what the connection had. The engine counts in milliseconds: a
// positive duration under one is one. The connection gives up (its next
// Read or Write fails) after Count unanswered probes.
func (c *DelegatedConn) SetKeepAliveConfig(cfg net.KeepAliveConfig) error {
	c.mu.Lock()
	cur := c.keepalive
	c.mu.Unlock()
	if c.isClosed() {
		return opErr("set keepalive", c, net.ErrClosed)
	}
	pick := func(v, old, def time.Duration) time.Duration {
		switch {
		case v == 0:
			return def
		case v < 0:
			if old == 0 {
				return def
			}
			return old
		}
		return v
	}
	cfg.Idle = pick(cfg.Idle, cur.Idle, defaultKeepAliveIdle)
	cfg.Interval = pick(cfg.Interval, cur.Interval, defaultKeepAliveInterval)
	switch {
	case cfg.Count == 0:
		cfg.Count = defaultKeepAliveCount
	case cfg.Count < 0:
		cfg.Count = cur.Count
		if cfg.Count == 0 {
			cfg.Count = defaultKeepAliveCount
		}
	}
	ms := func(d time.Duration) (uint32, error) {
		v := (d + time.Millisecond - 1) / time.Millisecond
		if v > math.MaxUint32 {
			return 0, fmt.Errorf("%v is longer than the engine counts (%v)", d, time.Duration(math.MaxUint32)*time.Millisecond)
		}
		return uint32(v), nil
	}
	idle, err := ms(cfg.Idle)
	if err == nil {
		var intvl uint32
		if intvl, err = ms(cfg.Interval); err == nil {
			u := rings.ConnUpdate{Flags: rings.UpdKeepalive}
			if cfg.Enable {
				u.KeepaliveIdleMs, u.KeepaliveIntervalMs, u.KeepaliveCount = idle, intvl, uint32(cfg.Count)
			}
			err = c.update(&u)
		}
	}
	if err != nil {
		return opErr("set keepalive", c, err)
	}
	c.mu.Lock()
	c.keepalive = cfg
	c.mu.Unlock()
	return nil
}

// KeepAliveConfig is the keepalive configuration the engine runs the
// connection with (Enable false: off).
func (c *DelegatedConn) KeepAliveConfig() net.KeepAliveConfig {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keepalive
}

// SetNoDelay is net.TCPConn's: true (the default, as for Go's TCP
// connections) sends each write at once; false turns Nagle's algorithm on
// in the engine (a short segment waits while data is unacknowledged).
func (c *DelegatedConn) SetNoDelay(noDelay bool) error {
	if err := c.update(&rings.ConnUpdate{Flags: rings.UpdNagle, Nagle: !noDelay}); err != nil {
		return opErr("set nodelay", c, err)
	}
	return nil
}

// SetCongestionControl sets the connection's congestion control (Linux's
// TCP_CONGESTION): rings.CCCubic or rings.CCNewReno. The window goes on
// from where it is.
func (c *DelegatedConn) SetCongestionControl(cc rings.CongestionControl) error {
	if !cc.Known() {
		return opErr("set congestion control", c, fmt.Errorf("unknown congestion control %v", cc))
	}
	if err := c.update(&rings.ConnUpdate{Flags: rings.UpdCongestion, Congestion: cc}); err != nil {
		return opErr("set congestion control", c, err)
	}
	return nil
}

// isClosed: closed by the application or given back to the host stack.
func (c *DelegatedConn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed || c.released
}

// update submits an UPDATE of the connection and waits for its status;
// on a closed connection it is net.ErrClosed.
func (c *DelegatedConn) update(u *rings.ConnUpdate) error {
	if c.isClosed() {
		return net.ErrClosed
	}
	var cmd rings.Command
	u.ToCommand(&cmd)
	cmd.Conn = c.idx
	res, err := c.o.drv.Command(cmd, c.o.cfg.CommandTimeout)
	if err != nil {
		return err
	}
	if res.Status != rings.StatusOK {
		return fmt.Errorf("UPDATE: %v", res.Status)
	}
	return nil
}
