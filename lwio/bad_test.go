package lwio_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emunic/emunic/internal/testutil"
	"github.com/emunic/emunic/lwio"
	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// stall holds every server worker at its next read or write until the
// returned release is called.
func stall(t *testing.T) (entered <-chan lwio.Opcode, release func()) {
	in := make(chan lwio.Opcode, 64)
	gate := make(chan struct{})
	restore := lwio.SetTestHookIO(func(op lwio.Opcode) {
		in <- op
		<-gate
	})
	var once sync.Once
	rel := func() { once.Do(func() { close(gate); restore() }) }
	t.Cleanup(rel)
	return in, rel
}

// startReads submits n reads of size bytes at consecutive offsets.
func startReads(t *testing.T, f *lwio.File, n, size int) []*lwio.Call {
	t.Helper()
	calls := make([]*lwio.Call, 0, n)
	for i := range n {
		cl, err := f.StartRead(context.Background(), make([]byte, size), int64(i*size), nil)
		if err != nil {
			t.Fatal(err)
		}
		calls = append(calls, cl)
	}
	return calls
}

// tally waits for calls and counts the ones that succeeded and the ones
// that failed with status; any other outcome fails t.
func tally(t *testing.T, calls []*lwio.Call, status uint32) (ok, failed int) {
	t.Helper()
	for _, cl := range calls {
		switch err := cl.Wait(context.Background()); {
		case err == nil:
			ok++
		case statusOf(err) == status:
			failed++
		default:
			t.Errorf("read: %v", err)
		}
	}
	return ok, failed
}

func TestAuthRefused(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	for _, tc := range []struct {
		name string
		edit func([]byte)
	}{
		{"bad signature", func(p []byte) { p[lwio.AuthOffMaxRdmaWin] ^= 1 }},
		{"wrong key", func(p []byte) { p[lwio.AuthOffOptions+2] ^= 0xFF; lwio.Resign(p) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			defer lwio.SetTestHookAuth(tc.edit)()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := lwio.Dial(ctx, r.a, r.b.Addr(), lwio.ClientConfig{})
			if statusOf(err) != lwio.StatusAccessDenied {
				t.Fatalf("Dial = %v, want ACCESS_DENIED", err)
			}
		})
	}
	testutil.Eventually(t, "the refused connections to close", 10*time.Second, func() bool { return r.srv.Stats().ConnsOpen == 0 })
	if st := r.srv.Stats(); st.AuthFailures != 2 || st.Authenticated != 0 {
		t.Errorf("stats %+v", st)
	}
	// The server still serves.
	r.put(t, "f", []byte("ok"))
	c := r.dial(t, lwio.ClientConfig{})
	if n, err := c.Stat(context.Background(), "f"); n != 2 || err != nil {
		t.Fatalf("Stat after refusals: %d, %v", n, err)
	}
}

// TestAuthTimeout connects an RDMA connection that never authenticates.
func TestAuthTimeout(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{AuthTimeout: 200 * time.Millisecond})
	v, err := verbs.Open(r.a)
	if err != nil {
		t.Fatal(err)
	}
	cq, err := v.CreateCQ(16)
	if err != nil {
		t.Fatal(err)
	}
	pd := v.AllocPD()
	buf, _ := v.AllocBuffer(64)
	mr, err := v.RegMR(pd, buf, verbs.AccessLocalWrite)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	qp, err := v.DialRDMA(ctx, netip.AddrPortFrom(r.b.Addr(), lwio.DefaultRDMAPort), verbs.QPAttr{PD: pd, SendCQ: cq, RecvCQ: cq,
		Setup: func(qp *verbs.QP) error {
			wr := rings.RecvWR{WRID: 1, NumSGE: 1}
			wr.SGL[0] = mr.SGE(0, 64)
			return qp.PostRecv(&wr)
		}})
	if err != nil {
		t.Fatal(err)
	}
	defer qp.Destroy()
	// The server ends the connection: the posted receive is flushed.
	wc := make([]rings.Completion, 4)
	n, err := cq.PollWait(ctx, wc, false)
	if err != nil || n == 0 || wc[0].Status == rings.WCSuccess {
		t.Fatalf("completion %v, %v; want the receive flushed", wc[:n], err)
	}
	testutil.Eventually(t, "the timeout to be counted", 10*time.Second, func() bool { return r.srv.Stats().AuthTimeouts == 1 })
}

