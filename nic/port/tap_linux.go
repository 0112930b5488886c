package port

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/emunic/emunic/nic/hdr"
	"golang.org/x/sys/unix"
)

// TAPMaxFrameSize is the longest frame a TAP port reads or writes: the tun driver's largest MTU
// (65535) plus an Ethernet header and one VLAN tag.
const TAPMaxFrameSize = 65535 + EthHeaderLen + 4

// TAPPort is a Port on a Linux TAP device: the far end of the wire is the kernel's network
// stack, seen through an interface that `ip link` shows. Frames the kernel sends out of that
// interface are read by ReadFrame; frames given to WriteFrame are received by the kernel as if
// they had come in from a cable.
//
// The device file is non-blocking and wrapped in an *os.File, so a blocked ReadFrame waits in
// Go's netpoller rather than in a thread, and Close wakes it. The interface exists while the
// port is open (it is not made persistent) and disappears with Close.
type TAPPort struct {
	name  string
	file  *os.File
	ctl   int // AF_INET datagram socket for interface ioctls, in the TAP's network namespace
	stats counters

	// vnet: frames carry a virtio-net header both ways and the kernel may
	// hand over TCP super-frames (TAPOptions).
	vnet bool
	wmu  sync.Mutex
	wbuf []byte // vnet header + frame, one write
	gbuf []byte // vnet header + the largest super-frame
	gso  gsoSplitter

	closed atomic.Bool

	// busyPoll > 0: reads poll raw for that long before the netpoller
	// (TAPOptions.BusyPoll).
	busyPoll time.Duration
	raw      syscall.RawConn
	poll     rawPoll

	// ReadFrame reads into rbuf when the caller's buffer might be too short for the next
	// frame: the kernel drops a frame that does not fit the read and reports EFAULT, losing
	// its length, whereas here the frame is counted in RxDropTooBig and ErrFrameTooBig is
	// returned, as the Port contract says.
	rmu  sync.Mutex
	rbuf []byte

	// The receive loss impairment (TAPOptions.RxLossPercent): its
	// chance in 2^64ths, and its generator, used under rmu.
	rxLoss uint64
	rxRng  *rand.Rand
}

var errBadLoss = errors.New("loss percentage out of range")

// rxLost reports whether the read just made is dropped by the receive
// loss impairment (counted). Called with rmu held.
func (t *TAPPort) rxLost() bool {
	if t.rxLoss == 0 || t.rxRng.Uint64() >= t.rxLoss {
		return false
	}
	t.stats.rxDropLoss.Add(1)
	return true
}

// TAPError is the error OpenTAP returns. Its message is one line that names the device and
// says what to do; errors.Is sees the underlying errno (e.g. unix.EBUSY, os.ErrPermission).
type TAPError struct {
	Name   string // the requested interface name
	Op     string // what failed: "name", "open /dev/net/tun", "TUNSETIFF", ...
	Err    error  // the underlying error, often a unix.Errno; nil for a bad name
	Reason string // the explanation shown to the user
}

func (e *TAPError) Error() string { return fmt.Sprintf("tap %q: %s", e.Name, e.Reason) }
func (e *TAPError) Unwrap() error { return e.Err }

// checkIfName applies the kernel's rules for interface names (dev_valid_name) up front, so a
// bad name gets a message saying what is wrong instead of a bare EINVAL.
func checkIfName(name string) error {
	bad := func(reason string) error { return &TAPError{Name: name, Op: "name", Reason: reason} }
	switch {
	case name == "":
		return bad("interface name is empty")
	case len(name) >= unix.IFNAMSIZ:
		return bad(fmt.Sprintf("interface name is %d bytes; Linux allows at most %d", len(name), unix.IFNAMSIZ-1))
	case name == "." || name == "..":
		return bad("interface name may not be \".\" or \"..\"")
	}
	for _, c := range []byte(name) {
		if c == '/' || c == ':' || c <= ' ' || c == 0x7f {
			return bad(fmt.Sprintf("interface name may not contain %q", c))
		}
	}
	return nil
}

