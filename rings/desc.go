package rings

// Transmit descriptor ring entries (host → device): a buffer in host memory
// and the delegated connection it belongs to, or NoConn for a raw legacy
// frame the device puts on the wire as is.
const (
	TxDescSize = 32

	TxOffConn  = 0x04 // u32 connection index or NoConn (legacy frame)
	TxOffAddr  = 0x08 // u64 buffer address
	TxOffLen   = 0x10 // u32 buffer length
	TxOffFlags = 0x14 // u16 TxFlags
	TxOffVLAN  = 0x16 // u16 802.1Q TCI the device inserts (VLAN offload); 0: none
	TxOffTag   = 0x18 // u64 host cookie
)

// TxFlags qualify a transmit descriptor. They are 16 bits wide: the
// descriptor's other half-word is the VLAN tag.
type TxFlags uint16

// Transmit flags.
const (
	TxPush TxFlags = 1 << 0 // delegated: push (PSH) at the end of this buffer
	TxFin  TxFlags = 1 << 1 // delegated: FIN after this buffer
	TxCsum TxFlags = 1 << 2 // legacy: the device fills in the IPv4 header checksum and the TCP or UDP checksum (FeatTxCsum)

	TxLegacyFlags = TxCsum // the flags a legacy descriptor (NoConn) may carry; any other is refused (tx_drop_bad_desc), never ignored
)

// TxDesc is an accessor over one transmit descriptor.
type TxDesc []byte

func (e TxDesc) Conn() uint32     { return le.Uint32(e[TxOffConn:]) }
func (e TxDesc) Addr() Addr       { return Addr(le.Uint64(e[TxOffAddr:])) }
func (e TxDesc) Len() uint32      { return le.Uint32(e[TxOffLen:]) }
func (e TxDesc) Flags() TxFlags   { return TxFlags(le.Uint16(e[TxOffFlags:])) }
func (e TxDesc) VLAN() uint16     { return le.Uint16(e[TxOffVLAN:]) }
func (e TxDesc) Tag() uint64      { return le.Uint64(e[TxOffTag:]) }
func (e TxDesc) SetConn(v uint32) { le.PutUint32(e[TxOffConn:], v) }
func (e TxDesc) SetAddr(v Addr)   { le.PutUint64(e[TxOffAddr:], uint64(v)) }
func (e TxDesc) SetLen(v uint32)  { le.PutUint32(e[TxOffLen:], v) }
func (e TxDesc) SetVLAN(v uint16) { le.PutUint16(e[TxOffVLAN:], v) }

// Tx is the fields of a transmit descriptor.
type Tx struct {
	Conn  uint32
	Addr  Addr
	Len   uint32
	Flags TxFlags
	// VLAN is the 802.1Q tag control information (PCP, DEI, VID) the
	// device inserts after the source MAC of a legacy frame, as a NIC
	// with VLAN offload does; 0 sends the frame as the host wrote it (a
	// device on a VLAN then inserts its own tag). Delegated buffers carry
	// 0: the device tags a delegated connection's frames itself.
	VLAN uint16
	Tag  uint64
}

// Encode writes the fields into e (bytes 4 and up).
func (t *Tx) Encode(e TxDesc) {
	_ = e[TxDescSize-1]
	le.PutUint32(e[TxOffConn:], t.Conn)
	le.PutUint64(e[TxOffAddr:], uint64(t.Addr))
	le.PutUint32(e[TxOffLen:], t.Len)
	le.PutUint16(e[TxOffFlags:], uint16(t.Flags))
	le.PutUint16(e[TxOffVLAN:], t.VLAN)
	le.PutUint64(e[TxOffTag:], t.Tag)
}

// Decode reads the fields from e, which must be a whole descriptor.
func (t *Tx) Decode(e TxDesc) error {
	if len(e) < TxDescSize {
		return errShort("tx descriptor", len(e), TxDescSize)
	}
	*t = Tx{Conn: e.Conn(), Addr: e.Addr(), Len: e.Len(), Flags: e.Flags(), VLAN: e.VLAN(), Tag: e.Tag()}
	return nil
}

// Receive descriptor ring entries (host → device): legacy buffers the host
// posts. The device fills one per received legacy frame (or upload of
// delegated payload) and says so with an NtfLegacyUpload notification whose
// Aux is the buffer's BufID.
const (
	RxDescSize = 32

	RxOffBufID = 0x04 // u32 host's buffer id, echoed in the notification
	RxOffAddr  = 0x08 // u64 buffer address
	RxOffLen   = 0x10 // u32 buffer capacity
	RxOffRsvd  = 0x14 // u32 reserved, zero
	RxOffTag   = 0x18 // u64 host cookie
)

// RxDesc is an accessor over one receive descriptor.
type RxDesc []byte

func (e RxDesc) BufID() uint32 { return le.Uint32(e[RxOffBufID:]) }
func (e RxDesc) Addr() Addr    { return Addr(le.Uint64(e[RxOffAddr:])) }
func (e RxDesc) Len() uint32   { return le.Uint32(e[RxOffLen:]) }
func (e RxDesc) Tag() uint64   { return le.Uint64(e[RxOffTag:]) }

// Rx is the fields of a receive descriptor.
type Rx struct {
	BufID uint32
	Addr  Addr
	Len   uint32
	Tag   uint64
}

// Encode writes the fields into e (bytes 4 and up).
func (r *Rx) Encode(e RxDesc) {
	_ = e[RxDescSize-1]
	le.PutUint32(e[RxOffBufID:], r.BufID)
	le.PutUint64(e[RxOffAddr:], uint64(r.Addr))
	le.PutUint32(e[RxOffLen:], r.Len)
	le.PutUint32(e[RxOffRsvd:], 0)
	le.PutUint64(e[RxOffTag:], r.Tag)
}

// Decode reads the fields from e, which must be a whole descriptor.
func (r *Rx) Decode(e RxDesc) error {
	if len(e) < RxDescSize {
		return errShort("rx descriptor", len(e), RxDescSize)
	}
	*r = Rx{BufID: e.BufID(), Addr: e.Addr(), Len: e.Len(), Tag: e.Tag()}
	return nil
}
