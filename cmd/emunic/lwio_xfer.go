package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/emunic/emunic/lwio"
)

// lwioSession is one client command's connection and what its transfers
// share: the registered window they move data through (allocated once, so
// a recursive copy of many files registers memory once) and the streams.
type lwioSession struct {
	ctx    context.Context
	c      *lwio.Client
	stdin  io.Reader
	stdout io.Writer
	stderr io.Writer
	mem    []byte
	// files and bytes total a recursive put or get; skipped counts what it
	// could not copy (reported, exit status 1).
	files, bytes, skipped int64
}

// lwioWindow is the most requests put and get keep in flight (the
// client also never exceeds the server's credits); lwioPiece the bytes of
// each.
const (
	lwioWindow = 32
	lwioPiece  = 64 << 10
)

func (x *lwioSession) window() ([]byte, error) {
	if x.mem == nil {
		m, err := x.c.Alloc(lwioWindow * lwioPiece)
		if err != nil {
			return nil, err
		}
		x.mem = m
	}
	return x.mem, nil
}

// transfer moves a file in lwioPiece requests with up to lwioWindow in
// flight, each with its own slice of registered memory (so the NIC moves
// the data without a copy): issue starts the request for the piece at off
// in buf, its completion going to done, and returns its length (0: nothing
// more to move); finish, if set, takes each completed request with its
// buffer. It returns the bytes the completions account for; the first
// error stops issuing, and what is in flight is still taken.
func (x *lwioSession) transfer(bar *progress, issue func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, int, error),
	finish func(cl *lwio.Call, buf []byte) error) (int64, error) {
	mem, err := x.window()
	if err != nil {
		return 0, err
	}
	done := make(chan *lwio.Call, lwioWindow)
	free := make([]int, 0, lwioWindow)
	for i := range lwioWindow {
		free = append(free, lwioWindow-1-i)
	}
	// One goroutine issues and takes, so a Call is in slotOf before it is
	// taken even when it completed at once.
	slotOf := make(map[*lwio.Call]int, lwioWindow)
	var off, moved int64
	var firstErr error
	take := func() {
		cl := <-done
		s := slotOf[cl]
		delete(slotOf, cl)
		free = append(free, s)
		err := cl.Err
		if err == io.EOF {
			err = nil
		}
		if err == nil && finish != nil && cl.N > 0 {
			err = finish(cl, mem[s*lwioPiece:(s+1)*lwioPiece])
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		moved += int64(cl.N)
		bar.set(moved)
	}
	for firstErr == nil {
		// A context that ended (Ctrl-C) stops the issuing here, whatever
		// the client does with a request started under it.
		if err := x.ctx.Err(); err != nil {
			firstErr = err
			break
		}
		if len(free) == 0 {
			take()
			continue
		}
		s := free[len(free)-1]
		cl, n, err := issue(mem[s*lwioPiece:(s+1)*lwioPiece], off, done)
		if err != nil {
			firstErr = err
			break
		}
		if n == 0 {
			break
		}
		free = free[:len(free)-1]
		slotOf[cl] = s
		off += int64(n)
	}
	for len(slotOf) > 0 {
		take()
	}
	bar.finish()
	return moved, firstErr
}

// inOrder feeds pieces that complete in any order to w in file order,
// holding the ones that arrive early (at most a window's worth).
type inOrder struct {
	w       io.Writer
	next    int64
	pending map[int64][]byte
}

func (o *inOrder) add(off int64, b []byte) error {
	if off != o.next {
		o.pending[off] = append([]byte(nil), b...)
		return nil
	}
	for {
		if _, err := o.w.Write(b); err != nil {
			return err
		}
		o.next += int64(len(b))
		nb, ok := o.pending[o.next]
		if !ok {
			return nil
		}
		delete(o.pending, o.next)
		b = nb
	}
}

// tempName is a hidden name beside p for a transfer in progress.
func tempName(p string) string {
	var r [6]byte
	_, _ = rand.Read(r[:])
	return path.Join(path.Dir(p), "."+path.Base(p)+".lwio-"+hex.EncodeToString(r[:]))
}

// detached is a context for clean-up that must run after ctx ended (a
// Ctrl-C during a put still removes the temporary file).
func detached(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
}

// checkHash compares the digest of what moved with the server's.
func (x *lwioSession) checkHash(remote string, h hash.Hash, moved int64) (string, error) {
	sum, n, err := x.c.Hash(x.ctx, remote)
	if err != nil {
		return "", fmt.Errorf("SHA-256 of %s on the server: %w", remote, err)
	}
	local := h.Sum(nil)
	if n != moved || !bytes.Equal(sum[:], local) {
		return "", fmt.Errorf("%s: the server's SHA-256 %x over %d bytes differs from %x over the %d bytes moved",
			remote, sum[:8], n, local[:8], moved)
	}
	return hex.EncodeToString(local), nil
}

// putFile copies in (size bytes, -1 when unknown: stdin) to remote: into
// a temporary file beside it, created with its missing parents, renamed
// over remote only when every byte is written and the server's SHA-256
// of the temporary file matches what was read. A failed put removes the
// temporary file and leaves remote as it was.
func (x *lwioSession) putFile(label string, in io.Reader, size int64, perm fs.FileMode, remote string) error {
	if dir := path.Dir(remote); dir != "." {
		if _, err := x.c.Mkdir(x.ctx, dir, 0o755, true); err != nil {
			return fmt.Errorf("put %s: making %s: %w", label, dir, err)
		}
	}
	tmp := tempName(remote)
	f, err := x.c.Open(x.ctx, tmp, lwio.OpenFlags{Create: true, Truncate: true})
	if err != nil {
		return fmt.Errorf("put %s: %w", label, err)
	}
	committed := false
	defer func() {
		if !committed {
			cctx, cancel := detached(x.ctx)
			_ = x.c.Remove(cctx, tmp)
			cancel()
		}
	}()
	start := time.Now()
	h := sha256.New()
	ended := false
	moved, err := x.transfer(newProgress(x.stderr, "put "+label, size),
		func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, int, error) {
			if ended {
				return nil, 0, nil
			}
			n, err := io.ReadFull(in, buf)
			switch {
			case err == io.EOF:
				return nil, 0, nil
			case err == io.ErrUnexpectedEOF:
				ended = true
			case err != nil:
				return nil, 0, fmt.Errorf("%s: %w", label, err)
			}
			h.Write(buf[:n])
			cl, err := f.StartWrite(x.ctx, buf[:n], off, done)
			return cl, n, err
		}, nil)
	if cerr := f.Close(); err == nil && cerr != nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("put %s: %w", label, err)
	}
	if size >= 0 && moved != size {
		return fmt.Errorf("put %s: %d bytes written of %d (the file changed while it was read?)", label, moved, size)
	}
	sum, err := x.checkHash(tmp, h, moved)
	if err != nil {
		return fmt.Errorf("put %s: %w", label, err)
	}
	if perm != 0 {
		if _, err := x.c.SetAttr(x.ctx, tmp, lwio.SetAttrs{Flags: lwio.SetMode, Mode: uint32(perm.Perm())}); err != nil {
			return fmt.Errorf("put %s: %w", label, err)
		}
	}
	if _, err := x.c.Rename(x.ctx, tmp, remote, 0); err != nil {
		return fmt.Errorf("put %s: %w", label, err)
	}
	committed = true
	x.files++
	x.bytes += moved
	fmt.Fprintf(x.stdout, "put %s -> %s:%s: %d bytes in %v (%s), SHA-256 %s\n", label, x.c.ServerName(), remote, moved,
		time.Since(start).Round(time.Millisecond), rate(moved, time.Since(start)), sum)
	return nil
}

