package main

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/lwio"
)

// lwioCLI is a server exporting a temporary directory and a client
// connected to it, on which the one-shot subcommands run as the command
// line runs them (runLWIOClient), without TAP devices.
type lwioCLI struct {
	export string
	c      *lwio.Client
}

func newLWIOCLI(t *testing.T) *lwioCLI { return newLWIOCLIExport(t, false) }

func newLWIOCLIExport(t *testing.T, readOnly bool) *lwioCLI {
	t.Helper()
	a, b := hostrig.Pair(t)
	x := &lwioCLI{export: t.TempDir()}
	exp, err := lwio.OpenExport(x.export)
	if err != nil {
		t.Fatal(err)
	}
	if readOnly {
		exp.SetReadOnly()
	}
	t.Cleanup(func() { exp.Close() })
	srv, err := lwio.NewServer(b, exp, lwio.ServerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if x.c, err = lwio.Dial(ctx, a, b.Addr(), lwio.ClientConfig{Credits: 32}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { x.c.Close() })
	return x
}

// run runs subcommand sub with flags cfg (Args set from args) and stdin.
func (x *lwioCLI) run(sub string, cfg lwioConfig, stdin io.Reader, args ...string) (string, string, error) {
	cfg.Args = args
	var out, errOut bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := runLWIOClient(ctx, x.c, sub, cfg, stdin, &out, &errOut)
	return out.String(), errOut.String(), err
}

func (x *lwioCLI) ok(t *testing.T, sub string, cfg lwioConfig, args ...string) string {
	t.Helper()
	out, errOut, err := x.run(sub, cfg, nil, args...)
	if err != nil {
		t.Fatalf("lwio %s %q: %v\n%s", sub, args, err, errOut)
	}
	return out
}

func (x *lwioCLI) read(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(x.export, p))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// leftovers lists the temporary files a transfer left in dir.
func leftovers(t *testing.T, dir string) []string {
	t.Helper()
	var found []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && strings.Contains(d.Name(), ".lwio-") {
			found = append(found, p)
		}
		return nil
	})
	return found
}

func randBytes(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e37))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestLWIOPutGet: put into a folder that does not exist, the digest
// reported, get back, stdin and stdout, get into a directory.
func TestLWIOPutGet(t *testing.T) {
	x := newLWIOCLI(t)
	data := randBytes(5<<20+123, 1)
	local := filepath.Join(t.TempDir(), "big.bin")
	if err := os.WriteFile(local, data, 0o640); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(data)
	out := x.ok(t, "put", lwioConfig{}, local, "new/dir/big.bin")
	if !strings.Contains(out, hex.EncodeToString(sum[:])) {
		t.Fatalf("put's report lacks the SHA-256: %s", out)
	}
	if !bytes.Equal(x.read(t, "new/dir/big.bin"), data) {
		t.Fatal("the server's copy differs")
	}
	if st, _ := os.Stat(filepath.Join(x.export, "new/dir/big.bin")); st.Mode().Perm() != 0o640 {
		t.Fatalf("put gave mode %v, want LOCAL's 0640", st.Mode())
	}
	// Into an existing directory, as cp does.
	x.ok(t, "put", lwioConfig{}, local, "new")
	if !bytes.Equal(x.read(t, "new/big.bin"), data) {
		t.Fatal("put into a directory")
	}

	back := filepath.Join(t.TempDir(), "back.bin")
	out = x.ok(t, "get", lwioConfig{}, "new/dir/big.bin", back)
	if got, _ := os.ReadFile(back); !bytes.Equal(got, data) || !strings.Contains(out, hex.EncodeToString(sum[:])) {
		t.Fatalf("get: %d bytes, report %s", len(got), out)
	}
	dir := t.TempDir()
	x.ok(t, "get", lwioConfig{}, "new/dir/big.bin", dir)
	if got, _ := os.ReadFile(filepath.Join(dir, "big.bin")); !bytes.Equal(got, data) {
		t.Fatal("get into a directory")
	}

	// stdin to the server, the server to stdout.
	small := randBytes(200<<10+7, 2)
	if _, errOut, err := x.run("put", lwioConfig{}, bytes.NewReader(small), "-", "piped.bin"); err != nil {
		t.Fatalf("put -: %v %s", err, errOut)
	}
	if !bytes.Equal(x.read(t, "piped.bin"), small) {
		t.Fatal("put - wrote other bytes")
	}
	stdout, report, err := x.run("get", lwioConfig{}, nil, "piped.bin", "-")
	if err != nil || stdout != string(small) || !strings.Contains(report, "get ") {
		t.Fatalf("get -: %d bytes on stdout, report %q, %v", len(stdout), report, err)
	}
	if _, _, err := x.run("put", lwioConfig{}, bytes.NewReader(nil), "-", "new"); err == nil {
		t.Fatal("put - into a directory was accepted")
	}
	if l := leftovers(t, x.export); len(l) != 0 {
		t.Fatalf("temporary files left: %v", l)
	}
}

