package lwio

import (
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// The server's side of discovery, in the source's order: a client logs on
// to the file-access channel (logon.go: the secret is proved there, before
// any file is named), gets resume keys there, and negotiates on the pipe
// that the keys' Context names. Both are TCP connections to the pipe port;
// the first message says which: LOGON or NEGOTIATE.

// logon is one client's file-access channel: who it is (ClientName, its
// key, its address) and the resume keys it holds.
type logon struct {
	name string
	key  uuid.UUID
	addr netip.AddrPort
	at   netip.Addr // the server's address it reached: the one its resume keys name
	ts   uint64     // the resume keys' Timestamp

	mu         sync.Mutex
	open       map[uint64]*file // by ResumeKey
	negotiated bool             // its one NEGOTIATE happened
	opened     int              // files it opened, for the log

	read, written atomic.Uint64 // bytes its connections moved
}

// ClientInfo is what the server knows of a client logged on now.
type ClientInfo struct {
	Name         string // ClientName
	Key          uuid.UUID
	Addr         netip.AddrPort // its file-access channel's
	FilesOpened  int            // OPENs answered with a resume key
	BytesRead    uint64         // read from the export by its connections
	BytesWritten uint64         // written to the export by its connections
}

// Clients lists the clients logged on now.
func (s *Server) Clients() []ClientInfo {
	s.mu.Lock()
	ls := make([]*logon, 0, len(s.logons))
	for _, l := range s.logons {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	out := make([]ClientInfo, 0, len(ls))
	for _, l := range ls {
		out = append(out, l.info())
	}
	return out
}

func (l *logon) info() ClientInfo {
	l.mu.Lock()
	opened := l.opened
	l.mu.Unlock()
	return ClientInfo{Name: l.name, Key: l.key, Addr: l.addr, FilesOpened: opened, BytesRead: l.read.Load(), BytesWritten: l.written.Load()}
}

// session is what one pipe's NEGOTIATE created: the key the server
// generated, the logon it belongs to, and which of the instances it
// offered have authenticated a connection (each at most once).
type session struct {
	key   uuid.UUID
	logon *logon

	mu   sync.Mutex
	used []bool // by instance; len: the instances offered
}

// pipeOp handles one request on a logged-on file-access channel: it
// returns the answer (nil: none, as RELEASE) or an error, which closes
// the channel (counted in PipeErrors). This is the one dispatch point of
// the channel: an opcode gets an entry here, its message layout a file of
// its own.
type pipeOp func(s *Server, l *logon, m []byte) ([]byte, error)

var pipeOps = map[uint16]pipeOp{
	ControlOpOpen:    (*Server).pipeOpen,
	ControlOpRelease: (*Server).pipeRelease,
	// The directory operations (pipe_dir.go, server_dir.go).
	ControlOpStat: (*Server).pipeDir, ControlOpList: (*Server).pipeDir, ControlOpMkdir: (*Server).pipeDir,
	ControlOpRemove: (*Server).pipeDir, ControlOpRename: (*Server).pipeDir, ControlOpSetAttr: (*Server).pipeDir,
	ControlOpHash: (*Server).pipeDir, ControlOpSync: (*Server).pipeDir,
}

// keyHistory remembers the client keys the server has taken, so that each
// is taken once: the newest keyHistoryLen of them.
type keyHistory struct {
	seen  map[uuid.UUID]struct{}
	order []uuid.UUID
}

const keyHistoryLen = 1 << 16

// take records k and reports whether it was new.
func (h *keyHistory) take(k uuid.UUID) bool {
	if h.seen == nil {
		h.seen = make(map[uuid.UUID]struct{})
	}
	if _, ok := h.seen[k]; ok {
		return false
	}
	if len(h.order) == keyHistoryLen {
		delete(h.seen, h.order[0])
		h.order = h.order[1:]
	}
	h.seen[k] = struct{}{}
	h.order = append(h.order, k)
	return true
}

func (s *Server) servePipes() {
	defer s.wg.Done()
	for {
		c, err := s.pipe.Accept()
		if err != nil {
			return
		}
		s.st.pipes.Add(1)
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			s.servePipe(c)
		}()
	}
}

// servePipe runs one TCP connection to the pipe port: a file-access
// channel (LOGON first) or a pipe (NEGOTIATE first). A malformed or
// unexpected message closes it (counted); one that says nothing within the
// authentication timeout is closed too.
func (s *Server) servePipe(c net.Conn) {
	defer c.Close()
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return
	}
	s.pipes[c] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.pipes, c)
		s.mu.Unlock()
	}()
	peer := addrOf(c.RemoteAddr())
	if !s.allowed(peer.Addr()) {
		s.refuseAddr("a pipe", peer)
		return
	}
	// Discovery must finish within the authentication timeout: a client
	// that says nothing does not hold a goroutine for ever.
	_ = c.SetReadDeadline(time.Now().Add(s.cfg.AuthTimeout))
	m, op, err := readControl(c, nil)
	if err != nil {
		s.pipeReadErr(err)
		return
	}
	switch op {
	case ControlOpLogon:
		s.serveFileAccess(c, peer, m)
	case ControlOpNegotiate:
		s.serveNegotiate(c, peer, m)
	default:
		s.st.pipeErr.Add(1)
	}
}

