package direct

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"testing"
	"time"
)

// mixedSize is a message size from 1 B to 4 MiB, log-uniform: as many
// tiny writes as huge ones.
func mixedSize(r *rand.Rand) int {
	return max(1, int(1<<r.IntN(23))+r.IntN(1<<r.IntN(23)))%(4<<20) + 1
}

// sendMixed writes total seeded pseudo-random bytes in writes of mixed
// sizes and returns their SHA-256.
func sendMixed(c net.Conn, total int, seed uint64) ([32]byte, error) {
	r := rand.New(rand.NewPCG(seed, 1))
	data := rand.New(rand.NewPCG(seed, 2))
	h := sha256.New()
	buf := make([]byte, 4<<20)
	for sent := 0; sent < total; {
		n := min(mixedSize(r), total-sent)
		b := buf[:n]
		for i := 0; i+8 <= n; i += 8 {
			v := data.Uint64()
			b[i], b[i+1], b[i+2], b[i+3], b[i+4], b[i+5], b[i+6], b[i+7] = byte(v), byte(v>>8), byte(v>>16), byte(v>>24), byte(v>>32), byte(v>>40), byte(v>>48), byte(v>>56)
		}
		for i := n &^ 7; i < n; i++ {
			b[i] = byte(data.Uint32())
		}
		h.Write(b)
		if _, err := c.Write(b); err != nil {
			return [32]byte{}, err
		}
		sent += n
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s, nil
}

// recvMixed reads until EOF with reads of mixed sizes (partial reads) and
// returns the count and SHA-256.
func recvMixed(c net.Conn, seed uint64) (int, [32]byte, error) {
	r := rand.New(rand.NewPCG(seed, 3))
	h := sha256.New()
	buf := make([]byte, 4<<20)
	total := 0
	for {
		n, err := c.Read(buf[:mixedSize(r)])
		h.Write(buf[:n])
		total += n
		if err == io.EOF {
			var s [32]byte
			copy(s[:], h.Sum(nil))
			return total, s, nil
		}
		if err != nil {
			return total, [32]byte{}, err
		}
	}
}

// exchange runs both directions at once on a pair and checks the hashes.
func exchange(t *testing.T, ca, cb net.Conn, total int) time.Duration {
	t.Helper()
	type res struct {
		n   int
		sum [32]byte
		err error
	}
	start := time.Now()
	sentA, sentB := make(chan res, 1), make(chan res, 1)
	gotA, gotB := make(chan res, 1), make(chan res, 1)
	send := func(c net.Conn, seed uint64, out chan res) {
		s, err := sendMixed(c, total, seed)
		if err == nil {
			err = c.(interface{ CloseWrite() error }).CloseWrite()
		}
		out <- res{total, s, err}
	}
	recv := func(c net.Conn, seed uint64, out chan res) {
		n, s, err := recvMixed(c, seed)
		out <- res{n, s, err}
	}
	go send(ca, 1, sentA)
	go send(cb, 2, sentB)
	go recv(ca, 3, gotA)
	go recv(cb, 4, gotB)
	for _, p := range []struct {
		name       string
		sent, recv chan res
	}{{"A->B", sentA, gotB}, {"B->A", sentB, gotA}} {
		s, r := <-p.sent, <-p.recv
		if s.err != nil || r.err != nil {
			t.Fatalf("%s: send %v, receive %v", p.name, s.err, r.err)
		}
		if r.n != total || r.sum != s.sum {
			t.Fatalf("%s: %d of %d bytes, sha-256 %x want %x", p.name, r.n, total, r.sum[:6], s.sum[:6])
		}
	}
	return time.Since(start)
}

// TestLargeMixed: both directions at once, writes of 1 B to 4 MiB and reads
// of mixed sizes, SHA-256 checked: 256 MiB each way with the default
// configuration (inline below 64 KiB, RDMA Read above: the two interleave
// in one stream), and 64 MiB each way in RDMA Write and inline modes.
// -short and -race: 32 and 8 MiB.
func TestLargeMixed(t *testing.T) {
	a, b := rig(t)
	big, small := 256<<20, 64<<20
	if testing.Short() || raceEnabled {
		big, small = 32<<20, 8<<20
	}
	for _, c := range []struct {
		name  string
		cfg   Config
		total int
	}{
		{"auto", Config{}, big},
		{"rdma-write", Config{Transfer: TransferWrite}, small},
		{"inline", Config{Transfer: TransferInline}, small},
	} {
		t.Run(c.name, func(t *testing.T) {
			ca, cb := pair(t, a, b, c.cfg, c.cfg)
			defer ca.Close()
			defer cb.Close()
			d := exchange(t, ca, cb, c.total)
			t.Logf("%d MiB each way in %v (%.0f MB/s both ways), %v; stats %+v", c.total>>20, d,
				float64(2*c.total)/d.Seconds()/1e6, PathOf(ca), HostStats(a))
		})
	}
}

// TestCreditsExhaustedBothSides: tiny pools and staging areas, both sides
// write at once and neither reads until both writers are stuck at their
// credit reserve (both sides' data credits exhausted at the same time, and
// in RDMA Read mode both sink areas full); then both read. Every byte
// arrives: the reserve lets RD_DONE and credit returns through.
func TestCreditsExhaustedBothSides(t *testing.T) {
	a, b := rig(t)
	for _, tr := range []Transfer{TransferRead, TransferWrite, TransferInline} {
		t.Run(tr.String(), func(t *testing.T) {
			cfg := Config{Transfer: tr, Pool: 4, Reserve: 2, Threshold: 1, ChunkSize: 4096, Chunks: 2, MaxInline: 512}
			ca, cb := pair(t, a, b, cfg, cfg)
			defer ca.Close()
			defer cb.Close()
			const total = 1 << 20
			type res struct {
				sum [32]byte
				err error
			}
			sa, sb := make(chan res, 1), make(chan res, 1)
			go func() { s, err := sendMixed(ca, total, 11); ca.(*Conn).CloseWrite(); sa <- res{s, err} }()
			go func() { s, err := sendMixed(cb, total, 12); cb.(*Conn).CloseWrite(); sb <- res{s, err} }()
			// Wait until both writers are blocked at the reserve.
			stuck := func(c net.Conn) bool {
				x := c.(*Conn)
				x.mu.Lock()
				defer x.mu.Unlock()
				return x.writing && !x.cs.canSend(classData)
			}
			deadline := time.Now().Add(10 * time.Second)
			for !(stuck(ca) && stuck(cb)) {
				if time.Now().After(deadline) {
					t.Fatal("the writers never both ran out of credits")
				}
				time.Sleep(time.Millisecond)
			}
			ra, rb := make(chan res, 1), make(chan res, 1)
			go func() { _, s, err := recvMixed(ca, 5); ra <- res{s, err} }()
			go func() { _, s, err := recvMixed(cb, 6); rb <- res{s, err} }()
			for _, p := range [][2]chan res{{sa, rb}, {sb, ra}} {
				select {
				case s := <-p[0]:
					r := <-p[1]
					if s.err != nil || r.err != nil || s.sum != r.sum {
						t.Fatalf("send %v, receive %v, sums %x %x", s.err, r.err, s.sum[:4], r.sum[:4])
					}
				case <-time.After(30 * time.Second):
					t.Fatalf("deadlock: the streams did not finish\nA: %s\nB: %s", ca.(*Conn).debugState(), cb.(*Conn).debugState())
				}
			}
		})
	}
}

// TestCloseWithDataInFlight: Close right after a large Write returns; the
// peer still reads every byte, then EOF.
func TestCloseWithDataInFlight(t *testing.T) {
	a, b := rig(t)
	for _, tr := range []Transfer{TransferRead, TransferWrite, TransferInline} {
		t.Run(tr.String(), func(t *testing.T) {
			ca, cb := pair(t, a, b, Config{Transfer: tr}, Config{Transfer: tr})
			defer cb.Close()
			done := make(chan res2, 1)
			go func() { n, s, err := recvMixed(cb, 9); done <- res2{n, s, err} }()
			s, err := sendMixed(ca, 8<<20, 21)
			if err != nil {
				t.Fatal(err)
			}
			if err := ca.Close(); err != nil {
				t.Fatal(err)
			}
			r := <-done
			if r.err != nil || r.n != 8<<20 || r.sum != s {
				t.Fatalf("after Close: %d bytes, %v", r.n, r.err)
			}
			if _, err := ca.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
				t.Fatalf("write after Close: %v", err)
			}
			// The peer's writes now fail: the connection is gone.
			var werr error
			for range 100 {
				if _, werr = cb.Write(make([]byte, 1000)); werr != nil {
					break
				}
			}
			if werr == nil {
				t.Fatal("writes to a closed peer keep succeeding")
			}
		})
	}
}

