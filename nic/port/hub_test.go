package port

import (
	"bytes"
	"errors"
	"testing"
)

// TestHubRepeats: a frame from the shared port reaches every member, a
// member's frame reaches the shared port and the other members (not
// itself), a full member FIFO drops for that member only (counted), and
// closing the last member closes the shared port.
func TestHubRepeats(t *testing.T) {
	up, far := MustNewWire(WireConfig{})
	_, ms, err := NewHub(up, 3, 2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 2048)
	read := func(p Port, want []byte) {
		t.Helper()
		n, err := p.ReadFrame(buf)
		if err != nil || !bytes.Equal(buf[:n], want) {
			t.Fatalf("%v: ReadFrame %d bytes, %v; want frame %d", p, n, err, frameSeq(want))
		}
	}
	f1 := testFrame(1, 100)
	if err := far.WriteFrame(f1); err != nil {
		t.Fatal(err)
	}
	for _, m := range ms {
		read(m, f1)
	}
	f2 := testFrame(2, 200)
	if err := ms[0].WriteFrame(f2); err != nil {
		t.Fatal(err)
	}
	read(far, f2)
	read(ms[1], f2)
	read(ms[2], f2)
	// Member 2 stops reading: its FIFO (2 frames) fills, the third frame
	// is its drop, and members 0 and 1 get all three.
	for i := uint32(3); i < 6; i++ {
		if err := ms[0].WriteFrame(testFrame(i, 64)); err != nil {
			t.Fatal(err)
		}
		read(ms[1], testFrame(i, 64))
		read(far, testFrame(i, 64))
	}
	if s := ms[2].Stats(); s.RxDropQueueFull != 1 {
		t.Errorf("member 2: %v, want rx_drop_queue_full=1", s)
	}
	if n := ms[2].Pending(); n != 2 {
		t.Errorf("member 2: %d frames pending, want 2", n)
	}
	read(ms[2], testFrame(3, 64))
	read(ms[2], testFrame(4, 64))
	if err := ms[1].WriteFrame(make([]byte, 2049)); !errors.Is(err, ErrFrameTooBig) {
		t.Errorf("oversize WriteFrame: %v", err)
	}
	if s := ms[0].Stats(); s.TxFrames != 4 || s.RxFrames != 1 {
		t.Errorf("member 0: %v", s)
	}
	for _, m := range ms {
		if err := m.Close(); err != nil {
			t.Fatal(err)
		}
		if _, err := m.ReadFrame(buf); !errors.Is(err, ErrClosed) {
			t.Fatalf("ReadFrame after Close: %v", err)
		}
	}
	if err := up.WriteFrame(f1); !errors.Is(err, ErrClosed) {
		t.Errorf("shared port still open after its last member closed: %v", err)
	}
}
