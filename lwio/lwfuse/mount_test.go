package lwfuse_test

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/lwio/lwfuse"
)

// mounted is an LWIO server exporting a temporary directory, mounted
// through a client at mnt.
type mounted struct {
	export, mnt string
	srv         *lwio.Server
	client      *lwio.Client
}

// canMount skips a test that cannot mount FUSE here, saying why.
func canMount(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting FUSE needs root here (the mount calls mount(2) itself)")
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		t.Skipf("no FUSE device: %v", err)
	}
}

func mount(t *testing.T) *mounted { return mountB(t) }

func mountB(t testing.TB) *mounted {
	t.Helper()
	canMount(t)
	a, b := hostrig.Pair(t)
	m := &mounted{export: t.TempDir(), mnt: t.TempDir()}
	exp, err := lwio.OpenExport(m.export)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	if m.srv, err = lwio.NewServer(b, exp, lwio.ServerConfig{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if m.client, err = lwio.Dial(ctx, a, b.Addr(), lwio.ClientConfig{Credits: 32}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.client.Close() })
	fsrv, err := lwfuse.Mount(m.mnt, m.client, lwfuse.Options{Name: "lwio-test"})
	if err != nil {
		t.Skipf("FUSE mount refused here: %v", err)
	}
	t.Cleanup(func() {
		if err := fsrv.Unmount(); err != nil {
			t.Errorf("unmount: %v", err)
			// Detach it at least: a mount this process serves must not
			// outlive it.
			unix.Unmount(m.mnt, unix.MNT_DETACH)
		}
	})
	return m
}

// run runs a program in dir and fails the test with its output if it
// fails.
//
// It never sets the child's working directory itself (exec.Cmd.Dir): that
// chdir runs in the vforked child before exec, while the forking thread
// holds its processor, and on a mount this process serves it waits for
// our FUSE server; a garbage collection starting meanwhile waits for that
// processor and stops the server, and the three wait for each other for
// ever (it hung CI's split pass once). A shell changes directory after
// exec instead.
func run(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	if dir != "" {
		args = append([]string{"-c", `cd "$0" && exec "$@"`, dir, name}, args...)
		name = "sh"
	}
	cmd := exec.Command(name, args...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

func need(t *testing.T, prog string) {
	t.Helper()
	if _, err := exec.LookPath(prog); err != nil {
		t.Skipf("%s is not installed (.ci/run installs it)", prog)
	}
}

// makeTree writes a tree of directories and files of awkward sizes.
func makeTree(t *testing.T, root string) {
	t.Helper()
	rnd := rand.New(rand.NewPCG(1, 2))
	sizes := []int{0, 1, 511, 4096, 4097, 65536, 65537, 300 << 10, 3<<20 + 17}
	for i, dir := range []string{"", "a", "a/b", "a/b/c", "empty", "d e"} {
		if err := os.MkdirAll(filepath.Join(root, dir), 0o755); err != nil {
			t.Fatal(err)
		}
		if dir == "empty" {
			continue
		}
		for j, n := range sizes[i%3:] {
			b := make([]byte, n)
			for k := range b {
				b[k] = byte(rnd.Uint32())
			}
			if err := os.WriteFile(filepath.Join(root, dir, "f"+string(rune('0'+j))+".bin"), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// sums is sha256sum over every file of a tree, in a stable order.
func sums(t *testing.T, root string) string {
	t.Helper()
	need(t, "sha256sum")
	var files []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		if !d.IsDir() {
			rel, _ := filepath.Rel(root, p)
			files = append(files, rel)
		}
		return nil
	})
	return run(t, root, "sha256sum", append([]string{"--"}, files...)...)
}

// TestMountPrograms copies a tree in and out of the mount with cp -r,
// checks both with sha256sum, and runs ls, cat, dd, mv, rm and rsync on it.
func TestMountPrograms(t *testing.T) {
	m := mount(t)
	src := t.TempDir()
	makeTree(t, src)
	want := sums(t, src)

	run(t, "", "cp", "-r", src, filepath.Join(m.mnt, "tree"))
	if got := sums(t, filepath.Join(m.export, "tree")); got != want {
		t.Fatalf("the export after cp -r in:\n%s\nwant\n%s", got, want)
	}
	if got := sums(t, filepath.Join(m.mnt, "tree")); got != want {
		t.Fatalf("sha256sum on the mount:\n%s\nwant\n%s", got, want)
	}
	out := filepath.Join(t.TempDir(), "out")
	run(t, "", "cp", "-r", filepath.Join(m.mnt, "tree"), out)
	if got := sums(t, out); got != want {
		t.Fatalf("after cp -r out:\n%s\nwant\n%s", got, want)
	}

	ls := run(t, m.mnt, "ls", "-lR", "tree")
	for _, name := range []string{"a:", "f0.bin", "empty", "d e"} {
		if !strings.Contains(ls, name) {
			t.Fatalf("ls -lR shows no %q:\n%s", name, ls)
		}
	}
	if got := run(t, m.mnt, "cat", "tree/a/f0.bin"); got != string(must(os.ReadFile(filepath.Join(src, "a/f0.bin")))) {
		t.Fatal("cat gives other bytes than the file")
	}

	// dd in whole blocks and at an offset without truncating.
	run(t, m.mnt, "dd", "if=/dev/urandom", "of=dd.bin", "bs=64k", "count=20", "status=none")
	run(t, m.mnt, "dd", "if=tree/a/f0.bin", "of=dd.bin", "bs=1000", "seek=7", "conv=notrunc,fsync", "status=none")
	local := filepath.Join(t.TempDir(), "dd.bin")
	run(t, "", "dd", "if="+filepath.Join(m.mnt, "dd.bin"), "of="+local, "bs=1M", "status=none")
	if !bytes.Equal(must(os.ReadFile(local)), must(os.ReadFile(filepath.Join(m.export, "dd.bin")))) {
		t.Fatal("dd out of the mount differs from the export's file")
	}
	if st := must(os.Stat(local)); st.Size() != 20*64<<10 {
		t.Fatalf("dd.bin is %d bytes", st.Size())
	}

	// Namespace: mkdir -p, mv (a rename across directories), truncate, rm -r.
	run(t, m.mnt, "mkdir", "-p", "x/y/z")
	run(t, m.mnt, "mv", "dd.bin", "x/y/z/moved.bin")
	run(t, m.mnt, "truncate", "-s", "100", "x/y/z/moved.bin")
	if st := must(os.Stat(filepath.Join(m.export, "x/y/z/moved.bin"))); st.Size() != 100 {
		t.Fatalf("after truncate: %d bytes", st.Size())
	}
	run(t, m.mnt, "chmod", "600", "x/y/z/moved.bin")
	if st := must(os.Stat(filepath.Join(m.export, "x/y/z/moved.bin"))); st.Mode().Perm() != 0o600 {
		t.Fatalf("after chmod: %v", st.Mode())
	}
	run(t, m.mnt, "rm", "-r", "x")
	if _, err := os.Stat(filepath.Join(m.export, "x")); !os.IsNotExist(err) {
		t.Fatalf("x after rm -r: %v", err)
	}

	// rsync in (to a fresh directory), keeping times, and a check pass that
	// finds nothing to send.
	if _, err := exec.LookPath("rsync"); err == nil {
		run(t, "", "rsync", "-rt", src+"/", filepath.Join(m.mnt, "rs")+"/")
		if got := sums(t, filepath.Join(m.export, "rs")); got != want {
			t.Fatalf("after rsync:\n%s", got)
		}
		again := run(t, "", "rsync", "-rtc", "--itemize-changes", src+"/", filepath.Join(m.mnt, "rs")+"/")
		if strings.Contains(again, ">f") {
			t.Fatalf("a second rsync -c sent files again:\n%s", again)
		}
	} else {
		t.Log("rsync is not installed: its step is skipped (.ci/run installs it)")
	}
}

// TestMountFio runs fio's own verifier over random reads and writes of a
// file on the mount.
func TestMountFio(t *testing.T) {
	need(t, "fio")
	m := mount(t)
	out := run(t, m.mnt, "fio", "--name=randrw", "--filename=fio.bin", "--size=8M", "--bs=4k",
		"--rw=randrw", "--ioengine=psync", "--iodepth=1", "--numjobs=1",
		"--verify=crc32c", "--do_verify=1", "--verify_fatal=1", "--output-format=terse")
	if st := must(os.Stat(filepath.Join(m.export, "fio.bin"))); st.Size() != 8<<20 {
		t.Fatalf("fio.bin is %d bytes on the server\n%s", st.Size(), out)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
