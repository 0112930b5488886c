package tests

import (
	"bufio"
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/emunic/emunic/board"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
	"github.com/emunic/emunic/tcpstack/verbs/rdmatool"
)

// The tests in this file put Linux's own iWARP stack on the other end: the
// siw VM that scripts/siw-vm builds (QEMU, software emulation, Debian's 6.12
// kernel with siw and librdmacm's rping, rdma_client/rdma_server and
// ucmatose), on one Linux bridge with the emulated hosts' TAPs. The VM
// boots once per group of sessions (one set of siw module parameters) and
// runs a script: its clients against emunic servers that already listen,
// then its servers, each announced on the console, for emunic clients.
// librdmacm's tools exit 0 even after a failure, so every session is judged
// by its output (the pings and messages counted on both sides) and by
// tshark's decoding of emunic's capture.

// siwVMDir is the directory of the siw VM's scripts: $SIWVM_DIR (another
// checkout's scripts/siw-vm, say), else this repository's.
func siwVMDir() string {
	if d := os.Getenv("SIWVM_DIR"); d != "" {
		return d
	}
	return filepath.Join("..", "scripts", "siw-vm")
}

// requireSiwVM skips the test, saying why, when the VM cannot run here.
func requireSiwVM(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("skipped in -short mode: boots QEMU VMs (about a minute)")
	}
	testutil.RequireTAP(t)
	run, err := filepath.Abs(filepath.Join(siwVMDir(), "run.sh"))
	if err == nil {
		_, err = os.Stat(run)
	}
	if err != nil {
		t.Skipf("skipped: no siw VM scripts (%v); SIWVM_DIR names their directory", err)
	}
	// run.sh knows where build.sh puts the VM, and whether QEMU is there.
	if out, err := exec.Command(run, "--check").CombinedOutput(); err != nil {
		t.Skipf("skipped: %s (%v)", strings.TrimSpace(string(out)), err)
	}
	return run
}

// siwCase is one session: a librdmacm tool in the VM against emunic.
type siwCase struct {
	name     string
	vmServer bool   // the VM is the server: emunic connects once it listens
	vmCmd    string // the tool's command line in the VM (%s: emunic's address)
	vmPort   int    // the VM server's port (waited for with ss)
	// emunic's side: 'emunic rdma ARGS...' (the binary), or a function
	// run in-process on a host on the session's TAP (server invalid: the
	// emunic side listens, and calls ready once it does).
	emuArgs []string
	inproc  func(ctx context.Context, v *verbs.Provider, server netip.Addr, s *emuSession, ready func()) error
	// emuFails: emunic's side must fail, saying this.
	emuFails string
	// What proves the session: lines on the VM's console, and on
	// emunic's stdout.
	vmWant  map[string]int
	emuWant string
	// tshark: CRC expected in use; the RTR Write of peer-to-peer mode.
	crc  bool
	rtr  bool
	term bool // a Terminate on the wire
}

// siwGroup is one VM boot: siw module parameters and the sessions.
type siwGroup struct {
	name   string
	params []string
	cases  []siwCase
	// ipv6: the VM and emunic's hosts get IPv6 addresses too, and every
	// session runs over IPv6 (the VM's tools name emunic's IPv6 address,
	// emunic's clients the VM's).
	ipv6 bool
}

func rpingCases(crc, p2p bool, emuOpts ...string) []siwCase {
	return []siwCase{
		{name: "rping-c", vmCmd: "rping -c -a %s -v -C 5 -S 64",
			emuArgs: append([]string{"ping", "--listen", "--count", "5", "--size", "64"}, emuOpts...),
			vmWant:  map[string]int{"ping data: rdma-ping-": 5}, emuWant: "5 of 5 pings verified", crc: crc, rtr: p2p},
		{name: "rping-s", vmServer: true, vmCmd: "rping -s -a 0.0.0.0 -v -C 5 -S 64", vmPort: rdmatool.PingPort,
			emuArgs: append([]string{"ping", "--count", "5", "--size", "64"}, emuOpts...),
			vmWant:  map[string]int{"server ping data: rdma-ping-": 5}, emuWant: "5 of 5 pings verified", crc: crc, rtr: p2p},
	}
}

