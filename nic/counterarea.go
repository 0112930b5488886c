package nic

import (
	"fmt"

	"github.com/emunic/emunic/rings"
)

// setCounterArea registers the counter publication area of
// Config.CounterArea before Start; the unit writes it first at its first
// idle point.
func (d *Device) setCounterArea(addr rings.Addr, n int) error {
	lay := rings.CounterAreaLayout
	if n < lay.MinSize() || addr%8 != 0 {
		return fmt.Errorf("nic: counter area of %d bytes at %#x: want at least %d bytes at a multiple of 8", n, uint64(addr), lay.MinSize())
	}
	if err := rings.Check(d.mem, addr, n); err != nil {
		return fmt.Errorf("nic: counter area: %w", err)
	}
	d.area = &statArea{addr: addr, n: n, qpCap: lay.QPCap(n)}
	return nil
}
