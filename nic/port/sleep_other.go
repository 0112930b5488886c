//go:build !linux

package port

import "time"

// fineSleep falls back to the runtime's sleep where nanosleep with a small timer slack is not
// available; delays are then only as precise as Go's timers.
func fineSleep(d time.Duration) { time.Sleep(d) }
