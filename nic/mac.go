package nic

import (
	"errors"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// The MAC side of the device: frames from the port into the receive FIFO,
// by the MAC goroutine (mac) or, for a port the unit polls, by the unit
// itself (pollPort, drainBlocked).

// mac is the receive side of the MAC: it moves frames from the port into the
// receive FIFO and wakes the unit if it sleeps. A full FIFO drops (counted),
// as a real MAC does when the engine falls behind.
func (d *Device) mac() {
	defer d.wg.Done()
	var spill []byte
	// A port that vouches for checksums it did not compute (a TAP with
	// offloads) saves computing them there and checking them here.
	cr, _ := d.port.(port.CsumReader)
	for {
		slot := d.fifo.reserve()
		for slot == nil && !d.cfg.DropWhenFull && !d.stop.Load() {
			// Flow control: wait for the unit to free a slot.
			d.macWaiting.Store(true)
			if slot = d.fifo.reserve(); slot == nil {
				d.macBell.Wait(time.Millisecond)
				slot = d.fifo.reserve()
			}
			d.macWaiting.Store(false)
		}
		full := slot == nil
		if full {
			if spill == nil {
				spill = make([]byte, len(d.fifo.slots[0]))
			}
			slot = spill
		}
		var lf port.LROFrame
		var err error
		switch {
		case d.lro != nil:
			lf, err = d.lro.ReadFrameLRO(slot)
		case cr != nil:
			lf.N, lf.L4Verified, err = cr.ReadFrameCsum(slot)
		default:
			lf.N, err = d.port.ReadFrame(slot)
		}
		if err != nil {
			if errors.Is(err, port.ErrFrameTooBig) {
				d.count(rings.StatRxDropOversize)
				continue
			}
			return // closed
		}
		if lf.GSOSize == 0 {
			lf.Segs, lf.WireBytes = 1, lf.N
		}
		// A super-frame counts as the wire frames it stands for.
		d.stats[rings.StatRxFrames].Add(uint64(lf.Segs))
		d.stats[rings.StatRxBytes].Add(uint64(lf.WireBytes))
		if full {
			d.stats[rings.StatRxDropFIFO].Add(uint64(lf.Segs))
			continue
		}
		d.fifo.pushLRO(lf.Off, lf.N, lf.L4Verified, lf.GSOSize, lf.Segs)
		if d.parked.Load() {
			d.bell.Kick()
		}
	}
}

// PollPort is a port the unit can poll from its own loop: TryReadFrame
// never blocks, and the readable function is called when a frame arrives.
type PollPort interface {
	TryReadFrame(buf []byte) (n int, ok bool, err error)
	SetReadableFunc(fn func())
	Pending() int
}

// WakeupPort is a PollPort whose writer wakes the reader (calls the
// readable function) only after the reader announced that it parks, as a
// ring's NEED_WAKEUP does: the shared-memory link. SetNeedWakeup(true)
// comes before the unit's last look at Pending, false after it wakes.
type WakeupPort interface {
	PollPort
	SetNeedWakeup(on bool)
}

// BlockingPort is a polled port whose WriteFrame waits for room when the
// far end is behind (the shared-memory link's flow control). The unit is
// both its writer and its only reader, so the port calls the function set
// here, on the writer's goroutine, whenever it finds no room and before it
// waits: the unit takes what arrived meanwhile. Two devices each waiting
// to send to the other would otherwise wait for good.
type BlockingPort interface {
	SetBlockedFunc(fn func())
}

// drainBlocked is a BlockingPort's blocked function: it moves every frame
// waiting on the port into the receive FIFO while the FIFO has room and
// drops the rest (counted in StatRxDropFIFO, a MAC's FIFO overflow), so
// that the far end, maybe blocked on us as we are on it, always gets its
// room back. The unit is inside a pass, waiting to transmit; the FIFO is
// its own and takes a push at any time.
func (d *Device) drainBlocked() {
	for {
		if !d.fifoFull() {
			took := d.fifo.tail.Load()
			d.pollPort()
			if d.fifo.tail.Load() == took {
				return // nothing waiting (or nothing readable yet)
			}
			continue
		}
		if d.spill == nil {
			d.spill = make([]byte, d.vlanFrameSize())
		}
		n, ok, err := d.poll.TryReadFrame(d.spill)
		switch {
		case !ok:
			return
		case errors.Is(err, port.ErrFrameTooBig):
			d.count(rings.StatRxDropOversize)
		case err != nil:
			return
		default:
			d.count(rings.StatRxFrames)
			d.stats[rings.StatRxBytes].Add(uint64(n))
			d.count(rings.StatRxDropFIFO)
		}
	}
}

// pollPort moves up to Burst frames from a polled port into the receive
// FIFO. When the FIFO is full the frames stay queued on the wire (flow
// control), which drops only when its own queue overflows.
func (d *Device) pollPort() {
	for i := 0; i < d.cfg.Burst; i++ {
		slot := d.fifo.reserve()
		if slot == nil {
			return
		}
		n, ok, err := d.poll.TryReadFrame(slot)
		if !ok {
			return
		}
		if err != nil {
			if errors.Is(err, port.ErrFrameTooBig) {
				d.count(rings.StatRxDropOversize)
				continue
			}
			return
		}
		d.count(rings.StatRxFrames)
		d.stats[rings.StatRxBytes].Add(uint64(n))
		d.fifo.push(n)
	}
}

func (d *Device) fifoFull() bool { return d.fifo.reserve() == nil }
