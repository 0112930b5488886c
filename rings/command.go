package rings

// Command ring entries (host → device). The host writes a command naming a
// delegated connection; the offload unit executes it and writes the
// command-specific status back into the same entry, then sets CtlDone.
const (
	CommandEntrySize = 64

	CmdOffOpcode = 0x04 // u16 Opcode
	CmdOffFlags  = 0x06 // u16 command flags (opcode specific)
	CmdOffConn   = 0x08 // u32 delegated connection index
	CmdOffStatus = 0x0C // u32 Status, written by the device
	CmdOffResult = 0x10 // u64 command-specific result, written by the device
	CmdOffTag    = 0x18 // u64 host cookie, never interpreted by the device
	CmdOffAddr   = 0x20 // u64 DMA address parameter
	CmdOffLen    = 0x28 // u32 length parameter
	CmdOffArg0   = 0x2C // u32
	CmdOffArg1   = 0x30 // u32
	CmdOffArg2   = 0x34 // u32
	CmdOffArg3   = 0x38 // u64
)

// Opcode names a command.
type Opcode uint16

// Opcodes. 0 is never valid, so a zeroed entry is rejected.
const (
	OpNop   Opcode = 0x01 // no operation; result = 0
	OpStats Opcode = 0x02 // DMA the stat block to Addr (Len bytes at most); result = bytes written

	// TCP offload (delegation).
	OpOffload       Opcode = 0x10 // Addr/Len: connection state block; Conn: index to install
	OpPostBuffers   Opcode = 0x11 // Addr: array of Arg0 buffer descriptors; result = buffers accepted
	OpSetThresholds Opcode = 0x12 // Arg0: ACK threshold, Arg1: sequence threshold
	OpUpdate        Opcode = 0x13 // window and options update
	OpClose         Opcode = 0x14 // send FIN after queued data
	OpAbort         Opcode = 0x15 // send RST, release the connection
	OpRelease       Opcode = 0x16 // free a closed connection's index
	OpRxInject      Opcode = 0x17 // Addr/Len: a received frame the host gives back for Conn

	// RDMA.
	OpRegMR     Opcode = 0x20
	OpDeregMR   Opcode = 0x21
	OpCreateQP  Opcode = 0x22
	OpModifyQP  Opcode = 0x23
	OpDestroyQP Opcode = 0x24
)

var opcodeNames = map[Opcode]string{
	OpNop: "NOP", OpStats: "STATS",
	OpOffload: "OFFLOAD", OpPostBuffers: "POST_BUFFERS", OpSetThresholds: "SET_THRESHOLDS",
	OpUpdate: "UPDATE", OpClose: "CLOSE", OpAbort: "ABORT", OpRelease: "RELEASE", OpRxInject: "RX_INJECT",
	OpRegMR: "REG_MR", OpDeregMR: "DEREG_MR", OpCreateQP: "CREATE_QP", OpModifyQP: "MODIFY_QP",
	OpDestroyQP: "DESTROY_QP",
}

func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return "OP_" + hex16(uint16(o))
}

// Status is the completion status the device writes into a command entry.
type Status uint32

// Statuses.
const (
	StatusOK            Status = 0
	StatusBadOpcode     Status = 1 // unknown or unsupported opcode
	StatusBadAddress    Status = 2 // a DMA address range outside host memory
	StatusBadConn       Status = 3 // connection index not delegated (or out of range)
	StatusBadParam      Status = 4 // a parameter is out of range
	StatusNoResources   Status = 5 // table or queue full
	StatusBadState      Status = 6 // not valid in the connection's (or QP's) state
	StatusAccessDenied  Status = 7 // protection domain or access rights
	StatusInternalError Status = 8
)

var statusNames = []string{"OK", "BAD_OPCODE", "BAD_ADDRESS", "BAD_CONN", "BAD_PARAM",
	"NO_RESOURCES", "BAD_STATE", "ACCESS_DENIED", "INTERNAL_ERROR"}

func (s Status) String() string {
	if int(s) < len(statusNames) {
		return statusNames[s]
	}
	return "STATUS_" + hex16(uint16(s))
}

