package rings

import "net/netip"

// The offload state block: everything the offload unit needs to continue a
// TCP connection the host stack set up (the OFFLOAD command's Addr/Len point
// at one). It follows Microsoft TCP Chimney's split of a connection's state:
//
//   - constant state, fixed for the life of the connection: the 4-tuple, the
//     negotiated window scales, SACK-permitted, timestamps-ok;
//   - cached state, owned by the host and changed with UPDATE: MACs, TTL/TOS,
//     keepalive parameters, receive buffer size, thresholds, MSS;
//   - delegated state, owned by the device from the OFFLOAD on: sequence
//     numbers, windows, timestamps, RTT estimator, congestion window.
//
// Layout (little-endian, 128 bytes; IPv4 addresses and MACs are in network
// byte order, as on the wire):
//
//	0x00 u16 Version (ConnStateVersion)
//	0x02 u16 Flags (ConnStateFlags)
//	0x04 u8  State (TCPState: Established or CloseWait)
//	0x05 u8  TTL (0: device default)
//	0x06 u8  TOS
//	0x07 u8  Family (AddrFamily): zero in version 1
//	0x08 [4] LocalIP
//	0x0C [4] RemoteIP
//	0x10 u16 LocalPort
//	0x12 u16 RemotePort
//	0x14 [6] LocalMAC
//	0x1A [6] NextHopMAC
//	0x20 u32 SndUna
//	0x24 u32 SndNxt (must equal SndUna: the host offloads a quiesced connection)
//	0x28 u32 RcvNxt
//	0x2C u16 SndWnd: the peer's last window field, unscaled, as on the wire
//	0x2E u8  SndWndScale: the peer's shift (applied to SndWnd), 0..14
//	0x2F u8  RcvWndScale: our shift (applied to the windows we send), 0..14
//	0x30 u16 MSS: send MSS (the peer's MSS option, clipped to the path MTU)
//	0x32 u16 MaxTxBuffers: transmit buffers that may be queued (0: device default)
//	0x34 u32 TSRecent: the peer's last TSval (valid with ConnTimestamps)
//	0x38 u32 TSVal: the TSval to continue from; the device never sends less
//	0x3C u32 RcvBufSize: receive buffer bytes; drives the advertised window
//	0x40 u32 RcvAdvertised: bytes beyond RcvNxt the host already advertised
//	         (the device never advertises a right edge below RcvNxt+RcvAdvertised)
//	0x44 u32 AckThreshold: bytes acknowledged between NtfAckThreshold (0: per buffer)
//	0x48 u32 SeqThreshold: sequence number for NtfSeqThreshold (armed by ConnSeqThreshold)
//	0x4C u32 KeepaliveIdleMs (0: keepalive off)
//	0x50 u32 KeepaliveIntervalMs
//	0x54 u32 KeepaliveCount: unanswered probes before NtfTimeout
//	0x58 u32 SRTTus: smoothed RTT in microseconds (0: no sample yet)
//	0x5C u32 RTTVarUs: RTT variance in microseconds
//	0x60 u32 Cwnd: congestion window in bytes (0: initial window, RFC 6928)
//	0x64 u32 Ssthresh: slow-start threshold in bytes (0: unlimited)
//	0x68 u8  Congestion: congestion control (CongestionControl; 0: CUBIC)
//	0x69..0x7F reserved, zero
//
// Version 2 (ConnStateVersion2) has room for addresses of either family:
// the same 128 bytes with Family set and LocalIP/RemoteIP zero, followed
// directly (at 0x80) by a ConnAddrExt with the two 16-byte addresses, 160
// bytes in all (ConnStateSizeV2). The host sends version 1 for IPv4
// connections (so their OFFLOADs are unchanged) and version 2 when an
// address needs it.
const (
	ConnStateSize    = 128
	ConnStateVersion = 1
	// ConnStateVersion2: Family and a ConnAddrExt behind the block.
	ConnStateVersion2 = 2
	// ConnStateSizeV2 is a version-2 block with its address extension:
	// OFFLOAD's Len must be at least this when Version is 2.
	ConnStateSizeV2 = ConnStateSize + ConnAddrExtSize

	CsOffVersion         = 0x00
	CsOffFlags           = 0x02
	CsOffState           = 0x04
	CsOffTTL             = 0x05
	CsOffTOS             = 0x06
	CsOffFamily          = 0x07
	CsOffLocalIP         = 0x08
	CsOffRemoteIP        = 0x0C
	CsOffLocalPort       = 0x10
	CsOffRemotePort      = 0x12
	CsOffLocalMAC        = 0x14
	CsOffNextHopMAC      = 0x1A
	CsOffSndUna          = 0x20
	CsOffSndNxt          = 0x24
	CsOffRcvNxt          = 0x28
	CsOffSndWnd          = 0x2C
	CsOffSndWndScale     = 0x2E
	CsOffRcvWndScale     = 0x2F
	CsOffMSS             = 0x30
	CsOffMaxTxBuffers    = 0x32
	CsOffTSRecent        = 0x34
	CsOffTSVal           = 0x38
	CsOffRcvBufSize      = 0x3C
	CsOffRcvAdvertised   = 0x40
	CsOffAckThreshold    = 0x44
	CsOffSeqThreshold    = 0x48
	CsOffKeepaliveIdle   = 0x4C
	CsOffKeepaliveIntvl  = 0x50
	CsOffKeepaliveCount  = 0x54
	CsOffSRTT            = 0x58
	CsOffRTTVar          = 0x5C
	CsOffCwnd            = 0x60
	CsOffSsthresh        = 0x64
	CsOffCongestion      = 0x68
	CsOffReserved        = 0x69
	connStateReservedEnd = ConnStateSize
)

