package testutil

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// The TAP tests put a real Linux peer on the other end of a port: a TAP
// device whose kernel side lives in a network namespace made for the
// test, so the test changes nothing in the machine's own network.

// RequireTAP skips the test, saying why, when this machine cannot make
// TAP devices and network namespaces.
func RequireTAP(t testing.TB) {
	t.Helper()
	if uid := os.Geteuid(); uid != 0 {
		t.Skipf("skipped: needs root to create a TAP device and a network namespace (CAP_NET_ADMIN and CAP_SYS_ADMIN; running as uid %d)", uid)
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("skipped: no /dev/net/tun (%v): load the tun module or give the container the device", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("skipped: the ip command (iproute2) is not installed")
	}
}

// RunIP runs the ip command with args; its error carries ip's output. It
// is for code on a namespace's thread, where a test may not be failed.
func RunIP(args ...string) error {
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, bytes.TrimSpace(out))
	}
	return nil
}

// IP runs the ip command with args and fails the test with its output if
// it fails.
func IP(t testing.TB, args ...string) {
	t.Helper()
	if err := RunIP(args...); err != nil {
		t.Fatal(err)
	}
}

// InNetns runs fn on an OS thread that has entered the network namespace
// bound at path (ip netns add makes one). Sockets fn creates belong to
// the namespace for their whole life, and can be used from any goroutine
// afterwards.
func InNetns(path string, fn func() error) error {
	return onNetnsThread(func() error {
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("setns %s: %w", path, err)
		}
		return nil
	}, fn)
}

// InNewNetns runs fn on an OS thread of its own in a new, empty network
// namespace, so that the test's interfaces and addresses cannot clash
// with the machine's or with other tests'. Sockets and ip commands made
// by fn live in that namespace too (a child process inherits the forking
// thread's namespaces). An error from fn fails the test; a machine that
// cannot make the namespace skips it.
func InNewNetns(t testing.TB, fn func() error) {
	t.Helper()
	RequireTAP(t)
	err := onNetnsThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("unshare(CLONE_NEWNET): %w", err)
		}
		return nil
	}, fn)
	if err != nil {
		if errors.Is(err, unix.EPERM) && strings.HasPrefix(err.Error(), "unshare") {
			t.Skipf("needs CAP_SYS_ADMIN to create a network namespace: %v", err)
		}
		t.Fatal(err)
	}
}

// onNetnsThread runs enter and then fn on a goroutine locked to its OS
// thread. The thread is never given back to the runtime's pool (no
// UnlockOSThread): it is in another namespace, so it must not run any
// other goroutine, and Go ends it when the goroutine exits still locked.
func onNetnsThread(enter, fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := enter(); err != nil {
			errc <- err
			return
		}
		errc <- fn()
	}()
	return <-errc
}
