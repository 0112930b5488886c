package port

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"golang.org/x/sys/unix"
)

// readUntil reads frames from p until match accepts one, or fails after timeout (by closing p,
// which must unblock the read).
func readUntil(p Port, buf []byte, timeout time.Duration, match func([]byte) bool) ([]byte, error) {
	timer := time.AfterFunc(timeout, func() { p.Close() })
	defer timer.Stop()
	for {
		n, err := p.ReadFrame(buf)
		if err != nil {
			return nil, fmt.Errorf("no matching frame within %v: %w", timeout, err)
		}
		if match(buf[:n]) {
			return buf[:n], nil
		}
	}
}

func isARPRequestFor(ip net.IP) func([]byte) bool {
	return func(f []byte) bool {
		return len(f) >= 42 && binary.BigEndian.Uint16(f[12:14]) == 0x0806 &&
			binary.BigEndian.Uint16(f[20:22]) == 1 && net.IP(f[38:42]).Equal(ip.To4())
	}
}

// udpFrame builds an Ethernet/IPv4/UDP frame (UDP checksum 0, which IPv4 allows).
func udpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst net.IP, sport, dport int, payload []byte) []byte {
	return testutil.UDPFrame(testutil.UDPFrameFields{DstMAC: hdr.MAC(dstMAC), SrcMAC: hdr.MAC(srcMAC),
		Src: hdr.IPv4Addr(src.To4()), Dst: hdr.IPv4Addr(dst.To4()), SrcPort: uint16(sport), DstPort: uint16(dport),
		NoChecksum: true, Payload: payload})
}

// upTAP brings tap up with address cidr and returns the MAC address of
// the kernel's side.
func upTAP(tap *TAPPort, cidr string) (net.HardwareAddr, error) {
	if err := tap.SetUp(true); err != nil {
		return nil, err
	}
	if err := testutil.RunIP("addr", "add", cidr, "dev", tap.Name()); err != nil {
		return nil, err
	}
	return tap.HardwareAddr()
}

// TestTAPExchangesFramesWithKernel: a frame the kernel sends (an ARP request, provoked by a UDP
// send to an unresolved neighbour) is read from the port, and a frame written to the port (a
// UDP datagram) is received by a kernel socket.
func TestTAPExchangesFramesWithKernel(t *testing.T) {
	defer checkGoroutines(t)()
	testutil.InNewNetns(t, func() error {
		tap, err := OpenTAP("emutap%d")
		if err != nil {
			return err
		}
		defer tap.Close()
		if !strings.HasPrefix(tap.Name(), "emutap") || strings.Contains(tap.Name(), "%") {
			return fmt.Errorf("Name() = %q, want the kernel's pick for emutap%%d", tap.Name())
		}
		if err := tap.SetMTU(9000); err != nil {
			return err
		}
		if mtu, err := tap.MTU(); err != nil || mtu != 9000 {
			return fmt.Errorf("MTU() = %d, %v after SetMTU(9000)", mtu, err)
		}
		hostMAC, err := upTAP(tap, "10.99.0.1/24")
		if err != nil {
			return err
		}
		if ifi, err := net.InterfaceByName(tap.Name()); err != nil || !bytes.Equal(ifi.HardwareAddr, hostMAC) {
			return fmt.Errorf("HardwareAddr() = %v, interface says %v (%v)", hostMAC, ifi, err)
		}

		// Kernel → port: sending to 10.99.0.2 makes the kernel ARP for it on the TAP.
		peer := net.IPv4(10, 99, 0, 2)
		c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: peer, Port: 9})
		if err != nil {
			return err
		}
		defer c.Close()
		if _, err := c.Write([]byte("hello")); err != nil {
			return err
		}
		buf := make([]byte, TAPMaxFrameSize)
		arp, err := readUntil(tap, buf, 5*time.Second, isARPRequestFor(peer))
		if err != nil {
			return fmt.Errorf("kernel ARP request: %w", err)
		}
		if !bytes.Equal(arp[6:12], hostMAC) {
			return fmt.Errorf("ARP request from %v, want the interface's MAC %v", net.HardwareAddr(arp[6:12]), hostMAC)
		}

		// Port → kernel: a UDP datagram to a socket on 10.99.0.1.
		l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 99, 0, 1)})
		if err != nil {
			return err
		}
		defer l.Close()
		payload := []byte("frame from the emulated NIC")
		myMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x02}
		frame := udpFrame(hostMAC, myMAC, peer, net.IPv4(10, 99, 0, 1), 5555, l.LocalAddr().(*net.UDPAddr).Port, payload)
		if err := tap.WriteFrame(frame); err != nil {
			return err
		}
		l.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 100)
		n, from, err := l.ReadFromUDP(got)
		if err != nil {
			return fmt.Errorf("kernel did not receive the written frame: %w", err)
		}
		if !bytes.Equal(got[:n], payload) || !from.IP.Equal(peer) {
			return fmt.Errorf("kernel received %q from %v", got[:n], from)
		}

		// A buffer too short for the next frame: dropped, counted, and the port keeps working.
		c.Write([]byte("again")) // another ARP request follows (the neighbour is unresolved)
		small := make([]byte, 20)
		if _, err := tap.ReadFrame(small); !errors.Is(err, ErrFrameTooBig) {
			return fmt.Errorf("ReadFrame into 20 bytes: %v, want ErrFrameTooBig", err)
		}
		s := tap.Stats()
		if s.TxFrames != 1 || s.TxBytes != uint64(len(frame)) || s.RxFrames == 0 || s.RxDropTooBig != 1 {
			return fmt.Errorf("counters: %v", s)
		}
		return nil
	})
}

