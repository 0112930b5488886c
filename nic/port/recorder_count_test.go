package port

import (
	"bytes"
	"testing"
)

// TestRecorderFrames: Frames is the number of records in the capture,
// both directions, and stops at Close.
func TestRecorderFrames(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer b.Close()
	var out bytes.Buffer
	rec, err := NewRecorder(a, &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, MaxFrameSize)
	for i := range uint32(5) {
		if err := rec.WriteFrame(testFrame(i, 100)); err != nil {
			t.Fatal(err)
		}
		b.WriteFrame(testFrame(100+i, 200))
		if _, err := rec.ReadFrame(buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	_ = rec.WriteFrame(testFrame(9, 100)) // refused: the port is closed
	_, recs := readPcap(t, &out)
	if got := rec.Frames(); got != 10 || len(recs) != 10 {
		t.Fatalf("Frames() = %d, the capture holds %d records, want 10", got, len(recs))
	}
}