// euid is os.Geteuid, replaceable by tests of the error messages.
var euid = os.Geteuid

// tapError explains a failed system call of OpenTAP.
func tapError(name, op string, err error) error {
	var reason string
	switch {
	case op == "open /dev/net/tun" && errors.Is(err, unix.ENOENT):
		reason = "no /dev/net/tun: load the tun module or run in a container with /dev/net/tun"
	case op == "open /dev/net/tun" && errors.Is(err, unix.ENODEV), op == "open /dev/net/tun" && errors.Is(err, unix.ENXIO):
		reason = "/dev/net/tun exists but the tun driver is missing: load the tun module (modprobe tun)"
	case errors.Is(err, unix.EPERM), errors.Is(err, unix.EACCES):
		if euid() != 0 {
			reason = fmt.Sprintf("permission denied (%s): not running as root; run as root or with "+
				"CAP_NET_ADMIN, or use a TAP made for this user (ip tuntap add NAME mode tap user USER)", op)
		} else {
			reason = fmt.Sprintf("permission denied (%s) although running as root: the process lacks "+
				"CAP_NET_ADMIN (a container without NET_ADMIN?) or the TAP belongs to another user", op)
		}
	case errors.Is(err, unix.EBUSY):
		reason = "device busy: another process or descriptor is already attached to it"
	case op == "TUNSETIFF" && errors.Is(err, unix.EINVAL):
		reason = "an interface with this name already exists and is not a TAP device"
	default:
		reason = fmt.Sprintf("%s: %v", op, err)
	}
	return &TAPError{Name: name, Op: op, Err: err, Reason: reason}
}

// OpenTAP creates (or attaches to an existing, unattached) TAP interface called name in the
// calling thread's network namespace. A name containing "%d" (e.g. "emu%d") lets the kernel
// pick the number; Name returns the result. The interface starts down: bring it up with SetUp
// or `ip link set NAME up`.
func OpenTAP(name string) (*TAPPort, error) {
	return OpenTAPWith(name, TAPOptions{})
}

// TAPOptions choose how a TAP port talks to the kernel.
type TAPOptions struct {
	// NoOffload opens the TAP without IFF_VNET_HDR: one frame per read
	// and write, each at most the interface's MTU, as a plain NIC would
	// see them. By default the port turns on the checksum and TCP/IPv4
	// segmentation offloads (TUNSETOFFLOAD, as QEMU and gVisor do), so the
	// kernel hands over TCP super-frames of up to 64 KiB, which the port
	// splits into wire-size frames: a read per super-frame instead of per
	// frame. A kernel that refuses the offloads gets the plain mode.
	NoOffload bool
	// RxLossPercent of the reads from the TAP are dropped (counted in
	// RxDropLoss): with offloads a read is a whole super-frame, up to 44
	// segments lost at once, as a link drops a frame. It is loss the
	// kernel's TCP sees as loss: a packet its own output path drops
	// (nftables on output or postrouting, a tc egress filter) is reported
	// to TCP as a failed transmission, which it sends again at the next
	// chance without a retransmission or a window cut. LossSeed seeds the
	// choice (the same seed, the same reads dropped).
	RxLossPercent float64
	LossSeed      uint64
	// BusyPoll is how long a read keeps polling the TAP for the next
	// frame, without the Go netpoller, before it sleeps in it (busy
	// polling, as Linux's SO_BUSY_POLL and NAPI busy poll do): 0 takes
	// DefaultTAPBusyPoll, a negative value turns it off. A frame the
	// netpoller has to deliver waits for a processor to look at the
	// poller, which on a busy machine is tens of microseconds and more:
	// every ACK the kernel sends back inflates the engine's round trip,
	// and its rate (window ÷ RTT) with it. The cost is the reader's CPU
	// for up to BusyPoll after the last frame of a burst
	// (Stats.RxBusyPollHits counts the reads it served).
	BusyPoll time.Duration
}

