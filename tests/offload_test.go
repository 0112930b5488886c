package tests

import (
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/tcpstack"
)

// sendRandom writes n seeded pseudo-random bytes to w and returns their hash.
func sendRandom(t testing.TB, w io.Writer, n int64, seed byte) [32]byte {
	h := sha256.New()
	src := rand.NewChaCha8([32]byte{seed})
	buf := make([]byte, 256<<10)
	for sent := int64(0); sent < n; {
		k := min(int64(len(buf)), n-sent)
		src.Read(buf[:k])
		h.Write(buf[:k])
		if _, err := w.Write(buf[:k]); err != nil {
			t.Errorf("write after %d bytes: %v", sent, err)
			break
		}
		sent += k
	}
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s
}

func hashAll(r io.Reader) ([32]byte, int64, error) {
	h := sha256.New()
	n, err := io.Copy(h, r)
	var s [32]byte
	copy(s[:], h.Sum(nil))
	return s, n, err
}

// delegatedPair returns a delegated connection from A to B and B's
// delegated end.
func delegatedPair(t testing.TB, a, b *tcpstack.Host, port uint16) (ca, cb net.Conn) {
	t.Helper()
	l, err := b.ListenOffload(port)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	acc := make(chan net.Conn, 1)
	go func() {
		c, err := l.Accept()
		if err != nil {
			t.Error(err)
		}
		acc <- c
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	da, err := a.DialOffload(ctx, netip.AddrPortFrom(b.Addr(), port))
	if err != nil {
		t.Fatal(err)
	}
	cb = <-acc
	if _, ok := cb.(*tcpstack.DelegatedConn); !ok {
		t.Fatalf("accepted connection stayed on netstack (%T)", cb)
	}
	return da, cb
}

func TestDelegatedTransfer(t *testing.T) {
	a, b := newPair(t, port.WireConfig{})
	ca, cb := delegatedPair(t, a, b, 6001)
	n := int64(64 << 20)
	done := make(chan struct{})
	var got [32]byte
	var m int64
	var rerr error
	go func() {
		got, m, rerr = hashAll(cb)
		close(done)
	}()
	start := time.Now()
	want := sendRandom(t, ca, n, 3)
	ca.Close()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		t.Fatalf("receiver stuck; A %v B %v; engA %+v engB %+v", stats(a), stats(b), engineOf(t, a), engineOf(t, b))
	}
	el := time.Since(start)
	if rerr != nil || m != n || got != want {
		t.Fatalf("got %d bytes (err %v) sha %x want %d sha %x", m, rerr, got, n, want)
	}
	t.Logf("%d MiB delegated in %v (%.2f Gbit/s); A %v; B %v", n>>20, el, float64(n)*8/el.Seconds()/1e9, stats(a), stats(b))
	cb.Close()
}

// bothWays moves n bytes each way over one delegated connection at the
// same time and checks both hashes.
func bothWays(t *testing.T, wc port.WireConfig, n int64) {
	a, b := newPair(t, wc)
	bothWaysOn(t, a, b, 6002, n)
}

// bothWaysOn is bothWays between hosts a and b on port.
func bothWaysOn(t *testing.T, a, b *tcpstack.Host, port uint16, n int64) {
	ca, cb := delegatedPair(t, a, b, port)
	type res struct {
		sum [32]byte
		n   int64
		err error
	}
	recvA, recvB := make(chan res, 1), make(chan res, 1)
	go func() { s, m, err := hashAll(ca); recvA <- res{s, m, err} }()
	go func() { s, m, err := hashAll(cb); recvB <- res{s, m, err} }()
	sentB := make(chan [32]byte, 1)
	start := time.Now()
	go func() {
		sentB <- sendRandom(t, cb, n, 5)
		cb.(*tcpstack.DelegatedConn).CloseWrite()
	}()
	wantAB := sendRandom(t, ca, n, 4)
	ca.(*tcpstack.DelegatedConn).CloseWrite()
	wantBA := <-sentB
	for _, r := range []struct {
		name string
		ch   chan res
		want [32]byte
	}{{"A→B", recvB, wantAB}, {"B→A", recvA, wantBA}} {
		select {
		case got := <-r.ch:
			if got.err != nil || got.n != n || got.sum != r.want {
				t.Fatalf("%s: %d bytes (%v), hash match %v", r.name, got.n, got.err, got.sum == r.want)
			}
		case <-time.After(5 * time.Minute):
			t.Fatalf("%s stuck; engine A %+v B %+v", r.name, engineOf(t, a), engineOf(t, b))
		}
	}
	el := time.Since(start)
	ea, eb := engineOf(t, a), engineOf(t, b)
	t.Logf("%d MiB each way in %v (%.2f Gbit/s total); retransmitted segs A %d B %d, fast retransmits A %d B %d, OOO segs A %d B %d",
		n>>20, el, float64(2*n)*8/el.Seconds()/1e9, ea.TxRetransSegs, eb.TxRetransSegs,
		ea.FastRetransmits, eb.FastRetransmits, ea.OOOSegments, eb.OOOSegments)
	t.Logf("device A %v; device B %v; engine drops A %s; B %s", stats(a), stats(b), engineDrops(ea), engineDrops(eb))
	ca.Close()
	cb.Close()
}

func TestDelegatedBothWays(t *testing.T) {
	n := int64(256 << 20)
	if testing.Short() {
		n = 32 << 20
	}
	bothWays(t, port.WireConfig{}, n)
}

func TestDelegatedBothWaysImpaired(t *testing.T) {
	n := int64(256 << 20)
	if testing.Short() {
		n = 16 << 20
	}
	imp := port.Impairments{LossPercent: 2, ReorderPercent: 2, ReorderGap: 3, DuplicatePercent: 2}
	bothWays(t, port.WireConfig{Seed: 11, AToB: imp, BToA: imp}, n)
}

// engineDrops lists the non-zero Drop* and OOO* engine counters.
func engineDrops(c tcpstack.EngineCounters) string {
	v := reflect.ValueOf(c)
	out := ""
	for i := 0; i < v.NumField(); i++ {
		name := v.Type().Field(i).Name
		if (strings.HasPrefix(name, "Drop") || strings.HasPrefix(name, "OOO")) && v.Field(i).Uint() != 0 {
			out += fmt.Sprintf("%s=%d ", name, v.Field(i).Uint())
		}
	}
	if out == "" {
		return "none"
	}
	return out
}