// TestBadRequests sends requests the server must refuse one by one on one
// connection, which keeps working after each.
func TestBadRequests(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "f", randomBytes(64<<10, 11))
	c := r.dial(t, lwio.ClientConfig{})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	io := lwio.IOMarker
	cases := []struct {
		name    string
		h       lwio.Header
		payload []byte
		want    uint32
	}{
		{"unknown opcode", lwio.Header{Opcode: 0x0C, Flags: lwio.FlagInterrupt}, nil, lwio.StatusInvalidDeviceReq},
		{"unknown fid", lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: 999, Marker: uint8(io), Length: 10}, nil, lwio.StatusInvalidHandle},
		{"no marker", lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Length: 10}, nil, lwio.StatusInvalidParameter},
		{"read beyond the window", lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io), Length: 1 << 30}, nil, lwio.StatusInvalidParameter},
		{"zero length", lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io)}, nil, lwio.StatusInvalidParameter},
		{"vectored read without regions", lwio.Header{Opcode: lwio.OpVecRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io), Length: 4096, NumPages: 1, PageSize: 4096}, nil, lwio.StatusInvalidParameter},
		{"write length disagrees", lwio.Header{Opcode: lwio.OpWrite, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io), Length: 100}, make([]byte, 10), lwio.StatusInvalidParameter},
		{"credit without a grant", lwio.Header{Opcode: lwio.OpCredit, Flags: lwio.FlagInterrupt}, nil, lwio.StatusInvalidParameter},
		{"register a bad key", lwio.Header{Opcode: lwio.OpRegister, Flags: lwio.FlagInterrupt}, make([]byte, lwio.FidParamsSize), lwio.StatusAccessDenied},
		{"close an unknown fid", lwio.Header{Opcode: lwio.OpClose, Flags: lwio.FlagInterrupt, Fid: 77}, nil, lwio.StatusInvalidHandle},
		// One per check of the server's request table.
		{"auth after auth", lwio.Header{Opcode: lwio.OpAuth, Flags: lwio.FlagInterrupt}, nil, lwio.StatusInvalidDeviceReq},
		{"cancel an unknown fid", lwio.Header{Opcode: lwio.OpCancel, Flags: lwio.FlagInterrupt, Fid: 77}, nil, lwio.StatusInvalidHandle},
		{"read with bytes after the header", lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io), Length: 10}, make([]byte, 4), lwio.StatusInvalidParameter},
		{"register without its parameters", lwio.Header{Opcode: lwio.OpRegister, Flags: lwio.FlagInterrupt}, make([]byte, lwio.FidParamsSize-1), lwio.StatusInvalidParameter},
		{"interrupt without the control flag", lwio.Header{Opcode: lwio.OpInterrupt, Flags: lwio.FlagInterrupt}, nil, lwio.StatusInvalidParameter},
	}
	// A vectored read whose region shape is wrong.
	var reg [lwio.RegionSize]byte
	(&lwio.Region{DataVa: 1, DataMh: 1, Length: 100}).Encode(reg[:])
	cases = append(cases, struct {
		name    string
		h       lwio.Header
		payload []byte
		want    uint32
	}{"region not a sector multiple", lwio.Header{Opcode: lwio.OpVecRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: uint8(io), Length: 100, NumPages: 1, PageSize: 4096}, reg[:], lwio.StatusInvalidParameter})
	for i, tc := range cases {
		length := -1
		if tc.h.Length != 0 || tc.h.Opcode == lwio.OpRead {
			length = int(tc.h.Length)
		}
		cl, err := c.SendRaw(ctx, tc.h, tc.payload, length)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if err := cl.Wait(ctx); statusOf(err) != tc.want {
			t.Errorf("%s: %v, want status %#x", tc.name, err, tc.want)
		}
		if st := r.srv.Stats(); st.BadRequests != uint64(i+1) {
			t.Errorf("%s: BadRequests %d, want %d", tc.name, st.BadRequests, i+1)
		}
		buf := make([]byte, 100)
		if n, err := f.ReadAt(buf, 0); n != 100 || err != nil {
			t.Fatalf("after %s: ReadAt %d, %v", tc.name, n, err)
		}
	}
	if st := r.srv.Stats(); st.ProtocolErrors+st.ConnErrors != 0 {
		t.Errorf("a refused request cost the connection: %+v", st)
	}
}

