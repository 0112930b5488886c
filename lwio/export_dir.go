package lwio

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"syscall"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// Directory operations of an export. Every path goes through dirPath and
// then os.Root, as OPEN's do, so nothing outside the export is named,
// listed or changed; RENAME resolves both parents through the root and
// renames by base name within them (renameat2), which is how it gets
// RENAME_NOREPLACE and RENAME_EXCHANGE without a check-then-act race.

var (
	errNameInvalid = fmt.Errorf("%w: a NUL byte or text that is not UTF-8", errBadPath)
	errNameTooLong = fmt.Errorf("%w: too long", errBadPath)
	errRoot        = fmt.Errorf("%w: the export's root itself", errBadPath)
)

// dirPath turns a client's path into one relative to the export's root;
// with rootOK, "" and "." name the root itself (".").
func dirPath(p string, rootOK bool) (string, error) {
	if err := checkPathText(p); err != nil {
		return "", err
	}
	if p == "" || p == "." {
		if rootOK {
			return ".", nil
		}
		return "", errRoot
	}
	return cleanPath(p)
}

func attrOf(fi fs.FileInfo) Attr {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return Attr{Mode: st.Mode, Size: st.Size, Mtime: st.Mtim.Nano()}
	}
	m := uint32(fi.Mode().Perm())
	switch {
	case fi.IsDir():
		m |= ModeDir
	case fi.Mode().IsRegular():
		m |= ModeRegular
	}
	return Attr{Mode: m, Size: fi.Size(), Mtime: fi.ModTime().UnixNano()}
}

// stat follows symbolic links, inside the export only.
func (e *Export) stat(p string) (Attr, error) {
	rel, err := dirPath(p, true)
	if err != nil {
		return Attr{}, err
	}
	fi, err := e.root.Stat(rel)
	if err != nil {
		return Attr{}, err
	}
	return attrOf(fi), nil
}

// maxListStat bounds the entries one LIST looks at: more than fit in one
// response (a name of one character takes 26 bytes), so a page is full,
// and few enough that a huge directory costs each page a bounded amount.
const maxListStat = MaxControlMessage / (AttrSize + 2)

// list returns the entries of directory p from index on, sorted by name
// (so an index means the same entry page after page while the directory
// does not change), at most maxListStat of them. Names that are not UTF-8
// cannot cross the pipe: they are left out, and counted in skipped.
func (e *Export) list(p string, index uint32) (ents []DirEntry, skipped int, err error) {
	rel, err := dirPath(p, true)
	if err != nil {
		return nil, 0, err
	}
	d, err := e.root.Open(rel)
	if err != nil {
		return nil, 0, err
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		return nil, 0, err
	}
	slices.Sort(names)
	names = slices.DeleteFunc(names, func(n string) bool {
		if !utf8.ValidString(n) {
			skipped++
			return true
		}
		return false
	})
	if int(index) >= len(names) {
		return nil, skipped, nil
	}
	names = names[index:]
	for _, n := range names {
		if len(ents) == maxListStat {
			break
		}
		fi, err := e.root.Stat(path.Join(rel, n))
		if err != nil {
			// A symbolic link that leads out of the export or nowhere is
			// listed as the link it is (it cannot be followed); an entry
			// gone since Readdirnames is left out.
			if fi, err = e.root.Lstat(path.Join(rel, n)); err != nil {
				continue
			}
		}
		ents = append(ents, DirEntry{Name: n, Attr: attrOf(fi)})
	}
	return ents, skipped, nil
}

func (e *Export) mkdir(p string, mode uint32, parents bool) (Attr, error) {
	rel, err := dirPath(p, false)
	if err != nil {
		return Attr{}, err
	}
	if parents {
		err = e.root.MkdirAll(rel, fs.FileMode(mode))
	} else {
		err = e.root.Mkdir(rel, fs.FileMode(mode))
	}
	if err != nil {
		return Attr{}, err
	}
	return e.stat(rel)
}

func (e *Export) remove(p string) error {
	rel, err := dirPath(p, false)
	if err != nil {
		return err
	}
	return e.root.Remove(rel)
}

func (e *Export) rename(from, to string, flags uint32) (Attr, error) {
	a, err := dirPath(from, false)
	if err != nil {
		return Attr{}, err
	}
	b, err := dirPath(to, false)
	if err != nil {
		return Attr{}, err
	}
	da, err := e.root.Open(path.Dir(a))
	if err != nil {
		return Attr{}, err
	}
	defer da.Close()
	db, err := e.root.Open(path.Dir(b))
	if err != nil {
		return Attr{}, err
	}
	defer db.Close()
	var rf uint
	if flags&RenameNoReplace != 0 {
		rf |= unix.RENAME_NOREPLACE
	}
	if flags&RenameExchange != 0 {
		rf |= unix.RENAME_EXCHANGE
	}
	if err := unix.Renameat2(int(da.Fd()), path.Base(a), int(db.Fd()), path.Base(b), rf); err != nil {
		return Attr{}, &os.LinkError{Op: "rename", Old: a, New: b, Err: err}
	}
	return e.stat(b)
}

