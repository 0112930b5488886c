package board

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"reflect"
	"testing"
	"time"

	"github.com/emunic/emunic/nic/port"
	"github.com/emunic/emunic/rings"
)

// TestCountersAreaMatchesDevice: what the device publishes in the host's
// counter area is what it reports by its own (in-process) accessors, field
// for field, once both are settled after a delegated transfer: the
// publication is the accessors' independent count.
func TestCountersAreaMatchesDevice(t *testing.T) {
	pa, pb := port.MustNewWire(port.WireConfig{})
	a, err := NewHost(HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: netip.MustParsePrefix("10.0.0.1/24")}, pa)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := NewHost(HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 2}, Addr: netip.MustParsePrefix("10.0.0.2/24")}, pb)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if a.Device == nil {
		t.Skip("skipped: the hosts' devices run split (EMUNIC_SPLIT): there are no in-process accessors to compare the area with")
	}
	l, err := b.ListenOffload(9)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	done := make(chan int64)
	go func() {
		c, err := l.Accept()
		if err != nil {
			done <- -1
			return
		}
		n, _ := io.Copy(io.Discard, c)
		c.Close()
		done <- n
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := a.DialOffload(ctx, netip.MustParseAddrPort("10.0.0.2:9"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for range 8 {
		if _, err := c.Write(buf); err != nil {
			t.Fatal(err)
		}
	}
	c.Close()
	if n := <-done; n != 8<<20 {
		t.Fatalf("received %d bytes", n)
	}
	for _, h := range []*Host{a, b} {
		// Both sides settled: the device parked (publishing as it did) and
		// its accessors' copies are from the same idle point.
		deadline := time.Now().Add(5 * time.Second)
		for {
			ok, _ := h.Device.CountersSettled(0)
			pc, err := h.Counters()
			if err != nil {
				t.Fatal(err)
			}
			eng, rc := h.Device.EngineCounters(), h.Device.RingCounters()
			same := pc.Parked && ok && diffCounters(pc.Engine, eng) == "" && pc.Rings == rc
			for id := range rings.NumStats {
				// A park is counted after the publication made as the unit
				// decided to park (the re-check after announcing sleep can
				// still call it off): live, the area is one park behind.
				same = same && (pc.Stats[id] == h.Device.Stat(id) || id == rings.StatParks)
			}
			if same {
				if pc.Engine.TxBytes == 0 && pc.Engine.RxBytes == 0 {
					t.Fatalf("published engine counters are all zero after a transfer: %+v", pc.Engine)
				}
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("published counters never matched the device's (parked %v, settled %v): engine %s; rings %+v vs %+v",
					pc.Parked, ok, diffCounters(pc.Engine, eng), pc.Rings, rc)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// Stopped, the device's last publication covers everything, parks too.
	for _, h := range []*Host{a, b} {
		h.Close()
		pc, err := h.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if eng := h.Device.EngineCounters(); diffCounters(pc.Engine, eng) != "" {
			t.Errorf("after stop: engine %s", diffCounters(pc.Engine, eng))
		}
		if rc := h.Device.RingCounters(); pc.Rings != rc {
			t.Errorf("after stop: rings %+v, device %+v", pc.Rings, rc)
		}
		for id := range rings.NumStats {
			if pc.Stats[id] != h.Device.Stat(id) {
				t.Errorf("after stop: %v %d, device %d", id, pc.Stats[id], h.Device.Stat(id))
			}
		}
	}
}

// TestCountersAreaBadCommand: a STATS publish request with an area too
// small, misaligned, outside host memory or with an unknown flag is
// refused with a status, and the working area keeps being published.
func TestCountersAreaBadCommand(t *testing.T) {
	pa, _ := port.MustNewWire(port.WireConfig{})
	h, err := NewHost(HostConfig{MAC: [6]byte{2, 0, 0, 0, 0, 1}, Addr: netip.MustParsePrefix("10.0.0.1/24")}, pa)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	base := h.Mem.Base()
	for _, c := range []struct {
		name string
		cmd  rings.Command
		want rings.Status
	}{
		{"too small", rings.Command{Flags: rings.StatsFlagPublish, Addr: base, Len: 64}, rings.StatusBadParam},
		{"misaligned", rings.Command{Flags: rings.StatsFlagPublish, Addr: base + 4, Len: 1 << 16}, rings.StatusBadParam},
		{"outside", rings.Command{Flags: rings.StatsFlagPublish, Addr: base + rings.Addr(h.Mem.Size()), Len: 1 << 16}, rings.StatusBadAddress},
		{"unknown flag", rings.Command{Flags: 0x8000, Addr: base, Len: 1 << 16}, rings.StatusBadParam},
	} {
		c.cmd.Opcode, c.cmd.Conn = rings.OpStats, rings.NoConn
		r, err := h.Driver.Command(c.cmd, 5*time.Second)
		if err != nil || r.Status != c.want {
			t.Errorf("%s: status %v (%v), want %v", c.name, r.Status, err, c.want)
		}
	}
	before, err := h.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.Driver.Command(rings.Command{Opcode: rings.OpNop, Conn: rings.NoConn}, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		after, err := h.Counters()
		if err != nil {
			t.Fatal(err)
		}
		if after.Gen > before.Gen && after.Rings.Command.Entries > before.Rings.Command.Entries {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the area stopped being published: gen %d → %d", before.Gen, after.Gen)
		}
		time.Sleep(time.Millisecond)
	}
}

// diffCounters names the fields of two counters structs that differ,
// matching fields by name: the host's decoded copy against the device's
// own struct, two Go types the counter IDs join.
func diffCounters(host, dev any) string {
	out := ""
	hv, dv := reflect.ValueOf(host), reflect.ValueOf(dev)
	if hv.NumField() != dv.NumField() {
		out += fmt.Sprintf("%d fields≠%d ", hv.NumField(), dv.NumField())
	}
	for i := range dv.NumField() {
		name := dv.Type().Field(i).Name
		h := hv.FieldByName(name)
		if !h.IsValid() {
			out += name + " missing "
			continue
		}
		if h.Uint() != dv.Field(i).Uint() {
			out += fmt.Sprintf("%s %d≠%d ", name, h.Uint(), dv.Field(i).Uint())
		}
	}
	return out
}
