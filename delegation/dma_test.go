package delegation

import (
	"testing"

	"github.com/emunic/emunic/nic/hdr"
	"github.com/emunic/emunic/rings"
)

// faultyDMA is host memory where a range stops answering (a buffer the
// host unmapped behind the device's back, a co-design backing store gone).
type faultyDMA struct {
	*rings.Arena
	bad      rings.Addr
	badLen   int
	faulting bool
}

func (f *faultyDMA) hit(a rings.Addr, n int) bool {
	return f.faulting && a < f.bad+rings.Addr(f.badLen) && f.bad < a+rings.Addr(n)
}

func (f *faultyDMA) ReadAt(p []byte, a rings.Addr) error {
	if f.hit(a, len(p)) {
		return &rings.DMAError{Op: "read", Addr: a, Len: len(p)}
	}
	return f.Arena.ReadAt(p, a)
}

func (f *faultyDMA) WriteAt(p []byte, a rings.Addr) error {
	if f.hit(a, len(p)) {
		return &rings.DMAError{Op: "write", Addr: a, Len: len(p)}
	}
	return f.Arena.WriteAt(p, a)
}

func TestDMAFaultUserBuffer(t *testing.T) {
	var fd *faultyDMA
	o := defaultRigOpts()
	o.dma = func(a *rings.Arena) rings.DMA { fd = &faultyDMA{Arena: a}; return fd }
	r := newRig(t, o)
	r.h.start()
	fd.bad, fd.badLen, fd.faulting = r.h.userBufs[0], int(r.h.userSize), true
	p := pattern(3000, 1)
	r.data(p, hdr.TCPFlagPSH)
	var failed, done *rings.Notification
	for i := range r.h.ntfs {
		n := &r.h.ntfs[i]
		if n.Flags&rings.NtfUserBufDone != 0 && n.Flags&rings.NtfError != 0 {
			failed = n
		} else if n.Flags&rings.NtfUserBufDone != 0 {
			done = n
		}
	}
	if failed == nil || failed.Aux != 0 || failed.Len != 0 {
		t.Fatalf("faulted buffer not returned with an error: %+v", failed)
	}
	if done == nil || done.Aux != 1 || done.Len != 3000 || done.Seq != 5000 {
		t.Fatalf("data not placed in the next buffer: %+v", done)
	}
	if r.e.Counters().DMAErrors != 1 || r.e.Counters().RxBytes != 3000 {
		t.Fatalf("%+v", r.e.Counters())
	}
}

func TestDMAFaultTransmitBuffer(t *testing.T) {
	var fd *faultyDMA
	o := defaultRigOpts()
	o.dma = func(a *rings.Arena) rings.DMA { fd = &faultyDMA{Arena: a}; return fd }
	r := newRig(t, o)
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0})
	buf, _ := r.env.arena.Alloc(4096, 64)
	tx := rings.Tx{Addr: buf, Len: 4096}
	if st := r.e.Send(0, &tx); st != rings.StatusOK {
		t.Fatal(st)
	}
	fd.bad, fd.badLen, fd.faulting = buf, 4096, true
	r.in(pseg{seq: 5000, ack: 1000, flags: hdr.TCPFlagACK, wnd: 0xFFFF}) // the window opens: the read faults
	o2 := r.take()
	if len(o2) != 1 || !o2[0].has(hdr.TCPFlagRST) {
		t.Fatalf("%d frames, want one RST", len(o2))
	}
	if r.h.flags&(rings.NtfError|rings.NtfClosed) != rings.NtfError|rings.NtfClosed || r.info().State != rings.StateClosed {
		t.Fatalf("flags %v state %v", r.h.flags, r.info().State)
	}
}