// TestConnectionKillers: requests the source says end the connection, or
// that the RDMA layer must end, end only that client's connection.
func TestConnectionKillers(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{MaxRecvBuffer: 8192})
	data := randomBytes(1<<20, 12)
	r.put(t, "f", data)
	ctx := context.Background()
	// A bystander reads all the while.
	by := r.dial(t, lwio.ClientConfig{})
	bf, err := by.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	var stopOnce sync.Once
	defer stopOnce.Do(func() { close(stop) })
	byErr := make(chan error, 1)
	go func() {
		buf := make([]byte, len(data))
		for {
			select {
			case <-stop:
				byErr <- nil
				return
			default:
			}
			if n, err := bf.ReadAt(buf, 0); n != len(data) || err != nil {
				byErr <- err
				return
			}
		}
	}()
	kill := []struct {
		name string
		do   func(c *lwio.Client, f *lwio.File) (*lwio.Call, error)
	}{
		{"undefined header flags", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			return c.SendRaw(ctx, lwio.Header{Opcode: lwio.OpClose, Flags: lwio.FlagInterrupt | 0x01, Fid: f.Fid()}, nil, -1)
		}},
		{"write Length beyond MaxRecvBufferSize", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			return c.SendRaw(ctx, lwio.Header{Opcode: lwio.OpWrite, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: lwio.IOMarker}, make([]byte, 16), 9000)
		}},
		{"write data beyond the receive buffer", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			return c.RawWrite(ctx, f.Fid(), 32<<10)
		}},
		{"a message shorter than the header", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			return c.RawBytes(ctx, []byte("LWIO, but short"))
		}},
		{"an RDMA Write at the server", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			// The server registers nothing for remote access: whatever
			// STag a client guesses, its NIC answers with a Terminate.
			if err := c.RawRDMA(false, 0x100, 0, 4096); err != nil {
				return nil, err
			}
			return f.StartRead(ctx, make([]byte, 10), 0, nil)
		}},
		{"an RDMA Read at the server", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			if err := c.RawRDMA(true, 0x12345, 0, 4096); err != nil {
				return nil, err
			}
			return f.StartRead(ctx, make([]byte, 10), 0, nil)
		}},
		{"read into a bad STag", func(c *lwio.Client, f *lwio.File) (*lwio.Call, error) {
			return c.SendRaw(ctx, lwio.Header{Opcode: lwio.OpRead, Flags: lwio.FlagInterrupt, Fid: f.Fid(), Marker: lwio.IOMarker,
				Length: 4096, DataVa: 0x1000, DataMh: 0xDEAD00}, nil, -1)
		}},
	}
	for _, k := range kill {
		c := r.dial(t, lwio.ClientConfig{})
		f, err := c.Open(ctx, "f", lwio.OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		before := r.srv.Stats()
		cl, err := k.do(c, f)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		if err := cl.Wait(ctx); err == nil || statusOf(err) != 0 {
			t.Errorf("%s: the request completed (%v); the connection should have ended", k.name, err)
		}
		if _, err := f.ReadAt(make([]byte, 10), 0); err == nil {
			t.Errorf("%s: the connection still works", k.name)
		}
		testutil.Eventually(t, k.name+": the server to drop the connection", 10*time.Second, func() bool {
			s := r.srv.Stats()
			return s.ProtocolErrors+s.ConnErrors > before.ProtocolErrors+before.ConnErrors && s.ConnsOpen == before.ConnsOpen-1
		})
		c.Close()
	}
	stopOnce.Do(func() { close(stop) })
	if err := <-byErr; err != nil {
		t.Fatalf("the bystander's reads failed: %v", err)
	}
	if got, _ := os.ReadFile(filepath.Join(r.dir, "f")); !bytes.Equal(got, data) {
		t.Fatal("the file changed")
	}
}

