package direct

import (
	"bytes"
	"crypto/sha256"
	"io"
	"testing"
	"time"
)

// TestChunkCoalescing: writes shorter than a chunk share chunks while
// transfers are in flight (fewer transfers than writes), short writes
// that join a held chunk keep their place in the stream, and a chunk held
// for later writes goes without them: the peer answers a request whose
// last bytes sat in one.
func TestChunkCoalescing(t *testing.T) {
	a, b := rig(t)
	for _, tr := range []Transfer{TransferRead, TransferWrite} {
		t.Run(tr.String(), func(t *testing.T) {
			ca, cb := pair(t, a, b, Config{Transfer: tr}, Config{})
			defer ca.Close()
			defer cb.Close()
			deadline := time.Now().Add(30 * time.Second)
			ca.SetDeadline(deadline)
			cb.SetDeadline(deadline)
			const writes = 400
			var sent bytes.Buffer
			w := make([]byte, 64<<10)
			for i := range writes {
				for j := range w {
					w[j] = byte(i*7 + j)
				}
				sent.Write(w)
				if i%5 == 0 {
					sent.WriteString("short")
				}
			}
			// The request's tail: three 64 KiB writes in a row, so the
			// last is held while two transfers are in flight.
			sent.Write(bytes.Repeat([]byte("tail"), 3*16<<10))
			before := HostStats(a).RDMATransfers
			errc := make(chan error, 1)
			go func() {
				s := sent.Bytes()
				for i := range writes {
					if _, err := ca.Write(s[:64<<10]); err != nil {
						errc <- err
						return
					}
					s = s[64<<10:]
					if i%5 == 0 {
						if _, err := ca.Write(s[:5]); err != nil {
							errc <- err
							return
						}
						s = s[5:]
					}
				}
				for len(s) > 0 {
					if _, err := ca.Write(s[:64<<10]); err != nil {
						errc <- err
						return
					}
					s = s[64<<10:]
				}
				// Wait for the answer: nothing more is written.
				one := make([]byte, 1)
				_, err := io.ReadFull(ca, one)
				errc <- err
			}()
			got := make([]byte, sent.Len())
			if _, err := io.ReadFull(cb, got); err != nil {
				t.Fatalf("read: %v", err)
			}
			if sha256.Sum256(got) != sha256.Sum256(sent.Bytes()) {
				t.Fatal("the bytes differ")
			}
			if _, err := cb.Write([]byte{1}); err != nil {
				t.Fatal(err)
			}
			if err := <-errc; err != nil {
				t.Fatal(err)
			}
			n := HostStats(a).RDMATransfers - before
			t.Logf("%d writes of 64 KiB (and %d short ones) in %d transfers", writes+3, writes/5, n)
			if n >= writes {
				t.Errorf("%d transfers for %d writes of 64 KiB: none shared a chunk", n, writes+3)
			}
		})
	}
}
