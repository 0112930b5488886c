package nic

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/port/porttest"
	"github.com/emunic/emunic/rings"
)

// hostSide is a minimal driver for tests: it owns the producer ends of the
// command, transmit and receive rings and the consumer end of the
// notification ring, exactly as a host driver would, with nothing else.
type hostSide struct {
	t      *testing.T
	mem    *rings.Arena
	dev    *Device
	wire   *porttest.Port // the device's port, faked: Inject delivers, Written sniffs (nil on a real wire)
	cmd    *rings.Producer
	tx     *rings.Producer
	rx     *rings.Producer
	ntf    *rings.Consumer
	irq    *rings.Bell
	bufs   rings.Addr
	bufLen int
}

var (
	devMAC  = [6]byte{2, 0, 0, 0, 0, 1}
	peerMAC = [6]byte{2, 0, 0, 0, 0, 2}
)

func newHostSide(t *testing.T, rxBufs int) *hostSide {
	return newHostSideConfig(t, rxBufs, Config{})
}

func newHostSideConfig(t *testing.T, rxBufs int, cfg Config) *hostSide {
	p := porttest.New(porttest.Config{})
	cfg.MAC = devMAC
	return newHostSideOn(t, rxBufs, cfg, p, p)
}

// newHostSideOn builds a device with cfg on port a; far, if not nil, is the
// fake port the test drives (closed at cleanup).
func newHostSideOn(t *testing.T, rxBufs int, cfg Config, a port.Port, far *porttest.Port) *hostSide {
	t.Helper()
	b := far
	mem, err := rings.NewArena(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.RxBufferWait == 0 {
		cfg.RxBufferWait = 100 * time.Microsecond
	}
	dev, err := New(cfg, mem, a)
	if err != nil {
		t.Fatal(err)
	}
	h := &hostSide{t: t, mem: mem, dev: dev, wire: b, irq: rings.NewBell(), bufLen: 2048}
	ring := func(n, size uint32) rings.Layout {
		l, err := rings.AllocRing(mem, n, size)
		if err != nil {
			t.Fatal(err)
		}
		return l
	}
	rc := RingConfig{Command: ring(16, rings.CommandEntrySize), Notify: ring(64, rings.NotificationEntrySize),
		Tx: ring(16, rings.TxDescSize), Rx: ring(16, rings.RxDescSize)}
	door := dev.Doorbell()
	h.cmd, _ = rings.NewProducer(mem, rc.Command, 1, door)
	h.tx, _ = rings.NewProducer(mem, rc.Tx, 1, door)
	h.rx, _ = rings.NewProducer(mem, rc.Rx, 1, door)
	h.ntf, _ = rings.NewConsumer(mem, rc.Notify, 1, door)
	if h.bufs, err = mem.Alloc(16*h.bufLen, 64); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < rxBufs; i++ {
		h.postRx(uint32(i))
	}
	if err := dev.Start(rc, Vectors{Notify: h.irq}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		dev.Stop()
		if b != nil {
			b.Close()
		}
	})
	return h
}

func (h *hostSide) postRx(id uint32) {
	e := h.rx.Next()
	r := rings.Rx{BufID: id, Addr: h.bufs + rings.Addr(int(id)*h.bufLen), Len: uint32(h.bufLen)}
	r.Encode(rings.RxDesc(e))
	h.rx.Commit()
}

// command submits c and waits for the device's write-back.
func (h *hostSide) command(c rings.Command) rings.Command {
	h.t.Helper()
	e := h.cmd.Next()
	if e == nil {
		h.t.Fatal("command ring full")
	}
	idx := h.cmd.Tail()
	c.Encode(rings.CommandEntry(e))
	h.cmd.Commit()
	deadline := time.Now().Add(5 * time.Second)
	for !rings.IsDone(&h.cmd.Ring, idx) {
		if time.Now().After(deadline) {
			h.t.Fatalf("command %v not completed", c.Opcode)
		}
		time.Sleep(10 * time.Microsecond)
	}
	var out rings.Command
	_ = out.Decode(rings.CommandEntry(h.cmd.Entry(idx)))
	return out
}

// notification waits for the next notification.
func (h *hostSide) notification() (rings.Notification, bool) {
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		e, err := h.ntf.Peek()
		if err != nil {
			h.t.Fatal(err)
		}
		if e != nil {
			var n rings.Notification
			_ = n.Decode(rings.NotificationEntry(e))
			h.ntf.Pop()
			h.ntf.Release()
			return n, true
		}
		h.irq.Wait(10 * time.Millisecond)
	}
	return rings.Notification{}, false
}

