package hdr

// TCP options (RFC 9293 3.2, RFC 7323, RFC 2018). Every option but EOL and
// NOP is kind, length (of the whole option), body:
//
//	MSS             2, 4, u16 maximum segment size            (SYN only)
//	window scale    3, 3, u8  shift count, at most 14         (SYN only)
//	SACK permitted  4, 2                                       (SYN only)
//	SACK            5, 2+8n, n × (u32 left edge, u32 right edge)
//	timestamps      8, 10, u32 TSval, u32 TSecr
const (
	TCPOptEOL           = 0
	TCPOptNOP           = 1
	TCPOptMSS           = 2
	TCPOptWS            = 3
	TCPOptSACKPermitted = 4
	TCPOptSACK          = 5
	TCPOptTimestamp     = 8

	TCPOptMSSLen           = 4
	TCPOptWSLen            = 3
	TCPOptSACKPermittedLen = 2
	TCPOptTimestampLen     = 10
	TCPOptSACKHdrLen       = 2
	TCPSACKBlockLen        = 8
	// TCPMaxSACKBlocks is what fits in 40 bytes of options.
	TCPMaxSACKBlocks = (TCPMaxOptionsSize - TCPOptSACKHdrLen) / TCPSACKBlockLen
	// TCPMaxWindowShift is the largest window scale RFC 7323 2.3 allows;
	// a receiver treats a larger one as 14.
	TCPMaxWindowShift = 14
)

// TCPOption is one option, kind and length byte included (never EOL or
// NOP). Its typed accessors assume the kind and the length they name:
// check WellFormed first.
type TCPOption []byte

func (o TCPOption) Kind() uint8 { return o[0] }

// Len is the option's length, kind and length bytes included.
func (o TCPOption) Len() int { return len(o) }

// Body is what follows the kind and length bytes.
func (o TCPOption) Body() []byte { return o[2:] }

// WellFormed reports whether a known kind has the length its RFC gives it
// (SACK: 2+8n, n >= 1). Unknown kinds are well-formed: a receiver skips
// them.
func (o TCPOption) WellFormed() bool {
	switch o.Kind() {
	case TCPOptMSS:
		return len(o) == TCPOptMSSLen
	case TCPOptWS:
		return len(o) == TCPOptWSLen
	case TCPOptSACKPermitted:
		return len(o) == TCPOptSACKPermittedLen
	case TCPOptTimestamp:
		return len(o) == TCPOptTimestampLen
	case TCPOptSACK:
		return len(o) >= TCPOptSACKHdrLen+TCPSACKBlockLen && (len(o)-TCPOptSACKHdrLen)%TCPSACKBlockLen == 0
	}
	return true
}

func (o TCPOption) MSS() uint16 { return be.Uint16(o[2:]) }

// WindowShift is the raw shift count, not clamped to TCPMaxWindowShift.
func (o TCPOption) WindowShift() uint8 { return o[2] }
func (o TCPOption) TSVal() uint32      { return be.Uint32(o[2:]) }
func (o TCPOption) TSEcr() uint32      { return be.Uint32(o[6:]) }

// SACKBlocks is the number of blocks in a SACK option.
func (o TCPOption) SACKBlocks() int { return (len(o) - TCPOptSACKHdrLen) / TCPSACKBlockLen }

// SACKBlock is block i of a SACK option: [left, right).
func (o TCPOption) SACKBlock(i int) (left, right uint32) {
	b := o[TCPOptSACKHdrLen+TCPSACKBlockLen*i:]
	return be.Uint32(b), be.Uint32(b[4:])
}

// TCPOptionIter walks the options of a TCP header without allocating:
//
//	it := tcp.OptionIter()
//	for o, ok := it.Next(); ok; o, ok = it.Next() { ... }
//	if it.Err() != nil { ... }
//
// NOPs are skipped and EOL ends the walk. An option whose length byte is
// missing, below 2 or past the end of the options ends it with ErrOption:
// nothing after it can be found. Whether a known kind has the right length
// is the caller's call (WellFormed): the engine refuses the segment, the
// host's flow tracker ignores the option.
type TCPOptionIter struct {
	rest []byte
	err  error
}

// IterTCPOptions walks opts, the option bytes of a TCP header.
func IterTCPOptions(opts []byte) TCPOptionIter { return TCPOptionIter{rest: opts} }

// Next returns the next option, or false at the end of the options (Err
// tells whether they ended well).
func (it *TCPOptionIter) Next() (TCPOption, bool) {
	b := it.rest
	for len(b) > 0 && b[0] == TCPOptNOP {
		b = b[1:]
	}
	if len(b) == 0 || b[0] == TCPOptEOL {
		it.rest = nil
		return nil, false
	}
	if len(b) < 2 || int(b[1]) < 2 || int(b[1]) > len(b) {
		it.rest = nil
		it.err = ErrOption
		return nil, false
	}
	n := int(b[1])
	it.rest = b[n:]
	return TCPOption(b[:n]), true
}

// Err is ErrOption if the walk stopped at a malformed option, else nil.
func (it *TCPOptionIter) Err() error { return it.err }

// PutTCPOptMSS writes an MSS option at the start of b and returns its
// length.
func PutTCPOptMSS(b []byte, mss uint16) int {
	_ = b[TCPOptMSSLen-1]
	b[0], b[1] = TCPOptMSS, TCPOptMSSLen
	be.PutUint16(b[2:], mss)
	return TCPOptMSSLen
}

// PutTCPOptWS writes a window scale option and returns its length.
func PutTCPOptWS(b []byte, shift uint8) int {
	_ = b[TCPOptWSLen-1]
	b[0], b[1], b[2] = TCPOptWS, TCPOptWSLen, shift
	return TCPOptWSLen
}

// PutTCPOptSACKPermitted writes a SACK-permitted option and returns its
// length.
func PutTCPOptSACKPermitted(b []byte) int {
	_ = b[TCPOptSACKPermittedLen-1]
	b[0], b[1] = TCPOptSACKPermitted, TCPOptSACKPermittedLen
	return TCPOptSACKPermittedLen
}

// PutTCPOptTimestamp writes a timestamps option and returns its length.
func PutTCPOptTimestamp(b []byte, val, ecr uint32) int {
	_ = b[TCPOptTimestampLen-1]
	b[0], b[1] = TCPOptTimestamp, TCPOptTimestampLen
	be.PutUint32(b[2:], val)
	be.PutUint32(b[6:], ecr)
	return TCPOptTimestampLen
}

// PutTCPOptSACK writes the kind and length of a SACK option of n blocks
// and returns the option's length; PutTCPSACKBlock fills the blocks.
func PutTCPOptSACK(b []byte, n int) int {
	l := TCPOptSACKHdrLen + TCPSACKBlockLen*n
	b[0], b[1] = TCPOptSACK, byte(l)
	return l
}

// PutTCPSACKBlock writes block i, [left, right), of the SACK option at the
// start of b.
func PutTCPSACKBlock(b []byte, i int, left, right uint32) {
	o := b[TCPOptSACKHdrLen+TCPSACKBlockLen*i:]
	be.PutUint32(o, left)
	be.PutUint32(o[4:], right)
}
