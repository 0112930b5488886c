package trace

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// DeviceInfo is a KindDevice record's JSON: what a replay needs to build
// the same device.
type DeviceInfo struct {
	Name      string     `json:"name"`
	Config    nic.Config `json:"config"` // Tracer and Manual are not kept
	ArenaBase uint64     `json:"arena_base"`
	ArenaSize int        `json:"arena_size"`
}

// Recorder is one device's tracer (a nic.Tracer) writing to a shared
// Writer. Everything it is told happens on the device's unit goroutine.
type Recorder struct {
	w     *Writer
	dev   uint8
	info  DeviceInfo
	mem   rings.DMA
	rings uint16
	step  uint64 // the current step (0: before the first)
}

// NewDevice adds a device to the trace and returns its recorder, to be set
// as the device's nic.Config.Tracer (with a STagSeed: a random one cannot
// be replayed). One recorder serves one device.
func (w *Writer) NewDevice(name string) *Recorder {
	w.mu.Lock()
	dev := w.devs
	w.devs++
	w.mu.Unlock()
	return &Recorder{w: w, dev: dev, info: DeviceInfo{Name: name}}
}

func (r *Recorder) emit(rec *Record) {
	rec.Dev = r.dev
	_ = r.w.Write(rec) // the first error stays in the Writer
}

// Attach implements nic.Tracer: it writes the device record and returns
// memory that records reads and writes and a port that records frames.
func (r *Recorder) Attach(cfg nic.Config, m rings.DMA, p port.Port) (rings.DMA, port.Port) {
	cfg.Tracer, cfg.Manual = nil, false
	r.info.Config = cfg
	if a, ok := m.(*rings.Arena); ok {
		r.info.ArenaBase, r.info.ArenaSize = uint64(a.Base()), a.Size()
	}
	js, err := json.Marshal(r.info)
	if err != nil {
		panic(fmt.Sprintf("trace: device info: %v", err)) // a nic.Config always marshals
	}
	r.emit(&Record{Kind: KindDevice, Data: js})
	r.mem = m
	pp, ok := p.(nic.PollPort)
	if !ok {
		return recDMA{r}, p // nic.New refuses it
	}
	return recDMA{r}, &recPort{Port: p, pp: pp, r: r}
}

// WrapVectors implements nic.Tracer.
func (r *Recorder) WrapVectors(v nic.Vectors) nic.Vectors {
	wrap := func(d rings.Doorbell, n uint8) rings.Doorbell {
		if d == nil {
			return nil
		}
		return recVector{r, d, n}
	}
	return nic.Vectors{Notify: wrap(v.Notify, VecNotify), TxSpace: wrap(v.TxSpace, VecTxSpace), Command: wrap(v.Command, VecCommand)}
}

// Step implements nic.Tracer.
func (r *Recorder) Step(s nic.StepInfo) {
	r.step = s.N
	var f uint8
	if s.Doorbell {
		f |= StepDoorbell
	}
	if s.Stop {
		f |= StepStop
	}
	if s.Parked {
		f |= StepParked
	}
	r.emit(&Record{Kind: KindStep, N: s.N, Now: s.Now, Flags: f})
}

// recDMA is host memory as a recording device sees it.
type recDMA struct{ r *Recorder }

func (m recDMA) ReadAt(p []byte, a rings.Addr) error {
	err := m.r.mem.ReadAt(p, a)
	if err == nil {
		m.r.emit(&Record{Kind: KindRead, Addr: uint64(a), Data: p})
	}
	return err
}

func (m recDMA) WriteAt(p []byte, a rings.Addr) error {
	err := m.r.mem.WriteAt(p, a)
	if err == nil {
		m.r.wrote(a, p)
	}
	return err
}

func (m recDMA) Map(a rings.Addr, n int) ([]byte, error) {
	b, err := m.r.mem.Map(a, n)
	if err == nil {
		m.r.emit(&Record{Kind: KindRead, Addr: uint64(a), Data: b})
	}
	return b, err
}

func (m recDMA) Raw() rings.DMA               { return m.r.mem }
func (m recDMA) Wrote(a rings.Addr, b []byte) { m.r.wrote(a, b) }

func (m recDMA) RingTap(l rings.Layout, producer bool) rings.Tap {
	r := m.r
	t := &recTap{r: r, id: r.rings, producer: producer}
	r.rings++
	var f uint8
	if producer {
		f = 1
	}
	r.emit(&Record{Kind: KindRing, Ring: t.id, Flags: f, Addr: uint64(l.Base), Val: l.Count, Len: l.EntrySize})
	// The header as the host left it: the device reads its own index
	// from there when it opens the ring (a ring at the address of one
	// destroyed earlier starts where the host reset it).
	if b, err := r.mem.Map(l.Base, rings.HeaderSize); err == nil {
		r.emit(&Record{Kind: KindRead, Addr: uint64(l.Base), Data: b})
	}
	return t
}

