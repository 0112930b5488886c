//go:build linux

package tests

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/gopacket/pcapgo"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/services"
)

// TestVLANTrunkVM is the VLAN trunk against a Linux VLAN stack in a kernel
// that has one: the siw VM (scripts/siw-vm; its kernel loads 8021q, and
// run.sh --vlan makes eth0.ID interfaces), for hosts whose own kernel has
// no 8021q, where TestTAPVLANTrunk skips. emunic's TAP and the VM's are on
// one Linux bridge, so the VM's NIC is the far end of the trunk; two
// emulated hosts, on VLANs 10 and 20, share emunic's TAP through a
// port.Hub. The VM, on eth0.10 and eth0.20:
//   - pings each host, and echoes 1 MiB through its echo service with
//     busybox nc, comparing what came back (host 20's echo runs on
//     delegated connections);
//   - takes 1 MiB from each host on a TCP connection the host opens (host
//     20's delegated), and prints its SHA-256 for the test to compare;
//   - sends untagged frames, host 10's address and then host 10's MAC on
//     VLAN 20, and frames with VLAN ID 0, two 802.1Q tags and an 802.1ad
//     tag: none is answered.
//
// The VM's NIC is recorded (QEMU's filter-dump), and each NIC's counters
// must account for every frame of it: a frame the VM sent tagged with the
// other VLAN, or untagged, is one rx_drop_vlan, as is each frame the other
// emulated host sent (the hub repeats it); a bad tag is one
// rx_drop_bad_vlan; a frame on a host's VLAN to another unicast MAC is one
// rx_drop_not_for_us; and every frame a host sent reached the VM tagged
// with its VLAN. VLAN ID 4095 cannot be sent this way (Linux refuses the
// interface: the test checks it does); the device's in-process tests
// cover it.
func TestVLANTrunkVM(t *testing.T) {
	run := requireSiwVM(t)
	requireVMVLAN(t)
	const mtu, blob = 1500, 1 << 20
	a := &vlanHost{vid: 10, kernel: netip.MustParsePrefix("10.74.10.1/24"), emu: netip.MustParsePrefix("10.74.10.2/24")}
	b := &vlanHost{vid: 20, kernel: netip.MustParsePrefix("10.74.20.1/24"), emu: netip.MustParsePrefix("10.74.20.2/24"), offload: true}
	hosts := []*vlanHost{a, b}
	for _, h := range hosts {
		h.kernelIf = fmt.Sprintf("eth0.%d", h.vid)
	}

	// The bridge, and emunic's TAP on it: IPv6 off on both before they
	// come up, and no multicast snooping (whose bridge joins 224.0.0.106
	// with an IGMP report on every port), so that nothing but the VM and
	// the hosts puts a frame on the trunk: the counters must account for
	// each one.
	br, emuTap, vmTap := uniqueName("vlbr", 10), uniqueName("vlte", 10), uniqueName("vltv", 10)
	testutil.IP(t, "link", "add", br, "type", "bridge", "mcast_snooping", "0")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })
	noIPv6(br)
	testutil.IP(t, "link", "set", br, "up")
	testutil.IP(t, "tuntap", "add", "dev", emuTap, "mode", "tap")
	t.Cleanup(func() { exec.Command("ip", "link", "del", emuTap).Run() })
	noIPv6(emuTap)
	testutil.IP(t, "link", "set", emuTap, "master", br)
	tap, err := port.OpenTAP(emuTap)
	if err != nil {
		t.Fatal(err)
	}
	if err := tap.SetMTU(mtu); err != nil {
		tap.Close()
		t.Fatal(err)
	}
	if err := tap.SetUp(true); err != nil {
		tap.Close()
		t.Fatal(err)
	}
	members := serveVLANHosts(t, tap, mtu, hosts)

	script := vlanVMScript(a, b, blob)
	dir := t.TempDir()
	pcap := filepath.Join(dir, "vm.pcap")
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	t.Cleanup(func() { exec.Command("ip", "link", "del", vmTap).Run() })
	// run.sh gives the VM the MAC 52:54:00 and its address's last three bytes.
	vmAddr := netip.MustParsePrefix("10.74.1.1/24")
	va := vmAddr.Addr().As4()
	vmMAC := [6]byte{0x52, 0x54, 0, va[1], va[2], va[3]}
	args := []string{"--tap", vmTap, "--rm-tap", "--bridge", br, "--ip", vmAddr.String(), "--pcap", pcap, "--timeout", "200"}
	for _, h := range hosts {
		args = append(args, "--vlan", fmt.Sprintf("%d=%s", h.vid, h.kernel))
	}
	con, vmErr := startSiwVM(t, ctx, run, append(args, "--", script), "VLAN trunk")

	// The hosts' transfers to the VM, each once the VM's nc listens.
	sums := map[string]string{}
	for _, h := range hosts {
		name := fmt.Sprintf("recv%d", h.vid)
		if !con.wait("SIWT-LISTEN "+name, 3*time.Minute) {
			t.Fatalf("%s: the VM's nc never listened", name)
		}
		sum, err := sendToVM(ctx, h, netip.AddrPortFrom(h.kernel.Addr(), vlanVMPort), blob)
		if err != nil {
			t.Errorf("VLAN %d host: sending %d bytes to the VM: %v", h.vid, blob, err)
		}
		sums[name] = fmt.Sprintf("%d %s", blob, sum)
	}
	if !con.wait("SIWVM-RESULT", 3*time.Minute) {
		t.Fatalf("the VM did not finish its script")
	}
	if err := <-vmErr; err != nil {
		t.Errorf("the VM: %v", err)
	}

	// What the VM saw, step by step.
	for _, h := range hosts {
		for _, step := range []string{"ping", "echo", "recv"} {
			name := fmt.Sprintf("%s%d", step, h.vid)
			if rc := con.rc(name); rc != 0 {
				t.Errorf("VLAN %d: %s in the VM: rc=%d:\n%s", h.vid, step, rc, strings.Join(con.section(name), "\n"))
			}
		}
		name := fmt.Sprintf("recv%d", h.vid)
		if got := con.value("SIWT-SUM " + name + " "); got != sums[name] {
			t.Errorf("VLAN %d host to the VM: the VM received %q (bytes, SHA-256), the host sent %q", h.vid, got, sums[name])
		}
	}
	for _, step := range []string{"untagged", "cross-arp", "cross-mac", "vid0", "double", "8021ad"} {
		if rc := con.rc(step); rc != 1 {
			t.Errorf("%s: the VM's ping was answered (rc 0), its setup failed (200), or it did not run (-1): rc=%d:\n%s", step, rc, strings.Join(con.section(step), "\n"))
		}
	}
	if rc := con.rc("vid4095"); rc == 0 || rc == -1 {
		t.Errorf("Linux made a VLAN interface with ID 4095, or the step did not run (rc=%d): the test would send it", rc)
	}
	// Host 20's TCP is the engine's: it sent the echo and the transfer,
	// and placed the echo's bytes but those that came before the accepted
	// connection was handed to it (netstack holds those).
	if e := engineOf(t, b.host.Host); e.RxBytes < blob/2 || e.TxBytes-e.TxRetransByte < 2*blob {
		t.Errorf("VLAN 20 host: the engine placed %d bytes and sent %d new, want most of the echo's %d in and the echo's and the transfer's %d out",
			e.RxBytes, e.TxBytes-e.TxRetransByte, blob, 2*blob)
	}

	// Every frame of the VM's NIC, accounted for by both NICs' counters.
	seen := readVMFrames(t, pcap, vmMAC, hosts)
	if seen.notFor[1] == 0 {
		t.Errorf("the VM sent no frame on VLAN 20 to host 10's MAC")
	}
	if seen.strangers > 0 {
		t.Errorf("the VM's NIC saw %d frames from neither the VM nor an emulated host: the trunk is not the test's alone", seen.strangers)
	}
	for _, kind := range []string{"untagged", "vid0", "double", "8021ad"} {
		if seen.vm[kind] == 0 {
			t.Errorf("the VM sent no %s frame: its capture holds %v", kind, seen.vm)
		}
	}
	var mismatch string
	defer func() {
		if t.Failed() && mismatch != "" {
			t.Log(mismatch)
		}
	}()
	testutil.WaitFor(t, "both NICs' counters to account for every frame on the trunk", func() bool {
		mismatch = vlanCountMismatch(t, hosts, members, seen)
		if mismatch != "" {
			mismatch += "\nemunic's TAP: " + tapStats(emuTap) + "; the VM's: " + tapStats(vmTap)
		}
		return mismatch == ""
	})
	for i, h := range hosts {
		t.Logf("VLAN %d host: %d frames sent, all seen by the VM tagged %d; %d dropped as the other VLAN's, %d as bad tags; hub %+v",
			h.vid, statOf(t, h.host.Host, rings.StatTxFrames), h.vid, statOf(t, h.host.Host, rings.StatRxDropVLAN),
			statOf(t, h.host.Host, rings.StatRxDropBadVLAN), members[i].Stats())
	}
	t.Logf("the VM sent %v", seen.vm)
}

