package rings

import (
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestDocBAR0 holds docs/bar0.md to bar0.go in both directions: every
// documented row gives its constant's value, and every exported constant
// of bar0.go is documented.
func TestDocBAR0(t *testing.T) {
	probs, err := abidoc.CheckDoc(".", "../docs/bar0.md", func(c abidoc.Const) bool { return c.File == "bar0.go" })
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range probs {
		t.Error(p)
	}
}

// TestBar0Tiles checks that the register groups tile the block without
// overlapping: ring blocks, vector blocks, counters, the MSI-X table and
// its pending bits each end before the next begins.
func TestBar0Tiles(t *testing.T) {
	regions := []struct {
		name       string
		start, end uint32
	}{
		{"identification", 0, RegCounterLen + 4},
		{"rings", Bar0RingBase, Bar0Ring(Bar0Rings, 0)},
		{"vectors", Bar0VecBase, Bar0Vec(Bar0Vectors, 0)},
		{"counters", Bar0CounterBase, Bar0Counter(Bar0RegCounters)},
		{"msix", Bar0MsixTable, Bar0Msix(Bar0Vectors, 0)},
		{"pba", Bar0MsixPBA, Bar0MsixPBA + 8},
	}
	for i, r := range regions {
		if r.end > Bar0Bytes || r.start%Bar0RegisterAlign != 0 {
			t.Errorf("%s [%#x, %#x) outside the block or unaligned", r.name, r.start, r.end)
		}
		if i > 0 && regions[i-1].end > r.start {
			t.Errorf("%s starts at %#x, before %s ends at %#x", r.name, r.start, regions[i-1].name, regions[i-1].end)
		}
	}
	if Bar0RingStride < RingRegRsvd+8 || Bar0VecStride < VecRegModCount+4 {
		t.Error("a block's registers overrun its stride")
	}
	for e := ErrBadOffset; e <= ErrEnableFailed; e++ {
		if id := Bar0ErrCounter(e); id >= Bar0RegCounters || id.String() == "" {
			t.Errorf("error %v has counter %d", e, id)
		}
	}
}
