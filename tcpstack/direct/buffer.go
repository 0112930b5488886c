package direct

// Registered application memory: Alloc's buffers, which the switch sends
// from and receives into without a CPU copy.

import (
	"errors"
	"sort"
	"unsafe"

	"github.com/emunic/emunic/rings"
	"github.com/emunic/emunic/tcpstack"
	"github.com/emunic/emunic/tcpstack/verbs"
)

// Buffer is memory from the host's RDMA provider that sockets direct
// moves without a CPU copy: a Write of at least Threshold bytes from it is
// offered to the peer as the source of the transfer (RDMA Read
// rendezvous, or RDMA Write from it), and a Read of at least Threshold
// bytes into it that has to wait tells the peer, whose next large send
// is RDMA-written into it. Connections register it through the host's
// registration cache (WSPRegisterMemory, for local access, kept for the
// next transfer) and per transfer for remote access
// (WSPRegisterRdmaMemory, deregistered when the transfer is done).
type Buffer struct {
	sw   *hostSwitch
	vb   *verbs.Buffer
	mem  []byte
	base uintptr
}

// Alloc returns n bytes of registered-capable memory of host h's RDMA
// provider. Free it with Free.
func Alloc(h *tcpstack.Host, n int) (*Buffer, error) {
	sw, err := switchFor(h)
	if err != nil {
		return nil, err
	}
	vb, err := sw.v.AllocBuffer(n)
	if err != nil {
		return nil, err
	}
	mem := vb.Bytes()
	b := &Buffer{sw: sw, vb: vb, mem: mem, base: uintptr(unsafe.Pointer(unsafe.SliceData(mem)))}
	sw.bufMu.Lock()
	i := sort.Search(len(sw.bufs), func(i int) bool { return sw.bufs[i].base > b.base })
	sw.bufs = append(sw.bufs, nil)
	copy(sw.bufs[i+1:], sw.bufs[i:])
	sw.bufs[i] = b
	sw.bufMu.Unlock()
	return b, nil
}

// Bytes is the buffer's memory (nil after Free).
func (b *Buffer) Bytes() []byte { return b.vb.Bytes() }

// ErrBufferInUse: Free of a buffer a transfer still uses (its remote
// registration is live). The memory stays allocated; the transfer
// completes or fails, and Free may be called again.
var ErrBufferInUse = errors.New("direct: buffer in use by a transfer")

// Free gives the memory back. The registration cache's invalidation
// callback runs first (WSPMemoryRegistrationCacheCallback, through
// verbs.Buffer.Free): its cached registrations of the buffer are
// deregistered, at once or at the last transfer's release. A buffer that
// a transfer still uses is not freed (ErrBufferInUse wrapping the
// provider's error): the device could still move bytes into or out of it.
func (b *Buffer) Free() error {
	if err := b.vb.Free(); err != nil {
		if errors.Is(err, verbs.ErrBufferRegistered) {
			return errors.Join(ErrBufferInUse, err)
		}
		return err
	}
	sw := b.sw
	sw.bufMu.Lock()
	for i, x := range sw.bufs {
		if x == b {
			sw.bufs = append(sw.bufs[:i], sw.bufs[i+1:]...)
			break
		}
	}
	sw.bufMu.Unlock()
	return nil
}

// registered says whether p lies in a Buffer of the switch, and where
// (the device's address of p[0]).
func (sw *hostSwitch) registered(p []byte) (rings.Addr, bool) {
	if len(p) == 0 {
		return 0, false
	}
	at := uintptr(unsafe.Pointer(unsafe.SliceData(p)))
	sw.bufMu.Lock()
	defer sw.bufMu.Unlock()
	i := sort.Search(len(sw.bufs), func(i int) bool { return sw.bufs[i].base > at }) - 1
	if i < 0 {
		return 0, false
	}
	b := sw.bufs[i]
	off := at - b.base
	if off+uintptr(len(p)) > uintptr(len(b.mem)) {
		return 0, false
	}
	return b.vb.Addr + rings.Addr(off), true
}
