package tcpfile

import (
	"bytes"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"testing"
)

func TestReadWrite(t *testing.T) {
	dir := t.TempDir()
	data := make([]byte, 3<<20+17)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range data {
		data[i] = byte(r.Uint32())
	}
	os.WriteFile(filepath.Join(dir, "f"), data, 0o644)
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- Serve(l, root) }()
	defer func() { l.Close(); <-done }()
	c, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f, err := Open(c, "f")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if f.Size() != int64(len(data)) {
		t.Fatalf("size %d", f.Size())
	}
	got := make([]byte, len(data)+5000)
	n, err := f.ReadAt(got, 0)
	if n != len(data) || err != io.EOF || !bytes.Equal(got[:n], data) {
		t.Fatalf("ReadAt %d, %v", n, err)
	}
	patch := data[:1<<20]
	if n, err := f.WriteAt(patch, 777); n != len(patch) || err != nil {
		t.Fatalf("WriteAt %d, %v", n, err)
	}
	copy(data[777:], patch[:len(patch)])
	disk, _ := os.ReadFile(filepath.Join(dir, "f"))
	want := append([]byte(nil), data...)
	if !bytes.Equal(disk, want) {
		t.Fatal("file differs")
	}
	c2, _ := net.Dial("tcp", l.Addr().String())
	if _, err := Open(c2, "../etc/passwd"); err == nil {
		t.Fatal("a path outside the root opened")
	}
	c2.Close()
}