func (e *Export) setAttr(p string, flags, mode uint32, size uint64, mtime int64) (Attr, error) {
	rel, err := dirPath(p, true)
	if err != nil {
		return Attr{}, err
	}
	if flags&SetSize != 0 {
		if size > 1<<62 {
			return Attr{}, syscall.EFBIG
		}
		f, err := e.root.OpenFile(rel, os.O_WRONLY, 0)
		if err != nil {
			return Attr{}, err
		}
		err = f.Truncate(int64(size))
		f.Close()
		e.sizeGen.Add(1)
		if err != nil {
			return Attr{}, err
		}
	}
	if flags&SetMode != 0 {
		if err := e.root.Chmod(rel, fs.FileMode(mode)); err != nil {
			return Attr{}, err
		}
	}
	if flags&SetMtime != 0 {
		t := time.Unix(0, mtime)
		if err := e.root.Chtimes(rel, t, t); err != nil {
			return Attr{}, err
		}
	}
	return e.stat(rel)
}

// sync flushes p's data and metadata to storage: fsync applies to the
// file, not the descriptor, so a descriptor of its own does it.
func (e *Export) sync(p string) (Attr, error) {
	rel, err := dirPath(p, true)
	if err != nil {
		return Attr{}, err
	}
	f, err := e.root.Open(rel)
	if err != nil {
		return Attr{}, err
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return Attr{}, err
	}
	fi, err := f.Stat()
	if err != nil {
		return Attr{}, err
	}
	return attrOf(fi), nil
}

// hash returns the SHA-256 of the file at p and the bytes it covered.
func (e *Export) hash(p string) (Attr, [HashSize]byte, error) {
	var sum [HashSize]byte
	rel, err := dirPath(p, false)
	if err != nil {
		return Attr{}, sum, err
	}
	f, err := e.root.Open(rel)
	if err != nil {
		return Attr{}, sum, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Attr{}, sum, err
	}
	if fi.IsDir() {
		return Attr{}, sum, syscall.EISDIR
	}
	if !fi.Mode().IsRegular() {
		return Attr{}, sum, fmt.Errorf("lwio: %s: not a regular file: %w", rel, syscall.EINVAL)
	}
	h := sha256.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return Attr{}, sum, err
	}
	h.Sum(sum[:0])
	a := attrOf(fi)
	a.Size = n
	return a, sum, nil
}

// dirStatus is the NTSTATUS for an error of a directory operation.
func dirStatus(err error) uint32 {
	for _, m := range statusErrnos {
		if m.errno != 0 && errors.Is(err, m.errno) {
			return m.status
		}
	}
	switch {
	case errors.Is(err, errReadOnly):
		return StatusWriteProtected
	case errors.Is(err, errNameTooLong):
		return StatusNameTooLong
	case errors.Is(err, errNameInvalid):
		return StatusObjectNameInvalid
	case errors.Is(err, errBadPath), isEscape(err), errors.Is(err, fs.ErrPermission):
		return StatusAccessDenied
	case errors.Is(err, fs.ErrNotExist):
		return StatusObjectNameNotFound
	case errors.Is(err, fs.ErrExist):
		return StatusObjectNameCollision
	}
	return StatusIOError
}

// statusErrnos pairs each status with the errno a POSIX client (the FUSE
// mount) gives for it, and the server's errno that produces it: one table
// read both ways (dirStatus, Errno).
var statusErrnos = []struct {
	status uint32
	errno  syscall.Errno
}{
	{StatusNotADirectory, syscall.ENOTDIR},
	{StatusFileIsADirectory, syscall.EISDIR},
	{StatusDirectoryNotEmpty, syscall.ENOTEMPTY},
	{StatusObjectNameCollision, syscall.EEXIST},
	{StatusWriteProtected, syscall.EROFS},
	{StatusDiskFull, syscall.ENOSPC},
	{StatusDiskFull, syscall.EDQUOT},
	{StatusNameTooLong, syscall.ENAMETOOLONG},
	{StatusNotSameDevice, syscall.EXDEV},
	{StatusInvalidParameter, syscall.EINVAL},
	{StatusInvalidParameter, syscall.EFBIG},
	{StatusObjectNameNotFound, syscall.ENOENT},
	{StatusAccessDenied, syscall.EACCES},
	{StatusAccessDenied, syscall.EPERM},
	{StatusObjectNameInvalid, syscall.EINVAL},
	{StatusEndOfFile, 0},
	{StatusIOError, syscall.EIO},
	{StatusInvalidHandle, syscall.EBADF},
	{StatusFileClosed, syscall.EBADF},
	{StatusCancelled, syscall.EINTR},
	{StatusInsufficientRes, syscall.EAGAIN},
}

// Errno is the POSIX error for err: a *StatusError's status through the
// table above, EIO for anything else (a lost connection).
func Errno(err error) syscall.Errno {
	var se *StatusError
	if errors.As(err, &se) {
		for _, m := range statusErrnos {
			if m.status == se.Status && m.errno != 0 {
				return m.errno
			}
		}
	}
	if errors.Is(err, errBadPath) {
		var e syscall.Errno
		switch {
		case errors.Is(err, errNameTooLong):
			e = syscall.ENAMETOOLONG
		case errors.Is(err, errNameInvalid):
			e = syscall.EINVAL
		default:
			e = syscall.EACCES
		}
		return e
	}
	return syscall.EIO
}
