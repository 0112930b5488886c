//go:build unix

package cpusplit

import (
	"syscall"
	"time"
)

// Process is the CPU time (user and system) the process has used so far,
// every thread's: what a section of work cost is the difference of two
// readings.
func Process() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
