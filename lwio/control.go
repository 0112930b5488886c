package lwio

import (
	"fmt"
	"unicode/utf16"

	"github.com/google/uuid"
)

// Discovery: the server request resume key (obtained on the file-access
// channel) and the negotiate exchange on the pipe, a plain TCP connection.

// Server request resume key (SRV_RESUME_KEY, SRV_REQUEST_RESUME_KEY).
const (
	ResumeKeySize    = 24
	RkOffResumeKey   = 0x00 // u64 opaque to the client
	RkOffTimestamp   = 0x08 // u64 opaque to the client
	RkOffPid         = 0x10 // u64 opaque to the client
	ReqRkOffCtxLen   = 0x18 // u16 bytes of Context
	ReqRkOffContext  = 0x1A // the server's name, UTF-16LE, ContextLength bytes
	RequestKeyMinLen = 26
	MaxContextLength = 512
)

// ResumeKey is a server resume key.
type ResumeKey struct {
	ResumeKey, Timestamp, Pid uint64
}

// Encode writes the key at the start of b.
func (k *ResumeKey) Encode(b []byte) {
	le.PutUint64(b[RkOffResumeKey:], k.ResumeKey)
	le.PutUint64(b[RkOffTimestamp:], k.Timestamp)
	le.PutUint64(b[RkOffPid:], k.Pid)
}

// Decode reads a key from the start of b.
func (k *ResumeKey) Decode(b []byte) error {
	if len(b) < ResumeKeySize {
		return ErrShort
	}
	*k = ResumeKey{le.Uint64(b[RkOffResumeKey:]), le.Uint64(b[RkOffTimestamp:]), le.Uint64(b[RkOffPid:])}
	return nil
}

// RequestResumeKey is the key with the context naming the server.
type RequestResumeKey struct {
	Key    ResumeKey
	Server string // Context, as UTF-16LE on the wire
}

// Append appends the encoded key to b.
func (r *RequestResumeKey) Append(b []byte) ([]byte, error) {
	ctx := utf16le(r.Server)
	if len(ctx) > MaxContextLength {
		return b, fmt.Errorf("lwio: server name of %d bytes, at most %d", len(ctx), MaxContextLength)
	}
	n := len(b)
	b = append(b, make([]byte, RequestKeyMinLen)...)
	r.Key.Encode(b[n:])
	le.PutUint16(b[n+ReqRkOffCtxLen:], uint16(len(ctx)))
	return append(b, ctx...), nil
}

// Decode reads a key that is all of b.
func (r *RequestResumeKey) Decode(b []byte) error {
	if len(b) < RequestKeyMinLen {
		return ErrShort
	}
	n := int(le.Uint16(b[ReqRkOffCtxLen:]))
	if n > MaxContextLength || n%2 != 0 || len(b) != RequestKeyMinLen+n {
		return ErrLength
	}
	if err := r.Key.Decode(b); err != nil {
		return err
	}
	r.Server = fromUTF16le(b[ReqRkOffContext:])
	return nil
}

// Control header (LWIO_CONTROL_HEADER): the negotiate exchange on the pipe.
const (
	ControlHeaderSize  = 12
	CtlOffProtocolID   = 0x00 // 4 bytes 'LWIO'
	CtlOffRevID        = 0x04 // u32 RevID
	CtlOffOpcode       = 0x08 // u16 ControlOpNegotiate
	CtlOffLength       = 0x0A // u16 the whole message's length
	RevID              = 0x1001
	ControlOpNegotiate = 0xFE
)

// ProtocolID is the control header's and the auth parameters' magic.
var ProtocolID = [4]byte{'L', 'W', 'I', 'O'}

