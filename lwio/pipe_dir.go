package lwio

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Directory operations on the pipe. The source leaves namespace work
// (listing, creating, removing and renaming) to SMB; this project has no
// SMB server, so the pipe carries it, as it carries OPEN: each is a request
// and one response, both starting with the control header. They sit at
// 0x10 and up so that the file-access opcodes below 0x10 can grow without
// clashing. Every request has the same layout (DirRequest); a field an
// opcode does not use must be zero, and the table dirOpTable says which
// each one uses. Paths are relative to the export, as OPEN's; "" (or ".")
// names the export's root where an opcode allows it (STAT, LIST, HASH of
// a file excepted).
const (
	ControlOpStat    = 0x20 // the attributes of a path
	ControlOpList    = 0x21 // a page of a directory's entries
	ControlOpMkdir   = 0x22 // make a directory (with DirParents: and its missing parents)
	ControlOpRemove  = 0x23 // remove a file or an empty directory
	ControlOpRename  = 0x24 // rename Path to NewPath
	ControlOpSetAttr = 0x25 // set a path's size, permissions or modification time
	ControlOpHash    = 0x26 // the SHA-256 of a file's contents, computed by the server
	ControlOpSync    = 0x27 // flush a file's (or directory's) data to the server's storage (fsync)

	// ControlDirResp is or-ed into a request's opcode to make its response's.
	ControlDirResp = 0x80

	// Directory request, after the control header.
	DirOffFlags      = 0x0C // u32 MKDIR: DirParents; RENAME: RenameNoReplace, RenameExchange; SETATTR: SetSize, SetMode, SetMtime
	DirOffMode       = 0x10 // u32 MKDIR, SETATTR: permission bits (0o7777)
	DirOffIndex      = 0x14 // u32 LIST: the first entry wanted (0, or a response's Next)
	DirOffSize       = 0x18 // u64 SETATTR: the new size
	DirOffMtime      = 0x20 // i64 SETATTR: the new modification time, ns since 1970
	DirOffPathLen    = 0x28 // u16 bytes of Path
	DirOffNewPathLen = 0x2A // u16 bytes of NewPath (RENAME only)
	DirOffPath       = 0x2C // Path, then NewPath, UTF-16LE
	DirReqMinLen     = 0x2C

	// Directory response, after the control header.
	DirRspOffStatus   = 0x0C // u32 NTSTATUS
	DirRspOffNext     = 0x10 // u32 LIST: the index to ask for next; 0: the listing is complete
	DirRspOffCount    = 0x14 // u16 attribute records that follow (LIST: entries; REMOVE: 0; the others: 1)
	DirRspOffReserved = 0x16 // u16 zero
	DirRspOffBody     = 0x18 // the records; HASH: then the 32-byte digest
	DirRspMinLen      = 0x18

	// Attribute record: the body of every response but REMOVE's (RENAME's
	// is the new path's), and each LIST entry (followed by
	// NameLen bytes of the entry's name, UTF-16LE).
	AttrOffMode     = 0x00 // u32 the POSIX st_mode: type and permission bits
	AttrOffNameLen  = 0x04 // u16 LIST: bytes of the name that follows; else 0
	AttrOffReserved = 0x06 // u16 zero
	AttrOffSize     = 0x08 // u64 bytes
	AttrOffMtime    = 0x10 // i64 modification time, ns since 1970
	AttrSize        = 0x18

	HashSize = 32 // SHA-256
)

// Request flags.
const (
	DirParents      = 1 << 0 // MKDIR: make missing parents too, and succeed if the directory exists
	RenameNoReplace = 1 << 0 // RENAME: fail with OBJECT_NAME_COLLISION if NewPath exists
	RenameExchange  = 1 << 1 // RENAME: swap Path and NewPath atomically (both must exist)
	SetSize         = 1 << 0 // SETATTR: truncate or extend to Size
	SetMode         = 1 << 1 // SETATTR: chmod to Mode
	SetMtime        = 1 << 2 // SETATTR: set the modification (and access) time to Mtime
)

// Mode type bits (POSIX st_mode), as AttrOffMode carries them.
const (
	ModeTypeMask = 0o170000
	ModeDir      = 0o040000
	ModeRegular  = 0o100000
)

