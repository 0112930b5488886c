package nic

import (
	"context"
	"runtime"
	"runtime/pprof"
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/rings"
)

// The offload unit's loop and what it does between passes: parking on the
// doorbell, the engine's timers, phase-error counting and the device clock.

// unit is the offload unit's main loop: one goroutine, like the
// microcontroller or state machine on a real card. It polls its sources in
// bounded bursts, spins briefly when idle (and yields for IdleYield), then
// parks with every ring's NEED_WAKEUP flag set.
func (d *Device) unit() {
	defer d.wg.Done()
	idle := 0
	var idleSince int64 // device clock when the yielding began (0: not yet)
	for !d.stop.Load() {
		d.now = nanotime() // one clock read per pass
		if d.poll != nil {
			d.pollPort()
		}
		bells := d.takeBells()
		work := d.serveArms(bells)
		work += d.serveQPs(bells)
		work += d.serviceCommands()
		work += d.serviceTx()
		work += d.serviceRx()
		work += d.serviceTimers()
		if d.burst != nil {
			d.burst.FlushWakeups()
		}
		d.moderate(work == 0)
		if work > 0 {
			idle, idleSince = 0, 0
			continue
		}
		idle++
		if idle < d.cfg.SpinPolls {
			runtime.Gosched()
			continue
		}
		if d.cfg.IdleYield > 0 {
			if idleSince == 0 {
				idleSince = d.now
			}
			if d.now-idleSince < int64(d.cfg.IdleYield) {
				osYield()
				continue
			}
		}
		idle, idleSince = 0, 0
		d.park()
	}
	d.flushOnStop()
}

// flushOnStop is the stopping unit's last work: hand back what was consumed
// and publish what was posted, so the indices in host memory agree with the
// counters.
func (d *Device) flushOnStop() {
	d.cmd.Release()
	d.tx.Release()
	d.rx.Release()
	d.notify.Publish()
	d.raiseInterrupt()
	if d.burst != nil {
		d.burst.FlushWakeups()
	}
	d.snapshot()
	d.publishStats(true)
}

func (d *Device) park() {
	d.cmd.Release()
	d.tx.Release()
	d.rx.Release()
	d.snapshot()
	d.publishStats(true)
	d.parked.Store(true)
	d.cmd.SetNeedWakeup(true)
	d.tx.SetNeedWakeup(true)
	if d.pollWake != nil {
		d.pollWake.SetNeedWakeup(true)
	}
	stalled := d.rxStallSince != 0
	if stalled {
		// Waiting for the host: a legacy buffer posted or notification
		// space freed kicks us.
		d.rx.SetNeedWakeup(true)
		d.notify.SetNeedWakeup(true)
	}
	// Re-check after announcing sleep: anything published before the
	// producer could see our flags did not kick us.
	if d.cmd.Available() == 0 && d.tx.Available() == 0 && !d.bells.any.Load() && (d.fifo.empty() || stalled && !d.rxUnstalled()) &&
		(d.poll == nil || d.poll.Pending() == 0 || d.fifoFull()) && !d.stop.Load() {
		d.count(rings.StatParks)
		// Sleep until a doorbell, the engine's next timer or the end of
		// the receive stall.
		wait := time.Duration(-1)
		if dl := d.eng.NextDeadline(); dl != delegation.NoDeadline {
			wait = max(time.Duration(dl-nanotime()), time.Microsecond)
		}
		if stalled {
			left := max(time.Duration(d.rxStallSince+int64(d.cfg.RxBufferWait)-nanotime()), time.Microsecond)
			if wait < 0 || left < wait {
				wait = left
			}
		}
		if d.poll != nil && (wait < 0 || wait > 5*time.Millisecond) {
			// Belt and braces: the port's wake-up is an atomic flag
			// check against a channel length; never sleep unbounded on it.
			wait = 5 * time.Millisecond
		}
		// Doorbells are counted by hostDoorbell: a wake-up here may be
		// the MAC's, or a kick latched before the unit parked.
		d.sleep(wait)
	}
	d.unparkStats()
	d.parked.Store(false)
	d.cmd.SetNeedWakeup(false)
	d.tx.SetNeedWakeup(false)
	if d.pollWake != nil {
		d.pollWake.SetNeedWakeup(false)
	}
	if stalled {
		d.rx.SetNeedWakeup(false)
		d.notify.SetNeedWakeup(false)
	}
}

// rxUnstalled reports whether what the stalled frame waits for arrived.
func (d *Device) rxUnstalled() bool {
	return d.rx.Available() > 0 && d.notify.Free() > 0
}

// fineTimerBelow is the longest wait the unit times with its fine timer:
// below it Go's timers round up to the next millisecond when the process
// is idle (hwtimer_linux.go); above it that rounding is small, and a
// time.Timer costs no system call to set.
const fineTimerBelow = 4 * time.Millisecond

// sleep parks the unit until a kick (true) or the timeout (a negative
// timeout waits for a kick only). The timer is reused: parking allocates
// nothing.
func (d *Device) sleep(timeout time.Duration) bool {
	if timeout < 0 {
		<-d.bell.C()
		return true
	}
	if d.fine != nil && timeout < fineTimerBelow {
		// The timerfd rings the bell itself at the deadline.
		d.fine.arm(timeout)
		<-d.bell.C()
		return true
	}
	d.timer.Reset(timeout)
	select {
	case <-d.bell.C():
		if !d.timer.Stop() {
			select {
			case <-d.timer.C:
			default:
			}
		}
		return true
	case <-d.timer.C:
		return false
	}
}

// serviceTimers runs the engine's due timers and retries notifications that
// found the ring full.
func (d *Device) serviceTimers() int {
	now := d.now
	n := 0
	if d.eng.NextDeadline() <= now {
		d.count(rings.StatTimerRuns)
		d.eng.Tick(now)
		n++
	}
	if d.eng.PendingNotifications() > 0 && d.notify.Free() > 0 {
		d.eng.RetryNotifications()
	}
	if len(d.rdma.pending) > 0 {
		d.retryEvents()
	}
	return n
}

// phaseError counts a bad entry once per index, so a host that publishes an
// index early is reported, not amplified by every poll.
func (d *Device) phaseError(ring int, idx uint32) {
	if d.phaseErrAt[ring] != idx+1 {
		d.phaseErrAt[ring] = idx + 1
		d.count(rings.StatRingPhaseErrors)
	}
}

// labelled runs f with pprof labels side=device and part=name, so CPU
// profiles split the device's time from the host's (the host side is
// everything else in the process).
func labelled(name string, f func()) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("side", "device", "part", name)))
	f()
}

var epoch = time.Now()

func nanotime() int64 { return int64(time.Since(epoch)) }