// DefaultTAPBusyPoll is TAPOptions.BusyPoll's default. Measured on the 2%
// loss pair against the kernel (docs/benchmarks.md, TAPLossPair): 50 µs
// took the engine from 1.5 to 2.4 GB/s; 20 µs got half of that, and 100
// µs no more.
const DefaultTAPBusyPoll = 50 * time.Microsecond

// Offload reports whether the port runs with the virtio-net header and the
// kernel's offloads (TAPOptions).
func (t *TAPPort) Offload() bool { return t.vnet }

// OpenTAPWith is OpenTAP with options.
func OpenTAPWith(name string, opt TAPOptions) (*TAPPort, error) {
	if err := checkIfName(name); err != nil {
		return nil, err
	}
	if !(opt.RxLossPercent >= 0 && opt.RxLossPercent <= 100) {
		return nil, &TAPError{Name: name, Op: "options", Err: errBadLoss, Reason: fmt.Sprintf("RxLossPercent %v is not between 0 and 100", opt.RxLossPercent)}
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, tapError(name, "open /dev/net/tun", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil { // cannot happen after checkIfName; kept so a future change cannot slip by
		unix.Close(fd)
		return nil, tapError(name, "name", err)
	}
	// IFF_NO_PI: frames without the 4-byte tun packet-information prefix, exactly as on the wire.
	flags := uint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if !opt.NoOffload {
		flags |= unix.IFF_VNET_HDR
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, tapError(name, "TUNSETIFF", err)
	}
	vnet := false
	if !opt.NoOffload {
		// The header is 10 bytes (the default); the offloads are the
		// checksum and TCP segmentation over IPv4 and IPv6 (TSO, TSO6):
		// the kernel hands over super-frames of either family. A kernel
		// that refuses gets frames without the header: turn it off
		// again.
		if err := unix.IoctlSetPointerInt(fd, unix.TUNSETVNETHDRSZ, VnetHdrSize); err == nil {
			if err := unix.IoctlSetInt(fd, unix.TUNSETOFFLOAD, tunFCsum|tunFTSO4|tunFTSO6); err == nil {
				vnet = true
			}
		}
		if !vnet {
			unix.Close(fd)
			opt.NoOffload = true
			return OpenTAPWith(name, opt)
		}
	}
	actual := ifr.Name()
	// The control socket is made now, on this thread, so that it lives in the namespace the
	// interface was created in even if later calls come from threads in another namespace.
	ctl, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		unix.Close(fd)
		return nil, tapError(actual, "control socket", err)
	}
	// fd is non-blocking, so os.NewFile registers it with the netpoller.
	file := os.NewFile(uintptr(fd), "/dev/net/tun ("+actual+")")
	t := &TAPPort{name: actual, file: file, ctl: ctl, rbuf: make([]byte, TAPMaxFrameSize), vnet: vnet, busyPoll: opt.BusyPoll}
	if t.busyPoll == 0 {
		t.busyPoll = DefaultTAPBusyPoll
	}
	if t.busyPoll > 0 {
		t.poll.fn = t.poll.readFD
		if t.raw, err = file.SyscallConn(); err != nil {
			file.Close()
			unix.Close(ctl)
			return nil, tapError(actual, "raw descriptor", err)
		}
	}
	if opt.RxLossPercent > 0 {
		t.rxLoss = math.MaxUint64
		if opt.RxLossPercent < 100 {
			t.rxLoss = uint64(opt.RxLossPercent / 100 * (1 << 64))
		}
		t.rxRng = rand.New(rand.NewPCG(splitmix64(opt.LossSeed), splitmix64(opt.LossSeed+1)))
	}
	if vnet {
		t.wbuf = make([]byte, VnetHdrSize+TAPMaxFrameSize)
		t.gbuf = make([]byte, VnetHdrSize+TAPMaxFrameSize)
	}
	return t, nil
}

// Name returns the interface name (with any "%d" filled in by the kernel).
func (t *TAPPort) Name() string { return t.name }

// String returns "tap:<name>".
func (t *TAPPort) String() string { return "tap:" + t.name }

// WriteFrame gives frame to the kernel as a frame received on the interface. Frames written
// while the interface is down are dropped by the kernel and counted in TxDropLinkDown.
func (t *TAPPort) WriteFrame(frame []byte) error {
	if err := t.stats.checkTx(t.closed.Load(), len(frame), TAPMaxFrameSize); err != nil {
		return err
	}
	var err error
	if t.vnet {
		// A zero header: a whole frame, its checksums done. Zeroed
		// every time: WriteFrameTSO writes its header in the same
		// buffer, and a frame after it would go out asking for
		// segmentation (the kernel refuses one shorter than the
		// header length it names, an ARP reply among them).
		t.wmu.Lock()
		clear(t.wbuf[:VnetHdrSize])
		n := copy(t.wbuf[VnetHdrSize:], frame)
		_, err = t.file.Write(t.wbuf[:VnetHdrSize+n])
		t.wmu.Unlock()
	} else {
		_, err = t.file.Write(frame)
	}
	return t.wrote(err, len(frame))
}

// wrote counts a frame's write (n bytes of frame) by its outcome and
// returns what WriteFrame returns for it.
func (t *TAPPort) wrote(err error, n int) error {
	switch {
	case err == nil:
		t.stats.txFrames.Add(1)
		t.stats.txBytes.Add(uint64(n))
		return nil
	case t.closed.Load() || errors.Is(err, os.ErrClosed):
		t.stats.txDropClosed.Add(1)
		return ErrClosed
	case errors.Is(err, unix.EIO):
		// The tun driver refuses frames while the interface is down; a NIC would just lose
		// them, so this is a counted drop, not an error for the transmit path to handle.
		t.stats.txDropLinkDown.Add(1)
		return nil
	default:
		t.stats.txErrors.Add(1)
		return fmt.Errorf("tap %s: write: %w", t.name, err)
	}
}

// TSO implements TSOWriter: a TAP with offloads takes TCP super-frames.
func (t *TAPPort) TSO() bool { return t.vnet }

// WriteFrameTSO implements TSOWriter: the super-frame goes to the kernel in
// one write with a virtio-net header asking for segments of mss payload
// bytes (GSO TCPv4, or TCPv6 for an IPv6 one), its TCP checksum field
// turned into the pseudo-header's
// partial sum with NEEDS_CSUM, as a guest's virtio-net driver sends one:
// the kernel segments it only if it must (it delivers it whole to a local
// socket).
func (t *TAPPort) WriteFrameTSO(frame []byte, mss int) error {
	if !t.vnet {
		return fmt.Errorf("tap %s: TSO without offloads", t.name)
	}
	if err := t.stats.checkTx(t.closed.Load(), len(frame), TAPMaxFrameSize); err != nil {
		return err
	}
	var k hdr.Tuple
	tcp, err := hdr.ParseTCPFrameRx(frame, &k)
	if err != nil || mss <= 0 || mss > 0xFFFF {
		t.stats.txErrors.Add(1)
		return fmt.Errorf("tap %s: TSO frame: %v", t.name, err)
	}
	// l4 is where the TCP header starts (tcp is a slice of frame).
	l4 := cap(frame) - cap(tcp)
	gso := uint8(VnetGSOTCPv4)
	if !k.LocalIP.Is4() {
		gso = VnetGSOTCPv6
	}
	t.wmu.Lock()
	defer t.wmu.Unlock()
	h := VnetHdr{Flags: VnetFlagNeedsCsum, GSOType: gso, HdrLen: uint16(l4 + tcp.HeaderLen()),
		GSOSize: uint16(mss), CsumStart: uint16(l4), CsumOffset: hdr.TCPOffChecksum}
	h.Encode(t.wbuf)
	n := copy(t.wbuf[VnetHdrSize:], frame)
	// k is the receiver's view: the sender (this frame's source) is RemoteIP.
	partial := hdr.Fold(hdr.PseudoHeaderSumAddr(hdr.ProtoTCP, k.RemoteIP, k.LocalIP, len(tcp)))
	binary.BigEndian.PutUint16(t.wbuf[VnetHdrSize+l4+hdr.TCPOffChecksum:], partial)
	_, err = t.file.Write(t.wbuf[:VnetHdrSize+n])
	if err == nil {
		t.stats.txGSO.Add(1)
	}
	return t.wrote(err, len(frame))
}

// ReadFrame waits for the next frame the kernel sends out of the interface.
func (t *TAPPort) ReadFrame(buf []byte) (int, error) {
	if t.closed.Load() {
		return 0, ErrClosed
	}
	if t.vnet {
		return t.readVnet(buf)
	}
	if len(buf) >= TAPMaxFrameSize && t.rxLoss == 0 {
		// Any frame fits: read straight into the caller's buffer, no extra copy.
		n, err := t.read(buf)
		if err != nil {
			return 0, t.readError(err)
		}
		t.stats.rxFrames.Add(1)
		t.stats.rxBytes.Add(uint64(n))
		return n, nil
	}
	t.rmu.Lock()
	defer t.rmu.Unlock()
	n, err := t.read(t.rbuf)
	for err == nil && t.rxLost() {
		n, err = t.read(t.rbuf)
	}
	if err != nil {
		return 0, t.readError(err)
	}
	if n > len(buf) {
		t.stats.rxDropTooBig.Add(1)
		return 0, ErrFrameTooBig
	}
	copy(buf, t.rbuf[:n])
	t.stats.rxFrames.Add(1)
	t.stats.rxBytes.Add(uint64(n))
	return n, nil
}

// ReadFrameCsum implements CsumReader: ReadFrame, but the segments of a
// super-frame come without their TCP checksums computed (and reported
// verified), and so does a frame the kernel marked DATA_VALID.
func (t *TAPPort) ReadFrameCsum(buf []byte) (int, bool, error) {
	if t.closed.Load() {
		return 0, false, ErrClosed
	}
	if !t.vnet {
		n, err := t.ReadFrame(buf)
		return n, false, err
	}
	f, err := t.readVnetFrame(buf, false, false)
	return f.N, f.L4Verified, err
}

// readVnet is ReadFrame with the virtio-net header: the next segment of the
// last super-frame, or the next read, with its checksum finished or split.
func (t *TAPPort) readVnet(buf []byte) (int, error) {
	f, err := t.readVnetFrame(buf, true, false)
	return f.N, err
}

// ReadFrameLRO implements LROReader: a super-frame the kernel hands over
// comes whole into buf when it fits (one copy, no checksum computed, its IP
// header checksum made valid for the whole), counted as the segments it
// stands for; anything else comes as ReadFrameCsum gives it.
func (t *TAPPort) ReadFrameLRO(buf []byte) (LROFrame, error) {
	if t.closed.Load() {
		return LROFrame{}, ErrClosed
	}
	if !t.vnet {
		n, ok, err := t.ReadFrameCsum(buf)
		return LROFrame{N: n, Segs: 1, WireBytes: n, L4Verified: ok}, err
	}
	return t.readVnetFrame(buf, false, true)
}

// readVnetFrame reads through the virtio-net header: the next segment of
// the last super-frame cut, or the next read. With csum a segment's
// transport checksum is computed; without, it is left to the kernel's word
// (verified). With lro a super-frame that fits buf comes whole (the
// segments it stands for counted), read straight into a buf of
// LROBufferSize; otherwise it is cut and its segments come one per call.
func (t *TAPPort) readVnetFrame(buf []byte, csum, lro bool) (LROFrame, error) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	rb, direct := t.gbuf, lro && len(buf) >= LROBufferSize
	if direct {
		rb = buf
	}
	for {
		if t.gso.pending() {
			n, err := t.gso.pop(buf, csum)
			if err != nil {
				t.stats.rxDropTooBig.Add(1)
				return LROFrame{}, err
			}
			t.stats.rxFrames.Add(1)
			t.stats.rxBytes.Add(uint64(n))
			return LROFrame{N: n, Segs: 1, WireBytes: n, L4Verified: !csum}, nil
		}
		n, err := t.read(rb)
		if err != nil {
			return LROFrame{}, t.readError(err)
		}
		if t.rxLost() {
			continue
		}
		var h VnetHdr
		if err := h.Decode(rb[:n]); err != nil {
			t.stats.rxDropBadGSO.Add(1)
			continue
		}
		frame := rb[VnetHdrSize:n]
		if h.GSOType == VnetGSONone {
			if h.Flags&VnetFlagNeedsCsum != 0 && finishCsum(frame, int(h.CsumStart), int(h.CsumOffset)) != nil {
				t.stats.rxDropBadGSO.Add(1)
				continue
			}
			f := LROFrame{Segs: 1, L4Verified: h.Flags&(VnetFlagNeedsCsum|VnetFlagDataValid) != 0 && !csum}
			if direct {
				f.Off, f.N = VnetHdrSize, len(frame)
			} else {
				if len(frame) > len(buf) {
					t.stats.rxDropTooBig.Add(1)
					return LROFrame{}, ErrFrameTooBig
				}
				f.N = copy(buf, frame)
			}
			f.WireBytes = f.N
			t.stats.rxFrames.Add(1)
			t.stats.rxBytes.Add(uint64(f.N))
			return f, nil
		}
		if lro {
			sf, err := parseSuper(&h, frame)
			if err != nil {
				t.stats.rxDropBadGSO.Add(1)
				continue
			}
			if whole := hdr.EthernetSize + len(sf.ip); direct || whole <= len(buf) {
				t.stats.rxGSO.Add(1)
				t.stats.rxFrames.Add(uint64(sf.segs))
				t.stats.rxBytes.Add(uint64(sf.wireBytes()))
				sf.fixLengths()
				f := LROFrame{GSOSize: sf.mss, Segs: sf.segs, WireBytes: sf.wireBytes(), L4Verified: true}
				if direct {
					f.Off, f.N = VnetHdrSize, whole
				} else {
					f.N = copy(buf, frame[:whole])
				}
				return f, nil
			}
			// Too big for the caller: its segments, one per call.
		}
		if err := t.gso.split(&h, frame); err != nil {
			t.stats.rxDropBadGSO.Add(1)
			continue
		}
		t.stats.rxGSO.Add(1)
	}
}

