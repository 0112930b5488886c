package lwio_test

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/lwio"
)

func wantStatus(t *testing.T, err error, status uint32, errno syscall.Errno) {
	t.Helper()
	var se *lwio.StatusError
	if !errors.As(err, &se) || se.Status != status {
		t.Fatalf("got %v, want status %#x", err, status)
	}
	if got := lwio.Errno(err); got != errno {
		t.Fatalf("Errno(%v) = %v, want %v", err, got, errno)
	}
}

// TestDirOps runs every directory operation of the pipe against a real
// export and checks the file system after each.
func TestDirOps(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()

	root, err := c.Attr(ctx, "")
	if err != nil || !root.IsDir() {
		t.Fatalf("Attr of the root: %+v, %v", root, err)
	}
	a, err := c.Mkdir(ctx, "a/b/c", 0o755, true)
	if err != nil || !a.IsDir() {
		t.Fatalf("Mkdir parents: %+v %v", a, err)
	}
	if st, err := os.Stat(filepath.Join(r.dir, "a/b/c")); err != nil || !st.IsDir() {
		t.Fatalf("a/b/c on the server: %v", err)
	}
	_, err = c.Mkdir(ctx, "a/b", 0o755, false)
	wantStatus(t, err, lwio.StatusObjectNameCollision, syscall.EEXIST)
	if _, err := c.Mkdir(ctx, "a/b", 0o755, true); err != nil {
		t.Fatalf("Mkdir parents of an existing directory: %v", err)
	}
	_, err = c.Mkdir(ctx, "x/y", 0o755, false)
	wantStatus(t, err, lwio.StatusObjectNameNotFound, syscall.ENOENT)

	// Stat of a directory works; of a file gives its size.
	if st, err := c.Attr(ctx, "a/b"); err != nil || !st.IsDir() {
		t.Fatalf("Attr a/b: %+v %v", st, err)
	}
	data := []byte("hello, directory operations\n")
	if err := os.WriteFile(filepath.Join(r.dir, "a/f.txt"), data, 0o640); err != nil {
		t.Fatal(err)
	}
	st, err := c.Attr(ctx, "a/f.txt")
	if err != nil || st.IsDir() || st.Size != int64(len(data)) || st.Mode&0o777 != 0o640 || st.Mode&lwio.ModeTypeMask != lwio.ModeRegular {
		t.Fatalf("Attr a/f.txt: %+v %v", st, err)
	}

	ents, err := c.ReadDir(ctx, "a")
	if err != nil || len(ents) != 2 || ents[0].Name != "b" || !ents[0].IsDir() || ents[1].Name != "f.txt" || ents[1].Size != int64(len(data)) {
		t.Fatalf("ReadDir a: %+v %v", ents, err)
	}
	_, err = c.ReadDir(ctx, "a/f.txt")
	wantStatus(t, err, lwio.StatusNotADirectory, syscall.ENOTDIR)

	sum, n, err := c.Hash(ctx, "a/f.txt")
	if err != nil || n != int64(len(data)) || sum != sha256.Sum256(data) {
		t.Fatalf("Hash: %x %d %v", sum, n, err)
	}
	_, _, err = c.Hash(ctx, "a")
	wantStatus(t, err, lwio.StatusFileIsADirectory, syscall.EISDIR)

	// SETATTR: size, mode, time.
	when := time.Date(2020, 1, 2, 3, 4, 5, 6000, time.UTC)
	st, err = c.SetAttr(ctx, "a/f.txt", lwio.SetAttrs{Flags: lwio.SetSize | lwio.SetMode | lwio.SetMtime, Size: 5, Mode: 0o600, Mtime: when.UnixNano()})
	if err != nil || st.Size != 5 || st.Mode&0o7777 != 0o600 || st.Mtime != when.UnixNano() {
		t.Fatalf("SetAttr: %+v %v", st, err)
	}
	if got, _ := os.ReadFile(filepath.Join(r.dir, "a/f.txt")); string(got) != "hello" {
		t.Fatalf("after truncation the file holds %q", got)
	}

	if err := c.Sync(ctx, "a/f.txt"); err != nil {
		t.Fatalf("Sync: %v", err)
	}

	// RENAME, with and without replacing.
	if err := os.WriteFile(filepath.Join(r.dir, "g.txt"), []byte("g"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = c.Rename(ctx, "a/f.txt", "g.txt", lwio.RenameNoReplace)
	wantStatus(t, err, lwio.StatusObjectNameCollision, syscall.EEXIST)
	if _, err := c.Rename(ctx, "a/f.txt", "a/b/c/h.txt", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Rename(ctx, "a/b/c/h.txt", "g.txt", 0); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(r.dir, "g.txt")); string(got) != "hello" {
		t.Fatalf("g.txt holds %q after the rename over it", got)
	}
	if _, err := os.Stat(filepath.Join(r.dir, "a/f.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a/f.txt still there: %v", err)
	}

	// REMOVE: a non-empty directory is refused, an empty one and a file go.
	err = c.Remove(ctx, "a/b")
	wantStatus(t, err, lwio.StatusDirectoryNotEmpty, syscall.ENOTEMPTY)
	for _, p := range []string{"a/b/c", "a/b", "a", "g.txt"} {
		if err := c.Remove(ctx, p); err != nil {
			t.Fatalf("Remove %s: %v", p, err)
		}
	}
	if ents, err := c.ReadDir(ctx, ""); err != nil || len(ents) != 0 {
		t.Fatalf("root after the removals: %+v %v", ents, err)
	}
	err = c.Remove(ctx, "a")
	wantStatus(t, err, lwio.StatusObjectNameNotFound, syscall.ENOENT)
	if got := r.srv.DirStats(); got.Ops["MKDIR"] != 4 || got.Refused == 0 || got.BytesHashed != uint64(len(data)) {
		t.Fatalf("DirStats %+v", got)
	}
}

// TestDirBadPaths: NUL bytes, overlong paths, ".." and absolute paths,
// a symbolic link out of the export, and the root where a file is meant:
// each gets its status, the pipe stays up, and nothing outside changes.
func TestDirBadPaths(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(r.dir, "out")); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("d/", lwio.MaxPathLen)
	// Client-side checks: refused before anything is sent.
	for _, p := range []string{"a\x00b", long, "bad\xffutf8"} {
		if _, err := c.Attr(ctx, p); err == nil || lwio.Errno(err) == syscall.EIO {
			t.Fatalf("Attr(%q): %v", p, err)
		}
	}
	if _, err := c.Attr(ctx, long); lwio.Errno(err) != syscall.ENAMETOOLONG {
		t.Fatalf("overlong path: %v", err)
	}
	// Server-side: escapes.
	for _, p := range []string{"../x", "a/../../x", "/etc", "out/secret", "out"} {
		_, err := c.Mkdir(ctx, p+"/new", 0o755, true)
		wantStatus(t, err, lwio.StatusAccessDenied, syscall.EACCES)
		_, err = c.ReadDir(ctx, p)
		wantStatus(t, err, lwio.StatusAccessDenied, syscall.EACCES)
	}
	_, err := c.Rename(ctx, "out", "../moved", 0)
	wantStatus(t, err, lwio.StatusAccessDenied, syscall.EACCES)
	_, _, err = c.Hash(ctx, "out/secret")
	wantStatus(t, err, lwio.StatusAccessDenied, syscall.EACCES)
	err = c.Remove(ctx, "")
	wantStatus(t, err, lwio.StatusAccessDenied, syscall.EACCES)
	// The link itself is listed as a link (it cannot be followed) and can
	// be removed; its target stays.
	ents, err := c.ReadDir(ctx, "")
	if err != nil || len(ents) != 1 || ents[0].Name != "out" || ents[0].Mode&lwio.ModeTypeMask != 0o120000 {
		t.Fatalf("ReadDir with an escaping link: %+v %v", ents, err)
	}
	if err := c.Remove(ctx, "out"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(outside, "secret")); err != nil {
		t.Fatalf("the file outside: %v", err)
	}
	if _, err := c.Attr(ctx, ""); err != nil {
		t.Fatalf("the pipe after the bad paths: %v", err)
	}
}

// TestDirListPages lists a directory too large for one message.
func TestDirListPages(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	c := r.dial(t, lwio.ClientConfig{})
	const n = 3000
	for i := range n {
		name := fmt.Sprintf("%04d-%s", i, strings.Repeat("n", 40))
		if err := os.WriteFile(filepath.Join(r.dir, name), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	ents, err := c.ReadDir(context.Background(), ".")
	if err != nil || len(ents) != n {
		t.Fatalf("ReadDir: %d entries, %v", len(ents), err)
	}
	for i, e := range ents {
		if !strings.HasPrefix(e.Name, fmt.Sprintf("%04d-", i)) {
			t.Fatalf("entry %d is %q", i, e.Name)
		}
	}
	if got := r.srv.DirStats().Ops["LIST"]; got < 3 {
		t.Fatalf("%d LIST round trips for %d entries of 106 bytes", got, n)
	}
}

// TestDirReadOnly: on a read-only export the directory operations that
// change it are WRITE_PROTECTED (EROFS), counted, and change nothing;
// STAT, LIST, HASH and SYNC still work.
func TestDirReadOnly(t *testing.T) {
	r := newRigFor(t, true, func(netip.Addr) lwio.ServerConfig { return lwio.ServerConfig{} })
	r.put(t, "f", []byte("data"))
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	_, err := c.Mkdir(ctx, "d", 0o755, true)
	wantStatus(t, err, lwio.StatusWriteProtected, syscall.EROFS)
	wantStatus(t, c.Remove(ctx, "f"), lwio.StatusWriteProtected, syscall.EROFS)
	_, err = c.Rename(ctx, "f", "g", 0)
	wantStatus(t, err, lwio.StatusWriteProtected, syscall.EROFS)
	_, err = c.SetAttr(ctx, "f", lwio.SetAttrs{Flags: lwio.SetSize, Size: 0})
	wantStatus(t, err, lwio.StatusWriteProtected, syscall.EROFS)
	if ents, err := c.ReadDir(ctx, ""); err != nil || len(ents) != 1 || ents[0].Size != 4 {
		t.Fatalf("ReadDir: %+v %v", ents, err)
	}
	if _, n, err := c.Hash(ctx, "f"); err != nil || n != 4 {
		t.Fatalf("Hash: %d %v", n, err)
	}
	if err := c.Sync(ctx, "f"); err != nil {
		t.Fatalf("Sync: %v", err)
	}
	if st := r.srv.Stats(); st.ReadOnlyRefusals != 4 {
		t.Fatalf("ReadOnlyRefusals %d, want 4", st.ReadOnlyRefusals)
	}
}
