package tests

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
)

// The guest VM (scripts/guest-vm): a QEMU guest whose kernel runs
// emunic.ko on QEMU's ivshmem-doorbell device, served by 'emunic device
// --ivshmem' (docs/guest.md). The device's port is a persistent TAP in a
// network namespace whose kernel is the guest's peer.

// guestVMDir is the directory of the guest VM's scripts: $GUESTVM_DIR,
// else this repository's.
func guestVMDir() string {
	if d := os.Getenv("GUESTVM_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "scripts", "guest-vm")
}

// requireGuestVM skips the test, saying why, when the VM cannot run here.
func requireGuestVM(t testing.TB) string {
	t.Helper()
	testutil.RequireTAP(t)
	run, err := filepath.Abs(filepath.Join(guestVMDir(), "run.sh"))
	if err == nil {
		_, err = os.Stat(run)
	}
	if err != nil {
		t.Skipf("skipped: no guest VM scripts (%v); GUESTVM_DIR names their directory", err)
	}
	if out, err := exec.Command(run, "--check").CombinedOutput(); err != nil {
		t.Skipf("skipped: %s (%v)", strings.TrimSpace(string(out)), err)
	}
	return run
}

const (
	guestPeerIP = "10.99.0.1" // the namespace's kernel, on the device's TAP
	guestIP     = "10.99.0.2" // the guest's emunic0
	guestSink   = 5001        // the peer's port that takes the guest's data
	guestSource = 5002        // the guest's port that takes the peer's data
)

// guestRig is one device process serving one guest at a time, with its
// TAP in a namespace.
type guestRig struct {
	t    testing.TB
	ns   *netns
	tap  string
	sock string
	dev  *exec.Cmd
	out  syncBuffer // the device's stdout: its counters at the end
	log  syncBuffer
	done chan error
}

// newGuestRig makes the namespace and a persistent TAP in it (so that the
// peer's address outlives the device's resets, which close the TAP), and
// starts 'emunic device --ivshmem' there.
func newGuestRig(t testing.TB, exe string, extra ...string) *guestRig {
	t.Helper()
	return newGuestRigAs(t, exe, []string{"device"}, extra...)
}

// newGuestRigAs is newGuestRig with the device run as 'emunic CMD...
// --ivshmem PATH --tap NAME EXTRA...' (CMD: 'trace record ... --').
func newGuestRigAs(t testing.TB, exe string, cmd []string, extra ...string) *guestRig {
	t.Helper()
	g := &guestRig{t: t, ns: newNetns(t), tap: uniqueName("gvm", 10), done: make(chan error, 1)}
	g.sock = filepath.Join(t.TempDir(), "ivshmem.sock")
	testutil.IP(t, "-n", g.ns.name, "tuntap", "add", "dev", g.tap, "mode", "tap")
	testutil.IP(t, "-n", g.ns.name, "addr", "add", guestPeerIP+"/24", "dev", g.tap)
	testutil.IP(t, "-n", g.ns.name, "link", "set", g.tap, "up")
	args := append(append(append([]string{"netns", "exec", g.ns.name, exe}, cmd...), "--ivshmem", g.sock, "--tap", g.tap), extra...)
	g.dev = exec.Command("ip", args...)
	g.dev.Stdout, g.dev.Stderr = &g.out, &g.log
	if err := g.dev.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { g.done <- g.dev.Wait() }()
	t.Cleanup(func() {
		if g.dev.ProcessState == nil {
			g.dev.Process.Kill()
			<-g.done
		}
		t.Logf("emunic device log:\n%s", g.log.String())
	})
	// Serving once it says so.
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(g.log.String(), "ivshmem server on"); {
		select {
		case err := <-g.done:
			t.Fatalf("emunic device exited (%v):\n%s", err, g.log.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("emunic device did not start serving in 30 s:\n%s", g.log.String())
		}
	}
	return g
}

// stop interrupts the device and returns its report.
func (g *guestRig) stop() string {
	g.t.Helper()
	g.dev.Process.Signal(syscall.SIGINT)
	select {
	case err := <-g.done:
		if err != nil {
			g.t.Errorf("emunic device exited with %v after SIGINT", err)
		}
	case <-time.After(30 * time.Second):
		g.t.Fatal("emunic device did not exit within 30 s of SIGINT")
	}
	return g.out.String()
}

// bootGuest runs the VM's script on the rig's device and returns its console.
func bootGuest(ctx context.Context, t testing.TB, run string, g *guestRig, script string, args ...string) (string, error) {
	t.Helper()
	cmd, console := guestCmd(ctx, run, g, script, args...)
	err := cmd.Run()
	return console.String(), err
}

// guestCmd is the command that boots the VM in the rig's namespace, in a
// process group of its own (cancelling ctx kills the group), and the
// console it writes.
func guestCmd(ctx context.Context, run string, g *guestRig, script string, args ...string) (*exec.Cmd, *syncBuffer) {
	// QEMU runs in the rig's namespace too: a virtio-net TAP it makes
	// (the benchmark's baseline) is then beside the device's.
	argv := append([]string{"netns", "exec", g.ns.name, run, "--ivshmem", g.sock, "--ip", guestIP + "/24", "--timeout", "900"}, args...)
	argv = append(append(argv, "--"), script)
	cmd := exec.CommandContext(ctx, "ip", argv...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	console := new(syncBuffer)
	cmd.Stdout, cmd.Stderr = console, console
	return cmd, console
}

// consoleValue is the word after "KEY " on the console's line that starts
// with it.
func consoleValue(console, key string) string {
	sc := bufio.NewScanner(strings.NewReader(console))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(strings.TrimRight(sc.Text(), "\r"), key+" "); ok {
			return strings.Fields(rest + " ")[0]
		}
	}
	return ""
}

// guestXfer is what one end of a guest transfer saw.
type guestXfer struct {
	sha  string        // SHA-256 of the bytes, hex
	n    int64         // bytes
	took time.Duration // from the connection to the last byte
	err  error
}

// guestSinkServer takes one connection at addr in the namespace and
// returns what arrived.
func guestSinkServer(t testing.TB, ns *netns, addr string) <-chan guestXfer {
	t.Helper()
	var l net.Listener
	if err := ns.do(func() (err error) {
		l, err = net.Listen("tcp4", addr)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	res := make(chan guestXfer, 1)
	go func() {
		defer l.Close()
		c, err := l.Accept()
		if err != nil {
			res <- guestXfer{err: err}
			return
		}
		defer c.Close()
		start := time.Now()
		h := sha256.New()
		n, err := io.Copy(h, c)
		res <- guestXfer{sha: hex.EncodeToString(h.Sum(nil)), n: n, took: time.Since(start), err: err}
	}()
	t.Cleanup(func() { l.Close() })
	return res
}

// guestSourceClient connects from the namespace to the guest's listener
// at addr once it listens (a refused connection is tried again until ctx
// ends), after start is closed, and sends n random bytes.
func guestSourceClient(ctx context.Context, ns *netns, addr string, n int64, start <-chan struct{}) <-chan guestXfer {
	res := make(chan guestXfer, 1)
	go func() {
		select {
		case <-start:
		case <-ctx.Done():
			res <- guestXfer{err: ctx.Err()}
			return
		}
		var c net.Conn
		for {
			err := ns.do(func() (err error) {
				var d net.Dialer
				dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
				defer cancel()
				c, err = d.DialContext(dctx, "tcp4", addr)
				return err
			})
			if err == nil {
				break
			}
			if ctx.Err() != nil {
				res <- guestXfer{err: err}
				return
			}
			// Refused (the guest's nc is not listening yet): the next
			// try comes after a pause a fraction of the guest's boot.
			select {
			case <-ctx.Done():
			case <-time.After(200 * time.Millisecond):
			}
		}
		t0 := time.Now()
		h := sha256.New()
		_, err := io.CopyN(io.MultiWriter(c, h), rand.Reader, n)
		if cerr := c.Close(); err == nil {
			err = cerr
		}
		res <- guestXfer{sha: hex.EncodeToString(h.Sum(nil)), n: n, took: time.Since(t0), err: err}
	}()
	return res
}

// closed is a channel that is closed.
func closed() <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// guestScript is what TestGuestDriver runs in the VM; @BYTES@ is the bytes
// each way. Each step prints a GUEST- line the test checks; a failed step
// exits with its own status.
var guestScript = `
peer=` + guestPeerIP + `
dev=/sys/bus/pci/devices/$(basename $(readlink /sys/class/net/emunic0/device))
bar0=$(sed -n 1p $dev/resource | cut -d' ' -f1)
bar2=$(sed -n 3p $dev/resource | cut -d' ' -f1)
ping -c 3 -W 5 $peer >/tmp/ping || { cat /tmp/ping; exit 11; }
echo "GUEST-PING $(grep -c 'bytes from' /tmp/ping)"

# Out: random bytes, hashed here, to the peer's sink.
head -c @BYTES@ /dev/urandom >/tmp/out
echo "GUEST-SHA-OUT $(sha256sum </tmp/out | cut -d' ' -f1)"
nc $peer ` + strconv.Itoa(guestSink) + ` </tmp/out || exit 12
rm /tmp/out
# In: the peer connects once this listens.
echo "GUEST-SHA-IN $(nc -l -p ` + strconv.Itoa(guestSource) + ` | sha256sum | cut -d' ' -f1)"
ethtool -S emunic0 | sed 's/^ */GUEST-STAT /'

# Unload (the device is reset) and load again: the device comes back clean.
up() {
	n=0
	until [ -e /sys/class/net/emunic0 ]; do n=$((n+1)); [ $n -le 50 ] || exit 13; sleep 0.1; done
	ip addr add ` + guestIP + `/24 dev emunic0 && ip link set emunic0 up || exit 13
	ping -c 2 -W 5 $peer >/tmp/ping || { cat /tmp/ping; exit 14; }
	echo "GUEST-RELOAD-PING $1 $(grep -c 'bytes from' /tmp/ping)"
}
rmmod emunic || exit 13
insmod /lib/modules/emunic.ko || exit 13
up reload

# Garbage: with the driver gone, random words into the register window and
# rings of the device's vectors (the window's, and a ring's while the device
# is disabled). The device counts them and carries on; the next driver
# resets it and runs.
rmmod emunic || exit 15
i=0
while [ $i -lt 200 ]; do
	off=$(( ($(od -An -N2 -tu2 /dev/urandom) % 1024) * 4 ))
	devmem $((bar2 + off)) 32 $(od -An -N4 -tu4 /dev/urandom) || exit 15
	i=$((i+1))
done
devmem $((bar0 + 12)) 32 0 || exit 15
devmem $((bar0 + 12)) 32 3 || exit 15
# The ID registers are read-only: the device put them back.
echo "GUEST-GARBAGE-ID $(devmem $bar2 32)"
insmod /lib/modules/emunic.ko || exit 16
up garbage
`

// TestGuestDriver boots a QEMU guest (TCG) whose own kernel runs emunic.ko
// on the device: it brings emunic0 up, pings a Linux peer on the other side
// of the device's TAP, moves random data each way (256 MiB, 32 MiB with
// -short) checked by SHA-256 at both ends, unloads and reloads the driver
// (the device resets cleanly), and writes garbage into the register
// window, which the device counts while staying usable.
func TestGuestDriver(t *testing.T) {
	run := requireGuestVM(t)
	n := int64(256 << 20)
	if testing.Short() {
		n = 32 << 20
	}
	exe := buildEmunic(t)
	g := newGuestRig(t, exe)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	sink := guestSinkServer(t, g.ns, fmt.Sprintf("%s:%d", guestPeerIP, guestSink))
	source := guestSourceClient(ctx, g.ns, fmt.Sprintf("%s:%d", guestIP, guestSource), n, closed())

	console, err := bootGuest(ctx, t, run, g, strings.ReplaceAll(guestScript, "@BYTES@", strconv.FormatInt(n, 10)), "--mem", "1G")
	report := g.stop()
	if err != nil {
		t.Fatalf("the guest failed: %v\nconsole:\n%s", err, console)
	}
	t.Logf("device report:\n%s", report)
	if got := consoleValue(console, "GUEST-PING"); got != "3" {
		t.Errorf("ping: %q replies of 3", got)
	}
	out := <-sink
	if want := consoleValue(console, "GUEST-SHA-OUT"); out.err != nil || out.sha != want || out.n != n {
		t.Errorf("guest → peer: the peer got %d bytes with SHA-256 %s (%v); the guest sent %d with %s", out.n, out.sha, out.err, n, want)
	}
	in := <-source
	if got := consoleValue(console, "GUEST-SHA-IN"); in.err != nil || got != in.sha {
		t.Errorf("peer → guest: the guest got SHA-256 %s; the peer sent %s (%v)", got, in.sha, in.err)
	}
	for _, k := range []string{"GUEST-RELOAD-PING reload", "GUEST-RELOAD-PING garbage"} {
		if got := consoleValue(console, k); got != "2" {
			t.Errorf("%s: %q replies of 2", k, got)
		}
	}
	if got := consoleValue(console, "GUEST-GARBAGE-ID"); got != "0x0E311DE7" {
		t.Errorf("the ID register reads %s after the garbage, want 0x0E311DE7", got)
	}
	checkGuestTxCsum(t, console)
	checkGuestReport(t, report)
}

// checkGuestTxCsum: the guest's TCP checksums were the device's (TxCsum,
// negotiated as FeatTxCsum; the Linux peer drops a frame whose checksum is
// wrong, so the transfers' SHA-256 checks are the check on the wire), and
// the device refused none of its descriptors: ethtool -S after the
// transfers.
func checkGuestTxCsum(t *testing.T, console string) {
	t.Helper()
	stat := func(name string) int64 {
		v, err := strconv.ParseInt(consoleValue(console, "GUEST-STAT "+name+":"), 10, 64)
		if err != nil {
			t.Errorf("ethtool -S in the guest has no %s: %v", name, err)
			return -1
		}
		return v
	}
	off, sw := stat("drv_tx_csum_offload"), stat("drv_tx_csum_sw")
	t.Logf("guest transmit checksums: %d frames by the device, %d in software; the device checksummed %d",
		off, sw, stat("dev_tx_csum"))
	if off <= 0 {
		t.Errorf("the driver sent no frame with TxCsum (drv_tx_csum_offload %d)", off)
	}
	for _, name := range []string{"dev_tx_drop_bad_desc", "dev_tx_drop_csum"} {
		if v := stat(name); v != 0 {
			t.Errorf("%s = %d after the transfers, want 0", name, v)
		}
	}
	if dev := stat("dev_tx_csum"); dev < off {
		t.Errorf("the device checksummed %d frames, the driver flagged %d", dev, off)
	}
	if t.Failed() {
		var stats []string
		for _, l := range strings.Split(console, "\n") {
			if strings.HasPrefix(l, "GUEST-STAT ") {
				stats = append(stats, strings.TrimSpace(strings.TrimPrefix(l, "GUEST-STAT ")))
			}
		}
		t.Logf("the guest's ethtool -S: %s", strings.Join(stats, ", "))
	}
}

// checkGuestReport holds the device's report to what the guest did: one
// guest, its enables (one per load), the resets, and the garbage counted.
func checkGuestReport(t *testing.T, report string) {
	t.Helper()
	num := func(re string) int {
		m := regexp.MustCompile(re).FindStringSubmatch(report)
		if m == nil {
			t.Errorf("the device's report has no %q:\n%s", re, report)
			return -1
		}
		v, _ := strconv.Atoi(m[1])
		return v
	}
	if g := num(`device: (\d+) guests`); g != 1 {
		t.Errorf("%d guests, want 1", g)
	}
	if e := num(`enables (\d+)`); e != 3 {
		t.Errorf("%d enables, want 3 (one per load of the driver)", e)
	}
	if r := num(`(\d+) register accesses refused`); r == 0 {
		t.Errorf("no refused register accesses: the garbage was not counted")
	}
	bad := num(`bad_offset (\d+)`) + num(`read_only (\d+)`) + num(`bad_value (\d+)`) + num(`wrong_state (\d+)`)
	if bad == 0 {
		t.Errorf("the register counters counted no garbage")
	}
	if nd := num(`no_doorbell (\d+)`); nd == 0 {
		t.Errorf("the doorbell of a ring while the device was disabled was not counted")
	}
}

// TestGuestTraceReplay records a ring trace of a guest run ('emunic trace
// record --device -- --ivshmem ...': a ping, and 1 MiB to the peer's sink)
// and replays it on a fresh device, which must write what the recorded one
// wrote (docs/trace.md). The driver registers its counter
// area through the register block, which the trace's device record
// carries (nic.Config.CounterArea), so the replay publishes there too.
func TestGuestTraceReplay(t *testing.T) {
	run := requireGuestVM(t)
	exe := buildEmunic(t)
	tr := filepath.Join(t.TempDir(), "guest.trace")
	g := newGuestRigAs(t, exe, []string{"trace", "record", "--out", tr, "--device", "--"})
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sink := guestSinkServer(t, g.ns, fmt.Sprintf("%s:%d", guestPeerIP, guestSink))
	script := `ping -c 2 -W 5 ` + guestPeerIP + ` >/dev/null || exit 11
head -c 1048576 /dev/urandom >/tmp/out
echo "GUEST-SHA-OUT $(sha256sum </tmp/out | cut -d' ' -f1)"
nc ` + guestPeerIP + ` ` + strconv.Itoa(guestSink) + ` </tmp/out || exit 12`
	console, err := bootGuest(ctx, t, run, g, script)
	report := g.stop()
	if err != nil {
		t.Fatalf("the guest failed: %v\nconsole:\n%s", err, console)
	}
	if out := <-sink; out.err != nil || out.sha != consoleValue(console, "GUEST-SHA-OUT") {
		t.Fatalf("the peer got SHA-256 %s (%v), the guest sent %s", out.sha, out.err, consoleValue(console, "GUEST-SHA-OUT"))
	}
	if !strings.Contains(report, "trace: ") {
		t.Fatalf("no trace in the device's report:\n%s", report)
	}
	out, err := exec.Command(exe, "trace", "replay", tr).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "outputs identical") {
		t.Fatalf("emunic trace replay: %v\n%s", err, out)
	}
	t.Logf("%s", strings.TrimSpace(string(out)))
}

// TestGuestVanishes kills a guest's QEMU while it streams data through the
// device, then boots another guest on the same device process: the device
// counts the guest that went while enabled, resets, and serves the next
// one from fresh memory (its ping works).
func TestGuestVanishes(t *testing.T) {
	run := requireGuestVM(t)
	exe := buildEmunic(t)
	g := newGuestRig(t, exe)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// The peer counts what arrives; the connection never ends (the guest
	// vanishes without a FIN), so it is closed when the test ends.
	var l net.Listener
	if err := g.ns.do(func() (err error) {
		l, err = net.Listen("tcp4", fmt.Sprintf("%s:%d", guestPeerIP, guestSink))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int64
	go func() {
		c, err := l.Accept()
		if err != nil {
			return
		}
		t.Cleanup(func() { c.Close() })
		buf := make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			got.Add(int64(n))
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { l.Close() })
	// The guest streams until it is killed, mid-transfer: once the peer
	// has taken 4 MiB.
	pidfile := filepath.Join(t.TempDir(), "qemu.pid")
	cmd, console := guestCmd(ctx, run, g, `nc `+guestPeerIP+` `+strconv.Itoa(guestSink)+` </dev/zero`, "--pidfile", pidfile)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	for deadline := time.Now().Add(2 * time.Minute); got.Load() < 4<<20; {
		select {
		case err := <-exited:
			t.Fatalf("the guest ended before streaming (%v):\n%s", err, console.String())
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the guest did not stream 4 MiB in 2 minutes (%d bytes):\n%s", got.Load(), console.String())
		}
	}
	// QEMU is killed by its own process ID: run.sh's timeout puts it in
	// a process group of its own.
	pid, err := os.ReadFile(pidfile)
	if err != nil {
		t.Fatal(err)
	}
	qemu, err := strconv.Atoi(strings.TrimSpace(string(pid)))
	if err != nil {
		t.Fatalf("QEMU's pidfile: %q", pid)
	}
	if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	// The next guest, on the same device process.
	c2, err := bootGuest(ctx, t, run, g, `ping -c 2 -W 5 `+guestPeerIP+` >/tmp/ping; echo "GUEST-PING $(grep -c 'bytes from' /tmp/ping)"`)
	report := g.stop()
	if err != nil {
		t.Fatalf("the next guest failed: %v\n%s", err, c2)
	}
	if got := consoleValue(c2, "GUEST-PING"); got != "2" {
		t.Errorf("the next guest's ping: %q replies of 2", got)
	}
	if !regexp.MustCompile(`device: 2 guests \(2 gone`).MatchString(report) || !regexp.MustCompile(`host_gone [12] `).MatchString(report) {
		t.Errorf("the device's report does not show two guests, one gone while enabled:\n%s", report)
	}
}