// AddrFamily is the network family of a version-2 state block's addresses.
type AddrFamily uint8

// Address families (the IP version numbers, so that a hex dump reads).
const (
	FamilyIPv4 AddrFamily = 4
	FamilyIPv6 AddrFamily = 6
)

// Known reports whether f is a family a version-2 block may name.
func (f AddrFamily) Known() bool { return f == FamilyIPv4 || f == FamilyIPv6 }

// ConnStateFlags are the negotiated options and switches of a connection.
type ConnStateFlags uint16

// Connection state flags.
const (
	ConnSACKPermitted ConnStateFlags = 1 << 0 // both sides sent SACK-permitted
	ConnTimestamps    ConnStateFlags = 1 << 1 // both sides sent the timestamps option
	ConnSeqThreshold  ConnStateFlags = 1 << 2 // SeqThreshold is armed
	ConnNagle         ConnStateFlags = 1 << 3 // Nagle's algorithm on (RFC 9293 §3.7.4)
	connStateFlagsAll                = ConnSACKPermitted | ConnTimestamps | ConnSeqThreshold | ConnNagle
)

// CongestionControl is a connection's congestion control algorithm, chosen
// per connection by the host (state block and UPDATE).
type CongestionControl uint8

// Congestion control algorithms.
const (
	CCCubic   CongestionControl = 0 // CUBIC (RFC 9438), the default, as in Linux
	CCNewReno CongestionControl = 1 // NewReno (RFC 5681, RFC 6582)
	ccCount                     = 2
)

// Known reports whether c names an algorithm the device has.
func (c CongestionControl) Known() bool { return c < ccCount }

var ccNames = [ccCount]string{"cubic", "newreno"}

func (c CongestionControl) String() string {
	if c.Known() {
		return ccNames[c]
	}
	return "CC_" + hex16(uint16(c))
}

// ParseCongestionControl returns the algorithm String names.
func ParseCongestionControl(name string) (CongestionControl, bool) {
	for i, n := range ccNames {
		if n == name {
			return CongestionControl(i), true
		}
	}
	return 0, false
}

// TCPState is a connection's state as the state block names it. Only
// Established and CloseWait (the peer's FIN already received and counted in
// RcvNxt) can be offloaded; the others appear in snapshots of a running
// connection.
type TCPState uint8

// TCP states (RFC 9293 names).
const (
	StateClosed      TCPState = 0
	StateEstablished TCPState = 1
	StateCloseWait   TCPState = 2
	StateFinWait1    TCPState = 3
	StateFinWait2    TCPState = 4
	StateClosing     TCPState = 5
	StateLastAck     TCPState = 6
	StateTimeWait    TCPState = 7
)

var tcpStateNames = []string{"CLOSED", "ESTABLISHED", "CLOSE_WAIT", "FIN_WAIT_1", "FIN_WAIT_2",
	"CLOSING", "LAST_ACK", "TIME_WAIT"}

