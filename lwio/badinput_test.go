package lwio_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emunic/emunic/lwio"
)

// reader is a bystander: a client reading a file, checked between the
// bad inputs of another.
type reader struct {
	f    *lwio.File
	data []byte
}

func (b reader) check(t *testing.T, after string) {
	t.Helper()
	buf := make([]byte, len(b.data))
	if n, err := b.f.ReadAt(buf, 0); n != len(b.data) || err != nil || !bytes.Equal(buf, b.data) {
		t.Fatalf("after %s: the bystander read %d, %v", after, n, err)
	}
}

// TestBadPaths: a path with a NUL byte, one longer than PATH_MAX, and ones
// that would leave the export are refused; the long one, which the client
// API will not send, closes the sender's file-access channel (counted).
// No file outside the export is touched, and a bystander reads on.
func TestBadPaths(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	data := randomBytes(64<<10, 51)
	r.put(t, "f", data)
	outside := filepath.Join(filepath.Dir(r.dir), "outside-"+filepath.Base(r.dir))
	if err := os.WriteFile(outside, []byte("keep"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(outside)
	ctx := context.Background()
	by := r.dial(t, lwio.ClientConfig{})
	bf, err := by.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	bystander := reader{bf, data}

	c := r.dial(t, lwio.ClientConfig{})
	rel := "../" + filepath.Base(outside)
	for _, p := range []string{"f\x00", "\x00" + rel, "f\x00/../" + rel, rel, "/" + outside, "a/../../" + filepath.Base(outside)} {
		for _, fl := range []lwio.OpenFlags{{}, {Create: true, Truncate: true}} {
			if _, err := c.Open(ctx, p, fl); statusOf(err) != lwio.StatusAccessDenied {
				t.Errorf("Open(%q, %+v): %v, want ACCESS_DENIED", p, fl, err)
			}
		}
	}
	bystander.check(t, "paths with NUL bytes and escapes")

	// Longer than PATH_MAX: the client refuses to send it...
	long := strings.Repeat("d/", 2100) + "f"
	if _, err := c.Open(ctx, long, lwio.OpenFlags{Create: true}); err == nil || statusOf(err) != 0 {
		t.Errorf("Open of a %d-byte path: %v, want the client's own refusal", len(long), err)
	}
	// ... and the server closes the channel of a client that sends it.
	before := r.srv.Stats()
	n := 2 * len(long)
	m := make([]byte, lwio.OpenReqMinLen+n)
	copy(m, "LWIO")
	binary.LittleEndian.PutUint32(m[lwio.CtlOffRevID:], lwio.RevID)
	binary.LittleEndian.PutUint16(m[lwio.CtlOffOpcode:], lwio.ControlOpOpen)
	binary.LittleEndian.PutUint16(m[lwio.CtlOffLength:], uint16(len(m)))
	binary.LittleEndian.PutUint16(m[lwio.OpenOffDisposition:], lwio.DispCreate)
	binary.LittleEndian.PutUint16(m[lwio.OpenOffPathLen:], uint16(n))
	for i := range len(long) {
		m[lwio.OpenOffPath+2*i] = long[i]
	}
	if rsp, err := c.PipeRaw(m); err == nil {
		t.Errorf("the server answered a %d-byte path: % x", n, rsp[:min(len(rsp), 32)])
	}
	if st := r.srv.Stats(); st.PipeErrors != before.PipeErrors+1 {
		t.Errorf("PipeErrors %d, want %d", st.PipeErrors, before.PipeErrors+1)
	}
	bystander.check(t, "a path longer than PATH_MAX")

	if got, err := os.ReadFile(outside); err != nil || string(got) != "keep" {
		t.Fatalf("the file outside the export: %q, %v", got, err)
	}
	if ents, _ := os.ReadDir(r.dir); len(ents) != 1 {
		t.Fatalf("the export holds %d entries, want only f", len(ents))
	}
}

// TestTooManyFiles: resume keys beyond MaxFiles on the file-access
// channel, and Fids beyond it on a connection, are INSUFFICIENT_RESOURCES
// and counted; the files already open keep working, and so does a
// bystander.
func TestTooManyFiles(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{MaxFiles: 3})
	data := randomBytes(4096, 52)
	for _, n := range []string{"a", "b", "c", "d"} {
		r.put(t, n, data)
	}
	ctx := context.Background()
	by := r.dial(t, lwio.ClientConfig{})
	bf, err := by.Open(ctx, "a", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	bystander := reader{bf, data}

	// Fids: three files open on one connection, the fourth refused.
	c := r.dial(t, lwio.ClientConfig{})
	var open []*lwio.File
	for _, n := range []string{"a", "b", "c"} {
		f, err := c.Open(ctx, n, lwio.OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		open = append(open, f)
	}
	if _, err := c.Open(ctx, "d", lwio.OpenFlags{}); statusOf(err) != lwio.StatusInsufficientRes {
		t.Errorf("a fourth Fid: %v, want INSUFFICIENT_RESOURCES", err)
	}
	if st := r.srv.Stats(); st.FileLimit != 1 {
		t.Errorf("FileLimit %d, want 1", st.FileLimit)
	}
	for _, f := range open {
		bystander := reader{f, data}
		bystander.check(t, "a Fid refused")
	}
	// A closed Fid makes room.
	if err := open[0].Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Open(ctx, "d", lwio.OpenFlags{}); err != nil {
		t.Errorf("after a CLOSE: %v", err)
	}

	// Resume keys: OPENs the client never releases.
	c2 := r.dial(t, lwio.ClientConfig{})
	for i, n := range []string{"a", "b", "c", "d"} {
		m, _ := (&lwio.OpenRequest{Path: n}).Append(nil)
		rsp, err := c2.PipeRaw(m)
		if err != nil {
			t.Fatal(err)
		}
		var o lwio.OpenResponse
		if err := o.Decode(rsp); err != nil {
			t.Fatal(err)
		}
		want := uint32(lwio.StatusSuccess)
		if i == 3 {
			want = lwio.StatusInsufficientRes
		}
		if o.Status != want {
			t.Errorf("OPEN %d: status %#x, want %#x", i+1, o.Status, want)
		}
	}
	if st := r.srv.Stats(); st.FileLimit != 2 {
		t.Errorf("FileLimit %d, want 2", st.FileLimit)
	}
	bystander.check(t, "too many files")
}
