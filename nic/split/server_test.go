package split

import (
	"encoding/json"
	"errors"
	"math/rand"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// testServer serves on a socket in a temporary directory.
func testServer(t *testing.T) (*Server, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "dev.sock")
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	s := NewServer(ServerConfig{})
	done := make(chan struct{})
	go func() { s.Serve(l); close(done) }()
	t.Cleanup(func() { l.Close(); <-done })
	return s, path
}

type rawHost struct {
	t   *testing.T
	c   *Conn
	seq uint32
}

func dialRaw(t *testing.T, path string) *rawHost {
	t.Helper()
	uc, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: path, Net: "unixpacket"})
	if err != nil {
		t.Fatal(err)
	}
	h := &rawHost{t: t, c: NewConn(uc)}
	t.Cleanup(func() { h.c.Close() })
	return h
}

// req sends a request and returns the reply.
func (h *rawHost) req(ty MsgType, body []byte, files ...*os.File) Reply {
	h.t.Helper()
	h.seq++
	if err := h.c.Send(ty, h.seq, body, files...); err != nil {
		h.t.Fatal(err)
	}
	return h.reply(ty)
}

func (h *rawHost) reply(ty MsgType) Reply {
	h.t.Helper()
	hd, body, files, err := h.c.Recv()
	closeAll(files)
	if err != nil {
		h.t.Fatalf("reply to %v: %v", ty, err)
	}
	var r Reply
	if err := r.Decode(body); err != nil || hd.Type&MsgReplyBit == 0 {
		h.t.Fatalf("bad reply %v: %v", hd.Type, err)
	}
	return r
}

func memfd(t *testing.T, size int) (*os.File, []byte) {
	return memfdSealed(t, size, true)
}

func memfdSealed(t *testing.T, size int, seal bool) (*os.File, []byte) {
	t.Helper()
	fd, err := unix.MemfdCreate("test", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "memfd")
	if err := unix.Ftruncate(fd, int64(size)); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, unix.F_SEAL_SHRINK); err != nil {
			t.Fatal(err)
		}
	}
	mem, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(mem); f.Close() })
	return f, mem
}

// eventFDs makes VECTORS' four eventfds (closed when the test ends) and
// their files.
func eventFDs(t *testing.T) ([]*EventFD, []*os.File) {
	t.Helper()
	var efds []*EventFD
	var files []*os.File
	for range 4 {
		e, err := NewEventFD()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { e.Close() })
		efds, files = append(efds, e), append(files, e.File())
	}
	return efds, files
}

// attached is what rawHost.attach set up: the host's view of the shared
// memory, the far end of the device's port, and the host's eventfds.
type attached struct {
	mem  []byte
	wire *port.SocketPort
	efds []*EventFD
}

// attach brings a raw host up to the register block: HELLO with eventfds
// and a port fd, 1 MiB of MEMORY, CONFIG with MAC 02:00:00:00:00:mac and
// one end of a socket pair as the port (the other end is returned, closed
// at cleanup), and VECTORS.
func (h *rawHost) attach(mac byte) attached {
	t := h.t
	t.Helper()
	want(t, "HELLO", h.req(MsgHello, EncodeU64(FeatureEventFD|FeaturePortFD)), StatusOK)
	f, mem := memfd(t, 1<<20)
	want(t, "MEMORY", h.req(MsgMemory, EncodeU64(1<<20), f), StatusOK)
	pa, pb, err := port.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pa.Close() })
	cfg, _ := json.Marshal(nic.Config{MAC: [6]byte{2, 0, 0, 0, 0, mac}})
	want(t, "CONFIG", h.req(MsgConfig, cfg, pb.File()), StatusOK)
	pb.Close()
	hostEFDs, efds := eventFDs(t)
	want(t, "VECTORS", h.req(MsgVectors, EncodeVectors(VectorEventFD, 0), efds...), StatusOK)
	return attached{mem: mem, wire: pa, efds: hostEFDs}
}