func (s TCPState) String() string {
	if int(s) < len(tcpStateNames) {
		return tcpStateNames[s]
	}
	return "STATE_" + hex16(uint16(s))
}

// ConnStateBlock is an accessor over an offload state block.
type ConnStateBlock []byte

func (b ConnStateBlock) Version() uint16       { return le.Uint16(b[CsOffVersion:]) }
func (b ConnStateBlock) Flags() ConnStateFlags { return ConnStateFlags(le.Uint16(b[CsOffFlags:])) }
func (b ConnStateBlock) State() TCPState       { return TCPState(b[CsOffState]) }
func (b ConnStateBlock) TTL() uint8            { return b[CsOffTTL] }
func (b ConnStateBlock) TOS() uint8            { return b[CsOffTOS] }
func (b ConnStateBlock) Family() AddrFamily    { return AddrFamily(b[CsOffFamily]) }
func (b ConnStateBlock) LocalIP() [4]byte      { return [4]byte(b[CsOffLocalIP : CsOffLocalIP+4]) }
func (b ConnStateBlock) RemoteIP() [4]byte     { return [4]byte(b[CsOffRemoteIP : CsOffRemoteIP+4]) }
func (b ConnStateBlock) LocalPort() uint16     { return le.Uint16(b[CsOffLocalPort:]) }
func (b ConnStateBlock) RemotePort() uint16    { return le.Uint16(b[CsOffRemotePort:]) }
func (b ConnStateBlock) LocalMAC() [6]byte     { return [6]byte(b[CsOffLocalMAC : CsOffLocalMAC+6]) }
func (b ConnStateBlock) NextHopMAC() [6]byte   { return [6]byte(b[CsOffNextHopMAC : CsOffNextHopMAC+6]) }
func (b ConnStateBlock) SndUna() uint32        { return le.Uint32(b[CsOffSndUna:]) }
func (b ConnStateBlock) SndNxt() uint32        { return le.Uint32(b[CsOffSndNxt:]) }
func (b ConnStateBlock) RcvNxt() uint32        { return le.Uint32(b[CsOffRcvNxt:]) }
func (b ConnStateBlock) SndWnd() uint16        { return le.Uint16(b[CsOffSndWnd:]) }
func (b ConnStateBlock) SndWndScale() uint8    { return b[CsOffSndWndScale] }
func (b ConnStateBlock) RcvWndScale() uint8    { return b[CsOffRcvWndScale] }
func (b ConnStateBlock) MSS() uint16           { return le.Uint16(b[CsOffMSS:]) }
func (b ConnStateBlock) MaxTxBuffers() uint16  { return le.Uint16(b[CsOffMaxTxBuffers:]) }
func (b ConnStateBlock) TSRecent() uint32      { return le.Uint32(b[CsOffTSRecent:]) }
func (b ConnStateBlock) TSVal() uint32         { return le.Uint32(b[CsOffTSVal:]) }
func (b ConnStateBlock) RcvBufSize() uint32    { return le.Uint32(b[CsOffRcvBufSize:]) }
func (b ConnStateBlock) RcvAdvertised() uint32 { return le.Uint32(b[CsOffRcvAdvertised:]) }
func (b ConnStateBlock) AckThreshold() uint32  { return le.Uint32(b[CsOffAckThreshold:]) }
func (b ConnStateBlock) SeqThreshold() uint32  { return le.Uint32(b[CsOffSeqThreshold:]) }
func (b ConnStateBlock) KeepaliveIdleMs() uint32 {
	return le.Uint32(b[CsOffKeepaliveIdle:])
}
func (b ConnStateBlock) KeepaliveIntervalMs() uint32 {
	return le.Uint32(b[CsOffKeepaliveIntvl:])
}
func (b ConnStateBlock) KeepaliveCount() uint32 { return le.Uint32(b[CsOffKeepaliveCount:]) }
func (b ConnStateBlock) SRTTus() uint32         { return le.Uint32(b[CsOffSRTT:]) }
func (b ConnStateBlock) RTTVarUs() uint32       { return le.Uint32(b[CsOffRTTVar:]) }
func (b ConnStateBlock) Cwnd() uint32           { return le.Uint32(b[CsOffCwnd:]) }
func (b ConnStateBlock) Ssthresh() uint32       { return le.Uint32(b[CsOffSsthresh:]) }
func (b ConnStateBlock) Congestion() CongestionControl {
	return CongestionControl(b[CsOffCongestion])
}