// failingReader gives n bytes, then an error: a local disk that fails in
// the middle of a put.
type failingReader struct{ n int }

var errDisk = errors.New("input/output error (simulated)")

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n == 0 {
		return 0, errDisk
	}
	k := min(len(p), r.n)
	r.n -= k
	return k, nil
}

// TestLWIOFailedPutKeepsOldFile: a put that fails after writing megabytes
// leaves the old file as it was and no temporary file.
func TestLWIOFailedPutKeepsOldFile(t *testing.T) {
	x := newLWIOCLI(t)
	old := []byte("the old contents, which must survive\n")
	if err := os.MkdirAll(filepath.Join(x.export, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(x.export, "d/f.txt"), old, 0o644); err != nil {
		t.Fatal(err)
	}
	_, _, err := x.run("put", lwioConfig{}, &failingReader{n: 3 << 20}, "-", "d/f.txt")
	if !errors.Is(err, errDisk) {
		t.Fatalf("put from a failing reader: %v", err)
	}
	if got := x.read(t, "d/f.txt"); !bytes.Equal(got, old) {
		t.Fatalf("the old file now holds %d bytes", len(got))
	}
	if l := leftovers(t, x.export); len(l) != 0 {
		t.Fatalf("temporary files left: %v", l)
	}
	// A put cancelled by its context (Ctrl-C) also leaves the old file.
	ctx, cancel := context.WithCancel(context.Background())
	x2 := &lwioSession{ctx: ctx, c: x.c, stdout: io.Discard, stderr: io.Discard}
	r := &cancelAfter{n: 1 << 20, cancel: cancel}
	if err := x2.putFile("-", r, -1, 0, "d/f.txt"); !errors.Is(err, context.Canceled) {
		t.Fatalf("a cancelled put: %v", err)
	}
	if got := x.read(t, "d/f.txt"); !bytes.Equal(got, old) {
		t.Fatalf("after a cancelled put the old file holds %d bytes", len(got))
	}
	if l := leftovers(t, x.export); len(l) != 0 {
		t.Fatalf("temporary files left after the cancel: %v", l)
	}
}

// cancelAfter is an endless reader that cancels its context after n bytes.
type cancelAfter struct {
	n      int
	cancel context.CancelFunc
}

func (r *cancelAfter) Read(p []byte) (int, error) {
	if r.n <= 0 {
		r.cancel()
	}
	r.n -= len(p)
	return len(p), nil
}

// TestLWIOReadOnly: on a read-only export every command that would change
// it fails with a clear error and changes nothing; reading works.
func TestLWIOReadOnly(t *testing.T) {
	x := newLWIOCLIExport(t, true)
	if err := os.WriteFile(filepath.Join(x.export, "f"), []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "new")
	if err := os.WriteFile(local, []byte("new"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sub  string
		args []string
	}{{"put", []string{local, "f"}}, {"put", []string{local, "d/e/f"}}, {"mkdir", []string{"d"}}, {"rm", []string{"f"}}, {"mv", []string{"f", "g"}}} {
		if _, _, err := x.run(c.sub, lwioConfig{}, nil, c.args...); err == nil ||
			!strings.Contains(err.Error(), "access denied") && !strings.Contains(err.Error(), "read-only export") {
			t.Errorf("lwio %s %q on a read-only export: %v", c.sub, c.args, err)
		}
	}
	if string(x.read(t, "f")) != "old" {
		t.Fatal("the file changed")
	}
	if ents, _ := os.ReadDir(x.export); len(ents) != 1 {
		t.Fatalf("the export holds %v", ents)
	}
	back := filepath.Join(t.TempDir(), "back")
	x.ok(t, "get", lwioConfig{}, "f", back)
	if got, _ := os.ReadFile(back); string(got) != "old" {
		t.Fatalf("get from a read-only export: %q", got)
	}
}

// TestLWIORecursive: put -r and get -r of a tree, compared file by file.
func TestLWIORecursive(t *testing.T) {
	x := newLWIOCLI(t)
	src := filepath.Join(t.TempDir(), "tree")
	files := map[string][]byte{"a.bin": randBytes(70000, 3), "sub/b.bin": randBytes(1, 4), "sub/deep/c.bin": randBytes(0, 5),
		"sub/deep/d e.txt": []byte("spaces\n")}
	for p, b := range files {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(src, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(src, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	if _, _, err := x.run("put", lwioConfig{}, nil, src, "backup"); err == nil || !strings.Contains(err.Error(), "use -r") {
		t.Fatalf("put of a directory without -r: %v", err)
	}
	out := x.ok(t, "put", lwioConfig{Recursive: true}, src, "backup")
	if !strings.Contains(out, "put: 4 files, 70008 bytes") {
		t.Fatalf("put -r report: %s", out)
	}
	for p, b := range files {
		if !bytes.Equal(x.read(t, "backup/"+p), b) {
			t.Fatalf("backup/%s differs", p)
		}
	}
	if st, err := os.Stat(filepath.Join(x.export, "backup/empty")); err != nil || !st.IsDir() {
		t.Fatalf("the empty directory: %v", err)
	}
	// Again into the existing directory: a copy inside it, as cp -r does.
	x.ok(t, "put", lwioConfig{Recursive: true}, src, "backup")
	if !bytes.Equal(x.read(t, "backup/tree/a.bin"), files["a.bin"]) {
		t.Fatal("put -r into an existing directory")
	}
	dst := filepath.Join(t.TempDir(), "restored")
	x.ok(t, "get", lwioConfig{Recursive: true}, "backup", dst)
	for p, b := range files {
		if got, err := os.ReadFile(filepath.Join(dst, p)); err != nil || !bytes.Equal(got, b) {
			t.Fatalf("restored %s: %v", p, err)
		}
	}
	if _, _, err := x.run("get", lwioConfig{}, nil, "backup", dst); err == nil || !strings.Contains(err.Error(), "use -r") {
		t.Fatalf("get of a directory without -r: %v", err)
	}
}

// TestLWIONamespace: ls, stat (of a directory too), mkdir, rm, mv.
func TestLWIONamespace(t *testing.T) {
	x := newLWIOCLI(t)
	x.ok(t, "mkdir", lwioConfig{Parents: true}, "p/q/r", "s")
	if _, _, err := x.run("mkdir", lwioConfig{}, nil, "p"); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("mkdir of an existing directory: %v", err)
	}
	if _, _, err := x.run("mkdir", lwioConfig{}, nil, "x/y"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("mkdir without -p under a missing parent: %v", err)
	}
	if err := os.WriteFile(filepath.Join(x.export, "p/file.txt"), []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	ls := x.ok(t, "ls", lwioConfig{})
	if !strings.Contains(ls, " p/\n") || !strings.Contains(ls, " s/\n") || !strings.HasPrefix(ls, "drwx") {
		t.Fatalf("ls of the root:\n%s", ls)
	}
	ls = x.ok(t, "ls", lwioConfig{}, "p")
	if lines := strings.Split(strings.TrimSpace(ls), "\n"); len(lines) != 2 || !strings.Contains(lines[0], "5 ") ||
		!strings.HasSuffix(lines[0], " file.txt") || !strings.HasSuffix(lines[1], " q/") || !strings.HasPrefix(lines[0], "-rw-r--r--") {
		t.Fatalf("ls p:\n%s", ls)
	}
	if out := x.ok(t, "stat", lwioConfig{}, "p/file.txt"); out != "5\n" {
		t.Fatalf("stat of a file: %q", out)
	}
	if _, _, err := x.run("stat", lwioConfig{}, nil, "p/q"); err != nil {
		t.Fatalf("stat of a directory: %v", err)
	}

	x.ok(t, "mv", lwioConfig{}, "p/file.txt", "s")
	if string(x.read(t, "s/file.txt")) != "12345" {
		t.Fatal("mv into a directory")
	}
	x.ok(t, "mv", lwioConfig{}, "s/file.txt", "renamed.txt")
	if _, _, err := x.run("rm", lwioConfig{}, nil, "p"); err == nil || !strings.Contains(err.Error(), "use -r") {
		t.Fatalf("rm of a directory without -r: %v", err)
	}
	x.ok(t, "rm", lwioConfig{Recursive: true}, "p", "renamed.txt")
	if ls := x.ok(t, "ls", lwioConfig{}, "."); !strings.HasSuffix(strings.TrimSpace(ls), " s/") || strings.Count(ls, "\n") != 1 {
		t.Fatalf("ls after rm -r:\n%s", ls)
	}
	if _, _, err := x.run("rm", lwioConfig{}, nil, "nothing"); err == nil || !strings.Contains(err.Error(), "no such file") {
		t.Fatalf("rm of nothing: %v", err)
	}
}

// TestLWIOBadPaths: "..", absolute paths, NUL bytes and paths longer than
// PATH_MAX get clear errors and touch nothing outside the export.
func TestLWIOBadPaths(t *testing.T) {
	x := newLWIOCLI(t)
	outside := t.TempDir()
	local := filepath.Join(outside, "f")
	if err := os.WriteFile(local, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("a/", 2100) // over PATH_MAX (4096)
	for _, c := range []struct {
		sub  string
		args []string
		want string
	}{
		{"put", []string{local, "../escape"}, "access denied"},
		{"put", []string{local, "/etc/passwd"}, "access denied"},
		{"mkdir", []string{"../../tmp/x"}, "access denied"},
		{"rm", []string{".."}, "access denied"},
		{"mv", []string{"a", "../b"}, "access denied"},
		{"ls", []string{"a\x00b"}, "NUL byte"},
		{"get", []string{"a\x00b", local}, "NUL byte"},
		{"stat", []string{long}, "too long"},
		{"put", []string{local, long + "f"}, "too long"},
	} {
		_, _, err := x.run(c.sub, lwioConfig{Parents: true}, nil, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("lwio %s %.40q: %v, want %q", c.sub, c.args, err, c.want)
		}
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("the directory outside holds %d entries", len(ents))
	}
	filepath.WalkDir(filepath.Dir(x.export), func(p string, d os.DirEntry, err error) error {
		if err == nil && (d.Name() == "escape" || d.Name() == "x" || d.Name() == "b") {
			t.Errorf("%s was made outside the export", p)
		}
		return nil
	})
}

// mountedAt reports whether dir is a mount point (in /proc/self/mounts).
func mountedAt(t *testing.T, dir string) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[1] == dir {
			return true
		}
	}
	return false
}

// TestLWIOMountUnmounts: 'lwio mount' serves until its context ends (what
// SIGINT and SIGTERM do) and then unmounts, cleanly when idle and lazily
// when a program still holds a file open there.
func TestLWIOMountUnmounts(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root here")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE device: %v", err)
	}
	x := newLWIOCLI(t)
	defer func(g time.Duration) { lwioUnmountGrace = g }(lwioUnmountGrace)
	lwioUnmountGrace = 50 * time.Millisecond
	for _, busy := range []bool{false, true} {
		mnt := t.TempDir()
		ctx, cancel := context.WithCancel(context.Background())
		// Whatever happens, nothing stays mounted (a mount this process
		// serves must be gone before the process exits).
		t.Cleanup(func() {
			cancel()
			if mountedAt(t, mnt) {
				unix.Unmount(mnt, unix.MNT_DETACH)
			}
		})
		var logBuf bytes.Buffer
		done := make(chan error, 1)
		go func() { done <- runLWIOMount(ctx, x.c, lwioConfig{Args: []string{mnt}}, newLogger(&logBuf)) }()
		// The mount is up when /proc says so.
		deadline := time.Now().Add(10 * time.Second)
		for !mountedAt(t, mnt) {
			if time.Now().After(deadline) {
				cancel()
				t.Skipf("the mount did not come up: %v %s", <-done, logBuf.String())
			}
			time.Sleep(10 * time.Millisecond)
		}
		if err := os.WriteFile(filepath.Join(mnt, "probe"), []byte("hi"), 0o644); err != nil {
			cancel()
			t.Fatal(err)
		}
		if string(x.read(t, "probe")) != "hi" {
			t.Fatal("the probe did not reach the export")
		}
		var held *os.File
		if busy {
			var err error
			if held, err = os.Open(filepath.Join(mnt, "probe")); err != nil {
				cancel()
				t.Fatal(err)
			}
		}
		cancel()
		if err := <-done; err != nil {
			t.Fatalf("busy=%v: %v\n%s", busy, err, logBuf.String())
		}
		if mountedAt(t, mnt) {
			t.Fatalf("busy=%v: still mounted after the context ended", busy)
		}
		if busy != strings.Contains(logBuf.String(), "detaching") {
			t.Fatalf("busy=%v: log:\n%s", busy, logBuf.String())
		}
		if held != nil {
			held.Close()
		}
	}
}
