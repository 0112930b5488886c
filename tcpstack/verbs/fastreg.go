package verbs

// Fast registration: an STag allocated once (ib_alloc_mr; iWARP verbs'
// Allocate Non-Shared Memory Region STag) and mapped over memory by a work
// request on a QP (IB_WR_REG_MR; iWARP's Fast-Register), invalidated by
// another (LOCAL_INV) or by the peer's Send with Invalidate. Registering
// and deregistering a region for one transfer then costs no device command
// and no wait: the REG_MR goes in the same doorbell as the message that
// advertises the STag, and the message that ends the transfer invalidates
// it (what NFS/RDMA and iSER initiators do on iWARP).

import (
	"errors"
	"fmt"
	"sync"

	"github.com/emunic/emunic/rings"
)

// FastMR is an STag for fast registration. It starts invalid; RegWR maps
// memory under it with a new key, and the mapping ends when the STag is
// invalidated (Invalidated says so). Its methods are for one user at a
// time (the QP's poster), except that the provider reads its mapping for
// Buffer.Free.
type FastMR struct {
	PD PD
	// Bound is the host memory a mapping may lie in, fixed at AllocMR.
	Bound    rings.Addr
	BoundLen int

	v    *Provider
	stag uint32 // the last key's STag

	mu     sync.Mutex
	mapped bool // a REG_MR was posted and no invalidation seen since
	addr   rings.Addr
	n      int
	gone   bool
}

// AllocMR allocates an STag for fast registration in pd (REG_MR with
// MRAccessFastReg, one command): its mappings lie in [addr, addr+n) of
// host memory.
func (v *Provider) AllocMR(pd PD, addr rings.Addr, n int) (*FastMR, error) {
	switch {
	case n <= 0 || uint64(n) > 1<<32-1:
		return nil, fmt.Errorf("verbs: ALLOC_MR: length %d", n)
	case !v.mem.Contains(addr, n):
		return nil, fmt.Errorf("verbs: ALLOC_MR: [%#x, +%d) is not host memory", uint64(addr), n)
	}
	c := rings.Command{Opcode: rings.OpRegMR, Addr: addr, Len: uint32(n), Arg0: uint32(pd), Arg1: rings.MRAccessFastReg}
	res, err := v.doLate(c, func(r rings.Command, err error) {
		if err == nil && r.Status == rings.StatusOK {
			v.submitLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: uint32(r.Result)}, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	f := &FastMR{PD: pd, Bound: addr, BoundLen: n, v: v, stag: uint32(res.Result)}
	v.mu.Lock()
	v.fmrs[f] = struct{}{}
	v.mu.Unlock()
	return f, nil
}

// ErrFastMRBusy: RegWR of an STag whose last mapping was not seen
// invalidated.
var ErrFastMRBusy = errors.New("verbs: REG_MR work request: the STag is still mapped")

// RegWR returns the REG_MR work request that maps the n bytes of host
// memory at addr under the STag with the next key, tagged from their
// address (TO = address), with access, and that STag. The mapping is live
// from the time the caller posts the request (the device runs it in its
// place in the send queue: what is posted after it may use the STag)
// until Invalidated. The request is unsignaled; a failure completes it
// with an error and the QP.
func (f *FastMR) RegWR(addr rings.Addr, n int, access int) (rings.SendWR, uint32, error) {
	if err := checkAccess(access); err != nil {
		return rings.SendWR{}, 0, err
	}
	if n <= 0 || addr < f.Bound || int(addr-f.Bound) > f.BoundLen || n > f.BoundLen-int(addr-f.Bound) {
		return rings.SendWR{}, 0, fmt.Errorf("verbs: REG_MR work request: [%#x, +%d) outside the STag's bound", uint64(addr), n)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.mapped || f.gone {
		return rings.SendWR{}, 0, ErrFastMRBusy
	}
	f.stag = f.stag&^0xFF | uint32(uint8(f.stag)+1)
	f.mapped, f.addr, f.n = true, addr, n
	w := rings.SendWR{Opcode: rings.WRRegMR, RemoteAddr: uint64(addr), RKey: f.stag, ImmData: uint64(access), NumSGE: 1}
	w.SGL[0] = rings.SGE{Addr: uint64(addr), Length: uint32(n)}
	return w, f.stag, nil
}

// Invalidated tells the STag stag was invalidated: the completion of a
// Send with Invalidate from the peer named it, or a LOCAL_INV of it
// completed. It says whether stag is the current mapping's STag (else it
// changes nothing).
func (f *FastMR) Invalidated(stag uint32) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.mapped || stag != f.stag {
		return false
	}
	f.mapped = false
	return true
}

// STag is the STag of the last mapping.
func (f *FastMR) STag() uint32 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.stag
}

// Dereg gives the STag back to the device (DEREG_MR), ending any mapping.
func (f *FastMR) Dereg() error {
	f.mu.Lock()
	if f.gone {
		f.mu.Unlock()
		return errors.New("verbs: DEREG_MR: the fast-registration STag is already deregistered")
	}
	stag := f.stag
	f.mu.Unlock()
	forget := func() {
		f.mu.Lock()
		f.gone, f.mapped = true, false
		f.mu.Unlock()
		f.v.mu.Lock()
		delete(f.v.fmrs, f)
		f.v.mu.Unlock()
	}
	_, err := f.v.doLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: stag}, func(_ rings.Command, err error) {
		if err == nil {
			forget()
		}
	})
	var ce *CommandError
	if err == nil || errors.As(err, &ce) {
		forget()
	}
	return err
}

// liveMapping says whether f maps memory overlapping [a, a+n).
func (f *FastMR) liveMapping(a rings.Addr, n int) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mapped && overlaps(uint64(f.addr), uint64(f.n), uint64(a), uint64(n))
}

// Mapped says whether a REG_MR was posted for the STag and no invalidation
// of it seen since: the device may hold a mapping under it.
func (f *FastMR) Mapped() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mapped
}

// HostMemory is the whole of the host memory (the arena): the bound of an
// STag that may map any buffer of the host.
func (v *Provider) HostMemory() (rings.Addr, int) { return v.mem.Base(), v.mem.Size() }
