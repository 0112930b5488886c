package tcpstack

import (
	"sync"
	"testing"

	"github.com/emunic/emunic/rings"
)

// TestRDMATakeStream: the seam's TakeStream gives back the byte-stream
// memory of a connection a QP takes over, and reports bytes the host
// already holds (they did not go to the QP).
func TestRDMATakeStream(t *testing.T) {
	mem, err := rings.NewArena(2 << 20)
	if err != nil {
		t.Fatal(err)
	}
	r := rdmaHost{mem: mem}
	pool := newBufPool(mem, 0)
	conn := func() *DelegatedConn {
		c := &DelegatedConn{o: &offloader{pool: pool}}
		c.cond = sync.NewCond(&c.mu)
		for range 2 {
			a, b, ok := pool.get(4096)
			if !ok {
				t.Fatal("pool empty")
			}
			c.rxBufs = append(c.rxBufs, rxBuf{addr: a, mem: b})
		}
		a, b, ok := pool.get(8192)
		if !ok {
			t.Fatal("pool empty")
		}
		c.snd = []sndChunk{{addr: a, mem: b}}
		return c
	}
	c := conn()
	if r.TakeStream(c) {
		t.Fatal("early bytes reported for a connection with none")
	}
	if c.rxBufs != nil || c.snd != nil || pool.stats().InUse != 0 {
		t.Fatal("the byte-stream memory of an RDMA connection kept")
	}
	c = conn()
	c.chunks = []rxChunk{{data: []byte("MPA ID Req Frame"), userID: -1}}
	if !r.TakeStream(c) || c.rxBufs != nil {
		t.Fatal("bytes the host holds not reported, or the buffers kept")
	}
	c = conn()
	c.legacyOut = 10
	if !r.TakeStream(c) {
		t.Fatal("legacy bytes the host holds not reported")
	}
}