// read reads the next frame (with its virtio-net header, if any) into b:
// polled raw for up to busyPoll, yielding the processor between polls,
// then through the netpoller.
func (t *TAPPort) read(b []byte) (int, error) {
	if t.busyPoll > 0 {
		if n, ok, err := t.poll.spin(t, b); ok {
			return n, err
		}
	}
	return t.file.Read(b)
}

// rawPoll is the busy poll's raw read. Its function and result live here,
// made once at open: a closure per read would put it and its results on
// the heap, an allocation per frame.
type rawPoll struct {
	mu  sync.Mutex
	b   []byte
	n   int
	err error
	fn  func(fd uintptr) bool // readFD, bound once
}

// readFD is one non-blocking read of the descriptor into p.b.
func (p *rawPoll) readFD(fd uintptr) bool {
	p.n, p.err = unix.Read(int(fd), p.b)
	return true // one try: do not wait in the netpoller
}

// spin polls t's descriptor for up to t.busyPoll; ok false: nothing came.
func (p *rawPoll) spin(t *TAPPort, b []byte) (n int, ok bool, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.b = b
	defer func() { p.b = nil }()
	var start time.Time
	for {
		if err := t.raw.Read(p.fn); err != nil {
			return 0, true, err
		}
		if p.err == nil {
			if p.n == 0 {
				return 0, true, io.EOF
			}
			t.stats.rxBusyPollHits.Add(1)
			return p.n, true, nil
		}
		if p.err != unix.EAGAIN {
			return 0, true, &os.PathError{Op: "read", Path: t.file.Name(), Err: p.err}
		}
		if start.IsZero() {
			start = time.Now()
		} else if time.Since(start) >= t.busyPoll {
			return 0, false, nil
		}
		runtime.Gosched()
	}
}