func echoCases(crc, p2p bool, emuOpts ...string) []siwCase {
	return []siwCase{
		{name: "rdma_client", vmCmd: "rdma_client -s %s",
			emuArgs: append([]string{"echo", "--listen", "--count", "1"}, emuOpts...),
			vmWant:  map[string]int{"rdma_client: end 0": 1}, emuWant: "1 of 1 exchanges verified", crc: crc, rtr: p2p},
		{name: "rdma_server", vmServer: true, vmCmd: "rdma_server", vmPort: rdmatool.EchoPort,
			emuArgs: append([]string{"echo", "--count", "1"}, emuOpts...),
			vmWant:  map[string]int{"rdma_server: end 0": 1}, emuWant: "1 of 1 exchanges verified", crc: crc, rtr: p2p},
	}
}

func cmatoseCase(server bool, p2p bool) siwCase {
	c := siwCase{name: "ucmatose-c", vmCmd: "ucmatose -s %s -C 2 -S 64", inproc: cmatose,
		vmWant: map[string]int{"data transfers complete": 1, "return status 0": 1}, crc: true, rtr: p2p}
	if server {
		c.name, c.vmServer, c.vmCmd, c.vmPort = "ucmatose-s", true, "ucmatose -C 2 -S 64", rdmatool.CmatosePort
	}
	return c
}

// TestSiwInterop: siw's rping, rdma_client/rdma_server and ucmatose against
// emunic's 'rdma ping', 'rdma echo' and rdmatool's ucmatose, both ways, with
// siw's defaults (MPA revision 2, no CRC asked: emunic asks for it in the
// ping sessions, and not in the echo sessions, where neither side wants it
// and every CRC field is zero), with siw requiring CRC, and with siw's
// peer-to-peer mode (its RTR Write; emunic's clients ask for it too).
func TestSiwInterop(t *testing.T) {
	run := requireSiwVM(t)
	exe := buildEmunic(t)
	groups := []siwGroup{
		{name: "defaults", cases: append(append(rpingCases(true, false), echoCases(false, false, "--no-crc")...),
			cmatoseCase(true, false),
			// siw's client leaves after 2 of the 4 pings emunic waits for.
			siwCase{name: "rping-c-leaves", vmCmd: "rping -c -a %s -v -C 2 -S 64",
				emuArgs: []string{"ping", "--listen", "--count", "4", "--size", "64"},
				vmWant:  map[string]int{"ping data: rdma-ping-": 2}, emuWant: "2 of 4 pings verified",
				emuFails: "the peer disconnected", crc: true},
			// siw answers a Write to an STag it never gave with a
			// Terminate; the VM's rping server is only the target.
			siwCase{name: "terminate", vmServer: true, vmCmd: "timeout 30 rping -s -a 0.0.0.0 -v -C 1 -S 64", vmPort: rdmatool.PingPort,
				inproc: badWrite, emuFails: "Terminate", crc: true, term: true})},
		{name: "crc-required", params: []string{"mpa_crc_required=1"},
			// emunic asks for no CRC: siw's request asks, so CRC is used
			// when siw connects; siw's reply does not force it (siw
			// echoes the request's C bit), so emunic's connections to
			// siw go without.
			cases: []siwCase{rpingCases(true, false, "--no-crc")[0], func() siwCase {
				c := rpingCases(false, false, "--no-crc")[1]
				return c
			}()}},
		{name: "peer-to-peer", params: []string{"peer_to_peer=1"},
			cases: append(append(rpingCases(true, true, "--p2p"), echoCases(true, true, "--p2p")...),
				cmatoseCase(false, true), cmatoseCase(true, true))},
	}
	for i, g := range groups {
		t.Run(g.name, func(t *testing.T) { runSiwGroup(t, run, exe, g, i) })
	}
}