func TestTAPWriteWhileDownIsCountedDrop(t *testing.T) {
	testutil.InNewNetns(t, func() error {
		tap, err := OpenTAP("emudown0")
		if err != nil {
			return err
		}
		defer tap.Close()
		if err := tap.WriteFrame(testFrame(1, 60)); err != nil {
			return fmt.Errorf("WriteFrame on a down interface: %v, want a counted drop", err)
		}
		if s := tap.Stats(); s.TxDropLinkDown != 1 || s.TxFrames != 0 {
			return fmt.Errorf("counters: %v, want tx_drop_link_down=1", s)
		}
		return nil
	})
}

func TestTAPCloseUnblocksReader(t *testing.T) {
	defer checkGoroutines(t)()
	testutil.InNewNetns(t, func() error {
		tap, err := OpenTAP("emuclose0")
		if err != nil {
			return err
		}
		errc := make(chan error, 1)
		go func() {
			_, err := tap.ReadFrame(make([]byte, TAPMaxFrameSize)) // down: nothing arrives
			errc <- err
		}()
		if err := closeAsleepReader(tap, errc); err != nil {
			return err
		}
		if _, err := net.InterfaceByName("emuclose0"); err == nil {
			return errors.New("interface still exists after Close")
		}
		if err := tap.WriteFrame(testFrame(0, 60)); !errors.Is(err, ErrClosed) {
			return fmt.Errorf("WriteFrame after Close: %v", err)
		}
		return tap.Close() // twice: harmless
	})
}

func TestTAPOpenErrors(t *testing.T) {
	// Bad names are refused before touching the kernel, so these need no privileges.
	for _, tc := range []struct{ name, want string }{
		{"", "empty"},
		{"emunic-tap-name-too-long", "24 bytes; Linux allows at most 15"},
		{"a/b", "may not contain '/'"},
		{"a b", "may not contain ' '"},
		{"..", "may not be"},
	} {
		_, err := OpenTAP(tc.name)
		var te *TAPError
		if !errors.As(err, &te) || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), fmt.Sprintf("%q", tc.name)) {
			t.Errorf("OpenTAP(%q) = %v, want a TAPError naming it and saying %q", tc.name, err, tc.want)
		}
	}

	testutil.InNewNetns(t, func() error {
		first, err := OpenTAP("emubusy0")
		if err != nil {
			return err
		}
		defer first.Close()
		_, err = OpenTAP("emubusy0")
		if !errors.Is(err, unix.EBUSY) || !strings.Contains(err.Error(), `tap "emubusy0": device busy`) {
			return fmt.Errorf("second open: %v, want EBUSY naming the device", err)
		}
		_, err = OpenTAP("lo")
		if !errors.Is(err, unix.EINVAL) || !strings.Contains(err.Error(), "exists and is not a TAP device") {
			return fmt.Errorf("OpenTAP(lo): %v", err)
		}
		return nil
	})
}

