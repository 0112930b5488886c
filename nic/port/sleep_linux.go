package port

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// fineSleep blocks the thread in nanosleep(2) with a 1 µs timer slack. A Go timer can take a
// millisecond to fire on an idle machine, and the default slack adds 50 µs to every sleep.
// The goroutine is pinned only for the sleep, so it does not pay a thread handoff each time it
// blocks on its queue. The thread keeps the small slack afterwards, which only makes its
// sleeps more exact.
func fineSleep(d time.Duration) {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1000, 0, 0, 0) // best effort: only precision suffers
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil) // EINTR just means an early wake; the caller loops
	runtime.UnlockOSThread()
}
