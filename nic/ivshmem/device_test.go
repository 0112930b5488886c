package ivshmem

import (
	"bytes"
	"encoding/binary"
	"testing"
	"time"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/nic/port/porttest"
	"github.com/emunic/emunic/rings"
)

// fakeDriver is a guest driver without QEMU: a Client whose stores go
// into the register window and whose doorbells are the device's vectors.
type fakeDriver struct {
	t *testing.T
	c *Client
}

func (f fakeDriver) load(off uint32) uint32 { return binary.LittleEndian.Uint32(f.c.Mem[off:]) }
func (f fakeDriver) store(off, v uint32)    { binary.LittleEndian.PutUint32(f.c.Mem[off:], v) }

// commit rings vector 0 and waits until the window shows want at off
// (the device answers asynchronously, as a chip behind a bus does).
func (f fakeDriver) commit(off, want uint32) {
	f.t.Helper()
	f.c.Ring(DevicePeerID, VecRegisters)
	for deadline := time.Now().Add(5 * time.Second); f.load(off) != want; {
		if time.Now().After(deadline) {
			f.t.Fatalf("register %#x reads %#x, want %#x", off, f.load(off), want)
		}
		time.Sleep(time.Millisecond)
	}
}

func serveDevice(t *testing.T, p *porttest.Port) (*Device, *Server, string) {
	t.Helper()
	d := NewDevice(DeviceConfig{NIC: nic.Config{MAC: [6]byte{2, 0, 0, 0, 0, 9}, MTU: 1500},
		OpenPort: func() (port.Port, error) { return p, nil }, Logf: t.Logf})
	s, path := serveHandler(t, DeviceVectors, d)
	return d, s, path
}

