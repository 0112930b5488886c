package nic

import (
	"time"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/rings"
)

// The stepped unit: a traced or manual device runs the same passes as the
// free-running unit, but each pass is a step with its clock fixed for the
// whole of it, and nothing the unit does depends on how long it spun. What a
// step does is then a function of what the host had published, the frames
// at the port and the clock: a replay that gives a fresh device the same
// three, step by step, gets the same writes, frames and interrupts back.
//
// The free-running unit parks by announcing NEED_WAKEUP and re-checking;
// whether a publish finds the flag set depends on timing, and the flag is
// host-visible. A stepped unit keeps every flag set for good instead: every
// publish rings the doorbell, which costs a channel operation, and no
// interleaving is possible.

// Step runs one pass of the unit at device time now (ns), and reports how
// much work it found (0: idle; the interrupt, releases and counter
// publication of an idle point have been done). doorbell says the host rang
// since the last step, parked that the unit slept before it (counted, as
// the free-running unit counts its parks). Only for a Manual device, from
// one goroutine.
func (d *Device) Step(now int64, doorbell, parked bool) int {
	return d.step(now, doorbell, parked)
}

// StopAt stops a Manual device with its final step at device time now.
func (d *Device) StopAt(now int64) error {
	d.stopOnce.Do(func() {
		if d.started {
			d.finalStep(now)
		}
		d.runErr = d.port.Close()
	})
	return d.runErr
}

// NextDeadline is the device time of the unit's next timer (the engine's
// timers, the end of a receive stall), or delegation.NoDeadline: a harness
// with a virtual clock advances it there when nothing else is pending.
func (d *Device) NextDeadline() int64 {
	dl := d.eng.NextDeadline()
	if d.rxStallSince != 0 {
		dl = min(dl, d.rxStallSince+int64(d.cfg.RxBufferWait))
	}
	if d.intrPending > 0 {
		dl = min(dl, d.intrSince+int64(d.cfg.IntrDelay))
	}
	return dl
}

func (d *Device) startStepped() {
	d.cmd.SetNeedWakeup(true)
	d.tx.SetNeedWakeup(true)
	d.rx.SetNeedWakeup(true)
	d.notify.SetNeedWakeup(true)
	d.poll = d.port.(PollPort)
	if wp, ok := d.poll.(WakeupPort); ok {
		wp.SetNeedWakeup(true) // as the rings': the stepper wants every kick
	}
	if d.cfg.Manual {
		return
	}
	d.poll.SetReadableFunc(func() {
		if d.parked.Load() {
			d.bell.Kick()
		}
	})
	d.wg.Add(1)
	go labelled("unit", d.stepper)
}

func (d *Device) step(now int64, doorbell, parked bool) int {
	d.steps++
	// The RDMA doorbells rung before the step, taken before the tracer
	// syncs the rings' indices: a host publishes before it rings, so
	// every doorbell taken finds its entries.
	bells := d.takeBells()
	if d.cfg.Tracer != nil {
		d.cfg.Tracer.Step(StepInfo{N: d.steps, Now: now, Doorbell: doorbell, Parked: parked, Bells: &d.bells.taken})
		bells = d.bells.taken
	}
	d.now = now
	if doorbell {
		d.count(rings.StatDoorbells)
	}
	if parked {
		d.count(rings.StatParks)
	}
	d.pollPort()
	work := d.serveArms(bells)
	work += d.serveQPs(bells)
	work += d.serviceCommands()
	work += d.serviceTx()
	work += d.serviceRx()
	work += d.serviceTimers()
	d.moderate(work == 0)
	if work == 0 {
		d.cmd.Release()
		d.tx.Release()
		d.rx.Release()
		d.snapshot()
		d.publishStats(true)
	}
	return work
}

// finalStep is the stopping unit's last step: consumed slots handed back,
// posted notifications published, the counters as they end.
func (d *Device) finalStep(now int64) {
	d.steps++
	if d.cfg.Tracer != nil {
		d.cfg.Tracer.Step(StepInfo{N: d.steps, Now: now, Stop: true})
	}
	d.now = now
	d.flushOnStop()
}

// stepper is the traced unit's goroutine: steps on the monotonic clock
// while there is work, then sleeps until a doorbell, a frame or the next
// timer.
func (d *Device) stepper() {
	defer d.wg.Done()
	slept := false
	for !d.stop.Load() {
		if d.step(nanotime(), d.hostRang.Swap(false), slept) > 0 {
			slept = false
			continue
		}
		slept = false
		d.parked.Store(true)
		if !d.hostRang.Load() && d.poll.Pending() == 0 && !d.stop.Load() {
			wait := 5 * time.Millisecond // as the polling unit: never unbounded
			if dl := d.NextDeadline(); dl != delegation.NoDeadline {
				wait = min(wait, max(time.Duration(dl-nanotime()), time.Microsecond))
			}
			slept = true
			d.sleep(wait)
		}
		d.parked.Store(false)
	}
	d.finalStep(nanotime())
}

// WatchPort has f called (on the writer's goroutine) whenever a frame
// reaches a started manual device's port: a harness that steps the device
// sleeps until one comes.
func (d *Device) WatchPort(f func()) { d.poll.SetReadableFunc(f) }
