package lwio

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/emunic/emunic/internal/hostrig"
)

// TestSeedFlows walks the source's discovery and connection flows (FIG. 2
// and 5) one message at a time, as docs/lwio.md's "Discovery" table gives
// them here, and checks each message and the server's state after it.
func TestSeedFlows(t *testing.T) {
	a, b := hostrig.Pair(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "f"), []byte("seed flows"), 0o644); err != nil {
		t.Fatal(err)
	}
	exp, err := OpenExport(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	secret := []byte("flows")
	srv, err := NewServer(b, exp, ServerConfig{Secret: secret, Instances: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	send := func(c net.Conn, m []byte) {
		t.Helper()
		if _, err := c.Write(m); err != nil {
			t.Fatal(err)
		}
	}
	must := func(m []byte, err error) []byte {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	recv := func(c net.Conn, wantOp uint16) []byte {
		t.Helper()
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		m, op, err := readControl(c, nil)
		if err != nil || op != wantOp {
			t.Fatalf("read: opcode %#x, %v; want %#x", op, err, wantOp)
		}
		return m
	}

	// 205–207: the file-access channel, the logon, the share's resume key.
	fa, err := a.Dial(ctx, netip.AddrPortFrom(b.Addr(), DefaultPipePort))
	if err != nil {
		t.Fatal(err)
	}
	defer fa.Close()
	key := uuid.New()
	send(fa, must((&Logon{Name: "FLOWS", Key: key}).Append(nil)))
	m := recv(fa, ControlOpChallenge)
	nonce, err := decodeMAC(m, ControlOpChallenge)
	if err != nil || len(m) != ChallengeLen {
		t.Fatalf("CHALLENGE: %d bytes, %v", len(m), err)
	}
	if st := srv.Stats(); st.Logons != 0 || st.Opens != 0 {
		t.Fatalf("before PROOF: %+v", st)
	}
	send(fa, appendMAC(nil, ControlOpProof, logonProof(secret, proofClient, key, nonce, "FLOWS")))
	var lr LogonResponse
	if err := lr.Decode(recv(fa, ControlOpLogonResp)); err != nil || lr.Status != StatusSuccess {
		t.Fatalf("LOGON_RESP: %+v, %v", lr, err)
	}
	if lr.Proof != logonProof(secret, proofServer, key, nonce, "FLOWS") {
		t.Fatal("LOGON_RESP: the server's proof is wrong")
	}
	pipeAt, name, err := parseContext(lr.Key.Server)
	if err != nil || pipeAt != netip.AddrPortFrom(b.Addr(), DefaultPipePort) || name != "EMUNIC" {
		t.Fatalf("the share's Context %q: %v %q %v", lr.Key.Server, pipeAt, name, err)
	}
	if st := srv.Stats(); st.Logons != 1 {
		t.Fatalf("after the logon: Logons %d", st.Logons)
	}

	// The file's resume key, on the same channel.
	send(fa, must((&OpenRequest{Path: "f"}).Append(nil)))
	var or OpenResponse
	if err := or.Decode(recv(fa, ControlOpOpenResp)); err != nil || or.Status != StatusSuccess || or.Size != 10 {
		t.Fatalf("OPEN: %+v, %v", or, err)
	}
	if or.Key.Server != lr.Key.Server || or.Key.Key.Pid != lr.Key.Key.Pid || or.Key.Key.Timestamp != lr.Key.Key.Timestamp {
		t.Fatalf("the file's key %+v does not name the share's server %+v", or.Key, lr.Key)
	}

	// 209–215: the pipe the Context names, NEGOTIATE and the intersection.
	pipe, err := a.Dial(ctx, pipeAt)
	if err != nil {
		t.Fatal(err)
	}
	defer pipe.Close()
	mine := a.Addr().As4()
	inst := func(i int) Instance { return Instance{HostAddress: mine[:], Discriminator: []byte{0, byte(i)}} }
	send(pipe, must((&Negotiate{Request: true, Name: "FLOWS", Key: key, ResponseLen: MaxControlMessage, Providers: []Provider{
		{Name: "some-other-rdma", Instances: []Instance{inst(0)}},
		{Name: ProviderName, Instances: []Instance{inst(0), inst(1), inst(2)}},
	}}).Append(nil)))
	rsp := Negotiate{}
	if err := rsp.Decode(recv(pipe, ControlOpNegotiate)); err != nil {
		t.Fatal(err)
	}
	if rsp.Name != "EMUNIC" || len(rsp.Providers) != 1 || rsp.Providers[0].Name != ProviderName || len(rsp.Providers[0].Instances) != 2 {
		t.Fatalf("NEGOTIATE response: %+v", rsp)
	}
	var dsts []netip.AddrPort
	for i, in := range rsp.Providers[0].Instances {
		port := binary.BigEndian.Uint16(in.Discriminator)
		if [4]byte(in.HostAddress) != b.Addr().As4() || port != DefaultRDMAPort+uint16(i) {
			t.Fatalf("instance %d: %v", i, in)
		}
		dsts = append(dsts, netip.AddrPortFrom(b.Addr(), port))
	}
	// The client's key is taken: a second NEGOTIATE with it is refused.
	pipe2, err := a.Dial(ctx, pipeAt)
	if err != nil {
		t.Fatal(err)
	}
	send(pipe2, must((&Negotiate{Request: true, Name: "FLOWS", Key: key, Providers: []Provider{{Name: ProviderName, Instances: []Instance{inst(0)}}}}).Append(nil)))
	pipe2.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := io.ReadAll(pipe2); len(n) != 0 || (err != nil && !strings.Contains(err.Error(), "reset")) {
		t.Fatalf("a second NEGOTIATE with the key: %d bytes, %v", len(n), err)
	}
	pipe2.Close()

	// 217, 601–607: a connection on instance 0, AUTH with the server's key.
	conn := func(dst netip.AddrPort) (*Client, error) {
		c, _ := newClient(a, nil, 0, ClientConfig{Secret: secret}.withDefaults())
		c.key, c.skey, c.srvName, c.pipeAt = key, rsp.Key, name, pipeAt
		return c, c.connect(ctx, dst)
	}
	c, err := conn(dsts[0])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	s := c.srv
	if s.BaseSequence != 1 || s.Endian != EndianPtr64 || s.HeaderSize != HeaderSize || s.RdmaReadSupported != serverRdmaRead ||
		s.MaxSendBufferSize != StatusResponseSize || !s.HasSessionID || s.SessionID < 0 || c.seq != s.BaseSequence {
		t.Fatalf("the server's AUTH_PARAMS %+v, next Sequence %d", s, c.seq)
	}
	// The key authenticates one connection per instance, once.
	if c2, err := conn(dsts[0]); err == nil {
		c2.Close()
		t.Fatal("a second connection on instance 0 with the same key was authenticated")
	} else if se := new(StatusError); !errors.As(err, &se) || se.Status != StatusAccessDenied {
		t.Fatalf("a second connection on instance 0: %v, want ACCESS_DENIED", err)
	}
	c1, err := conn(dsts[1])
	if err != nil {
		t.Fatalf("instance 1: %v", err)
	}
	defer c1.Close()
	if st := srv.Stats(); st.Authenticated != 2 || st.KeyRefusals != 2 {
		t.Fatalf("after the connections: Authenticated %d KeyRefusals %d", st.Authenticated, st.KeyRefusals)
	}

	// 609–611: REGISTER the file's key on each connection: one Fid each.
	p := FidParams{ResumeKey: or.Key.Key}
	for _, cc := range []*Client{c, c1} {
		fid, err := cc.register(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		f := &File{c: cc, fid: fid}
		buf := make([]byte, 10)
		if n, err := f.ReadAt(buf, 0); n != 10 || err != nil || string(buf) != "seed flows" {
			t.Fatalf("read on Fid %d: %d, %v, %q", fid, n, err, buf)
		}
	}
	// The share's key names no file.
	if _, err := c.register(ctx, FidParams{ResumeKey: lr.Key.Key}); !isStatus(err, StatusObjectNameNotFound) {
		t.Fatalf("REGISTER of the share's key: %v", err)
	}
	// RELEASE, then the key registers no more (the OPEN after it is
	// answered only once the channel has taken the RELEASE).
	send(fa, appendRelease(nil, or.Key.Key.ResumeKey))
	send(fa, must((&OpenRequest{Path: "f"}).Append(nil)))
	recv(fa, ControlOpOpenResp)
	if _, err := c.register(ctx, p); !isStatus(err, StatusObjectNameNotFound) {
		t.Fatalf("REGISTER after RELEASE: %v", err)
	}
}

func isStatus(err error, st uint32) bool {
	var se *StatusError
	return errors.As(err, &se) && se.Status == st
}

// seedSteps are the source's steps TestSeedFlows walks, in order: the
// first column of docs/lwio.md's table under "Discovery".
var seedSteps = []string{"201–203", "205–207", "209", "211", "213–215", "217, 601", "603–607", "609–611"}

// TestSeedFlowsDoc holds docs/lwio.md's Discovery table to seedSteps: the
// page names every step the test walks, in the same order, and no other.
func TestSeedFlowsDoc(t *testing.T) {
	b, err := os.ReadFile("../docs/lwio.md")
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	start := strings.Index(doc, "\n## Discovery\n")
	end := strings.Index(doc[start+1:], "\n### ")
	if start < 0 || end < 0 {
		t.Fatal("docs/lwio.md has no Discovery section")
	}
	var steps []string
	for _, line := range strings.Split(doc[start:start+1+end], "\n") {
		cells := strings.Split(line, "|")
		if len(cells) < 4 || !strings.HasPrefix(line, "| ") || strings.TrimSpace(cells[1]) == "Step" {
			continue
		}
		steps = append(steps, strings.TrimSpace(cells[1]))
	}
	if strings.Join(steps, ";") != strings.Join(seedSteps, ";") {
		t.Fatalf("the Discovery table's steps %q, the test walks %q", steps, seedSteps)
	}
}
