//go:build !linux

package nic

import "runtime"

// osYield stands in for sched_yield where the unit has none: it yields to
// the goroutines of this process only.
func osYield() { runtime.Gosched() }