// pipeReadErr counts why a read on the pipe port failed.
func (s *Server) pipeReadErr(err error) {
	if ne, ok := err.(net.Error); ok && ne.Timeout() {
		s.st.pipeTimeouts.Add(1)
	} else if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
		s.st.pipeErr.Add(1)
	}
}

// serveFileAccess runs a file-access channel: the logon (logon.go), then
// pipeOps until the client closes it; its resume keys die with it.
func (s *Server) serveFileAccess(c net.Conn, peer netip.AddrPort, m []byte) {
	l, err := s.logon(c, peer, m)
	if l == nil {
		if err != nil {
			s.pipeReadErr(err)
		}
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.logons, l.key)
		s.mu.Unlock()
		l.release(s)
		in := l.info()
		s.log("client gone", "client", l.name, "key", l.key, "addr", peer, "files", in.FilesOpened,
			"bytes_read", in.BytesRead, "bytes_written", in.BytesWritten)
	}()
	_ = c.SetReadDeadline(time.Time{})
	buf := m[:0]
	for {
		m, op, err := readControl(c, buf)
		if err != nil {
			s.pipeReadErr(err)
			return
		}
		buf = m[:0]
		h := pipeOps[op]
		if h == nil {
			s.st.pipeErr.Add(1)
			return
		}
		out, err := h(s, l, m)
		if err != nil {
			s.st.pipeErr.Add(1)
			return
		}
		if out == nil {
			continue
		}
		if _, err := c.Write(out); err != nil {
			return
		}
	}
}

