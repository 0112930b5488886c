package board

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/split"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
)

// SplitConfig puts a host's NIC in another process (HostConfig.Split).
type SplitConfig struct {
	// Socket is the path of a device's setup socket ('emunic device
	// --socket PATH'). Empty: the host starts a device process of its own,
	// this program run again as a device (see RunSplitChild).
	Socket string
	// Poll uses no eventfds: the device polls its rings and the host its
	// vectors every PollInterval (default 50 µs).
	Poll         bool
	PollInterval time.Duration
	// Link, when set, is the device's port: a SOCK_SEQPACKET socket whose
	// other end is another device's link, so frames go from device process
	// to device process without crossing this one (the port given to
	// NewHost is then nil). The host closes its copy once the device has it.
	Link *os.File
	// ShmLink, when set, is the device's port: one side of a shared-memory
	// link to another device (NewShmLink), so frames go from device to
	// device without a system call while they flow. The port given to
	// NewHost is then nil.
	ShmLink *ShmLinkEnd
	// NoKickWords does not ask for kick words (split.FeatureKickWords):
	// every doorbell and interrupt is an eventfd write, as with a device
	// that lacks the feature.
	NoKickWords bool
	// CommandDoorbells has the host's RDMA verbs ring QPs and arm CQs with
	// the QP_DOORBELL and ARM_CQ commands (posted, in shared memory)
	// rather than with REG_POST writes of the doorbell registers
	// (docs/split.md, "Posted register writes"): a REG_POST is a message
	// the device process must wake for, where a posted command is found
	// by its spinning unit (docs/benchmarks.md has both).
	CommandDoorbells bool
}

// ShmLinkEnd is one side of a shared-memory link between two devices.
type ShmLinkEnd struct {
	Side       int
	Entry      uint32
	Size       int
	Mem        *os.File
	Wake, Peer *os.File // this side's eventfd, the other side's
}

// NewShmLink makes a shared-memory link for frames of an MTU of mtu
// (docs/split.md, LINK): its two ends, for two split hosts' devices.
func NewShmLink(mtu int) (a, b *ShmLinkEnd, err error) {
	entry, size, err := port.ShmLinkGeometry(mtu + port.EthHeaderLen)
	if err != nil {
		return nil, nil, err
	}
	mem, err := port.NewShmLinkMemory(size)
	if err != nil {
		return nil, nil, err
	}
	var fds [2]int
	for i := range fds {
		if fds[i], err = unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK); err != nil {
			mem.Close()
			return nil, nil, fmt.Errorf("shared-memory link: eventfd: %w", err)
		}
	}
	dup := func(f *os.File) *os.File {
		fd, err := unix.Dup(int(f.Fd()))
		if err != nil {
			return nil
		}
		unix.CloseOnExec(fd)
		return os.NewFile(uintptr(fd), f.Name())
	}
	wa, wb := os.NewFile(uintptr(fds[0]), "link-wake-0"), os.NewFile(uintptr(fds[1]), "link-wake-1")
	a = &ShmLinkEnd{Side: 0, Entry: entry, Size: size, Mem: dup(mem), Wake: dup(wa), Peer: dup(wb)}
	b = &ShmLinkEnd{Side: 1, Entry: entry, Size: size, Mem: mem, Wake: wb, Peer: wa}
	if a.Mem == nil || a.Wake == nil || a.Peer == nil {
		return nil, nil, errors.New("shared-memory link: dup failed")
	}
	return a, b, nil
}

func (e *ShmLinkEnd) close() {
	for _, f := range []*os.File{e.Mem, e.Wake, e.Peer} {
		if f != nil {
			f.Close()
		}
	}
}

// SplitEnv is the environment variable that puts every host a program
// makes in split mode (any non-empty value but "0"), so the same test
// suites run in process and split.
const SplitEnv = "EMUNIC_SPLIT"

// splitChildEnv marks a process started as a host's device; its value is
// the setup socket's descriptor number.
const splitChildEnv = "EMUNIC_SPLIT_CHILD"

func splitFromEnv() bool {
	v := os.Getenv(SplitEnv)
	return v != "" && v != "0"
}

