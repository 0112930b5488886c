package lwio_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
)

// TestAuthFields: every field of the client's AUTH_PARAMS the server cannot
// honour is refused with its status, and the connection is not made.
func TestAuthFields(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	le16 := func(p []byte, off int, v uint16) { p[off], p[off+1] = byte(v), byte(v>>8) }
	le32 := func(p []byte, off int, v uint32) {
		p[off], p[off+1], p[off+2], p[off+3] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24)
	}
	for _, tc := range []struct {
		name string
		edit func([]byte)
		want uint32
	}{
		{"Endian of a 32-bit host", func(p []byte) { le16(p, lwio.AuthOffEndian, 4) }, lwio.StatusNotSupported},
		{"PageSize not a power of two", func(p []byte) { le16(p, lwio.AuthOffPageSize, 3000) }, lwio.StatusInvalidParameter},
		{"PageSize below a sector", func(p []byte) { le16(p, lwio.AuthOffPageSize, 256) }, lwio.StatusInvalidParameter},
		{"HeaderSize of a packed header", func(p []byte) { le16(p, lwio.AuthOffHeaderSize, 44) }, lwio.StatusInvalidParameter},
		{"MaxRdmaWindowSize 0", func(p []byte) { le32(p, lwio.AuthOffMaxRdmaWin, 0) }, lwio.StatusInvalidParameter},
		{"MaxSendBufferSize below this message", func(p []byte) { le32(p, lwio.AuthOffMaxSend, 100) }, lwio.StatusInvalidParameter},
		{"MaxRecvBufferSize below a status response", func(p []byte) { le32(p, lwio.AuthOffMaxRecv, 8) }, lwio.StatusInvalidParameter},
		{"RdmaReadSupported 2", func(p []byte) { le16(p, lwio.AuthOffRdmaRead, 2) }, lwio.StatusInvalidParameter},
		{"BaseSequence other than AUTH's Sequence", func(p []byte) { le16(p, lwio.AuthOffBaseSequence, 9) }, lwio.StatusInvalidParameter},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer lwio.SetTestHookAuth(func(p []byte) { tc.edit(p); lwio.Resign(p) })()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := lwio.Dial(ctx, r.a, r.b.Addr(), lwio.ClientConfig{})
			if err == nil {
				c.Close()
			}
			if statusOf(err) != tc.want {
				t.Fatalf("Dial = %v, want status %#x", err, tc.want)
			}
		})
	}
	testutil.Eventually(t, "the refused connections to close", 10*time.Second, func() bool { return r.srv.Stats().ConnsOpen == 0 })
	if st := r.srv.Stats(); st.Authenticated != 0 || st.AuthFailures != 9 {
		t.Errorf("Authenticated %d AuthFailures %d, want 0 and 9", st.Authenticated, st.AuthFailures)
	}
	// A client whose fields are in range is served.
	r.put(t, "f", []byte("ok"))
	if n, err := r.dial(t, lwio.ClientConfig{}).Stat(context.Background(), "f"); n != 2 || err != nil {
		t.Fatalf("Stat: %d, %v", n, err)
	}
}

// TestRequestOrder: a request out of Sequence, one that reuses the Tid of
// a request still outstanding, and one longer than the client's own
// MaxSendBufferSize each end that client's connection (counted); a
// bystander's reads go on, and the file is untouched.
func TestRequestOrder(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	data := randomBytes(256<<10, 21)
	r.put(t, "f", data)
	ctx := context.Background()
	by := r.dial(t, lwio.ClientConfig{})
	bf, err := by.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	checkBystander := func(what string) {
		t.Helper()
		buf := make([]byte, len(data))
		if n, err := bf.ReadAt(buf, 0); n != len(data) || err != nil || !bytes.Equal(buf, data) {
			t.Fatalf("after %s: the bystander read %d, %v", what, n, err)
		}
	}
	open := func() (*lwio.Client, *lwio.File) {
		c := r.dial(t, lwio.ClientConfig{})
		f, err := c.Open(ctx, "f", lwio.OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		return c, f
	}
	ended := func(what string, c *lwio.Client, cl *lwio.Call, before lwio.ServerStats) {
		t.Helper()
		if err := cl.Wait(ctx); err == nil || statusOf(err) != 0 {
			t.Errorf("%s: the request completed (%v); the connection should have ended", what, err)
		}
		testutil.Eventually(t, what+": the server to drop the connection", 10*time.Second, func() bool {
			s := r.srv.Stats()
			return s.ProtocolErrors == before.ProtocolErrors+1 && s.ConnsOpen == before.ConnsOpen-1
		})
		if c.Err() == nil {
			t.Errorf("%s: the client still works", what)
		}
	}

	// Sequence: one ahead of the next.
	c, f := open()
	before := r.srv.Stats()
	cl, err := c.SendRawOrder(ctx, lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: lwio.IOMarker,
		Length: 100, Sequence: c.NextSequence() + 1, Tid: 0x5EC}, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	ended("Sequence out of order", c, cl, before)
	if st := r.srv.Stats(); st.SequenceErrors != 1 {
		t.Errorf("SequenceErrors %d, want 1", st.SequenceErrors)
	}
	checkBystander("Sequence out of order")

	// Tid: a read held at the server, then another with its Tid.
	c, f = open()
	entered, release := stall(t)
	held, err := f.StartRead(ctx, make([]byte, 100), 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	<-entered
	before = r.srv.Stats()
	cl, err = c.SendRawOrder(ctx, lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: lwio.IOMarker,
		Length: 100, Sequence: c.NextSequence(), Tid: held.Tid()}, nil, -1)
	if err != nil {
		t.Fatal(err)
	}
	// The held read stays outstanding until the server has judged the
	// second one.
	testutil.Eventually(t, "the reused Tid to be counted", 10*time.Second, func() bool { return r.srv.Stats().TidReuses == 1 })
	release()
	ended("Tid reused", c, cl, before)
	if err := held.Wait(ctx); err == nil {
		t.Error("the held read completed on a connection that ended")
	}
	if st := r.srv.Stats(); st.TidReuses != 1 {
		t.Errorf("TidReuses %d, want 1", st.TidReuses)
	}
	checkBystander("Tid reused")

	// MaxSendBufferSize: the client says 4 KiB, then sends a 6 KiB write.
	restore := lwio.SetTestHookAuth(func(p []byte) {
		p[lwio.AuthOffMaxSend], p[lwio.AuthOffMaxSend+1], p[lwio.AuthOffMaxSend+2], p[lwio.AuthOffMaxSend+3] = 0, 0x10, 0, 0
		lwio.Resign(p)
	})
	c, f = open()
	restore()
	before = r.srv.Stats()
	cl, err = c.RawWrite(ctx, f.Fid(), 6<<10)
	if err != nil {
		t.Fatal(err)
	}
	ended("beyond MaxSendBufferSize", c, cl, before)
	checkBystander("beyond MaxSendBufferSize")

	if got, _ := os.ReadFile(filepath.Join(r.dir, "f")); !bytes.Equal(got, data) {
		t.Fatal("the file changed")
	}
}