// logon runs LOGON, CHALLENGE, PROOF and LOGON_RESP. It returns the live
// logon, or nil when the client was refused (answered and counted) or the
// channel failed (err).
func (s *Server) logon(c net.Conn, peer netip.AddrPort, m []byte) (*logon, error) {
	var req Logon
	if err := req.Decode(m); err != nil {
		s.st.pipeErr.Add(1)
		return nil, nil
	}
	deny := func(why string, count func()) (*logon, error) {
		count()
		s.log("client refused", "client", req.Name, "key", req.Key, "addr", peer, "why", why)
		out, _ := (&LogonResponse{Status: StatusAccessDenied}).Append(nil)
		_, err := c.Write(out)
		return nil, err
	}
	s.mu.Lock()
	fresh := s.usedKeys.take(req.Key)
	s.mu.Unlock()
	if !fresh {
		return deny("its key was used before", func() { s.st.keyRefused.Add(1) })
	}
	var nonce [ProofSize]byte
	if _, err := io.ReadFull(s.rnd, nonce[:]); err != nil {
		return nil, err
	}
	if _, err := c.Write(appendMAC(nil, ControlOpChallenge, nonce)); err != nil {
		return nil, err
	}
	m, op, err := readControl(c, m[:0])
	if err != nil {
		return nil, err
	}
	got, err := decodeMAC(m, ControlOpProof)
	if op != ControlOpProof || err != nil {
		s.st.pipeErr.Add(1)
		return nil, nil
	}
	want := logonProof(s.cfg.Secret, proofClient, req.Key, nonce, req.Name)
	if subtle.ConstantTimeCompare(got[:], want[:]) != 1 {
		return deny("no secret, or another one", func() { s.st.logonFail.Add(1) })
	}
	l := &logon{name: req.Name, key: req.Key, addr: peer, at: s.localAddr(c), ts: s.now(), open: map[uint64]*file{}}
	s.mu.Lock()
	s.logons[l.key] = l
	s.mu.Unlock()
	s.st.logons.Add(1)
	s.log("client logged on", "client", l.name, "key", l.key, "addr", peer)
	rsp := LogonResponse{Status: StatusSuccess, Proof: logonProof(s.cfg.Secret, proofServer, req.Key, nonce, req.Name),
		Key: RequestResumeKey{Key: s.resumeKey(l), Server: s.context(l)}}
	out, err := rsp.Append(nil)
	if err == nil {
		_, err = c.Write(out)
	}
	if err != nil {
		s.mu.Lock()
		delete(s.logons, l.key)
		s.mu.Unlock()
		return nil, err
	}
	return l, nil
}

// resumeKey makes a new resume key of logon l (its ResumeKey field odd,
// never 0).
func (s *Server) resumeKey(l *logon) ResumeKey {
	var rk [8]byte
	_, _ = io.ReadFull(s.rnd, rk[:])
	return ResumeKey{ResumeKey: binary.LittleEndian.Uint64(rk[:]) | 1, Timestamp: l.ts, Pid: s.pid}
}

// context is the Context of logon l's resume keys: this server, at the
// address l reached it on (IPv4 or IPv6: the client's pipe goes the same
// way), and its pipe.
func (s *Server) context(l *logon) string {
	return pipeContext(netip.AddrPortFrom(l.at, s.cfg.PipePort), s.cfg.Name)
}

// localAddr is the server's address a pipe connection reached: the
// host's primary one if the connection does not say.
func (s *Server) localAddr(c net.Conn) netip.Addr {
	if a := addrOf(c.LocalAddr()).Addr(); a.IsValid() && !a.IsUnspecified() {
		return a
	}
	return s.h.Addr()
}

// serveNegotiate runs a pipe: NEGOTIATE, whose Key must be that of a live
// logon from the same address and ClientName that has not negotiated yet,
// then nothing more until the client closes it (a message is an error);
// the server's key dies with the pipe.
func (s *Server) serveNegotiate(c net.Conn, peer netip.AddrPort, m []byte) {
	ss, out, err := s.negotiate(m, peer, s.localAddr(c))
	if err != nil {
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.sessions, ss.key)
		s.mu.Unlock()
	}()
	if _, err := c.Write(out); err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if _, _, err := readControl(c, m[:0]); err == nil {
		s.st.pipeErr.Add(1) // the pipe carries nothing after NEGOTIATE
	} else {
		s.pipeReadErr(err)
	}
}