// RunSplitChild serves as a host's device when this process was started
// as one (a split host re-runs its own program with the setup socket as an
// inherited descriptor) and then exits; otherwise it returns at once. A
// program that makes split hosts calls it first thing in main, and a test
// package that does in TestMain, so that the same binary can be their
// device process.
func RunSplitChild() {
	v := os.Getenv(splitChildEnv)
	if v == "" {
		return
	}
	fd, err := strconv.Atoi(v)
	if err != nil {
		fmt.Fprintf(os.Stderr, "emunic device: %s=%q: %v\n", splitChildEnv, v, err)
		os.Exit(2)
	}
	f := os.NewFile(uintptr(fd), "setup")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		fmt.Fprintf(os.Stderr, "emunic device: setup socket: %v\n", err)
		os.Exit(2)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		fmt.Fprintf(os.Stderr, "emunic device: setup socket is not a unix socket\n")
		os.Exit(2)
	}
	srv := split.NewServer(split.ServerConfig{})
	if err := srv.ServeConn(uc); err != nil {
		os.Exit(1)
	}
	os.Exit(0)
}

// splitDevice is a Device in another process: the driver's view of it is
// the same as of an in-process one (rings in host memory, a doorbell,
// interrupt vectors), only the memory is a memfd both map and the doorbell
// and vectors are eventfds.
type splitDevice struct {
	c     *split.Conn
	child *exec.Cmd
	mac   [6]byte
	mtu   int
	poll  time.Duration // 0: eventfds

	memfd    *os.File
	mem      []byte
	arena    *rings.Arena
	features uint64 // granted in HELLO
	badWords atomic.Uint64
	enabled  atomic.Bool // the register block enabled the device: Stop resets it first
	txCsum   bool        // the bring-up enabled FeatTxCsum (set in Start)
	rdma     splitRDMA   // the RDMA doorbell registers, over REG_POST (split_rdma_linux.go)

	mu      sync.Mutex
	seq     uint32
	replies chan splitReply
	dead    chan struct{}
	err     error
	onDead  func(error)

	door    rings.Doorbell
	efds    []*split.EventFD
	stopP   chan struct{}
	wg      sync.WaitGroup
	stop    sync.Once
	spliced <-chan struct{}
}

type splitReply struct {
	h split.Header
	r split.Reply
}

// dialSplit connects to (or starts) the device process, gives it host
// memory of size bytes and returns the device and that memory as an arena.
func dialSplit(sc SplitConfig, size int, withPort bool) (*splitDevice, *rings.Arena, error) {
	d := &splitDevice{replies: make(chan splitReply, 1), dead: make(chan struct{})}
	d.rdma.off = sc.CommandDoorbells
	if sc.Poll {
		d.poll = sc.PollInterval
		if d.poll <= 0 {
			d.poll = split.DefaultPollMicros * time.Microsecond
		}
	}
	if err := d.connect(sc.Socket); err != nil {
		return nil, nil, err
	}
	go d.reader()
	portFeature := split.FeaturePortFD
	switch {
	case sc.ShmLink != nil:
		portFeature = split.FeatureShmLink
	case !withPort:
		portFeature = 0 // the device's own port
	}
	need := split.FeatureEventFD | portFeature
	if sc.Poll {
		need = split.FeaturePoll | portFeature
	}
	want := need
	if !sc.Poll && !sc.NoKickWords {
		want |= split.FeatureKickWords // used if granted
	}
	r, err := d.request(split.MsgHello, split.EncodeU64(want))
	if err != nil {
		d.close()
		return nil, nil, err
	}
	if r.Value&need != need {
		d.close()
		return nil, nil, fmt.Errorf("split device: features %#x, the host needs %#x", r.Value, need)
	}
	d.features = r.Value & want
	size = (size + rings.CacheLine - 1) &^ (rings.CacheLine - 1)
	fd, err := unix.MemfdCreate("emunic-host-memory", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		d.close()
		return nil, nil, fmt.Errorf("host memory: memfd: %w", err)
	}
	d.memfd = os.NewFile(uintptr(fd), "emunic-host-memory")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		d.close()
		return nil, nil, fmt.Errorf("host memory: %d bytes: %w", size, err)
	}
	// Sealed against shrinking: the device refuses memory it could lose
	// pages of (a SIGBUS in the device process).
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
		d.close()
		return nil, nil, fmt.Errorf("host memory: seal: %w", err)
	}
	if d.mem, err = unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		d.close()
		return nil, nil, fmt.Errorf("host memory: mmap: %w", err)
	}
	arena, err := rings.NewArenaOn(d.mem)
	if err != nil {
		d.close()
		return nil, nil, err
	}
	d.arena = arena
	if _, err := d.request(split.MsgMemory, split.EncodeU64(uint64(size)), d.memfd); err != nil {
		d.close()
		return nil, nil, err
	}
	return d, arena, nil
}