func (t *TAPPort) readError(err error) error {
	if t.closed.Load() || errors.Is(err, os.ErrClosed) {
		return ErrClosed
	}
	if err == io.EOF { // a zero-length read; the tun driver does not produce these
		err = io.ErrUnexpectedEOF
	}
	return fmt.Errorf("tap %s: read: %w", t.name, err)
}

// Close detaches from the device, which removes the interface, and wakes a blocked ReadFrame.
// Closing twice is harmless.
func (t *TAPPort) Close() error {
	if !t.closed.CompareAndSwap(false, true) {
		return nil
	}
	unix.Close(t.ctl)
	return t.file.Close()
}

// Stats returns a snapshot of the port's counters.
func (t *TAPPort) Stats() Stats { return t.stats.snapshot() }

// SetUp brings the interface up or down (like `ip link set NAME up|down`).
func (t *TAPPort) SetUp(up bool) error {
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(t.ctl, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tap %s: get flags: %w", t.name, err)
	}
	flags := ifr.Uint16()
	if up {
		flags |= unix.IFF_UP
	} else {
		flags &^= unix.IFF_UP
	}
	ifr.SetUint16(flags)
	if err := unix.IoctlIfreq(t.ctl, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tap %s: set flags: %w", t.name, err)
	}
	return nil
}