// ConnState is the fields of an offload state block.
type ConnState struct {
	Version     uint16
	Flags       ConnStateFlags
	State       TCPState
	TTL         uint8
	TOS         uint8
	Family      AddrFamily // version 2; zero in version 1
	LocalIP     [4]byte
	RemoteIP    [4]byte
	LocalPort   uint16
	RemotePort  uint16
	LocalMAC    [6]byte
	NextHopMAC  [6]byte
	SndUna      uint32
	SndNxt      uint32
	RcvNxt      uint32
	SndWnd      uint16
	SndWndScale uint8
	RcvWndScale uint8
	MSS         uint16
	// MaxTxBuffers bounds the transmit buffers queued on the connection.
	MaxTxBuffers        uint16
	TSRecent            uint32
	TSVal               uint32
	RcvBufSize          uint32
	RcvAdvertised       uint32
	AckThreshold        uint32
	SeqThreshold        uint32
	KeepaliveIdleMs     uint32
	KeepaliveIntervalMs uint32
	KeepaliveCount      uint32
	SRTTus              uint32
	RTTVarUs            uint32
	Cwnd                uint32
	Ssthresh            uint32
	Congestion          CongestionControl
}

// Encode writes the fields into b, which must hold ConnStateSize bytes. The
// reserved bytes are zeroed.
func (s *ConnState) Encode(b ConnStateBlock) {
	_ = b[ConnStateSize-1]
	le.PutUint16(b[CsOffVersion:], s.Version)
	le.PutUint16(b[CsOffFlags:], uint16(s.Flags))
	b[CsOffState] = byte(s.State)
	b[CsOffTTL] = s.TTL
	b[CsOffTOS] = s.TOS
	b[CsOffFamily] = byte(s.Family)
	copy(b[CsOffLocalIP:], s.LocalIP[:])
	copy(b[CsOffRemoteIP:], s.RemoteIP[:])
	le.PutUint16(b[CsOffLocalPort:], s.LocalPort)
	le.PutUint16(b[CsOffRemotePort:], s.RemotePort)
	copy(b[CsOffLocalMAC:], s.LocalMAC[:])
	copy(b[CsOffNextHopMAC:], s.NextHopMAC[:])
	le.PutUint32(b[CsOffSndUna:], s.SndUna)
	le.PutUint32(b[CsOffSndNxt:], s.SndNxt)
	le.PutUint32(b[CsOffRcvNxt:], s.RcvNxt)
	le.PutUint16(b[CsOffSndWnd:], s.SndWnd)
	b[CsOffSndWndScale] = s.SndWndScale
	b[CsOffRcvWndScale] = s.RcvWndScale
	le.PutUint16(b[CsOffMSS:], s.MSS)
	le.PutUint16(b[CsOffMaxTxBuffers:], s.MaxTxBuffers)
	le.PutUint32(b[CsOffTSRecent:], s.TSRecent)
	le.PutUint32(b[CsOffTSVal:], s.TSVal)
	le.PutUint32(b[CsOffRcvBufSize:], s.RcvBufSize)
	le.PutUint32(b[CsOffRcvAdvertised:], s.RcvAdvertised)
	le.PutUint32(b[CsOffAckThreshold:], s.AckThreshold)
	le.PutUint32(b[CsOffSeqThreshold:], s.SeqThreshold)
	le.PutUint32(b[CsOffKeepaliveIdle:], s.KeepaliveIdleMs)
	le.PutUint32(b[CsOffKeepaliveIntvl:], s.KeepaliveIntervalMs)
	le.PutUint32(b[CsOffKeepaliveCount:], s.KeepaliveCount)
	le.PutUint32(b[CsOffSRTT:], s.SRTTus)
	le.PutUint32(b[CsOffRTTVar:], s.RTTVarUs)
	le.PutUint32(b[CsOffCwnd:], s.Cwnd)
	le.PutUint32(b[CsOffSsthresh:], s.Ssthresh)
	b[CsOffCongestion] = byte(s.Congestion)
	clear(b[CsOffReserved:connStateReservedEnd])
}