// remoteDir reports whether remote names a directory on the server (""
// and "." are the export's root; a trailing slash says so too).
func (x *lwioSession) remoteDir(remote string) (bool, error) {
	if remote == "" || remote == "." || strings.HasSuffix(remote, "/") {
		return true, nil
	}
	a, err := x.c.Attr(x.ctx, remote)
	var se *lwio.StatusError
	if errors.As(err, &se) && se.Status == lwio.StatusObjectNameNotFound {
		return false, nil
	}
	return err == nil && a.IsDir(), err
}

// put copies LOCAL (a file, "-" for stdin, or with recursive a directory)
// to REMOTE; like cp, into REMOTE when it is a directory.
func (x *lwioSession) put(local, remote string, recursive bool) error {
	isDir, err := x.remoteDir(remote)
	if err != nil {
		return err
	}
	if local == "-" {
		if isDir {
			return fmt.Errorf("put -: %q is a directory: name the file to write", remote)
		}
		return x.putFile("-", x.stdin, -1, 0, cleanRemote(remote))
	}
	target := cleanRemote(remote)
	if isDir {
		target = path.Join(target, filepath.Base(local))
	}
	st, err := os.Stat(local)
	if err != nil {
		return err
	}
	if !st.IsDir() {
		return x.putLocal(local, st, target)
	}
	if !recursive {
		return fmt.Errorf("put %s: a directory (use -r)", local)
	}
	return filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(local, p)
		dst := path.Join(target, filepath.ToSlash(rel))
		if d.IsDir() {
			_, err := x.c.Mkdir(x.ctx, dst, 0o755, true)
			return err
		}
		st, err := os.Stat(p) // follows a link to a file
		if err != nil || !st.Mode().IsRegular() {
			fmt.Fprintf(x.stderr, "put: skipping %s: not a regular file\n", p)
			x.skipped++
			return nil
		}
		return x.putLocal(p, st, dst)
	})
}

