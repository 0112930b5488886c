package nic

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// fineTimer is the unit's short-deadline timer: a Linux timerfd read through
// Go's network poller, that rings the unit's bell when it expires.
//
// Why not a time.Timer: when every goroutine of the process is parked, Go's
// runtime waits for its next timer in epoll_wait, whose timeout is whole
// milliseconds, so a 200 µs timer fires after about 1.05 ms. The engine's
// short timers (a tail-loss probe is two RTTs on a path of tens of
// microseconds) then cost a millisecond each: on a TAP at 2% loss that was
// a fifth of a transfer's time. A timerfd is an hrtimer in the kernel, and
// its expiry makes the poller's epoll_wait return at once, whatever its
// timeout, so the unit wakes within tens of microseconds of the deadline.
type fineTimer struct {
	f  *os.File
	fd int
}

// newFineTimer starts the timer's reader, which calls kick at every expiry
// until close. It returns nil where the kernel refuses a timerfd: the unit
// then keeps to its time.Timer.
func newFineTimer(kick func()) *fineTimer {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil
	}
	// A non-blocking descriptor makes os.NewFile register it with the
	// poller, so the reader below parks its goroutine, not a thread.
	t := &fineTimer{f: os.NewFile(uintptr(fd), "emunic-unit-timer"), fd: fd}
	go func() {
		var b [8]byte // the expiry count
		for {
			if _, err := t.f.Read(b[:]); err != nil {
				return // closed
			}
			kick()
		}
	}()
	return t
}

// arm sets the timer to expire once after d, replacing any deadline set
// before. An expiry the unit no longer waits for is a spurious bell: one
// extra pass, which finds nothing due and parks again.
func (t *fineTimer) arm(d time.Duration) {
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(max(int64(d), 1))}
	_ = unix.TimerfdSettime(t.fd, 0, &spec, nil)
}

// close stops the reader and frees the descriptor. Nothing may arm the
// timer after: the descriptor number can be reused.
func (t *fineTimer) close() { _ = t.f.Close() }