// vlanVMPort is where the VM's nc listens for a host's transfer.
const vlanVMPort = 5001

// requireVMVLAN skips the test when the VM was built without 8021q (by a
// build.sh older than the VLAN test: running it again rebuilds).
func requireVMVLAN(t *testing.T) {
	t.Helper()
	out := os.Getenv("SIWVM_OUT")
	if out == "" {
		out = filepath.Join(siwVMDir(), "out")
	}
	info, err := os.ReadFile(filepath.Join(out, "build.info"))
	if err != nil {
		t.Skipf("skipped: %v", err)
	}
	if !strings.Contains(string(info), " 8021q.ko") {
		t.Skipf("skipped: the siw VM in %s has no 8021q module: run scripts/siw-vm/build.sh again", out)
	}
}

// vlanVMScript is the VM's part (busybox sh): each step between
// SIWT-START and SIWT-END NAME rc=STATUS lines.
func vlanVMScript(a, b *vlanHost, blob int) string {
	var s strings.Builder
	step := func(name, body string) {
		fmt.Fprintf(&s, "echo SIWT-START %s\n%s\necho SIWT-END %s rc=$?\n", name, body, name)
	}
	fmt.Fprintf(&s, "head -c %d /dev/urandom >/tmp/blob\n", blob)
	s.WriteString("printf '#!/bin/sh\\ncat >/tmp/recv\\n' >/tmp/recv.sh && chmod +x /tmp/recv.sh\n")
	for _, h := range []*vlanHost{a, b} {
		ip := h.emu.Addr()
		step(fmt.Sprintf("ping%d", h.vid), fmt.Sprintf("ping -c 3 -W 5 %s 2>&1", ip))
		// busybox nc half-closes at the end of its input and reads the
		// echo to the server's close.
		step(fmt.Sprintf("echo%d", h.vid), fmt.Sprintf("timeout 120 nc %s %d </tmp/blob >/tmp/back 2>&1 && cmp /tmp/blob /tmp/back", ip, services.EchoPort))
		name := fmt.Sprintf("recv%d", h.vid)
		step(name, fmt.Sprintf(`rm -f /tmp/recv
timeout 120 nc -l -p %[1]d -e /tmp/recv.sh </dev/null &
until ss -ltn | grep -q ':%[1]d '; do sleep 0.05; done
echo SIWT-LISTEN %[2]s
wait $! && echo "SIWT-SUM %[2]s $(wc -c </tmp/recv) $(sha256sum </tmp/recv | cut -d' ' -f1)"`, vlanVMPort, name))
	}
	// Nothing below may be answered: busybox ping ends with status 1 when
	// no reply came; a setup that failed ends the step with 200.
	stray := func(name, setup, dst string) {
		step(name, fmt.Sprintf("if %s; then ping -c 2 -W 2 %s 2>&1; else (exit 200); fi", setup, dst))
	}
	stray("untagged", "true", "10.74.1.2")
	// Host 10's address on VLAN 20: ARP for it there goes unanswered.
	stray("cross-arp", fmt.Sprintf("ip route add %s/32 dev %s", a.emu.Addr(), b.kernelIf), a.emu.Addr().String())
	fmt.Fprintf(&s, "ip route del %s/32 dev %s\n", a.emu.Addr(), b.kernelIf)
	// Host 10's MAC on VLAN 20: unicast frames host 10 must not take.
	ab := a.emu.Addr().As4()
	stray("cross-mac", fmt.Sprintf("ip route add 10.74.99.2/32 dev %s && ip neigh add 10.74.99.2 lladdr %s dev %s nud permanent",
		b.kernelIf, net.HardwareAddr{2, 0, ab[0], ab[1], ab[2], ab[3]}, b.kernelIf), "10.74.99.2")
	vlanIf := func(name, link, typ, addr string) string {
		return fmt.Sprintf("ip link add link %s name %s type vlan %s && ip addr add %s dev %s && ip link set %s up",
			link, name, typ, addr, name, name)
	}
	stray("vid0", vlanIf("eth0.0", "eth0", "id 0", "10.74.100.1/24"), "10.74.100.2")
	stray("double", vlanIf("eth0.10.30", a.kernelIf, "id 30", "10.74.30.1/24"), "10.74.30.2")
	stray("8021ad", vlanIf("eth0.ad", "eth0", "proto 802.1ad id 10", "10.74.40.1/24"), "10.74.40.2")
	// Linux refuses VLAN ID 4095 (reserved): rc 0 would mean it did not.
	step("vid4095", "ip link add link eth0 name eth0.4095 type vlan id 4095 2>&1")
	return s.String()
}

