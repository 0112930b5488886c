package rings

import (
	"fmt"
	"sort"
	"testing"

	"github.com/emunic/emunic/internal/abidoc"
)

// TestDocCounterIDs holds the counter ID tables of docs/abi-blocks.md to
// rings/counterid.go in both directions: each group's table lists every ID
// of its type, in order, each row's ID is the constant's value and its
// counter name is the ID's String; and each group has as many IDs as the
// area's count for it says.
func TestDocCounterIDs(t *testing.T) {
	consts := loadConsts(t)
	d, err := abidoc.ParseFile("../docs/abi-blocks.md")
	if err != nil {
		t.Fatal(err)
	}
	name := map[string]func(uint64) string{
		"RingCounterID":   func(v uint64) string { return RingCounterID(v).String() },
		"EngineCounterID": func(v uint64) string { return EngineCounterID(v).String() },
		"OccupancyID":     func(v uint64) string { return OccupancyID(v).String() },
		"QPCounterID":     func(v uint64) string { return QPCounterID(v).String() },
		"AreaRing":        nil,
	}
	count := map[string]int{"RingCounterID": RingCounterCount, "EngineCounterID": EngineCounterCount,
		"OccupancyID": OccupancyWords, "QPCounterID": QPCounterCount, "AreaRing": StatAreaRings}
	// Every constant of an ID type, by type, in value order.
	want := map[string][]goConst{}
	for _, c := range consts {
		if _, ok := name[c.typ]; ok {
			want[c.typ] = append(want[c.typ], c)
		}
	}
	for typ, cs := range want {
		sort.Slice(cs, func(i, j int) bool { return cs[i].u64(t) < cs[j].u64(t) })
		for i, c := range cs {
			if c.u64(t) != uint64(i) {
				t.Errorf("%s: %s is %d, want %d (IDs run from 0 with no gap)", typ, c.name, c.u64(t), i)
			}
		}
		if len(cs) != count[typ] {
			t.Errorf("%s: %d IDs, the area's count says %d", typ, len(cs), count[typ])
		}
	}
	got := map[string][]string{}
	for _, tb := range d.Tables {
		if !tb.Has("id", "constant") {
			continue
		}
		for _, r := range tb.Rows {
			where := tb.Where(r)
			cn, _ := tb.Cell(r, "constant")
			id, err := abidoc.Ident(cn)
			if err != nil {
				t.Errorf("%s: %v", where, err)
				continue
			}
			c, ok := consts[id]
			if !ok {
				t.Errorf("%s: %s is not a constant of package rings", where, id)
				continue
			}
			if _, ok := name[c.typ]; !ok {
				t.Errorf("%s: %s is a %q, not a counter ID", where, id, c.typ)
				continue
			}
			got[c.typ] = append(got[c.typ], id)
			if s, _ := tb.Cell(r, "id"); s != fmt.Sprint(c.u64(t)) {
				t.Errorf("%s: %s documented as ID %s, code has %d", where, id, s, c.u64(t))
			}
			if f := name[c.typ]; f != nil {
				if s, _ := tb.Cell(r, "counter"); s != f(c.u64(t)) {
					t.Errorf("%s: %s documented as counter %q, String says %q", where, id, s, f(c.u64(t)))
				}
			}
		}
	}
	for typ, cs := range want {
		var names []string
		for _, c := range cs {
			names = append(names, c.name)
		}
		if fmt.Sprint(got[typ]) != fmt.Sprint(names) {
			t.Errorf("the %s table lists %v\nthe code has %v", typ, got[typ], names)
		}
	}
}

// TestCounterAreaLayoutUnchanged pins the byte offsets the IDs give to the
// area as it has been laid out since it was introduced (the stat block,
// then the rings' counters, the engine's, the occupancy, the QP records),
// so traces and C drivers read the same bytes.
func TestCounterAreaLayoutUnchanged(t *testing.T) {
	l := CounterAreaLayout
	rings0 := StatAreaStatsOff + StatBlockSize
	if l.Ring(AreaRingCommand, RingCtrEntries) != rings0 || l.Ring(AreaRingRx, RingCtrPhaseErrs) != rings0+(4*7-1)*8 {
		t.Errorf("ring counters at %#x..%#x", l.Ring(AreaRingCommand, RingCtrEntries), l.Ring(AreaRingRx, RingCtrPhaseErrs))
	}
	eng0 := rings0 + 4*7*8
	if l.Engine(EngRxSegments) != eng0 || l.Engine(EngSACKRecoveries) != eng0+(EngineCounterCount-1)*8 {
		t.Errorf("engine counters at %#x..%#x, want from %#x", l.Engine(EngRxSegments), l.Engine(EngSACKRecoveries), eng0)
	}
	occ0 := eng0 + EngineCounterCount*8
	if l.Occupancy(OccConns) != occ0 || l.Occupancy(OccOOOPagesUsed) != occ0+6*8 {
		t.Errorf("occupancy at %#x, want %#x", l.Occupancy(OccConns), occ0)
	}
	qp0 := occ0 + OccupancyWords*8
	if l.QPOff(0) != qp0 || l.QP(1, QPCtrRxFPDUs) != qp0+QPRecordHeader+QPCounterCount*8+QPRecordHeader ||
		l.QP(0, QPCtrRTRsRecv) != qp0+QPRecordHeader+(QPCounterCount-1)*8 {
		t.Errorf("QP records at %#x, record 1's first counter at %#x", l.QPOff(0), l.QP(1, QPCtrRxFPDUs))
	}
}
