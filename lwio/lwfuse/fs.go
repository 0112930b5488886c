// Package lwfuse mounts an LWIO export with FUSE (github.com/hanwen/go-fuse):
// the namespace goes over the pipe's directory operations (lwio/pipe_dir.go)
// and file data over the client's RDMA connection, each open file a
// registered Fid, so ordinary programs (ls, cp, cat, dd, rsync, fio) work on
// the server's files.
//
// Nodes are named by path: the server has no inode numbers to hand out, so
// each operation sends the node's current path, which go-fuse keeps through
// renames. A file that is open keeps working after it is renamed or
// removed, because its I/O goes to the Fid, which holds the server's file
// open; a path operation on it (getattr) then answers ENOENT.
package lwfuse

import (
	"context"
	"errors"
	"hash/fnv"
	"io"
	"path"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/lwio"
)

// Options shape a mount.
type Options struct {
	// Name is the file system's name in /proc/mounts (the source column).
	Name string
	// AttrTimeout is how long the kernel keeps attributes and names before
	// it asks again (1 s): other clients' changes show after at most this.
	AttrTimeout time.Duration
	// Debug logs every FUSE request (go-fuse's debug output).
	Debug bool
	// UID and GID own every file and directory the mount shows.
	UID, GID uint32
}

// Mount mounts c's export at dir and returns the FUSE server serving it;
// the caller unmounts it (Unmount) and waits (Wait).
func Mount(dir string, c *lwio.Client, o Options) (*fuse.Server, error) {
	if o.AttrTimeout <= 0 {
		o.AttrTimeout = time.Second
	}
	if o.Name == "" {
		o.Name = "lwio"
	}
	root := &node{c: c}
	to := o.AttrTimeout
	opts := &fs.Options{
		EntryTimeout: &to, AttrTimeout: &to, NegativeTimeout: &to,
		UID: o.UID, GID: o.GID,
		MountOptions: fuse.MountOptions{
			FsName: o.Name, Name: "lwio", Debug: o.Debug,
			// As root, mount(2) directly; otherwise (or if that fails)
			// through fusermount3.
			DirectMount: true,
			// Writes and reads of up to 1 MiB reach the server in one
			// FUSE request (in the server's MaxRecvBuffer pieces, all in
			// flight).
			MaxWrite: 1 << 20, MaxReadAhead: 1 << 20,
		},
	}
	return fs.Mount(dir, root, opts)
}

// node is a file or directory of the export.
type node struct {
	fs.Inode
	c *lwio.Client
}

var (
	_ fs.NodeLookuper  = (*node)(nil)
	_ fs.NodeGetattrer = (*node)(nil)
	_ fs.NodeSetattrer = (*node)(nil)
	_ fs.NodeReaddirer = (*node)(nil)
	_ fs.NodeMkdirer   = (*node)(nil)
	_ fs.NodeUnlinker  = (*node)(nil)
	_ fs.NodeRmdirer   = (*node)(nil)
	_ fs.NodeRenamer   = (*node)(nil)
	_ fs.NodeCreater   = (*node)(nil)
	_ fs.NodeOpener    = (*node)(nil)
	_ fs.NodeFsyncer   = (*node)(nil)
	_ fs.NodeStatfser  = (*node)(nil)
)

// path is the node's path in the export ("" for the root).
func (n *node) path() string { return n.Path(n.Root()) }

func (n *node) child(name string) string { return path.Join(n.path(), name) }

func errno(err error) syscall.Errno {
	if err == nil {
		return 0
	}
	if errors.Is(err, context.Canceled) {
		return syscall.EINTR
	}
	return lwio.Errno(err)
}

