package verbs

// Protection domains, host memory buffers and memory regions (ibv_pd,
// ibv_mr), and the registration cache's host side.

import (
	"errors"
	"fmt"
	"sync"
	"unsafe"

	"github.com/emunic/emunic/rings"
)

// MR access flags (ibv_access_flags), for RegMR.
const (
	AccessLocalWrite   = rings.MRAccessLocalWrite
	AccessRemoteWrite  = rings.MRAccessRemoteWrite
	AccessRemoteRead   = rings.MRAccessRemoteRead
	AccessRemoteAtomic = rings.MRAccessRemoteAtomic
	AccessZeroBased    = rings.MRAccessZeroBased
	accessAll          = AccessLocalWrite | AccessRemoteWrite | AccessRemoteRead | AccessRemoteAtomic | AccessZeroBased
)

// PD is a protection domain (ibv_pd): a region is reachable only through a
// QP of its own PD. The number is what REG_MR and CREATE_QP carry.
type PD uint32

// AllocPD returns a new protection domain (ibv_alloc_pd). PD numbers are
// unique on the host (its device is what checks them); there is nothing to
// free.
func (v *Provider) AllocPD() PD { return PD(v.pdNext.Add(1)) }

// Buffer is host memory from the arena: the only memory the device can
// reach, so the only memory that can be registered.
type Buffer struct {
	// Addr is the bus address of the first byte.
	Addr rings.Addr

	mu    sync.Mutex
	b     []byte
	mem   *rings.Arena
	v     *Provider
	freed bool
}

// AllocBuffer allocates n bytes of zeroed host memory, 64-byte aligned.
func (v *Provider) AllocBuffer(n int) (*Buffer, error) {
	if n <= 0 {
		return nil, fmt.Errorf("verbs: buffer of %d bytes", n)
	}
	return v.allocBuffer(n)
}

func (v *Provider) allocBuffer(n int) (*Buffer, error) {
	a, err := v.mem.Alloc(n, rings.CacheLine)
	if err != nil {
		return nil, fmt.Errorf("verbs: buffer: %w", err)
	}
	b, err := v.mem.Map(a, n)
	if err != nil {
		_ = v.mem.Free(a)
		return nil, fmt.Errorf("verbs: buffer: %w", err)
	}
	return &Buffer{Addr: a, b: b, mem: v.mem, v: v}, nil
}

