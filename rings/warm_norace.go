//go:build !race

package rings

import "unsafe"

// warmStore zeroes the control word's top byte of a free slot (see
// Producer.warm): a plain byte store, the cheapest store that pulls the
// line in.
func warmStore(slot unsafe.Pointer) { *(*byte)(unsafe.Add(slot, 3)) = 0 }