// Decode reads the fields from b. It fails if b is shorter than a state
// block; it does not judge the values (the device does, on OFFLOAD).
func (s *ConnState) Decode(b ConnStateBlock) error {
	if len(b) < ConnStateSize {
		return errShort("connection state", len(b), ConnStateSize)
	}
	*s = ConnState{
		Version: b.Version(), Flags: b.Flags(), State: b.State(), TTL: b.TTL(), TOS: b.TOS(), Family: b.Family(),
		LocalIP: b.LocalIP(), RemoteIP: b.RemoteIP(),
		LocalPort: b.LocalPort(), RemotePort: b.RemotePort(),
		LocalMAC: b.LocalMAC(), NextHopMAC: b.NextHopMAC(),
		SndUna: b.SndUna(), SndNxt: b.SndNxt(), RcvNxt: b.RcvNxt(),
		SndWnd: b.SndWnd(), SndWndScale: b.SndWndScale(), RcvWndScale: b.RcvWndScale(),
		MSS: b.MSS(), MaxTxBuffers: b.MaxTxBuffers(),
		TSRecent: b.TSRecent(), TSVal: b.TSVal(),
		RcvBufSize: b.RcvBufSize(), RcvAdvertised: b.RcvAdvertised(),
		AckThreshold: b.AckThreshold(), SeqThreshold: b.SeqThreshold(),
		KeepaliveIdleMs: b.KeepaliveIdleMs(), KeepaliveIntervalMs: b.KeepaliveIntervalMs(),
		KeepaliveCount: b.KeepaliveCount(),
		SRTTus:         b.SRTTus(), RTTVarUs: b.RTTVarUs(), Cwnd: b.Cwnd(), Ssthresh: b.Ssthresh(),
		Congestion: b.Congestion(),
	}
	return nil
}

// ReservedZero reports whether the reserved bytes and the unknown flag bits
// of b are zero, as a state block's must be. In version 1 (and any version
// but 2, which OFFLOAD refuses anyway) Family is reserved too; in version 2
// it must be a known family and LocalIP and RemoteIP are reserved.
func (b ConnStateBlock) ReservedZero() bool {
	if len(b) < ConnStateSize || b.Flags()&^connStateFlagsAll != 0 {
		return false
	}
	if b.Version() == ConnStateVersion2 {
		if !b.Family().Known() || b.LocalIP() != [4]byte{} || b.RemoteIP() != [4]byte{} {
			return false
		}
	} else if b.Family() != 0 {
		return false
	}
	for _, v := range b[CsOffReserved:connStateReservedEnd] {
		if v != 0 {
			return false
		}
	}
	return true
}

// KnownFlags reports whether f has only defined bits.
func (f ConnStateFlags) KnownFlags() bool { return f&^connStateFlagsAll == 0 }

// The address extension of a version-2 state block: the 32 bytes that
// follow the 128 at 0x80, with addresses of either family in network byte
// order. An IPv4 address takes the first 4 bytes of its field; the other
// 12 are zero.
//
//	0x00 [16] LocalAddr
//	0x10 [16] RemoteAddr
const (
	ConnAddrExtSize = 32

	CaOffLocalAddr  = 0x00
	CaOffRemoteAddr = 0x10
)

// ConnAddrExtBlock is an accessor over a state block's address extension.
type ConnAddrExtBlock []byte

func (b ConnAddrExtBlock) LocalAddr() [16]byte {
	return [16]byte(b[CaOffLocalAddr : CaOffLocalAddr+16])
}
func (b ConnAddrExtBlock) RemoteAddr() [16]byte {
	return [16]byte(b[CaOffRemoteAddr : CaOffRemoteAddr+16])
}

// ConnAddrExt is the fields of a version-2 state block's address extension.
type ConnAddrExt struct {
	LocalAddr, RemoteAddr [16]byte
}

// Encode writes the fields into b, which must hold ConnAddrExtSize bytes.
func (x *ConnAddrExt) Encode(b ConnAddrExtBlock) {
	_ = b[ConnAddrExtSize-1]
	copy(b[CaOffLocalAddr:], x.LocalAddr[:])
	copy(b[CaOffRemoteAddr:], x.RemoteAddr[:])
}

// Decode reads the fields from b.
func (x *ConnAddrExt) Decode(b ConnAddrExtBlock) error {
	if len(b) < ConnAddrExtSize {
		return errShort("connection address extension", len(b), ConnAddrExtSize)
	}
	*x = ConnAddrExt{LocalAddr: b.LocalAddr(), RemoteAddr: b.RemoteAddr()}
	return nil
}