// Bytes is the buffer's memory (nil after Free). The device writes into it
// by DMA: read it after the completion that says the data is there.
func (b *Buffer) Bytes() []byte {
	if b == nil {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b
}

// Len is the buffer's size in bytes.
func (b *Buffer) Len() int { return len(b.Bytes()) }

// Free gives the memory back. Registration caches are told first (their
// invalidation callback, as the SPI's registration-cache callback): unused
// cached registrations of the range are deregistered, and ones in use are
// deregistered at their last Put. If any registration on the range is
// still live afterwards (a MR not deregistered, or a cached one in use) the
// memory is not freed and the error wraps ErrBufferRegistered: the device
// could still write into it.
func (b *Buffer) Free() error {
	if b == nil {
		return errors.New("verbs: free of a nil buffer")
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.freed {
		return nil
	}
	n := len(b.b)
	if b.v != nil {
		b.v.invalidate(b.Addr, n)
		if k := b.v.liveMRs(b.Addr, n); k > 0 {
			return fmt.Errorf("%w: %d registration(s) on [%#x, +%d)", ErrBufferRegistered, k, uint64(b.Addr), n)
		}
	}
	if err := b.mem.Free(b.Addr); err != nil {
		return fmt.Errorf("verbs: free buffer at %#x: %w", uint64(b.Addr), err)
	}
	b.freed, b.b = true, nil
	return nil
}

// invalidate runs every registration cache's invalidation callback.
func (v *Provider) invalidate(a rings.Addr, n int) {
	if v.GetExtension(ExtMemoryRegistrationCacheCallback) != nil {
		return
	}
	v.mu.Lock()
	cs := make([]*RegCache, 0, len(v.caches))
	for c := range v.caches {
		cs = append(cs, c)
	}
	v.mu.Unlock()
	for _, c := range cs {
		c.Invalidate(a, n)
	}
}

// liveMRs counts live registrations overlapping [a, a+n): regions, and
// fast-registration STags whose mapping is not seen invalidated.
func (v *Provider) liveMRs(a rings.Addr, n int) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	k := 0
	for _, mr := range v.mrs {
		if overlaps(uint64(mr.Addr), uint64(mr.Len), uint64(a), uint64(n)) {
			k++
		}
	}
	for f := range v.fmrs {
		if f.liveMapping(a, n) {
			k++
		}
	}
	return k
}

func overlaps(a, an, b, bn uint64) bool { return a < b+bn && b < a+an }

// MR is a registered memory region (ibv_mr). iWARP names a region by one
// STag, so LKey and RKey are equal.
type MR struct {
	PD     PD
	LKey   uint32     // the STag, for local SGEs
	RKey   uint32     // the same STag, for the peer's RDMA Write/Read
	Addr   rings.Addr // host address of the first byte
	VA     uint64     // tagged offset of the first byte (0 with AccessZeroBased)
	Len    int
	Access int

	v     *Provider
	cache *RegCache // set when a RegCache owns it
}

// SGE is the scatter/gather element for length bytes at offset off of the
// region (no bounds check here: the device checks every access).
func (mr *MR) SGE(off, length int) rings.SGE {
	return rings.SGE{Addr: mr.VA + uint64(off), Length: uint32(length), LKey: mr.LKey}
}

// TO is the tagged offset of byte off of the region: what the peer puts in
// an RDMA Write's or Read's RemoteAddr, with RKey.
func (mr *MR) TO(off int) uint64 { return mr.VA + uint64(off) }

// RegMR registers a whole buffer (ibv_reg_mr) with access flags
// (Access*). Its VA is its bus address, so a tagged offset is an address.
func (v *Provider) RegMR(pd PD, b *Buffer, access int) (*MR, error) {
	if b == nil {
		return nil, errors.New("verbs: REG_MR: nil buffer")
	}
	mem := b.Bytes()
	if mem == nil {
		return nil, errors.New("verbs: REG_MR: buffer was freed")
	}
	return v.RegMRAddr(pd, b.Addr, len(mem), access)
}

// RegMRAddr registers length bytes of host memory at addr.
func (v *Provider) RegMRAddr(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	return v.regMR(pd, addr, length, access)
}

// regMRCommand is the REG_MR command for a region whose VA is its address.
func regMRCommand(pd PD, addr rings.Addr, length int, access int) rings.Command {
	va := uint64(addr)
	if access&AccessZeroBased != 0 {
		va = 0
	}
	return rings.Command{Opcode: rings.OpRegMR, Addr: addr, Len: uint32(length), Arg0: uint32(pd),
		Arg1: uint32(access), Arg3: va}
}

func checkAccess(access int) error {
	switch {
	case access&^accessAll != 0:
		return fmt.Errorf("verbs: REG_MR: unknown access bits %#x", access&^accessAll)
	case access&(AccessRemoteWrite|AccessRemoteAtomic) != 0 && access&AccessLocalWrite == 0:
		// ibv_reg_mr's rule: a region the peer may write, we may write.
		return errors.New("verbs: REG_MR: remote write or atomic access needs local write")
	}
	return nil
}

func (v *Provider) regMR(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	switch {
	case length <= 0:
		return nil, fmt.Errorf("verbs: REG_MR: length %d", length)
	case uint64(length) > 1<<32-1:
		return nil, fmt.Errorf("verbs: REG_MR: length %d exceeds 4 GiB", length)
	case !v.mem.Contains(addr, length):
		return nil, fmt.Errorf("verbs: REG_MR: [%#x, +%d) is not host memory", uint64(addr), length)
	}
	if err := checkAccess(access); err != nil {
		return nil, err
	}
	c := regMRCommand(pd, addr, length, access)
	res, err := v.doLate(c, func(r rings.Command, err error) {
		// Registered after we gave up: nobody knows the STag, so
		// deregister it (the device must not keep a window on memory
		// the host may reuse).
		if err == nil && r.Status == rings.StatusOK {
			v.submitLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: uint32(r.Result)}, nil)
		}
	})
	if err != nil {
		return nil, err
	}
	stag := uint32(res.Result)
	mr := &MR{PD: pd, LKey: stag, RKey: stag, Addr: addr, VA: c.Arg3, Len: length, Access: access, v: v}
	v.mu.Lock()
	v.mrs[stag] = mr
	v.mu.Unlock()
	return mr, nil
}

