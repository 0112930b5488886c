package rings

import "fmt"

// Connection info block (QUERY_CONN, device → host): the engine's own view
// of one delegated connection, what Linux's tcp_info gives a socket's
// owner. The host's notifications carry SND.UNA, SND.NXT and the ACK count
// but none of the congestion state (cwnd, ssthresh, the RTT estimator) nor
// the per-connection loss-recovery counts, which only the engine has; a
// driver asks for them with QUERY_CONN, and the device writes this block
// by DMA to the command's Addr. The counters are the connection's own,
// counted from its OFFLOAD (the engine-wide totals are in the stat block
// and the counter area).
const (
	ConnInfoSize    = 128
	ConnInfoVersion = 1

	CiOffVersion    = 0x00 // u16 layout version (ConnInfoVersion)
	CiOffState      = 0x02 // u8 TCPState
	CiOffSndScale   = 0x03 // u8 send window scale
	CiOffRcvScale   = 0x04 // u8 receive window scale
	CiOffSndUna     = 0x08 // u32 SND.UNA
	CiOffSndNxt     = 0x0C // u32 SND.NXT
	CiOffRcvNxt     = 0x10 // u32 RCV.NXT
	CiOffSndWnd     = 0x14 // u32 the peer's window, bytes (scaled)
	CiOffRcvWnd     = 0x18 // u32 the window last advertised, bytes from RCV.NXT
	CiOffMSS        = 0x1C // u32 send MSS
	CiOffCwnd       = 0x20 // u32 congestion window, bytes
	CiOffSsthresh   = 0x24 // u32 slow start threshold, bytes
	CiOffSRTT       = 0x28 // u32 smoothed RTT, µs
	CiOffRTTVar     = 0x2C // u32 RTT variation, µs
	CiOffMinRTT     = 0x30 // u32 least RTT sample, µs
	CiOffRTO        = 0x34 // u32 retransmission timeout, µs
	CiOffOOOBytes   = 0x38 // u32 out-of-order bytes held
	CiOffRetrans    = 0x40 // u64 segments retransmitted
	CiOffFastRecov  = 0x48 // u64 fast recoveries entered
	CiOffRTOs       = 0x50 // u64 retransmission timer expirations
	CiOffTLPs       = 0x58 // u64 tail loss probes sent
	CiOffSegsIn     = 0x60 // u64 segments received
	CiOffSegsOut    = 0x68 // u64 segments sent
	CiOffBytesAcked = 0x70 // u64 bytes acknowledged by the peer
	CiOffBytesRecv  = 0x78 // u64 payload bytes received in order
)

// ConnInfoBlock is a connection info block in host memory.
type ConnInfoBlock []byte

func (b ConnInfoBlock) Version() uint16    { return le.Uint16(b[CiOffVersion:]) }
func (b ConnInfoBlock) State() TCPState    { return TCPState(b[CiOffState]) }
func (b ConnInfoBlock) SndScale() uint8    { return b[CiOffSndScale] }
func (b ConnInfoBlock) RcvScale() uint8    { return b[CiOffRcvScale] }
func (b ConnInfoBlock) SndUna() uint32     { return le.Uint32(b[CiOffSndUna:]) }
func (b ConnInfoBlock) SndNxt() uint32     { return le.Uint32(b[CiOffSndNxt:]) }
func (b ConnInfoBlock) RcvNxt() uint32     { return le.Uint32(b[CiOffRcvNxt:]) }
func (b ConnInfoBlock) Cwnd() uint32       { return le.Uint32(b[CiOffCwnd:]) }
func (b ConnInfoBlock) Retrans() uint64    { return le.Uint64(b[CiOffRetrans:]) }
func (b ConnInfoBlock) BytesAcked() uint64 { return le.Uint64(b[CiOffBytesAcked:]) }

// ConnInfo is the fields of a connection info block.
type ConnInfo struct {
	Version            uint16
	State              TCPState
	SndScale, RcvScale uint8
	SndUna, SndNxt     uint32
	RcvNxt             uint32
	SndWnd, RcvWnd     uint32
	MSS                uint32
	Cwnd, Ssthresh     uint32
	// SRTT, RTTVar, MinRTT and RTO are in microseconds; 0 SRTT: no sample yet.
	SRTT, RTTVar, MinRTT, RTO uint32
	OOOBytes                  uint32
	Retrans                   uint64
	FastRecoveries            uint64
	RTOs                      uint64
	TLPs                      uint64
	SegsIn, SegsOut           uint64
	BytesAcked, BytesReceived uint64
}

