package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/emunic/emunic/internal/hostrig"
	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// newRigFor is newRig with the server's configuration made knowing the
// client host's address, and the export read-only or not.
func newRigFor(t testing.TB, readOnly bool, mk func(client netip.Addr) lwio.ServerConfig) *rig {
	t.Helper()
	a, b := hostrig.Pair(t)
	dir := t.TempDir()
	exp, err := lwio.OpenExport(dir)
	if err != nil {
		t.Fatal(err)
	}
	if readOnly {
		exp.SetReadOnly()
	}
	t.Cleanup(func() { exp.Close() })
	srv, err := lwio.NewServer(b, exp, mk(a.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return &rig{a: a, b: b, dir: dir, srv: srv}
}

// dialErr dials and returns the error (closing a client that got through).
func (r *rig) dialErr(cfg lwio.ClientConfig) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := lwio.Dial(ctx, r.a, r.b.Addr(), cfg)
	if err == nil {
		c.Close()
	}
	return err
}

// TestSecret: with a secret, a client without it or with another is
// refused at logon, before any file is named (no OPEN reaches the server);
// one with it reads and writes. A server without a secret refuses a client
// that has one.
func TestSecret(t *testing.T) {
	secret := []byte("correct horse battery staple")
	var logged safeBuffer
	r := newRig(t, lwio.ServerConfig{Secret: secret, Logger: slog.New(slog.NewTextHandler(&logged, nil))})
	r.put(t, "f", []byte("secret data"))
	for _, tc := range []struct {
		name   string
		secret []byte
	}{{"no secret", nil}, {"another secret", []byte("correct horse battery stapler")}} {
		err := r.dialErr(lwio.ClientConfig{Secret: tc.secret})
		var se *lwio.StatusError
		if !errors.As(err, &se) || se.Status != lwio.StatusAccessDenied || se.What != "LOGON" {
			t.Errorf("%s: Dial = %v, want LOGON refused with ACCESS_DENIED", tc.name, err)
		}
	}
	st := r.srv.Stats()
	if st.LogonFailures != 2 || st.Logons != 0 || st.Opens != 0 || st.Negotiates != 0 || st.Conns != 0 {
		t.Errorf("after two refusals: %+v", st)
	}
	c := r.dial(t, lwio.ClientConfig{Secret: secret, Name: "ALICE"})
	f, err := c.Open(context.Background(), "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	// The server identifies and logs each client by ClientName, key and
	// address: the refusals, the logon, the negotiation, the connection.
	log := logged.String()
	for _, want := range []string{"client refused", "why=\"no secret, or another one\"", "client logged on\" client=ALICE key=",
		"client negotiated\" client=ALICE addr=" + r.a.Addr().String(), "connection authenticated\" client=ALICE"} {
		if !strings.Contains(log, want) {
			t.Errorf("the server's log lacks %q:\n%s", want, log)
		}
	}
	if _, err := f.WriteAt([]byte("SECRET"), 0); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 11)
	if n, err := f.ReadAt(buf, 0); n != 11 || err != nil || string(buf) != "SECRET data" {
		t.Fatalf("ReadAt: %d, %v, %q", n, err, buf)
	}
	// The server knows the client by name, key and address, with what it
	// moved; and says so in its log when the client goes.
	var alice *lwio.ClientInfo
	for _, ci := range r.srv.Clients() {
		if ci.Name == "ALICE" {
			alice = &ci
		}
	}
	if alice == nil || alice.Addr.Addr() != r.a.Addr() || alice.FilesOpened != 1 || alice.BytesRead != 11 || alice.BytesWritten != 6 {
		t.Fatalf("Clients: %+v", r.srv.Clients())
	}
	c.Close()
	testutil.Eventually(t, "the client's end to be logged", 10*time.Second, func() bool {
		return strings.Contains(logged.String(), "client gone\" client=ALICE key="+alice.Key.String()) &&
			strings.Contains(logged.String(), "files=1 bytes_read=11 bytes_written=6")
	})

	// A server without a secret refuses a client with one.
	r2 := newRig(t, lwio.ServerConfig{})
	if err := r2.dialErr(lwio.ClientConfig{Secret: secret}); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("a client with a secret, a server without: %v", err)
	}
	if st := r2.srv.Stats(); st.LogonFailures != 1 {
		t.Errorf("LogonFailures %d, want 1", st.LogonFailures)
	}
}

// TestForgedSignature: a client that logged on (so it knows the server's
// key from the pipe) but signs AUTH_PARAMS without the secret, or under
// another, is refused ACCESS_DENIED and its connection closed.
func TestForgedSignature(t *testing.T) {
	secret := []byte("s3cret")
	r := newRig(t, lwio.ServerConfig{Secret: secret})
	for _, tc := range []struct {
		name string
		key  []byte
	}{{"the source's unkeyed MD5", nil}, {"another secret", []byte("guess")}} {
		restore := lwio.SetTestHookAuth(func(p []byte) { lwio.ResignWith(p, tc.key) })
		err := r.dialErr(lwio.ClientConfig{Secret: secret})
		restore()
		if statusOf(err) != lwio.StatusAccessDenied {
			t.Errorf("%s: Dial = %v, want ACCESS_DENIED", tc.name, err)
		}
	}
	testutil.Eventually(t, "the refused connections to close", 10*time.Second, func() bool { return r.srv.Stats().ConnsOpen == 0 })
	if st := r.srv.Stats(); st.AuthFailures != 2 || st.Authenticated != 0 || st.Logons != 2 {
		t.Errorf("stats %+v", st)
	}
	// Signed under the secret, the same parameters pass.
	restore := lwio.SetTestHookAuth(func(p []byte) { lwio.ResignWith(p, secret) })
	defer restore()
	if err := r.dialErr(lwio.ClientConfig{Secret: secret}); err != nil {
		t.Fatalf("signed under the secret: %v", err)
	}
}

