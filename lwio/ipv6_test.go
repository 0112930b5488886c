package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/lwio"
)

// TestIPv6: a client on a dual-stack host reaches a dual-stack server by
// its IPv6 address, and everything goes over IPv6: the server serves only
// the IPv6 subnet (Allow), so a pipe or an RDMA connection over IPv4 would
// be refused; with two instances, both RDMA connections come up. The file
// reads and writes back intact, the server knows the client by its IPv6
// address, and an IPv4 client of the same server is refused.
func TestIPv6(t *testing.T) {
	a6, b6 := netip.MustParsePrefix("fd00:5::1/64"), netip.MustParsePrefix("fd00:5::2/64")
	var rc hostrig.Config
	rc.DualStack(a6, b6)
	r := hostrig.New(t, rc)
	exp, err := lwio.OpenExport(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { exp.Close() })
	srv, err := lwio.NewServer(r.B, exp, lwio.ServerConfig{Instances: 2, Allow: []netip.Prefix{b6.Masked()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c, err := lwio.Dial(ctx, r.A, b6.Addr(), lwio.ClientConfig{Connections: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if n := c.Connections(); n != 2 {
		t.Errorf("%d RDMA connections, want 2", n)
	}
	f, err := c.Open(ctx, "v6.bin", lwio.OpenFlags{Create: true})
	if err != nil {
		t.Fatal(err)
	}
	data := randomBytes(1<<20+99, 6)
	if n, err := f.WriteAt(data, 0); err != nil || n != len(data) {
		t.Fatalf("WriteAt = %d, %v", n, err)
	}
	got := make([]byte, len(data)+10)
	if n, err := f.ReadAt(got, 0); n != len(data) || err != io.EOF || !bytes.Equal(got[:n], data) {
		t.Fatalf("ReadAt = %d, %v (equal %v)", n, err, bytes.Equal(got[:n], data))
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	cl := srv.Clients()
	if len(cl) != 1 || cl[0].Addr.Addr() != a6.Addr() {
		t.Errorf("the server's clients: %+v, want one at %v", cl, a6.Addr())
	}
	if st := srv.Stats(); st.AddrRefused != 0 || st.Authenticated != 2 {
		t.Errorf("server: %d refused for their address, %d connections authenticated (want 0, 2)", st.AddrRefused, st.Authenticated)
	}
	// The same server refuses the client's IPv4 address.
	_, err = lwio.Dial(ctx, r.A, r.B.Addr(), lwio.ClientConfig{})
	if err == nil || errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("a client over IPv4: %v, want a refusal", err)
	}
	if st := srv.Stats(); st.AddrRefused == 0 {
		t.Error("the IPv4 client was not refused for its address")
	}
}
