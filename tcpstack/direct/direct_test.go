package direct

import (
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/tcpstack"
)

// rig is two hosts with their switches shut down at the end.
func rig(t testing.TB) (a, b *tcpstack.Host) {
	t.Helper()
	a, b = hostrig.Pair(t)
	t.Cleanup(func() { Shutdown(a); Shutdown(b) })
	return a, b
}

var nextPort atomic.Uint32

func init() { nextPort.Store(9000) }

// pair connects a (dialler, cfgA) to b (listener, cfgB) on a fresh port.
func pair(t testing.TB, a, b *tcpstack.Host, cfgA, cfgB Config) (ca, cb net.Conn) {
	t.Helper()
	port := uint16(nextPort.Add(1))
	l, err := Listen(b, port, cfgB)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	type res struct {
		c   net.Conn
		err error
	}
	acc := make(chan res, 1)
	go func() {
		c, err := l.Accept()
		acc <- res{c, err}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ca, err = Dial(ctx, a, netip.AddrPortFrom(b.Addr(), port), cfgA)
	if err != nil {
		t.Fatal(err)
	}
	r := <-acc
	if r.err != nil {
		t.Fatal(r.err)
	}
	return ca, r.c
}

func TestDialListenRDMA(t *testing.T) {
	a, b := rig(t)
	for _, tr := range []Transfer{TransferInline, TransferRead, TransferWrite} {
		t.Run(tr.String(), func(t *testing.T) {
			cfg := Config{Transfer: tr, Threshold: 1000}
			ca, cb := pair(t, a, b, cfg, cfg)
			defer ca.Close()
			defer cb.Close()
			pa, pb := PathOf(ca), PathOf(cb)
			if pa.Path != PathRDMA || pb.Path != PathRDMA || pa.Send != tr || pb.Recv != tr || pb.Send != tr {
				t.Fatalf("paths %v / %v", pa, pb)
			}
			msg := make([]byte, 300<<10)
			for i := range msg {
				msg[i] = byte(i * 13)
			}
			go func() {
				ca.Write([]byte("hello"))
				ca.Write(msg)
				ca.(*Conn).CloseWrite()
			}()
			got, err := io.ReadAll(cb)
			if err != nil {
				t.Fatal(err)
			}
			want := append([]byte("hello"), msg...)
			if !bytes.Equal(got, want) {
				t.Fatalf("got %d bytes, want %d", len(got), len(want))
			}
			// And back.
			if _, err := cb.Write(msg[:5000]); err != nil {
				t.Fatal(err)
			}
			back := make([]byte, 5000)
			if _, err := io.ReadFull(ca, back); err != nil || !bytes.Equal(back, msg[:5000]) {
				t.Fatal(err)
			}
			t.Logf("stats A %+v", HostStats(a))
		})
	}
}

func hashOf(b []byte) [32]byte { return sha256.Sum256(b) }

var _ = rand.IntN
