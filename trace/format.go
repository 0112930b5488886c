package trace

import (
	"bufio"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
)

// The trace file (docs/trace.md): a fixed header, then records, then an End
// record. Every integer is little-endian. Each record carries a CRC-32C of
// its kind, device, length and payload, so a flipped byte is found where it
// is; the End record counts the records before it, so a file cut at a
// record boundary is found too.

// Magic opens every trace file.
const Magic = "EMUTRACE"

// Version is the format version this package writes and reads.
const Version = 1

// Header layout.
const (
	offMagic     = 0  // 8 bytes
	offVersion   = 8  // u16
	offHdrFlags  = 10 // u16, zero
	offHdrLen    = 12 // u32: JSON bytes that follow
	fileHdrSize  = 16 // then the JSON, then its CRC-32C (u32)
	maxHeaderLen = 1 << 20
)

// Record framing: kind u8, device u8, payload length u32, payload, CRC u32.
const (
	recOffKind   = 0
	recOffDev    = 1
	recOffLen    = 2
	recHdrSize   = 6
	recCRCSize   = 4
	MaxPayload   = 1 << 20 // larger than any frame, entry or read the device makes
	maxInlineOut = 64      // writes longer than this are stored as a SHA-256
)

// Kind is a record's type.
type Kind uint8

// Record kinds. Inputs are what the device saw of the host and the wire;
// outputs are what it did; a replay feeds the first and checks the second.
const (
	KindDevice   Kind = 1  // a device joins the trace: its configuration (JSON)
	KindStep     Kind = 2  // the unit starts a step
	KindRing     Kind = 3  // output: the device opened a ring
	KindLoad     Kind = 4  // input: the host's index changed since the last step, with the entries it published
	KindRead     Kind = 5  // input: a DMA read of host memory outside the rings
	KindFrameIn  Kind = 6  // input: a frame taken from the port
	KindStore    Kind = 7  // output: the device stored a header word (with the entries it published)
	KindComplete Kind = 8  // output: a command's status written back into its entry
	KindWrite    Kind = 9  // output: a DMA write into host memory outside the rings
	KindFrameOut Kind = 10 // output: a frame sent at the port
	KindIrq      Kind = 11 // output: an interrupt vector raised
	KindEnd      Kind = 12 // the trace is complete
	KindBell     Kind = 13 // input: an RDMA doorbell register (a QP's doorbell, a CQ's arm) the step took
)

var kindNames = [...]string{KindDevice: "device", KindStep: "step", KindRing: "ring", KindLoad: "load", KindRead: "read",
	KindFrameIn: "frame-in", KindStore: "store", KindComplete: "complete", KindWrite: "write",
	KindFrameOut: "frame-out", KindIrq: "irq", KindEnd: "end", KindBell: "bell"}

