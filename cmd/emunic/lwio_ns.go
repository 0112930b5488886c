package main

import (
	"fmt"
	"io/fs"
	"path"
	"time"

	"github.com/emunic/emunic/lwio"
)

// The namespace commands: stat, ls, mkdir, rm, mv.

// fileMode is the st_mode the server sends as Go's fs.FileMode, for ls.
func fileMode(m uint32) fs.FileMode {
	fm := fs.FileMode(m & 0o777)
	switch m & lwio.ModeTypeMask {
	case lwio.ModeDir:
		fm |= fs.ModeDir
	case lwio.ModeRegular:
	case 0o120000:
		fm |= fs.ModeSymlink
	default:
		fm |= fs.ModeIrregular
	}
	return fm
}

func (x *lwioSession) printEntry(name string, a lwio.Attr) {
	if a.IsDir() {
		name += "/"
	}
	fmt.Fprintf(x.stdout, "%s %12d %s %s\n", fileMode(a.Mode), a.Size, time.Unix(0, a.Mtime).Format("2006-01-02 15:04"), name)
}

// stat prints the size in bytes of REMOTE, a file or a directory (a
// directory's is what the server's file system says).
func (x *lwioSession) stat(remote string) error {
	a, err := x.c.Attr(x.ctx, remote)
	if err != nil {
		return err
	}
	fmt.Fprintln(x.stdout, a.Size)
	return nil
}

// ls lists REMOTE ("" the export's root): a directory's entries, or the
// one line of a file.
func (x *lwioSession) ls(remote string) error {
	a, err := x.c.Attr(x.ctx, remote)
	if err != nil {
		return err
	}
	if !a.IsDir() {
		x.printEntry(remote, a)
		return nil
	}
	ents, err := x.c.ReadDir(x.ctx, remote)
	if err != nil {
		return err
	}
	for _, e := range ents {
		x.printEntry(e.Name, e.Attr)
	}
	return nil
}

func (x *lwioSession) mkdir(remote string, parents bool) error {
	_, err := x.c.Mkdir(x.ctx, remote, 0o755, parents)
	return err
}

// rm removes a file; a directory only with recursive (and its contents
// first), as rm does.
func (x *lwioSession) rm(remote string, recursive bool) error {
	a, err := x.c.Attr(x.ctx, remote)
	if err != nil {
		return err
	}
	if a.IsDir() {
		if !recursive {
			return fmt.Errorf("rm %s: a directory (use -r)", remote)
		}
		ents, err := x.c.ReadDir(x.ctx, remote)
		if err != nil {
			return err
		}
		for _, e := range ents {
			p := path.Join(remote, e.Name)
			if e.IsDir() {
				err = x.rm(p, true)
			} else {
				err = x.c.Remove(x.ctx, p)
			}
			if err != nil {
				return err
			}
		}
	}
	return x.c.Remove(x.ctx, remote)
}

// mv renames FROM to TO; into TO when it is a directory, as mv does.
func (x *lwioSession) mv(from, to string) error {
	isDir, err := x.remoteDir(to)
	if err != nil {
		return err
	}
	to = cleanRemote(to)
	if isDir {
		to = path.Join(to, path.Base(cleanRemote(from)))
	}
	_, err = x.c.Rename(x.ctx, cleanRemote(from), to, 0)
	return err
}
