package direct

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// TestHTTP: net/http's server and client, unchanged, over the
// sockets-direct listener and dialer: small and large bodies both ways,
// keep-alive connections reused.
func TestHTTP(t *testing.T) {
	a, b := rig(t)
	const port = 8080
	l, err := Listen(b, port, Config{})
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		sum := sha256.Sum256(body)
		w.Header().Set("X-Body-SHA256", fmt.Sprintf("%x", sum))
		if r.URL.Path == "/big" {
			w.Write(bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) // 1 MiB
			return
		}
		fmt.Fprintf(w, "hello %s, %d bytes", r.URL.Path, len(body))
	})}
	go srv.Serve(l)
	defer srv.Close()

	var paths []PathInfo
	tr := &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
		ap, err := netip.ParseAddrPort(addr)
		if err != nil {
			return nil, err
		}
		c, err := Dial(ctx, a, ap, Config{})
		if err == nil {
			paths = append(paths, PathOf(c))
		}
		return c, err
	}}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 20 * time.Second}
	url := fmt.Sprintf("http://%v/", netip.AddrPortFrom(b.Addr(), port))
	for i := range 5 {
		resp, err := client.Get(url + fmt.Sprintf("small%d", i))
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if want := fmt.Sprintf("hello /small%d, 0 bytes", i); string(body) != want {
			t.Fatalf("GET: %q, want %q", body, want)
		}
	}
	up := bytes.Repeat([]byte("upload!"), 300_000) // 2.1 MB
	resp, err := client.Post(url+"big", "application/octet-stream", bytes.NewReader(up))
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if got, want := resp.Header.Get("X-Body-SHA256"), fmt.Sprintf("%x", sha256.Sum256(up)); got != want {
		t.Fatalf("upload hash %s, want %s", got, want)
	}
	if !bytes.Equal(body, bytes.Repeat([]byte("0123456789abcdef"), 1<<16)) {
		t.Fatalf("download of %d bytes differs", len(body))
	}
	if len(paths) != 1 || paths[0].Path != PathRDMA {
		t.Fatalf("connections %v: want one, reused, on RDMA", paths)
	}
}