// NTSTATUS values of directory operations (beside status.go's).
const (
	StatusObjectNameCollision = 0xC0000035 // MKDIR, RENAME with RenameNoReplace: it exists
	StatusObjectNameInvalid   = 0xC0000033 // a path with a NUL byte
	StatusDiskFull            = 0xC000007F
	StatusWriteProtected      = 0xC00000A2 // the export is read-only (STATUS_MEDIA_WRITE_PROTECTED)
	StatusFileIsADirectory    = 0xC00000BA
	StatusNotSameDevice       = 0xC00000D4 // RENAME across file systems
	StatusDirectoryNotEmpty   = 0xC0000101
	StatusNotADirectory       = 0xC0000103
	StatusNameTooLong         = 0xC0000106
)

// dirOpTable is the directory opcodes: name, the request fields each uses
// (any other must be zero), and whether a path may name the export's root.
// The server dispatches through it (server_dir.go) and docs/lwio.md has one
// row per entry.
var dirOpTable = map[uint16]struct {
	name    string
	fields  dirField
	flags   uint32 // the flag bits allowed
	rootOK  bool
	mutates bool // refused on a read-only export
}{
	ControlOpStat:    {name: "STAT", rootOK: true},
	ControlOpList:    {name: "LIST", fields: fieldIndex, rootOK: true},
	ControlOpMkdir:   {name: "MKDIR", fields: fieldFlags | fieldMode, flags: DirParents, mutates: true},
	ControlOpRemove:  {name: "REMOVE", mutates: true},
	ControlOpRename:  {name: "RENAME", fields: fieldFlags | fieldNewPath, flags: RenameNoReplace | RenameExchange, mutates: true},
	ControlOpSetAttr: {name: "SETATTR", fields: fieldFlags | fieldMode | fieldSize | fieldMtime, flags: SetSize | SetMode | SetMtime, mutates: true},
	ControlOpHash:    {name: "HASH"},
	ControlOpSync:    {name: "SYNC", rootOK: true},
}

type dirField uint8

const (
	fieldFlags dirField = 1 << iota
	fieldMode
	fieldIndex
	fieldSize
	fieldMtime
	fieldNewPath
)

// DirRequest is a directory request.
type DirRequest struct {
	Op      uint16 // ControlOpStat … ControlOpHash
	Flags   uint32
	Mode    uint32
	Index   uint32
	Size    uint64
	Mtime   int64
	Path    string
	NewPath string
}

// Append appends the whole message. Paths are checked here too, so a
// client learns of a NUL byte or an overlong path without a round trip.
func (d *DirRequest) Append(b []byte) ([]byte, error) {
	if err := d.check(); err != nil {
		return b, err
	}
	if err := checkPathText(d.Path); err != nil {
		return b, err
	}
	if err := checkPathText(d.NewPath); err != nil {
		return b, err
	}
	p, np := utf16le(d.Path), utf16le(d.NewPath)
	start := len(b)
	b = append(b, make([]byte, DirReqMinLen)...)
	m := b[start:]
	putControl(m, d.Op, DirReqMinLen+len(p)+len(np))
	le.PutUint32(m[DirOffFlags:], d.Flags)
	le.PutUint32(m[DirOffMode:], d.Mode)
	le.PutUint32(m[DirOffIndex:], d.Index)
	le.PutUint64(m[DirOffSize:], d.Size)
	le.PutUint64(m[DirOffMtime:], uint64(d.Mtime))
	le.PutUint16(m[DirOffPathLen:], uint16(len(p)))
	le.PutUint16(m[DirOffNewPathLen:], uint16(len(np)))
	b = append(b, p...)
	return append(b, np...), nil
}

// Decode reads a directory request that is all of m. It checks the
// layout and the fields, not the paths: a bad path is answered with a
// status (server_dir.go), not by closing the pipe.
func (d *DirRequest) Decode(m []byte) error {
	if len(m) < DirReqMinLen {
		return ErrShort
	}
	op := le.Uint16(m[CtlOffOpcode:])
	if err := checkControl(m, op, DirReqMinLen); err != nil {
		return err
	}
	pl, npl := int(le.Uint16(m[DirOffPathLen:])), int(le.Uint16(m[DirOffNewPathLen:]))
	if pl%2 != 0 || npl%2 != 0 || len(m) != DirReqMinLen+pl+npl {
		return ErrLength
	}
	*d = DirRequest{Op: op, Flags: le.Uint32(m[DirOffFlags:]), Mode: le.Uint32(m[DirOffMode:]),
		Index: le.Uint32(m[DirOffIndex:]), Size: le.Uint64(m[DirOffSize:]), Mtime: int64(le.Uint64(m[DirOffMtime:])),
		Path: fromUTF16le(m[DirOffPath : DirOffPath+pl]), NewPath: fromUTF16le(m[DirOffPath+pl:])}
	return d.check()
}

