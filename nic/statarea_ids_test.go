package nic

import (
	"reflect"
	"strings"
	"testing"

	"github.com/emunic/emunic/delegation"
	"github.com/emunic/emunic/delegation/iwarp"
	"github.com/emunic/emunic/rings"
)

// TestCounterTablesCoverEveryField holds the device's counter tables to
// the structs they read: every field of delegation.Counters,
// delegation.Occupancy and iwarp.QPStats is published under exactly one
// ID, and that ID's name is the field's (so a row that reads the wrong
// field fails too). Reflection is fine here: it checks the table, it never
// decides the layout.
func TestCounterTablesCoverEveryField(t *testing.T) {
	check := func(name string, s any, words func(reflect.Value) []uint64, idName func(int) string) {
		t.Helper()
		v := reflect.New(reflect.TypeOf(s)).Elem()
		for i := range v.NumField() {
			f := v.Field(i)
			switch f.Kind() {
			case reflect.Uint64:
				f.SetUint(uint64(i + 1))
			case reflect.Int:
				f.SetInt(int64(i + 1))
			default:
				t.Fatalf("%s.%s is a %v: counters are integers", name, v.Type().Field(i).Name, f.Kind())
			}
		}
		w := words(v)
		if len(w) != v.NumField() {
			t.Errorf("%s has %d fields, the table %d IDs", name, v.NumField(), len(w))
		}
		seen := map[uint64]bool{}
		for id, x := range w {
			if x == 0 || int(x) > v.NumField() || seen[x] {
				t.Errorf("%s: ID %d (%s) reads no field, or one another ID reads too (%d)", name, id, idName(id), x)
				continue
			}
			seen[x] = true
			if field := v.Type().Field(int(x) - 1).Name; !sameName(field, idName(id)) {
				t.Errorf("%s: ID %d is %q but reads field %s", name, id, idName(id), field)
			}
		}
	}
	check("delegation.Counters", delegation.Counters{}, func(v reflect.Value) []uint64 {
		c := v.Interface().(delegation.Counters)
		w := engineCounterWords(&c)
		return w[:]
	}, func(id int) string { return rings.EngineCounterID(id).String() })
	check("delegation.Occupancy", delegation.Occupancy{}, func(v reflect.Value) []uint64 {
		c := v.Interface().(delegation.Occupancy)
		w := occupancyWords(&c)
		return w[:]
	}, func(id int) string { return rings.OccupancyID(id).String() })
	check("iwarp.QPStats", iwarp.QPStats{}, func(v reflect.Value) []uint64 {
		c := v.Interface().(iwarp.QPStats)
		w := qpCounterWords(&c)
		return w[:]
	}, func(id int) string { return rings.QPCounterID(id).String() })

	// The ring counters: rings.RingStats.Get covers every ID with a field
	// of its own.
	var rs rings.RingStats
	rv := reflect.ValueOf(&rs).Elem()
	for i := range rv.NumField() {
		rv.Field(i).SetUint(uint64(i + 1))
	}
	for id := range rings.RingCounterID(rings.RingCounterCount) {
		x := rs.Get(id)
		if x == 0 || !sameName(rv.Type().Field(int(x)-1).Name, id.String()) {
			t.Errorf("ring counter %d (%s) reads field %d", id, id, x)
		}
	}
	if rv.NumField() != rings.RingCounterCount {
		t.Errorf("rings.RingStats has %d fields, RingCounterCount is %d", rv.NumField(), rings.RingCounterCount)
	}
}

// sameName tells whether a Go field and a counter's name are the same
// words: RxFPDUs and rx_fpdus, IRDORDAdjusted and ird_ord_adjusted.
func sameName(field, counter string) bool {
	return strings.ToLower(field) == strings.ReplaceAll(counter, "_", "")
}

// TestDefaultConnTable: the host's idea of the device's default delegation
// table (rings.DefaultConnTable, which a host may use without asking) is
// the engine's.
func TestDefaultConnTable(t *testing.T) {
	if delegation.DefaultMaxConns != rings.DefaultConnTable {
		t.Fatalf("delegation.DefaultMaxConns %d, rings.DefaultConnTable %d", delegation.DefaultMaxConns, rings.DefaultConnTable)
	}
}