// rc is the status of the script's step name, -1 when it did not end.
func (c *siwConsole) rc(name string) int {
	v := c.value("SIWT-END " + name + " rc=")
	var rc int
	if _, err := fmt.Sscan(v, &rc); err != nil {
		return -1
	}
	return rc
}

// value is the rest of the first console line starting with prefix.
func (c *siwConsole) value(prefix string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, l := range c.lines {
		if v, ok := strings.CutPrefix(l, prefix); ok {
			return v
		}
	}
	return ""
}

// sendToVM opens a connection from h to dst (delegated for an offload
// host), sends n pseudo-random bytes and closes, returning their SHA-256.
func sendToVM(ctx context.Context, h *vlanHost, dst netip.AddrPort, n int) (string, error) {
	var c net.Conn
	var err error
	if h.offload {
		c, err = h.host.DialOffload(ctx, dst)
	} else {
		c, err = h.host.Dial(ctx, dst)
	}
	if err != nil {
		return "", err
	}
	c.SetDeadline(time.Now().Add(2 * time.Minute))
	sum := sha256.New()
	src := rand.NewChaCha8([32]byte{byte(h.vid)})
	_, err = io.Copy(io.MultiWriter(c, sum), io.LimitReader(src, int64(n)))
	if cerr := c.Close(); err == nil {
		err = cerr
	}
	return hex.EncodeToString(sum.Sum(nil)), err
}