// negotiate answers a NEGOTIATE: the server's name, a key generated for
// this client, and the providers both sides have (intersect). A refusal
// (a malformed request, a key that names no logon) is counted and closes
// the pipe: the negotiate response has no status.
func (s *Server) negotiate(m []byte, peer netip.AddrPort, at netip.Addr) (*session, []byte, error) {
	req := Negotiate{Request: true}
	if err := req.Decode(m); err != nil {
		s.st.pipeErr.Add(1)
		return nil, nil, err
	}
	s.st.negotiates.Add(1)
	s.mu.Lock()
	l := s.logons[req.Key]
	s.mu.Unlock()
	ok := l != nil && l.name == req.Name && l.addr.Addr() == peer.Addr()
	if ok {
		l.mu.Lock()
		ok, l.negotiated = !l.negotiated, true
		l.mu.Unlock()
	}
	if !ok {
		s.st.keyRefused.Add(1)
		s.log("negotiate refused", "client", req.Name, "key", req.Key, "addr", peer, "why", "its key names no logon, or one that negotiated")
		return nil, nil, errors.New("lwio: negotiate refused")
	}
	key, err := uuid.NewRandomFromReader(s.rnd)
	if err != nil {
		return nil, nil, err
	}
	rsp := Negotiate{Name: s.cfg.Name, Key: key, Providers: s.intersect(req.Providers, at)}
	out, err := rsp.Append(nil)
	if err != nil {
		return nil, nil, err
	}
	if req.ResponseLen != 0 && int(req.ResponseLen) < len(out) {
		s.st.pipeErr.Add(1)
		return nil, nil, fmt.Errorf("lwio: client's response buffer of %d bytes, the response is %d", req.ResponseLen, len(out))
	}
	n := 0
	for _, p := range rsp.Providers {
		n = max(n, len(p.Instances))
	}
	ss := &session{key: key, logon: l, used: make([]bool, n)}
	s.mu.Lock()
	s.sessions[key] = ss
	s.mu.Unlock()
	s.log("client negotiated", "client", l.name, "addr", peer, "server_key", key, "instances", n)
	return ss, out, nil
}

// providers is this server's provider list for a client whose pipe
// reached address at: ProviderName with one instance per RDMA listener,
// each that address (4 bytes IPv4, 16 bytes IPv6: the RDMA connections go
// the way the pipe went) and, as the discriminator, the listener's port
// (2 bytes, big-endian).
func (s *Server) providers(at netip.Addr) []Provider {
	a := at.AsSlice()
	p := Provider{Name: ProviderName}
	for i := range s.cfg.Instances {
		var port [2]byte
		binary.BigEndian.PutUint16(port[:], s.cfg.RDMAPort+uint16(i))
		p.Instances = append(p.Instances, Instance{HostAddress: a, Discriminator: port[:]})
	}
	return []Provider{p}
}

// instanceAddr is an instance's HostAddress as an address: 4 bytes IPv4,
// 16 bytes IPv6 (not an IPv4-mapped one); false for anything else.
func instanceAddr(b []byte) (netip.Addr, bool) {
	a, ok := netip.AddrFromSlice(b)
	if !ok || a.Is4In6() || a.IsUnspecified() {
		return netip.Addr{}, false
	}
	return a, true
}

// intersect is the providers both sides have: each of the server's whose
// Name the client lists with at least one well-formed instance (an IPv4
// or IPv6 address), with the server's instances cut to as many as the
// client has: one connection per instance pair, no more.
func (s *Server) intersect(theirs []Provider, at netip.Addr) []Provider {
	var out []Provider
	for _, p := range s.providers(at) {
		for _, q := range theirs {
			if q.Name != p.Name {
				continue
			}
			n := 0
			for _, in := range q.Instances {
				if _, ok := instanceAddr(in.HostAddress); ok {
					n++
				}
			}
			if n > 0 {
				out = append(out, Provider{Name: p.Name, Instances: p.Instances[:min(n, len(p.Instances))]})
			}
			break
		}
	}
	return out
}

// claim marks instance inst of session ss used by a connection: false
// when it was not offered or is used already (the key is refused).
func (ss *session) claim(inst int) bool {
	ss.mu.Lock()
	defer ss.mu.Unlock()
	if inst >= len(ss.used) || ss.used[inst] {
		return false
	}
	ss.used[inst] = true
	return true
}