// TestTAPErrorMessages checks the explanation for each errno OpenTAP can meet, including the
// ones a root test cannot provoke.
func TestTAPErrorMessages(t *testing.T) {
	defer func(f func() int) { euid = f }(euid)
	for _, tc := range []struct {
		op   string
		err  error
		uid  int
		want string
	}{
		{"open /dev/net/tun", unix.ENOENT, 0, "no /dev/net/tun: load the tun module or run in a container with /dev/net/tun"},
		{"open /dev/net/tun", unix.ENODEV, 0, "tun driver is missing"},
		{"open /dev/net/tun", unix.EACCES, 1000, "not running as root"},
		{"TUNSETIFF", unix.EPERM, 1000, "not running as root"},
		{"TUNSETIFF", unix.EPERM, 0, "lacks CAP_NET_ADMIN"},
		{"TUNSETIFF", unix.EBUSY, 0, "device busy"},
		{"TUNSETIFF", unix.EINVAL, 0, "not a TAP device"},
		{"TUNSETIFF", unix.ENOMEM, 0, "TUNSETIFF: cannot allocate memory"},
	} {
		euid = func() int { return tc.uid }
		err := tapError("emu0", tc.op, tc.err)
		msg := err.Error()
		if !strings.HasPrefix(msg, `tap "emu0": `) || !strings.Contains(msg, tc.want) || strings.Contains(msg, "\n") {
			t.Errorf("%s %v (uid %d): %q, want one line naming the device and saying %q", tc.op, tc.err, tc.uid, msg, tc.want)
		}
		if !errors.Is(err, tc.err) {
			t.Errorf("%q does not wrap %v", msg, tc.err)
		}
	}
	if err := tapError("emu0", "TUNSETIFF", unix.EPERM); !errors.Is(err, os.ErrPermission) {
		t.Errorf("EPERM is not os.ErrPermission: %v", err)
	}
}