type res2 struct {
	n   int
	sum [32]byte
	err error
}

// debugState describes a conn's protocol state (for failure messages).
func (c *Conn) debugState() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := fmt.Sprintf("cs %+v free %d ctlQ %d rq %d finQ %v finSent %v finRecv %v writing %v err %v readsOut %d txID %d rxID %d",
		c.cs, len(c.free), len(c.ctlQ), len(c.rq), c.finQ, c.finSent, c.finRecv, c.writing, c.err, c.readsOut, c.txID, c.rxID)
	if c.src != nil {
		s += fmt.Sprintf(" srcFree %d", len(c.src.free))
	}
	if c.sink != nil {
		s += fmt.Sprintf(" sinkFree %d", len(c.sink.free))
	}
	for i, r := range c.rq {
		if i > 4 {
			break
		}
		s += fmt.Sprintf(" [n %d off %d ready %v sink %d]", r.n, r.off, r.ready, r.sink)
	}
	return s
}

// TestCloseUnblocksWrite: Close while a Write waits for credits (the peer
// does not read): the Write returns net.ErrClosed and Close does not wait
// for it to drain.
func TestCloseUnblocksWrite(t *testing.T) {
	a, b := rig(t)
	cfg := Config{Pool: 4, Linger: 5 * time.Second}
	ca, cb := pair(t, a, b, cfg, cfg)
	defer cb.Close()
	werr := make(chan error, 1)
	go func() {
		_, err := ca.Write(make([]byte, 64<<20))
		werr <- err
	}()
	c := ca.(*Conn)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		stuck := c.writing && !c.cs.canSend(classData)
		c.mu.Unlock()
		if stuck {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the write never blocked")
		}
		time.Sleep(time.Millisecond)
	}
	start := time.Now()
	if err := ca.Close(); err != nil {
		t.Fatal(err)
	}
	if err := <-werr; !errors.Is(err, net.ErrClosed) {
		t.Fatalf("blocked Write: %v", err)
	}
	t.Logf("Close took %v", time.Since(start))
}