// TestSiwInteropIPv6: the same tools against emunic over IPv6, both ways:
// siw's rping and rdma_client against emunic's servers at its IPv6
// address, and emunic's 'rdma ping' and rdmatool's ucmatose against siw's
// servers listening on the IPv6 wildcard (rping -a ::, ucmatose -b ::).
// (librdmacm's rdma_server takes no address and listens on IPv4's
// wildcard only, so 'rdma echo' meets siw as a server over IPv4 alone; a
// ucmatose client waits for the server to send first, which MPA allows
// only in peer-to-peer mode, as TestSiwInterop's groups show.)
// The hosts are dual-stack (the VM's and emunic's IPv4 addresses stay),
// and tshark must find each capture as clean as over IPv4.
func TestSiwInteropIPv6(t *testing.T) {
	run := requireSiwVM(t)
	exe := buildEmunic(t)
	cases := append(rpingCases(true, false), echoCases(false, false, "--no-crc")[0])
	cases[1].vmCmd = "rping -s -a :: -v -C 5 -S 64"
	cases = append(cases, cmatoseCase(true, false))
	cases[len(cases)-1].vmCmd = "ucmatose -b :: -C 2 -S 64"
	runSiwGroup(t, run, exe, siwGroup{name: "ipv6", ipv6: true, cases: cases}, 3)
}

// siwConsole is the VM's console output, as lines, watched as it comes.
type siwConsole struct {
	mu    sync.Mutex
	lines []string
	more  chan struct{} // closed and replaced on every line
	done  chan struct{} // closed when the VM ended
}

func (c *siwConsole) add(l string) {
	c.mu.Lock()
	c.lines = append(c.lines, l)
	close(c.more)
	c.more = make(chan struct{})
	c.mu.Unlock()
}

// wait returns when a line starting with prefix came, false when the VM
// ended or d passed first.
func (c *siwConsole) wait(prefix string, d time.Duration) bool {
	deadline := time.After(d)
	for {
		c.mu.Lock()
		for _, l := range c.lines {
			if strings.HasPrefix(l, prefix) {
				c.mu.Unlock()
				return true
			}
		}
		more := c.more
		c.mu.Unlock()
		select {
		case <-more:
		case <-c.done:
			return false
		case <-deadline:
			return false
		}
	}
}

// section is the console lines between SIWT-START name and SIWT-END name.
func (c *siwConsole) section(name string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	in := false
	for _, l := range c.lines {
		switch {
		case l == "SIWT-START "+name:
			in = true
		case strings.HasPrefix(l, "SIWT-END "+name+" "):
			in = false
		case in:
			out = append(out, l)
		}
	}
	return out
}

// emuSession is emunic's side of one session.
type emuSession struct {
	c     siwCase
	tap   string
	addr  netip.Prefix
	addr6 netip.Prefix // with siwGroup.ipv6: the address the session runs over
	pcap  string
	proc  *serveProc    // the binary
	done  chan error    // ucmatose in-process, or the binary's exit
	ready chan struct{} // the in-process ucmatose server listens
	out   testutil.SyncBuffer
}

