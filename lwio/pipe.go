package lwio

import (
	"errors"
	"fmt"
	"io"
)

// The pipe is a plain TCP connection to the server's pipe port on the host
// stack (netstack). The source runs discovery over a named pipe and obtains
// the resume key on its file-access channel (SMB); this project has no SMB
// server, so the pipe carries both: the negotiate exchange of the source and
// the file-access messages below, which are this project's own. Every pipe
// message starts with the control header; its Length delimits it.
//
// The first message must be NEGOTIATE. OPEN names a file of the export and
// returns its size and a server request resume key, which REGISTER on an
// authenticated RDMA connection turns into a Fid; RELEASE gives a key back
// without registering it. Keys are bound to the negotiate key of the pipe
// that obtained them and die with the pipe.
const (
	ControlOpOpen     = 0x01 // request: open a file of the export
	ControlOpOpenResp = 0x81 // response to OPEN
	ControlOpRelease  = 0x02 // request: give a resume key back (no response)

	// OPEN request, after the control header.
	OpenOffDisposition = 0x0C // u16 DispOpen, DispCreate, DispTruncate
	OpenOffReserved    = 0x0E // u16 zero
	OpenOffFlagsAttrs  = 0x10 // u32 the flags the file is opened with (FileNoIntermediate)
	OpenOffPathLen     = 0x14 // u16 bytes of Path
	OpenOffPath        = 0x16 // the path in the export, UTF-16LE, '/' or '\' separated
	OpenReqMinLen      = 0x16

	// OPEN response, after the control header.
	OpenRspOffStatus   = 0x0C // u32 NTSTATUS
	OpenRspOffReserved = 0x10 // u32 zero
	OpenRspOffSize     = 0x14 // u64 the file's size in bytes
	OpenRspOffKey      = 0x1C // SRV_REQUEST_RESUME_KEY (success only)
	OpenRspMinLen      = 0x1C

	// RELEASE request, after the control header.
	RelOffResumeKey = 0x0C // u64 the ResumeKey field of the key
	ReleaseLen      = 0x14

	// MaxPathLen bounds a path in bytes of UTF-8 (and of UTF-16LE on the pipe).
	MaxPathLen = 1024
)

// Dispositions of an OPEN.
const (
	DispOpen     = 0 // the file must exist
	DispCreate   = 1 // created if missing
	DispTruncate = 2 // created if missing, truncated to 0 bytes
)

// OpenRequest is an OPEN.
type OpenRequest struct {
	Disposition uint16
	FlagsAttrs  uint32
	Path        string
}

// Append appends the whole message.
func (o *OpenRequest) Append(b []byte) ([]byte, error) {
	p := utf16le(o.Path)
	if len(p) > MaxPathLen || o.Path == "" {
		return b, fmt.Errorf("lwio: path of %d bytes (1 to %d)", len(p), MaxPathLen)
	}
	start := len(b)
	b = append(b, make([]byte, OpenReqMinLen)...)
	m := b[start:]
	putControl(m, ControlOpOpen, OpenReqMinLen+len(p))
	le.PutUint16(m[OpenOffDisposition:], o.Disposition)
	le.PutUint32(m[OpenOffFlagsAttrs:], o.FlagsAttrs)
	le.PutUint16(m[OpenOffPathLen:], uint16(len(p)))
	return append(b, p...), nil
}

// Decode reads an OPEN that is all of m.
func (o *OpenRequest) Decode(m []byte) error {
	if err := checkControl(m, ControlOpOpen, OpenReqMinLen); err != nil {
		return err
	}
	n := int(le.Uint16(m[OpenOffPathLen:]))
	if n == 0 || n%2 != 0 || n > MaxPathLen || len(m) != OpenReqMinLen+n {
		return ErrLength
	}
	if le.Uint16(m[OpenOffReserved:]) != 0 {
		return fmt.Errorf("lwio: OPEN reserved field %#x", le.Uint16(m[OpenOffReserved:]))
	}
	*o = OpenRequest{Disposition: le.Uint16(m[OpenOffDisposition:]), FlagsAttrs: le.Uint32(m[OpenOffFlagsAttrs:]),
		Path: fromUTF16leExact(m[OpenOffPath:])}
	if o.Disposition > DispTruncate {
		return fmt.Errorf("lwio: OPEN disposition %d", o.Disposition)
	}
	return nil
}

