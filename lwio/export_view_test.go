package lwio

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// viewFile is an export of a temporary directory with one file of n bytes
// (byte i is i*7) opened for serving.
func viewFile(t *testing.T, n int) (*Export, *file, string, []byte) {
	t.Helper()
	dir := t.TempDir()
	data := make([]byte, n)
	for i := range data {
		data[i] = byte(i * 7)
	}
	p := filepath.Join(dir, "f")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	e, err := OpenExport(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { e.Close() })
	f, err := e.open("f", false, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.close)
	return e, f, p, data
}

func readAll(t *testing.T, f *file, off int64, n int) ([]byte, error) {
	t.Helper()
	b := make([]byte, n)
	m, err := f.readAt(b, off, false)
	return b[:m], err
}

// TestMappedRead: reads below the file's size come from the mapping and
// match the file; a read reaching past the end is short with io.EOF (by
// pread), as before.
func TestMappedRead(t *testing.T) {
	_, f, _, data := viewFile(t, 3*4096+100)
	got, err := readAll(t, f, 4096, 4096)
	if err != nil || !bytes.Equal(got, data[4096:8192]) {
		t.Fatalf("read: %v, equal %v", err, bytes.Equal(got, data[4096:8192]))
	}
	if f.view.Load() == nil || len(f.maps) != 1 {
		t.Fatalf("no mapping after a buffered read (view %v, maps %d)", f.view.Load(), len(f.maps))
	}
	got, err = readAll(t, f, 3*4096, 4096)
	if err != io.EOF || !bytes.Equal(got, data[3*4096:]) {
		t.Fatalf("read at the end: %d bytes, %v", len(got), err)
	}
}

// TestMappedReadGrows: bytes written after the file was mapped, by the
// server or by another program, are read, past the old size and past the
// old mapping's length.
func TestMappedReadGrows(t *testing.T) {
	_, f, p, data := viewFile(t, 8192)
	if _, err := readAll(t, f, 0, 4096); err != nil {
		t.Fatal(err)
	}
	more := bytes.Repeat([]byte{0xAB}, viewMin+8192) // beyond the first mapping
	w, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(more); err != nil {
		t.Fatal(err)
	}
	w.Close()
	got, err := readAll(t, f, 8192-100, 4096)
	want := append(append([]byte{}, data[8192-100:]...), more[:4096-100]...)
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read across the old end: %v, equal %v", err, bytes.Equal(got, want))
	}
	off := int64(8192 + viewMin)
	if got, err = readAll(t, f, off, 4096); err != nil || !bytes.Equal(got, more[viewMin:viewMin+4096]) {
		t.Fatalf("read past the first mapping: %v", err)
	}
	// The server's own write past the end.
	if _, err := f.writeAt([]byte("tail"), off+8192, false); err != nil {
		t.Fatal(err)
	}
	if got, err = readAll(t, f, off+8192, 4); err != nil || string(got) != "tail" {
		t.Fatalf("read of the server's append: %q, %v", got, err)
	}
}

// TestMappedReadTruncatedByServer: a file the server truncates (another
// open with truncate) reads as empty at once, not as the old bytes.
func TestMappedReadTruncatedByServer(t *testing.T) {
	e, f, _, _ := viewFile(t, 3*4096)
	if _, err := readAll(t, f, 0, 4096); err != nil {
		t.Fatal(err)
	}
	g, err := e.open("f", false, true)
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	if got, err := readAll(t, f, 100, 200); err != io.EOF || len(got) != 0 {
		t.Fatalf("after truncation: %d bytes, %v", len(got), err)
	}
}

// TestMappedReadFault: a file shortened behind the server while its size
// is still trusted: the mapped page past the new end faults, and the read
// falls back to pread, which finds the end; the fault is counted.
func TestMappedReadFault(t *testing.T) {
	_, f, p, data := viewFile(t, 4*4096)
	if _, err := readAll(t, f, 0, 4096); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(p, 4096); err != nil {
		t.Fatal(err)
	}
	// Trust the old size as if within viewTTL, however slow this run is.
	v := *f.view.Load()
	v.at = time.Now().Add(time.Hour)
	f.view.Store(&v)
	got, err := readAll(t, f, 2*4096, 4096)
	if err != io.EOF || len(got) != 0 {
		t.Fatalf("read past the new end: %d bytes, %v", len(got), err)
	}
	if f.faults.Load() != 1 {
		t.Fatalf("faults %d, want 1", f.faults.Load())
	}
	if got, err = readAll(t, f, 0, 4096); err != nil || !bytes.Equal(got, data[:4096]) {
		t.Fatalf("read below the new end: %v", err)
	}
}
