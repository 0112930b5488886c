package port

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

type pcapRecord struct {
	data   []byte
	length int
	at     time.Time
}

func readPcap(t *testing.T, r io.Reader) (*pcapgo.Reader, []pcapRecord) {
	t.Helper()
	pr, err := pcapgo.NewReader(r)
	if err != nil {
		t.Fatalf("pcapgo.NewReader: %v", err)
	}
	var recs []pcapRecord
	for {
		data, ci, err := pr.ReadPacketData()
		if err == io.EOF {
			return pr, recs
		}
		if err != nil {
			t.Fatalf("ReadPacketData: %v", err)
		}
		recs = append(recs, pcapRecord{data, ci.Length, ci.Timestamp})
	}
}

func TestRecorderRecordsBothDirections(t *testing.T) {
	defer checkGoroutines(t)()
	a, b := MustNewWire(WireConfig{})
	var out bytes.Buffer
	rec, err := NewRecorder(a, &out, 0)
	if err != nil {
		t.Fatal(err)
	}
	var want [][]byte
	buf := make([]byte, MaxFrameSize)
	for i := range uint32(20) {
		tx := testFrame(i, 60+int(i)*100)
		if err := rec.WriteFrame(tx); err != nil {
			t.Fatal(err)
		}
		want = append(want, tx)
		rx := testFrame(1000+i, 1514)
		b.WriteFrame(rx)
		n, err := rec.ReadFrame(buf)
		if err != nil || !bytes.Equal(buf[:n], rx) {
			t.Fatalf("ReadFrame through the recorder: n=%d err=%v", n, err)
		}
		want = append(want, rx)
	}
	// Refused frames did not cross the wire and are not recorded.
	if err := rec.WriteFrame(make([]byte, 5)); !errors.Is(err, ErrRuntFrame) {
		t.Fatalf("runt through the recorder: %v", err)
	}
	if s := rec.Stats(); s.TxFrames != 20 || s.RxFrames != 20 || s.TxDropRunt != 1 {
		t.Errorf("Stats passes through: %v", s)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	b.Close()
	if _, err := a.ReadFrame(buf); !errors.Is(err, ErrClosed) {
		t.Errorf("Close did not close the wrapped port: %v", err)
	}

	pr, recs := readPcap(t, &out)
	if pr.LinkType() != layers.LinkTypeEthernet || pr.Snaplen() != DefaultSnaplen {
		t.Errorf("link type %v snaplen %d", pr.LinkType(), pr.Snaplen())
	}
	if len(recs) != len(want) {
		t.Fatalf("%d records, want %d", len(recs), len(want))
	}
	for i := range recs {
		if !bytes.Equal(recs[i].data, want[i]) || recs[i].length != len(want[i]) {
			t.Fatalf("record %d differs from the frame that crossed the port", i)
		}
		if i > 0 && recs[i].at.Before(recs[i-1].at) {
			t.Fatalf("record %d is timestamped before record %d", i, i-1)
		}
	}
	if d := time.Since(recs[0].at); d < 0 || d > time.Minute {
		t.Errorf("first timestamp %v is not now", recs[0].at)
	}
}

func TestRecorderSnaplen(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer b.Close()
	var out bytes.Buffer
	rec, err := NewRecorder(a, &out, 64)
	if err != nil {
		t.Fatal(err)
	}
	f := testFrame(1, 1514)
	rec.WriteFrame(f)
	rec.Close()
	_, recs := readPcap(t, &out)
	if len(recs) != 1 || recs[0].length != 1514 || !bytes.Equal(recs[0].data, f[:64]) {
		t.Fatalf("snaplen 64: got %d records, length %d, %d bytes", len(recs), recs[0].length, len(recs[0].data))
	}
}

func TestCreateRecorderFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "wire.pcap")
	a, b := MustNewWire(WireConfig{})
	defer b.Close()
	rec, err := CreateRecorder(a, path)
	if err != nil {
		t.Fatal(err)
	}
	f := testFrame(7, 200)
	rec.WriteFrame(f)
	if err := rec.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := rec.Close(); err != nil {
		t.Fatal(err)
	}
	file, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer file.Close()
	if _, recs := readPcap(t, file); len(recs) != 1 || !bytes.Equal(recs[0].data, f) {
		t.Fatalf("file holds %d records", len(recs))
	}
	if _, err := CreateRecorder(a, filepath.Join(t.TempDir(), "no", "such", "dir.pcap")); err == nil {
		t.Error("CreateRecorder in a missing directory succeeded")
	}
}

type failingWriter struct{ n int }

func (w *failingWriter) Write(p []byte) (int, error) {
	if w.n == 0 {
		return 0, errors.New("disk full")
	}
	w.n--
	return len(p), nil
}

// TestRecorderErrorDoesNotBreakWire: a capture that cannot be written never fails the frames.
func TestRecorderErrorDoesNotBreakWire(t *testing.T) {
	a, b := MustNewWire(WireConfig{})
	defer b.Close()
	rec, err := NewRecorder(a, &failingWriter{n: 1}, 0) // header only
	if err != nil {
		t.Fatal(err)
	}
	for i := range uint32(10000) { // enough to overflow the buffer and hit the writer
		if err := rec.WriteFrame(testFrame(i, 1514)); err != nil {
			t.Fatalf("WriteFrame %d failed because the capture did: %v", i, err)
		}
		drain(t, b)
	}
	if rec.Err() == nil {
		t.Error("Err() = nil after the writer failed")
	}
	if err := rec.Close(); err == nil {
		t.Error("Close did not report the capture error")
	}
}

func BenchmarkRecorderWriteRead1514(b *testing.B) {
	pa, pb := MustNewWire(WireConfig{})
	defer pb.Close()
	rec, err := NewRecorder(pa, io.Discard, 0)
	if err != nil {
		b.Fatal(err)
	}
	defer rec.Close()
	f := testFrame(1, 1514)
	buf := make([]byte, 2048)
	b.SetBytes(1514)
	b.ReportAllocs()
	for b.Loop() {
		rec.WriteFrame(f)
		pb.ReadFrame(buf)
	}
}
