package verbs

import (
	"errors"
	"fmt"
	"sort"
	"sync"

	"github.com/emunic/emunic/rings"
)

// Registrar registers and deregisters memory regions: the device (through
// Provider.NewRegCache), or a fake in tests.
type Registrar interface {
	RegMR(pd PD, addr rings.Addr, length int, access int) (*MR, error)
	DeregMR(mr *MR) error
}

// RegCacheConfig tunes a RegCache.
type RegCacheConfig struct {
	// MaxUnused is how many registrations the cache keeps while nobody
	// uses them; beyond it the least recently used are deregistered.
	// 0 means 64; negative keeps none (every last Put deregisters).
	MaxUnused int
}

// RegCacheStats count a cache's work.
type RegCacheStats struct {
	Hits, Misses    uint64 // Get found a covering registration / had to register
	Invalidations   uint64 // registrations removed by Invalidate (deregistered at once or at last Put)
	Evictions       uint64 // unused registrations deregistered to respect MaxUnused
	Registrations   uint64
	Deregistrations uint64
	Errors          uint64 // failed registrations and deregistrations
	Entries         int    // registrations the cache holds (findable or doomed)
	InUse           int    // of which referenced
}

// RegCache is a memory registration cache, the provider side of the
// Windows Sockets Direct SPI's registration calls: WSPRegisterMemory and
// WSPRegisterRdmaMemory become Get (local access, or remote access for
// memory the peer may read or write), WSPDeregisterMemory and
// WSPDeregisterRdmaMemory become Put, and WSPMemoryRegistrationCacheCallback
// is Invalidate, which Buffer.Free calls for caches made by
// Provider.NewRegCache.
//
// Registrations are keyed by protection domain, access flags (exactly: a
// region registered for remote access is never handed out for a local-only
// request, nor the reverse) and address range. Get returns a registration
// that covers the requested range when there is one, with a reference
// count; an unused registration stays registered (up to MaxUnused, least
// recently used first out) so the next Get of that memory costs no
// command.
//
// Invalidate(addr, len) removes every overlapping registration from the
// cache: unused ones are deregistered at once, ones in use are deregistered
// at their last Put (the memory they name must not be reused before then).
//
// Safe for concurrent use. Get holds the cache's lock while it registers.
type RegCache struct {
	r   Registrar
	cfg RegCacheConfig

	mu      sync.Mutex
	lists   map[regKey]*regList
	byMR    map[*MR]*regEntry
	lru     regEntry // sentinel of the ring of unused entries, most recent first
	unused  int
	stats   RegCacheStats
	closed  bool
	onClose func()
}

type regKey struct {
	pd     PD
	access int
}

// regList is one key's findable entries sorted by start address; maxLen
// bounds every entry's length so a lookup scans back only as far as an
// entry could reach.
type regList struct {
	es     []*regEntry
	maxLen uint64
}

type regEntry struct {
	mr         *MR
	key        regKey
	start, end uint64
	refs       int
	doomed     bool // invalidated: not findable, deregistered at last Put
	prev, next *regEntry
}

// NewRegCache returns a cache over r.
func NewRegCache(r Registrar, cfg RegCacheConfig) *RegCache {
	if cfg.MaxUnused == 0 {
		cfg.MaxUnused = 64
	}
	c := &RegCache{r: r, cfg: cfg, lists: make(map[regKey]*regList), byMR: make(map[*MR]*regEntry)}
	c.lru.prev, c.lru.next = &c.lru, &c.lru
	return c
}

// Get returns a registration covering [addr, addr+length) for pd with
// exactly the access flags asked, registering one if the cache has none.
// Address the memory through the returned MR (mr.SGE, mr.TO with the
// offset addr-mr.Addr): it may be larger than asked. Give it back with Put.
func (c *RegCache) Get(pd PD, addr rings.Addr, length int, access int) (*MR, error) {
	if c == nil {
		return nil, errors.New("verbs: registration cache: nil cache")
	}
	if length <= 0 {
		return nil, fmt.Errorf("verbs: registration cache: length %d", length)
	}
	start := uint64(addr)
	end := start + uint64(length)
	if end < start {
		return nil, fmt.Errorf("verbs: registration cache: [%#x, +%d) wraps", start, length)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil, errors.New("verbs: registration cache closed")
	}
	k := regKey{pd, access}
	if e := c.find(k, start, end); e != nil {
		c.stats.Hits++
		if e.refs == 0 {
			c.lruRemove(e)
		}
		e.refs++
		return e.mr, nil
	}
	c.stats.Misses++
	mr, err := c.r.RegMR(pd, addr, length, access)
	if err != nil {
		c.stats.Errors++
		return nil, err
	}
	if mr == nil {
		c.stats.Errors++
		return nil, errors.New("verbs: registration cache: the registrar returned no region")
	}
	c.stats.Registrations++
	mr.cache = c
	e := &regEntry{mr: mr, key: k, start: start, end: end, refs: 1}
	c.byMR[mr] = e
	c.insert(e)
	return mr, nil
}

