package port

import (
	"encoding/binary"
	"runtime"
	"testing"
	"time"
)

// testFrame builds a frame of size bytes (at least 18) carrying seq in the four bytes after
// the Ethernet header and a pattern derived from seq after that, so that a frame can be
// identified and checked byte for byte on the far side.
func testFrame(seq uint32, size int) []byte {
	f := make([]byte, size)
	copy(f[0:6], []byte{0x02, 0, 0, 0, 0, 0xbb})  // dst: locally administered
	copy(f[6:12], []byte{0x02, 0, 0, 0, 0, 0xaa}) // src
	binary.BigEndian.PutUint16(f[12:14], 0x88b5)  // IEEE local experimental EtherType
	if size >= EthHeaderLen+4 {
		binary.BigEndian.PutUint32(f[14:18], seq)
	}
	for i := EthHeaderLen + 4; i < size; i++ {
		f[i] = byte(uint32(i)*7 + seq)
	}
	return f
}

func frameSeq(f []byte) uint32 { return binary.BigEndian.Uint32(f[14:18]) }

// drain reads every frame already waiting at p without blocking.
func drain(t testing.TB, p *WirePort) [][]byte {
	t.Helper()
	var out [][]byte
	buf := make([]byte, MaxFrameSize)
	for p.Pending() > 0 {
		n, err := p.ReadFrame(buf)
		if err != nil {
			t.Fatalf("%v: ReadFrame: %v", p, err)
		}
		out = append(out, append([]byte(nil), buf[:n]...))
	}
	return out
}

// readFrames reads n frames from p, failing the test if they do not all arrive within timeout.
func readFrames(t testing.TB, p Port, n int, timeout time.Duration) [][]byte {
	t.Helper()
	type result struct {
		frames [][]byte
		err    error
	}
	done := make(chan result, 1)
	stop := make(chan struct{})
	go func() {
		var r result
		buf := make([]byte, MaxFrameSize)
		for len(r.frames) < n {
			k, err := p.ReadFrame(buf)
			if err != nil {
				r.err = err
				break
			}
			r.frames = append(r.frames, append([]byte(nil), buf[:k]...))
		}
		select {
		case done <- r:
		case <-stop:
		}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			t.Fatalf("%v: after %d of %d frames: %v", p, len(r.frames), n, r.err)
		}
		return r.frames
	case <-time.After(timeout):
		close(stop)
		p.Close() // unblock the reader goroutine
		t.Fatalf("%v: timed out waiting for %d frames", p, n)
		return nil
	}
}

// checkGoroutines fails the test if it ends with more goroutines than it started with
// (after giving exiting goroutines a moment). Use as: defer checkGoroutines(t)().
func checkGoroutines(t testing.TB) func() {
	t.Helper()
	before := runtime.NumGoroutine()
	return func() {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second)
		for {
			after := runtime.NumGoroutine()
			if after <= before {
				return
			}
			if time.Now().After(deadline) {
				buf := make([]byte, 1<<16)
				buf = buf[:runtime.Stack(buf, true)]
				t.Fatalf("goroutine leak: %d before, %d after\n%s", before, after, buf)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