func (k Kind) String() string {
	if int(k) < len(kindNames) && kindNames[k] != "" {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// IsOutput reports whether records of kind k are the device's doing (what a
// replay checks) rather than what it was given.
func (k Kind) IsOutput() bool {
	switch k {
	case KindRing, KindStore, KindComplete, KindWrite, KindFrameOut, KindIrq:
		return true
	}
	return false
}

// Step flags.
const (
	StepDoorbell = 1 << 0
	StepStop     = 1 << 1
	StepParked   = 1 << 2
)

// Bell flags.
const BellCQ = 1 << 0 // a CQ's arm (Len: its arms, nic.BellArm*); else a QP's doorbell

// FrameIn flags.
const FrameTooBig = 1 << 0 // the port refused a frame longer than the buffer

// FrameOut flags.
const FramePortError = 1 << 0 // the port refused the frame (the device counts it)

// Write flags.
const WriteHashed = 1 << 0 // Data is the SHA-256 of the N bytes written

// Vectors as numbered in Irq records.
const (
	VecNotify  = 0
	VecTxSpace = 1
	VecCommand = 2
)

// Record is one decoded record; which fields mean something depends on Kind
// (docs/trace.md has the table).
type Record struct {
	Kind  Kind
	Dev   uint8
	N     uint64 // Step: step number; End: records before it
	Now   int64  // Step: device clock, ns
	Flags uint8  // Step, FrameIn, Write, Ring (1: producer), Bell
	Ring  uint16 // Ring, Load, Store, Complete: the ring's number on its device
	Off   uint8  // Load, Store: header word offset
	Val   uint32 // Load, Store: the word's value; Complete: entry index; Ring: entry count; Bell: QP or CQ number
	Addr  uint64 // Read, Write: host address; Ring: base
	Len   uint32 // Write: bytes written; Ring: entry size; Bell: a CQ's arms
	Vec   uint8  // Irq
	Data  []byte // entries, bytes read, frame, written bytes or their hash, device JSON
}

// Payload layouts, by kind (offsets into the payload).
const (
	stepSize    = 8 + 8 + 1 // n u64, now i64, flags u8
	ringSize    = 2 + 1 + 8 + 4 + 4
	loadHdr     = 2 + 1 + 4 // ring, off, val; then entries
	readHdr     = 8         // addr; then data
	frameHdr    = 1         // flags; then frame
	storeHdr    = 2 + 1 + 4 // ring, off, val; then entries
	completeHdr = 2 + 4     // ring, index; then entry
	writeHdr    = 8 + 4 + 1 // addr, len, flags; then data or hash
	irqSize     = 1
	bellSize    = 1 + 4 + 4 // flags, number, arms
	endSize     = 8
	sha256Size  = sha256.Size
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Errors from reading a trace.
var (
	ErrNotTrace  = errors.New("trace: not a trace file (bad magic)")
	ErrVersion   = errors.New("trace: unsupported version")
	ErrCorrupt   = errors.New("trace: corrupt")
	ErrTruncated = errors.New("trace: truncated")
)

// appendPayload encodes r's payload.
func (r *Record) appendPayload(b []byte) ([]byte, error) {
	le := binary.LittleEndian
	switch r.Kind {
	case KindDevice:
		b = append(b, r.Data...)
	case KindStep:
		b = le.AppendUint64(b, r.N)
		b = le.AppendUint64(b, uint64(r.Now))
		b = append(b, r.Flags)
	case KindRing:
		b = le.AppendUint16(b, r.Ring)
		b = append(b, r.Flags)
		b = le.AppendUint64(b, r.Addr)
		b = le.AppendUint32(b, r.Val)
		b = le.AppendUint32(b, r.Len)
	case KindLoad:
		b = le.AppendUint16(b, r.Ring)
		b = append(b, r.Off)
		b = le.AppendUint32(b, r.Val)
		b = append(b, r.Data...)
	case KindRead:
		b = le.AppendUint64(b, r.Addr)
		b = append(b, r.Data...)
	case KindFrameIn, KindFrameOut:
		b = append(b, r.Flags)
		b = append(b, r.Data...)
	case KindStore:
		b = le.AppendUint16(b, r.Ring)
		b = append(b, r.Off)
		b = le.AppendUint32(b, r.Val)
		b = append(b, r.Data...)
	case KindComplete:
		b = le.AppendUint16(b, r.Ring)
		b = le.AppendUint32(b, r.Val)
		b = append(b, r.Data...)
	case KindWrite:
		b = le.AppendUint64(b, r.Addr)
		b = le.AppendUint32(b, r.Len)
		b = append(b, r.Flags)
		b = append(b, r.Data...)
	case KindIrq:
		b = append(b, r.Vec)
	case KindBell:
		b = append(b, r.Flags)
		b = le.AppendUint32(b, r.Val)
		b = le.AppendUint32(b, r.Len)
	case KindEnd:
		b = le.AppendUint64(b, r.N)
	default:
		return nil, fmt.Errorf("trace: cannot encode %v", r.Kind)
	}
	return b, nil
}

// decodePayload fills r from p (r.Kind set). Data aliases p.
func (r *Record) decodePayload(p []byte) error {
	le := binary.LittleEndian
	need := func(n int, exact bool) error {
		if len(p) < n || exact && len(p) != n {
			return fmt.Errorf("%w: %v record of %d bytes", ErrCorrupt, r.Kind, len(p))
		}
		return nil
	}
	switch r.Kind {
	case KindDevice:
		r.Data = p
	case KindStep:
		if err := need(stepSize, true); err != nil {
			return err
		}
		r.N, r.Now, r.Flags = le.Uint64(p), int64(le.Uint64(p[8:])), p[16]
	case KindRing:
		if err := need(ringSize, true); err != nil {
			return err
		}
		r.Ring, r.Flags, r.Addr, r.Val, r.Len = le.Uint16(p), p[2], le.Uint64(p[3:]), le.Uint32(p[11:]), le.Uint32(p[15:])
	case KindLoad:
		if err := need(loadHdr, false); err != nil {
			return err
		}
		r.Ring, r.Off, r.Val, r.Data = le.Uint16(p), p[2], le.Uint32(p[3:]), p[loadHdr:]
	case KindRead:
		if err := need(readHdr, false); err != nil {
			return err
		}
		r.Addr, r.Data = le.Uint64(p), p[readHdr:]
	case KindFrameIn, KindFrameOut:
		if err := need(frameHdr, false); err != nil {
			return err
		}
		r.Flags, r.Data = p[0], p[frameHdr:]
	case KindStore:
		if err := need(storeHdr, false); err != nil {
			return err
		}
		r.Ring, r.Off, r.Val, r.Data = le.Uint16(p), p[2], le.Uint32(p[3:]), p[storeHdr:]
	case KindComplete:
		if err := need(completeHdr, false); err != nil {
			return err
		}
		r.Ring, r.Val, r.Data = le.Uint16(p), le.Uint32(p[2:]), p[completeHdr:]
	case KindWrite:
		if err := need(writeHdr, false); err != nil {
			return err
		}
		r.Addr, r.Len, r.Flags, r.Data = le.Uint64(p), le.Uint32(p[8:]), p[12], p[writeHdr:]
		if r.Flags&WriteHashed != 0 && len(r.Data) != sha256Size || r.Flags&WriteHashed == 0 && len(r.Data) != int(r.Len) {
			return fmt.Errorf("%w: write record of %d bytes for %d written", ErrCorrupt, len(r.Data), r.Len)
		}
	case KindIrq:
		if err := need(irqSize, true); err != nil {
			return err
		}
		r.Vec = p[0]
	case KindBell:
		if err := need(bellSize, true); err != nil {
			return err
		}
		r.Flags, r.Val, r.Len = p[0], le.Uint32(p[1:]), le.Uint32(p[5:])
	case KindEnd:
		if err := need(endSize, true); err != nil {
			return err
		}
		r.N = le.Uint64(p)
	default:
		return fmt.Errorf("%w: unknown record kind %d", ErrCorrupt, uint8(r.Kind))
	}
	return nil
}

// Header is the trace's JSON header.
type Header struct {
	Version int      `json:"version"`
	Tool    string   `json:"tool"`
	Args    []string `json:"args,omitempty"` // what was recorded (the demo's flags)
	Clock   string   `json:"clock"`          // "monotonic" or "virtual"
	// FullWrites keeps the bytes of every DMA write, not only the short
	// ones (the rest are a SHA-256): larger, but a divergence shows the
	// bytes.
	FullWrites bool `json:"full_writes,omitempty"`
}

// Writer writes a trace. Devices write from their own goroutines; a Writer
// serialises them.
type Writer struct {
	mu    sync.Mutex
	w     *bufio.Writer
	c     io.Closer
	buf   []byte
	n     uint64
	err   error
	devs  uint8
	ended bool
	full  bool
}

// NewWriter writes the file header to w and returns a Writer. Close writes
// the End record and closes w if it is an io.Closer.
func NewWriter(w io.Writer, h Header) (*Writer, error) {
	h.Version = Version
	if h.Tool == "" {
		h.Tool = "emunic"
	}
	js, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	tw := &Writer{w: bufio.NewWriterSize(w, 1<<16), full: h.FullWrites}
	if c, ok := w.(io.Closer); ok {
		tw.c = c
	}
	var fh [fileHdrSize]byte
	copy(fh[offMagic:], Magic)
	binary.LittleEndian.PutUint16(fh[offVersion:], Version)
	binary.LittleEndian.PutUint32(fh[offHdrLen:], uint32(len(js)))
	tw.w.Write(fh[:])
	tw.w.Write(js)
	tw.err = binary.Write(tw.w, binary.LittleEndian, crc32.Checksum(js, castagnoli))
	return tw, tw.err
}

// Write appends one record.
func (w *Writer) Write(r *Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.writeLocked(r)
}

func (w *Writer) writeLocked(r *Record) error {
	if w.err != nil {
		return w.err
	}
	if w.ended {
		return errors.New("trace: write after Close")
	}
	b := append(w.buf[:0], byte(r.Kind), r.Dev, 0, 0, 0, 0)
	b, err := r.appendPayload(b)
	if err != nil {
		w.err = err
		return err
	}
	if len(b)-recHdrSize > MaxPayload {
		w.err = fmt.Errorf("trace: %v record of %d bytes is over the %d-byte limit", r.Kind, len(b)-recHdrSize, MaxPayload)
		return w.err
	}
	binary.LittleEndian.PutUint32(b[recOffLen:], uint32(len(b)-recHdrSize))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
	w.buf = b
	if _, err := w.w.Write(b); err != nil {
		w.err = err
		return err
	}
	w.n++
	return nil
}

// Records is how many records were written.
func (w *Writer) Records() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// Err is the first error the writer met (a device's tracer has nowhere to
// return one).
func (w *Writer) Err() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.err
}

// Close writes the End record, flushes, and closes the underlying writer.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ended {
		return w.err
	}
	w.writeLocked(&Record{Kind: KindEnd, N: w.n})
	w.ended = true
	if err := w.w.Flush(); err != nil && w.err == nil {
		w.err = err
	}
	if w.c != nil {
		if err := w.c.Close(); err != nil && w.err == nil {
			w.err = err
		}
	}
	return w.err
}

