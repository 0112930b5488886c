package lwio

import "sync/atomic"

// dirCounters count the directory operations of the pipe (pipe_dir.go).
type dirCounters struct {
	ops                    [len(dirOpNames)]atomic.Uint64
	refused, hashed, skips atomic.Uint64
}

// dirOpNames orders the directory opcodes for the counters and DirStats.
var dirOpNames = [...]uint16{ControlOpStat, ControlOpList, ControlOpMkdir, ControlOpRemove, ControlOpRename,
	ControlOpSetAttr, ControlOpHash, ControlOpSync}

// DirStats count a server's directory operations.
type DirStats struct {
	Ops         map[string]uint64 // by opcode name (STAT, LIST, …), answered or refused
	Refused     uint64            // answered with a status other than success
	BytesHashed uint64            // file bytes HASH read
	Skipped     uint64            // listed names left out: not UTF-8
}

// DirStats returns the directory operation counters.
func (s *Server) DirStats() DirStats {
	d := DirStats{Ops: map[string]uint64{}, Refused: s.dir.refused.Load(), BytesHashed: s.dir.hashed.Load(),
		Skipped: s.dir.skips.Load()}
	for i, op := range dirOpNames {
		d.Ops[dirOpTable[op].name] = s.dir.ops[i].Load()
	}
	return d
}

// pipeDir answers a directory request on the file-access channel (a
// pipeOps entry). A malformed request is an error (the caller closes the
// channel, as for a malformed OPEN); a request the export refuses, a bad
// path or a change to a read-only export included, is answered with its
// status.
func (s *Server) pipeDir(_ *logon, m []byte) ([]byte, error) {
	var req DirRequest
	if err := req.Decode(m); err != nil {
		return nil, err
	}
	op := req.Op
	for i, o := range dirOpNames {
		if o == op {
			s.dir.ops[i].Add(1)
		}
	}
	rsp := DirResponse{Op: op}
	var a Attr
	var err error
	if dirOpTable[op].mutates {
		err = s.exp.writable()
	}
	switch {
	case err != nil:
		s.st.readOnly.Add(1)
	case op == ControlOpStat:
		a, err = s.exp.stat(req.Path)
	case op == ControlOpList:
		var skipped int
		rsp.Entries, skipped, err = s.exp.list(req.Path, req.Index)
		s.dir.skips.Add(uint64(skipped))
		rsp.Next = req.Index
	case op == ControlOpMkdir:
		a, err = s.exp.mkdir(req.Path, req.Mode, req.Flags&DirParents != 0)
	case op == ControlOpRemove:
		err = s.exp.remove(req.Path)
	case op == ControlOpRename:
		a, err = s.exp.rename(req.Path, req.NewPath, req.Flags)
	case op == ControlOpSetAttr:
		a, err = s.exp.setAttr(req.Path, req.Flags, req.Mode, req.Size, req.Mtime)
	case op == ControlOpHash:
		a, rsp.Digest, err = s.exp.hash(req.Path)
		s.dir.hashed.Add(uint64(a.Size))
	case op == ControlOpSync:
		a, err = s.exp.sync(req.Path)
	}
	switch {
	case err != nil:
		rsp.Status, rsp.Entries = dirStatus(err), nil
		s.dir.refused.Add(1)
	case op != ControlOpList && op != ControlOpRemove:
		rsp.Entries = []DirEntry{{Attr: a}}
	}
	return rsp.Append(nil)
}
