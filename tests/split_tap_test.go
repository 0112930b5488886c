package tests

import (
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestTAPDeviceProcess runs 'emunic device --tap NAME' as a process: the
// device owns the TAP, and a host in this process attaches to it over the
// setup socket with no port of its own. The kernel in a namespace pings the
// host and moves 8 MiB through its echo service; the device process exits
// 0 on SIGINT, reporting the one host.
func TestTAPDeviceProcess(t *testing.T) {
	ns, name, sock, dev := tapDeviceProcess(t, "emud")
	kernel := netip.MustParsePrefix("10.79.0.1/24")
	emu := netip.MustParsePrefix("10.79.0.2/24")
	host, err := board.NewHost(board.HostConfig{MAC: macOf(emu), Addr: emu, Split: &board.SplitConfig{Socket: sock}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	dev.waitLog("device started", 1, 10*time.Second)
	ns.moveTAP(t, name, kernel) // the device created it at CONFIG
	echo := services.NewEcho(t.Logf)
	l, err := host.Listen(services.EchoPort)
	if err != nil {
		t.Fatal(err)
	}
	go echo.Serve(l)
	defer echo.Close()
	if err := ns.ping(emu.Addr(), 3); err != nil {
		t.Fatal(err)
	}
	c, err := ns.dial(netip.AddrPortFrom(emu.Addr(), services.EchoPort))
	if err != nil {
		t.Fatalf("kernel could not connect to the echo service: %v", err)
	}
	echoExchange(t, c, 8<<20)
	c.Close()
	if n := statOf(t, host.Host, rings.StatRxFrames); n == 0 {
		t.Error("the device's counter area shows no frames received")
	}
	checkTxCsum(t, host.Host) // FeatTxCsum negotiated through the registers
	host.Close()
	dev.waitLog("host gone", 1, 10*time.Second)
	if out := dev.interrupt(); !strings.Contains(out, "device: 1 hosts (1 started, 1 gone), 0 bad messages") {
		t.Errorf("device report: %q", out)
	}
}

// tapDeviceProcess starts 'emunic device --socket SOCK --tap NAME' (NAME
// from prefix) and waits until it listens, with the namespace the TAP is
// for. The device creates the TAP when a host attaches (at CONFIG), so the
// caller moves it into the namespace (ns.moveTAP) after that.
func tapDeviceProcess(t testing.TB, prefix string) (ns *netns, name, sock string, dev *serveProc) {
	t.Helper()
	testutil.RequireTAP(t)
	exe := buildEmunic(t)
	ns = newNetns(t)
	name = uniqueName(prefix, 10)
	t.Cleanup(func() { exec.Command("ip", "-n", ns.name, "link", "del", name).Run() })
	sock = filepath.Join(t.TempDir(), "nic.sock")
	dev = startCommand(t, exe, "device", "--socket", sock, "--tap", name)
	dev.waitLog("device listening", 1, 10*time.Second)
	return ns, name, sock, dev
}

// macOf is the MAC emunic serve gives an address: 02:00 and the address.
func macOf(p netip.Prefix) [6]byte {
	a := p.Addr().As4()
	return [6]byte{2, 0, a[0], a[1], a[2], a[3]}
}