// vmFrames is the VM NIC's capture, sorted: the VM's frames by their tags
// (kind: untagged, vid0, vid4095, double, 8021ad, runt, or vlanN for a
// good 802.1Q tag), and each emulated host's as the VM received them.
type vmFrames struct {
	total     int            // frames the VM sent
	vm        map[string]int // by kind
	host      []map[string]int
	strangers int // frames from any other MAC
	// notFor[i]: the VM's frames on host i's VLAN to a unicast MAC not
	// host i's (the cross-mac step's).
	notFor []int
}

// vlanKind sorts a frame by its tag, reading the bytes itself (not with the
// device's parser, whose verdicts it checks).
func vlanKind(f []byte) string {
	if len(f) < 14 {
		return "runt"
	}
	switch binary.BigEndian.Uint16(f[12:]) {
	case 0x8100:
	case 0x88a8:
		return "8021ad"
	default:
		return "untagged"
	}
	if len(f) < 18 {
		return "runt"
	}
	switch vid, inner := binary.BigEndian.Uint16(f[14:])&0xfff, binary.BigEndian.Uint16(f[16:]); {
	case inner == 0x8100 || inner == 0x88a8:
		return "double"
	case vid == 0:
		return "vid0"
	case vid == 0xfff:
		return "vid4095"
	default:
		return fmt.Sprintf("vlan%d", vid)
	}
}