// fill copies a into out. The server's one time stands for all three, and
// every object has one link: the server keeps no link count the client
// could use (a directory's is not needed by any program this mount serves).
func fill(a lwio.Attr, out *fuse.Attr) {
	out.Mode = a.Mode
	out.Size = uint64(a.Size)
	out.Blocks = (out.Size + 511) / 512
	out.Blksize = 1 << 20
	sec, nsec := uint64(a.Mtime/1e9), uint32(a.Mtime%1e9)
	out.Mtime, out.Mtimensec = sec, nsec
	out.Atime, out.Atimensec = sec, nsec
	out.Ctime, out.Ctimensec = sec, nsec
	out.Nlink = 1
}

// newChild makes the inode of n's child name. Its number is a hash of its
// path in the export, so that looking the same name up again (after the
// kernel forgot the inode, or revalidated the entry) gives the same st_ino:
// with numbers handed out per lookup, cp saw a file it had stat'ed come
// back from open with another inode and skipped it as "replaced while
// being copied". The server has no file IDs to offer instead; a file
// removed and made again under the same name keeps the number, as on many
// network file systems.
func (n *node) newChild(ctx context.Context, name string, a lwio.Attr, out *fuse.EntryOut) *fs.Inode {
	fill(a, &out.Attr)
	ino := inoOf(n.child(name))
	out.Ino = ino
	return n.NewInode(ctx, &node{c: n.c}, fs.StableAttr{Mode: a.Mode & lwio.ModeTypeMask, Ino: ino})
}

// inoOf is p's inode number: FNV-1a of the path, clear of 0 and 1 (no
// inode, and the root).
func inoOf(p string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(p))
	ino := h.Sum64()
	if ino < 2 {
		ino += 2
	}
	return ino
}

func (n *node) Lookup(ctx context.Context, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.c.Attr(ctx, n.child(name))
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, name, a, out), 0
}

func (n *node) Getattr(ctx context.Context, _ fs.FileHandle, out *fuse.AttrOut) syscall.Errno {
	a, err := n.c.Attr(ctx, n.path())
	if err != nil {
		return errno(err)
	}
	fill(a, &out.Attr)
	return 0
}

// Setattr changes the size, the permissions and the modification time.
// The server sets access and modification times together, so a change of
// the access time alone is refused (ENOTSUP) rather than half made, as are
// owner changes (EPERM): the export's files belong to the server's user.
func (n *node) Setattr(ctx context.Context, _ fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	var sa lwio.SetAttrs
	if _, ok := in.GetUID(); ok {
		return syscall.EPERM
	}
	if _, ok := in.GetGID(); ok {
		return syscall.EPERM
	}
	if size, ok := in.GetSize(); ok {
		sa.Flags |= lwio.SetSize
		sa.Size = int64(size)
	}
	if mode, ok := in.GetMode(); ok {
		sa.Flags |= lwio.SetMode
		sa.Mode = mode & 0o7777
	}
	if t, ok := in.GetMTime(); ok {
		sa.Flags |= lwio.SetMtime
		sa.Mtime = t.UnixNano()
	} else if _, ok := in.GetATime(); ok {
		return syscall.ENOTSUP
	}
	var a lwio.Attr
	var err error
	if sa.Flags == 0 {
		a, err = n.c.Attr(ctx, n.path())
	} else {
		a, err = n.c.SetAttr(ctx, n.path(), sa)
	}
	if err != nil {
		return errno(err)
	}
	fill(a, &out.Attr)
	return 0
}

func (n *node) Readdir(ctx context.Context) (fs.DirStream, syscall.Errno) {
	ents, err := n.c.ReadDir(ctx, n.path())
	if err != nil {
		return nil, errno(err)
	}
	list := make([]fuse.DirEntry, len(ents))
	for i, e := range ents {
		list[i] = fuse.DirEntry{Name: e.Name, Mode: e.Mode, Ino: inoOf(n.child(e.Name))}
	}
	return fs.NewListDirStream(list), 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	a, err := n.c.Mkdir(ctx, n.child(name), mode&0o7777, false)
	if err != nil {
		return nil, errno(err)
	}
	return n.newChild(ctx, name, a, out), 0
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	p := n.child(name)
	a, err := n.c.Attr(ctx, p)
	if err == nil && a.IsDir() {
		return syscall.EISDIR
	}
	return errno(n.c.Remove(ctx, p))
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	p := n.child(name)
	a, err := n.c.Attr(ctx, p)
	if err == nil && !a.IsDir() {
		return syscall.ENOTDIR
	}
	return errno(n.c.Remove(ctx, p))
}

