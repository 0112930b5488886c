package lwio

import (
	"context"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/google/uuid"

	"github.com/emunic/emunic/tcpstack"
)

// The client's side of discovery, in the source's order (docs/lwio.md,
// "Discovery"): log on to the file-access channel with the secret, which
// answers with a resume key whose Context names the server and its pipe;
// open that pipe and negotiate on it with the same key; the response
// names the server's instances of the providers both have, one RDMA
// connection per instance.

// discover logs on (c.pipe is dialled) and negotiates; it returns the
// server's instances to connect to.
func (c *Client) discover(ctx context.Context) ([]netip.AddrPort, error) {
	c.key = uuid.New()
	if c.cfg.Seed != 0 {
		c.key, _ = uuid.NewRandomFromReader(tcpstack.NewSeededReader(c.cfg.Seed))
	}
	share, err := c.logon()
	if err != nil {
		return nil, err
	}
	at, name, err := parseContext(share.Server)
	if err != nil {
		return nil, err
	}
	c.pipeAt, c.srvName = at, name
	if c.npipe, err = c.h.Dial(ctx, at); err != nil {
		return nil, fmt.Errorf("lwio: pipe %s: %w", share.Server, err)
	}
	stop := context.AfterFunc(ctx, func() { c.npipe.SetDeadline(deadlinePast) })
	defer stop()
	dsts, err := c.negotiate()
	c.npipe.SetDeadline(time.Time{})
	return dsts, err
}

// logon runs LOGON, CHALLENGE, PROOF and LOGON_RESP on c.pipe and returns
// the share's resume key.
func (c *Client) logon() (*RequestResumeKey, error) {
	m, err := (&Logon{Name: c.cfg.Name, Key: c.key}).Append(nil)
	if err != nil {
		return nil, err
	}
	if _, err := c.pipe.Write(m); err != nil {
		return nil, fmt.Errorf("lwio: logon: %w", err)
	}
	r, op, err := readControl(c.pipe, nil)
	if err != nil {
		return nil, fmt.Errorf("lwio: logon: %w", err)
	}
	var nonce [ProofSize]byte
	switch op {
	case ControlOpChallenge:
		if nonce, err = decodeMAC(r, ControlOpChallenge); err != nil {
			return nil, fmt.Errorf("lwio: logon: %w", err)
		}
	case ControlOpLogonResp: // refused at once (a key used before)
	default:
		return nil, fmt.Errorf("%w: LOGON answered with opcode %#x", ErrPipe, op)
	}
	if op == ControlOpChallenge {
		proof := logonProof(c.cfg.Secret, proofClient, c.key, nonce, c.cfg.Name)
		if _, err := c.pipe.Write(appendMAC(nil, ControlOpProof, proof)); err != nil {
			return nil, fmt.Errorf("lwio: logon: %w", err)
		}
		if r, op, err = readControl(c.pipe, r[:0]); err != nil {
			return nil, fmt.Errorf("lwio: logon: %w", err)
		}
	}
	var rsp LogonResponse
	if op != ControlOpLogonResp || rsp.Decode(r) != nil {
		return nil, fmt.Errorf("%w: a malformed answer to the logon", ErrPipe)
	}
	if rsp.Status != StatusSuccess {
		return nil, &StatusError{What: "LOGON", Status: rsp.Status}
	}
	want := logonProof(c.cfg.Secret, proofServer, c.key, nonce, c.cfg.Name)
	if subtle.ConstantTimeCompare(rsp.Proof[:], want[:]) != 1 {
		return nil, errors.New("lwio: logon: the server does not hold our secret")
	}
	return &rsp.Key, nil
}

// negotiate sends NEGOTIATE on c.npipe: ClientName, the logon's key, and
// ProviderName with Connections instances (this host's address the pipe
// goes from, IPv4 or IPv6, and the instance's index as discriminator). It
// returns the RDMA endpoints of the server's instances in the answer.
func (c *Client) negotiate() ([]netip.AddrPort, error) {
	a := addrOf(c.npipe.LocalAddr()).Addr()
	if !a.IsValid() {
		a = c.h.Addr()
	}
	p := Provider{Name: ProviderName}
	for i := range c.cfg.Connections {
		var d [2]byte
		binary.BigEndian.PutUint16(d[:], uint16(i))
		p.Instances = append(p.Instances, Instance{HostAddress: a.AsSlice(), Discriminator: d[:]})
	}
	req := Negotiate{Request: true, Name: c.cfg.Name, Key: c.key, ResponseLen: MaxControlMessage, Providers: []Provider{p}}
	m, err := req.Append(nil)
	if err != nil {
		return nil, err
	}
	if _, err := c.npipe.Write(m); err != nil {
		return nil, fmt.Errorf("lwio: pipe: %w", err)
	}
	r, op, err := readControl(c.npipe, nil)
	if err != nil {
		return nil, fmt.Errorf("lwio: negotiate: %w", err)
	}
	if op != ControlOpNegotiate {
		return nil, fmt.Errorf("%w: negotiate answered with opcode %#x", ErrPipe, op)
	}
	var rsp Negotiate
	if err := rsp.Decode(r); err != nil {
		return nil, fmt.Errorf("lwio: negotiate: %w", err)
	}
	if rsp.Name != c.srvName {
		return nil, fmt.Errorf("lwio: negotiate: the pipe's server is %q, the resume key named %q", rsp.Name, c.srvName)
	}
	c.skey = rsp.Key
	var dsts []netip.AddrPort
	for _, p := range rsp.Providers {
		if p.Name != ProviderName {
			continue
		}
		for _, in := range p.Instances {
			a, ok := instanceAddr(in.HostAddress)
			if ok && len(in.Discriminator) == 2 && len(dsts) < c.cfg.Connections {
				dsts = append(dsts, netip.AddrPortFrom(a, binary.BigEndian.Uint16(in.Discriminator)))
			}
		}
	}
	if len(dsts) == 0 {
		return nil, ErrNoProvider
	}
	return dsts, nil
}

// checkContext refuses a resume key whose Context names another server
// than the one the client negotiated with: its REGISTER would go to the
// wrong server.
func (c *Client) checkContext(ctx string) error {
	at, name, err := parseContext(ctx)
	if err != nil {
		return err
	}
	if at != c.pipeAt || name != c.srvName {
		return fmt.Errorf("lwio: the resume key names %s, the client's server is %s", ctx, pipeContext(c.pipeAt, c.srvName))
	}
	return nil
}
