//go:build race

package rings

import (
	"sync/atomic"
	"unsafe"
)

// warmStore zeroes the control word's top byte of a free slot (see
// Producer.warm). A command ring host may still load the previous lap's
// control word of that slot (atomically: a waiter whose command another
// goroutine reaped, rings.IsDone); the plain byte store of the normal build
// changes nothing such a reader can see, but the race detector cannot know
// that and reports it. Under it the store is an atomic AND of the word.
func warmStore(slot unsafe.Pointer) { atomic.AndUint32((*uint32)(slot), 0x00FFFFFF) }