// Rename passes RENAME_NOREPLACE and RENAME_EXCHANGE on; RENAME_WHITEOUT
// (overlay file systems only) is refused.
func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	var f uint32
	switch flags {
	case 0:
	case unix.RENAME_NOREPLACE:
		f = lwio.RenameNoReplace
	case unix.RENAME_EXCHANGE:
		f = lwio.RenameExchange
	default:
		return syscall.EINVAL
	}
	to := path.Join(newParent.EmbeddedInode().Path(n.Root()), newName)
	_, err := n.c.Rename(ctx, n.child(name), to, f)
	return errno(err)
}

// Create makes and opens a file. O_EXCL is checked with a STAT first: OPEN
// has no exclusive disposition, so two clients racing to create one name
// can both succeed.
func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	p := n.child(name)
	if flags&syscall.O_EXCL != 0 {
		if _, err := n.c.Attr(ctx, p); err == nil {
			return nil, nil, 0, syscall.EEXIST
		}
	}
	f, err := n.c.Open(ctx, p, lwio.OpenFlags{Create: true, Truncate: flags&syscall.O_TRUNC != 0})
	if err != nil {
		return nil, nil, 0, errno(err)
	}
	// The server creates files 0644 (less its umask); the mode asked for
	// is set when it differs.
	a, err := n.c.Attr(ctx, p)
	if err == nil && a.Mode&0o7777 != mode&0o7777 {
		a, err = n.c.SetAttr(ctx, p, lwio.SetAttrs{Flags: lwio.SetMode, Mode: mode & 0o7777})
	}
	if err != nil {
		f.Close()
		return nil, nil, 0, errno(err)
	}
	return n.newChild(ctx, name, a, out), &handle{f: f}, 0, 0
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	f, err := n.c.Open(ctx, n.path(), lwio.OpenFlags{Truncate: flags&syscall.O_TRUNC != 0})
	if err != nil {
		return nil, 0, errno(err)
	}
	return &handle{f: f}, 0, 0
}

// Fsync asks the server to fsync the file (SYNC on the pipe).
func (n *node) Fsync(ctx context.Context, _ fs.FileHandle, _ uint32) syscall.Errno {
	return errno(n.c.Sync(ctx, n.path()))
}

// Statfs reports no capacity: the pipe has no operation for the server's
// free space, and 0 tells df so rather than inventing a figure.
func (n *node) Statfs(ctx context.Context, out *fuse.StatfsOut) syscall.Errno {
	*out = fuse.StatfsOut{Bsize: 1 << 20, NameLen: 255, Frsize: 1 << 20}
	return 0
}

// handle is an open file: a registered Fid on the client's RDMA connection.
type handle struct {
	f *lwio.File
}

var (
	_ fs.FileReader   = (*handle)(nil)
	_ fs.FileWriter   = (*handle)(nil)
	_ fs.FileReleaser = (*handle)(nil)
)

func (h *handle) Read(ctx context.Context, dest []byte, off int64) (fuse.ReadResult, syscall.Errno) {
	n, err := h.f.ReadAt(dest, off)
	if err != nil && err != io.EOF {
		return nil, errno(err)
	}
	return fuse.ReadResultData(dest[:n]), 0
}

func (h *handle) Write(ctx context.Context, data []byte, off int64) (uint32, syscall.Errno) {
	n, err := h.f.WriteAt(data, off)
	if err != nil {
		return uint32(n), errno(err)
	}
	return uint32(n), 0
}

// Release closes the Fid: the server closes its file.
func (h *handle) Release(ctx context.Context) syscall.Errno {
	return errno(h.f.Close())
}
