// Package tcpfile is a plain-TCP file protocol: the baseline LWIO is
// measured against (the demo's --lwio and the LWIO benchmark). It does over
// one TCP connection what LWIO does over RDMA, with nothing LWIO avoids:
// every byte crosses the host stacks and is copied by the CPU on both
// sides. Requests are pipelined (a client keeps several in flight) and
// answered in order.
//
// Every message is a 24-byte header, then data:
//
//	0x00 u8  op: 1 OPEN (data: the path), 2 READ, 3 WRITE (data: the bytes);
//	         answers carry the op with 0x80 set
//	0x01 u8  status: 0 ok, 1 no such file, 2 bad request, 3 I/O error, 4 end of file
//	0x02 u16 zero
//	0x04 u32 tag: the request's, echoed
//	0x08 u64 offset (OPEN's answer: the file's size)
//	0x10 u32 length: READ: bytes asked; OPEN, WRITE, READ's answer: bytes of data that
//	         follow; WRITE's answer: bytes written (no data follows)
//	0x14 u32 zero
//
// All little-endian. A connection serves the one file its OPEN named.
package tcpfile

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
)

// Header layout.
const (
	HeaderSize = 24
	offOp      = 0x00
	offStatus  = 0x01
	offTag     = 0x04
	offOffset  = 0x08
	offLength  = 0x10

	OpOpen  = 1
	OpRead  = 2
	OpWrite = 3
	opReply = 0x80

	StatusOK       = 0
	StatusNotFound = 1
	StatusBad      = 2
	StatusIO       = 3
	StatusEOF      = 4

	// MaxIO bounds one READ or WRITE.
	MaxIO = 1 << 20
	// MaxPath bounds OPEN's path.
	MaxPath = 4096
)

var le = binary.LittleEndian

type header struct {
	op, status uint8
	tag        uint32
	offset     uint64
	length     uint32
}

func (h *header) encode(b []byte) {
	clear(b[:HeaderSize])
	b[offOp], b[offStatus] = h.op, h.status
	le.PutUint32(b[offTag:], h.tag)
	le.PutUint64(b[offOffset:], h.offset)
	le.PutUint32(b[offLength:], h.length)
}

func (h *header) decode(b []byte) {
	*h = header{op: b[offOp], status: b[offStatus], tag: le.Uint32(b[offTag:]), offset: le.Uint64(b[offOffset:]),
		length: le.Uint32(b[offLength:])}
}

// Serve answers connections from l with files of root until l closes.
func Serve(l net.Listener, root *os.Root) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		c, err := l.Accept()
		if err != nil {
			return err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer c.Close()
			_ = serveConn(c, root)
		}()
	}
}

// serveConn runs one connection: OPEN first, then READs and WRITEs,
// answered in order.
func serveConn(c net.Conn, root *os.Root) error {
	r := bufio.NewReaderSize(c, 256<<10)
	w := bufio.NewWriterSize(c, 256<<10)
	var f *os.File
	defer func() {
		if f != nil {
			f.Close()
		}
	}()
	hb := make([]byte, HeaderSize)
	data := make([]byte, MaxIO)
	for {
		// Answers go out when no further request is already buffered: a
		// pipelining client gets them in batches, one that waits at once.
		if r.Buffered() < HeaderSize {
			if err := w.Flush(); err != nil {
				return err
			}
		}
		if _, err := io.ReadFull(r, hb); err != nil {
			return err
		}
		var h header
		h.decode(hb)
		reply := header{op: h.op | opReply, tag: h.tag}
		switch {
		case h.op == OpOpen && f == nil && h.length > 0 && h.length <= MaxPath:
			p := make([]byte, h.length)
			if _, err := io.ReadFull(r, p); err != nil {
				return err
			}
			var err error
			if f, err = root.OpenFile(string(p), os.O_RDWR, 0); err != nil {
				reply.status = StatusNotFound
				f = nil
			} else if st, err := f.Stat(); err == nil {
				reply.offset = uint64(st.Size())
			}
		case h.op == OpRead && f != nil && h.length <= MaxIO:
			n, err := f.ReadAt(data[:h.length], int64(h.offset))
			switch {
			case n == 0 && err == io.EOF:
				reply.status = StatusEOF
			case err != nil && err != io.EOF:
				reply.status = StatusIO
			default:
				reply.length = uint32(n)
			}
		case h.op == OpWrite && f != nil && h.length <= MaxIO:
			if _, err := io.ReadFull(r, data[:h.length]); err != nil {
				return err
			}
			if _, err := f.WriteAt(data[:h.length], int64(h.offset)); err != nil {
				reply.status = StatusIO
			} else {
				reply.length = h.length
			}
		default:
			return fmt.Errorf("tcpfile: bad request op %d length %d", h.op, h.length)
		}
		reply.encode(hb)
		if _, err := w.Write(hb); err != nil {
			return err
		}
		if h.op == OpRead && reply.length > 0 {
			if _, err := w.Write(data[:reply.length]); err != nil {
				return err
			}
		}
	}
}

