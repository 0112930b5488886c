package lwio

import (
	"fmt"
	"unsafe"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// The client's memory: where the bytes of a transfer are for the NIC.
// Three cases, as the source has them:
//
//   - memory from Alloc, registered once for the client's life: used in
//     place (zero copy);
//   - other host memory (the only memory the NIC reaches) of at least
//     RegisterMin bytes: registered for the transfer through the client's
//     registration cache, so a buffer used again costs no command, and
//     used in place;
//   - anything else (a small transfer, where a copy costs less than a
//     registration, or memory outside host memory, which no region can
//     name): copied through a pre-registered staging buffer.

// Alloc returns n bytes of host memory registered for the server's RDMA
// Writes. ReadAt into it and WriteAt from it are zero-copy: the NIC places
// read data there and takes write data from there. It lives until Close.
func (c *Client) Alloc(n int) ([]byte, error) {
	b, err := c.v.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	mr, err := c.v.RegMR(c.pd, b, verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
	if err != nil {
		_ = b.Free()
		return nil, err
	}
	c.regMu.Lock()
	c.regions = append(c.regions, &Memory{buf: b, mem: b.Bytes(), mr: mr})
	c.regMu.Unlock()
	return b.Bytes(), nil
}

// lookup finds p inside memory from Alloc: its MR and offset.
func (c *Client) lookup(p []byte) (*verbs.MR, int, bool) {
	if len(p) == 0 {
		return nil, 0, false
	}
	a := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	c.regMu.RLock()
	for _, r := range c.regions {
		base := uintptr(unsafe.Pointer(unsafe.SliceData(r.mem)))
		if a >= base && a+uintptr(len(p)) <= base+uintptr(len(r.mem)) {
			c.regMu.RUnlock()
			return r.mr, int(a - base), true
		}
	}
	c.regMu.RUnlock()
	if c.primary != nil {
		return c.primary.lookup(p) // a link: the primary's memory (same PD)
	}
	return nil, 0, false
}

// dataRef is where a transfer's bytes are: off bytes into mr. cached: mr
// came from the registration cache and is given back when the request
// completes.
type dataRef struct {
	mr     *verbs.MR
	off    int
	cached bool
}

// Access a transfer's memory is registered with: a read's destination is
// written by the server's NIC, a write's source only read by ours.
const (
	accessRead  = verbs.AccessLocalWrite | verbs.AccessRemoteWrite
	accessWrite = 0
)

// ref finds a registration for p (ok false: p must be copied). Called
// without c.mu: a cache miss is a REG_MR command.
func (c *Client) ref(p []byte, access int) (dataRef, bool, error) {
	if mr, off, ok := c.lookup(p); ok {
		return dataRef{mr: mr, off: off}, true, nil
	}
	if len(p) < c.cfg.RegisterMin {
		return dataRef{}, false, nil
	}
	addr, ok := c.v.HostAddr(p)
	if !ok {
		return dataRef{}, false, nil
	}
	mr, err := c.cache.Get(c.pd, addr, len(p), access)
	if err != nil {
		return dataRef{}, false, fmt.Errorf("lwio: register %d bytes: %w", len(p), err)
	}
	return dataRef{mr: mr, off: int(addr - mr.Addr), cached: true}, true, nil
}

// pagesRef finds registrations for every page of a vectored request,
// registering each stretch of host memory the pages cover contiguously as
// one region (not page by page). ok false: some page must be copied, and
// nothing is held.
func (c *Client) pagesRef(pages [][]byte, access int) ([]dataRef, bool, error) {
	refs := make([]dataRef, len(pages))
	addrs := make([]rings.Addr, len(pages))
	for i, p := range pages {
		if mr, off, ok := c.lookup(p); ok {
			refs[i] = dataRef{mr: mr, off: off}
			continue
		}
		a, ok := c.v.HostAddr(p)
		if !ok {
			return nil, false, nil
		}
		addrs[i] = a
	}
	for i := 0; i < len(pages); {
		if refs[i].mr != nil {
			i++
			continue
		}
		// The stretch of pages i..j-1 that follow one another in host
		// memory.
		j, n := i+1, len(pages[i])
		for j < len(pages) && refs[j].mr == nil && addrs[j] == addrs[i]+rings.Addr(n) {
			n += len(pages[j])
			j++
		}
		var mr *verbs.MR
		var err error
		if n >= c.cfg.RegisterMin {
			mr, err = c.cache.Get(c.pd, addrs[i], n, access)
		}
		if mr == nil {
			c.putRefs(refs)
			return nil, false, err
		}
		for k := i; k < j; k++ {
			// Every page holds the one Get; putRefs gives it back once.
			refs[k] = dataRef{mr: mr, off: int(addrs[k] - mr.Addr), cached: k == i}
		}
		i = j
	}
	return refs, true, nil
}

// putRefs gives back the cached registrations of refs.
func (c *Client) putRefs(refs []dataRef) {
	for _, r := range refs {
		if r.cached {
			_ = c.cache.Put(r.mr)
		}
	}
}

// hold records refs' cached registrations on cl, given back when it
// completes; it counts the transfer zero-copy (and registered).
func (c *Client) hold(cl *Call, refs ...dataRef) {
	c.st.zeroCopy.Add(1)
	for _, r := range refs {
		if r.cached {
			cl.regs = append(cl.regs, r.mr)
		}
	}
	if len(cl.regs) > 0 {
		c.st.registered.Add(1)
	}
}

// releaseLocked gives back what a finished (or failed) request held: its
// cached registrations, its staging buffer, its region list.
func (c *Client) releaseLocked(cl *Call) {
	for _, mr := range cl.regs {
		_ = c.cache.Put(mr)
	}
	cl.regs = nil
	if cl.bounce != nil {
		c.bounceFree = append(c.bounceFree, cl.bounce)
		cl.bounce = nil
	}
	if cl.regionList != nil {
		c.listFree = append(c.listFree, cl.regionList)
		cl.regionList = nil
	}
}

// bounceLocked takes a staging buffer of the window's size.
func (c *Client) bounceLocked() (*bounce, error) {
	if n := len(c.bounceFree); n > 0 {
		b := c.bounceFree[n-1]
		c.bounceFree = c.bounceFree[:n-1]
		return b, nil
	}
	return c.newBufferLocked(max(c.window, int(c.srv.MaxRecvBufferSize)), verbs.AccessLocalWrite|verbs.AccessRemoteWrite)
}

// regionListLocked takes a buffer for a vectored read's region list when
// it is longer than a request slot holds: the send gathers it after the
// header.
func (c *Client) regionListLocked() (*bounce, error) {
	if n := len(c.listFree); n > 0 {
		b := c.listFree[n-1]
		c.listFree = c.listFree[:n-1]
		return b, nil
	}
	return c.newBufferLocked(c.maxRegions()*RegionSize, accessWrite)
}

func (c *Client) newBufferLocked(size, access int) (*bounce, error) {
	buf, err := c.v.AllocBuffer(size)
	if err != nil {
		return nil, fmt.Errorf("lwio: staging buffer: %w", err)
	}
	mr, err := c.v.RegMR(c.pd, buf, access)
	if err != nil {
		_ = buf.Free()
		return nil, fmt.Errorf("lwio: staging buffer: %w", err)
	}
	b := &bounce{buf: buf, mr: mr}
	c.bounceAll = append(c.bounceAll, b)
	return b, nil
}

// maxRegions is the most regions (pages) of one vectored read: as many as
// the server's receive buffer holds after the header (the source's
// MaxRecvBufferSize ÷ sizeof(LWIO_RDMA_REGION)).
func (c *Client) maxRegions() int {
	return min(int(c.srv.MaxRecvBufferSize)/RegionSize, MaxVecRegions)
}

// runs coalesces pages that follow one another in one region into SGEs.
func runs(pages [][]byte, refs []dataRef) []rings.SGE {
	var sges []rings.SGE
	for i, p := range pages {
		r := refs[i]
		if n := len(sges); n > 0 && refs[i-1].mr == r.mr && refs[i-1].off+len(pages[i-1]) == r.off {
			sges[n-1].Length += uint32(len(p))
			continue
		}
		sges = append(sges, r.mr.SGE(r.off, len(p)))
	}
	return sges
}