func runSiwGroup(t *testing.T, run, exe string, g siwGroup, gi int) {
	subnet := fmt.Sprintf("10.78.%d.", 10+gi)
	vmIP := subnet + "2"
	subnet6 := fmt.Sprintf("fd00:78:%d::", 10+gi)
	br := uniqueName("siwbr", 10)
	// No multicast snooping: neighbour discovery's solicitations go to
	// every port whatever MLD said (emunic's hosts send no MLD reports).
	testutil.IP(t, "link", "add", br, "type", "bridge", "mcast_snooping", "0")
	t.Cleanup(func() { exec.Command("ip", "link", "del", br).Run() })
	noIPv6(br)
	testutil.IP(t, "link", "set", br, "up")
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	sessions := make([]*emuSession, len(g.cases))
	var script strings.Builder
	for i, c := range g.cases {
		s := &emuSession{c: c, tap: uniqueName("siwe", 10), addr: netip.MustParsePrefix(fmt.Sprintf("%s%d/24", subnet, 10+i)),
			pcap: filepath.Join(dir, c.name+".pcap"), done: make(chan error, 1), ready: make(chan struct{})}
		if g.ipv6 {
			s.addr6 = netip.MustParsePrefix(fmt.Sprintf("%s%d/64", subnet6, 10+i))
		}
		sessions[i] = s
		testutil.IP(t, "tuntap", "add", "dev", s.tap, "mode", "tap")
		t.Cleanup(func() { exec.Command("ip", "link", "del", s.tap).Run() })
		noIPv6(s.tap)
		testutil.IP(t, "link", "set", s.tap, "master", br)
		testutil.IP(t, "link", "set", s.tap, "up")
		cmd := c.vmCmd
		if strings.Contains(cmd, "%s") {
			cmd = fmt.Sprintf(cmd, s.peerAddr())
		}
		fmt.Fprintf(&script, "echo SIWT-START %s\n", c.name)
		if c.vmServer {
			// Announce the server once its port listens (siw listens
			// on a kernel TCP socket), then wait for it to finish.
			fmt.Fprintf(&script, "%s 2>&1 &\nwhile ! ss -ltn | grep -q ':%d '; do sleep 0.05; done\necho SIWT-LISTEN %s\nwait $!\n", cmd, c.vmPort, c.name)
		} else {
			fmt.Fprintf(&script, "%s 2>&1\n", cmd)
		}
		fmt.Fprintf(&script, "echo SIWT-END %s rc=$?\n", c.name)
		if !c.vmServer {
			// emunic's server listens before the VM boots.
			startSiwEmu(t, ctx, exe, s, netip.Addr{})
		}
	}

	vmTap := uniqueName("siwv", 10)
	// run.sh removes it (--rm-tap) unless it is killed.
	t.Cleanup(func() { exec.Command("ip", "link", "del", vmTap).Run() })
	args := []string{"--tap", vmTap, "--rm-tap", "--bridge", br, "--ip", vmIP + "/24", "--timeout", "200"}
	vmAddr := netip.MustParseAddr(vmIP)
	if g.ipv6 {
		args = append(args, "--ip6", subnet6+"2/64")
		vmAddr = netip.MustParseAddr(subnet6 + "2")
	}
	for _, p := range g.params {
		args = append(args, "--siw-param", p)
	}
	con, vmErr := startSiwVM(t, ctx, run, append(args, "--", script.String()), "siw "+strings.Join(g.params, " "))
	for _, s := range sessions {
		if !s.c.vmServer {
			continue
		}
		if !con.wait("SIWT-LISTEN "+s.c.name, 3*time.Minute) {
			t.Fatalf("%s: the VM's server never listened", s.c.name)
		}
		startSiwEmu(t, ctx, exe, s, vmAddr)
		checkSiwEmuResult(t, s, <-s.done)
	}
	if !con.wait("SIWVM-RESULT", 3*time.Minute) {
		t.Fatalf("the VM did not finish its script")
	}
	if err := <-vmErr; err != nil {
		t.Errorf("the VM: %v", err)
	}
	tshark, _ := exec.LookPath("tshark")
	for _, s := range sessions {
		if !s.c.vmServer {
			checkSiwEmuResult(t, s, <-s.done)
		}
		checkSiwSession(t, con, s, tshark)
	}
}

