package delegation

import (
	"math/rand/v2"
	"testing"
)

// refChecksum is RFC 1071 the slow way.
func refChecksum(b []byte, initial uint32) uint16 {
	sum := initial
	for i := 0; i+1 < len(b); i += 2 {
		sum += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		sum += uint32(b[len(b)-1]) << 8
	}
	for sum > 0xFFFF {
		sum = sum>>16 + sum&0xFFFF
	}
	return uint16(sum)
}

func TestChecksumMatchesReference(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	for n := 0; n < 300; n++ {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if n%7 == 0 {
			for i := range b {
				b[i] = 0xFF
			}
		}
		if got, want := foldChecksum(checksumAcc(0, b)), refChecksum(b, 0); got != want {
			t.Fatalf("len %d: %#x want %#x", n, got, want)
		}
	}
}

func FuzzChecksum(f *testing.F) {
	f.Add([]byte{0xFF, 0xFF, 0xFF}, uint16(0xFFFF))
	f.Add([]byte{}, uint16(0))
	f.Fuzz(func(t *testing.T, b []byte, init uint16) {
		if got, want := foldChecksum(checksumAcc(uint64(init), b)), refChecksum(b, uint32(init)); got != want {
			t.Fatalf("%#x want %#x", got, want)
		}
	})
}

func BenchmarkChecksum1500(b *testing.B) {
	buf := make([]byte, 1500)
	for i := range buf {
		buf[i] = byte(i)
	}
	b.SetBytes(int64(len(buf)))
	for i := 0; i < b.N; i++ {
		checksumAcc(0, buf)
	}
}
