package lwio_test

import (
	"context"
	"testing"

	"github.com/emunic/emunic/lwio"
)

// BenchmarkRead64K reads a file in 64 KiB reads, 16 outstanding, into
// registered client memory (zero-copy), in both completion modes.
func BenchmarkRead64K(b *testing.B) { benchRead(b, 64<<10, 16) }

// BenchmarkRead4K is small reads at depth: 4 KiB, 16 outstanding.
func BenchmarkRead4K(b *testing.B) { benchRead(b, 4<<10, 16) }

// BenchmarkRead4KDepth1 is the latency case: one 4 KiB read at a time.
func BenchmarkRead4KDepth1(b *testing.B) { benchRead(b, 4<<10, 1) }

func benchRead(b *testing.B, piece, window int) {
	for _, polling := range []bool{false, true} {
		b.Run(map[bool]string{false: "interrupt", true: "polling"}[polling], func(b *testing.B) {
			r := newRigTB(b, lwio.ServerConfig{})
			const size = 16 << 20
			r.putTB(b, "f", randomBytes(size, 1))
			c := r.dialTB(b, lwio.ClientConfig{Polling: polling, Credits: 32})
			ctx := context.Background()
			f, err := c.Open(ctx, "f", lwio.OpenFlags{})
			if err != nil {
				b.Fatal(err)
			}
			mem, err := c.Alloc(window * piece)
			if err != nil {
				b.Fatal(err)
			}
			done := make(chan *lwio.Call, window)
			b.SetBytes(int64(piece))
			b.ResetTimer()
			inflight, off := 0, int64(0)
			for i := 0; i < b.N; i++ {
				if inflight == window {
					cl := <-done
					if cl.Err != nil {
						b.Fatal(cl.Err)
					}
					inflight--
				}
				slot := i % window
				if _, err := f.StartRead(ctx, mem[slot*piece:(slot+1)*piece], off, done); err != nil {
					b.Fatal(err)
				}
				inflight++
				off = (off + int64(piece)) % size
			}
			for ; inflight > 0; inflight-- {
				<-done
			}
		})
	}
}