// NoConn is the connection index of entries that concern no delegated
// connection (legacy frames, device-wide commands).
const NoConn = 0xFFFF_FFFF

// CommandEntry is an accessor over one command ring entry.
type CommandEntry []byte

func (e CommandEntry) Opcode() Opcode                  { return Opcode(le.Uint16(e[CmdOffOpcode:])) }
func (e CommandEntry) Flags() uint16                   { return le.Uint16(e[CmdOffFlags:]) }
func (e CommandEntry) Conn() uint32                    { return le.Uint32(e[CmdOffConn:]) }
func (e CommandEntry) Status() Status                  { return Status(le.Uint32(e[CmdOffStatus:])) }
func (e CommandEntry) Result() uint64                  { return le.Uint64(e[CmdOffResult:]) }
func (e CommandEntry) Tag() uint64                     { return le.Uint64(e[CmdOffTag:]) }
func (e CommandEntry) Addr() Addr                      { return Addr(le.Uint64(e[CmdOffAddr:])) }
func (e CommandEntry) Len() uint32                     { return le.Uint32(e[CmdOffLen:]) }
func (e CommandEntry) Arg0() uint32                    { return le.Uint32(e[CmdOffArg0:]) }
func (e CommandEntry) Arg1() uint32                    { return le.Uint32(e[CmdOffArg1:]) }
func (e CommandEntry) Arg2() uint32                    { return le.Uint32(e[CmdOffArg2:]) }
func (e CommandEntry) Arg3() uint64                    { return le.Uint64(e[CmdOffArg3:]) }
func (e CommandEntry) SetStatus(s Status)              { le.PutUint32(e[CmdOffStatus:], uint32(s)) }
func (e CommandEntry) SetResult(v uint64)              { le.PutUint64(e[CmdOffResult:], v) }
func (e CommandEntry) SetWriteBack(s Status, v uint64) { e.SetStatus(s); e.SetResult(v) }

// Command is the fields of a command entry.
type Command struct {
	Opcode Opcode
	Flags  uint16
	Conn   uint32
	Status Status // written by the device
	Result uint64 // written by the device
	Tag    uint64
	Addr   Addr
	Len    uint32
	Arg0   uint32
	Arg1   uint32
	Arg2   uint32
	Arg3   uint64
}

// Encode writes the fields into e (bytes 4 and up; the control word belongs
// to the ring mechanics). Neighbouring fields are merged into 8-byte stores:
// a producer writing into a line its consumer still holds is bound by how
// many stores wait for that line, not by how many bytes they carry.
func (c *Command) Encode(e CommandEntry) {
	_ = e[CommandEntrySize-1]
	le.PutUint32(e[CmdOffOpcode:], uint32(c.Opcode)|uint32(c.Flags)<<16)
	le.PutUint64(e[CmdOffConn:], uint64(c.Conn)|uint64(c.Status)<<32)
	le.PutUint64(e[CmdOffResult:], c.Result)
	le.PutUint64(e[CmdOffTag:], c.Tag)
	le.PutUint64(e[CmdOffAddr:], uint64(c.Addr))
	le.PutUint64(e[CmdOffLen:], uint64(c.Len)|uint64(c.Arg0)<<32)
	le.PutUint64(e[CmdOffArg1:], uint64(c.Arg1)|uint64(c.Arg2)<<32)
	le.PutUint64(e[CmdOffArg3:], c.Arg3)
}

// Decode reads the fields from e, which must be a whole entry. Fields are
// stored one by one (a composite literal would be assembled on the stack and
// copied with wide loads that cannot be forwarded from the narrow stores).
func (c *Command) Decode(e CommandEntry) error {
	if len(e) < CommandEntrySize {
		return errShort("command", len(e), CommandEntrySize)
	}
	e = e[:CommandEntrySize]
	c.Opcode = e.Opcode()
	c.Flags = e.Flags()
	c.Conn = e.Conn()
	c.Status = e.Status()
	c.Result = e.Result()
	c.Tag = e.Tag()
	c.Addr = e.Addr()
	c.Len = e.Len()
	c.Arg0 = e.Arg0()
	c.Arg1 = e.Arg1()
	c.Arg2 = e.Arg2()
	c.Arg3 = e.Arg3()
	return nil
}
