package services

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// TestSource reads a source connection for a while, checks every byte
// against SourceStream, closes, and finds the server's count of what it
// sent at least what was read and the connection ended cleanly.
func TestSource(t *testing.T) {
	srv := NewSource(nil)
	l := listen(t)
	go srv.Serve(l)
	defer srv.Close()
	for conn := uint64(0); conn < 2; conn++ {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		const want = 5 << 20
		got := make([]byte, want)
		if _, err := io.ReadFull(c, got); err != nil {
			t.Fatal(err)
		}
		exp := make([]byte, want)
		io.ReadFull(SourceStream(conn), exp)
		if !bytes.Equal(got, exp) {
			t.Fatalf("connection %d: the bytes are not SourceStream(%d)", conn, conn)
		}
		c.(*net.TCPConn).CloseWrite()
		io.Copy(io.Discard, c) // until the server closes
		c.Close()
	}
	srv.Close()
	st := srv.Stats()
	if st.Accepted != 2 || st.Errors != 0 || st.BytesOut < 2*(5<<20) || st.Active != 0 {
		t.Errorf("stats %+v: want 2 accepted, no errors, at least 10 MiB out", st)
	}
}

// TestSourceClientResets: a client that closes without reading everything
// (its stack answers with a reset) also ends the connection cleanly.
func TestSourceClientResets(t *testing.T) {
	srv := NewSource(nil)
	l := listen(t)
	go srv.Serve(l)
	c, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	io.ReadFull(c, buf)
	c.(*net.TCPConn).SetLinger(0)
	c.Close()
	srv.Close()
	if st := srv.Stats(); st.Accepted != 1 || st.Active != 0 || st.Errors != 0 {
		t.Errorf("stats %+v", st)
	}
}
