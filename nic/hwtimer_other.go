//go:build !linux

package nic

import "time"

// fineTimer has no precise kernel timer behind it off Linux: newFineTimer
// returns nil and the unit uses its time.Timer for every deadline.
type fineTimer struct{}

func newFineTimer(func()) *fineTimer { return nil }

func (*fineTimer) arm(time.Duration) {}

func (*fineTimer) close() {}
