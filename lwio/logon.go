package lwio

import (
	"crypto/hmac"
	"crypto/md5"
	"fmt"
	"net/netip"
	"strconv"
	"strings"

	"github.com/google/uuid"
)

// The logon: this project's stand-in for the SMB session the source runs
// LWIO beside. The source leaves authentication of users to SMB and gets
// the server request resume key on SMB's file-access channel; there is no
// SMB server here, so the file-access channel is a TCP connection to the
// pipe port that starts with a logon: a challenge and response over a
// secret the server and its clients share (ServerConfig.Secret,
// ClientConfig.Secret: `--key-file`), before any file is named.
//
//	client                                  server
//	LOGON      ClientName, ClientKey   →
//	                                   ←    CHALLENGE  ServerNonce
//	PROOF      client proof            →
//	                                   ←    LOGON_RESP Status, server proof,
//	                                                   the share's resume key
//
// The proofs are HMAC-MD5 under the secret (an empty secret when none is
// configured: then both sides must have none), over a label, the client's
// key, the server's nonce and the client's name: a wrong or missing
// secret is refused (ACCESS_DENIED) and the channel closed before any OPEN,
// and the client knows the server holds the secret too. The share's
// resume key names no file; its Context names the server and the pipe the
// client negotiates on ("\\ADDRESS@PORT\NAME"), as the source's resume key
// names the server the client then contacts. The ClientKey is the key of
// the client's NEGOTIATE on that pipe: the server takes a key once.
const (
	ControlOpLogon     = 0x10 // LOGON: the file-access channel's first message
	ControlOpChallenge = 0x90 // the server's challenge
	ControlOpProof     = 0x11 // the client's proof
	ControlOpLogonResp = 0x91 // the answer to PROOF

	// LOGON, after the control header.
	LogonOffName = 0x0C // ClientName, MaxHostName WCHARs, UTF-16LE, NUL padded
	LogonOffKey  = 0x2C // GUID: the client's key (its NEGOTIATE key too)
	LogonLen     = 0x3C

	// CHALLENGE and PROOF, after the control header.
	ChalOffNonce = 0x0C // 16 bytes: the server's nonce
	ChallengeLen = 0x1C
	ProofOffMAC  = 0x0C // 16 bytes: the client's proof
	ProofLen     = 0x1C

	// LOGON_RESP, after the control header.
	LogonRspOffStatus   = 0x0C // u32 NTSTATUS: success or ACCESS_DENIED
	LogonRspOffReserved = 0x10 // u32 zero
	LogonRspOffMAC      = 0x14 // 16 bytes: the server's proof (zero on failure)
	LogonRspOffKey      = 0x24 // SRV_REQUEST_RESUME_KEY of the share (success only)
	LogonRspMinLen      = 0x24

	ProofSize = 16 // an MD5 digest
)

// Logon is a LOGON.
type Logon struct {
	Name string
	Key  uuid.UUID
}

// Append appends the whole message.
func (l *Logon) Append(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, LogonLen)...)
	m := b[start:]
	putControl(m, ControlOpLogon, LogonLen)
	if err := putName(m[LogonOffName:LogonOffName+2*MaxHostName], l.Name); err != nil {
		return b[:start], err
	}
	putGUID(m[LogonOffKey:], l.Key)
	return b, nil
}

// Decode reads a LOGON that is all of m.
func (l *Logon) Decode(m []byte) error {
	if err := checkControl(m, ControlOpLogon, LogonLen); err != nil {
		return err
	}
	if len(m) != LogonLen {
		return ErrLength
	}
	*l = Logon{Name: getName(m[LogonOffName : LogonOffName+2*MaxHostName]), Key: getGUID(m[LogonOffKey:])}
	if l.Name == "" {
		return fmt.Errorf("%w: LOGON without a ClientName", ErrPipe)
	}
	return nil
}

