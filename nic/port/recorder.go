package port

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"

	"github.com/google/gopacket"
	"github.com/google/gopacket/layers"
	"github.com/google/gopacket/pcapgo"
)

// DefaultSnaplen is the snapshot length NewRecorder uses for 0, and CreateRecorder always:
// libpcap's maximum, so that even a 64 KiB frame is captured whole.
const DefaultSnaplen = 262144

// Recorder is a Port that passes every frame through to another Port and writes it to a pcap
// file (link type Ethernet, nanosecond timestamps): each frame written successfully, and each
// frame read. It records the frame as it crossed the port: what was handed to the wire on
// transmit (impairments act beyond the port), what the wire delivered on receive.
//
// The capture is buffered; it is complete after Flush or Close. A failing capture (disk full)
// never fails the data path: the first error is kept and returned by Err, Flush and Close,
// because a recording must not change what it records.
type Recorder struct {
	p Port

	mu      sync.Mutex // serializes the writer between the transmit and receive paths
	bw      *bufio.Writer
	pw      *pcapgo.Writer
	snaplen int
	err     error     // first capture error
	closer  io.Closer // the file CreateRecorder opened, closed by Close
	closed  bool
	frames  uint64 // records written
}

// NewRecorder returns a Recorder that passes frames to p and writes them to w, and writes the
// pcap file header now. snaplen 0 means DefaultSnaplen.
func NewRecorder(p Port, w io.Writer, snaplen uint32) (*Recorder, error) {
	if snaplen == 0 {
		snaplen = DefaultSnaplen
	}
	// A packet record is two writes (header, data); buffer them so that recording a frame
	// costs a copy, not two system calls.
	bw := bufio.NewWriterSize(w, 256<<10)
	pw := pcapgo.NewWriterNanos(bw)
	if err := pw.WriteFileHeader(snaplen, layers.LinkTypeEthernet); err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	return &Recorder{p: p, bw: bw, pw: pw, snaplen: int(snaplen)}, nil
}

// CreateRecorder is NewRecorder writing to a new file at path (truncated if it exists), which
// Close closes.
func CreateRecorder(p Port, path string) (*Recorder, error) {
	f, err := os.Create(path)
	if err != nil {
		return nil, fmt.Errorf("pcap: %w", err)
	}
	r, err := NewRecorder(p, f, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("pcap %s: %w", path, err)
	}
	r.closer = f
	return r, nil
}

// Port returns the port the recorder wraps.
func (r *Recorder) Port() Port { return r.p }

// WriteFrame transmits frame through the wrapped port and records it if the
// port took it.
//
// The recorder's lock is held across the write: a TAP peer (the kernel) can
// answer before WriteFrame returns, and the reader recording that answer
// must wait, so the capture shows cause before effect. The frame is
// stamped when it is handed to the port, not after: the far end can take
// it, answer and finish a transfer before this goroutine runs again, and a
// stamp taken then would date the frame after its own effects.
func (r *Recorder) WriteFrame(frame []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	at := time.Now()
	if err := r.p.WriteFrame(frame); err != nil {
		return err
	}
	r.recordLocked(at, frame)
	return nil
}

// ReadFrame receives a frame from the wrapped port and records it.
func (r *Recorder) ReadFrame(buf []byte) (int, error) {
	n, err := r.p.ReadFrame(buf)
	if err == nil {
		r.record(buf[:n])
	}
	return n, err
}

func (r *Recorder) record(b []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recordLocked(time.Now(), b)
}

// recordLocked appends b stamped at. Stamps are taken under the lock, so
// they never go backwards through the file.
func (r *Recorder) recordLocked(at time.Time, b []byte) {
	if r.err != nil || r.closed {
		return
	}
	ci := gopacket.CaptureInfo{Timestamp: at, Length: len(b), CaptureLength: min(len(b), r.snaplen)}
	if r.err = r.pw.WritePacket(ci, b[:ci.CaptureLength]); r.err == nil {
		r.frames++
	}
}

// Frames returns how many frames the capture holds. It can be fewer than
// the port's frame counters say: a frame the port delivers while the
// recorder closes is not recorded (the capture has ended).
func (r *Recorder) Frames() uint64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.frames
}

// Flush writes buffered records to the underlying writer.
func (r *Recorder) Flush() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.flushLocked()
}

func (r *Recorder) flushLocked() error {
	if r.err == nil && !r.closed {
		r.err = r.bw.Flush()
	}
	return r.err
}

// Err returns the first error the capture met, or nil.
func (r *Recorder) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.err
}

// Close closes the wrapped port, then completes the capture (and closes the file
// CreateRecorder opened). It reports the first error of the three.
func (r *Recorder) Close() error {
	perr := r.p.Close() // first, so that a blocked reader has returned before the last flush
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return perr
	}
	ferr := r.flushLocked()
	r.closed = true
	var cerr error
	if r.closer != nil {
		cerr = r.closer.Close()
	}
	return errors.Join(perr, ferr, cerr)
}

// Stats returns the wrapped port's counters.
func (r *Recorder) Stats() Stats { return r.p.Stats() }

var _ Port = (*Recorder)(nil)