// TestTAPWriteAfterTSO: a plain frame written after a TCP super-frame goes
// out as the whole frame it is. WriteFrameTSO and WriteFrame share the
// write buffer, and a frame once went out with the super-frame's
// virtio-net header still in front of it: asking the kernel to segment it,
// which the kernel refused for any frame shorter than the header length
// that header named (EINVAL: bare ACKs and RSTs, ARP replies) and took the
// rest as TCP with a partial checksum.
func TestTAPWriteAfterTSO(t *testing.T) {
	defer checkGoroutines(t)()
	testutil.InNewNetns(t, func() error {
		tap, err := OpenTAP("emutso%d")
		if err != nil {
			return err
		}
		defer tap.Close()
		if !tap.TSO() {
			return fmt.Errorf("TAP %s opened without offloads", tap.Name())
		}
		hostMAC, err := upTAP(tap, "10.99.1.1/24")
		if err != nil {
			return err
		}
		myMAC := net.HardwareAddr{0x02, 0, 0, 0, 0, 0x03}
		peer, host := net.IPv4(10, 99, 1, 2), net.IPv4(10, 99, 1, 1)
		if err := testutil.RunIP("neigh", "add", peer.String(), "lladdr", myMAC.String(), "dev", tap.Name()); err != nil {
			return err
		}

		// A TCP super-frame of 3 segments' payload, with timestamps
		// (66 bytes of headers), to a port nobody listens on: the
		// kernel takes it (and answers with a RST).
		ts := []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 0}
		super := tcpFrame(hostMAC, myMAC, peer, host, 40000, 9, ts, make([]byte, 3*1448))
		if err := tap.WriteFrameTSO(super, 1448); err != nil {
			return fmt.Errorf("WriteFrameTSO: %w", err)
		}
		// Then a bare TCP segment (shorter than the super-frame's
		// headers) and a UDP datagram to a socket, both whole frames.
		if err := tap.WriteFrame(tcpFrame(hostMAC, myMAC, peer, host, 40001, 9, nil, nil)); err != nil {
			return fmt.Errorf("WriteFrame of a bare TCP segment after a super-frame: %w", err)
		}
		l, err := net.ListenUDP("udp4", &net.UDPAddr{IP: host})
		if err != nil {
			return err
		}
		defer l.Close()
		payload := []byte("after the super-frame")
		if err := tap.WriteFrame(udpFrame(hostMAC, myMAC, peer, host, 5555, l.LocalAddr().(*net.UDPAddr).Port, payload)); err != nil {
			return fmt.Errorf("WriteFrame of a UDP datagram after a super-frame: %w", err)
		}
		l.SetReadDeadline(time.Now().Add(5 * time.Second))
		got := make([]byte, 100)
		n, _, err := l.ReadFromUDP(got)
		if err != nil || !bytes.Equal(got[:n], payload) {
			return fmt.Errorf("kernel received %q, %v; want %q", got[:n], err, payload)
		}
		if s := tap.Stats(); s.TxErrors != 0 || s.TxGSOFrames != 1 || s.TxFrames != 3 {
			return fmt.Errorf("counters: %v", s)
		}
		return nil
	})
}

// tcpFrame builds an Ethernet/IPv4/TCP frame (ACK set, checksums done) with
// TCP options opts (a multiple of 4 bytes) and payload.
func tcpFrame(dstMAC, srcMAC net.HardwareAddr, src, dst net.IP, sport, dport int, opts, payload []byte) []byte {
	return testutil.TCPFrame(hdr.TCPFrameFields{DstMAC: hdr.MAC(dstMAC), SrcMAC: hdr.MAC(srcMAC),
		Src: hdr.IPv4Addr(src.To4()), Dst: hdr.IPv4Addr(dst.To4()),
		TCP:     hdr.TCPFields{SrcPort: uint16(sport), DstPort: uint16(dport), Seq: 1000, Ack: 1, Flags: hdr.TCPFlagACK, Window: 65535},
		Options: opts, Payload: payload})
}

// TestTAPRxLoss: with RxLossPercent the port drops that share of what the
// kernel sends, counted in RxDropLoss and never returned by a read. A
// percentage out of range is refused before any TAP is opened.
func TestTAPRxLoss(t *testing.T) {
	if _, err := OpenTAPWith("emutap%d", TAPOptions{RxLossPercent: 101}); err == nil || !strings.Contains(err.Error(), "RxLossPercent") {
		t.Fatalf("RxLossPercent 101: %v, want an error naming it", err)
	}
	testutil.InNewNetns(t, func() error {
		const n = 400
		tap, err := kernelUDPBurst(TAPOptions{RxLossPercent: 50, LossSeed: 5}, 98, n)
		if err != nil {
			return err
		}
		defer tap.Close()
		buf := make([]byte, TAPMaxFrameSize)
		got := 0
		for {
			if _, err := readUntil(tap, buf, 200*time.Millisecond, func(f []byte) bool {
				return binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17 // IPv4 UDP
			}); err != nil {
				break
			}
			got++
		}
		s := tap.Stats()
		if got+int(s.RxDropLoss) < n || s.RxDropLoss < n/4 || got < n/4 {
			return fmt.Errorf("%d of %d datagrams read, %d reads dropped: want about half each", got, n, s.RxDropLoss)
		}
		return nil
	})
}