// TestClosedFid: I/O on a Fid after its CLOSE is FILE_CLOSED at the
// server (the client's own check, ErrFileClosed, is bypassed).
func TestClosedFid(t *testing.T) {
	for _, polling := range []bool{false, true} {
		r := newRig(t, lwio.ServerConfig{})
		r.put(t, "f", randomBytes(4096, 17))
		c := r.dial(t, lwio.ClientConfig{Polling: polling})
		ctx := context.Background()
		f, err := c.Open(ctx, "f", lwio.OpenFlags{})
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
		flags := uint8(lwio.FlagInterrupt)
		if polling {
			flags = 0
		}
		for _, op := range []lwio.Opcode{lwio.OpRead, lwio.OpWrite} {
			var payload []byte
			if op == lwio.OpWrite {
				payload = []byte("abcd")
			}
			cl, err := c.SendRaw(ctx, lwio.Header{Opcode: op, Flags: flags, Fid: f.Fid(), Marker: lwio.IOMarker, Length: 4}, payload, 4)
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.Wait(ctx); statusOf(err) != lwio.StatusFileClosed {
				t.Errorf("polling %v, %v after CLOSE: %v, want FILE_CLOSED", polling, op, err)
			}
		}
		testutil.Eventually(t, "the file to close on the server", 10*time.Second, func() bool { return r.srv.Stats().FilesOpen == 0 })
	}
}

func TestCreditViolation(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{InitialCredits: 2, Workers: 1,
		CreditPolicy: func(int, int) int { return 2 }})
	data := randomBytes(64<<10, 13)
	r.put(t, "f", data)
	c := r.dial(t, lwio.ClientConfig{Credits: 2})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	by := r.dial(t, lwio.ClientConfig{Credits: 2})
	bf, err := by.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := stall(t)
	if err := c.Cheat(2); err != nil { // within the server's slack
		t.Fatal(err)
	}
	calls := startReads(t, f, 4, 4096)
	<-entered
	testutil.Eventually(t, "two violations", 10*time.Second, func() bool { return r.srv.Stats().CreditViolations == 2 })
	release()
	ok, refused := tally(t, calls, lwio.StatusInsufficientRes)
	if ok != 2 || refused != 2 {
		t.Fatalf("%d served, %d refused; want 2 and 2", ok, refused)
	}
	reader{bf, data}.check(t, "another client's credit violations")
}

func TestCancel(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{Workers: 2})
	r.put(t, "f", randomBytes(1<<20, 14))
	c := r.dial(t, lwio.ClientConfig{Credits: 16})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := stall(t)
	calls := startReads(t, f, 6, 4096)
	<-entered
	<-entered // both workers hold one read; four wait in the queue
	if err := f.Cancel(ctx); err != nil {
		t.Fatal(err)
	}
	release()
	// The four queued are cancelled at once; the two the workers hold
	// are reads, abandoned before their data is placed.
	ok, cancelled := tally(t, calls, lwio.StatusCancelled)
	if st := r.srv.Stats(); ok != 0 || cancelled != 6 || st.Cancelled != 6 || st.Abandoned != 2 {
		t.Fatalf("%d served, %d cancelled (server %d, %d abandoned); want 0 and 6 (2 abandoned)", ok, cancelled, st.Cancelled, st.Abandoned)
	}
}

