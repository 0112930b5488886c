package port

// Frame buffers for the in-memory wire.
//
// A frame written to a wire is copied into a buffer from a free list, travels through the
// direction's stages (impairments, delay line, receive FIFO) by pointer, and goes back to the
// free list once the reader has copied it out. Buffers come in a few size classes so that a
// 1514-byte frame does not pin a 64 KiB buffer, while a wire configured for 64 KiB frames
// still carries them without allocating.
//
// Each free list is a buffered channel: get and put are a single non-blocking channel
// operation each, safe between the writer, the delay line and the reader, and the list's
// capacity bounds how much memory an idle wire keeps. Buffers are created lazily, so memory
// follows the peak number of frames actually in flight, not the configured queue depth.

// bufferClasses are the buffer sizes below the maximum frame size: a standard frame (1514,
// 1518 with a VLAN tag, rounded up) and a jumbo frame (9000-byte MTU and some headroom).
var bufferClasses = [...]int{2048, 16384}

// frame is one frame in flight on a wire.
type frame struct {
	buf  []byte    // len(buf) is the class size; the frame is buf[:n]
	n    int       // frame length
	at   int64     // delay line: due time in ns since the wire's epoch
	home *freeList // where release returns the buffer
}

func (f *frame) bytes() []byte { return f.buf[:f.n] }

// release returns the buffer to its free list, or leaves it to the garbage collector when the
// list is full (which happens only after a burst larger than the list's capacity).
func (f *frame) release() {
	select {
	case f.home.free <- f:
	default:
	}
}

type freeList struct {
	size int
	free chan *frame
}

// bufferPool is one direction's set of free lists, smallest class first.
type bufferPool struct {
	classes []freeList
}

// newBufferPool makes free lists for every class up to maxFrame. A direction holds at most
// depth frames and queueBytes bytes in each of its two stages (delay line and receive FIFO),
// so a list never needs more than that many buffers of its size; capping it there bounds what
// an idle wire keeps after a burst of large frames.
func newBufferPool(maxFrame, depth, queueBytes int) *bufferPool {
	p := &bufferPool{}
	add := func(size int) {
		keep := min(depth, 2*queueBytes/size+16)
		p.classes = append(p.classes, freeList{size: size, free: make(chan *frame, keep)})
	}
	for _, size := range bufferClasses {
		if size < maxFrame {
			add(size)
		}
	}
	add(maxFrame)
	return p
}

// get returns a buffer of at least n bytes with its length set to n. n must not exceed the
// pool's largest class (WriteFrame checks the frame size first).
func (p *bufferPool) get(n int) *frame {
	for i := range p.classes {
		c := &p.classes[i]
		if n > c.size {
			continue
		}
		var f *frame
		select {
		case f = <-c.free:
		default:
			f = &frame{buf: make([]byte, c.size), home: c}
		}
		f.n = n
		return f
	}
	panic("port: frame larger than the largest buffer class")
}

// copyOf returns a pooled copy of b.
func (p *bufferPool) copyOf(b []byte) *frame {
	f := p.get(len(b))
	copy(f.buf, b)
	return f
}
