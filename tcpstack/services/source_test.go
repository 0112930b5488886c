package services

import (
	"bytes"
	"encoding/binary"
	"io"
	"math/rand/v2"
	"testing"
)

// TestSourceStreamPeriod: the stream is ChaCha8 keyed with the connection's
// number for its first SourcePeriod bytes, then those bytes again, whatever
// sizes it is read in.
func TestSourceStreamPeriod(t *testing.T) {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], 5)
	period := make([]byte, SourcePeriod)
	rand.NewChaCha8(key).Read(period)
	want := append(append(append([]byte{}, period...), period...), period[:12345]...)

	for _, chunk := range []int{1, 1000, 4096, 65536, SourcePeriod + 7, 3 << 20} {
		s := SourceStream(5)
		got := make([]byte, 0, len(want))
		buf := make([]byte, chunk)
		for len(got) < len(want) {
			k := min(chunk, len(want)-len(got))
			n, err := s.Read(buf[:k])
			if err != nil || n != k {
				t.Fatalf("chunk %d: Read = %d, %v; want %d, nil", chunk, n, err, k)
			}
			got = append(got, buf[:n]...)
		}
		if i := firstDiff(got, want); i >= 0 {
			t.Fatalf("chunk %d: the stream differs at byte %d", chunk, i)
		}
	}
	// Another connection's stream is another one.
	a, b := make([]byte, 64), make([]byte, 64)
	io.ReadFull(SourceStream(0), a)
	io.ReadFull(SourceStream(1), b)
	if bytes.Equal(a, b) {
		t.Fatal("connections 0 and 1 got the same stream")
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	if len(a) != len(b) {
		return min(len(a), len(b))
	}
	return -1
}
