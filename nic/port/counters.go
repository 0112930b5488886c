package port

import "sync/atomic"

// counters is the live, lock-free form of Stats. The transmit and receive halves are written
// by different goroutines (the writer and the reader of a port), so they sit on separate cache
// lines: otherwise every frame would bounce one line between the two cores.
type counters struct {
	txFrames, txBytes atomic.Uint64
	txDropTooBig      atomic.Uint64
	txDropRunt        atomic.Uint64
	txDropClosed      atomic.Uint64
	txDropLinkDown    atomic.Uint64
	txDropQueueFull   atomic.Uint64
	txDropLoss        atomic.Uint64
	txErrors          atomic.Uint64
	txGSO             atomic.Uint64
	duplicated        atomic.Uint64
	reordered         atomic.Uint64
	corrupted         atomic.Uint64
	_                 [64]byte

	rxFrames, rxBytes atomic.Uint64
	rxDropTooBig      atomic.Uint64
	rxGSO             atomic.Uint64
	rxDropBadGSO      atomic.Uint64
	rxDropLoss        atomic.Uint64
	rxBusyPollHits    atomic.Uint64
	_                 [64]byte

	// Written by whoever delivers into this port's receive FIFO (the peer's writer or a
	// delay line) and by Close; rare, so they share a line.
	rxDropQueueFull atomic.Uint64
	rxDropClosed    atomic.Uint64
}

func (c *counters) snapshot() Stats {
	return Stats{
		TxFrames:        c.txFrames.Load(),
		TxBytes:         c.txBytes.Load(),
		RxFrames:        c.rxFrames.Load(),
		RxBytes:         c.rxBytes.Load(),
		TxDropTooBig:    c.txDropTooBig.Load(),
		TxDropRunt:      c.txDropRunt.Load(),
		TxDropClosed:    c.txDropClosed.Load(),
		TxDropLinkDown:  c.txDropLinkDown.Load(),
		TxDropQueueFull: c.txDropQueueFull.Load(),
		TxDropLoss:      c.txDropLoss.Load(),
		TxErrors:        c.txErrors.Load(),
		TxGSOFrames:     c.txGSO.Load(),
		RxDropTooBig:    c.rxDropTooBig.Load(),
		RxGSOFrames:     c.rxGSO.Load(),
		RxDropBadGSO:    c.rxDropBadGSO.Load(),
		RxDropQueueFull: c.rxDropQueueFull.Load(),
		RxDropClosed:    c.rxDropClosed.Load(),
		RxDropLoss:      c.rxDropLoss.Load(),
		RxBusyPollHits:  c.rxBusyPollHits.Load(),
		Duplicated:      c.duplicated.Load(),
		Reordered:       c.reordered.Load(),
		Corrupted:       c.corrupted.Load(),
	}
}

// checkTx applies the admission rules every port shares (closed, runt, oversize) and counts a
// refused frame. It returns nil when the frame may be transmitted.
func (c *counters) checkTx(closed bool, n, maxFrame int) error {
	switch {
	case closed:
		c.txDropClosed.Add(1)
		return ErrClosed
	case n < EthHeaderLen:
		c.txDropRunt.Add(1)
		return ErrRuntFrame
	case n > maxFrame:
		c.txDropTooBig.Add(1)
		return ErrFrameTooBig
	}
	return nil
}
