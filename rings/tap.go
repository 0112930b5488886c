package rings

// Tracing support: a trace recorder (or replayer) stands between the device
// and host memory. The rings the device opens on such memory map it raw, as
// always, but every load of a header word (the other side's index and
// flags), every store of this side's, and every status write-back go
// through the ring's Tap, so the recorder sees each entry the host
// published at the moment the device first could, and the replayer can put
// it there at that same moment.

// Tap is a traced ring's observer. Stored follows every store of this
// side's header word at off (OffProducerIndex, OffConsumerIndex,
// OffProducerFlags, OffConsumerFlags); Completed follows the status
// write-back of the entry at free-running index i.
type Tap interface {
	Stored(off int, v uint32)
	Completed(i uint32, e []byte)
}

// TracedDMA is host memory seen through a recorder or replayer. A ring
// opened on it maps Raw's memory as always, and RingTap may point the other
// side's header words at shadows of its own (Ring.Redirect): the ring then
// reads the other side's index and flags from the shadows, which the tracer
// updates from memory (and records, or replays) only at the boundaries of
// the device's steps. The hot paths keep their plain loads; a step sees
// what the host published before it began.
type TracedDMA interface {
	DMA
	// Raw is the memory underneath, for mappings that are neither reads
	// nor writes of data (rings, bounds checks).
	Raw() DMA
	// RingTap is called for a ring opened at l by its producer (producer)
	// or its consumer, with the ring, and returns the ring's tap.
	RingTap(l Layout, producer bool, r *Ring) Tap
	// Wrote reports bytes the device wrote in place through a Raw
	// mapping (the counter publication area).
	Wrote(a Addr, b []byte)
}

// Check reports whether [a, a+n) is inside host memory, without reading it:
// a traced memory does not record a bounds check as a read.
func Check(dma DMA, a Addr, n int) error {
	_, err := MapOut(dma, a, n)
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