func (h *hostSide) waitStat(id rings.StatID, want uint64) {
	h.t.Helper()
	deadline := time.Now().Add(2 * time.Second)
	for h.dev.Stat(id) < want {
		if time.Now().After(deadline) {
			h.t.Fatalf("%v = %d, want %d", id, h.dev.Stat(id), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func TestCommandStatusWriteBack(t *testing.T) {
	h := newHostSide(t, 0)
	statsAddr, _ := h.mem.Alloc(rings.StatBlockSize, 64)
	zeroBlock, _ := h.mem.Alloc(rings.ConnStateSize, 64)
	// Version-2 blocks the device must refuse: an unknown version, and
	// version 2 with an address family it does not know.
	v3Block, _ := h.mem.Alloc(rings.ConnStateSizeV2, 64)
	v2BadFamily, _ := h.mem.Alloc(rings.ConnStateSizeV2, 64)
	for _, b := range []struct {
		at      rings.Addr
		version uint16
		family  byte
	}{{v3Block, 3, byte(rings.FamilyIPv4)}, {v2BadFamily, rings.ConnStateVersion2, 9}} {
		blk, _ := h.mem.Map(b.at, rings.ConnStateSizeV2)
		binary.LittleEndian.PutUint16(blk[rings.CsOffVersion:], b.version)
		blk[rings.CsOffFamily] = b.family
	}
	tests := []struct {
		name string
		c    rings.Command
		want rings.Status
	}{
		{"nop", rings.Command{Opcode: rings.OpNop}, rings.StatusOK},
		{"stats", rings.Command{Opcode: rings.OpStats, Addr: statsAddr, Len: uint32(rings.StatBlockSize)}, rings.StatusOK},
		{"stats outside host memory", rings.Command{Opcode: rings.OpStats, Addr: 0x10, Len: 64}, rings.StatusBadAddress},
		{"stats past the end", rings.Command{Opcode: rings.OpStats, Addr: h.mem.Base() + rings.Addr(h.mem.Size()) - 8, Len: 64}, rings.StatusBadAddress},
		{"stats zero length", rings.Command{Opcode: rings.OpStats, Addr: statsAddr}, rings.StatusBadParam},
		{"zero opcode", rings.Command{}, rings.StatusBadOpcode},
		{"unknown opcode", rings.Command{Opcode: 0x7777}, rings.StatusBadOpcode},
		{"offload index out of range", rings.Command{Opcode: rings.OpOffload, Conn: 1 << 30, Addr: zeroBlock, Len: rings.ConnStateSize}, rings.StatusBadConn},
		{"offload state outside memory", rings.Command{Opcode: rings.OpOffload, Conn: 0, Addr: 0xdead0000_00000000, Len: rings.ConnStateSize}, rings.StatusBadAddress},
		{"offload a zeroed state block", rings.Command{Opcode: rings.OpOffload, Conn: 0, Addr: zeroBlock, Len: rings.ConnStateSize}, rings.StatusBadParam},
		{"offload a short state block", rings.Command{Opcode: rings.OpOffload, Conn: 0, Addr: zeroBlock, Len: 8}, rings.StatusBadParam},
		{"offload a state block of an unknown version", rings.Command{Opcode: rings.OpOffload, Conn: 0, Addr: v3Block, Len: rings.ConnStateSizeV2}, rings.StatusBadParam},
		{"offload a version-2 block of an unknown family", rings.Command{Opcode: rings.OpOffload, Conn: 0, Addr: v2BadFamily, Len: rings.ConnStateSizeV2}, rings.StatusBadParam},
		{"post buffers to a connection never delegated", rings.Command{Opcode: rings.OpPostBuffers, Conn: 3, Addr: statsAddr, Arg0: 1}, rings.StatusBadConn},
		{"thresholds for a connection never delegated", rings.Command{Opcode: rings.OpSetThresholds, Conn: 3, Arg0: 100}, rings.StatusBadConn},
		{"close a connection never delegated", rings.Command{Opcode: rings.OpClose, Conn: 3}, rings.StatusBadConn},
		{"nop after all that", rings.Command{Opcode: rings.OpNop, Tag: 0xfeed}, rings.StatusOK},
	}
	failed := uint64(0)
	for _, tc := range tests {
		if tc.want != rings.StatusOK {
			failed++
		}
		out := h.command(tc.c)
		if out.Status != tc.want {
			t.Errorf("%s: status %v, want %v", tc.name, out.Status, tc.want)
		}
		if out.Tag != tc.c.Tag || out.Opcode != tc.c.Opcode {
			t.Errorf("%s: device changed the host's fields", tc.name)
		}
	}
	if got := h.dev.Stat(rings.StatCmdBadOpcode); got != 2 {
		t.Errorf("cmd_bad_opcode = %d, want 2", got)
	}
	// Every refusal is counted, the refused state blocks among them.
	if got := h.dev.Stat(rings.StatCmdErrors); got != failed {
		t.Errorf("cmd_errors = %d, want %d", got, failed)
	}
	if got := h.dev.Stat(rings.StatCmdCompleted); got != uint64(len(tests)) {
		t.Errorf("cmd_completed = %d, want %d", got, len(tests))
	}
	blk, _ := h.mem.Map(statsAddr, rings.StatBlockSize)
	if got := rings.StatBlock(blk).Get(rings.StatCmdCompleted); got != 1 {
		t.Errorf("stat block DMA'd by the 2nd command says %d commands completed before it, want 1", got)
	}
}

// frame builds an Ethernet/IPv4/UDP frame with valid checksums.
func frame(dst [6]byte, payload int) []byte {
	data := make([]byte, payload)
	for i := range data {
		data[i] = byte(i)
	}
	return testutil.UDPFrame(testutil.UDPFrameFields{DstMAC: dst, SrcMAC: peerMAC, Src: hdr.IPv4Addr{10, 0, 0, 2}, Dst: hdr.IPv4Addr{10, 0, 0, 1},
		SrcPort: 1000, DstPort: 2000, Payload: data})
}

func TestReceiveBadFramesCountedAndDropped(t *testing.T) {
	h := newHostSide(t, 4)
	good := frame(devMAC, 100)
	badIPCsum := frame(devMAC, 100)
	badIPCsum[EthHeaderLen+10] ^= 0xff
	badUDPCsum := frame(devMAC, 100)
	badUDPCsum[len(badUDPCsum)-1] ^= 0x55
	etherType := frame(devMAC, 100)
	binary.BigEndian.PutUint16(etherType[12:], 0x88b5)
	notForUs := frame([6]byte{2, 9, 9, 9, 9, 9}, 100)
	truncated := frame(devMAC, 100)[:EthHeaderLen+30]
	oversize := frame(devMAC, 1500)
	inputs := []struct {
		f  []byte
		id rings.StatID
	}{
		{badIPCsum, rings.StatRxDropBadChecksum},
		{badUDPCsum, rings.StatRxDropBadChecksum},
		{etherType, rings.StatRxDropEtherType},
		{notForUs, rings.StatRxDropNotForUs},
		{truncated, rings.StatRxDropShort},
		{oversize, rings.StatRxDropOversize},
	}
	for _, in := range inputs {
		before := h.dev.Stat(in.id)
		if err := h.wire.Inject(in.f); err != nil {
			t.Fatal(err)
		}
		h.waitStat(in.id, before+1)
	}
	if err := h.wire.Inject(good); err != nil {
		t.Fatal(err)
	}
	n, ok := h.notification()
	if !ok || n.Flags != rings.NtfLegacyUpload || n.Conn != rings.NoConn || int(n.Len) != len(good) {
		t.Fatalf("good frame after the bad ones: notification %+v ok=%v", n, ok)
	}
	got, _ := h.mem.Map(h.bufs+rings.Addr(int(n.Aux)*h.bufLen), int(n.Len))
	if !bytes.Equal(got, good) {
		t.Fatal("legacy buffer does not hold the frame")
	}
}

func TestReceiveWithoutBuffersDropsAfterWait(t *testing.T) {
	h := newHostSide(t, 0)
	if err := h.wire.Inject(frame(devMAC, 64)); err != nil {
		t.Fatal(err)
	}
	h.waitStat(rings.StatRxDropNoBuffer, 1)
	// A buffer posted later serves the next frame.
	h.postRx(0)
	h.rx.Publish()
	if err := h.wire.Inject(frame(devMAC, 64)); err != nil {
		t.Fatal(err)
	}
	if n, ok := h.notification(); !ok || n.Flags != rings.NtfLegacyUpload {
		t.Fatalf("notification %+v ok=%v", n, ok)
	}
}

func TestTransmitBadDescriptors(t *testing.T) {
	h := newHostSide(t, 0)
	buf, _ := h.mem.Alloc(2048, 64)
	good := frame(peerMAC, 200)
	_ = h.mem.WriteAt(good, buf)
	post := func(tx rings.Tx) {
		e := h.tx.Next()
		tx.Encode(rings.TxDesc(e))
		h.tx.Commit()
	}
	post(rings.Tx{Conn: rings.NoConn, Addr: 0x42, Len: 100})                                     // outside host memory
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: 10})                                       // runt
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: 9000})                                     // over MTU
	post(rings.Tx{Conn: rings.NoConn, Addr: h.mem.Base() + rings.Addr(h.mem.Size()-4), Len: 64}) // runs off the end
	post(rings.Tx{Conn: 5, Addr: buf, Len: 100})                                                 // connection not delegated
	post(rings.Tx{Conn: rings.NoConn, Addr: buf, Len: uint32(len(good))})
	if f := h.wire.Next(t, 2*time.Second); !bytes.Equal(f, good) {
		t.Fatalf("good frame after bad descriptors: % x", f)
	}
	h.waitStat(rings.StatTxDropBadDesc, 5)
	if got := h.dev.Stat(rings.StatDMAErrors); got != 2 {
		t.Errorf("dma_errors = %d, want 2", got)
	}
	ntf, ok := h.notification()
	if !ok || ntf.Conn != 5 || ntf.Flags != rings.NtfError || rings.Status(ntf.Aux) != rings.StatusBadConn {
		t.Errorf("descriptor for an undelegated connection: notification %+v ok=%v", ntf, ok)
	}
	if got := h.dev.Stat(rings.StatTxFrames); got != 1 {
		t.Errorf("tx_frames = %d, want 1", got)
	}
}