// SetAddrs sets the connection's addresses, and the version that carries
// them: version 1 for two IPv4 addresses (x is then unused), version 2 with
// x for anything else.
func (s *ConnState) SetAddrs(x *ConnAddrExt, local, remote netip.Addr) {
	*x = ConnAddrExt{}
	if local.Is4() && remote.Is4() {
		s.Version, s.Family = ConnStateVersion, 0
		s.LocalIP, s.RemoteIP = local.As4(), remote.As4()
		return
	}
	s.Version, s.Family = ConnStateVersion2, FamilyIPv6
	s.LocalIP, s.RemoteIP = [4]byte{}, [4]byte{}
	x.LocalAddr, x.RemoteAddr = local.As16(), remote.As16()
}

// Addrs returns the connection's addresses where its version carries them:
// LocalIP and RemoteIP in version 1, x in version 2 (x may be nil for
// version 1). ok is false for another version, an unknown family, an IPv4
// address whose last 12 bytes are not zero, or an unspecified address.
func (s *ConnState) Addrs(x *ConnAddrExt) (local, remote netip.Addr, ok bool) {
	switch {
	case s.Version == ConnStateVersion:
		local, remote = netip.AddrFrom4(s.LocalIP), netip.AddrFrom4(s.RemoteIP)
	case s.Version != ConnStateVersion2 || x == nil:
		return netip.Addr{}, netip.Addr{}, false
	case s.Family == FamilyIPv4:
		if [12]byte(x.LocalAddr[4:]) != [12]byte{} || [12]byte(x.RemoteAddr[4:]) != [12]byte{} {
			return netip.Addr{}, netip.Addr{}, false
		}
		local, remote = netip.AddrFrom4([4]byte(x.LocalAddr[:4])), netip.AddrFrom4([4]byte(x.RemoteAddr[:4]))
	case s.Family == FamilyIPv6:
		local, remote = netip.AddrFrom16(x.LocalAddr), netip.AddrFrom16(x.RemoteAddr)
	default:
		return netip.Addr{}, netip.Addr{}, false
	}
	return local, remote, !local.IsUnspecified() && !remote.IsUnspecified()
}

// User buffer descriptors: the array the POST_BUFFERS command's Addr points
// at (Arg0 entries; Len = Arg0 × UserBufDescSize). Each names a receive
// buffer in host memory that the device fills in stream order and returns with
// NtfUserBufDone (Aux = ID, Len = bytes, Seq = sequence number of its first
// byte).
//
//	0x00 u64 Addr
//	0x08 u32 Len
//	0x0C u32 ID (host's, echoed in the notification)
const (
	UserBufDescSize = 16

	UbOffAddr = 0x00
	UbOffLen  = 0x08
	UbOffID   = 0x0C
)

// UserBufDesc is an accessor over one user buffer descriptor.
type UserBufDesc []byte

func (d UserBufDesc) Addr() Addr  { return Addr(le.Uint64(d[UbOffAddr:])) }
func (d UserBufDesc) Len() uint32 { return le.Uint32(d[UbOffLen:]) }
func (d UserBufDesc) ID() uint32  { return le.Uint32(d[UbOffID:]) }

// UserBuf is the fields of a user buffer descriptor.
type UserBuf struct {
	Addr Addr
	Len  uint32
	ID   uint32
}

// Encode writes the fields into d, which must hold UserBufDescSize bytes.
func (u *UserBuf) Encode(d UserBufDesc) {
	_ = d[UserBufDescSize-1]
	le.PutUint64(d[UbOffAddr:], uint64(u.Addr))
	le.PutUint32(d[UbOffLen:], u.Len)
	le.PutUint32(d[UbOffID:], u.ID)
}

// Decode reads the fields from d.
func (u *UserBuf) Decode(d UserBufDesc) error {
	if len(d) < UserBufDescSize {
		return errShort("user buffer descriptor", len(d), UserBufDescSize)
	}
	*u = UserBuf{Addr: d.Addr(), Len: d.Len(), ID: d.ID()}
	return nil
}

// Command argument conventions of the delegation commands (the generic
// command entry is in command.go):
//
//	OFFLOAD         Addr/Len: state block (Len >= ConnStateSize)
//	POST_BUFFERS    Addr: UserBufDesc array, Arg0: count; Result = buffers accepted
//	SET_THRESHOLDS  Arg0: ACK threshold (bytes), Arg1: sequence threshold;
//	                Flags&CmdFlagArmSeqThreshold arms the sequence threshold
//	UPDATE          ConnUpdate, see below
//	CLOSE, ABORT, RELEASE: no arguments
const CmdFlagArmSeqThreshold = 1 << 0

