package services

import (
	"io"
	"net"
	"testing"
	"time"
)

// TestQOTD: each connection gets one whole quotation, in turn, then EOF
// (the server closes first); what the client sends is ignored.
func TestQOTD(t *testing.T) {
	q := NewQOTD(nil)
	l := listen(t)
	done := make(chan error, 1)
	go func() { done <- q.Serve(l) }()
	for i := range 2 * len(Quotes) {
		c, err := net.Dial("tcp4", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		if i%2 == 1 {
			c.Write([]byte("ignored\r\n"))
		}
		c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := io.ReadAll(c)
		c.Close()
		if err != nil || string(got) != Quotes[i%len(Quotes)] {
			t.Fatalf("connection %d: %q (err %v), want quote %d", i, got, err, i%len(Quotes))
		}
		if !IsQuote(got) || len(got) > 512 {
			t.Fatalf("not a quote of at most 512 characters: %q", got)
		}
	}
	q.Close()
	if err := <-done; err != ErrServerClosed {
		t.Fatal(err)
	}
	if st := q.Stats(); st.Accepted != uint64(2*len(Quotes)) || st.Errors != 0 {
		t.Fatalf("stats %+v", st)
	}
}
