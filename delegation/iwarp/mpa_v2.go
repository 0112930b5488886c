package iwarp

import (
	"errors"
	"fmt"
)

// MPA revision 2 (RFC 6581, enhanced RDMA connection establishment): a
// request or reply with Rev 2 and the S flag (MPAFlagEnhanced) carries, as
// the first 4 bytes of its private data, the enhanced connection data
// (big-endian):
//
//	0x00 u16  P (0x8000) peer-to-peer mode | Z (0x4000) zero-length Send RTR | IRD (0x3FFF)
//	0x02 u16  W (0x8000) zero-length RDMA Write RTR | R (0x4000) zero-length RDMA Read RTR | ORD (0x3FFF)
//	0x04 ...  the application's private data (rdma_cm carries no header of its own on iWARP)
//
// IRD is how many inbound RDMA Read Requests the sender will queue, ORD
// how many of its own it wants outstanding. In a request P asks for
// peer-to-peer mode and W/R/Z offer the ready-to-receive (RTR) messages the
// initiator can send; in the reply P confirms and exactly one of W/R/Z picks
// the RTR the initiator then sends as its first FPDU. The bit names follow
// Linux siw (MPA_V2_*) and cxgb4, which agree with each other.
const (
	MPAv2DataLen = 4

	MPAv2OffIRD = 0x00
	MPAv2OffORD = 0x02

	MPAv2PeerToPeer = 0x8000 // in the IRD word
	MPAv2SendRTR    = 0x4000 // in the IRD word: zero-length Send
	MPAv2WriteRTR   = 0x8000 // in the ORD word: zero-length RDMA Write
	MPAv2ReadRTR    = 0x4000 // in the ORD word: zero-length RDMA Read
	MPAv2IRDORDMask = 0x3FFF
	// MPAv2MaxIRDORD is the largest IRD or ORD the 14-bit fields hold.
	MPAv2MaxIRDORD = MPAv2IRDORDMask
	// MPAv2MaxAppPrivateData is the application's share of the private
	// data of an enhanced frame.
	MPAv2MaxAppPrivateData = MPAMaxPrivateData - MPAv2DataLen
)

// Errors of the revision-2 decoder.
var (
	ErrMPARevision = errors.New("iwarp: MPA revision not supported")
	ErrMPAv2Data   = errors.New("iwarp: MPA revision 2 enhanced connection data missing")
)

// MPAv2Data is an accessor over the 4 bytes of enhanced connection data.
type MPAv2Data []byte

func (d MPAv2Data) IRDWord() uint16 { return be.Uint16(d[MPAv2OffIRD:]) }
func (d MPAv2Data) ORDWord() uint16 { return be.Uint16(d[MPAv2OffORD:]) }
func (d MPAv2Data) IRD() uint16     { return d.IRDWord() & MPAv2IRDORDMask }
func (d MPAv2Data) ORD() uint16     { return d.ORDWord() & MPAv2IRDORDMask }
func (d MPAv2Data) PeerToPeer() bool {
	return d.IRDWord()&MPAv2PeerToPeer != 0
}

// MPAv2Fields is the enhanced connection data as a value.
type MPAv2Fields struct {
	IRD, ORD   uint16 // at most MPAv2MaxIRDORD
	PeerToPeer bool
	SendRTR    bool
	WriteRTR   bool
	ReadRTR    bool
}

// RTR types, as a set (MPAv2Fields.RTRs).
const (
	RTRWrite = 1 << iota
	RTRRead
	RTRSend
)

// RTRs is the set of RTR bits set.
func (v *MPAv2Fields) RTRs() int {
	n := 0
	if v.WriteRTR {
		n |= RTRWrite
	}
	if v.ReadRTR {
		n |= RTRRead
	}
	if v.SendRTR {
		n |= RTRSend
	}
	return n
}

// Encode writes the 4 bytes into b. It panics if IRD or ORD does not fit
// 14 bits: a local bug, never input from the wire.
func (v *MPAv2Fields) Encode(b []byte) int {
	if v.IRD > MPAv2MaxIRDORD || v.ORD > MPAv2MaxIRDORD {
		panic("iwarp: MPA v2 IRD/ORD above 16383")
	}
	_ = b[MPAv2DataLen-1]
	ird, ord := v.IRD, v.ORD
	if v.PeerToPeer {
		ird |= MPAv2PeerToPeer
	}
	if v.SendRTR {
		ird |= MPAv2SendRTR
	}
	if v.WriteRTR {
		ord |= MPAv2WriteRTR
	}
	if v.ReadRTR {
		ord |= MPAv2ReadRTR
	}
	be.PutUint16(b[MPAv2OffIRD:], ird)
	be.PutUint16(b[MPAv2OffORD:], ord)
	return MPAv2DataLen
}

// Decode reads the 4 bytes from the start of b.
func (v *MPAv2Fields) Decode(b []byte) (int, error) {
	if len(b) < MPAv2DataLen {
		return 0, fmt.Errorf("%w: %v", ErrMPAv2Data, errShort("enhanced connection data", len(b), MPAv2DataLen))
	}
	d := MPAv2Data(b)
	iw, ow := d.IRDWord(), d.ORDWord()
	*v = MPAv2Fields{
		IRD: iw & MPAv2IRDORDMask, ORD: ow & MPAv2IRDORDMask,
		PeerToPeer: iw&MPAv2PeerToPeer != 0, SendRTR: iw&MPAv2SendRTR != 0,
		WriteRTR: ow&MPAv2WriteRTR != 0, ReadRTR: ow&MPAv2ReadRTR != 0,
	}
	return MPAv2DataLen, nil
}

// MPAConn is what an MPA request or reply says about the connection, of
// either revision: the frame's flags and, for an enhanced revision-2
// frame, the IRD/ORD and peer-to-peer data; AppData is the application's
// private data (after the enhanced data).
type MPAConn struct {
	Rev      uint8
	CRC      bool
	Reject   bool
	Enhanced bool        // revision 2 with S: V2 is valid
	V2       MPAv2Fields // zero unless Enhanced
	AppData  []byte      // aliases the frame
}

// ParseMPAConn decodes a whole MPA request or reply frame at the start of b
// into what it says about the connection and returns the frame's length.
// Revision 1 and 2 are accepted (anything else is ErrMPARevision); a
// revision-2 frame with S must carry the 4 bytes of enhanced data. S in a
// revision-1 frame is a reserved bit there and is ignored, as RFC 5044
// says of reserved bits. Markers are returned by Decode, not judged here.
func ParseMPAConn(b []byte) (MPAFrameFields, MPAConn, int, error) {
	var f MPAFrameFields
	n, err := f.Decode(b)
	if err != nil {
		return f, MPAConn{}, 0, err
	}
	c, err := f.Conn()
	return f, c, n, err
}

// Conn interprets a decoded frame (see ParseMPAConn).
func (m *MPAFrameFields) Conn() (MPAConn, error) {
	c := MPAConn{Rev: m.Rev, CRC: m.CRC, Reject: m.Reject, AppData: m.PrivateData}
	switch m.Rev {
	case MPARevision1:
		return c, nil
	case MPARevision2:
	default:
		return c, fmt.Errorf("%w: %d (want 1 or 2)", ErrMPARevision, m.Rev)
	}
	if !m.Enhanced {
		return c, nil
	}
	if _, err := c.V2.Decode(m.PrivateData); err != nil {
		return c, err
	}
	c.Enhanced = true
	c.AppData = m.PrivateData[MPAv2DataLen:]
	return c, nil
}
