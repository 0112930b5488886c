package trace

import (
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

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
	taps  []*recTap
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
	// The RDMA doorbells the step took, before the indices: the host
	// rang them after publishing, and the step took them first.
	if s.Bells != nil {
		for _, b := range *s.Bells {
			r.emit(bellRecord(b))
		}
	}
	// The host's indices as the step begins: the step sees these.
	for _, t := range r.taps {
		t.sync()
	}
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

func (m recDMA) RingTap(l rings.Layout, producer bool, ring *rings.Ring) rings.Tap {
	r := m.r
	t := &recTap{r: r}
	t.init(r.rings, l, producer, ring)
	r.rings++
	r.taps = append(r.taps, t)
	var f uint8
	if producer {
		f = 1
	}
	r.emit(&Record{Kind: KindRing, Ring: t.id, Flags: f, Addr: uint64(l.Base), Val: l.Count, Len: l.EntrySize})
	// The header as the host left it: the device reads its own index
	// from there when it opens the ring (a ring at the address of one
	// destroyed earlier starts where the host reset it).
	r.emit(&Record{Kind: KindRead, Addr: uint64(l.Base), Data: t.mem[:rings.HeaderSize]})
	return t
}

func (r *Recorder) wrote(a rings.Addr, p []byte) {
	rec := writeRecord(a, p, r.w.full)
	r.emit(&rec)
}

// writeRecord is the record of a DMA write of p at a: the bytes when full or
// short, else their SHA-256.
func writeRecord(a rings.Addr, p []byte, full bool) Record {
	rec := Record{Kind: KindWrite, Addr: uint64(a), Len: uint32(len(p)), Data: p}
	if len(p) > maxInlineOut && !full {
		h := sha256.Sum256(p)
		rec.Flags, rec.Data = WriteHashed, h[:]
	}
	return rec
}

// ringTap is what recording and replaying taps share: the ring's memory
// and the shadow of the host's index the device reads (see
// rings.TracedDMA). The host's flags word is shadowed as NEED_WAKEUP for
// good: a traced device rings the host's doorbell and raises its vectors
// whenever it has something for it, so what it does never depends on when
// the host went to sleep.
type ringTap struct {
	id       uint16
	producer bool
	l        rings.Layout
	mem      []byte
	hostOff  int    // the host's index word
	shadow   uint32 // its value as of the start of the step
	flags    uint32 // the host's flags word as the device sees it
	stored   uint32 // a producer's index last stored (entries after it are new)
}

// init sets the tap up in place (the ring keeps pointers into it).
func (t *ringTap) init(id uint16, l rings.Layout, producer bool, ring *rings.Ring) {
	*t = ringTap{id: id, producer: producer, l: l, mem: ring.Mem(), hostOff: rings.OffProducerIndex, flags: rings.FlagNeedWakeup}
	flagsOff := rings.OffProducerFlags
	if producer {
		t.hostOff, flagsOff = rings.OffConsumerIndex, rings.OffConsumerFlags
		t.stored = ring.ProducerIndex()
	}
	t.shadow = t.real(t.hostOff)
	if !producer {
		// Entries the host published before the device opened the ring
		// come with the first step's index, like any others.
		t.shadow = t.real(rings.OffConsumerIndex)
	}
	ring.Redirect(t.hostOff, &t.shadow)
	ring.Redirect(flagsOff, &t.flags)
}

// real loads the header word at off from memory.
func (t *ringTap) real(off int) uint32 {
	return atomic.LoadUint32((*uint32)(unsafe.Pointer(&t.mem[off])))
}

// entries returns the entries from index from up to to (at most a ring's
// worth: an index further ahead is the host's error, which the device
// reports).
func (t *ringTap) entries(from, to uint32) []byte {
	n := min(to-from, t.l.Count)
	es := int(t.l.EntrySize)
	b := make([]byte, 0, int(n)*es)
	for i := to - n; i != to; i++ {
		off := rings.HeaderSize + int(i&(t.l.Count-1))*es
		b = append(b, t.mem[off:off+es]...)
	}
	return b
}

// produced is entries for the device's own: bytes 1..3 of each control
// word are left as zero, since a producer stamps only byte 0 (the phase)
// and leaves the rest as memory had them (see rings.Producer.Commit).
func (t *ringTap) produced(from, to uint32) []byte {
	b := t.entries(from, to)
	es := int(t.l.EntrySize)
	for i := 0; i+es <= len(b); i += es {
		b[i+1], b[i+2], b[i+3] = 0, 0, 0
	}
	return b
}

// stored makes the record of the device's store of its word at off.
func (t *ringTap) storeRecord(off int, v uint32) Record {
	rec := Record{Kind: KindStore, Ring: t.id, Off: uint8(off), Val: v}
	if t.producer && off == rings.OffProducerIndex {
		rec.Data = t.produced(t.stored, v)
		t.stored = v
	}
	return rec
}

// recTap records one ring.
type recTap struct {
	r *Recorder
	ringTap
}

// sync takes the host's index at the start of a step, recording it (and
// the entries it published) when it moved.
func (t *recTap) sync() {
	v := t.real(t.hostOff)
	if v == t.shadow {
		return
	}
	rec := Record{Kind: KindLoad, Ring: t.id, Off: uint8(t.hostOff), Val: v}
	if !t.producer {
		rec.Data = t.entries(t.shadow, v)
	}
	atomic.StoreUint32(&t.shadow, v)
	t.r.emit(&rec)
}

func (t *recTap) Stored(off int, v uint32) {
	rec := t.storeRecord(off, v)
	t.r.emit(&rec)
}

func (t *recTap) Completed(i uint32, e []byte) {
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

// bellRecord is the record of an RDMA doorbell a step took.
func bellRecord(b nic.RegBell) *Record {
	rec := &Record{Kind: KindBell, Val: b.Num}
	if b.CQ {
		rec.Flags, rec.Len = BellCQ, b.Arms
	}
	return rec
}
