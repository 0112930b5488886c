package lwio

// Server-to-client completions, the file registration parameters and the
// vectored I/O region.

// I/O status block (LWIO_IO_STATUS_BLOCK): RDMA-written to IosVa/IosMh in
// polling mode, and the tail of every status response.
const (
	IOSBSize          = 8
	IosOffInformation = 0x00 // u32 bytes transferred, the Fid, a credit delta (signed): per request
	IosOffStatus      = 0x04 // u32 NTSTATUS
)

// Status response (LWIO_MSG_STATUS_RESPONSE): the server's send that
// completes a non-polling request, and the delta credit message.
const (
	StatusResponseSize = 16
	RspOffCookie       = 0x00 // u64 the request's Cookie (0 in a delta credit message)
	RspOffInformation  = 0x08 // u32 IOSB Information
	RspOffStatus       = 0x0C // u32 IOSB Status
)

// NTSTATUS values the server returns.
const (
	StatusSuccess            = 0x00000000
	StatusNotifyCredit       = 0x00000001 // a delta credit message, and the answer that retires a returned credit
	StatusInvalidHandle      = 0xC0000008 // unknown Fid
	StatusInvalidParameter   = 0xC000000D // a malformed or out-of-range request
	StatusInvalidDeviceReq   = 0xC0000010 // unknown opcode
	StatusEndOfFile          = 0xC0000011 // a read at or past the end of the file
	StatusAccessDenied       = 0xC0000022 // bad key or signature, a path outside the export
	StatusObjectNameNotFound = 0xC0000034 // REGISTER: no such file
	StatusInsufficientRes    = 0xC000009A // more requests outstanding than credits
	StatusCancelled          = 0xC0000120 // the request was cancelled
	StatusFileClosed         = 0xC0000128 // I/O on a Fid after its CLOSE
	StatusNotSupported       = 0xC00000BB // AUTH: an Endian other than EndianPtr64
)

// IOSB is an I/O status block.
type IOSB struct {
	Information uint32
	Status      uint32
}

// Encode writes the block at the start of b.
func (s *IOSB) Encode(b []byte) {
	le.PutUint32(b[IosOffInformation:], s.Information)
	le.PutUint32(b[IosOffStatus:], s.Status)
}

// Decode reads a block from the start of b.
func (s *IOSB) Decode(b []byte) error {
	if len(b) < IOSBSize {
		return ErrShort
	}
	*s = IOSB{Information: le.Uint32(b[IosOffInformation:]), Status: le.Uint32(b[IosOffStatus:])}
	return nil
}

// StatusResponse is a status response.
type StatusResponse struct {
	Cookie uint64
	IOSB
}

// Encode writes the response at the start of b.
func (r *StatusResponse) Encode(b []byte) {
	le.PutUint64(b[RspOffCookie:], r.Cookie)
	r.IOSB.Encode(b[RspOffInformation:])
}

// Decode reads a response from the start of b; it must be exactly one.
func (r *StatusResponse) Decode(b []byte) error {
	if len(b) != StatusResponseSize {
		return ErrShort
	}
	r.Cookie = le.Uint64(b[RspOffCookie:])
	return r.IOSB.Decode(b[RspOffInformation:])
}

// File registration parameters (LWIO_FID_PARAMS), after the common header
// of REGISTER.
const (
	FidParamsSize      = 40
	FidOffResumeKey    = 0x00 // 24 bytes SRV_RESUME_KEY
	FidOffSessionID    = 0x18 // i64 the session id from authentication
	FidOffFlagsAttrs   = 0x20 // u32 the flags the file was opened with
	FidOffReserved     = 0x24 // 4 bytes: the structure's 8-byte alignment
	FileNoIntermediate = 0x8  // FlagsAndAttributes: FILE_NO_INTERMEDIATE_BUFFERING (the source's value)
)

// FidParams is the file registration parameters.
type FidParams struct {
	ResumeKey          ResumeKey
	SessionID          int64
	FlagsAndAttributes uint32
}

// Encode writes the parameters at the start of b.
func (f *FidParams) Encode(b []byte) {
	b = b[:FidParamsSize]
	clear(b)
	f.ResumeKey.Encode(b[FidOffResumeKey:])
	le.PutUint64(b[FidOffSessionID:], uint64(f.SessionID))
	le.PutUint32(b[FidOffFlagsAttrs:], f.FlagsAndAttributes)
}

// Decode reads parameters from the start of b.
func (f *FidParams) Decode(b []byte) error {
	if len(b) < FidParamsSize {
		return ErrShort
	}
	if err := f.ResumeKey.Decode(b[FidOffResumeKey:]); err != nil {
		return err
	}
	f.SessionID = int64(le.Uint64(b[FidOffSessionID:]))
	f.FlagsAndAttributes = le.Uint32(b[FidOffFlagsAttrs:])
	return nil
}

// RDMA region (LWIO_RDMA_REGION): one page of a vectored read's
// destination, after the common header.
const (
	RegionSize   = 16
	RegOffDataVa = 0x00 // u64 the page's address (tagged offset)
	RegOffDataMh = 0x08 // u32 its memory handle (STag)
	RegOffLength = 0x0C // u32 PageSize, or less for the last region (a multiple of the sector size)
)

// Region is an RDMA region.
type Region struct {
	DataVa uint64
	DataMh uint32
	Length uint32
}

// Encode writes the region at the start of b.
func (r *Region) Encode(b []byte) {
	le.PutUint64(b[RegOffDataVa:], r.DataVa)
	le.PutUint32(b[RegOffDataMh:], r.DataMh)
	le.PutUint32(b[RegOffLength:], r.Length)
}

// Decode reads a region from the start of b.
func (r *Region) Decode(b []byte) error {
	if len(b) < RegionSize {
		return ErrShort
	}
	*r = Region{DataVa: le.Uint64(b[RegOffDataVa:]), DataMh: le.Uint32(b[RegOffDataMh:]), Length: le.Uint32(b[RegOffLength:])}
	return nil
}