// regW writes a register and wants its reply status (and, when
// refused, the register block's error code).
func (h *rawHost) regW(what string, off, v uint32, st ReplyStatus, code rings.Bar0ErrCode) {
	h.t.Helper()
	r := h.req(MsgRegWrite, EncodeRegWrite(off, v))
	want(h.t, what, r, st)
	if st == StatusBadRegister && rings.Bar0ErrCode(r.Value) != code {
		h.t.Fatalf("%s: error code %v, want %v", what, rings.Bar0ErrCode(r.Value), code)
	}
}

// regR reads a register.
func (h *rawHost) regR(off uint32) uint32 {
	h.t.Helper()
	r := h.req(MsgRegRead, EncodeRegRead(off))
	want(h.t, "REG_READ", r, StatusOK)
	return uint32(r.Value)
}

// enable places the rings through the register block and enables the
// device.
func (h *rawHost) enable(ls [4]rings.Layout) {
	h.t.Helper()
	for _, w := range rings.Bar0BringUp(rings.Bar0RingConfig(ls), 0) {
		h.regW("bring-up", w.Off, w.Val, StatusOK, 0)
	}
	if st := h.regR(rings.RegStatus); st&uint32(rings.StatusEnabled) == 0 {
		h.t.Fatalf("status %#x after enable", st)
	}
}

// testRings are four rings of 16 entries at the start of the memory.
func testRings() [4]rings.Layout {
	lay := func(base rings.Addr, es uint32) rings.Layout {
		return rings.Layout{Base: base, Count: 16, EntrySize: es}
	}
	return [4]rings.Layout{lay(rings.ArenaBase, rings.CommandEntrySize), lay(rings.ArenaBase+0x1000, rings.NotificationEntrySize),
		lay(rings.ArenaBase+0x2000, rings.TxDescSize), lay(rings.ArenaBase+0x3000, rings.RxDescSize)}
}

func want(t *testing.T, what string, r Reply, st ReplyStatus) {
	t.Helper()
	if r.Status != st {
		t.Fatalf("%s: %v (%s), want %v", what, r.Status, r.Msg, st)
	}
}

