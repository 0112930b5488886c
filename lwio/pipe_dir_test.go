package lwio

import (
	"reflect"
	"strings"
	"testing"
)

func TestDirMessages(t *testing.T) {
	for _, req := range []DirRequest{
		{Op: ControlOpStat, Path: "a/b"},
		{Op: ControlOpList, Path: "", Index: 7},
		{Op: ControlOpMkdir, Path: "dir", Mode: 0o755, Flags: DirParents},
		{Op: ControlOpRemove, Path: "x"},
		{Op: ControlOpRename, Path: "a", NewPath: "b/é", Flags: RenameNoReplace},
		{Op: ControlOpSetAttr, Path: "f", Flags: SetSize | SetMtime, Size: 1 << 40, Mtime: -5},
		{Op: ControlOpHash, Path: "f"},
		{Op: ControlOpSync, Path: ""},
	} {
		m, err := req.Append(nil)
		if err != nil {
			t.Fatalf("%+v: %v", req, err)
		}
		var got DirRequest
		if err := got.Decode(m); err != nil || !reflect.DeepEqual(got, req) {
			t.Fatalf("round trip of %+v: %+v, %v", req, got, err)
		}
	}
	for _, bad := range []DirRequest{
		{Op: 0x28, Path: "a"},
		{Op: ControlOpStat, Path: "a", Mode: 1},                  // a field STAT does not use
		{Op: ControlOpMkdir, Path: "a", Flags: 2},                // an undefined flag
		{Op: ControlOpMkdir, Path: "a", Mode: 0o10000},           // beyond the permissions
		{Op: ControlOpRename, Path: "a"},                         // no NewPath
		{Op: ControlOpRename, Path: "a", NewPath: "b", Flags: 3}, // both flags
		{Op: ControlOpHash, Path: "a", NewPath: "b"},
		{Op: ControlOpStat, Path: "a\x00"},
		{Op: ControlOpStat, Path: strings.Repeat("x", MaxPathLen/2+1)},
	} {
		if _, err := bad.Append(nil); err == nil {
			t.Errorf("%+v encoded", bad)
		}
	}

	list := DirResponse{Op: ControlOpList, Next: 10}
	for i := range 5000 {
		list.Entries = append(list.Entries, DirEntry{Name: strings.Repeat("n", 10) + string(rune('a'+i%26)), Attr: Attr{Mode: ModeRegular | 0o644, Size: int64(i), Mtime: int64(i) << 20}})
	}
	m, err := list.Append(nil)
	if err != nil || len(m) > MaxControlMessage {
		t.Fatalf("LIST response of %d bytes: %v", len(m), err)
	}
	var got DirResponse
	if err := got.Decode(m, ControlOpList); err != nil {
		t.Fatal(err)
	}
	if n := len(got.Entries); n == 0 || n >= 5000 || got.Next != uint32(10+n) || !reflect.DeepEqual(got.Entries, list.Entries[:n]) {
		t.Fatalf("LIST page: %d entries, next %d", n, got.Next)
	}
	h := DirResponse{Op: ControlOpHash, Entries: []DirEntry{{Attr: Attr{Mode: ModeRegular, Size: 3}}}, Digest: [HashSize]byte{1, 2, 3}}
	m, _ = h.Append(nil)
	if err := got.Decode(m, ControlOpHash); err != nil || got.Digest != h.Digest || got.Entries[0].Size != 3 {
		t.Fatalf("HASH: %+v %v", got, err)
	}
	fail := DirResponse{Op: ControlOpMkdir, Status: StatusObjectNameCollision, Entries: []DirEntry{{}}}
	m, _ = fail.Append(nil)
	if err := got.Decode(m, ControlOpMkdir); err != nil || got.Status != StatusObjectNameCollision || len(got.Entries) != 0 {
		t.Fatalf("refusal: %+v %v", got, err)
	}
	if err := got.Decode(m, ControlOpStat); err == nil {
		t.Fatal("a MKDIR response decoded as STAT's")
	}
}

// TestDirWireBadPath: a client that skips the checks and puts a NUL or an
// overlong path on the wire gets a status, not a closed pipe; a field that
// should be zero is a malformed message.
func TestDirWireBadPath(t *testing.T) {
	exp, err := OpenExport(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer exp.Close()
	s := &Server{exp: exp}
	for _, c := range []struct {
		path   string
		status uint32
	}{{"a\x00b", StatusObjectNameInvalid}, {strings.Repeat("y", MaxPathLen+2), StatusNameTooLong}, {"../etc", StatusAccessDenied}} {
		m, err := (&DirRequest{Op: ControlOpStat, Path: "p"}).Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		p := utf16le(c.path)
		m = append(m[:DirOffPath], p...)
		le.PutUint16(m[DirOffPathLen:], uint16(len(p)))
		le.PutUint16(m[CtlOffLength:], uint16(len(m)))
		out, err := s.pipeDir(nil, m)
		if err != nil {
			t.Fatalf("%q: %v", c.path, err)
		}
		var rsp DirResponse
		if err := rsp.Decode(out, ControlOpStat); err != nil || rsp.Status != c.status {
			t.Fatalf("%q: status %#x, want %#x (%v)", c.path, rsp.Status, c.status, err)
		}
	}
	// A field STAT does not use, an undefined MKDIR flag: malformed, the
	// caller closes the channel.
	m, _ := (&DirRequest{Op: ControlOpStat, Path: "p"}).Append(nil)
	le.PutUint32(m[DirOffMode:], 1)
	if _, err := s.pipeDir(nil, m); err == nil {
		t.Error("a STAT with a Mode was answered")
	}
	m, _ = (&DirRequest{Op: ControlOpMkdir, Path: "p"}).Append(nil)
	le.PutUint32(m[DirOffFlags:], 8)
	if _, err := s.pipeDir(nil, m); err == nil {
		t.Error("a MKDIR with an undefined flag was answered")
	}
	if s.DirStats().Refused != 3 {
		t.Fatalf("refusals counted: %+v", s.DirStats())
	}
}