func (d *splitDevice) connect(path string) error {
	if path != "" {
		c, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
		if err != nil {
			return fmt.Errorf("split device %s: %w", path, err)
		}
		d.c = split.NewConn(c)
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return fmt.Errorf("split device: this program's path: %w", err)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("split device: socket pair: %w", err)
	}
	mine, theirs := os.NewFile(uintptr(fds[0]), "setup"), os.NewFile(uintptr(fds[1]), "setup-device")
	defer theirs.Close()
	cmd := exec.Command(exe, "-test.run=^$") // a test binary runs no tests; its TestMain serves first (RunSplitChild)
	// The host and its device process share the machine as the host and an
	// in-process device share one Go scheduler: half the CPUs each. With
	// both runtimes sized for every CPU, their spinning threads
	// oversubscribe the cores and a command's round trip waits for OS time
	// slices (153 µs against 2.8 µs on two cores).
	procs := max(1, runtime.NumCPU()/2)
	cmd.Env = append(os.Environ(), splitChildEnv+"=3", SplitEnv+"=0", "GOMAXPROCS="+strconv.Itoa(procs))
	cmd.ExtraFiles = []*os.File{theirs}
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		mine.Close()
		return fmt.Errorf("split device: start %s: %w", exe, err)
	}
	d.child = cmd
	c, err := net.FileConn(mine)
	mine.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		return err
	}
	d.c = split.NewConn(c.(*net.UnixConn))
	return nil
}

// reader owns the socket's receive side: replies go to the waiting
// request; the socket closing means the device died (or was told to go).
func (d *splitDevice) reader() {
	for {
		h, body, files, err := d.c.Recv()
		for _, f := range files {
			f.Close() // the device never sends descriptors
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = tcpstack.ErrDeviceGone
			} else {
				err = fmt.Errorf("%w: %v", tcpstack.ErrDeviceGone, err)
			}
			d.die(err)
			return
		}
		var r split.Reply
		if h.Type&split.MsgReplyBit == 0 || r.Decode(body) != nil {
			d.die(fmt.Errorf("%w: the device sent a malformed message (%v)", tcpstack.ErrDeviceGone, h.Type))
			return
		}
		if h.Type == split.MsgRegPost|split.MsgReplyBit {
			// A refused doorbell register write: no request waits.
			if err := d.rdma.refused(r); err != nil {
				d.die(fmt.Errorf("%w: %v", tcpstack.ErrDeviceGone, err))
				return
			}
			continue
		}
		select {
		case d.replies <- splitReply{h, r}:
		default:
			d.die(fmt.Errorf("%w: the device sent an unrequested reply (%v)", tcpstack.ErrDeviceGone, h.Type))
			return
		}
	}
}

func (d *splitDevice) die(err error) {
	d.mu.Lock()
	select {
	case <-d.dead:
		d.mu.Unlock()
		return
	default:
	}
	d.err = err
	close(d.dead)
	f := d.onDead
	d.mu.Unlock()
	if f != nil {
		f(err)
	}
}

// OnGone implements tcpstack.GoneNotifier: f learns when the device
// process goes (at once if it has).
func (d *splitDevice) OnGone(f func(error)) {
	d.mu.Lock()
	d.onDead = f
	d.mu.Unlock()
	if err := d.Err(); err != nil {
		go f(err)
	}
}

// newSplit starts (or connects to) the device process, gives it host
// memory of size bytes, its configuration dc and its port (p, or one of
// sc's links), and returns it with that memory as an arena. p is closed
// on an error.
func newSplit(sc SplitConfig, dc nic.Config, size int, p port.Port) (*splitDevice, *rings.Arena, error) {
	sd, mem, err := dialSplit(sc, size, p != nil || sc.Link != nil)
	if err != nil {
		closePort(p)
		return nil, nil, err
	}
	links := 0
	for _, set := range []bool{p != nil, sc.Link != nil, sc.ShmLink != nil} {
		if set {
			links++
		}
	}
	// No port at all: the device has one of its own ('emunic device
	// --tap'), which only a device at a socket path can.
	if links > 1 || links == 0 && sc.Socket == "" {
		sd.Stop()
		closePort(p)
		return nil, nil, errors.New("board: a split host takes at most one of a port, a device link (SplitConfig.Link) or a shared-memory link (SplitConfig.ShmLink), and none only for a device at a socket path with a port of its own")
	}
	if err := sd.configure(dc, p, sc.Link, sc.ShmLink); err != nil {
		sd.Stop()
		closePort(p)
		return nil, nil, err
	}
	return sd, mem, nil
}

