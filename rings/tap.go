package rings

// Tracing support: a trace recorder (or replayer) stands between the device
// and host memory. The rings the device opens on such memory map it raw, as
// always, but every load of a header word (the other side's index and
// flags), every store of this side's, and every status write-back go
// through the ring's Tap, so the recorder sees each entry the host
// published at the moment the device first could, and the replayer can put
// it there at that same moment.

// Tap observes one ring's header words. Load replaces the load of the word
// at off (OffProducerIndex, OffConsumerIndex, OffProducerFlags,
// OffConsumerFlags) and returns the value the caller sees; Stored follows a
// store by this side; Completed follows the status write-back of the entry
// at free-running index i.
type Tap interface {
	Load(r *Ring, off int) uint32
	Stored(r *Ring, off int, v uint32)
	Completed(r *Ring, i uint32, e []byte)
}

// TracedDMA is host memory seen through a recorder or replayer: rings
// opened on it get RingTap's tap and map Raw's memory.
type TracedDMA interface {
	DMA
	// Raw is the memory underneath, for mappings that are neither reads
	// nor writes of data (rings, bounds checks).
	Raw() DMA
	// RingTap returns the tap of a ring opened at l by its producer
	// (producer) or its consumer.
	RingTap(l Layout, producer bool) Tap
	// Wrote reports bytes the device wrote in place through a Raw
	// mapping (the counter publication area).
	Wrote(a Addr, b []byte)
}

// Check reports whether [a, a+n) is inside host memory, without reading it:
// a traced memory does not record a bounds check as a read.
func Check(dma DMA, a Addr, n int) error {
	if t, ok := dma.(TracedDMA); ok {
		dma = t.Raw()
	}
	_, err := dma.Map(a, n)
	return err
}

// MapOut maps [a, a+n) for writes in place (the caller reports them with
// Wrote when the memory is traced).
func MapOut(dma DMA, a Addr, n int) ([]byte, error) {
	if t, ok := dma.(TracedDMA); ok {
		dma = t.Raw()
	}
	return dma.Map(a, n)
}

// Wrote reports an in-place write through a MapOut mapping to a traced
// memory (nothing otherwise).
func Wrote(dma DMA, a Addr, b []byte) {
	if t, ok := dma.(TracedDMA); ok {
		t.Wrote(a, b)
	}
}