// OpenResponse answers an OPEN.
type OpenResponse struct {
	Status uint32
	Size   uint64
	Key    RequestResumeKey // success only
}

// Append appends the whole message.
func (o *OpenResponse) Append(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, OpenRspMinLen)...)
	if o.Status == StatusSuccess {
		var err error
		if b, err = o.Key.Append(b); err != nil {
			return b[:start], err
		}
	}
	m := b[start:]
	putControl(m, ControlOpOpenResp, len(m))
	le.PutUint32(m[OpenRspOffStatus:], o.Status)
	le.PutUint64(m[OpenRspOffSize:], o.Size)
	return b, nil
}

// Decode reads an OPEN response that is all of m.
func (o *OpenResponse) Decode(m []byte) error {
	if err := checkControl(m, ControlOpOpenResp, OpenRspMinLen); err != nil {
		return err
	}
	*o = OpenResponse{Status: le.Uint32(m[OpenRspOffStatus:]), Size: le.Uint64(m[OpenRspOffSize:])}
	if o.Status != StatusSuccess {
		if len(m) != OpenRspMinLen {
			return ErrLength
		}
		return nil
	}
	return o.Key.Decode(m[OpenRspOffKey:])
}

// appendRelease appends a RELEASE of key k.
func appendRelease(b []byte, k uint64) []byte {
	start := len(b)
	b = append(b, make([]byte, ReleaseLen)...)
	putControl(b[start:], ControlOpRelease, ReleaseLen)
	le.PutUint64(b[start+RelOffResumeKey:], k)
	return b
}

func putControl(m []byte, op uint16, n int) {
	copy(m[CtlOffProtocolID:], ProtocolID[:])
	le.PutUint32(m[CtlOffRevID:], RevID)
	le.PutUint16(m[CtlOffOpcode:], op)
	le.PutUint16(m[CtlOffLength:], uint16(n))
}

func checkControl(m []byte, op uint16, min int) error {
	if len(m) < min {
		return ErrShort
	}
	if [4]byte(m[CtlOffProtocolID:]) != ProtocolID {
		return ErrMagic
	}
	if le.Uint32(m[CtlOffRevID:]) != RevID {
		return ErrVersion
	}
	if got := le.Uint16(m[CtlOffOpcode:]); got != op {
		return fmt.Errorf("lwio: control opcode %#x, want %#x", got, op)
	}
	if int(le.Uint16(m[CtlOffLength:])) != len(m) {
		return ErrLength
	}
	return nil
}

// ErrPipe wraps a malformed message on the pipe.
var ErrPipe = errors.New("lwio: pipe")

// readControl reads one whole control message from r into buf (grown as
// needed) and returns it with its opcode. The header is checked; the body
// is the caller's to decode.
func readControl(r io.Reader, buf []byte) ([]byte, uint16, error) {
	if cap(buf) < ControlHeaderSize {
		buf = make([]byte, 0, 256)
	}
	h := buf[:ControlHeaderSize]
	if _, err := io.ReadFull(r, h); err != nil {
		return nil, 0, err
	}
	if [4]byte(h[CtlOffProtocolID:]) != ProtocolID {
		return nil, 0, fmt.Errorf("%w: %w", ErrPipe, ErrMagic)
	}
	if le.Uint32(h[CtlOffRevID:]) != RevID {
		return nil, 0, fmt.Errorf("%w: %w", ErrPipe, ErrVersion)
	}
	n := int(le.Uint16(h[CtlOffLength:]))
	if n < ControlHeaderSize {
		return nil, 0, fmt.Errorf("%w: message length %d", ErrPipe, n)
	}
	if cap(buf) < n {
		nb := make([]byte, n)
		copy(nb, h)
		buf = nb
	}
	m := buf[:n]
	if _, err := io.ReadFull(r, m[ControlHeaderSize:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return nil, 0, err
	}
	return m, le.Uint16(m[CtlOffOpcode:]), nil
}
