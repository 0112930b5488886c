package trace

import (
	"os"
	"testing"
)

// TestBellsAreInputs: the golden RDMA trace replays with the doorbell
// register records it has, and not without them: the device's QP work
// waits on the doorbells the step takes, so they are inputs a replay must
// feed, not decoration.
func TestBellsAreInputs(t *testing.T) {
	f, err := os.Open("../tests/testdata/traces/rdma.trace")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	_, recs, err := ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	var without []Record
	bells := 0
	for _, r := range recs {
		if r.Kind == KindBell {
			bells++
			continue
		}
		without = append(without, r)
	}
	if bells == 0 {
		t.Fatal("the golden RDMA trace has no doorbell register records")
	}
	res, err := ReplayRecords(recs, nil)
	if err != nil || res.Divergence != nil {
		t.Fatalf("with its %d doorbells: %v %v", bells, err, res.Divergence)
	}
	res, err = ReplayRecords(without, nil)
	if err != nil {
		t.Fatal(err)
	}
	if res.Divergence == nil {
		t.Fatalf("the trace replays without its %d doorbell records", bells)
	}
	t.Logf("without its doorbells: %v", res.Divergence)
}
