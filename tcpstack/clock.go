package tcpstack

import (
	"time"

	"gvisor.dev/gvisor/pkg/tcpip"
)

// Timer is a one-shot timer on the host's clock: the real one (a
// time.Timer), or a lockstep run's virtual clock (DriverConfig.Clock), on
// which a real timer would fire at a different point of the run each time.
type Timer struct {
	// C receives the time once the timer fires.
	C <-chan time.Time

	rt *time.Timer // the real clock's

	clock tcpip.Clock // a virtual clock's
	vt    tcpip.Timer
	ch    chan time.Time
}

// NewTimer starts a timer of d on the host's clock.
func (h *Host) NewTimer(d time.Duration) *Timer { return h.Driver.newTimer(d) }

func (d *Driver) newTimer(dur time.Duration) *Timer {
	c := d.cfg.Clock
	if c == nil {
		rt := time.NewTimer(dur)
		return &Timer{C: rt.C, rt: rt}
	}
	t := &Timer{clock: c, ch: make(chan time.Time, 1)}
	t.C = t.ch
	t.vt = c.AfterFunc(dur, t.fire)
	return t
}

func (t *Timer) fire() {
	select {
	case t.ch <- t.clock.Now():
	default:
	}
}

// Stop stops the timer; false if it had fired or was stopped.
func (t *Timer) Stop() bool {
	if t.rt != nil {
		return t.rt.Stop()
	}
	return t.vt.Stop()
}

// Reset makes the timer fire after d, whatever it did before; a value it
// sent and nobody received is dropped (as time.Timer's, since Go 1.23).
func (t *Timer) Reset(d time.Duration) {
	if t.rt != nil {
		t.rt.Reset(d)
		return
	}
	t.vt.Stop()
	select {
	case <-t.ch:
	default:
	}
	t.vt.Reset(d)
}

// nanos is the driver's clock in ns (only differences mean anything).
func (d *Driver) nanos() int64 {
	if c := d.cfg.Clock; c != nil {
		return int64(c.NowMonotonic().Sub(tcpip.MonotonicTime{}))
	}
	return monotime()
}

// AfterFunc calls f in its own goroutine after d on the host's clock (as
// time.AfterFunc on the real one); stop cancels it, false if f has been
// started or was cancelled.
func (h *Host) AfterFunc(d time.Duration, f func()) (stop func() bool) {
	if c := h.Driver.cfg.Clock; c != nil {
		return c.AfterFunc(d, f).Stop
	}
	return time.AfterFunc(d, f).Stop
}