// Reader reads a trace.
type Reader struct {
	r      *bufio.Reader
	Header Header
	n      uint64 // records read
	off    int64  // byte offset of the next record
	buf    []byte
	done   bool
}

// NewReader checks the file header.
func NewReader(r io.Reader) (*Reader, error) {
	tr := &Reader{r: bufio.NewReaderSize(r, 1<<16)}
	var fh [fileHdrSize]byte
	if n, err := io.ReadFull(tr.r, fh[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			if k := min(n, len(Magic)); string(fh[:k]) != Magic[:k] {
				return nil, ErrNotTrace
			}
			return nil, fmt.Errorf("%w: file header (%d bytes)", ErrTruncated, n)
		}
		return nil, err
	}
	if string(fh[offMagic:offMagic+8]) != Magic {
		return nil, ErrNotTrace
	}
	if v := binary.LittleEndian.Uint16(fh[offVersion:]); v != Version {
		return nil, fmt.Errorf("%w %d (this build reads version %d)", ErrVersion, v, Version)
	}
	if f := binary.LittleEndian.Uint16(fh[offHdrFlags:]); f != 0 {
		return nil, fmt.Errorf("%w: header flags %#x (version %d has none)", ErrCorrupt, f, Version)
	}
	n := binary.LittleEndian.Uint32(fh[offHdrLen:])
	if n > maxHeaderLen {
		return nil, fmt.Errorf("%w: header length %d", ErrCorrupt, n)
	}
	js := make([]byte, n+4)
	if _, err := io.ReadFull(tr.r, js); err != nil {
		return nil, fmt.Errorf("%w: header", ErrTruncated)
	}
	if crc32.Checksum(js[:n], castagnoli) != binary.LittleEndian.Uint32(js[n:]) {
		return nil, fmt.Errorf("%w: header CRC mismatch", ErrCorrupt)
	}
	if err := json.Unmarshal(js[:n], &tr.Header); err != nil {
		return nil, fmt.Errorf("%w: header: %v", ErrCorrupt, err)
	}
	tr.off = int64(fileHdrSize) + int64(n) + 4
	return tr, nil
}