func (x *lwioSession) putLocal(local string, st fs.FileInfo, remote string) error {
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", local)
	}
	in, err := os.Open(local)
	if err != nil {
		return err
	}
	defer in.Close()
	return x.putFile(local, in, st.Size(), st.Mode(), remote)
}

// cleanRemote drops what the server would not take as is: a trailing
// slash, "./" in front.
func cleanRemote(p string) string {
	if p == "" {
		return "."
	}
	return path.Clean(p)
}

// getFile copies remote to local ("-": stdout): reads land in registered
// memory, go to a temporary file beside local at their offsets and,
// in order, through SHA-256 (and to stdout); local is renamed into place
// only when every byte arrived and the digest matches the server's.
func (x *lwioSession) getFile(remote, local string) error {
	f, err := x.c.Open(x.ctx, remote, lwio.OpenFlags{})
	if err != nil {
		return fmt.Errorf("get %s: %w", remote, err)
	}
	defer f.Close()
	size := f.Size()
	h := sha256.New()
	ord := &inOrder{w: h, pending: map[int64][]byte{}}
	var tmp *os.File
	report := x.stdout
	if local == "-" {
		ord.w = io.MultiWriter(x.stdout, h)
		report = x.stderr
	} else {
		if tmp, err = os.CreateTemp(filepath.Dir(local), "."+filepath.Base(local)+".lwio-*"); err != nil {
			return err
		}
		defer func() {
			if tmp != nil {
				tmp.Close()
				os.Remove(tmp.Name())
			}
		}()
	}
	start := time.Now()
	moved, err := x.transfer(newProgress(x.stderr, "get "+remote, size),
		func(buf []byte, off int64, done chan *lwio.Call) (*lwio.Call, int, error) {
			n := int(min(int64(len(buf)), size-off))
			if n <= 0 {
				return nil, 0, nil
			}
			cl, err := f.StartRead(x.ctx, buf[:n], off, done)
			return cl, n, err
		}, func(cl *lwio.Call, buf []byte) error {
			if tmp != nil {
				if _, err := tmp.WriteAt(buf[:cl.N], cl.Off); err != nil {
					return err
				}
			}
			return ord.add(cl.Off, buf[:cl.N])
		})
	if err != nil {
		return fmt.Errorf("get %s: %w", remote, err)
	}
	if moved != size || ord.next != size {
		return fmt.Errorf("get %s: %d bytes arrived of %d (the file changed on the server?)", remote, moved, size)
	}
	sum, err := x.checkHash(remote, h, moved)
	if err != nil {
		return fmt.Errorf("get %s: %w", remote, err)
	}
	if tmp != nil {
		if err := tmp.Sync(); err != nil {
			return err
		}
		if err := tmp.Close(); err != nil {
			return err
		}
		if err := os.Rename(tmp.Name(), local); err != nil {
			return err
		}
		tmp = nil
	}
	x.files++
	x.bytes += moved
	fmt.Fprintf(report, "get %s:%s -> %s: %d bytes in %v (%s), SHA-256 %s\n", x.c.ServerName(), remote, local, size,
		time.Since(start).Round(time.Millisecond), rate(size, time.Since(start)), sum)
	return nil
}

