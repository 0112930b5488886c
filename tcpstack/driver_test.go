package tcpstack

import (
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// ringDevice is a Device that only records where the driver put the rings
// and which vectors to ring: the test plays the device on them.
type ringDevice struct {
	rc   rings.RingConfig
	vec  rings.Vectors
	bell *rings.Bell
}

func (d *ringDevice) MAC() [6]byte { return [6]byte{0x02, 0, 0, 0, 0, 1} }
func (d *ringDevice) MTU() int     { return 1500 }
func (d *ringDevice) Start(rc rings.RingConfig, vec rings.Vectors) error {
	d.rc, d.vec = rc, vec
	return nil
}
func (d *ringDevice) Doorbell() rings.Doorbell { return d.bell }
func (d *ringDevice) Stop() error              { return nil }

// driverOnRingDevice starts a driver on a ringDevice (closed at the end of
// the test) and opens the device's side of the notification ring, which
// publishes only when told to.
func driverOnRingDevice(t *testing.T) (*Driver, *ringDevice, *rings.Producer) {
	t.Helper()
	mem, err := rings.NewArena(4 << 20)
	if err != nil {
		t.Fatal(err)
	}
	dev := &ringDevice{bell: rings.NewBell()}
	d, err := NewDriver(mem, dev, DriverConfig{CommandEntries: 16, TxEntries: 16, RxEntries: 16})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Close)
	ntf, err := rings.NewProducer(mem, dev.rc.Notify, dev.rc.Notify.Count, dev.vec.Notify)
	if err != nil {
		t.Fatal(err)
	}
	return d, dev, ntf
}

// TestDriverSkipsBadNotification: a notification the device published with
// the wrong phase tag is counted and skipped, and the interrupt handler goes
// on to the next one instead of spinning on it.
func TestDriverSkipsBadNotification(t *testing.T) {
	d, _, ntf := driverOnRingDevice(t)
	post := func(conn uint32, corrupt bool) {
		n := rings.Notification{Conn: conn}
		e := ntf.Next()
		n.Encode(rings.NotificationEntry(e))
		ntf.Commit()
		if corrupt {
			e[rings.OffCtl] ^= rings.CtlPhase
		}
	}
	post(7, true)  // a device bug: wrong phase
	post(8, false) // a good notification behind it
	ntf.Publish()

	deadline := time.Now().Add(5 * time.Second)
	for {
		s := d.Stats()
		if s.NtfRingErrors == 1 && s.Notifications == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("driver stats %+v: want 1 notification ring error and 1 notification", s)
		}
		time.Sleep(time.Millisecond)
	}
	// Both slots were given back to the device.
	for time.Now().Before(deadline) && ntf.Outstanding() != 0 {
		time.Sleep(time.Millisecond)
	}
	if o := ntf.Outstanding(); o != 0 {
		t.Fatalf("%d notification slots not released", o)
	}
}

// TestDriverBadNotificationIndex: a producer index more than a ring ahead
// is counted without the interrupt handler spinning a CPU on it, and once
// the device publishes a sane index the handler carries on.
func TestDriverBadNotificationIndex(t *testing.T) {
	d, dev, ntf := driverOnRingDevice(t)
	mem := d.Memory()
	pi, err := mem.Map(dev.rc.Notify.Base+rings.OffProducerIndex, 4)
	if err != nil {
		t.Fatal(err)
	}
	// hostile; stored as the device stores indices: one atomic word
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&pi[0])), dev.rc.Notify.Count+5)
	dev.vec.Notify.Kick()
	time.Sleep(50 * time.Millisecond)
	errs := d.Stats().NtfRingErrors
	if errs == 0 {
		t.Fatal("a producer index more than a ring ahead was not counted")
	}
	// About one look per millisecond; a spinning handler counts millions.
	if errs > 500 {
		t.Fatalf("%d ring errors in 50 ms: the handler spins on the bad index", errs)
	}
	// The device comes to its senses: a real notification, a sane index.
	n := rings.Notification{Conn: 3}
	n.Encode(rings.NotificationEntry(ntf.Next()))
	ntf.Commit()
	ntf.Publish()
	deadline := time.Now().Add(5 * time.Second)
	for d.Stats().Notifications != 1 {
		if time.Now().After(deadline) {
			t.Fatalf("driver stats %+v: the notification after the bad index was not handled", d.Stats())
		}
		time.Sleep(time.Millisecond)
	}
}