func (r *Recorder) wrote(a rings.Addr, p []byte) {
	rec := Record{Kind: KindWrite, Addr: uint64(a), Len: uint32(len(p)), Data: p}
	if len(p) > maxInlineOut && !r.w.full {
		h := sha256.Sum256(p)
		rec.Flags, rec.Data = WriteHashed, h[:]
	}
	r.emit(&rec)
}

// hostWord reports whether the header word at off is the host's (the other
// side's) on a ring the device produces (producer) or consumes.
func hostWord(off int, producer bool) bool {
	if producer {
		return off == rings.OffConsumerIndex || off == rings.OffConsumerFlags
	}
	return off == rings.OffProducerIndex || off == rings.OffProducerFlags
}

// recTap records one ring's header words.
type recTap struct {
	r        *Recorder
	id       uint16
	producer bool
	step     uint64    // the step the load ordinals count in
	ord      [4]uint32 // loads of each header word this step
	seen     [4]uint32 // the host words' last values (a fresh ring's are 0)
	stored   uint32    // the producer index last stored (entries after it are new)
	started  bool
}

func (t *recTap) countLoad(off int) uint32 {
	if t.step != t.r.step {
		t.step, t.ord = t.r.step, [4]uint32{}
	}
	t.ord[wordIndex(off)]++
	return t.ord[wordIndex(off)]
}

func (t *recTap) Load(ring *rings.Ring, off int) uint32 {
	v := ring.RawLoad(off)
	if !hostWord(off, t.producer) {
		return v
	}
	ord := t.countLoad(off)
	if v == t.seen[wordIndex(off)] {
		return v
	}
	rec := Record{Kind: KindLoad, Ring: t.id, Off: uint8(off), Ord: ord, Val: v}
	if off == rings.OffProducerIndex {
		rec.Data = entries(ring, t.seen[wordIndex(off)], v)
	}
	t.seen[wordIndex(off)] = v
	t.r.emit(&rec)
	return v
}

// entries returns the entries published from index from up to to (at most
// a ring's worth: an index further ahead is the host's error, which the
// device reports).
func entries(ring *rings.Ring, from, to uint32) []byte {
	l := ring.Layout()
	n := min(to-from, l.Count)
	b := make([]byte, 0, int(n)*int(l.EntrySize))
	for i := to - n; i != to; i++ {
		b = append(b, ring.Entry(i)...)
	}
	return b
}

// produced is entries for the device's own: bytes 1..3 of each control
// word are left as zero, since a producer stamps only byte 0 (the phase)
// and leaves the rest as memory had them (see rings.Producer.Commit).
func produced(ring *rings.Ring, from, to uint32) []byte {
	b := entries(ring, from, to)
	es := int(ring.Layout().EntrySize)
	for i := 0; i+es <= len(b); i += es {
		b[i+1], b[i+2], b[i+3] = 0, 0, 0
	}
	return b
}

func (t *recTap) Stored(ring *rings.Ring, off int, v uint32) {
	rec := Record{Kind: KindStore, Ring: t.id, Off: uint8(off), Val: v}
	if t.producer && off == rings.OffProducerIndex {
		rec.Data = produced(ring, t.stored, v)
		t.stored = v
	}
	t.r.emit(&rec)
}

func (t *recTap) Completed(ring *rings.Ring, i uint32, e []byte) {
	t.r.emit(&Record{Kind: KindComplete, Ring: t.id, Val: i, Data: e})
}

// recPort records the frames the unit takes from the port and sends.
type recPort struct {
	port.Port
	pp nic.PollPort
	r  *Recorder
}

func (p *recPort) TryReadFrame(buf []byte) (int, bool, error) {
	n, ok, err := p.pp.TryReadFrame(buf)
	if ok {
		switch {
		case err == nil:
			p.r.emit(&Record{Kind: KindFrameIn, Data: buf[:n]})
		case errors.Is(err, port.ErrFrameTooBig):
			p.r.emit(&Record{Kind: KindFrameIn, Flags: FrameTooBig})
		}
	}
	return n, ok, err
}

func (p *recPort) SetReadableFunc(fn func()) { p.pp.SetReadableFunc(fn) }
func (p *recPort) Pending() int              { return p.pp.Pending() }

func (p *recPort) WriteFrame(f []byte) error {
	err := p.Port.WriteFrame(f)
	rec := Record{Kind: KindFrameOut, Data: f}
	if err != nil {
		rec.Flags = FramePortError // what the port answered is an input too
	}
	p.r.emit(&rec)
	return err
}

type recVector struct {
	r   *Recorder
	d   rings.Doorbell
	vec uint8
}

func (v recVector) Kick() {
	v.r.emit(&Record{Kind: KindIrq, Vec: v.vec})
	v.d.Kick()
}

// wordIndex numbers the four header words (they are a cache line apart).
func wordIndex(off int) int { return off / rings.CacheLine & 3 }