// get copies REMOTE (a file, or with recursive a directory) to LOCAL ("-":
// stdout); like cp, into LOCAL when it is a directory.
func (x *lwioSession) get(remote, local string, recursive bool) error {
	remote = cleanRemote(remote)
	a, err := x.c.Attr(x.ctx, remote)
	if err != nil {
		return fmt.Errorf("get %s: %w", remote, err)
	}
	if local != "-" {
		if st, err := os.Stat(local); err == nil && st.IsDir() {
			local = filepath.Join(local, path.Base(remote))
		}
	}
	if !a.IsDir() {
		return x.getFile(remote, local)
	}
	if !recursive {
		return fmt.Errorf("get %s: a directory (use -r)", remote)
	}
	if local == "-" {
		return fmt.Errorf("get -r %s: a directory cannot go to stdout", remote)
	}
	return x.getTree(remote, local)
}

func (x *lwioSession) getTree(remote, local string) error {
	if err := os.MkdirAll(local, 0o755); err != nil {
		return err
	}
	ents, err := x.c.ReadDir(x.ctx, remote)
	if err != nil {
		return fmt.Errorf("get %s: %w", remote, err)
	}
	for _, e := range ents {
		r, l := path.Join(remote, e.Name), filepath.Join(local, e.Name)
		switch e.Mode & lwio.ModeTypeMask {
		case lwio.ModeDir:
			err = x.getTree(r, l)
		case lwio.ModeRegular:
			err = x.getFile(r, l)
		default:
			fmt.Fprintf(x.stderr, "get: skipping %s: not a regular file or directory\n", r)
			x.skipped++
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func rate(n int64, d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f MB/s", float64(n)/d.Seconds()/1e6)
}

// progress is a one-line progress bar on a terminal (nothing otherwise),
// redrawn at most ten times a second, for transfers of 8 MiB and more.
type progress struct {
	w     io.Writer
	label string
	total int64
	on    bool
	last  time.Time
	start time.Time
}

func newProgress(w io.Writer, label string, total int64) *progress {
	f, ok := w.(*os.File)
	return &progress{w: w, label: label, total: total, on: ok && isTerminal(f) && total >= 8<<20, start: time.Now()}
}

func (p *progress) set(n int64) {
	if !p.on || time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	const width = 30
	done := int(int64(width) * n / max(p.total, 1))
	fmt.Fprintf(p.w, "\r%s [%s%s] %3d%% %s", p.label, strings.Repeat("=", done), strings.Repeat(" ", width-done),
		100*n/max(p.total, 1), rate(n, time.Since(p.start)))
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprint(p.w, "\r\033[K")
	}
}
