package nic

import (
	"errors"
	"fmt"

	"github.com/emunic/emunic/rings"
)

// SetCounterArea registers the counter publication area before Start, as
// STATS with StatsFlagPublish does once the device runs: for a driver that
// programs it through the register block (rings.RegCounterLo/Hi/Len,
// nic/regs) rather than by command. The unit writes it first at its first
// idle point. n 0: none.
func (d *Device) SetCounterArea(addr rings.Addr, n int) error {
	if d.started {
		return errors.New("nic: SetCounterArea after Start (use STATS with StatsFlagPublish)")
	}
	if n == 0 {
		d.area = nil
		return nil
	}
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
