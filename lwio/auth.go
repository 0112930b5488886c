package lwio

import (
	"crypto/hmac"
	"crypto/md5"
	"crypto/subtle"
	"errors"
	"fmt"
)

// Authentication parameters (LWIO_AUTH_PARAMS): the client sends them after
// the common header of AUTH; the server RDMA-writes its own to the client's
// DataVa/DataMh, then completes the AUTH with a status response.
const (
	AuthFixedSize       = 30
	AuthOffMagic        = 0x00 // 4 bytes 'LWIO'
	AuthOffRevID        = 0x04 // u16 RevID
	AuthOffEndian       = 0x06 // u16 sizeof(ULONG_PTR): 8
	AuthOffPageSize     = 0x08 // u16
	AuthOffBaseSequence = 0x0A // u16 client 0; server the client's + 1
	AuthOffMaxRdmaWin   = 0x0C // u32 most bytes the sender accepts in one RDMA transfer
	AuthOffMaxSend      = 0x10 // u32 most bytes the sender sends in one message
	AuthOffMaxRecv      = 0x14 // u32 bytes of each receive buffer the sender posted
	AuthOffHeaderSize   = 0x18 // u16 HeaderSize
	AuthOffCredits      = 0x1A // u16 client: credits wanted; server: credits granted
	AuthOffRdmaRead     = 0x1C // u16 1 if the sender supports RDMA Read
	AuthOffOptions      = 0x1E // options: code u8, length u8, data; END is the code alone

	OptEnd       = 0
	OptKey       = 1
	OptSessionID = 2
	OptSignature = 3

	OptKeyLen       = 16
	OptSessionIDLen = 8
	OptSignatureLen = 16
	EndianPtr64     = 8
	// MaxAuthSize bounds an encoded AUTH_PARAMS: the fixed part, the three
	// options with their codes and lengths, and END.
	MaxAuthSize = AuthFixedSize + 2 + OptKeyLen + 2 + OptSessionIDLen + 2 + OptSignatureLen + 1
)

// Errors of authentication.
var (
	ErrOption    = errors.New("lwio: malformed authentication option")
	ErrSignature = errors.New("lwio: authentication signature does not match")
)

// AuthParams is the fields of an AUTH_PARAMS with its options. The
// signature is not a field: Append computes it, Decode checks it.
type AuthParams struct {
	RevID             uint16
	Endian            uint16
	PageSize          uint16
	BaseSequence      uint16
	MaxRdmaWindowSize uint32
	MaxSendBufferSize uint32
	MaxRecvBufferSize uint32
	HeaderSize        uint16
	Credits           uint16
	RdmaReadSupported uint16
	Key               [OptKeyLen]byte // the GUID key, in the GUID layout
	HasSessionID      bool            // the server's parameters carry one
	SessionID         int64
}

// Append appends the encoded parameters signed without a secret (the
// source's MD5): AppendSigned with none.
func (a *AuthParams) Append(b []byte) []byte { return a.AppendSigned(b, nil) }

// AppendSigned appends the encoded parameters: the fixed part, KEY,
// SESSION_ID (when set), SIGNATURE, END. The signature covers the encoding
// without the SIGNATURE option and the secret the server and its clients
// share: HMAC-MD5 under it, or with no secret the source's plain MD5
// (docs/lwio.md).
func (a *AuthParams) AppendSigned(b, secret []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, AuthFixedSize)...)
	m := b[start:]
	copy(m[AuthOffMagic:], ProtocolID[:])
	le.PutUint16(m[AuthOffRevID:], a.RevID)
	le.PutUint16(m[AuthOffEndian:], a.Endian)
	le.PutUint16(m[AuthOffPageSize:], a.PageSize)
	le.PutUint16(m[AuthOffBaseSequence:], a.BaseSequence)
	le.PutUint32(m[AuthOffMaxRdmaWin:], a.MaxRdmaWindowSize)
	le.PutUint32(m[AuthOffMaxSend:], a.MaxSendBufferSize)
	le.PutUint32(m[AuthOffMaxRecv:], a.MaxRecvBufferSize)
	le.PutUint16(m[AuthOffHeaderSize:], a.HeaderSize)
	le.PutUint16(m[AuthOffCredits:], a.Credits)
	le.PutUint16(m[AuthOffRdmaRead:], a.RdmaReadSupported)
	b = append(append(b, OptKey, OptKeyLen), a.Key[:]...)
	if a.HasSessionID {
		var sid [OptSessionIDLen]byte
		le.PutUint64(sid[:], uint64(a.SessionID))
		b = append(append(b, OptSessionID, OptSessionIDLen), sid[:]...)
	}
	sig := signature(secret, b[start:], []byte{OptEnd})
	b = append(append(b, OptSignature, OptSignatureLen), sig[:]...)
	return append(b, OptEnd)
}

