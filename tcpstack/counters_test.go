package tcpstack

import (
	"testing"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/rings"
)

// TestDriverFrameTooLarge: a FRAME_TOO_LARGE notification (the device
// dropped a frame longer than the buffer and returned the buffer) is
// counted, and the buffer named in Aux goes back on the receive ring.
func TestDriverFrameTooLarge(t *testing.T) {
	d, dev, ntf := driverOnRingDevice(t)
	rx, err := rings.NewConsumer(d.Memory(), dev.rc.Rx, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	// Take buffer 5's descriptor as the device would, then report it.
	posted := rx.Available()
	var id uint32 = ^uint32(0)
	for range 6 {
		e, err := rx.Peek()
		if err != nil || e == nil {
			t.Fatalf("receive ring: %v", err)
		}
		id = rings.RxDesc(e).BufID()
		rx.Pop()
	}
	rx.Release()
	n := rings.Notification{Flags: rings.NtfFrameTooLarge, Conn: rings.NoConn, Aux: id, Len: 9000}
	n.Encode(rings.NotificationEntry(ntf.Next()))
	ntf.Commit()
	ntf.Publish()
	testutil.WaitFor(t, "the notification", func() bool { return d.Stats().Notifications == 1 })
	s := d.Stats()
	if s.RxFrameTooLarge != 1 || s.RxErrors != 0 || s.RxFrames != 0 {
		t.Fatalf("driver stats %+v: want 1 frame too large, no errors, no frames", s)
	}
	if got := d.NotificationCounts().Flag(rings.NtfFrameTooLarge); got != 1 {
		t.Errorf("NotificationCounts: %d FRAME_TOO_LARGE, want 1", got)
	}
	// The driver reposted exactly that buffer, behind the ones left.
	testutil.WaitFor(t, "the repost", func() bool { return rx.ProducerIndex() == uint32(posted)+1 })
	for range posted - 6 {
		rx.Pop()
	}
	if rx.Available() != 1 {
		t.Fatalf("%d descriptors after the ones first posted, want 1", rx.Available())
	}
	e, err := rx.Peek()
	if err != nil || e == nil || rings.RxDesc(e).BufID() != id {
		t.Fatalf("reposted descriptor %v (%v), want buffer %d", e, err, id)
	}
}

// TestDriverCountsInterrupts: DriverStats' interrupt counts are the kicks
// the device gave each vector, not the handler's wake-ups (which coalesce
// kicks and also happen while polling).
func TestDriverCountsInterrupts(t *testing.T) {
	d, dev, _ := driverOnRingDevice(t)
	for range 5 {
		dev.vec.Notify.Kick()
	}
	for range 3 {
		dev.vec.TxSpace.Kick()
	}
	dev.vec.Command.Kick()
	s := d.Stats()
	if s.Interrupts != 5 || s.TxSpaceInterrupts != 3 || s.CommandInterrupts != 1 {
		t.Fatalf("interrupts %d / %d / %d, want 5 / 3 / 1", s.Interrupts, s.TxSpaceInterrupts, s.CommandInterrupts)
	}
}