// TestServerBadInput: every kind of bad request gets its status and a
// count, the session goes on, and a well-formed host is served after.
func TestServerBadInput(t *testing.T) {
	s, path := testServer(t)
	h := dialRaw(t, path)

	// Malformed at the codec: bad magic, a length that lies, a body over
	// the limit, an unknown type.
	raw := func(b []byte) Reply {
		if _, _, err := h.c.c.WriteMsgUnix(b, nil, nil); err != nil {
			t.Fatal(err)
		}
		return h.reply(0)
	}
	m := Message(MsgHello, 1, EncodeU64(FeatureEventFD))
	bad := append([]byte(nil), m...)
	bad[0] ^= 0xFF
	want(t, "bad magic", raw(bad), StatusBadMessage)
	bad = append([]byte(nil), m...)
	le.PutUint32(bad[HdrOffLen:], 4)
	want(t, "length lies", raw(bad), StatusBadMessage)
	want(t, "short", raw(m[:HeaderSize-1]), StatusBadMessage)
	bad = append([]byte(nil), m...)
	le.PutUint16(bad[HdrOffVersion:], 9)
	want(t, "version", raw(bad), StatusBadMessage)
	want(t, "unknown type", h.req(0x55, nil), StatusBadMessage)

	// Out of order: anything but HELLO first, RESET before HELLO.
	want(t, "REG_WRITE first", h.req(MsgRegWrite, EncodeRegWrite(rings.RegCtrl, 1)), StatusOutOfOrder)
	want(t, "RESET first", h.req(MsgReset, nil), StatusOutOfOrder)
	// HELLO without a port: this server has none of its own.
	want(t, "HELLO without port", h.req(MsgHello, EncodeU64(FeatureEventFD)), StatusUnsupported)
	want(t, "HELLO bad body", h.req(MsgHello, []byte{1, 2, 3}), StatusBadMessage)
	r := h.req(MsgHello, EncodeU64(FeatureEventFD|FeaturePortFD|1<<40))
	want(t, "HELLO", r, StatusOK)
	if r.Value != FeatureEventFD|FeaturePortFD {
		t.Fatalf("features granted %#x", r.Value)
	}
	want(t, "HELLO twice", h.req(MsgHello, EncodeU64(FeatureEventFD)), StatusOutOfOrder)

	// MEMORY: no fd, a memfd smaller than announced, not a multiple of a
	// cache line.
	want(t, "MEMORY without fd", h.req(MsgMemory, EncodeU64(1<<20)), StatusBadMessage)
	uf, _ := memfdSealed(t, 1<<20, false)
	want(t, "MEMORY not sealed", h.req(MsgMemory, EncodeU64(1<<20), uf), StatusBadMemory)
	f, _ := memfd(t, 1<<20)
	want(t, "MEMORY too small", h.req(MsgMemory, EncodeU64(2<<20), f), StatusBadMemory)
	want(t, "MEMORY odd size", h.req(MsgMemory, EncodeU64(1000), f), StatusBadMemory)
	want(t, "MEMORY", h.req(MsgMemory, EncodeU64(1<<20), f), StatusOK)

	// CONFIG: not JSON, a bad MTU, a port that is not a packet socket.
	want(t, "CONFIG garbage", h.req(MsgConfig, []byte("{"), nil...), StatusBadConfig)
	pa, pb, err := port.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	bmtu, _ := json.Marshal(nic.Config{MTU: 10})
	want(t, "CONFIG bad MTU", h.req(MsgConfig, bmtu, pb.File()), StatusBadConfig)
	want(t, "CONFIG no port", h.req(MsgConfig, []byte("{}")), StatusBadConfig)
	cfg, _ := json.Marshal(nic.Config{MAC: [6]byte{2, 0, 0, 0, 0, 9}})
	want(t, "CONFIG", h.req(MsgConfig, cfg, pb.File()), StatusOK)
	pb.Close()

	// VECTORS: eventfd mode without the fds, polling not negotiated.
	want(t, "VECTORS no fds", h.req(MsgVectors, EncodeVectors(VectorEventFD, 0)), StatusBadMessage)
	want(t, "VECTORS poll", h.req(MsgVectors, EncodeVectors(VectorPoll, 10)), StatusUnsupported)
	want(t, "VECTORS mode", h.req(MsgVectors, EncodeVectors(9, 0)), StatusBadMessage)

	// Registers before the vectors: an enable has nothing to interrupt.
	ls := testRings()
	if st := h.regR(rings.RegStatus); st != uint32(rings.StatusMemory) {
		t.Fatalf("status %#x before VECTORS", st)
	}
	for r, l := range ls {
		h.regW("base", rings.Bar0Ring(r, rings.RingRegBaseLo), uint32(l.Base), StatusOK, 0)
		h.regW("count", rings.Bar0Ring(r, rings.RingRegCount), l.Count, StatusOK, 0)
	}
	h.regW("enable without vectors", rings.RegCtrl, uint32(rings.CtrlEnable), StatusBadRegister, rings.ErrEnableFailed)
	_, efds := eventFDs(t)
	want(t, "VECTORS", h.req(MsgVectors, EncodeVectors(VectorEventFD, 0), efds...), StatusOK)

	// Register accesses out of range, read-only, bad values, rings
	// outside the memory, a doorbell for rings never set up: each
	// refused with its code and counted, and the device serves on.
	regs := s.Registers()
	h.regW("out of range", rings.Bar0Bytes+4, 1, StatusBadRegister, rings.ErrBadOffset)
	h.regW("unaligned", rings.RegCtrl+1, 1, StatusBadRegister, rings.ErrBadOffset)
	h.regW("read-only", rings.RegMTU, 9000, StatusBadRegister, rings.ErrReadOnly)
	h.regW("count", rings.Bar0Ring(0, rings.RingRegCount), 15, StatusBadRegister, rings.ErrBadValue)
	h.regW("doorbell never set up", rings.Bar0Ring(2, rings.RingRegDoorbell), 1, StatusBadRegister, rings.ErrNoDoorbell)
	want(t, "REG_WRITE short", h.req(MsgRegWrite, EncodeRegWrite(0, 0)[:6]), StatusBadMessage)
	want(t, "REG_READ long", h.req(MsgRegRead, EncodeRegWrite(0, 0)), StatusBadMessage)
	if r := h.req(MsgRegRead, EncodeRegRead(0x044)); r.Status != StatusBadRegister || r.Value != uint64(rings.ErrBadOffset) {
		t.Fatalf("reserved register read: %v %d", r.Status, r.Value)
	}
	h.regW("ring outside", rings.Bar0Ring(2, rings.RingRegBaseLo), uint32(rings.ArenaBase+1<<20-64), StatusOK, 0)
	h.regW("enable outside", rings.RegCtrl, uint32(rings.CtrlEnable), StatusBadRegister, rings.ErrRingOutside)
	h.regW("ring at 0", rings.Bar0Ring(2, rings.RingRegBaseLo), 0, StatusOK, 0)
	h.regW("enable at 0", rings.RegCtrl, uint32(rings.CtrlEnable), StatusBadRegister, rings.ErrRingOutside)
	if h.regR(rings.RegError) != uint32(rings.ErrRingOutside) || h.regR(rings.RegStatus)&uint32(rings.StatusFailed) == 0 {
		t.Fatal("RegError or StatusFailed after a refused enable")
	}
	h.enable(ls)
	h.regW("ring base while enabled", rings.Bar0Ring(1, rings.RingRegBaseLo), uint32(rings.ArenaBase+0x8000), StatusBadRegister, rings.ErrWrongState)
	h.regW("doorbell", rings.Bar0Ring(0, rings.RingRegDoorbell), 1, StatusOK, 0)
	for id, n := range map[rings.RegCounterID]uint32{rings.RegCtrBadOffset: 3, rings.RegCtrReadOnly: 1, rings.RegCtrBadValue: 1,
		rings.RegCtrNoDoorbell: 1, rings.RegCtrRingOutside: 2, rings.RegCtrEnableFailed: 1, rings.RegCtrWrongState: 1, rings.RegCtrEnables: 1} {
		if got := h.regR(rings.Bar0Counter(id)); got != n || regs.Counter(id) != n {
			t.Errorf("register counter %v: %d, want %d", id, got, n)
		}
	}

	st := s.Stats()
	if st.BadMessages < 10 || st.OutOfOrder != 3 || st.Refused < 8 || st.Started != 1 || st.BadRegister != 10 {
		t.Fatalf("server counters %+v", st)
	}
	// RESET drops the session's device and memory: MEMORY is next again.
	want(t, "RESET", h.req(MsgReset, nil), StatusOK)
	want(t, "CONFIG after RESET", h.req(MsgConfig, cfg), StatusOutOfOrder)
	if s.Device() != nil || regs.Enabled() || regs.Counter(rings.RegCtrHostGone) != 0 {
		t.Fatal("RESET left the device running, or counted a host gone")
	}
}