// signature signs the parameters without the SIGNATURE option: the bytes
// before it and those after it up to END. Under a secret it is HMAC-MD5,
// which someone who saw only the pipe (the key, every field) cannot
// compute; without one it is the source's MD5.
func signature(secret, before, after []byte) [md5.Size]byte {
	h := md5.New()
	if len(secret) > 0 {
		h = hmac.New(md5.New, secret)
	}
	h.Write(before)
	h.Write(after)
	var s [md5.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

// Decode reads parameters signed without a secret: DecodeSigned with none.
func (a *AuthParams) Decode(b []byte) error { return a.DecodeSigned(b, nil) }

// DecodeSigned reads parameters from the start of b (extra bytes after
// END are ignored: they arrive in a larger buffer) and checks the
// signature under secret. Each option may appear once; KEY and SIGNATURE
// are required.
func (a *AuthParams) DecodeSigned(b, secret []byte) error {
	if len(b) < AuthFixedSize {
		return ErrShort
	}
	if [4]byte(b[AuthOffMagic:]) != ProtocolID {
		return ErrMagic
	}
	*a = AuthParams{RevID: le.Uint16(b[AuthOffRevID:]), Endian: le.Uint16(b[AuthOffEndian:]),
		PageSize: le.Uint16(b[AuthOffPageSize:]), BaseSequence: le.Uint16(b[AuthOffBaseSequence:]),
		MaxRdmaWindowSize: le.Uint32(b[AuthOffMaxRdmaWin:]), MaxSendBufferSize: le.Uint32(b[AuthOffMaxSend:]),
		MaxRecvBufferSize: le.Uint32(b[AuthOffMaxRecv:]), HeaderSize: le.Uint16(b[AuthOffHeaderSize:]),
		Credits: le.Uint16(b[AuthOffCredits:]), RdmaReadSupported: le.Uint16(b[AuthOffRdmaRead:])}
	if a.RevID != RevID {
		return ErrVersion
	}
	var haveKey, haveSig bool
	var sig []byte
	sigAt := -1
	off := AuthOffOptions
	for {
		if off >= len(b) {
			return ErrShort
		}
		code := b[off]
		if code == OptEnd {
			break
		}
		if off+2 > len(b) {
			return ErrShort
		}
		n := int(b[off+1])
		if off+2+n > len(b) {
			return ErrShort
		}
		data := b[off+2 : off+2+n]
		switch code {
		case OptKey:
			if haveKey || n != OptKeyLen {
				return ErrOption
			}
			copy(a.Key[:], data)
			haveKey = true
		case OptSessionID:
			if a.HasSessionID || n != OptSessionIDLen {
				return ErrOption
			}
			a.SessionID, a.HasSessionID = int64(le.Uint64(data)), true
		case OptSignature:
			if haveSig || n != OptSignatureLen {
				return ErrOption
			}
			sig, sigAt, haveSig = data, off, true
		default:
			return fmt.Errorf("%w: unknown option code %d", ErrOption, code)
		}
		off += 2 + n
	}
	if !haveKey || !haveSig {
		return fmt.Errorf("%w: KEY and SIGNATURE are required", ErrOption)
	}
	// The signature covers everything but itself: what precedes it and
	// what follows it up to END (nothing, in this encoder's order).
	want := signature(secret, b[:sigAt], b[sigAt+2+OptSignatureLen:off+1])
	if subtle.ConstantTimeCompare(want[:], sig) != 1 {
		return ErrSignature
	}
	return nil
}

// clientMaxWrite is the most write data the client sends in one message:
// its MaxSendBufferSize is this and the header. The server's
// MaxRecvBufferSize bounds a write too; this only keeps the field honest.
const clientMaxWrite = 16 << 20

// serverRdmaRead is the server's RdmaReadSupported: 0. The server issues
// no RDMA Read (write data comes by Send) and registers no memory a client
// could read, as the asymmetric model wants.
const serverRdmaRead = 0

// checkClient judges a client's AUTH_PARAMS, every field either honoured
// or refused with a status (docs/lwio.md, "Authentication"): h is the AUTH
// header and n the message's length.
func (a *AuthParams) checkClient(h *Header, n int) uint32 {
	switch {
	case a.Endian != EndianPtr64:
		// Every structure is laid out for 64-bit pointers (PVOID64 is
		// 8 bytes either way, but the alignment holes follow it).
		return StatusNotSupported
	case a.HeaderSize != HeaderSize:
		return StatusInvalidParameter
	case a.PageSize < SectorSize || a.PageSize&(a.PageSize-1) != 0:
		// The client's page size bounds its vectored requests and the
		// collapse rule compares it with the server's: a power of two
		// of at least a sector.
		return StatusInvalidParameter
	case a.MaxRdmaWindowSize < SectorSize:
		return StatusInvalidParameter
	case int(a.MaxSendBufferSize) < n || a.MaxSendBufferSize < HeaderSize+FidParamsSize:
		// It must cover this very message and a REGISTER; a longer
		// message later ends the connection.
		return StatusInvalidParameter
	case a.MaxRecvBufferSize < StatusResponseSize:
		// The server's messages (status responses, delta credit
		// messages) are StatusResponseSize bytes each.
		return StatusInvalidParameter
	case a.RdmaReadSupported > 1:
		return StatusInvalidParameter
	case h.Sequence != a.BaseSequence:
		// AUTH is the request numbered BaseSequence; the next is one more.
		return StatusInvalidParameter
	}
	return StatusSuccess
}

// checkServer judges the server's AUTH_PARAMS against the client's own
// (mine): what the client needs of them before it sends anything more.
func (a *AuthParams) checkServer(mine *AuthParams) error {
	switch {
	case a.Key != mine.Key || !a.HasSessionID:
		return errors.New("the server's parameters do not answer ours (key, session id)")
	case a.Endian != EndianPtr64 || a.HeaderSize != HeaderSize:
		return fmt.Errorf("the server's Endian %d and HeaderSize %d, want %d and %d", a.Endian, a.HeaderSize, EndianPtr64, HeaderSize)
	case a.BaseSequence != mine.BaseSequence+1:
		return fmt.Errorf("the server's BaseSequence %d, want %d", a.BaseSequence, mine.BaseSequence+1)
	case a.Credits == 0:
		return errors.New("the server granted no credit")
	case a.MaxSendBufferSize > mine.MaxRecvBufferSize:
		return fmt.Errorf("the server sends messages of %d bytes, our receive buffers hold %d", a.MaxSendBufferSize, mine.MaxRecvBufferSize)
	case a.MaxRecvBufferSize < SectorSize || a.MaxRdmaWindowSize < SectorSize:
		return fmt.Errorf("the server's MaxRecvBufferSize %d and MaxRdmaWindowSize %d are below a sector", a.MaxRecvBufferSize, a.MaxRdmaWindowSize)
	case a.PageSize < SectorSize || a.PageSize&(a.PageSize-1) != 0 || a.RdmaReadSupported > 1:
		return fmt.Errorf("the server's PageSize %d or RdmaReadSupported %d", a.PageSize, a.RdmaReadSupported)
	}
	return nil
}