// startSiwVM boots the siw VM with run.sh's args and returns its console
// as it comes, and run.sh's exit. Cancelling ctx stops the VM; the test's
// cleanup waits for it and logs the console under label.
func startSiwVM(t *testing.T, ctx context.Context, run string, args []string, label string) (*siwConsole, chan error) {
	t.Helper()
	// Not -q: run.sh filters its console through awk for that, and
	// Debian's mawk reads its input in blocks, so the lines would come
	// late.
	vm := exec.CommandContext(ctx, run, args...)
	stdout, err := vm.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	vm.Stderr = vm.Stdout
	// run.sh starts QEMU: stop the whole process group, or QEMU keeps
	// the console pipe open.
	vm.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	vm.Cancel = func() error { return syscall.Kill(-vm.Process.Pid, syscall.SIGKILL) }
	vm.WaitDelay = 5 * time.Second
	con := &siwConsole{more: make(chan struct{}), done: make(chan struct{})}
	if err := vm.Start(); err != nil {
		t.Fatal(err)
	}
	vmErr := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			con.add(strings.TrimRight(sc.Text(), "\r"))
		}
		vmErr <- vm.Wait()
		close(con.done)
	}()
	t.Cleanup(func() {
		<-con.done
		con.mu.Lock()
		t.Logf("VM (%s) console:\n%s", label, strings.Join(con.lines, "\n"))
		con.mu.Unlock()
	})
	return con, vmErr
}

// checkSiwEmuResult judges how emunic's side ended: without error, or,
// for a session meant to fail, with the error it must give.
func checkSiwEmuResult(t *testing.T, s *emuSession, err error) {
	t.Helper()
	if s.c.emuFails == "" {
		if err != nil {
			t.Errorf("%s: emunic: %v\n%s", s.c.name, err, s.out.String())
		}
		return
	}
	msg := s.out.String()
	if err != nil {
		msg += err.Error()
	}
	if s.proc != nil {
		msg += s.proc.stderr.String()
	}
	if err == nil || !strings.Contains(msg, s.c.emuFails) {
		t.Errorf("%s: emunic should have failed with %q; got %v:\n%s", s.c.name, s.c.emuFails, err, msg)
	}
}

// noIPv6 turns IPv6 off on a device the test made: no router
// solicitations in the captures.
func noIPv6(dev string) {
	_ = os.WriteFile("/proc/sys/net/ipv6/conf/"+dev+"/disable_ipv6", []byte("1"), 0o644)
}

// startSiwEmu starts emunic's side of a session: the server (server is
// invalid) or the client of the VM at server.
func startSiwEmu(t *testing.T, ctx context.Context, exe string, s *emuSession, server netip.Addr) {
	t.Helper()
	if s.c.inproc != nil {
		go func() { s.done <- siwInProc(ctx, s, server) }()
		if !server.IsValid() {
			select {
			case <-s.ready:
			case err := <-s.done:
				t.Fatalf("%s: the in-process server did not listen: %v", s.c.name, err)
			}
		}
		return
	}
	args := []string{s.c.emuArgs[0], "--tap", s.tap, "--addr", s.addr.String(), "--pcap", s.pcap, "--timeout", "150s"}
	if s.addr6.IsValid() {
		args = append(args, "--addr", s.addr6.String())
	}
	args = append(args, s.c.emuArgs[1:]...)
	if server.IsValid() {
		args = append(args, "--server", server.String())
	}
	s.proc = startCommand(t, exe, "rdma", args...)
	if !server.IsValid() {
		s.proc.waitLog("listening on port", 1, 30*time.Second)
	}
	go func() {
		err := <-s.proc.exited
		s.proc.stopped = true
		s.out.Write([]byte(s.proc.stdout.String()))
		s.done <- err
	}()
}

// peerAddr is the address the VM's tools reach emunic's side at: its IPv6
// one in an IPv6 group.
func (s *emuSession) peerAddr() netip.Addr {
	if s.addr6.IsValid() {
		return s.addr6.Addr()
	}
	return s.addr.Addr()
}