// TestReadOnly: a read-only export serves reads; a create, a truncate and
// a write are ACCESS_DENIED, counted, and the file does not change.
func TestReadOnly(t *testing.T) {
	r := newRigFor(t, true, func(netip.Addr) lwio.ServerConfig { return lwio.ServerConfig{} })
	data := randomBytes(64<<10, 31)
	r.put(t, "f", data)
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	for _, fl := range []lwio.OpenFlags{{Create: true}, {Truncate: true}} {
		if _, err := c.Open(ctx, "f", fl); statusOf(err) != lwio.StatusAccessDenied {
			t.Errorf("Open %+v: %v, want ACCESS_DENIED", fl, err)
		}
	}
	if _, err := c.Open(ctx, "new", lwio.OpenFlags{Create: true}); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("create: %v, want ACCESS_DENIED", err)
	}
	f, err := c.Open(ctx, "f", lwio.OpenFlags{NoBuffering: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("overwrite"), 0); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("WriteAt: %v, want ACCESS_DENIED", err)
	}
	cl, err := f.StartWriteCollapsed(ctx, make([]byte, 4096), 1<<20, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Wait(ctx); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("collapsed write: %v, want ACCESS_DENIED", err)
	}
	buf := make([]byte, len(data))
	if n, err := f.ReadAt(buf, 0); n != len(data) || err != nil || !bytes.Equal(buf, data) {
		t.Fatalf("ReadAt: %d, %v", n, err)
	}
	if st := r.srv.Stats(); st.ReadOnlyRefusals != 5 || st.ProtocolErrors != 0 {
		t.Errorf("ReadOnlyRefusals %d ProtocolErrors %d, want 5 and 0", st.ReadOnlyRefusals, st.ProtocolErrors)
	}
	if got, _ := os.ReadFile(filepath.Join(r.dir, "f")); !bytes.Equal(got, data) {
		t.Fatal("the file changed")
	}
	if _, err := os.Stat(filepath.Join(r.dir, "new")); err == nil {
		t.Fatal("a file was created")
	}
}

// TestAllow: a pipe or an RDMA connection from an address Allow does not
// cover is closed at once, counted; a covered one is served.
func TestAllow(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24")}})
	if err := r.dialErr(lwio.ClientConfig{}); err == nil {
		t.Fatal("a client outside Allow was served")
	}
	// An RDMA connection request straight to the listener.
	v, err := verbs.Open(r.a)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := v.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if qp, err := v.DialRDMA(ctx, netip.AddrPortFrom(r.b.Addr(), lwio.DefaultRDMAPort), verbs.QPAttr{PD: v.AllocPD(), SendCQ: cq, RecvCQ: cq}); err == nil {
		qp.Destroy()
		t.Error("an RDMA connection from outside Allow was accepted")
	}
	if st := r.srv.Stats(); st.AddrRefused != 2 || st.Logons != 0 || st.Conns != 0 {
		t.Errorf("AddrRefused %d Logons %d Conns %d, want 2, 0, 0", st.AddrRefused, st.Logons, st.Conns)
	}
	r2 := newRigFor(t, false, func(client netip.Addr) lwio.ServerConfig {
		return lwio.ServerConfig{Allow: []netip.Prefix{netip.MustParsePrefix("192.0.2.0/24"), netip.PrefixFrom(client, 32)}}
	})
	r2.put(t, "f", []byte("abc"))
	if n, err := r2.dial(t, lwio.ClientConfig{}).Stat(context.Background(), "f"); n != 3 || err != nil {
		t.Fatalf("a client inside Allow: Stat %d, %v", n, err)
	}
	if st := r2.srv.Stats(); st.AddrRefused != 0 {
		t.Errorf("AddrRefused %d, want 0", st.AddrRefused)
	}
}

// TestKeysOnce: a client key is taken once (a second LOGON with it is
// refused at once); a NEGOTIATE whose key names no logon closes the pipe;
// both are counted, and the server goes on serving.
func TestKeysOnce(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "f", []byte("abc"))
	// Seed fixes the client's key: the second Dial reuses the first's.
	c := r.dial(t, lwio.ClientConfig{Seed: 99})
	if err := r.dialErr(lwio.ClientConfig{Seed: 99}); statusOf(err) != lwio.StatusAccessDenied {
		t.Errorf("a reused key: %v, want ACCESS_DENIED", err)
	}
	// A pipe that negotiates with a key no logon has.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := r.a.Dial(ctx, netip.AddrPortFrom(r.b.Addr(), lwio.DefaultPipePort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m, err := (&lwio.Negotiate{Request: true, Name: "INTRUDER", Key: uuid.New(),
		Providers: []lwio.Provider{{Name: lwio.ProviderName, Instances: []lwio.Instance{{HostAddress: []byte{1, 2, 3, 4}}}}}}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	conn.Write(m)
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if got, err := io.ReadAll(conn); len(got) != 0 || (err != nil && !strings.Contains(err.Error(), "reset")) {
		t.Errorf("the pipe answered %d bytes, %v; want it closed", len(got), err)
	}
	testutil.Eventually(t, "the refusals to be counted", 10*time.Second, func() bool { return r.srv.Stats().KeyRefusals == 2 })
	if n, err := c.Stat(ctx, "f"); n != 3 || err != nil {
		t.Fatalf("the first client after the refusals: Stat %d, %v", n, err)
	}
}

// safeBuffer is a bytes.Buffer for a logger several goroutines write to.
type safeBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *safeBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *safeBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}