// Dereg deregisters the region (ibv_dereg_mr). A region owned by a
// RegCache is given back with the cache's Put instead.
func (mr *MR) Dereg() error {
	switch {
	case mr == nil:
		return errors.New("verbs: DEREG_MR: nil MR")
	case mr.cache != nil:
		return errors.New("verbs: DEREG_MR: the region belongs to a registration cache (Put it)")
	case mr.v == nil:
		return errors.New("verbs: DEREG_MR: the region was not registered with a host")
	}
	return mr.v.deregMR(mr)
}

func (v *Provider) deregMR(mr *MR) error {
	v.mu.Lock()
	live := v.mrs[mr.LKey] == mr
	v.mu.Unlock()
	if !live {
		return fmt.Errorf("verbs: DEREG_MR: STag %#x is not registered", mr.LKey)
	}
	forget := func() {
		v.mu.Lock()
		if v.mrs[mr.LKey] == mr {
			delete(v.mrs, mr.LKey)
		}
		v.mu.Unlock()
	}
	_, err := v.doLate(rings.Command{Opcode: rings.OpDeregMR, Arg0: mr.LKey}, func(_ rings.Command, err error) {
		if err == nil {
			forget() // answered at last: the device has no such region now
		}
	})
	var ce *CommandError
	if err == nil || errors.As(err, &ce) {
		// Refused or done, the device has no such region now. (Not
		// answered: the region stays live, and its memory is not
		// freed, until the device does.)
		forget()
	}
	return err
}

// hostRegistrar registers through the device for a RegCache.
type hostRegistrar struct{ v *Provider }

func (r hostRegistrar) RegMR(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	return r.v.regMR(pd, addr, length, access)
}

func (r hostRegistrar) DeregMR(mr *MR) error { return r.v.deregMR(mr) }

// NewRegCache returns a registration cache that registers through this
// host's device and is invalidated by Buffer.Free.
func (v *Provider) NewRegCache(cfg RegCacheConfig) (*RegCache, error) {
	c := NewRegCache(hostRegistrar{v}, cfg)
	v.mu.Lock()
	v.caches[c] = struct{}{}
	v.mu.Unlock()
	c.onClose = func() {
		v.mu.Lock()
		delete(v.caches, c)
		v.mu.Unlock()
	}
	return c, nil
}

// HostAddr is the bus address of p's first byte when p lies wholly in this
// host's memory (the only memory a region can name): how a consumer that
// is handed a plain []byte finds out whether it can register it rather
// than copy it.
func (v *Provider) HostAddr(p []byte) (rings.Addr, bool) {
	if len(p) == 0 {
		return 0, false
	}
	all, err := v.mem.Map(v.mem.Base(), v.mem.Size())
	if err != nil {
		return 0, false
	}
	base := uintptr(unsafe.Pointer(unsafe.SliceData(all)))
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	if a < base || a-base > uintptr(len(all)) || uintptr(len(p)) > uintptr(len(all))-(a-base) {
		return 0, false
	}
	return v.mem.Base() + rings.Addr(a-base), true
}