// File is one remote file over one TCP connection.
type File struct {
	c    net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	size int64
	tag  uint32
	mu   sync.Mutex
}

// Open sends OPEN on c (a fresh connection to a Serve) and returns the file.
func Open(c net.Conn, path string) (*File, error) {
	if len(path) == 0 || len(path) > MaxPath {
		return nil, errors.New("tcpfile: bad path")
	}
	f := &File{c: c, r: bufio.NewReaderSize(c, 256<<10), w: bufio.NewWriterSize(c, 256<<10)}
	hb := make([]byte, HeaderSize)
	(&header{op: OpOpen, length: uint32(len(path))}).encode(hb)
	f.w.Write(hb)
	f.w.WriteString(path)
	if err := f.w.Flush(); err != nil {
		return nil, err
	}
	h, err := f.reply(hb)
	if err != nil {
		return nil, err
	}
	if h.status != StatusOK {
		return nil, fmt.Errorf("tcpfile: open %s: status %d", path, h.status)
	}
	f.size = int64(h.offset)
	return f, nil
}

// Size is the file's size when opened.
func (f *File) Size() int64 { return f.size }

// Close closes the connection.
func (f *File) Close() error { return f.c.Close() }

func (f *File) reply(hb []byte) (header, error) {
	var h header
	if _, err := io.ReadFull(f.r, hb); err != nil {
		return h, err
	}
	h.decode(hb)
	if h.op&opReply == 0 || h.length > MaxIO {
		return h, fmt.Errorf("tcpfile: bad answer op %#x length %d", h.op, h.length)
	}
	return h, nil
}

// ReadAt reads len(p) bytes at off in pieces of piece bytes with up to
// window requests in flight (io.ReaderAt with a pipeline).
func (f *File) ReadAt(p []byte, off int64) (int, error) { return f.ReadAtWindow(p, off, 64<<10, 16) }

// ReadAtWindow is ReadAt with the piece size and window given.
func (f *File) ReadAtWindow(p []byte, off int64, piece, window int) (int, error) {
	return f.pipeline(OpRead, p, off, piece, window)
}

// WriteAt writes p at off in pieces of 64 KiB, 16 in flight.
func (f *File) WriteAt(p []byte, off int64) (int, error) { return f.WriteAtWindow(p, off, 64<<10, 16) }

// WriteAtWindow is WriteAt with the piece size and window given.
func (f *File) WriteAtWindow(p []byte, off int64, piece, window int) (int, error) {
	return f.pipeline(OpWrite, p, off, piece, window)
}

// pipeline moves p to or from the file at off in pieces of piece bytes,
// keeping up to window requests (READ or WRITE, by op) in flight and
// taking the answers in order. A read returns io.EOF after the first short
// piece, counting no byte after it.
func (f *File) pipeline(op uint8, p []byte, off int64, piece, window int) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	hb := make([]byte, HeaderSize)
	rb := make([]byte, HeaderSize)
	sent, got, n := 0, 0, 0
	pieces := (len(p) + piece - 1) / piece
	var eof bool
	for got < pieces {
		for sent < pieces && sent-got < window {
			o := sent * piece
			l := min(piece, len(p)-o)
			(&header{op: op, tag: uint32(sent), offset: uint64(off) + uint64(o), length: uint32(l)}).encode(hb)
			if _, err := f.w.Write(hb); err != nil {
				return n, err
			}
			if op == OpWrite {
				if _, err := f.w.Write(p[o : o+l]); err != nil {
					return n, err
				}
			}
			sent++
		}
		if err := f.w.Flush(); err != nil {
			return n, err
		}
		h, err := f.reply(rb)
		if err != nil {
			return n, err
		}
		if op == OpWrite {
			if h.status != StatusOK || int(h.tag) != got {
				return n, fmt.Errorf("tcpfile: write answer %d status %d", h.tag, h.status)
			}
			n += int(h.length)
			got++
			continue
		}
		o := int(h.tag) * piece
		if int(h.tag) != got || int(h.length) > min(piece, len(p)-o) {
			return n, fmt.Errorf("tcpfile: answer %d of %d bytes out of order", h.tag, h.length)
		}
		if _, err := io.ReadFull(f.r, p[o:o+int(h.length)]); err != nil {
			return n, err
		}
		if !eof {
			n += int(h.length)
		}
		if h.status == StatusEOF || int(h.length) < min(piece, len(p)-o) {
			eof = true
		} else if h.status != StatusOK {
			return n, fmt.Errorf("tcpfile: read status %d", h.status)
		}
		got++
	}
	if eof {
		return n, io.EOF
	}
	return n, nil
}
