// Package efd rings and waits on eventfds, the doorbells and interrupt
// vectors between processes in split mode and the wake-ups of a
// shared-memory link. It does both with as few system calls and scheduler
// hand-offs as an eventfd allows, since a wake-up across processes is what
// split mode pays for most (docs/benchmarks.md, "The device in its own
// process"):
//
//   - Kick writes with a raw system call. A non-blocking eventfd write
//     never blocks, so the runtime's system-call bookkeeping (entersyscall,
//     exitsyscall) buys nothing, and it costs a futex wake-up of the
//     runtime's monitor thread whenever that one sleeps, which in a device
//     process that parks between bursts is most kicks;
//   - Forward waits through the runtime's poller (epoll, edge-triggered) and
//     after each read waits for the next edge instead of reading again: the
//     read after a successful one finds the counter empty nearly always, and
//     a write that comes after the read raises a new edge, so none is lost.
package efd

import (
	"encoding/binary"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Kick adds one to the eventfd f (non-blocking). Errors (a closed file, a
// counter at its maximum, which 2^64-2 unread kicks would take) are
// ignored: a doorbell has no one to report them to.
func Kick(f *os.File) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	// Write holds the descriptor against a concurrent Close for the call.
	_ = rc.Write(func(fd uintptr) bool {
		one := uint64(1)
		_, _, _ = unix.RawSyscall(unix.SYS_WRITE, fd, uintptr(unsafe.Pointer(&one)), 8)
		return true
	})
}

// Forward waits for kicks on the non-blocking eventfd f and calls got with
// the number of writes since the last read (the eventfd's counter), until
// f is closed or fails.
func Forward(f *os.File, got func(n uint64)) {
	rc, err := f.SyscallConn()
	if err != nil {
		return
	}
	var b [8]byte
	_ = rc.Read(func(fd uintptr) bool {
		n, _, errno := unix.RawSyscall(unix.SYS_READ, fd, uintptr(unsafe.Pointer(&b[0])), 8)
		switch {
		case errno == unix.EAGAIN || errno == unix.EINTR:
			return false // wait for the next edge
		case errno != 0 || n != 8:
			return true // closed under us, or not an eventfd
		}
		got(binary.NativeEndian.Uint64(b[:]))
		// The counter is empty now: wait for the edge of the next write
		// rather than reading again (one system call fewer per wake-up).
		return false
	})
}