// UpdateFlags say which optional fields of an UPDATE command are present.
type UpdateFlags uint16

// Update flags (the command entry's Flags field).
const (
	UpdRcvBufSize UpdateFlags = 1 << 0 // Arg1: new receive buffer size
	UpdKeepalive  UpdateFlags = 1 << 1 // Arg2: idle ms; Arg3: interval ms | count << 32
	UpdTTLTOS     UpdateFlags = 1 << 2 // Len: TTL | TOS << 8
	UpdNextHopMAC UpdateFlags = 1 << 3 // Addr: next-hop MAC in the low 48 bits (byte 0 first on the wire)
	UpdAckNow     UpdateFlags = 1 << 4 // send a window update now
	UpdCongestion UpdateFlags = 1 << 5 // Len bits 16-23: congestion control
	UpdNagle      UpdateFlags = 1 << 6 // Len bit 24: Nagle's algorithm on (1) or off (0)
	updFlagsAll               = UpdRcvBufSize | UpdKeepalive | UpdTTLTOS | UpdNextHopMAC | UpdAckNow | UpdCongestion | UpdNagle
)

// ConnUpdate is the UPDATE command's parameters: the window credit the host
// returns for bytes the application consumed from legacy buffers (as
// Chelsio's RX_DATA_ACK does) and the cached-state changes flagged in Flags.
//
//	Arg0  Credit: bytes consumed from legacy uploads
//	Flags UpdateFlags
//	Arg1  RcvBufSize           (UpdRcvBufSize)
//	Arg2  KeepaliveIdleMs      (UpdKeepalive)
//	Arg3  KeepaliveIntervalMs | KeepaliveCount << 32 (UpdKeepalive)
//	Len   TTL | TOS << 8       (UpdTTLTOS)
//	      | Congestion << 16   (UpdCongestion)
//	      | Nagle << 24        (UpdNagle)
//	Addr  next-hop MAC         (UpdNextHopMAC)
type ConnUpdate struct {
	Flags               UpdateFlags
	Credit              uint32
	RcvBufSize          uint32
	KeepaliveIdleMs     uint32
	KeepaliveIntervalMs uint32
	KeepaliveCount      uint32
	TTL, TOS            uint8
	NextHopMAC          [6]byte
	Congestion          CongestionControl
	Nagle               bool
}

// KnownFlags reports whether f has only defined bits.
func (f UpdateFlags) KnownFlags() bool { return f&^updFlagsAll == 0 }

// ToCommand fills the UPDATE command c (opcode, flags and arguments; the
// caller sets Conn and Tag).
func (u *ConnUpdate) ToCommand(c *Command) {
	c.Opcode = OpUpdate
	c.Flags = uint16(u.Flags)
	c.Arg0 = u.Credit
	c.Arg1 = u.RcvBufSize
	c.Arg2 = u.KeepaliveIdleMs
	c.Arg3 = uint64(u.KeepaliveIntervalMs) | uint64(u.KeepaliveCount)<<32
	c.Len = uint32(u.TTL) | uint32(u.TOS)<<8 | uint32(u.Congestion)<<16
	if u.Nagle {
		c.Len |= 1 << 24
	}
	var mac uint64
	for i, v := range u.NextHopMAC {
		mac |= uint64(v) << (8 * i)
	}
	c.Addr = Addr(mac)
}

// FromCommand reads an UPDATE command's parameters.
func (u *ConnUpdate) FromCommand(c *Command) {
	*u = ConnUpdate{
		Flags:               UpdateFlags(c.Flags),
		Credit:              c.Arg0,
		RcvBufSize:          c.Arg1,
		KeepaliveIdleMs:     c.Arg2,
		KeepaliveIntervalMs: uint32(c.Arg3),
		KeepaliveCount:      uint32(c.Arg3 >> 32),
		TTL:                 uint8(c.Len),
		TOS:                 uint8(c.Len >> 8),
		Congestion:          CongestionControl(c.Len >> 16),
		Nagle:               c.Len>>24&1 != 0,
	}
	for i := range u.NextHopMAC {
		u.NextHopMAC[i] = byte(uint64(c.Addr) >> (8 * i))
	}
}
