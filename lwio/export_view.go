package lwio

import (
	"runtime/debug"
	"syscall"
	"time"
)

// Buffered reads from the page cache by a shared read-only mapping of the
// file instead of a pread each: the copy into the read's staging buffer
// is the one copy either way, and the mapping saves the system call, which
// on a virtual machine costs more than copying 4 KiB and is most of what
// the server spends on a small read.
//
// The mapping is only read below the file's size as last checked (fstat),
// so it never returns bytes past the end of the file:
//   - the size is checked again when a read reaches past it (the file may
//     have grown: anything beyond goes by pread, which says where the end
//     is), when the server has shortened a file (Export.sizeGen: an open
//     with truncate, SETATTR of the size), and at most viewTTL after the
//     last check, for a file changed by another program behind the server;
//   - a page wholly past a shortened file's new end faults (SIGBUS), which
//     the copy turns into a fallback to pread.
//
// What remains is the other program's truncation seen up to viewTTL late
// within the last page of the new end (zeros there, not a short read), as
// an NFS client caching attributes would, only shorter.

// viewTTL bounds how long a checked file size is trusted.
const viewTTL = time.Millisecond

// viewMin is the least a mapping covers: small files that grow are not
// mapped again at every append.
const viewMin = 1 << 20

// fileView is one check of the file's size over its current mapping.
type fileView struct {
	data []byte    // the mapping, maybe longer than the file
	size int64     // the file's size at the check (≤ len(data))
	gen  uint64    // Export.sizeGen at the check
	at   time.Time // when checked
}

// fresh reports whether v may still be trusted.
func (v *fileView) fresh(f *file) bool {
	return v != nil && v.gen == f.exp.sizeGen.Load() && time.Since(v.at) < viewTTL
}

// mappedRead copies [off, off+len(b)) from the mapping when it lies wholly
// below the checked size; ok false: the caller reads with pread.
func (f *file) mappedRead(b []byte, off int64) (int, bool) {
	v := f.view.Load()
	if !v.fresh(f) {
		if v = f.checkView(); v == nil {
			return 0, false
		}
	}
	if off < 0 || off+int64(len(b)) > v.size {
		return 0, false
	}
	n, ok := faultSafeCopy(b, v.data[off:])
	if !ok {
		f.view.CompareAndSwap(v, nil) // shortened behind us: check again
		f.faults.Add(1)
	}
	return n, ok
}

// checkView checks the file's size and maps it, growing the mapping when
// the file has outgrown it (the old one stays until the file closes: a
// reader may still be copying from it). nil: no mapping (an empty file, or
// one the kernel will not map).
func (f *file) checkView() *fileView {
	f.mu.Lock()
	defer f.mu.Unlock()
	if v := f.view.Load(); v.fresh(f) {
		return v
	}
	gen := f.exp.sizeGen.Load() // before the fstat: a truncate after it bumps it again
	st, err := f.fd.Stat()
	if err != nil || st.Size() == 0 || f.noMap {
		f.view.Store(nil)
		return nil
	}
	size := st.Size()
	var data []byte
	if old := f.view.Load(); old != nil && int64(len(old.data)) >= size {
		data = old.data
	} else if n := len(f.maps); n > 0 && int64(len(f.maps[n-1])) >= size {
		data = f.maps[n-1]
	} else {
		l := max(size, viewMin)
		if n > 0 {
			l = max(l, 2*int64(len(f.maps[n-1])))
		}
		if l != int64(int(l)) {
			return nil
		}
		m, err := syscall.Mmap(int(f.fd.Fd()), 0, int(l), syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			f.noMap = true // a file system that cannot map: pread from now on
			return nil
		}
		f.maps = append(f.maps, m)
		data = m
	}
	v := &fileView{data: data, size: size, gen: gen, at: time.Now()}
	f.view.Store(v)
	return v
}

// dropView forgets the checked size (the server changed the file's size
// through this descriptor).
func (f *file) dropView() { f.view.Store(nil) }

// unmap releases every mapping; the file is closing and no reader holds
// one.
func (f *file) unmap() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.view.Store(nil)
	for _, m := range f.maps {
		_ = syscall.Munmap(m)
	}
	f.maps = nil
}

// faultSafeCopy copies src into dst, turning a fault on src (a mapped page
// past a file's end) into ok false instead of a crash.
func faultSafeCopy(dst, src []byte) (n int, ok bool) {
	old := debug.SetPanicOnFault(true)
	defer func() {
		debug.SetPanicOnFault(old)
		if r := recover(); r != nil {
			if _, fault := r.(interface{ Addr() uintptr }); !fault {
				panic(r)
			}
			n, ok = 0, false
		}
	}()
	return copy(dst, src), true
}