func TestStopIsPrompt(t *testing.T) {
	h := newHostSide(t, 2)
	done := make(chan error)
	go func() { done <- h.dev.Stop() }()
	select {
	case err := <-done:
		if err != nil && !errors.Is(err, port.ErrClosed) {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("Stop hung")
	}
}

// FuzzClassify feeds arbitrary frames to the receive parser: it must never
// panic, and whatever it accepts as IPv4 must lie inside the frame.
func FuzzClassify(f *testing.F) {
	f.Add(frame(devMAC, 10))
	f.Add(frame(devMAC, 0)[:EthHeaderLen+20])
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var pf parsedFrame
		if classify(b, devMAC, 1514, &pf, false) == rxLegacy && pf.etherType == EtherTypeIPv4 {
			if pf.l4Off+pf.l4Len > len(b) || pf.l4Off < EthHeaderLen+IPv4MinHdrLen {
				t.Fatalf("accepted headers outside the frame: %+v len %d", pf, len(b))
			}
		}
	})
}

// TestReceiveBadBufferReturnedWithError: a legacy buffer outside host memory
// goes back to the host with an error notification, and the frame lands in
// the next good buffer.
func TestReceiveBadBufferReturnedWithError(t *testing.T) {
	h := newHostSide(t, 0)
	e := h.rx.Next()
	bad := rings.Rx{BufID: 9, Addr: h.mem.Base() + rings.Addr(h.mem.Size()) - 100, Len: 2048}
	bad.Encode(rings.RxDesc(e))
	h.rx.Commit()
	h.postRx(0)
	h.rx.Publish()
	good := frame(devMAC, 64)
	if err := h.wire.Inject(good); err != nil {
		t.Fatal(err)
	}
	n, ok := h.notification()
	if !ok || n.Flags != rings.NtfError || n.Aux != 9 || n.Conn != rings.NoConn {
		t.Fatalf("bad buffer: notification %+v ok=%v", n, ok)
	}
	n, ok = h.notification()
	if !ok || n.Flags != rings.NtfLegacyUpload || n.Aux != 0 || int(n.Len) != len(good) {
		t.Fatalf("frame after the bad buffer: notification %+v ok=%v", n, ok)
	}
	if got := h.dev.Stat(rings.StatDMAErrors); got != 1 {
		t.Errorf("dma_errors = %d, want 1", got)
	}
}
