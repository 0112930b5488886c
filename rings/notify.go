package rings

// Notification ring entries (device → host). Each names a delegated
// connection (or NoConn for legacy traffic) and carries flags, the
// connection's sequence and acknowledgement numbers and the count of ACKs
// received, so the host learns connection state without asking.
const (
	NotificationEntrySize = 32

	NtfOffFlags    = 0x04 // u16 NotifyFlags
	NtfOffVLAN     = 0x06 // u16 802.1Q TCI stripped from a legacy frame (VLAN offload); 0: none
	NtfOffConn     = 0x08 // u32 connection index or NoConn
	NtfOffSeq      = 0x0C // u32 sequence number: first byte of the data for uploads and user buffers, RCV.NXT for FIN and thresholds, SND.NXT for ACK events
	NtfOffAck      = 0x10 // u32 acknowledgement number (SND.UNA)
	NtfOffAckCount = 0x14 // u32 ACKs received on the connection (free-running)
	NtfOffLen      = 0x18 // u32 bytes concerned (uploaded frame or data length)
	NtfOffAux      = 0x1C // u32 buffer id for uploads, USER_BUF_DONE and FRAME_TOO_LARGE, error code for errors
)

// NotifyFlags says what happened. Several may be set in one notification.
// They are 16 bits wide: the entry's other half-word is the VLAN tag.
type NotifyFlags uint16

// Notification flags.
const (
	NtfAckThreshold  NotifyFlags = 1 << 0  // bytes acknowledged crossed the ACK threshold
	NtfDupAck        NotifyFlags = 1 << 1  // fast recovery entered (three duplicate ACKs, or RACK found a loss): once per recovery
	NtfSeqThreshold  NotifyFlags = 1 << 2  // received sequence crossed the sequence threshold
	NtfLegacyUpload  NotifyFlags = 1 << 3  // data (or a whole legacy frame) written to a legacy buffer
	NtfUserBufReq    NotifyFlags = 1 << 4  // the unit wants a user buffer for pending payload
	NtfFin           NotifyFlags = 1 << 5  // peer sent FIN
	NtfRst           NotifyFlags = 1 << 6  // peer sent an acceptable RST
	NtfTimeout       NotifyFlags = 1 << 7  // retransmission or keepalive gave up
	NtfError         NotifyFlags = 1 << 8  // Aux carries an error code
	NtfUserBufDone   NotifyFlags = 1 << 9  // a posted user buffer was filled (Aux = buffer id)
	NtfClosed        NotifyFlags = 1 << 10 // connection fully closed; index may be released
	NtfFrameTooLarge NotifyFlags = 1 << 11 // a legacy frame did not fit the posted buffer and was dropped; Aux = the buffer (returned unwritten), Len = the frame's length
)

var notifyFlagNames = []string{"ACK_THRESHOLD", "DUP_ACK", "SEQ_THRESHOLD", "LEGACY_UPLOAD",
	"USER_BUF_REQ", "FIN", "RST", "TIMEOUT", "ERROR", "USER_BUF_DONE", "CLOSED", "FRAME_TOO_LARGE"}

func (f NotifyFlags) String() string {
	if f == 0 {
		return "0"
	}
	return bitNames(uint32(f), notifyFlagNames, "|")
}

// NotificationEntry is an accessor over one notification ring entry.
type NotificationEntry []byte

func (e NotificationEntry) Flags() NotifyFlags { return NotifyFlags(le.Uint16(e[NtfOffFlags:])) }
func (e NotificationEntry) VLAN() uint16       { return le.Uint16(e[NtfOffVLAN:]) }
func (e NotificationEntry) Conn() uint32       { return le.Uint32(e[NtfOffConn:]) }
func (e NotificationEntry) Seq() uint32        { return le.Uint32(e[NtfOffSeq:]) }
func (e NotificationEntry) Ack() uint32        { return le.Uint32(e[NtfOffAck:]) }
func (e NotificationEntry) AckCount() uint32   { return le.Uint32(e[NtfOffAckCount:]) }
func (e NotificationEntry) Len() uint32        { return le.Uint32(e[NtfOffLen:]) }
func (e NotificationEntry) Aux() uint32        { return le.Uint32(e[NtfOffAux:]) }

// Notification is the fields of a notification entry.
type Notification struct {
	Flags NotifyFlags
	// VLAN is the tag control information of the 802.1Q tag the device
	// stripped from the legacy frame this LEGACY_UPLOAD delivers; 0 for
	// an untagged frame and for every other notification.
	VLAN     uint16
	Conn     uint32
	Seq      uint32
	Ack      uint32
	AckCount uint32
	Len      uint32
	Aux      uint32
}

// Encode writes the fields into e (bytes 4 and up).
func (n *Notification) Encode(e NotificationEntry) {
	_ = e[NotificationEntrySize-1]
	le.PutUint16(e[NtfOffFlags:], uint16(n.Flags))
	le.PutUint16(e[NtfOffVLAN:], n.VLAN)
	le.PutUint32(e[NtfOffConn:], n.Conn)
	le.PutUint32(e[NtfOffSeq:], n.Seq)
	le.PutUint32(e[NtfOffAck:], n.Ack)
	le.PutUint32(e[NtfOffAckCount:], n.AckCount)
	le.PutUint32(e[NtfOffLen:], n.Len)
	le.PutUint32(e[NtfOffAux:], n.Aux)
}

// Decode reads the fields from e, which must be a whole entry.
func (n *Notification) Decode(e NotificationEntry) error {
	if len(e) < NotificationEntrySize {
		return errShort("notification", len(e), NotificationEntrySize)
	}
	*n = Notification{Flags: e.Flags(), VLAN: e.VLAN(), Conn: e.Conn(), Seq: e.Seq(), Ack: e.Ack(),
		AckCount: e.AckCount(), Len: e.Len(), Aux: e.Aux()}
	return nil
}