// TestInterruptWakes: a polling client whose request the server holds
// falls asleep behind an INTERRUPT and is woken by the completion.
func TestInterruptWakes(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "f", randomBytes(64<<10, 15))
	c := r.dial(t, lwio.ClientConfig{Polling: true, SpinPolls: 4})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	for range 20 {
		before := r.srv.Stats().Interrupts
		entered, release := stall(t)
		cl, err := f.StartRead(ctx, make([]byte, 4096), 0, nil)
		if err != nil {
			t.Fatal(err)
		}
		<-entered
		testutil.Eventually(t, "the client to ask for an interrupt", 10*time.Second, func() bool { return r.srv.Stats().Interrupts > before })
		release()
		if err := cl.Wait(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if st, ss := c.Stats(), r.srv.Stats(); st.Interrupts < 20 || ss.CreditViolations != 0 || c.Err() != nil {
		t.Errorf("client %+v (%v), server %+v", st, c.Err(), ss)
	}
}

// TestPeerVanishes closes a client with requests held at the server: the
// server finishes them into a dead connection and frees everything.
func TestPeerVanishes(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	r.put(t, "f", randomBytes(1<<20, 16))
	c := r.dial(t, lwio.ClientConfig{Credits: 16})
	ctx := context.Background()
	f, err := c.Open(ctx, "f", lwio.OpenFlags{})
	if err != nil {
		t.Fatal(err)
	}
	entered, release := stall(t)
	calls := startReads(t, f, 8, 64<<10)
	<-entered
	c.Close()
	for _, cl := range calls {
		if err := cl.Wait(ctx); !errors.Is(err, lwio.ErrClosed) {
			t.Errorf("read after Close: %v", err)
		}
	}
	release()
	testutil.Eventually(t, "the server to free the connection and the file", 10*time.Second, func() bool {
		s := r.srv.Stats()
		return s.ConnsOpen == 0 && s.FilesOpen == 0 && s.CreditsInUse == 0
	})
}

// TestPipeGarbage: malformed pipe traffic closes that pipe only.
func TestPipeGarbage(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	open := (&lwio.OpenRequest{Path: "x"})
	openMsg, _ := open.Append(nil)
	for i, msg := range [][]byte{
		[]byte("GET / HTTP/1.1\r\n\r\n"),
		openMsg, // OPEN before NEGOTIATE
		append([]byte("LWIO\x01\x10\x00\x00\xFE\x00\x05\x00"), 0), // a length shorter than the header
	} {
		conn, err := r.a.Dial(ctx, netip.AddrPortFrom(r.b.Addr(), lwio.DefaultPipePort))
		if err != nil {
			t.Fatal(err)
		}
		conn.Write(msg)
		if _, err := io.ReadAll(conn); err != nil && !strings.Contains(err.Error(), "reset") {
			t.Errorf("message %d: %v", i, err)
		}
		conn.Close()
		testutil.Eventually(t, "the pipe error to be counted", 10*time.Second, func() bool { return r.srv.Stats().PipeErrors == uint64(i+1) })
	}
	r.put(t, "f", []byte("abc"))
	c := r.dial(t, lwio.ClientConfig{})
	if n, err := c.Stat(ctx, "f"); n != 3 || err != nil {
		t.Fatalf("Stat: %d, %v", n, err)
	}
}

// TestPipeSilent: a pipe that never negotiates is closed after the
// authentication timeout, and counted.
func TestPipeSilent(t *testing.T) {
	r := newRig(t, lwio.ServerConfig{AuthTimeout: 100 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := r.a.Dial(ctx, netip.AddrPortFrom(r.b.Addr(), lwio.DefaultPipePort))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadAll(conn); err != nil && !strings.Contains(err.Error(), "reset") {
		t.Fatalf("the server did not close the silent pipe: %v", err)
	}
	testutil.Eventually(t, "the timeout to be counted", 10*time.Second, func() bool { return r.srv.Stats().PipeTimeouts == 1 })
}
