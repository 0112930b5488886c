package trace

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync/atomic"
	"unsafe"

	"github.com/emunic/emunic/nic"
	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// Divergence is the first place a replayed device did something other than
// what the trace recorded.
type Divergence struct {
	Dev     uint8
	Name    string
	Step    uint64
	Now     int64
	Want    *Record // nil: the device did something the trace does not have
	Got     *Record // nil: the device did not do what the trace has
	Why     string
	Context []Record // the outputs of the step that matched before it
}

func (d *Divergence) Error() string {
	return fmt.Sprintf("device %s diverges at step %d: %s", d.Name, d.Step, d.Why)
}

// Result is what a replay found.
type Result struct {
	Devices    int
	Steps      uint64 // steps replayed, all devices
	Outputs    uint64 // output records checked
	Inputs     uint64 // input records fed
	Divergence *Divergence
}

// Replay feeds each device of a trace its recorded inputs, step by step, on
// a fresh device, and checks every output against the trace. It stops at
// the first divergence (Result.Divergence); err is for a trace it cannot
// replay at all.
func Replay(r io.Reader) (Result, error) {
	_, recs, err := ReadAll(r)
	if err != nil {
		return Result{}, err
	}
	return ReplayRecords(recs, nil)
}

// ReplayRecords is Replay on decoded records. alter, if set, changes each
// device's configuration before it is built (a test's deliberately altered
// device).
func ReplayRecords(recs []Record, alter func(*nic.Config)) (Result, error) {
	var res Result
	devs := map[uint8][]Record{}
	var order []uint8
	for _, r := range recs {
		if _, ok := devs[r.Dev]; !ok {
			order = append(order, r.Dev)
		}
		devs[r.Dev] = append(devs[r.Dev], r)
	}
	for _, dev := range order {
		res.Devices++
		rp, err := newReplayer(dev, devs[dev], alter)
		if err != nil {
			return res, err
		}
		rp.run()
		res.Steps += rp.steps
		res.Outputs += rp.outputs
		res.Inputs += rp.inputs
		if rp.div != nil {
			res.Divergence = rp.div
			return res, nil
		}
	}
	return res, nil
}

// replayer is one device's tracer in a replay.
type replayer struct {
	dev   uint8
	info  DeviceInfo
	alter func(*nic.Config)
	recs  []Record
	pos   int // next record not yet in a step group
	arena *rings.Arena
	d     *nic.Device

	// the current step's records
	step   uint64
	now    int64
	outs   []Record
	outPos int
	loads  []Record // not yet applied
	bells  []Record
	reads  []Record
	frames []Record
	taps   []*repTap
	div    *Divergence

	steps, outputs, inputs uint64
}

func newReplayer(dev uint8, recs []Record, alter func(*nic.Config)) (*replayer, error) {
	if len(recs) == 0 || recs[0].Kind != KindDevice {
		return nil, fmt.Errorf("%w: device %d has no device record first", ErrCorrupt, dev)
	}
	rp := &replayer{dev: dev, recs: recs, pos: 1, alter: alter}
	if err := json.Unmarshal(recs[0].Data, &rp.info); err != nil {
		return nil, fmt.Errorf("%w: device %d: %v", ErrCorrupt, dev, err)
	}
	if rp.info.ArenaSize <= 0 || rp.info.ArenaSize > 1<<34 {
		return nil, fmt.Errorf("%w: device %d: host memory of %d bytes", ErrCorrupt, dev, rp.info.ArenaSize)
	}
	if rings.Addr(rp.info.ArenaBase) != rings.ArenaBase {
		return nil, fmt.Errorf("trace: device %s: host memory at %#x, this build's is at %#x", rp.info.Name, rp.info.ArenaBase, uint64(rings.ArenaBase))
	}
	return rp, nil
}

// diverge records the first divergence.
func (rp *replayer) diverge(want, got *Record, why string, args ...any) {
	if rp.div != nil {
		return
	}
	rp.div = &Divergence{Dev: rp.dev, Name: rp.info.Name, Step: rp.step, Now: rp.now, Why: fmt.Sprintf(why, args...)}
	if want != nil {
		c := *want
		rp.div.Want = &c
	}
	if got != nil {
		c := *got
		c.Data = slices.Clone(got.Data)
		rp.div.Got = &c
	}
	lo := max(0, rp.outPos-3)
	rp.div.Context = slices.Clone(rp.outs[lo:rp.outPos])
}

