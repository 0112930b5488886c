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
	mem, err := rings.NewArena(1 << 20)
	if err != nil {
		t.Fatal(err)
	}
	r := rdmaHost{mem: mem}
	conn := func() *DelegatedConn {
		c := &DelegatedConn{}
		c.cond = sync.NewCond(&c.mu)
		for range 2 {
			a, err := mem.Alloc(4096, rings.CacheLine)
			if err != nil {
				t.Fatal(err)
			}
			c.rxBufs = append(c.rxBufs, a)
		}
		if c.sndBase, err = mem.Alloc(8192, rings.CacheLine); err != nil {
			t.Fatal(err)
		}
		return c
	}
	c := conn()
	if r.TakeStream(c) {
		t.Fatal("early bytes reported for a connection with none")
	}
	if c.rxBufs != nil || c.rxBufMem != nil || c.sndBase != 0 || c.sndMem != nil {
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
