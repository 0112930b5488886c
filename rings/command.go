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

// Opcodes, every family's in this one block; Commands below is the table
// that says, for each, its name, family, the resources it names and the
// statuses it may write back. 0 is never valid, so a zeroed entry is
// rejected.
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
	OpPathMTU       Opcode = 0x18 // Arg0: sequence number an ICMP quoted, Arg1: its next-hop MTU; result = the MSS
	OpQueryConn     Opcode = 0x19 // Addr/Len: where to write Conn's connection info block; result = bytes written

	// RDMA (parameters in rdma.go).
	OpRegMR      Opcode = 0x20 // register a memory region; result = its STag
	OpDeregMR    Opcode = 0x21 // Arg0: STag
	OpCreateQP   Opcode = 0x22 // Conn: connection the QP runs on; Addr/Len: QP configuration block
	OpModifyQP   Opcode = 0x23 // Conn; Arg0: QPAction
	OpDestroyQP  Opcode = 0x24 // Conn; outstanding work completes flushed
	OpCreateCQ   Opcode = 0x25 // Conn: CQ number; Addr: CQ ring base; Arg0: entries
	OpDestroyCQ  Opcode = 0x26 // Conn: CQ number
	OpArmCQ      Opcode = 0x27 // Conn: CQ number; Arg0: ArmSolicited, ArmIfPending
	OpQPDoorbell Opcode = 0x28 // Conn: the host posted to the QP's SQ or RQ
)

// ARM_CQ's Arg0 bits.
const (
	// ArmSolicited: only a solicited or unsuccessful completion fires.
	ArmSolicited uint32 = 1
	// ArmIfPending: if the CQ holds entries the host has not consumed
	// (its consumer index is behind), post the CQ event at once instead
	// of arming. A host that posts ARM_CQ without waiting for it sets
	// this: a completion that arrived between its last poll and the
	// device's ARM then still wakes it.
	ArmIfPending uint32 = 2
)

// CmdFamily says which part of the device executes a command: the ring
// and stat-block logic, the TCP offload engine, or the RDMA verbs on top of
// it. A family is what a device without that part would not implement.
type CmdFamily uint8

// Command families.
const (
	CmdFamilyRing    CmdFamily = 1 // device-wide: the rings and the stat block
	CmdFamilyOffload CmdFamily = 2 // TCP offload: delegated connections
	CmdFamilyRDMA    CmdFamily = 3 // RDMA: memory regions, CQs and QPs on delegated connections
)

var cmdFamilyNames = []string{"", "RING", "OFFLOAD", "RDMA"}

func (f CmdFamily) String() string {
	if f != 0 && int(f) < len(cmdFamilyNames) {
		return cmdFamilyNames[f]
	}
	return "FAMILY_" + hex16(uint16(f))
}

// CmdResources is the set of device resources a command names: what a
// device must look up (or create) before it can execute it, and what a
// host must own before it may issue it.
type CmdResources uint16

// Command resources.
const (
	CmdResConn    CmdResources = 1 << 0 // Conn is a delegated connection index
	CmdResQP      CmdResources = 1 << 1 // Conn is a QP number (the index of the connection it runs on)
	CmdResCQ      CmdResources = 1 << 2 // a CQ number: Conn, or the QP configuration block's
	CmdResSTag    CmdResources = 1 << 3 // an STag: DEREG_MR's Arg0, REG_MR's result
	CmdResPD      CmdResources = 1 << 4 // a protection domain: REG_MR's Arg0, the QP configuration block's
	CmdResHostMem CmdResources = 1 << 5 // Addr/Len: host memory the device reads or writes by DMA
)

var cmdResourceNames = []string{"CONN", "QP", "CQ", "STAG", "PD", "HOST_MEM"}

// String lists the resources joined by "+" (a docs/rings.md table cell
// holds it, and a cell cannot hold "|"), "NONE" for none.
func (r CmdResources) String() string {
	if r == 0 {
		return "NONE"
	}
	return bitNames(uint32(r), cmdResourceNames, "+")
}

// bitNames names the set bits of v, lowest first, joined by sep; the bits
// names has no name for follow as one hex number.
func bitNames(v uint32, names []string, sep string) string {
	s := ""
	for i, n := range names {
		if v&(1<<i) != 0 {
			if s != "" {
				s += sep
			}
			s += n
			v &^= 1 << i
		}
	}
	if v != 0 {
		if s != "" {
			s += sep
		}
		s += "0x" + hex16(uint16(v>>16)) + hex16(uint16(v))
	}
	return s
}

// StatusSet is a set of Statuses, bit s for Status s.
type StatusSet uint32

// Statuses returns the set of the statuses given.
func Statuses(s ...Status) StatusSet {
	var m StatusSet
	for _, st := range s {
		m |= 1 << st
	}
	return m
}

// Has reports whether s is in the set.
func (m StatusSet) Has(s Status) bool { return s < 32 && m&(1<<s) != 0 }