// check holds a request's fields to its opcode's row of dirOpTable.
func (d *DirRequest) check() error {
	op, ok := dirOpTable[d.Op]
	if !ok {
		return fmt.Errorf("lwio: directory opcode %#x", d.Op)
	}
	unused := func(f dirField, nonzero bool, what string) error {
		if op.fields&f == 0 && nonzero {
			return fmt.Errorf("lwio: %s: %s must be zero", op.name, what)
		}
		return nil
	}
	for _, u := range []struct {
		f       dirField
		nonzero bool
		what    string
	}{{fieldFlags, d.Flags != 0, "Flags"}, {fieldMode, d.Mode != 0, "Mode"}, {fieldIndex, d.Index != 0, "Index"},
		{fieldSize, d.Size != 0, "Size"}, {fieldMtime, d.Mtime != 0, "Mtime"}, {fieldNewPath, d.NewPath != "", "NewPath"}} {
		if err := unused(u.f, u.nonzero, u.what); err != nil {
			return err
		}
	}
	if d.Flags&^op.flags != 0 {
		return fmt.Errorf("lwio: %s: flags %#x", op.name, d.Flags)
	}
	if d.Mode&^0o7777 != 0 {
		return fmt.Errorf("lwio: %s: mode %#o has bits beyond the permissions", op.name, d.Mode)
	}
	if d.Op == ControlOpRename {
		if d.Flags == RenameNoReplace|RenameExchange {
			return fmt.Errorf("lwio: RENAME: NoReplace and Exchange together")
		}
		if d.NewPath == "" {
			return fmt.Errorf("lwio: RENAME without NewPath")
		}
	}
	return nil
}

// checkPathText refuses what no path may hold, before it is sent or
// looked at: NUL bytes, text that is not UTF-8 (it would not survive
// UTF-16), and more than MaxPathLen bytes on the wire.
func checkPathText(p string) error {
	switch {
	case len(p) > MaxPathLen || len(utf16le(p)) > MaxPathLen:
		return fmt.Errorf("lwio: path of %d bytes: %w (the longest is %d)", len(p), errNameTooLong, MaxPathLen)
	case strings.IndexByte(p, 0) >= 0:
		return fmt.Errorf("lwio: path %q: %w", p, errNameInvalid)
	case !utf8.ValidString(p):
		return fmt.Errorf("lwio: path %q is not UTF-8: %w", p, errNameInvalid)
	}
	return nil
}

// Attr is a file's or directory's attributes.
type Attr struct {
	Mode  uint32 // POSIX st_mode
	Size  int64
	Mtime int64 // ns since 1970
}

// IsDir reports a directory.
func (a Attr) IsDir() bool { return a.Mode&ModeTypeMask == ModeDir }

// DirEntry is one entry of a listing.
type DirEntry struct {
	Name string
	Attr
}

func appendAttr(b []byte, a Attr, name []byte) []byte {
	start := len(b)
	b = append(b, make([]byte, AttrSize)...)
	r := b[start:]
	le.PutUint32(r[AttrOffMode:], a.Mode)
	le.PutUint16(r[AttrOffNameLen:], uint16(len(name)))
	le.PutUint64(r[AttrOffSize:], uint64(a.Size))
	le.PutUint64(r[AttrOffMtime:], uint64(a.Mtime))
	return append(b, name...)
}

// decodeAttr reads a record and its name from the start of b, returning
// the bytes it took.
func decodeAttr(b []byte, named bool) (DirEntry, int, error) {
	if len(b) < AttrSize {
		return DirEntry{}, 0, ErrShort
	}
	n := int(le.Uint16(b[AttrOffNameLen:]))
	if n%2 != 0 || len(b) < AttrSize+n || (n == 0) == named || le.Uint16(b[AttrOffReserved:]) != 0 {
		return DirEntry{}, 0, ErrLength
	}
	e := DirEntry{Attr: Attr{Mode: le.Uint32(b[AttrOffMode:]), Size: int64(le.Uint64(b[AttrOffSize:])),
		Mtime: int64(le.Uint64(b[AttrOffMtime:]))}, Name: fromUTF16le(b[AttrSize : AttrSize+n])}
	if e.Size < 0 {
		return DirEntry{}, 0, fmt.Errorf("lwio: attribute size %d", e.Size)
	}
	return e, AttrSize + n, nil
}