// TestServerNextHostAfterDeath: a host that vanishes mid-transfer (its
// socket closed with the device running and commands in flight) is
// counted and frees the device for the next host, which finds every
// register at its reset value and gets a fresh device; one host disables
// and enables again on the way.
func TestServerNextHostAfterDeath(t *testing.T) {
	s, path := testServer(t)
	for i := range 3 {
		h := dialRaw(t, path)
		at := h.attach(byte(i))
		mem, pa, hostEFDs := at.mem, at.wire, at.efds
		if h.regR(rings.RegCtrl) != 0 || h.regR(rings.Bar0Ring(0, rings.RingRegCount)) != 0 {
			t.Fatalf("host %d found the last host's registers", i)
		}
		h.enable(testRings())
		if s.Device() == nil {
			t.Fatal("no running device after enable")
		}
		if s.Device().TxChecksum() {
			t.Fatal("transmit checksum offload on for a driver that did not enable FeatTxCsum")
		}
		if i == 1 {
			// A disable and an enable: the device is built afresh on
			// the registers (FeatTxCsum enabled this time) and a new
			// port on the same wire.
			h.regW("disable", rings.RegCtrl, 0, StatusOK, 0)
			if s.Device() != nil {
				t.Fatal("a device still runs after disable")
			}
			h.regW("features", rings.RegDrvFeatures, uint32(rings.FeatTxCsum), StatusOK, 0)
			h.regW("enable again", rings.RegCtrl, uint32(rings.CtrlEnable), StatusOK, 0)
			if s.Device() == nil {
				t.Fatal("no device after the second enable")
			}
			if !s.Device().TxChecksum() {
				t.Fatal("FeatTxCsum enabled, but the device refuses TxCsum")
			}
		}
		// Mid-transfer: commands posted and the doorbell rung, and the
		// host dies before they complete.
		arena, err := rings.NewArenaOn(mem)
		if err != nil {
			t.Fatal(err)
		}
		cmd, err := rings.NewProducer(arena, testRings()[rings.Bar0RingCommand], 1, hostEFDs[0])
		if err != nil {
			t.Fatal(err)
		}
		for n := range 8 {
			e := cmd.Next()
			if e == nil {
				break
			}
			c := rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn, Tag: uint64(n)}
			c.Encode(rings.CommandEntry(e))
			cmd.Commit()
		}
		cmd.Publish()
		hostEFDs[0].Kick()
		// The host dies: its socket closes with the device running.
		h.c.Close()
		// The device's port goes down with the session.
		buf := make([]byte, 2048)
		pa.ReadFrame(buf) // returns once the device closed its end
		pa.Close()
		deadline := time.Now().Add(5 * time.Second)
		for s.Device() != nil || s.Stats().HostsGone != uint64(i+1) {
			if time.Now().After(deadline) {
				t.Fatalf("session %d not torn down: %+v", i, s.Stats())
			}
			time.Sleep(time.Millisecond)
		}
	}
	if st := s.Stats(); st.Sessions != 3 || st.Started != 4 || s.Registers().Counter(rings.RegCtrHostGone) != 3 {
		t.Fatalf("counters %+v, hosts gone %d", st, s.Registers().Counter(rings.RegCtrHostGone))
	}
}