// TestTAPBusyPoll: a burst of datagrams from the kernel is read, in order,
// with the busy poll (the default) serving reads without the netpoller
// (RxBusyPollHits), and with it off (negative BusyPoll) serving none; a
// reader busy polling an idle TAP goes to sleep (closeAsleepReader waits
// for that), and Close still ends its read.
func TestTAPBusyPoll(t *testing.T) {
	for _, tc := range []struct {
		name string
		poll time.Duration
		hits bool
	}{{"default", 0, true}, {"off", -1, false}} {
		t.Run(tc.name, func(t *testing.T) {
			testutil.InNewNetns(t, func() error {
				const n = 200
				tap, err := kernelUDPBurst(TAPOptions{BusyPoll: tc.poll, NoOffload: true}, 97, n)
				if err != nil {
					return err
				}
				defer tap.Close()
				buf := make([]byte, TAPMaxFrameSize)
				for i := range n {
					f, err := readUntil(tap, buf, 5*time.Second, func(f []byte) bool {
						return binary.BigEndian.Uint16(f[12:]) == 0x0800 && f[23] == 17
					})
					if err != nil {
						return fmt.Errorf("datagram %d: %w", i, err)
					}
					if got := int(binary.BigEndian.Uint16(f[len(f)-2:])); got != i {
						return fmt.Errorf("datagram %d read as %d", i, got)
					}
				}
				if hits := tap.Stats().RxBusyPollHits; (hits > 0) != tc.hits {
					return fmt.Errorf("%d reads served by the busy poll, want some: %v", hits, tc.hits)
				}
				// Idle: the reader polls, then sleeps in the netpoller;
				// Close ends the read.
				done := make(chan error, 1)
				go func() {
					for {
						// The kernel's own frames (IPv6 neighbour
						// discovery) may still come: read on.
						if _, err := tap.ReadFrame(buf); err != nil {
							done <- err
							return
						}
					}
				}()
				return closeAsleepReader(tap, done)
			})
		})
	}
}

// kernelUDPBurst opens a TAP with opt as 10.SUBNET.0.1/24 and has the
// kernel send n two-byte datagrams (0, 1, ...) to a resolved neighbour
// behind it, 10.SUBNET.0.2, so that they are on the TAP to read.
func kernelUDPBurst(opt TAPOptions, subnet byte, n int) (*TAPPort, error) {
	tap, err := OpenTAPWith("emutap%d", opt)
	if err != nil {
		return nil, err
	}
	if _, err := upTAP(tap, fmt.Sprintf("10.%d.0.1/24", subnet)); err != nil {
		tap.Close()
		return nil, err
	}
	// A resolved neighbour, so the kernel sends the datagrams themselves.
	peer := net.IPv4(10, subnet, 0, 2)
	if err := testutil.RunIP("neigh", "replace", peer.String(), "lladdr", "02:00:00:00:00:02", "dev", tap.Name()); err != nil {
		tap.Close()
		return nil, err
	}
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: peer, Port: 9})
	if err != nil {
		tap.Close()
		return nil, err
	}
	defer c.Close()
	for i := range n {
		if _, err := c.Write([]byte{byte(i >> 8), byte(i)}); err != nil {
			tap.Close()
			return nil, err
		}
	}
	return tap, nil
}

// closeAsleepReader waits until a reader of tap is asleep in ReadFrame
// (past any busy poll: blocked in the netpoller, not running), closes tap,
// and checks that the read ends with ErrClosed, which the reader sends on
// errc. Waiting for the sleep, rather than sleeping a while, is what
// makes the read one Close has to wake.
func closeAsleepReader(tap *TAPPort, errc <-chan error) error {
	const reader = "github.com/emunic/emunic/nic/port.(*TAPPort).ReadFrame"
	if !testutil.Poll(5*time.Second, func() bool { return testutil.BlockedIn(reader) > 0 }) {
		return errors.New("no reader of the idle TAP fell asleep in ReadFrame within 5s")
	}
	if err := tap.Close(); err != nil {
		return err
	}
	select {
	case err := <-errc:
		if !errors.Is(err, ErrClosed) {
			return fmt.Errorf("blocked ReadFrame returned %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		return errors.New("Close did not unblock ReadFrame")
	}
	return nil
}