// Next returns the next record (its Data valid until the next call), or
// io.EOF after the End record. A file that ends without one, or whose End
// disagrees with the count, is ErrTruncated; a record that fails its CRC or
// its layout is ErrCorrupt, with its byte offset.
func (tr *Reader) Next() (*Record, error) {
	if tr.done {
		return nil, io.EOF
	}
	var h [recHdrSize]byte
	if _, err := io.ReadFull(tr.r, h[:]); err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return nil, fmt.Errorf("%w: after %d records at byte %d, no end record", ErrTruncated, tr.n, tr.off)
		}
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[recOffLen:])
	if n > MaxPayload {
		return nil, fmt.Errorf("%w: record %d at byte %d: length %d", ErrCorrupt, tr.n, tr.off, n)
	}
	tot := recHdrSize + int(n) + recCRCSize
	if cap(tr.buf) < tot {
		tr.buf = make([]byte, tot)
	}
	b := tr.buf[:tot]
	copy(b, h[:])
	if _, err := io.ReadFull(tr.r, b[recHdrSize:]); err != nil {
		return nil, fmt.Errorf("%w: record %d at byte %d", ErrTruncated, tr.n, tr.off)
	}
	if crc32.Checksum(b[:tot-recCRCSize], castagnoli) != binary.LittleEndian.Uint32(b[tot-recCRCSize:]) {
		return nil, fmt.Errorf("%w: record %d at byte %d: CRC mismatch", ErrCorrupt, tr.n, tr.off)
	}
	r := &Record{Kind: Kind(b[recOffKind]), Dev: b[recOffDev]}
	if err := r.decodePayload(b[recHdrSize : tot-recCRCSize]); err != nil {
		return nil, fmt.Errorf("record %d at byte %d: %w", tr.n, tr.off, err)
	}
	tr.off += int64(tot)
	if r.Kind == KindEnd {
		if r.N != tr.n {
			return nil, fmt.Errorf("%w: end record counts %d records, %d read", ErrCorrupt, r.N, tr.n)
		}
		tr.done = true
		return nil, io.EOF
	}
	tr.n++
	return r, nil
}

// ReadAll reads every record of a trace (their Data copied).
func ReadAll(r io.Reader) (Header, []Record, error) {
	tr, err := NewReader(r)
	if err != nil {
		return Header{}, nil, err
	}
	var recs []Record
	for {
		rec, err := tr.Next()
		if err == io.EOF {
			return tr.Header, recs, nil
		}
		if err != nil {
			return tr.Header, recs, err
		}
		c := *rec
		c.Data = append([]byte(nil), rec.Data...)
		recs = append(recs, c)
	}
}