// Negotiate request and response (LwioNegotiateRequest_t,
// LwioNegotiateResponse_t). Names are fixed-size UTF-16LE fields, NUL
// padded; the source leaves their sizes open (see docs/lwio.md).
const (
	MaxHostName         = 16 // WCHARs in ClientName and SrvName (a NetBIOS name and its NUL)
	MaxProviderName     = 32 // WCHARs in a provider's Name
	GUIDSize            = 16
	NegOffName          = 0x0C // ClientName / SrvName, MaxHostName WCHARs
	NegOffKey           = 0x2C // GUID key
	NegReqOffRespLength = 0x3C // u16 request: the client's buffer for the response
	NegReqOffCount      = 0x3E // u16 request: providers that follow
	NegReqOffList       = 0x40 // request: the provider list
	NegRspOffCount      = 0x3C // u16 response: providers that follow
	NegRspOffList       = 0x3E // response: the provider list
	ProvOffName         = 0x00 // provider: Name, MaxProviderName WCHARs
	ProvOffCount        = 0x40 // u16 provider: instances that follow
	ProvOffTable        = 0x42 // provider: the instance table
	InstOffHostLen      = 0x00 // u16 instance: HostAddressLen
	InstOffDiscLen      = 0x02 // u16 instance: DiscriminatorLen
	InstOffAddress      = 0x04 // instance: the host address, then the discriminator
	MaxProviders        = 16
	MaxInstances        = 16
	MaxControlMessage   = 0xFFFF // Length is a u16
)

// Instance is one network/discriminator pair of a provider.
type Instance struct {
	HostAddress   []byte
	Discriminator []byte
}

// Provider is one RDMA-capable device type with its instances.
type Provider struct {
	Name      string
	Instances []Instance
}

// Negotiate is a negotiate request (Request true) or response.
type Negotiate struct {
	Request     bool
	Name        string    // ClientName or SrvName
	Key         uuid.UUID // the client's key, or the server-generated one
	ResponseLen uint16    // request only
	Providers   []Provider
}

// Append appends the whole message, control header first.
func (n *Negotiate) Append(b []byte) ([]byte, error) {
	start := len(b)
	if len(n.Providers) > MaxProviders {
		return b, fmt.Errorf("lwio: %d providers, at most %d", len(n.Providers), MaxProviders)
	}
	fixed := NegRspOffList
	if n.Request {
		fixed = NegReqOffList
	}
	b = append(b, make([]byte, fixed)...)
	m := b[start:]
	putControl(m, ControlOpNegotiate, 0) // Length once the lists are in
	if err := putName(m[NegOffName:NegOffName+2*MaxHostName], n.Name); err != nil {
		return b[:start], err
	}
	putGUID(m[NegOffKey:], n.Key)
	if n.Request {
		le.PutUint16(m[NegReqOffRespLength:], n.ResponseLen)
		le.PutUint16(m[NegReqOffCount:], uint16(len(n.Providers)))
	} else {
		le.PutUint16(m[NegRspOffCount:], uint16(len(n.Providers)))
	}
	for _, p := range n.Providers {
		if len(p.Instances) > MaxInstances {
			return b[:start], fmt.Errorf("lwio: provider %q has %d instances, at most %d", p.Name, len(p.Instances), MaxInstances)
		}
		off := len(b)
		b = append(b, make([]byte, ProvOffTable)...)
		if err := putName(b[off+ProvOffName:off+ProvOffName+2*MaxProviderName], p.Name); err != nil {
			return b[:start], err
		}
		le.PutUint16(b[off+ProvOffCount:], uint16(len(p.Instances)))
		for _, in := range p.Instances {
			if len(in.HostAddress) > 255 || len(in.Discriminator) > 255 {
				return b[:start], fmt.Errorf("lwio: an instance address or discriminator over 255 bytes")
			}
			var h [InstOffAddress]byte
			le.PutUint16(h[InstOffHostLen:], uint16(len(in.HostAddress)))
			le.PutUint16(h[InstOffDiscLen:], uint16(len(in.Discriminator)))
			b = append(append(append(b, h[:]...), in.HostAddress...), in.Discriminator...)
		}
	}
	if len(b)-start > MaxControlMessage {
		return b[:start], fmt.Errorf("lwio: negotiate message of %d bytes", len(b)-start)
	}
	le.PutUint16(b[start+CtlOffLength:], uint16(len(b)-start))
	return b, nil
}