// pipeOpen answers an OPEN. A path outside the export is ACCESS_DENIED, as
// is a create or truncate on a read-only export; a missing file
// OBJECT_NAME_NOT_FOUND; a client at MaxFiles INSUFFICIENT_RESOURCES.
func (s *Server) pipeOpen(l *logon, m []byte) ([]byte, error) {
	var o OpenRequest
	if err := o.Decode(m); err != nil {
		return nil, err
	}
	s.st.opens.Add(1)
	rsp := OpenResponse{}
	l.mu.Lock()
	full := len(l.open) >= s.cfg.MaxFiles
	l.mu.Unlock()
	var f *file
	var err error
	if full {
		s.st.fileLimit.Add(1)
		rsp.Status = StatusInsufficientRes
	} else {
		f, err = s.exp.open(o.Path, o.Disposition != DispOpen, o.Disposition == DispTruncate)
	}
	switch {
	case err == nil:
	case errors.Is(err, errReadOnly):
		s.st.readOnly.Add(1)
		rsp.Status = StatusAccessDenied
	case errors.Is(err, fs.ErrNotExist):
		rsp.Status = StatusObjectNameNotFound
	case errors.Is(err, errBadPath), isEscape(err), errors.Is(err, fs.ErrPermission):
		rsp.Status = StatusAccessDenied
	default:
		rsp.Status = StatusInvalidParameter
	}
	if f != nil {
		s.st.filesOpen.Add(1)
		if o.FlagsAttrs&FileNoIntermediate != 0 {
			f.enableDirect()
		}
		size, err := f.size()
		if err != nil {
			s.unref(f)
			rsp.Status = StatusInvalidParameter
		} else {
			rsp.Size = uint64(size)
			rsp.Key = RequestResumeKey{Key: s.resumeKey(l), Server: s.context(l)}
			l.mu.Lock()
			l.open[rsp.Key.Key.ResumeKey] = f
			l.opened++
			l.mu.Unlock()
		}
	}
	return rsp.Append(nil)
}

// pipeRelease drops a resume key's hold on its file (no answer).
func (s *Server) pipeRelease(l *logon, m []byte) ([]byte, error) {
	if len(m) != ReleaseLen {
		return nil, ErrLength
	}
	k := le.Uint64(m[RelOffResumeKey:])
	l.mu.Lock()
	f := l.open[k]
	delete(l.open, k)
	l.mu.Unlock()
	if f != nil {
		s.unref(f)
	}
	return nil, nil
}

// isEscape reports an os.Root refusal of a path that leaves the root.
func isEscape(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe) && pe.Err != nil && pe.Err.Error() == "path escapes from parent"
}

func (s *Server) unref(f *file) {
	f.mu.Lock()
	f.refs--
	last := f.refs == 0
	f.mu.Unlock()
	if last {
		f.close()
		s.st.filesOpen.Add(-1)
	}
}

// release drops every resume key of l.
func (l *logon) release(s *Server) {
	l.mu.Lock()
	open := l.open
	l.open = map[uint64]*file{}
	l.mu.Unlock()
	for _, f := range open {
		s.unref(f)
	}
}

// allowed reports whether Allow covers a.
func (s *Server) allowed(a netip.Addr) bool {
	if len(s.cfg.Allow) == 0 {
		return true
	}
	a = a.Unmap()
	for _, p := range s.cfg.Allow {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func (s *Server) refuseAddr(what string, a netip.AddrPort) {
	s.st.addrRefused.Add(1)
	s.log("address refused", "what", what, "addr", a)
}

// addrOf is a net.Addr's address and port (the zero value if it has none).
func addrOf(a net.Addr) netip.AddrPort {
	if ta, ok := a.(*net.TCPAddr); ok {
		ap := ta.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	if a == nil {
		return netip.AddrPort{}
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

func (s *Server) log(msg string, args ...any) {
	if s.cfg.Logger != nil {
		s.cfg.Logger.Info("lwio: "+msg, args...)
	}
}