// Err is why the device is gone, or nil.
func (d *splitDevice) Err() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.err
}

// request sends one request and waits (at most 10 s) for its reply.
func (d *splitDevice) request(t split.MsgType, body []byte, files ...*os.File) (split.Reply, error) {
	d.mu.Lock()
	d.seq++
	seq := d.seq
	d.mu.Unlock()
	if err := d.c.Send(t, seq, body, files...); err != nil {
		return split.Reply{}, fmt.Errorf("split device: send %v: %w", t, err)
	}
	select {
	case rp := <-d.replies:
		if rp.h.Type != t|split.MsgReplyBit || rp.h.Seq != seq {
			return split.Reply{}, fmt.Errorf("split device: reply %v #%d to %v #%d", rp.h.Type, rp.h.Seq, t, seq)
		}
		return rp.r, rp.r.Err(t)
	case <-d.dead:
		return split.Reply{}, d.Err()
	case <-time.After(10 * time.Second):
		return split.Reply{}, fmt.Errorf("split device: no reply to %v in 10 s", t)
	}
}

// configure sends the device's configuration and its port: p, spliced to
// a socket pair whose other end goes to the device.
func (d *splitDevice) configure(cfg nic.Config, p port.Port, link *os.File, shm *ShmLinkEnd) error {
	body, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	if shm != nil {
		_, err := d.request(split.MsgLink, split.EncodeLink(shm.Side, shm.Entry, uint64(shm.Size)), shm.Mem, shm.Wake, shm.Peer)
		shm.close()
		if err != nil {
			return err
		}
		r, err := d.request(split.MsgConfig, body)
		if err != nil {
			return err
		}
		d.mac, d.mtu = cfg.MAC, int(r.Value)
		return nil
	}
	if link != nil {
		r, err := d.request(split.MsgConfig, body, link)
		link.Close()
		if err != nil {
			return err
		}
		d.mac, d.mtu = cfg.MAC, int(r.Value)
		return nil
	}
	if p == nil { // the device's own port
		r, err := d.request(split.MsgConfig, body)
		if err != nil {
			return err
		}
		d.mac, d.mtu = cfg.MAC, int(r.Value)
		return nil
	}
	mine, theirs, err := port.SocketPair()
	if err != nil {
		return err
	}
	r, err := d.request(split.MsgConfig, body, theirs.File())
	theirs.Close()
	if err != nil {
		mine.Close()
		return err
	}
	d.spliced = port.Splice(p, mine)
	d.mac, d.mtu = cfg.MAC, int(r.Value)
	return nil
}

func (d *splitDevice) MAC() [6]byte { return d.mac }
func (d *splitDevice) MTU() int     { return d.mtu }

// TxChecksum implements tcpstack.TxChecksummer: the bring-up enables
// every feature the device has, transmit checksum offload among them.
func (d *splitDevice) TxChecksum() bool { return d.txCsum }

// Doorbell is the device's doorbell register: an eventfd write (or, when
// polling, nothing: the device looks by itself).
func (d *splitDevice) Doorbell() rings.Doorbell { return d }

// Kick rings the doorbell.
func (d *splitDevice) Kick() {
	if d.door != nil {
		d.door.Kick()
	}
}