// DirResponse answers a directory request.
type DirResponse struct {
	Op      uint16 // the request's opcode (the response's without ControlDirResp)
	Status  uint32
	Next    uint32     // LIST
	Entries []DirEntry // LIST: the entries; STAT, MKDIR, SETATTR, RENAME, HASH: one, unnamed
	Digest  [HashSize]byte
}

// Append appends the whole message. For LIST, Entries are the directory's
// from the request's Index on and Next must hold that Index: the entries
// past what fits in one control message are left out and Next becomes the
// index of the first of them, or 0 when every entry fitted.
func (d *DirResponse) Append(b []byte) ([]byte, error) {
	start := len(b)
	b = append(b, make([]byte, DirRspMinLen)...)
	count := 0
	if d.Status == StatusSuccess {
		for i, e := range d.Entries {
			var name []byte
			if d.Op == ControlOpList {
				name = utf16le(e.Name)
				if len(b)-start+AttrSize+len(name) > MaxControlMessage {
					if i == 0 {
						return b[:start], fmt.Errorf("lwio: LIST entry %q does not fit a message", e.Name)
					}
					d.Next += uint32(i)
					break
				}
			}
			b = appendAttr(b, e.Attr, name)
			count++
		}
		if d.Op == ControlOpList && count == len(d.Entries) {
			d.Next = 0
		}
		if d.Op == ControlOpHash {
			b = append(b, d.Digest[:]...)
		}
	}
	m := b[start:]
	putControl(m, d.Op|ControlDirResp, len(m))
	le.PutUint32(m[DirRspOffStatus:], d.Status)
	le.PutUint32(m[DirRspOffNext:], d.Next)
	le.PutUint16(m[DirRspOffCount:], uint16(count))
	return b, nil
}

// Decode reads the response to a request of opcode op that is all of m.
func (d *DirResponse) Decode(m []byte, op uint16) error {
	if err := checkControl(m, op|ControlDirResp, DirRspMinLen); err != nil {
		return err
	}
	*d = DirResponse{Op: op, Status: le.Uint32(m[DirRspOffStatus:]), Next: le.Uint32(m[DirRspOffNext:])}
	n := int(le.Uint16(m[DirRspOffCount:]))
	if le.Uint16(m[DirRspOffReserved:]) != 0 {
		return fmt.Errorf("lwio: directory response reserved field %#x", le.Uint16(m[DirRspOffReserved:]))
	}
	body := m[DirRspOffBody:]
	if d.Status != StatusSuccess {
		if n != 0 || len(body) != 0 {
			return ErrLength
		}
		return nil
	}
	if op != ControlOpList && n != 1 && op != ControlOpRemove || op == ControlOpRemove && n != 0 {
		return fmt.Errorf("lwio: %s response with %d records", dirOpTable[op].name, n)
	}
	for range n {
		e, used, err := decodeAttr(body, op == ControlOpList)
		if err != nil {
			return err
		}
		d.Entries = append(d.Entries, e)
		body = body[used:]
	}
	if op == ControlOpHash {
		if len(body) != HashSize {
			return ErrLength
		}
		copy(d.Digest[:], body)
		body = body[HashSize:]
	}
	if len(body) != 0 {
		return ErrLength
	}
	return nil
}

// dirStatusName names the statuses of directory operations.
func dirStatusName(s uint32) string {
	switch s {
	case StatusObjectNameInvalid:
		return "bad name"
	case StatusObjectNameCollision:
		return "already exists"
	case StatusDiskFull:
		return "disk full"
	case StatusWriteProtected:
		return "read-only export"
	case StatusFileIsADirectory:
		return "is a directory"
	case StatusNotSameDevice:
		return "not the same file system"
	case StatusDirectoryNotEmpty:
		return "directory not empty"
	case StatusNotADirectory:
		return "not a directory"
	case StatusNameTooLong:
		return "name too long"
	}
	return "unknown"
}