// SetMTU sets the interface MTU (like `ip link set NAME mtu N`).
func (t *TAPPort) SetMTU(mtu int) error {
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return err
	}
	ifr.SetUint32(uint32(mtu))
	if err := unix.IoctlIfreq(t.ctl, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("tap %s: set MTU %d: %w", t.name, mtu, err)
	}
	return nil
}

// MTU returns the interface MTU.
func (t *TAPPort) MTU() (int, error) {
	ifr, err := unix.NewIfreq(t.name)
	if err != nil {
		return 0, err
	}
	if err := unix.IoctlIfreq(t.ctl, unix.SIOCGIFMTU, ifr); err != nil {
		return 0, fmt.Errorf("tap %s: get MTU: %w", t.name, err)
	}
	return int(ifr.Uint32()), nil
}

// HardwareAddr returns the MAC address of the kernel's side of the link, the address frames
// written to the port should carry as destination to reach the host.
func (t *TAPPort) HardwareAddr() (net.HardwareAddr, error) {
	// struct ifreq: name[16], then the union; for SIOCGIFHWADDR a struct sockaddr whose
	// sa_data starts with the address. unix.Ifreq has no accessor for it.
	var req [40]byte
	copy(req[:unix.IFNAMSIZ], t.name)
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(t.ctl), unix.SIOCGIFHWADDR, uintptr(unsafe.Pointer(&req))); errno != 0 {
		return nil, fmt.Errorf("tap %s: get hardware address: %w", t.name, errno)
	}
	mac := make(net.HardwareAddr, 6)
	copy(mac, req[unix.IFNAMSIZ+2:])
	return mac, nil
}

var _ Port = (*TAPPort)(nil)
