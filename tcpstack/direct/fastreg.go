package direct

// Per-transfer registrations by fast registration. A transfer's remote
// region (the RDMA Read source, the RDMA Write sink) is registered for the
// transfer only and deregistered after its completion message, as the
// session protocol says; the switch does both without a device command:
// it maps the region under an STag of the host's pool with a REG_MR work
// request posted in the same doorbell as the message that advertises it
// (SRC_AVAIL, SINK_AVAIL), and the completion message (RD_DONE, WR_DONE)
// is a Send with Invalidate of that STag, so the peer's NIC ends the
// mapping as the message arrives. The STag goes back to the pool then; its
// next mapping has another key, so the STag the peer was given stays dead.
// STags are allocated (one command each) only when the pool is empty, and
// deregistered when the switch stops, or at once when a conn ends with one
// still mapped.

import (
	"fmt"
	"sync"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// fastPool is a host switch's STags for fast registration (its one PD),
// each bounded by the whole host memory.
type fastPool struct {
	mu   sync.Mutex
	free []*verbs.FastMR
	// all is every STag allocated and not deregistered, in allocation
	// order (a deterministic run deregisters them in the same order).
	all  []*verbs.FastMR
	shut bool
}

// forget drops f from all (it is being deregistered).
func (p *fastPool) forget(f *verbs.FastMR) {
	for i, g := range p.all {
		if g == f {
			p.all = append(p.all[:i], p.all[i+1:]...)
			return
		}
	}
}

// takeFast returns a free STag of the pool, or nil when none is.
func (sw *hostSwitch) takeFast() *verbs.FastMR {
	p := &sw.fast
	p.mu.Lock()
	defer p.mu.Unlock()
	if n := len(p.free); n > 0 && !p.shut {
		f := p.free[n-1]
		p.free = p.free[:n-1]
		return f
	}
	return nil
}

// allocFast allocates a new STag for the pool (a device command: never on
// the poller); a failure is ErrNoBuffers (WSAENOBUFS), counted.
func (sw *hostSwitch) allocFast() (*verbs.FastMR, error) {
	base, n := sw.v.HostMemory()
	f, err := sw.v.AllocMR(sw.pd, base, n)
	if err != nil {
		sw.stats.noBuffers.Add(1)
		return nil, fmt.Errorf("%w: %v", ErrNoBuffers, err)
	}
	p := &sw.fast
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.shut {
		_ = f.Dereg()
		return nil, fmt.Errorf("%w: the switch is stopping", ErrNoBuffers)
	}
	p.all = append(p.all, f)
	return f, nil
}

// putFast gives back an STag with no mapping (never posted, or seen
// invalidated).
func (sw *hostSwitch) putFast(f *verbs.FastMR) {
	p := &sw.fast
	p.mu.Lock()
	if !p.shut {
		p.free = append(p.free, f)
		p.mu.Unlock()
		return
	}
	p.forget(f)
	p.mu.Unlock()
	_ = f.Dereg()
}

// stopFast deregisters the pool's STags (the switch stops; every conn is
// gone, so every STag is free).
func (sw *hostSwitch) stopFast() {
	p := &sw.fast
	p.mu.Lock()
	p.shut = true
	all := p.all
	p.all, p.free = nil, nil
	p.mu.Unlock()
	for _, f := range all {
		_ = f.Dereg()
	}
}

// regItem is a per-transfer registration to post before a control
// message: the message names the STag (STag, TO) of the mapping.
type regItem struct {
	f      *verbs.FastMR
	addr   rings.Addr
	n      int
	access int
}

// regWRLocked returns the REG_MR work request of r and sets m's STag and
// TO to the mapping's, counting the registration.
func (c *Conn) regWRLocked(r *regItem, m *Msg) (rings.SendWR, error) {
	w, stag, err := r.f.RegWR(r.addr, r.n, r.access)
	if err != nil {
		return w, err
	}
	m.STag, m.TO = stag, uint64(r.addr)
	c.sw.stats.registrations.Add(1)
	return w, nil
}

// invalidatedLocked checks that the completion wc of a completion message
// (RD_DONE, WR_DONE) invalidated exactly f's mapping, which then ends:
// the region is deregistered, and f goes back to the pool.
func (c *Conn) invalidatedLocked(f *verbs.FastMR, wc *rings.Completion) bool {
	if f == nil || wc.Flags&rings.WCWithInv == 0 || !f.Invalidated(uint32(wc.ImmData)) {
		return false
	}
	c.sw.stats.deregistrations.Add(1)
	c.sw.putFast(f)
	return true
}

// dropFast lets go of a transfer's STag: back to the pool if it maps
// nothing; else (the conn ends with the transfer not done) deregistered
// off the poller, also counted in also if not nil (a zero-copy Write
// waits for its buffer's).
func (c *Conn) dropFast(f *verbs.FastMR, also *sync.WaitGroup) {
	if f == nil {
		return
	}
	if !f.Mapped() {
		c.sw.putFast(f)
		return
	}
	c.deregs.Add(1)
	if also != nil {
		also.Add(1)
	}
	go func() {
		defer c.deregs.Done()
		if also != nil {
			defer also.Done()
		}
		c.sw.fast.mu.Lock()
		c.sw.fast.forget(f)
		c.sw.fast.mu.Unlock()
		if f.Dereg() == nil {
			c.sw.stats.deregistrations.Add(1)
		}
	}()
}

// takeFastUnlocked returns a free STag, or allocates one with the conn's
// lock released for the command.
func (c *Conn) takeFastUnlocked() (*verbs.FastMR, error) {
	if f := c.sw.takeFast(); f != nil {
		return f, nil
	}
	c.mu.Unlock()
	f, err := c.sw.allocFast()
	c.mu.Lock()
	return f, err
}