// TestWindowGarbageAndEnable: the window shows the device's registers;
// garbage stored into it is refused, counted and put back; a doorbell
// while disabled is refused; an enable with a ring outside BAR2 fails;
// then a good one runs the NIC, which sends the frame a transmit
// descriptor in BAR2 names. The guest going resets the device.
func TestWindowGarbageAndEnable(t *testing.T) {
	p := porttest.New(porttest.Config{})
	d, _, path := serveDevice(t, p)
	c, err := Dial(path, DeviceVectors, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() }) // a failed test's guest goes too
	f := fakeDriver{t, c}
	f.commit(rings.RegMemFirst, rings.Bar0Bytes) // attached: the window is up
	if id := f.load(rings.RegID); id != uint32(rings.Bar0DeviceID)<<16|rings.Bar0VendorID {
		t.Fatalf("RegID %#x", id)
	}
	base := uint64(f.load(rings.RegMemBaseHi))<<32 | uint64(f.load(rings.RegMemBaseLo))
	if base != uint64(rings.ArenaBase) || f.load(rings.RegMemSizeLo) != 1<<20 {
		t.Fatalf("MemBase %#x, MemSize %d", base, f.load(rings.RegMemSizeLo))
	}

	// Garbage: a read-only register, a reserved word, a bad control value.
	f.store(rings.RegID, 0xDEADBEEF)
	f.store(rings.RegMemFirst+4, 7)
	f.store(rings.RegCtrl, 0x80)
	f.commit(rings.RegID, uint32(rings.Bar0DeviceID)<<16|rings.Bar0VendorID)
	m := d.Registers()
	if f.load(rings.RegMemFirst+4) != 0 || f.load(rings.RegCtrl) != 0 {
		t.Fatalf("the window kept garbage: reserved %#x, ctrl %#x", f.load(rings.RegMemFirst+4), f.load(rings.RegCtrl))
	}
	if m.Counter(rings.RegCtrReadOnly) != 1 || m.Counter(rings.RegCtrBadOffset) != 1 || m.Counter(rings.RegCtrBadValue) != 1 {
		t.Fatalf("counters: read-only %d, bad offset %d, bad value %d", m.Counter(rings.RegCtrReadOnly),
			m.Counter(rings.RegCtrBadOffset), m.Counter(rings.RegCtrBadValue))
	}
	// A ring's doorbell while disabled.
	c.Ring(DevicePeerID, VecRing(rings.Bar0RingTx))
	for deadline := time.Now().Add(5 * time.Second); m.Counter(rings.RegCtrNoDoorbell) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("a doorbell while disabled was not counted")
		}
	}
	// A vector that means nothing.
	if c.Ring(DevicePeerID, DeviceVectors) {
		t.Fatal("a vector past the device's was connected")
	}

	// Rings: command, notification, transmit, receive, in BAR2 after the
	// window; the first try puts the receive ring past the end.
	lay := [rings.Bar0Rings]struct{ off, count uint32 }{{0x1000, 16}, {0x3000, 64}, {0x6000, 16}, {0xFFF00, 16}}
	for r, l := range lay {
		f.store(rings.Bar0Ring(r, rings.RingRegBaseLo), uint32(base)+l.off)
		f.store(rings.Bar0Ring(r, rings.RingRegBaseHi), uint32(base>>32))
		f.store(rings.Bar0Ring(r, rings.RingRegCount), l.count)
	}
	f.store(rings.RegDrvFeatures, uint32(rings.FeatLegacy))
	f.store(rings.RegCtrl, uint32(rings.CtrlEnable)) // applied last, after the rings
	f.commit(rings.RegError, uint32(rings.ErrRingOutside))
	if f.load(rings.RegStatus)&uint32(rings.StatusFailed) == 0 {
		t.Fatalf("status %#x after a failed enable", f.load(rings.RegStatus))
	}
	f.store(rings.Bar0Ring(rings.Bar0RingRx, rings.RingRegBaseLo), uint32(base)+0x7000)
	f.store(rings.RegCtrl, uint32(rings.CtrlEnable))
	f.commit(rings.RegStatus, uint32(rings.StatusEnabled|rings.StatusMemory|rings.StatusVectors))

	// A frame through the transmit ring: descriptor 0, phase 1, PI 1.
	frame := bytes.Repeat([]byte{0xA5}, 60)
	copy(frame, []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 2, 0, 0, 0, 0, 9, 0x08, 0x06})
	copy(c.Mem[0x20000:], frame)
	tx := c.Mem[0x6000:]
	e := rings.TxDesc(tx[rings.HeaderSize : rings.HeaderSize+rings.TxDescSize])
	(&rings.Tx{Conn: rings.NoConn, Addr: rings.Addr(base + 0x20000), Len: 60}).Encode(e)
	binary.LittleEndian.PutUint32(e[rings.OffCtl:], 1)
	binary.LittleEndian.PutUint32(tx[rings.OffProducerIndex:], 1)
	f.store(rings.Bar0Ring(rings.Bar0RingTx, rings.RingRegDoorbell), 1)
	c.Ring(DevicePeerID, VecRing(rings.Bar0RingTx))
	if got := p.Next(t, 5*time.Second); !bytes.Equal(got, frame) {
		t.Fatalf("the port got % x", got)
	}
	if st := d.Stats(); st.BadVectors != 0 || st.Refused < 4 || st.Scans < 4 {
		t.Fatalf("stats %+v", st)
	}

	// The guest goes: the device is reset, counted, and ready for the next.
	c.Close()
	for deadline := time.Now().Add(5 * time.Second); m.Counter(rings.RegCtrHostGone) != 1 || m.Enabled(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("host_gone %d, enabled %v after the guest went", m.Counter(rings.RegCtrHostGone), m.Enabled())
		}
	}
	c2, err := Dial(path, DeviceVectors, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c2.Close() })
	f2 := fakeDriver{t, c2}
	f2.commit(rings.RegMemFirst, rings.Bar0Bytes)
	if f2.load(rings.RegCtrl) != 0 || f2.load(rings.Bar0Ring(0, rings.RingRegCount)) != 0 {
		t.Fatal("the next guest sees the last one's registers")
	}
}