// Put gives back a registration Get returned.
func (c *RegCache) Put(mr *MR) error {
	if c == nil || mr == nil {
		return errors.New("verbs: registration cache: Put of nil")
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.byMR[mr]
	switch {
	case e == nil:
		return errors.New("verbs: registration cache: Put of a region the cache does not hold")
	case e.refs == 0:
		return errors.New("verbs: registration cache: Put of a region not in use (one Put too many)")
	}
	e.refs--
	if e.refs > 0 {
		return nil
	}
	if e.doomed || c.closed || c.cfg.MaxUnused < 0 {
		if !e.doomed {
			c.remove(e)
		}
		return c.dereg(e)
	}
	c.lruPush(e)
	return c.evict()
}

// Invalidate is the registration-cache callback: the host memory
// [addr, addr+length) is being freed or remapped. Every overlapping
// registration leaves the cache; unused ones are deregistered now, ones in
// use at their last Put. It returns how many registrations it removed.
func (c *RegCache) Invalidate(addr rings.Addr, length int) int {
	if c == nil || length <= 0 {
		return 0
	}
	start := uint64(addr)
	end := start + uint64(length)
	if end < start {
		end = ^uint64(0)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	var hit []*regEntry
	for _, l := range c.lists {
		// Entries starting before end that may reach past start.
		i := sort.Search(len(l.es), func(i int) bool { return l.es[i].start >= end })
		for j := i - 1; j >= 0 && l.es[j].start+l.maxLen > start; j-- {
			if l.es[j].end > start {
				hit = append(hit, l.es[j])
			}
		}
	}
	for _, e := range hit {
		c.stats.Invalidations++
		c.remove(e)
		if e.refs == 0 {
			c.lruRemove(e)
			_ = c.dereg(e)
		}
	}
	return len(hit)
}

// Flush deregisters every unused registration.
func (c *RegCache) Flush() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	var first error
	for c.unused > 0 {
		e := c.lru.prev
		c.lruRemove(e)
		c.remove(e)
		if err := c.dereg(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Close flushes the cache and stops it: Get fails, registrations in use
// are deregistered at their last Put, and Buffer.Free no longer calls it.
func (c *RegCache) Close() error {
	err := c.Flush()
	c.mu.Lock()
	c.closed = true
	f := c.onClose
	c.onClose = nil
	c.mu.Unlock()
	if f != nil {
		f()
	}
	return err
}

// Stats returns the cache's counters.
func (c *RegCache) Stats() RegCacheStats {
	c.mu.Lock()
	defer c.mu.Unlock()
	s := c.stats
	s.Entries = len(c.byMR)
	for _, e := range c.byMR {
		if e.refs > 0 {
			s.InUse++
		}
	}
	return s
}

// find returns a findable entry of key k covering [start, end).
func (c *RegCache) find(k regKey, start, end uint64) *regEntry {
	l := c.lists[k]
	if l == nil {
		return nil
	}
	i := sort.Search(len(l.es), func(i int) bool { return l.es[i].start > start })
	for j := i - 1; j >= 0 && l.es[j].start+l.maxLen >= end; j-- {
		if l.es[j].end >= end {
			return l.es[j]
		}
	}
	return nil
}

func (c *RegCache) insert(e *regEntry) {
	l := c.lists[e.key]
	if l == nil {
		l = &regList{}
		c.lists[e.key] = l
	}
	i := sort.Search(len(l.es), func(i int) bool { return l.es[i].start > e.start })
	l.es = append(l.es, nil)
	copy(l.es[i+1:], l.es[i:])
	l.es[i] = e
	l.maxLen = max(l.maxLen, e.end-e.start)
}

// remove makes e unfindable (doomed); byMR keeps it until it is
// deregistered.
func (c *RegCache) remove(e *regEntry) {
	e.doomed = true
	l := c.lists[e.key]
	if l == nil {
		return
	}
	for i, x := range l.es {
		if x == e {
			l.es = append(l.es[:i], l.es[i+1:]...)
			break
		}
	}
	if len(l.es) == 0 {
		delete(c.lists, e.key)
	}
}

// dereg deregisters a doomed, unused entry and forgets it.
func (c *RegCache) dereg(e *regEntry) error {
	delete(c.byMR, e.mr)
	e.mr.cache = nil
	err := c.r.DeregMR(e.mr)
	if err != nil {
		c.stats.Errors++
		return err
	}
	c.stats.Deregistrations++
	return nil
}

func (c *RegCache) evict() error {
	var first error
	for c.unused > c.cfg.MaxUnused {
		e := c.lru.prev // least recently used
		c.lruRemove(e)
		c.remove(e)
		c.stats.Evictions++
		if err := c.dereg(e); err != nil && first == nil {
			first = err
		}
	}
	return first
}

func (c *RegCache) lruPush(e *regEntry) {
	e.prev, e.next = &c.lru, c.lru.next
	c.lru.next.prev = e
	c.lru.next = e
	c.unused++
}

func (c *RegCache) lruRemove(e *regEntry) {
	if e.prev == nil {
		return
	}
	e.prev.next, e.next.prev = e.next, e.prev
	e.prev, e.next = nil, nil
	c.unused--
}
