package nic

import "syscall"

// osYield hands the CPU to another runnable thread, if any (sched_yield),
// holding on to this goroutine's processor: the unit's idle poll between
// passes when Config.IdleYield is set.
func osYield() { syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0) }