func TestHeaderCodec(t *testing.T) {
	m := Message(MsgRegWrite, 77, make([]byte, RegWriteBodySize))
	var h Header
	if err := h.Decode(m); err != nil || h.Type != MsgRegWrite || h.Seq != 77 || h.Len != RegWriteBodySize {
		t.Fatalf("%+v %v", h, err)
	}
	for n := range len(m) {
		if err := h.Decode(m[:n]); err == nil {
			t.Fatalf("prefix of %d bytes accepted", n)
		}
	}
	big := Message(MsgConfig, 1, make([]byte, MaxBody+1))
	if err := h.Decode(big); !errors.Is(err, ErrTooLong) {
		t.Fatalf("oversize body: %v", err)
	}
}

// countKicks counts the kicks it forwards to a bell.
type countKicks struct {
	n    atomic.Uint64
	bell *rings.Bell
}

func (c *countKicks) Kick() { c.n.Add(1); c.bell.Kick() }

// TestServerKickWords: VECTORS refuses kick words that are not negotiated,
// in polling mode, unaligned or outside the memory; with them, commands
// complete with the doorbell and the command vector going through the
// words, the device takes every doorbell word it is rung for, the host
// receives exactly the command interrupts the device raised, and garbage in
// the doorbell word is counted while the device keeps serving.
func TestServerKickWords(t *testing.T) {
	s, path := testServer(t)
	h := dialRaw(t, path)
	all := FeatureEventFD | FeaturePortFD | FeaturePoll | FeatureKickWords
	if r := h.req(MsgHello, EncodeU64(all)); r.Status != StatusOK || r.Value != all {
		t.Fatalf("HELLO: %v %#x", r.Status, r.Value)
	}
	const size = 1 << 20
	f, mem := memfd(t, size)
	want(t, "MEMORY", h.req(MsgMemory, EncodeU64(size), f), StatusOK)
	arena, err := rings.NewArenaOn(mem)
	if err != nil {
		t.Fatal(err)
	}
	pa, pb, err := port.SocketPair()
	if err != nil {
		t.Fatal(err)
	}
	defer pa.Close()
	cfg, _ := json.Marshal(nic.Config{MAC: [6]byte{2, 0, 0, 0, 0, 7}})
	want(t, "CONFIG", h.req(MsgConfig, cfg, pb.File()), StatusOK)
	pb.Close()
	ls := testRings()

	efds, files := eventFDs(t)
	words := rings.ArenaBase + 0x8000
	want(t, "VECTORS words while polling", h.req(MsgVectors, EncodeVectorsKick(VectorPoll, 0, words)), StatusBadMessage)
	want(t, "VECTORS words unaligned", h.req(MsgVectors, EncodeVectorsKick(VectorEventFD, 0, words+4), files...), StatusBadMemory)
	want(t, "VECTORS words outside", h.req(MsgVectors, EncodeVectorsKick(VectorEventFD, 0, rings.ArenaBase+size-64), files...), StatusBadMemory)
	want(t, "VECTORS words below", h.req(MsgVectors, EncodeVectorsKick(VectorEventFD, 0, 64), files...), StatusBadMemory)
	want(t, "VECTORS bad size", h.req(MsgVectors, EncodeVectorsKick(VectorEventFD, 0, words)[:12], files...), StatusBadMessage)
	if st := s.Stats(); st.BadMessages != 2 || st.Refused != 3 {
		t.Fatalf("refusals not counted: %+v", st)
	}
	want(t, "VECTORS", h.req(MsgVectors, EncodeVectorsKick(VectorEventFD, 0, words), files...), StatusOK)
	h.enable(ls)

	wm, err := arena.Map(words, KickWordsSize)
	if err != nil {
		t.Fatal(err)
	}
	var hostBad atomic.Uint64
	for i, e := range efds {
		e.UseWord(KickWord(wm, i), &hostBad)
	}
	cmdDone := &countKicks{bell: rings.NewBell()}
	go efds[KickWordCommand].Forward(cmdDone)
	cmd, err := rings.NewProducer(arena, ls[rings.Bar0RingCommand], 1, efds[KickWordDoor])
	if err != nil {
		t.Fatal(err)
	}
	nop := func(i int) {
		t.Helper()
		idx := cmd.Tail()
		e := cmd.Next()
		if e == nil {
			t.Fatalf("NOP %d: no free command slot", i)
		}
		c := rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn, Tag: uint64(i)}
		c.Encode(rings.CommandEntry(e))
		cmd.Commit()
		cmd.Publish()
		deadline := time.Now().Add(5 * time.Second)
		for !rings.IsDone(&cmd.Ring, idx) {
			// Announce the wait, look again, sleep on the vector.
			cmd.SetNeedWakeup(true)
			if rings.IsDone(&cmd.Ring, idx) {
				break
			}
			if !cmdDone.bell.Wait(time.Until(deadline)) {
				t.Fatalf("NOP %d: no completion in 5 s", i)
			}
		}
		cmd.SetNeedWakeup(false)
	}
	for i := range 300 {
		nop(i)
	}
	dev := s.Device()
	// The doorbell word is taken whenever the device was rung; the
	// command vector's kicks all reach the host, none lost or doubled.
	deadline := time.Now().Add(5 * time.Second)
	for {
		rc := dev.RingCounters()
		settled := atomic.LoadUint32(KickWord(wm, KickWordDoor)) == 0 && atomic.LoadUint32(KickWord(wm, KickWordCommand)) == 0
		if settled && rc.Command.Kicks == cmdDone.n.Load() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("words %d/%d, command interrupts raised %d, received %d", atomic.LoadUint32(KickWord(wm, KickWordDoor)),
				atomic.LoadUint32(KickWord(wm, KickWordCommand)), rc.Command.Kicks, cmdDone.n.Load())
		}
		runtime.Gosched()
	}
	if db := dev.Stat(rings.StatDoorbells); db > efds[KickWordDoor].Kicks() {
		t.Fatalf("the device counted %d doorbells, the host rang %d", db, efds[KickWordDoor].Kicks())
	}
	t.Logf("doorbells %d (%d without a write), command interrupts raised %d, received %d", efds[KickWordDoor].Kicks(),
		efds[KickWordDoor].Suppressed(), dev.RingCounters().Command.Kicks, cmdDone.n.Load())

	// Garbage in the doorbell word: counted by both sides (the host's
	// kick found it, the device's take found it), and the device serves on.
	atomic.StoreUint32(KickWord(wm, KickWordDoor), 0xDEADBEEF)
	efds[KickWordDoor].Kick()
	for s.Stats().BadKickWords != 1 {
		if time.Now().After(deadline.Add(5 * time.Second)) {
			t.Fatalf("garbage in the doorbell word not counted: %+v", s.Stats())
		}
		runtime.Gosched()
	}
	if hostBad.Load() != 1 {
		t.Fatalf("the host's kick counted %d bad words, want 1", hostBad.Load())
	}
	for i := range 20 {
		nop(1000 + i)
	}
	if st := s.Stats(); st.BadKickWords != 1 {
		t.Fatalf("%+v", st)
	}
}