// siwInProc runs the session's in-process side on a host on its TAP.
func siwInProc(ctx context.Context, s *emuSession, server netip.Addr) error {
	tap, err := port.OpenTAP(s.tap)
	if err != nil {
		return err
	}
	if err := tap.SetUp(true); err != nil {
		tap.Close()
		return err
	}
	rec, err := port.CreateRecorder(tap, s.pcap)
	if err != nil {
		tap.Close()
		return err
	}
	a := s.addr.Addr().As4()
	var st tcpstack.StackConfig
	if s.addr6.IsValid() {
		st.Addrs = []netip.Prefix{s.addr6}
	}
	h, err := board.NewHost(board.HostConfig{MAC: [6]byte{0x02, 0, a[0], a[1], a[2], a[3]}, Addr: s.addr, MTU: 1500, Stack: st}, rec)
	if err != nil {
		rec.Close()
		return err
	}
	defer h.Close()
	v, err := verbs.Open(h.Host)
	if err != nil {
		return err
	}
	return s.c.inproc(ctx, v, server, s, func() { close(s.ready) })
}

// cmatose is ucmatose's exchange (rdmatool), two messages of 64 bytes.
func cmatose(ctx context.Context, v *verbs.Provider, server netip.Addr, s *emuSession, ready func()) error {
	cfg := rdmatool.CmatoseConfig{Count: 2, Size: 64, Out: &s.out, Options: rdmatool.Options{PeerToPeer: s.c.rtr}}
	var err error
	if server.IsValid() {
		err = rdmatool.CmatoseClient(ctx, v, netip.AddrPortFrom(server, rdmatool.CmatosePort), cfg)
	} else {
		err = rdmatool.CmatoseServer(ctx, v, cfg, ready)
	}
	if err == nil && !strings.Contains(s.out.String(), "sent 2 and received 2") && !strings.Contains(s.out.String(), "received 2 and sent 2") {
		err = fmt.Errorf("no exchange reported")
	}
	return err
}

// badWrite connects to siw's rping server and RDMA-Writes to an STag siw
// never gave out: siw must answer with a Terminate, and the QP must fail
// with it (and nothing else on the host notice).
func badWrite(ctx context.Context, v *verbs.Provider, server netip.Addr, s *emuSession, _ func()) error {
	pd := v.AllocPD()
	cq, err := v.CreateCQ(16)
	if err != nil {
		return err
	}
	defer cq.Destroy()
	buf, err := v.AllocBuffer(4096)
	if err != nil {
		return err
	}
	defer buf.Free()
	mr, err := v.RegMR(pd, buf, verbs.AccessLocalWrite)
	if err != nil {
		return err
	}
	defer mr.Dereg()
	qp, err := v.DialRDMA(ctx, netip.AddrPortFrom(server, rdmatool.PingPort), verbs.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq, IRD: 1, ORD: 1})
	if err != nil {
		return err
	}
	defer qp.Close()
	// siw's first-FPDU race (docs/iwarp.md): let its QP take the socket.
	select {
	case <-time.After(rdmatool.FirstSendDelay):
	case <-ctx.Done():
		return ctx.Err()
	}
	w := rings.SendWR{Opcode: rings.WRRDMAWrite, Flags: rings.WRSignaled, WRID: 7, NumSGE: 1, RemoteAddr: 0x1000, RKey: 0x00BAD000}
	w.SGL[0] = mr.SGE(0, 64)
	if err := qp.PostSend(&w); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	select {
	case <-qp.Failed():
	case <-wctx.Done():
		return fmt.Errorf("the QP did not fail after a Write to an unknown STag: %v", qp.State())
	}
	fmt.Fprintf(&s.out, "QP failed: %v\n", qp.Err())
	return fmt.Errorf("QP: %w", qp.Err())
}

