package direct

import (
	"errors"
	"io"
	"testing"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// dropExtension takes an optional extension away from h's provider before
// its switch exists (the switch asks once, when it starts).
func dropExtension(t *testing.T, h *tcpstack.Host, e verbs.Extension) {
	t.Helper()
	v, err := verbs.Open(h)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.DropExtension(e); err != nil {
		t.Fatal(err)
	}
	if err := v.GetExtension(e); !errors.Is(err, verbs.ErrOpNotSupported) {
		t.Fatalf("GetExtension(%v) after the drop: %v, want WSAEOPNOTSUPP", e, err)
	}
}

// TestProviderWithoutRdmaRead: providers that answer WSAEOPNOTSUPP for
// WSPRdmaRead on both hosts. The switches offer no RDMA Read in their
// hellos and every transfer, both ways, goes by RDMA Write rendezvous,
// from staging and from registered buffers; no RDMA Read is ever posted
// (the provider would refuse it).
func TestProviderWithoutRdmaRead(t *testing.T) {
	a, b := rig(t)
	dropExtension(t, a, verbs.ExtRdmaRead)
	dropExtension(t, b, verbs.ExtRdmaRead)
	if v, _ := verbs.Open(a); v.GetExtension(verbs.ExtRdmaWrite) != nil || v.DropExtension(verbs.ExtRdmaWrite) == nil {
		t.Fatal("WSPRdmaWrite is required: always there, never dropped")
	}
	ca, cb := pair(t, a, b, Config{Transfer: TransferRead}, Config{})
	defer ca.Close()
	defer cb.Close()
	for _, c := range []*Conn{ca.(*Conn), cb.(*Conn)} {
		if p := c.PathInfo(); p.Send != TransferWrite || p.Recv != TransferWrite {
			t.Fatalf("path %v, want RDMA Write both ways", p)
		}
	}
	exchange(t, ca, cb, 8<<20)
	pa, pb := PathOf(ca), PathOf(cb)
	t.Logf("A %v; B %v", pa, pb)
	if pa.ReadRendezvous+pb.ReadRendezvous != 0 || pa.WriteRendezvous == 0 || pb.WriteRendezvous == 0 {
		t.Errorf("A %v, B %v: want RDMA Write rendezvous only", pa, pb)
	}
	// The provider refuses an RDMA Read work request outright.
	w := rings.SendWR{Opcode: rings.WRRDMARead, NumSGE: 1, RKey: 1, RemoteAddr: 1}
	w.SGL[0] = rings.SGE{Addr: 1, Length: 1, LKey: 1}
	if err := ca.(*Conn).qp.PostSend(&w); !errors.Is(err, verbs.ErrOpNotSupported) {
		t.Errorf("posting an RDMA Read: %v, want WSAEOPNOTSUPP", err)
	}
}

// TestProviderWithoutCacheCallback: a provider without
// WSPMemoryRegistrationCacheCallback. Registered buffers still go zero
// copy, but their registration is made for the Write and undone after it
// (a cached one would outlive a Free the cache never hears of): the
// registration cache never sees them, and Free after the Write succeeds.
func TestProviderWithoutCacheCallback(t *testing.T) {
	a, b := rig(t)
	dropExtension(t, a, verbs.ExtMemoryRegistrationCacheCallback)
	ca, cb := pair(t, a, b, Config{}, Config{})
	defer ca.Close()
	defer cb.Close()
	src := alloc(t, a, 256<<10)
	fill(src.Bytes(), 6)
	ping(t, ca, cb)
	var before verbs.RegCacheStats
	for i := range 3 {
		if i == 1 {
			// The first Write made the conn's staging area (through
			// the cache); the application buffer must not go there.
			before = switches[a].cache.Stats()
		}
		got := make(chan []byte, 1)
		go func() {
			buf := make([]byte, 256<<10)
			n, _ := io.ReadFull(cb, buf)
			got <- buf[:n]
		}()
		if _, err := ca.Write(src.Bytes()); err != nil {
			t.Fatal(err)
		}
		if g := <-got; string(g) != string(src.Bytes()) {
			t.Fatal("the bytes differ")
		}
	}
	after := switches[a].cache.Stats()
	if after.Misses != before.Misses || after.Hits != before.Hits {
		t.Errorf("the registration cache saw the application buffer: %+v -> %+v", before, after)
	}
	if p := PathOf(ca); p.ZeroCopySends != 3 {
		t.Errorf("%v: want 3 zero-copy sends", p)
	}
	if err := src.Free(); err != nil {
		t.Fatalf("Free after the Writes: %v", err)
	}
}