// appendMAC appends a CHALLENGE or PROOF: the header and 16 bytes.
func appendMAC(b []byte, op uint16, mac [ProofSize]byte) []byte {
	start := len(b)
	b = append(b, make([]byte, ControlHeaderSize)...)
	putControl(b[start:], op, ControlHeaderSize+ProofSize)
	return append(b, mac[:]...)
}

// decodeMAC reads a CHALLENGE or PROOF that is all of m.
func decodeMAC(m []byte, op uint16) ([ProofSize]byte, error) {
	var mac [ProofSize]byte
	if err := checkControl(m, op, ControlHeaderSize+ProofSize); err != nil {
		return mac, err
	}
	if len(m) != ControlHeaderSize+ProofSize {
		return mac, ErrLength
	}
	copy(mac[:], m[ControlHeaderSize:])
	return mac, nil
}

// LogonResponse answers a PROOF.
type LogonResponse struct {
	Status uint32
	Proof  [ProofSize]byte
	Key    RequestResumeKey // success only
}

// Append appends the whole message.
func (r *LogonResponse) Append(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, LogonRspMinLen)...)
	if r.Status == StatusSuccess {
		var err error
		if b, err = r.Key.Append(b); err != nil {
			return b[:start], err
		}
	}
	m := b[start:]
	putControl(m, ControlOpLogonResp, len(m))
	le.PutUint32(m[LogonRspOffStatus:], r.Status)
	copy(m[LogonRspOffMAC:], r.Proof[:])
	return b, nil
}

// Decode reads a LOGON_RESP that is all of m.
func (r *LogonResponse) Decode(m []byte) error {
	if err := checkControl(m, ControlOpLogonResp, LogonRspMinLen); err != nil {
		return err
	}
	*r = LogonResponse{Status: le.Uint32(m[LogonRspOffStatus:])}
	copy(r.Proof[:], m[LogonRspOffMAC:])
	if r.Status != StatusSuccess {
		if len(m) != LogonRspMinLen {
			return ErrLength
		}
		return nil
	}
	return r.Key.Decode(m[LogonRspOffKey:])
}

// Proof labels: the two directions never share a proof.
const (
	proofClient = "LWIO logon client"
	proofServer = "LWIO logon server"
)

// logonProof is HMAC-MD5 under secret of label, the client's key, the
// server's nonce and the client's name (UTF-16LE).
func logonProof(secret []byte, label string, key uuid.UUID, nonce [ProofSize]byte, name string) [ProofSize]byte {
	m := hmac.New(md5.New, secret)
	m.Write([]byte(label))
	var g [GUIDSize]byte
	putGUID(g[:], key)
	m.Write(g[:])
	m.Write(nonce[:])
	m.Write(utf16le(name))
	var p [ProofSize]byte
	copy(p[:], m.Sum(nil))
	return p
}

// pipeContext is the resume key's Context: the UNC-style name of the
// server and the port of its pipe, "\\ADDRESS@PORT\NAME" (the form
// Windows uses for a server on another port).
func pipeContext(a netip.AddrPort, name string) string {
	return `\\` + a.Addr().String() + "@" + strconv.Itoa(int(a.Port())) + `\` + name
}

// parseContext reads a Context pipeContext wrote.
func parseContext(ctx string) (netip.AddrPort, string, error) {
	rest, ok := strings.CutPrefix(ctx, `\\`)
	host, name, ok2 := strings.Cut(rest, `\`)
	addr, port, ok3 := strings.Cut(host, "@")
	if !ok || !ok2 || !ok3 || name == "" {
		return netip.AddrPort{}, "", fmt.Errorf("lwio: resume key context %q is not \\\\ADDRESS@PORT\\NAME", ctx)
	}
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" || a.Is4In6() || a.IsUnspecified() || a.IsLoopback() {
		return netip.AddrPort{}, "", fmt.Errorf("lwio: resume key context %q: not an IPv4 or IPv6 address", ctx)
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || p == 0 {
		return netip.AddrPort{}, "", fmt.Errorf("lwio: resume key context %q: bad port", ctx)
	}
	return netip.AddrPortFrom(a, uint16(p)), name, nil
}