// TestServerRegisterGarbage: a host that writes thousands of random
// register values (biased to the real registers and to values that
// place rings inside its memory, so the device is enabled and disabled on
// garbage) and then scribbles over its memory and vanishes leaves a
// device that serves the next host as if it were the first.
func TestServerRegisterGarbage(t *testing.T) {
	s, path := testServer(t)
	rnd := rand.New(rand.NewSource(29))
	h := dialRaw(t, path)
	mem := h.attach(1).mem
	offs := []uint32{rings.RegCtrl, rings.RegCtrl, rings.RegDrvFeatures, rings.RegCounterLo, rings.RegCounterLen, rings.RegMTU,
		rings.Bar0Vec(0, rings.VecRegMask), rings.Bar0Vec(0, rings.VecRegModUsecs), rings.Bar0Msix(2, rings.MsixOffCtrl)}
	for r := 0; r < rings.Bar0Rings; r++ {
		offs = append(offs, rings.Bar0Ring(r, rings.RingRegBaseLo), rings.Bar0Ring(r, rings.RingRegCount), rings.Bar0Ring(r, rings.RingRegDoorbell))
	}
	enabled := 0
	for i := 0; i < 3000; i++ {
		off := offs[rnd.Intn(len(offs))]
		if rnd.Intn(8) == 0 {
			off = uint32(rnd.Intn(rings.Bar0Bytes + 64))
		}
		var v uint32
		switch rnd.Intn(4) {
		case 0:
			v = rnd.Uint32()
		case 1:
			v = uint32(rnd.Intn(4))
		case 2:
			v = 1 << rnd.Intn(8)
		default:
			v = uint32(rings.ArenaBase) + uint32(rnd.Intn(16))*0x4000
		}
		if rnd.Intn(200) == 0 {
			// Now and then a real placement, so the garbage that follows
			// lands on a running device.
			for _, w := range rings.Bar0BringUp(rings.Bar0RingConfig(testRings()), 0)[2:] {
				h.req(MsgRegWrite, EncodeRegWrite(w.Off, w.Val))
			}
		}
		if rnd.Intn(50) == 0 && s.Device() != nil {
			// The device runs on rings the host now scribbles over.
			rnd.Read(mem[:0x40000])
		}
		r := h.req(MsgRegWrite, EncodeRegWrite(off, v))
		if r.Status != StatusOK && r.Status != StatusBadRegister {
			t.Fatalf("write %#x = %#x: %v %s", off, v, r.Status, r.Msg)
		}
		if s.Device() != nil {
			enabled++
		}
	}
	t.Logf("%d writes with the device running; server counters %+v", enabled, s.Stats())
	h.c.Close()
	deadline := time.Now().Add(5 * time.Second)
	for s.Device() != nil || s.Stats().HostsGone != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("session not torn down: %+v", s.Stats())
		}
		time.Sleep(time.Millisecond)
	}
	// The next host: a clean bring-up.
	h2 := dialRaw(t, path)
	h2.attach(1)
	for _, off := range []uint32{rings.RegCtrl, rings.RegDrvFeatures, rings.RegError, rings.Bar0Ring(2, rings.RingRegCount), rings.Bar0Vec(0, rings.VecRegMask)} {
		if v := h2.regR(off); v != 0 {
			t.Fatalf("register %#x is %#x for the next host", off, v)
		}
	}
	h2.enable(testRings())
	if enabled == 0 {
		t.Fatal("the garbage never enabled the device: the test did not test running on garbage")
	}
}