// checkSiwSession judges one session by both sides' output and tshark.
func checkSiwSession(t *testing.T, con *siwConsole, s *emuSession, tshark string) {
	t.Helper()
	vmOut := strings.Join(con.section(s.c.name), "\n")
	for want, n := range s.c.vmWant {
		if got := strings.Count(vmOut, want); got != n {
			t.Errorf("%s: the VM printed %q %d times, want %d:\n%s", s.c.name, want, got, n, vmOut)
		}
	}
	if s.c.emuWant != "" && !strings.Contains(s.out.String(), s.c.emuWant) {
		t.Errorf("%s: emunic did not print %q:\n%s", s.c.name, s.c.emuWant, s.out.String())
	}
	if tshark == "" {
		t.Logf("%s: tshark is not installed: capture not decoded", s.c.name)
		return
	}
	if s.addr6.IsValid() {
		// An IPv6 session: every TCP segment is IPv6.
		v4 := strings.TrimSpace(testutil.Tshark(t, tshark, s.pcap, nil, "-Y", "tcp && ip"))
		v6 := strings.TrimSpace(testutil.Tshark(t, tshark, s.pcap, nil, "-Y", "tcp && ipv6"))
		if v4 != "" || v6 == "" {
			t.Errorf("%s: an IPv6 session's capture has TCP over IPv4 (%q) or none over IPv6", s.c.name, v4)
		}
	}
	d := testutil.DecodeIWARP(t, tshark, s.pcap)
	// A TCP D-SACK from the VM: it got a segment twice, because one of
	// ours was retransmitted before its slow (emulated) ACK came. TCP's
	// business, not a wire-format fault: logged, not failed.
	var expert, dsack []string
	for _, e := range d.Expert {
		// After a Terminate the stream is dead: a reset ends it.
		if s.c.term && strings.HasSuffix(e, ": Connection reset (RST)") {
			t.Logf("%s: %s after the Terminate", s.c.name, e)
			continue
		}
		if strings.HasSuffix(e, ": D-SACK Sequence") {
			dsack = append(dsack, e)
		} else {
			expert = append(expert, e)
		}
	}
	d.Expert = expert
	if len(dsack) > 0 {
		t.Logf("%s: tshark notes a TCP D-SACK (a spurious retransmission): %s", s.c.name, strings.Join(dsack, "; "))
	}
	switch {
	case len(d.Malformed) > 0:
		t.Errorf("%s: malformed frames:\n%s", s.c.name, strings.Join(d.Malformed, "\n"))
	case len(d.Expert) > 0:
		t.Errorf("%s: expert warnings/errors:\n%s", s.c.name, strings.Join(d.Expert, "\n"))
	case d.BadCRCs > 0:
		t.Errorf("%s: %d bad CRCs", s.c.name, d.BadCRCs)
	case d.MPARequests != 1 || d.MPAReplies != 1:
		t.Errorf("%s: %d MPA requests and %d replies decoded, want 1 and 1", s.c.name, d.MPARequests, d.MPAReplies)
	case s.c.crc && (d.GoodCRCs == 0 || d.GoodCRCs != d.FPDUs):
		t.Errorf("%s: CRC in use, but %d good CRCs in %d FPDUs", s.c.name, d.GoodCRCs, d.FPDUs)
	case !s.c.crc && d.GoodCRCs != 0:
		t.Errorf("%s: CRC not in use, but %d CRCs checked", s.c.name, d.GoodCRCs)
	case s.c.term && d.Opcodes[7] == 0:
		t.Errorf("%s: no Terminate decoded: opcodes %v", s.c.name, d.Opcodes)
	case s.c.rtr && d.Opcodes[0] == 0:
		t.Errorf("%s: peer-to-peer mode without an RTR Write: opcodes %v", s.c.name, d.Opcodes)
	}
	t.Logf("%s: %d frames, %d FPDUs with CRC (%d good), opcodes %v, %d revision-2 warnings of tshark", s.c.name, d.Frames, d.FPDUs, d.GoodCRCs, d.Opcodes, d.MPARev2Warnings)
}