// group takes the records up to the next Step record (or the end) as the
// current step's.
func (rp *replayer) group() {
	rp.outs, rp.outPos, rp.loads, rp.reads, rp.frames = rp.outs[:0], 0, rp.loads[:0], rp.reads[:0], rp.frames[:0]
	rp.bells = rp.bells[:0]
	for ; rp.pos < len(rp.recs) && rp.recs[rp.pos].Kind != KindStep; rp.pos++ {
		r := rp.recs[rp.pos]
		switch {
		case r.Kind.IsOutput():
			rp.outs = append(rp.outs, r)
		case r.Kind == KindLoad:
			rp.loads = append(rp.loads, r)
		case r.Kind == KindRead:
			rp.reads = append(rp.reads, r)
		case r.Kind == KindFrameIn:
			rp.frames = append(rp.frames, r)
		case r.Kind == KindBell:
			rp.bells = append(rp.bells, r)
		}
	}
}

// endGroup checks that the step did everything the trace says it did.
func (rp *replayer) endGroup() {
	if rp.div != nil {
		return
	}
	if rp.outPos < len(rp.outs) {
		rp.diverge(&rp.outs[rp.outPos], nil, "the device stopped short of a recorded %v", rp.outs[rp.outPos].Kind)
		return
	}
	for _, l := range rp.loads {
		rp.diverge(&l, nil, "the trace has ring %d's index move, but the device has no such ring", l.Ring)
		return
	}
	if len(rp.reads) > 0 {
		rp.diverge(&rp.reads[0], nil, "the device never read %d bytes at %#x", len(rp.reads[0].Data), rp.reads[0].Addr)
		return
	}
	if len(rp.frames) > 0 {
		rp.diverge(&rp.frames[0], nil, "the device never took a recorded frame from the port")
	}
}

// output checks one thing the device did against the next recorded output.
func (rp *replayer) output(got *Record) {
	if rp.div != nil {
		return
	}
	rp.outputs++
	if rp.outPos >= len(rp.outs) {
		rp.diverge(nil, got, "the device did more than the trace has: %v", got.Kind)
		return
	}
	want := &rp.outs[rp.outPos]
	if why := sameOutput(want, got); why != "" {
		rp.diverge(want, got, "%s", why)
		return
	}
	rp.outPos++
}