// String lists the statuses' names joined by ", ", lowest first.
func (m StatusSet) String() string {
	s := ""
	for st := Status(0); st < 32; st++ {
		if m.Has(st) {
			if s != "" {
				s += ", "
			}
			s += st.String()
		}
	}
	return s
}

// CommandInfo is the ABI half of one ring command: what both sides know of
// it. The device half, the handler, is the unit's own table indexed by the
// same opcode.
type CommandInfo struct {
	Op        Opcode
	Name      string
	Family    CmdFamily
	Resources CmdResources
	// Statuses is every status the device may write back for this
	// command. An opcode the device does not know gets BAD_OPCODE, which
	// is therefore in no command's set.
	Statuses StatusSet
}

// Status sets shared by several commands.
var (
	stConn      = Statuses(StatusOK, StatusBadConn)
	stConnState = Statuses(StatusOK, StatusBadConn, StatusBadState)
)

// Commands is every ring command, in opcode order. docs/rings.md's opcode
// table is checked against it row by row, and the device's handler table
// against it opcode by opcode.
var Commands = []CommandInfo{
	{OpNop, "NOP", CmdFamilyRing, 0, Statuses(StatusOK)},
	{OpStats, "STATS", CmdFamilyRing, CmdResHostMem, Statuses(StatusOK, StatusBadParam, StatusBadAddress)},

	{OpOffload, "OFFLOAD", CmdFamilyOffload, CmdResConn | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam, StatusBadState)},
	{OpPostBuffers, "POST_BUFFERS", CmdFamilyOffload, CmdResConn | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam, StatusNoResources, StatusBadState)},
	{OpSetThresholds, "SET_THRESHOLDS", CmdFamilyOffload, CmdResConn, stConnState},
	{OpUpdate, "UPDATE", CmdFamilyOffload, CmdResConn, Statuses(StatusOK, StatusBadConn, StatusBadParam)},
	{OpClose, "CLOSE", CmdFamilyOffload, CmdResConn, stConnState},
	{OpAbort, "ABORT", CmdFamilyOffload, CmdResConn | CmdResQP, stConn},
	{OpRelease, "RELEASE", CmdFamilyOffload, CmdResConn | CmdResQP, stConnState},
	{OpRxInject, "RX_INJECT", CmdFamilyOffload, CmdResConn | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam)},
	{OpPathMTU, "PATH_MTU", CmdFamilyOffload, CmdResConn, Statuses(StatusOK, StatusBadConn, StatusBadParam, StatusBadState)},
	{OpQueryConn, "QUERY_CONN", CmdFamilyOffload, CmdResConn | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam)},

	{OpRegMR, "REG_MR", CmdFamilyRDMA, CmdResSTag | CmdResPD | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadParam, StatusNoResources)},
	{OpDeregMR, "DEREG_MR", CmdFamilyRDMA, CmdResSTag, Statuses(StatusOK, StatusBadParam)},
	{OpCreateQP, "CREATE_QP", CmdFamilyRDMA, CmdResConn | CmdResQP | CmdResCQ | CmdResPD | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam, StatusBadState)},
	{OpModifyQP, "MODIFY_QP", CmdFamilyRDMA, CmdResQP | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadConn, StatusBadParam, StatusBadState)},
	{OpDestroyQP, "DESTROY_QP", CmdFamilyRDMA, CmdResConn | CmdResQP, stConn},
	{OpCreateCQ, "CREATE_CQ", CmdFamilyRDMA, CmdResCQ | CmdResHostMem,
		Statuses(StatusOK, StatusBadAddress, StatusBadParam, StatusBadState)},
	{OpDestroyCQ, "DESTROY_CQ", CmdFamilyRDMA, CmdResCQ, Statuses(StatusOK, StatusBadParam, StatusBadState)},
	{OpArmCQ, "ARM_CQ", CmdFamilyRDMA, CmdResCQ, Statuses(StatusOK, StatusBadParam)},
	{OpQPDoorbell, "QP_DOORBELL", CmdFamilyRDMA, CmdResQP, stConn},
}

// commandIndex maps an opcode to its row of Commands, +1 (0: no such
// command), so looking a command up costs no map access.
var commandIndex = func() (ix [0x100]uint8) {
	for i, c := range Commands {
		if int(c.Op) >= len(ix) || ix[c.Op] != 0 {
			panic("rings: Commands: opcode " + hex16(uint16(c.Op)) + " out of range or listed twice")
		}
		ix[c.Op] = uint8(i + 1)
	}
	return ix
}()

// LookupCommand returns the table row of op; false for an opcode no
// command has.
func LookupCommand(op Opcode) (*CommandInfo, bool) {
	if int(op) >= len(commandIndex) || commandIndex[op] == 0 {
		return nil, false
	}
	return &Commands[commandIndex[op]-1], true
}

func (o Opcode) String() string {
	if c, ok := LookupCommand(o); ok {
		return c.Name
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
