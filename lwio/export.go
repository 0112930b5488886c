package lwio

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"
)

// Export is the directory a server serves: every path a client names is
// resolved inside it through an os.Root, so "..", absolute paths and
// symbolic links that lead outside are refused by the kernel's own
// resolution, not by string checks alone.
type Export struct {
	root     *os.Root
	dir      string
	readOnly bool
	// sizeGen counts the server's own size reductions of files (an open
	// with truncate, SETATTR of the size): a mapped file checks its size
	// again when it changes (export_view.go).
	sizeGen atomic.Uint64
}

// OpenExport opens dir for serving.
func OpenExport(dir string) (*Export, error) {
	st, err := os.Stat(dir)
	if err != nil {
		return nil, fmt.Errorf("lwio: export: %w", err)
	}
	if !st.IsDir() {
		return nil, fmt.Errorf("lwio: export %s: not a directory", dir)
	}
	r, err := os.OpenRoot(dir)
	if err != nil {
		return nil, fmt.Errorf("lwio: export: %w", err)
	}
	return &Export{root: r, dir: dir}, nil
}

// SetReadOnly makes the export read-only (before it is served): files
// open read-only, and a create, a truncate or a write is ACCESS_DENIED.
func (e *Export) SetReadOnly() { e.readOnly = true }

// ReadOnly reports whether the export is read-only.
func (e *Export) ReadOnly() bool { return e.readOnly }

// errReadOnly refuses a change to a read-only export.
var errReadOnly = errors.New("lwio: the export is read-only")

// writable is nil when the export may be changed, else errReadOnly: every
// operation that changes the export asks it first.
func (e *Export) writable() error {
	if e.readOnly {
		return errReadOnly
	}
	return nil
}

// Dir is the exported directory as given.
func (e *Export) Dir() string { return e.dir }

// Close releases the export's root.
func (e *Export) Close() error { return e.root.Close() }

// cleanPath turns a client's path into one relative to the export root.
// A path is relative to the export and may not leave it even on paper: an
// absolute path (a leading slash or backslash, a drive letter) and any ".."
// element are refused outright rather than reinterpreted, so a client
// never reads a file other than the one it named. Symbolic links are
// left to os.Root, which refuses one that leads out.
func cleanPath(p string) (string, error) {
	if p == "" || strings.IndexByte(p, 0) >= 0 || len(p) > MaxPathLen {
		return "", errBadPath
	}
	p = strings.ReplaceAll(p, "\\", "/")
	if strings.HasPrefix(p, "/") || (len(p) >= 2 && p[1] == ':') {
		return "", errBadPath
	}
	for _, e := range strings.Split(p, "/") {
		if e == ".." {
			return "", errBadPath
		}
	}
	p = path.Clean(p)
	if p == "." {
		return "", errBadPath
	}
	return p, nil
}

var errBadPath = errors.New("lwio: bad path")

// file is one open file of the export. Reads and writes go through fd;
// dfd, when the file system allows it, is the same file opened with
// O_DIRECT, used for requests whose offset, length and buffer are aligned
// to directAlign when the registration asked for no intermediate
// buffering.
type file struct {
	name     string
	exp      *Export
	fd       *os.File
	dfd      *os.File
	readOnly bool // fd is O_RDONLY: the twin must be too

	// Buffered reads go through a mapping of the file (export_view.go).
	view   atomic.Pointer[fileView]
	faults atomic.Uint64 // mapped reads that faulted (a file shortened behind us)

	mu    sync.Mutex
	refs  int
	maps  [][]byte // every mapping made, unmapped at close
	noMap bool     // the file system refused a mapping
}

// directAlign is the alignment O_DIRECT needs on every file system Linux
// has (the logical block size is at most the page size).
const directAlign = 4096

