package regs

import (
	"encoding/binary"
	"math/rand"
	"testing"

	"github.com/emunic/emunic/rings"
)

// FuzzRegisterWrites drives the model with arbitrary register writes,
// reads, doorbells, vector raises and detaches: it must never panic, the
// backend runs exactly when the device says it is enabled, and every
// refusal is counted once.
func FuzzRegisterWrites(f *testing.F) {
	// Seeds: a good bring-up, then garbage after it.
	var good []byte
	put := func(op byte, off, v uint32) {
		good = append(good, op)
		good = binary.LittleEndian.AppendUint32(good, off)
		good = binary.LittleEndian.AppendUint32(good, v)
	}
	put(0, rings.RegCtrl, uint32(rings.CtrlReset))
	put(0, rings.RegDrvFeatures, uint32(rings.Bar0Features))
	for r := 0; r < rings.Bar0Rings; r++ {
		put(0, rings.Bar0Ring(r, rings.RingRegBaseLo), uint32(memBase)+uint32(r)*0x4000)
		put(0, rings.Bar0Ring(r, rings.RingRegCount), 64)
	}
	put(0, rings.RegCtrl, uint32(rings.CtrlEnable))
	put(2, rings.Bar0Ring(1, rings.RingRegDoorbell), 0)
	put(3, 0, 0)
	f.Add(good)
	f.Add(append(append([]byte{}, good...), 0, 0x10, 0, 0, 0, 0xFF, 0xFF, 0xFF, 0xFF, 4, 0, 0, 0, 0, 0, 0, 0, 0))
	rnd := rand.New(rand.NewSource(29))
	for i := 0; i < 16; i++ {
		b := append([]byte{}, good...)
		for j := 0; j < 64; j++ {
			off := uint32(rnd.Intn(0x1100)) &^ uint32(rnd.Intn(2)*3)
			b = append(b, byte(rnd.Intn(5)))
			b = binary.LittleEndian.AppendUint32(b, off)
			b = binary.LittleEndian.AppendUint32(b, rnd.Uint32()>>uint(rnd.Intn(32)))
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, dev, _ := attached(t, 0)
		var refused uint32
		for ; len(data) >= 9; data = data[9:] {
			off, v := binary.LittleEndian.Uint32(data[1:]), binary.LittleEndian.Uint32(data[5:])
			switch data[0] % 5 {
			case 0:
				if m.Write32(off, v) != rings.ErrNone {
					refused++
				}
			case 1:
				if _, e := m.Read32(off); e != rings.ErrNone {
					refused++
				}
			case 2:
				m.Doorbell(int(v % rings.Bar0Rings)).Kick()
				if dev.running {
					break
				}
				refused++
			case 3:
				if dev.running {
					vec := [...]rings.Doorbell{dev.last.Vectors.Notify, dev.last.Vectors.TxSpace, dev.last.Vectors.Command}[v%3]
					vec.Kick()
				}
			case 4:
				m.Detach(true)
				m.AttachMemory(Memory{Base: memBase, Size: memSize})
				m.AttachVectors([3]rings.Doorbell{&counter{}, &counter{}, &counter{}})
			}
			if dev.running != m.Enabled() {
				t.Fatalf("backend running %v, model enabled %v", dev.running, m.Enabled())
			}
			st, _ := m.Read32(rings.RegStatus)
			if (st&uint32(rings.StatusEnabled) != 0) != dev.running {
				t.Fatalf("status %#x with the backend running %v", st, dev.running)
			}
		}
		var counted uint32
		for e := rings.ErrBadOffset; e <= rings.ErrEnableFailed; e++ {
			counted += m.Counter(rings.Bar0ErrCounter(e))
		}
		if counted != refused {
			t.Fatalf("%d refusals, %d counted", refused, counted)
		}
	})
}