// Decode reads a whole negotiate message (request or response, as
// n.Request says) that is all of m.
func (n *Negotiate) Decode(m []byte) error {
	fixed := NegRspOffList
	if n.Request {
		fixed = NegReqOffList
	}
	if err := checkControl(m, ControlOpNegotiate, fixed); err != nil {
		return err
	}
	n.Name = getName(m[NegOffName : NegOffName+2*MaxHostName])
	n.Key = getGUID(m[NegOffKey:])
	var count int
	if n.Request {
		n.ResponseLen = le.Uint16(m[NegReqOffRespLength:])
		count = int(le.Uint16(m[NegReqOffCount:]))
	} else {
		count = int(le.Uint16(m[NegRspOffCount:]))
	}
	if count > MaxProviders {
		return fmt.Errorf("lwio: %d providers, at most %d", count, MaxProviders)
	}
	rest := m[fixed:]
	n.Providers = nil
	for range count {
		if len(rest) < ProvOffTable {
			return ErrShort
		}
		p := Provider{Name: getName(rest[ProvOffName : ProvOffName+2*MaxProviderName])}
		ni := int(le.Uint16(rest[ProvOffCount:]))
		if ni > MaxInstances {
			return fmt.Errorf("lwio: provider with %d instances, at most %d", ni, MaxInstances)
		}
		rest = rest[ProvOffTable:]
		for range ni {
			if len(rest) < InstOffAddress {
				return ErrShort
			}
			hl, dl := int(le.Uint16(rest[InstOffHostLen:])), int(le.Uint16(rest[InstOffDiscLen:]))
			if len(rest) < InstOffAddress+hl+dl {
				return ErrShort
			}
			in := Instance{HostAddress: append([]byte(nil), rest[InstOffAddress:InstOffAddress+hl]...),
				Discriminator: append([]byte(nil), rest[InstOffAddress+hl:InstOffAddress+hl+dl]...)}
			p.Instances = append(p.Instances, in)
			rest = rest[InstOffAddress+hl+dl:]
		}
		n.Providers = append(n.Providers, p)
	}
	if len(rest) != 0 {
		return ErrLength
	}
	return nil
}

// putGUID writes u in the Windows GUID layout: Data1 (u32), Data2 and Data3
// (u16) little-endian, Data4 as is. uuid.UUID holds the RFC 4122 byte
// order, big-endian in the first three fields.
func putGUID(b []byte, u uuid.UUID) {
	b[0], b[1], b[2], b[3] = u[3], u[2], u[1], u[0]
	b[4], b[5] = u[5], u[4]
	b[6], b[7] = u[7], u[6]
	copy(b[8:16], u[8:16])
}

func getGUID(b []byte) uuid.UUID {
	var u uuid.UUID
	u[0], u[1], u[2], u[3] = b[3], b[2], b[1], b[0]
	u[4], u[5] = b[5], b[4]
	u[6], u[7] = b[7], b[6]
	copy(u[8:16], b[8:16])
	return u
}

func utf16le(s string) []byte {
	u := utf16.Encode([]rune(s))
	b := make([]byte, 2*len(u))
	for i, c := range u {
		le.PutUint16(b[2*i:], c)
	}
	return b
}

// fromUTF16le decodes b, less any NUL padding at its end (names, contexts).
func fromUTF16le(b []byte) string {
	u := utf16Units(b)
	for len(u) > 0 && u[len(u)-1] == 0 {
		u = u[:len(u)-1]
	}
	return string(utf16.Decode(u))
}

// fromUTF16leExact decodes all of b, NULs included: a path's NUL is the
// path's, for the export to refuse, never padding to drop (a path "f\x00"
// must not name f).
func fromUTF16leExact(b []byte) string { return string(utf16.Decode(utf16Units(b))) }

func utf16Units(b []byte) []uint16 {
	u := make([]uint16, len(b)/2)
	for i := range u {
		u[i] = le.Uint16(b[2*i:])
	}
	return u
}

// putName writes s into a fixed UTF-16LE field, NUL padded; it must leave
// room for the NUL.
func putName(field []byte, s string) error {
	b := utf16le(s)
	if len(b) >= len(field) {
		return fmt.Errorf("lwio: name %q is %d bytes of UTF-16, the field holds %d with its NUL", s, len(b), len(field))
	}
	clear(field)
	copy(field, b)
	return nil
}

func getName(field []byte) string {
	for i := 0; i+1 < len(field); i += 2 {
		if field[i] == 0 && field[i+1] == 0 {
			return fromUTF16le(field[:i])
		}
	}
	return fromUTF16le(field)
}
