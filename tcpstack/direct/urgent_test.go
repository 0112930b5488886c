package direct

import (
	"errors"
	"io"
	"testing"
)

// TestUrgent: an urgent byte sent between two writes reaches ReadOOB, and
// Read stops at its mark (AtMark), in each transfer mode; ReadOOB with
// none waiting says so.
func TestUrgent(t *testing.T) {
	a, b := rig(t)
	for _, tr := range []Transfer{TransferInline, TransferRead, TransferWrite} {
		t.Run(tr.String(), func(t *testing.T) {
			ca, cb := pair(t, a, b, Config{Transfer: tr, Threshold: 4}, Config{})
			defer ca.Close()
			defer cb.Close()
			c, r := ca.(*Conn), cb.(*Conn)
			if _, err := r.ReadOOB(); !errors.Is(err, ErrNoUrgent) {
				t.Fatalf("ReadOOB with nothing sent: %v", err)
			}
			if _, err := c.Write([]byte("before")); err != nil {
				t.Fatal(err)
			}
			if err := c.WriteOOB('!'); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Write([]byte("after")); err != nil {
				t.Fatal(err)
			}
			buf := make([]byte, 64)
			if _, err := io.ReadFull(r, buf[:6]); err != nil || string(buf[:6]) != "before" {
				t.Fatalf("before the mark: %q %v", buf[:6], err)
			}
			waitFor(t, func() bool { return r.AtMark() })
			n, err := r.Read(buf)
			if err != nil || string(buf[:n]) != "after"[:n] {
				t.Fatalf("after the mark: %q %v", buf[:n], err)
			}
			if r.AtMark() {
				t.Error("still at the mark after reading past it")
			}
			if u, err := r.ReadOOB(); err != nil || u != '!' {
				t.Fatalf("ReadOOB: %q %v", u, err)
			}
			if _, err := r.ReadOOB(); !errors.Is(err, ErrNoUrgent) {
				t.Fatalf("second ReadOOB: %v", err)
			}
			if p := c.PathInfo(); p.UrgentSends != 1 {
				t.Errorf("%v: one urgent send", p)
			}
		})
	}
}