// open opens (and with create, creates) path in the export.
func (e *Export) open(p string, create, truncate bool) (*file, error) {
	rel, err := cleanPath(p)
	if err != nil {
		return nil, err
	}
	flag := os.O_RDWR
	if e.readOnly {
		if create || truncate {
			return nil, e.writable()
		}
		flag = os.O_RDONLY
	}
	if create {
		flag |= os.O_CREATE
	}
	if truncate {
		flag |= os.O_TRUNC
	}
	fd, err := e.root.OpenFile(rel, flag, 0o644)
	if truncate {
		// Mapped files of the same name check their size again (after
		// the truncation: a check between would see the old size).
		e.sizeGen.Add(1)
	}
	if err != nil && errors.Is(err, syscall.EISDIR) {
		return nil, err
	}
	if err != nil && (errors.Is(err, fs.ErrPermission) || errors.Is(err, syscall.EROFS)) && !create && !truncate {
		// A read-only file is still served for reading.
		fd, err = e.root.OpenFile(rel, os.O_RDONLY, 0)
	}
	if err != nil {
		return nil, err
	}
	st, err := fd.Stat()
	if err != nil {
		fd.Close()
		return nil, err
	}
	if !st.Mode().IsRegular() {
		fd.Close()
		return nil, fmt.Errorf("lwio: %s: not a regular file", rel)
	}
	return &file{name: rel, exp: e, fd: fd, refs: 1, readOnly: flag&(os.O_WRONLY|os.O_RDWR) == 0}, nil
}

// enableDirect opens the O_DIRECT twin, once; a file system that refuses
// O_DIRECT (tmpfs) leaves the file buffered.
func (f *file) enableDirect() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.dfd != nil {
		return
	}
	// Reopening through /proc takes a new access mode: a read-only file's
	// twin is opened read-only, never read-write.
	var fd *os.File
	err := fs.ErrPermission
	if !f.readOnly {
		fd, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.fd.Fd()), os.O_RDWR|syscall.O_DIRECT, 0)
	}
	if err != nil {
		fd, err = os.OpenFile(fmt.Sprintf("/proc/self/fd/%d", f.fd.Fd()), os.O_RDONLY|syscall.O_DIRECT, 0)
	}
	if err == nil {
		f.dfd = fd
	}
}

// direct reports whether the O_DIRECT twin can serve [off, off+n) into b.
func (f *file) direct(b []byte, off int64, n int) *os.File {
	if f.dfd == nil || off%directAlign != 0 || n%directAlign != 0 || len(b) < n {
		return nil
	}
	if uintptrOf(b)%directAlign != 0 {
		return nil
	}
	return f.dfd
}

// readAt reads up to len(b) bytes at off: short only at the end of the
// file. The O_DIRECT twin is used when the request allows it; an error
// from it (a file system that accepted O_DIRECT at open but refuses this
// transfer) falls back to the buffered descriptor. A buffered read below
// the file's checked size is copied from its mapping (export_view.go),
// anything else is a pread.
func (f *file) readAt(b []byte, off int64, direct bool) (int, error) {
	if direct {
		if d := f.direct(b, off, len(b)); d != nil {
			n, err := d.ReadAt(b, off)
			if err == nil || err == io.EOF {
				return n, err
			}
		}
	}
	if n, ok := f.mappedRead(b, off); ok {
		return n, nil
	}
	n, err := f.fd.ReadAt(b, off)
	if v := f.view.Load(); v != nil && off+int64(n) > v.size {
		f.dropView() // the file has grown: map it again on the next read
	}
	return n, err
}

// writeAt writes b at off.
func (f *file) writeAt(b []byte, off int64, direct bool) (n int, err error) {
	defer func() {
		if v := f.view.Load(); v != nil && off+int64(n) > v.size {
			f.dropView() // the file has grown: map it again on the next read
		}
	}()
	if direct {
		if d := f.direct(b, off, len(b)); d != nil {
			if n, err := d.WriteAt(b, off); err == nil {
				return n, nil
			}
		}
	}
	return f.fd.WriteAt(b, off)
}

func (f *file) size() (int64, error) {
	st, err := f.fd.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (f *file) close() {
	f.unmap()
	f.fd.Close()
	if f.dfd != nil {
		f.dfd.Close()
	}
}

// uintptrOf is the address of b's first byte (for alignment checks only).
func uintptrOf(b []byte) uintptr { return uintptr(unsafe.Pointer(unsafe.SliceData(b))) }