// sameOutput compares two output records ("" when they agree).
func sameOutput(want, got *Record) string {
	if want.Kind != got.Kind {
		return fmt.Sprintf("trace has %v, device did %v", want.Kind, got.Kind)
	}
	switch {
	case want.Ring != got.Ring || want.Off != got.Off || want.Val != got.Val:
		return fmt.Sprintf("%v differs (ring %d word %d value %d, trace ring %d word %d value %d)", got.Kind, got.Ring, got.Off, got.Val, want.Ring, want.Off, want.Val)
	case want.Addr != got.Addr || want.Len != got.Len || want.Flags != got.Flags || want.Vec != got.Vec:
		return fmt.Sprintf("%v differs in its address, length or flags", got.Kind)
	case !bytes.Equal(want.Data, got.Data):
		return fmt.Sprintf("%v differs in its bytes (first at offset %d)", got.Kind, firstDiff(want.Data, got.Data))
	}
	return ""
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

func (rp *replayer) run() {
	cfg := rp.info.Config
	if rp.alter != nil {
		rp.alter(&cfg)
	}
	cfg.Tracer, cfg.Manual = rp, true
	var err error
	if rp.arena, err = rings.NewArena(rp.info.ArenaSize); err != nil {
		rp.diverge(nil, nil, "host memory: %v", err)
		return
	}
	// The ring configuration is in the first four ring records (the
	// device opens command, notification, transmit and receive in that
	// order at Start).
	var lays []rings.Layout
	for _, r := range rp.recs {
		if r.Kind == KindRing && len(lays) < 4 {
			lays = append(lays, rings.Layout{Base: rings.Addr(r.Addr), Count: r.Val, EntrySize: r.Len})
		}
	}
	if len(lays) < 4 {
		rp.diverge(nil, nil, "the trace has %d ring records before its first step, not 4", len(lays))
		return
	}
	rp.d, err = nic.New(cfg, rp.arena, newRepPort(rp))
	if err != nil {
		rp.diverge(nil, nil, "device: %v", err)
		return
	}
	rp.group() // the records of Start
	vec := nic.Vectors{Notify: repVector{rp, VecNotify}, TxSpace: repVector{rp, VecTxSpace}, Command: repVector{rp, VecCommand}}
	if err := rp.d.Start(nic.RingConfig{Command: lays[0], Notify: lays[1], Tx: lays[2], Rx: lays[3]}, vec); err != nil {
		rp.diverge(nil, nil, "start: %v", err)
		return
	}
	for rp.div == nil && rp.pos < len(rp.recs) {
		s := rp.recs[rp.pos]
		if s.Flags&StepStop != 0 {
			rp.d.StopAt(s.Now) // its final step
			break
		}
		rp.d.Step(s.Now, s.Flags&StepDoorbell != 0, s.Flags&StepParked != 0)
	}
	rp.endGroup()
}

// Step implements nic.Tracer: the device starts the next recorded step.
func (rp *replayer) Step(s nic.StepInfo) {
	rp.endGroup()
	if rp.div != nil {
		return
	}
	if rp.pos >= len(rp.recs) {
		rp.diverge(nil, nil, "the device runs a step past the end of the trace")
		return
	}
	r := rp.recs[rp.pos]
	if r.N != s.N || r.Now != s.Now || (r.Flags&StepStop != 0) != s.Stop || (r.Flags&StepParked != 0) != s.Parked {
		rp.diverge(&r, nil, "step %d at %d does not match the trace's step %d at %d", s.N, s.Now, r.N, r.Now)
		return
	}
	rp.step, rp.now = s.N, s.Now
	rp.steps++
	rp.pos++
	rp.group()
	// The RDMA doorbells the recorded step took are the step's, whatever
	// the replayed device holds (no host rings it).
	if s.Bells != nil {
		bs := (*s.Bells)[:0]
		for _, b := range rp.bells {
			bs = append(bs, nic.RegBell{CQ: b.Flags&BellCQ != 0, Num: b.Val, Arms: b.Len})
			rp.inputs++
		}
		*s.Bells = bs
	} else if len(rp.bells) > 0 {
		rp.diverge(&rp.bells[0], nil, "the trace has an RDMA doorbell, but the device takes none")
		return
	}
	// The host's indices as the recorded step began.
	rest := rp.loads[:0]
	for _, l := range rp.loads {
		if int(l.Ring) < len(rp.taps) && int(l.Off) == rp.taps[l.Ring].hostOff {
			rp.taps[l.Ring].apply(l)
			rp.inputs++
			continue
		}
		rest = append(rest, l)
	}
	rp.loads = rest
}

func (rp *replayer) Attach(_ nic.Config, _ rings.DMA, p port.Port) (rings.DMA, port.Port) {
	return repDMA{rp}, p
}
func (rp *replayer) WrapVectors(v nic.Vectors) nic.Vectors { return v }

// repDMA is host memory as the trace gave it to the device: each read is
// served the bytes the recording read, at the moment the device reads.
type repDMA struct{ rp *replayer }

func (m repDMA) feed(a rings.Addr, n int) {
	rp := m.rp
	if rp.div != nil {
		return
	}
	if len(rp.reads) == 0 {
		rp.diverge(nil, &Record{Kind: KindRead, Addr: uint64(a), Len: uint32(n)}, "the device read %d bytes at %#x, which the trace does not have", n, uint64(a))
		return
	}
	r := rp.reads[0]
	if r.Addr != uint64(a) || len(r.Data) != n {
		rp.diverge(&r, &Record{Kind: KindRead, Addr: uint64(a), Len: uint32(n)}, "the device read %d bytes at %#x, the trace %d at %#x", n, uint64(a), len(r.Data), r.Addr)
		return
	}
	rp.reads = rp.reads[1:]
	rp.inputs++
	_ = rp.arena.WriteAt(r.Data, a)
}

func (m repDMA) ReadAt(p []byte, a rings.Addr) error {
	if err := rings.Check(m.rp.arena, a, len(p)); err != nil {
		return m.rp.arena.ReadAt(p, a) // the same error
	}
	m.feed(a, len(p))
	return m.rp.arena.ReadAt(p, a)
}

func (m repDMA) Map(a rings.Addr, n int) ([]byte, error) {
	b, err := m.rp.arena.Map(a, n)
	if err == nil {
		m.feed(a, n)
	}
	return b, err
}

func (m repDMA) WriteAt(p []byte, a rings.Addr) error {
	err := m.rp.arena.WriteAt(p, a)
	if err == nil {
		m.Wrote(a, p)
	}
	return err
}

func (m repDMA) Raw() rings.DMA { return m.rp.arena }

func (m repDMA) Wrote(a rings.Addr, p []byte) {
	rp := m.rp
	// Hashed or whole as the recording kept it (--full-writes).
	full := rp.outPos < len(rp.outs) && rp.outs[rp.outPos].Kind == KindWrite && rp.outs[rp.outPos].Flags&WriteHashed == 0
	rec := writeRecord(a, p, full)
	rp.output(&rec)
}

func (m repDMA) RingTap(l rings.Layout, producer bool, ring *rings.Ring) rings.Tap {
	rp := m.rp
	// The header as the recording read it, before the tap takes the
	// host's index from it.
	if rings.Check(rp.arena, l.Base, rings.HeaderSize) == nil {
		m.feed(l.Base, rings.HeaderSize)
	}
	t := &repTap{rp: rp}
	t.init(uint16(len(rp.taps)), l, producer, ring)
	rp.taps = append(rp.taps, t)
	var f uint8
	if producer {
		f = 1
	}
	rp.output(&Record{Kind: KindRing, Ring: t.id, Flags: f, Addr: uint64(l.Base), Val: l.Count, Len: l.EntrySize})
	return t
}

// repTap replays one ring.
type repTap struct {
	rp *replayer
	ringTap
}

// apply is a recorded move of the host's index at the start of a step: the
// entries it published go into the ring, the index into the shadow (and
// memory).
func (t *repTap) apply(l Record) {
	if !t.producer {
		es := t.l.EntrySize
		n := uint32(len(l.Data)) / es
		for k := uint32(0); k < n; k++ {
			off := rings.HeaderSize + int((l.Val-n+k)&(t.l.Count-1))*int(es)
			copy(t.mem[off:off+int(es)], l.Data[k*es:(k+1)*es])
		}
	}
	atomic.StoreUint32((*uint32)(unsafe.Pointer(&t.mem[t.hostOff])), l.Val)
	atomic.StoreUint32(&t.shadow, l.Val)
}

func (t *repTap) Stored(off int, v uint32) {
	rec := t.storeRecord(off, v)
	t.rp.output(&rec)
}

func (t *repTap) Completed(i uint32, e []byte) {
	t.rp.output(&Record{Kind: KindComplete, Ring: t.id, Val: i, Data: e})
}

// repPort gives the device the recorded frames and checks what it sends.
type repPort struct {
	rp *replayer
}

func newRepPort(rp *replayer) *repPort { return &repPort{rp: rp} }

func (p *repPort) TryReadFrame(buf []byte) (int, bool, error) {
	rp := p.rp
	if len(rp.frames) == 0 || rp.div != nil {
		return 0, false, nil
	}
	f := rp.frames[0]
	rp.frames = rp.frames[1:]
	rp.inputs++
	if f.Flags&FrameTooBig != 0 {
		return 0, true, port.ErrFrameTooBig
	}
	if len(f.Data) > len(buf) {
		rp.diverge(&f, nil, "a recorded frame of %d bytes is longer than the device's buffer (%d)", len(f.Data), len(buf))
		return 0, false, nil
	}
	return copy(buf, f.Data), true, nil
}

func (p *repPort) SetReadableFunc(func()) {}
func (p *repPort) Pending() int           { return len(p.rp.frames) }

// errPortRefused is what a replayed port answers where the recorded one
// refused a frame.
var errPortRefused = errors.New("trace: the recorded port refused this frame")

func (p *repPort) WriteFrame(f []byte) error {
	rp := p.rp
	got := Record{Kind: KindFrameOut, Data: f}
	if rp.outPos < len(rp.outs) && rp.outs[rp.outPos].Kind == KindFrameOut {
		got.Flags = rp.outs[rp.outPos].Flags & FramePortError
	}
	rp.output(&got)
	if got.Flags&FramePortError != 0 {
		return errPortRefused
	}
	return nil
}

func (p *repPort) ReadFrame([]byte) (int, error) { return 0, port.ErrClosed }
func (p *repPort) Close() error                  { return nil }
func (p *repPort) Stats() port.Stats             { return port.Stats{} }

type repVector struct {
	rp  *replayer
	vec uint8
}

func (v repVector) Kick() { v.rp.output(&Record{Kind: KindIrq, Vec: v.vec}) }
