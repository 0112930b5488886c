package lwio

import (
	"context"
	"fmt"
)

// The client's side of the pipe's directory operations (pipe_dir.go).
// Each is one round trip on the pipe, serialised with OPEN and RELEASE.

// pipeRoundTrip writes m on the pipe and hands the one message that
// answers it to take (under the pipe's lock: the message is only valid
// there). ctx ending interrupts either.
func (c *Client) pipeRoundTrip(ctx context.Context, m []byte, take func(r []byte, op uint16) error) error {
	c.pmu.Lock()
	defer c.pmu.Unlock()
	stop := context.AfterFunc(ctx, func() { c.pipe.SetDeadline(deadlinePast) })
	defer stop()
	if _, err := c.pipe.Write(m); err != nil {
		return fmt.Errorf("lwio: pipe: %w", err)
	}
	r, op, err := readControl(c.pipe, c.pbuf)
	if err != nil {
		return fmt.Errorf("lwio: pipe: %w", err)
	}
	c.pbuf = r[:0]
	return take(r, op)
}

// dirCall sends req on the pipe and returns the server's answer; a status
// other than success is a *StatusError naming the operation and path.
func (c *Client) dirCall(ctx context.Context, req *DirRequest) (*DirResponse, error) {
	m, err := req.Append(nil)
	if err != nil {
		return nil, err
	}
	name := dirOpTable[req.Op].name
	var rsp DirResponse
	err = c.pipeRoundTrip(ctx, m, func(r []byte, op uint16) error {
		if op != req.Op|ControlDirResp {
			return fmt.Errorf("%w: %s answered with opcode %#x", ErrPipe, name, op)
		}
		if err := rsp.Decode(r, req.Op); err != nil {
			return fmt.Errorf("lwio: pipe: %s: %w", name, err)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if rsp.Status != StatusSuccess {
		what := name + " " + req.Path
		if req.NewPath != "" {
			what += " -> " + req.NewPath
		}
		return nil, &StatusError{What: what, Status: rsp.Status}
	}
	return &rsp, nil
}

// attrCall runs a request whose answer is one attribute record.
func (c *Client) attrCall(ctx context.Context, req *DirRequest) (Attr, error) {
	rsp, err := c.dirCall(ctx, req)
	if err != nil {
		return Attr{}, err
	}
	return rsp.Entries[0].Attr, nil
}

// Attr returns the attributes of the file or directory at path ("" is
// the export's root).
func (c *Client) Attr(ctx context.Context, path string) (Attr, error) {
	return c.attrCall(ctx, &DirRequest{Op: ControlOpStat, Path: path})
}

// ReadDir lists the directory at path ("" is the export's root), sorted
// by name, in as many LIST round trips as it takes.
func (c *Client) ReadDir(ctx context.Context, path string) ([]DirEntry, error) {
	var all []DirEntry
	var index uint32
	for {
		rsp, err := c.dirCall(ctx, &DirRequest{Op: ControlOpList, Path: path, Index: index})
		if err != nil {
			return nil, err
		}
		all = append(all, rsp.Entries...)
		if rsp.Next == 0 {
			return all, nil
		}
		if rsp.Next <= index || len(rsp.Entries) == 0 {
			return nil, fmt.Errorf("%w: LIST %s: next index %d after %d", ErrPipe, path, rsp.Next, index)
		}
		index = rsp.Next
	}
}

// Mkdir makes the directory path with permissions perm (less the server's
// umask); with parents, its missing parents too, and an existing
// directory is no error.
func (c *Client) Mkdir(ctx context.Context, path string, perm uint32, parents bool) (Attr, error) {
	req := DirRequest{Op: ControlOpMkdir, Path: path, Mode: perm}
	if parents {
		req.Flags = DirParents
	}
	return c.attrCall(ctx, &req)
}

// Remove removes the file or empty directory at path.
func (c *Client) Remove(ctx context.Context, path string) error {
	_, err := c.dirCall(ctx, &DirRequest{Op: ControlOpRemove, Path: path})
	return err
}

// Rename renames from to to (flags: RenameNoReplace or RenameExchange, or
// 0 to replace whatever is at to) and returns to's attributes.
func (c *Client) Rename(ctx context.Context, from, to string, flags uint32) (Attr, error) {
	return c.attrCall(ctx, &DirRequest{Op: ControlOpRename, Path: from, NewPath: to, Flags: flags})
}

// SetAttrs are the changes SetAttr makes: each field applies when its
// flag (SetSize, SetMode, SetMtime) is in Flags.
type SetAttrs struct {
	Flags uint32
	Size  int64
	Mode  uint32 // permission bits
	Mtime int64  // ns since 1970
}

// SetAttr changes path's size, permissions or modification time and
// returns its attributes after.
func (c *Client) SetAttr(ctx context.Context, path string, a SetAttrs) (Attr, error) {
	if a.Size < 0 {
		return Attr{}, fmt.Errorf("lwio: SETATTR %s: size %d", path, a.Size)
	}
	req := DirRequest{Op: ControlOpSetAttr, Path: path, Flags: a.Flags}
	if a.Flags&SetSize != 0 {
		req.Size = uint64(a.Size)
	}
	if a.Flags&SetMode != 0 {
		req.Mode = a.Mode
	}
	if a.Flags&SetMtime != 0 {
		req.Mtime = a.Mtime
	}
	return c.attrCall(ctx, &req)
}

// Hash returns the SHA-256 of the file at path as the server reads it,
// and the bytes it covered.
func (c *Client) Hash(ctx context.Context, path string) ([HashSize]byte, int64, error) {
	rsp, err := c.dirCall(ctx, &DirRequest{Op: ControlOpHash, Path: path})
	if err != nil {
		return [HashSize]byte{}, 0, err
	}
	return rsp.Digest, rsp.Entries[0].Size, nil
}

// Sync asks the server to flush the file (or directory) at path to its
// storage: what fsync is on a local file. Writes are complete on the
// server when they are answered, but may sit in its page cache until then.
func (c *Client) Sync(ctx context.Context, path string) error {
	_, err := c.dirCall(ctx, &DirRequest{Op: ControlOpSync, Path: path})
	return err
}