func readVMFrames(t *testing.T, pcap string, vmMAC [6]byte, hosts []*vlanHost) vmFrames {
	t.Helper()
	f, err := os.Open(pcap)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := pcapgo.NewReader(f)
	if err != nil {
		t.Fatalf("the VM's capture: %v", err)
	}
	macs := make([][6]byte, len(hosts))
	seen := vmFrames{vm: map[string]int{}, host: make([]map[string]int, len(hosts)), notFor: make([]int, len(hosts))}
	for i, h := range hosts {
		b := h.emu.Addr().As4()
		macs[i] = [6]byte{2, 0, b[0], b[1], b[2], b[3]}
		seen.host[i] = map[string]int{}
	}
next:
	for {
		data, _, err := r.ReadPacketData()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("the VM's capture: %v", err)
		}
		if len(data) < 12 {
			seen.strangers++
			continue
		}
		kind, src := vlanKind(data), [6]byte(data[6:12])
		for i, m := range macs {
			if src == m {
				seen.host[i][kind]++
				continue next
			}
		}
		if src != vmMAC {
			seen.strangers++
			continue
		}
		seen.total++
		seen.vm[kind]++
		for i, h := range hosts {
			if kind == fmt.Sprintf("vlan%d", h.vid) && data[0]&1 == 0 && [6]byte(data[:6]) != macs[i] {
				seen.notFor[i]++
			}
		}
	}
	return seen
}

// vlanCountMismatch says how the NICs' counters disagree with the
// capture, or "" when they agree.
func vlanCountMismatch(t *testing.T, hosts []*vlanHost, members []*port.HubPort, seen vmFrames) string {
	var bad []string
	tx := make([]uint64, len(hosts))
	for i, h := range hosts {
		tx[i] = statOf(t, h.host.Host, rings.StatTxFrames)
	}
	for i, h := range hosts {
		c := counters(t, h.host.Host).Stats
		var others uint64 // what the hub repeated from the other hosts
		for j := range hosts {
			if j != i {
				others += tx[j]
			}
		}
		own := fmt.Sprintf("vlan%d", h.vid)
		var wantVLAN, wantBad uint64
		for kind, n := range seen.vm {
			switch {
			case kind == own:
			case kind == "untagged" || strings.HasPrefix(kind, "vlan"):
				wantVLAN += uint64(n)
			default:
				wantBad += uint64(n)
			}
		}
		wantVLAN += others
		got := map[string][2]uint64{
			"rx_frames":                          {c[rings.StatRxFrames], uint64(seen.total) + others},
			"rx_drop_vlan":                       {c[rings.StatRxDropVLAN], wantVLAN},
			"rx_drop_bad_vlan":                   {c[rings.StatRxDropBadVLAN], wantBad},
			"rx_drop_not_for_us":                 {c[rings.StatRxDropNotForUs], uint64(seen.notFor[i])},
			"tx_frames at the VM, tagged " + own: {uint64(seen.host[i][own]), tx[i]},
		}
		for name, v := range got {
			if v[0] != v[1] {
				bad = append(bad, fmt.Sprintf("VLAN %d host: %s %d, want %d", h.vid, name, v[0], v[1]))
			}
		}
		if n := len(seen.host[i]); n > 1 || (n == 1 && seen.host[i][own] == 0) {
			bad = append(bad, fmt.Sprintf("VLAN %d host: the VM received its frames tagged %v", h.vid, seen.host[i]))
		}
		if st := members[i].Stats(); st.RxDropQueueFull != 0 {
			bad = append(bad, fmt.Sprintf("VLAN %d host: the hub dropped %d frames for it (FIFO full)", h.vid, st.RxDropQueueFull))
		}
	}
	if len(bad) == 0 {
		return ""
	}
	// Where a frame went missing: the kernel's queue to emunic's TAP, the
	// hub, or the device.
	for i, h := range hosts {
		bad = append(bad, fmt.Sprintf("VLAN %d host: hub member %+v, %d pending", h.vid, members[i].Stats(), members[i].Pending()))
	}
	return "counters against the VM's capture:\n" + strings.Join(bad, "\n")
}

// tapStats is the kernel's frame counts of a device, or why not.
func tapStats(dev string) string {
	var out []string
	for _, name := range []string{"rx_packets", "tx_packets", "rx_dropped", "tx_dropped"} {
		b, err := os.ReadFile("/sys/class/net/" + dev + "/statistics/" + name)
		if err != nil {
			return err.Error()
		}
		out = append(out, name+"="+strings.TrimSpace(string(b)))
	}
	return strings.Join(out, " ")
}