// Start hands the device its vectors, then programs its register block
// (docs/bar0.md) as a driver would: reset, features, the rings' bases and
// sizes, enable, and the status read back.
func (d *splitDevice) Start(rc rings.RingConfig, vec rings.Vectors) error {
	if d.poll > 0 {
		us := uint32(d.poll / time.Microsecond)
		if _, err := d.request(split.MsgVectors, split.EncodeVectors(split.VectorPoll, us)); err != nil {
			return err
		}
		d.stopP = make(chan struct{})
		d.wg.Add(1)
		go func() {
			defer d.wg.Done()
			split.PollEvery(d.poll, d.stopP, func() {
				for _, v := range []rings.Doorbell{vec.Notify, vec.TxSpace, vec.Command} {
					if v != nil {
						v.Kick()
					}
				}
			})
		}()
	} else {
		for range 4 {
			e, err := split.NewEventFD()
			if err != nil {
				return err
			}
			d.efds = append(d.efds, e)
		}
		files := []*os.File{d.efds[0].File(), d.efds[1].File(), d.efds[2].File(), d.efds[3].File()}
		body := split.EncodeVectors(split.VectorEventFD, 0)
		if d.features&split.FeatureKickWords != 0 {
			// A kick word per eventfd (docs/split.md): a doorbell or
			// interrupt while the other side has not yet answered the
			// last one costs an atomic add, not a write and a wake-up.
			addr, err := d.arena.Alloc(split.KickWordsSize, split.KickWordsAlign)
			if err != nil {
				return fmt.Errorf("split device: kick words: %w", err)
			}
			words, err := d.arena.Map(addr, split.KickWordsSize)
			if err != nil {
				return fmt.Errorf("split device: kick words: %w", err)
			}
			clear(words)
			for i, e := range d.efds {
				e.UseWord(split.KickWord(words, i), &d.badWords)
			}
			body = split.EncodeVectorsKick(split.VectorEventFD, 0, addr)
		}
		if _, err := d.request(split.MsgVectors, body, files...); err != nil {
			return err
		}
		d.door = d.efds[0]
		for i, v := range []rings.Doorbell{vec.Notify, vec.TxSpace, vec.Command} {
			e := d.efds[i+1]
			d.wg.Add(1)
			go func() { defer d.wg.Done(); e.Forward(v) }()
		}
	}
	return d.enable(rc)
}

// enable programs the register block and enables the device.
func (d *splitDevice) enable(rc rings.RingConfig) error {
	if v, err := d.readReg(rings.RegVersion); err != nil {
		return err
	} else if v>>16 != rings.Bar0VersionMajor {
		return fmt.Errorf("split device: register map version %d.%d, want %d.x", v>>16, v&0xFFFF, rings.Bar0VersionMajor)
	}
	feat, err := d.readReg(rings.RegDevFeatures)
	if err != nil {
		return err
	}
	for _, w := range rings.Bar0BringUp(rc, rings.Bar0Feature(feat)) {
		if _, err := d.request(split.MsgRegWrite, split.EncodeRegWrite(w.Off, w.Val)); err != nil {
			return err
		}
	}
	d.txCsum = rings.Bar0Feature(feat)&rings.FeatTxCsum != 0
	st, err := d.readReg(rings.RegStatus)
	if err == nil && st&uint32(rings.StatusEnabled) == 0 {
		err = fmt.Errorf("split device: not enabled after enable (status %#x)", st)
	}
	if err == nil {
		d.enabled.Store(true)
		d.rdma.enabled(d, rings.Bar0Feature(feat))
	}
	return err
}

func (d *splitDevice) readReg(off uint32) (uint32, error) {
	r, err := d.request(split.MsgRegRead, split.EncodeRegRead(off))
	return uint32(r.Value), err
}

// Stop ends the session: the device process (ours) exits, a shared one
// waits for its next host. Safe to call twice.
func (d *splitDevice) Stop() error {
	d.stop.Do(d.close)
	return nil
}

func (d *splitDevice) close() {
	if d.c != nil {
		if d.enabled.Load() && d.Err() == nil {
			// Reset on remove, as a driver does: the device stops
			// before the socket closes, so it counts an orderly detach,
			// not a host gone.
			d.request(split.MsgRegWrite, split.EncodeRegWrite(rings.RegCtrl, uint32(rings.CtrlReset)))
		}
		d.c.Close() // the device sees its host go and stops
	}
	if d.child != nil {
		done := make(chan struct{})
		go func() { d.child.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			d.child.Process.Kill()
			<-done
		}
	}
	if d.stopP != nil {
		close(d.stopP)
	}
	for _, e := range d.efds {
		e.Close()
	}
	d.wg.Wait()
	if d.spliced != nil {
		<-d.spliced
	}
	if d.memfd != nil {
		d.memfd.Close()
	}
	// The arena's memory stays mapped: the host's buffers may still be
	// referenced by late readers; it goes with the process.
}

// RunTests is the TestMain of a test package that makes hosts: with
// EMUNIC_SPLIT set each host re-runs the test binary as its device
// process, which serves here (RunSplitChild) instead of running the
// tests. Use it as func TestMain(m *testing.M) { board.RunTests(m) }.
func RunTests(m interface{ Run() int }) {
	RunSplitChild()
	os.Exit(m.Run())
}