// Encode writes the fields to b (ConnInfoSize bytes), reserved bytes zero.
func (c *ConnInfo) Encode(b ConnInfoBlock) {
	_ = b[ConnInfoSize-1]
	clear(b[:ConnInfoSize])
	le.PutUint16(b[CiOffVersion:], c.Version)
	b[CiOffState] = uint8(c.State)
	b[CiOffSndScale] = c.SndScale
	b[CiOffRcvScale] = c.RcvScale
	for _, f := range [...]struct {
		off int
		v   uint32
	}{{CiOffSndUna, c.SndUna}, {CiOffSndNxt, c.SndNxt}, {CiOffRcvNxt, c.RcvNxt}, {CiOffSndWnd, c.SndWnd},
		{CiOffRcvWnd, c.RcvWnd}, {CiOffMSS, c.MSS}, {CiOffCwnd, c.Cwnd}, {CiOffSsthresh, c.Ssthresh},
		{CiOffSRTT, c.SRTT}, {CiOffRTTVar, c.RTTVar}, {CiOffMinRTT, c.MinRTT}, {CiOffRTO, c.RTO},
		{CiOffOOOBytes, c.OOOBytes}} {
		le.PutUint32(b[f.off:], f.v)
	}
	for _, f := range [...]struct {
		off int
		v   uint64
	}{{CiOffRetrans, c.Retrans}, {CiOffFastRecov, c.FastRecoveries}, {CiOffRTOs, c.RTOs}, {CiOffTLPs, c.TLPs},
		{CiOffSegsIn, c.SegsIn}, {CiOffSegsOut, c.SegsOut}, {CiOffBytesAcked, c.BytesAcked},
		{CiOffBytesRecv, c.BytesReceived}} {
		le.PutUint64(b[f.off:], f.v)
	}
}

// Decode reads the fields from b; only a short block is an error (Check
// judges the values).
func (c *ConnInfo) Decode(b ConnInfoBlock) error {
	if len(b) < ConnInfoSize {
		return errShort("connection info", len(b), ConnInfoSize)
	}
	u32 := func(off int) uint32 { return le.Uint32(b[off:]) }
	u64 := func(off int) uint64 { return le.Uint64(b[off:]) }
	*c = ConnInfo{Version: b.Version(), State: b.State(), SndScale: b.SndScale(), RcvScale: b.RcvScale(),
		SndUna: u32(CiOffSndUna), SndNxt: u32(CiOffSndNxt), RcvNxt: u32(CiOffRcvNxt),
		SndWnd: u32(CiOffSndWnd), RcvWnd: u32(CiOffRcvWnd), MSS: u32(CiOffMSS),
		Cwnd: u32(CiOffCwnd), Ssthresh: u32(CiOffSsthresh), SRTT: u32(CiOffSRTT), RTTVar: u32(CiOffRTTVar),
		MinRTT: u32(CiOffMinRTT), RTO: u32(CiOffRTO), OOOBytes: u32(CiOffOOOBytes),
		Retrans: u64(CiOffRetrans), FastRecoveries: u64(CiOffFastRecov), RTOs: u64(CiOffRTOs),
		TLPs: u64(CiOffTLPs), SegsIn: u64(CiOffSegsIn), SegsOut: u64(CiOffSegsOut),
		BytesAcked: u64(CiOffBytesAcked), BytesReceived: u64(CiOffBytesRecv)}
	return nil
}

// Check reports what in a decoded block no device of this layout writes: a
// version this host does not know, a state outside the TCP states, SND.NXT
// below SND.UNA, window scales above RFC 7323's 14, an MSS of 0, an RTT
// variation or minimum with no smoothed RTT. A host that finds one counts
// a device error and trusts none of the block.
func (c *ConnInfo) Check() error {
	switch {
	case c.Version != ConnInfoVersion:
		return fmt.Errorf("rings: connection info version %d, want %d", c.Version, ConnInfoVersion)
	case c.State > StateTimeWait:
		return fmt.Errorf("rings: connection info state %d is no TCP state", c.State)
	case int32(c.SndNxt-c.SndUna) < 0:
		return fmt.Errorf("rings: connection info SND.NXT %d below SND.UNA %d", c.SndNxt, c.SndUna)
	case c.SndScale > 14 || c.RcvScale > 14:
		return fmt.Errorf("rings: connection info window scales %d/%d above 14", c.SndScale, c.RcvScale)
	case c.MSS == 0:
		return fmt.Errorf("rings: connection info MSS 0")
	case c.SRTT == 0 && (c.RTTVar != 0 || c.MinRTT != 0):
		return fmt.Errorf("rings: connection info RTT variation or minimum with no smoothed RTT")
	}
	return nil
}
